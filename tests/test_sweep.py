"""`lorasent sweep`'s grid, params checks and summary, without Ray (the fast tier); Ray
runs them in tests/test_sweep_ray.py."""

import json
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from conftest import REPO, committed
from lorasent.cli import main
from lorasent.contracts import EvalMetrics, parse
from lorasent.errors import LorasentError
from lorasent.experiments.grid import RunSpec, check_params, plan
from lorasent.experiments.selection import CHOSEN, NOTHING_TO_CHOOSE_ON
from lorasent.experiments.sweep import SweepResult, SweepRun
from lorasent.experiments.task import RunResult, device_text
from lorasent.review.verdict import Side

PARAMS = (REPO / "params.yaml").read_text(encoding="utf-8")


def test_the_grid_is_every_value_of_every_axis_times_the_seeds_in_the_order_given():
    runs = plan("g", ["train.lora.r=8,4", "train.learning_rate=1e-4,2e-4",
                      "train.max_steps=5"], seeds=2, base_seed=42)
    assert [run.name for run in runs] == [
        "g-r8-learning_rate0.0001-seed42", "g-r8-learning_rate0.0001-seed43",
        "g-r8-learning_rate0.0002-seed42", "g-r8-learning_rate0.0002-seed43",
        "g-r4-learning_rate0.0001-seed42", "g-r4-learning_rate0.0001-seed43",
        "g-r4-learning_rate0.0002-seed42", "g-r4-learning_rate0.0002-seed43"]
    # every run gets each key once, the unswept one too, and its seed last
    assert runs[3].sets == ("train.lora.r=8", "train.learning_rate=0.0002",
                            "train.max_steps=5", "base.seed=43")
    assert runs[3].group == "g-r8-learning_rate0.0002" and runs[3].seed == 43


def test_the_grid_reads_hydras_grammar_as_dvc_exp_run_does():
    assert [r.name for r in plan("g", ["train.lora.r=range(2,5,2)"], 1, 7)] == \
        ["g-r2-seed7", "g-r4-seed7"]
    assert [r.name for r in plan("g", ["train.lora.r=choice(16,32)"], 1, 7)] == \
        ["g-r16-seed7", "g-r32-seed7"]
    # a quoted comma is one value, and a setting with one value makes no axis
    quoted = plan("g", ['prompt.template="Text: {text}, label:"'], 2, 0)
    assert [r.name for r in quoted] == ["g-seed0", "g-seed1"]
    assert quoted[0].sets == ('prompt.template="Text: {text}, label:"', "base.seed=0")
    # params.yaml: as a prefix is DVC's own spelling of the same key
    assert plan("g", ["params.yaml:train.lora.r=4,8"], 1, 0)[1].sets == \
        ("train.lora.r=8", "base.seed=0")


def test_a_value_becomes_a_git_safe_name():
    runs = plan("g", ["base.model=google/gemma-3-1b-it,/models/x..y"], 1, 0)
    assert [r.group for r in runs] == ["g-modelgoogle_gemma-3-1b-it", "g-model_models_x.y"]


@pytest.mark.parametrize(("sets", "seeds", "message"), [
    (["base.seed=1,2"], 2, "-S base.seed is what the runs vary"),
    (["other.yaml:train.lora.r=4,8"], 2, "only params.yaml keys can be swept"),
    (["+train.new_key=1"], 2, "only changes of keys params.yaml has"),
    (["~train.lora.r"], 2, "only changes of keys params.yaml has"),
    (["train.lora.r=glob(*)"], 2, "a glob sweep has no values"),
    (["train.lora.r=[1,"], 2, "sweep: -S: "),
    (["train.lora.r=4"], 0, "--seeds 0: at least 1"),
    (["base.model=a/b,a_b"], 1, "both make the group name g-modela_b"),
])
def test_bad_settings_are_refused_before_anything_runs(sets, seeds, message):
    with pytest.raises(LorasentError) as err:
        plan("g", sets, seeds, 0)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_each_runs_params_are_checked_before_anything_runs():
    check_params(PARAMS, plan("g", ["train.lora.r=4,8"], 2, 42))
    with pytest.raises(LorasentError) as err:
        check_params(PARAMS, plan("g", ["train.lora.r=4,0"], 1, 42))
    assert "run g-r0-seed42" in str(err.value) and "train.lora.r" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(LorasentError, match="base.num_processes 2; a sweep gives each run "
                                            "one GPU"):
        check_params(PARAMS, plan("g", ["base.num_processes=2"], 1, 42))


def _evals(accuracy: float, macro_f1: float) -> EvalMetrics:
    found = parse(EvalMetrics, json.loads(committed("metrics/eval.json")),
                  "metrics/eval.json", "")
    # one warning of evaluate's wording, whatever the committed run warns of (none since
    # issue 59's default beats its references)
    warnings = ["never predicted: `neutral` (19 of 48 test rows are neutral)"]
    return found.model_copy(update={"accuracy": accuracy, "macro_f1": macro_f1,
                                    "warnings": warnings})


def _run(name: str, seed: int, accuracy: float | None, devices: dict[str, str]) -> SweepRun:
    group = name.rsplit("-seed", 1)[0]
    spec = RunSpec(name, group, seed, (f"base.seed={seed}",))
    ok = accuracy is not None
    result = RunResult(name, "succeeded" if ok else "failed", "10.0.0.2", devices,
                       f"/tmp/lorasent-sweep/x/logs/{name}.log", 0.0, 60.0,
                       "" if ok else "dvc exp run exited with 1", here=ok)
    if accuracy is None:
        return SweepRun(spec, result, None)
    evals = _evals(accuracy, accuracy - 0.05)
    return SweepRun(spec, result, Side(name, evals, None, None, None, None))


def test_the_summary_gives_each_run_each_groups_spread_and_verdict_and_each_failure():
    result = SweepResult([
        _run("s-r4-seed1", 1, 0.70, {"CUDA_VISIBLE_DEVICES": "0"}),
        _run("s-r4-seed2", 2, 0.72, {"CUDA_VISIBLE_DEVICES": "1"}),
        _run("s-r8-seed1", 1, 0.80, {"CUDA_VISIBLE_DEVICES": "0"}),
        _run("s-r8-seed2", 2, 0.82, {"CUDA_VISIBLE_DEVICES": "1"}),
        _run("s-r16-seed1", 1, 0.75, {}),
        _run("s-r16-seed2", 2, None, {}),
    ])
    lines = result.summary().splitlines()
    assert lines[0].split() == ["experiment", "base.seed", "device", "validation",
                                "accuracy", "[95%", "interval]", "test", "accuracy", "[95%",
                                "interval]", "test", "macro-F1", "[95%", "interval]"]
    assert lines[1].split()[:4] == ["s-r4-seed1", "1", "GPU", "0"]
    # runs made before train wrote metrics/validation.json: no validation accuracy, no choice
    assert lines[1].split()[4:6] == ["—", "0.7000"]
    assert lines[7] == NOTHING_TO_CHOOSE_ON and CHOSEN not in result.summary()
    # a run on another machine: its log is named with the machine's address
    assert lines[6].split()[:3] == ["s-r16-seed2", "2", "CPU"]
    assert lines[6].endswith("failed (dvc exp run exited with 1): log "
                             "10.0.0.2:/tmp/lorasent-sweep/x/logs/s-r16-seed2.log")
    assert "s-r4: accuracy 0.7100 ± 0.0141 (2 seeds); macro-F1 0.6600 ± 0.0141 (2 seeds)" \
        in lines
    assert "s-r16: 1 run with metrics: no spread over seeds" in lines
    assert any(line.startswith("s-r8 against s-r4: B is better than A over seeds: accuracy "
                               "0.7100 ± 0.0141 (2 seeds) in A against 0.8100 ± 0.0141")
               for line in lines)
    assert "s-r16 against s-r4: no verdict, a group has fewer than 2 runs with metrics " \
           "(--seeds 2 or more)" in lines
    # each run's warnings, as compare gives them
    warning = _evals(0.7, 0.65).warnings[0]
    assert f"WARNING s-r4-seed1: {warning}" in lines and f"WARNING s-r16-seed1: {warning}" in lines
    assert lines[-1] == "Compare two groups: lorasent compare 's-r4-seed*' 's-r8-seed*'"
    assert [run.spec.name for run in result.failed] == ["s-r16-seed2"]


def test_the_device_column_names_the_gpu_ray_gave():
    def result(devices):
        return RunResult("x", "succeeded", "n", devices, "", 0, 0)

    assert device_text(result({"HIP_VISIBLE_DEVICES": "3"})) == "GPU 3"
    assert device_text(result({})) == "CPU"


def test_sweep_is_a_command_and_a_make_target():
    out = CliRunner().invoke(main, ["sweep", "--help"]).output
    for option in ("-S, --set-param", "--seeds", "--name", "--address", "--cpus-per-run",
                   "--num-gpus", "--git-remote", "--cache-dir"):
        assert option in out
    dry = subprocess.run(["make", "-n", "sweep", "SET=train.lora.r=4,8", "SEEDS=2",
                          "NAME=lr", "CPUS_PER_RUN=1", "ADDRESS=auto"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    command = dry.replace("\\\n", " ").splitlines()[-1]
    assert command.split() == [".venv/bin/lorasent", "sweep", "--seeds", "2", "--name", "lr",
                               "-S", "train.lora.r=4,8", "--address", "auto",
                               "--cpus-per-run", "1"]


def test_a_sweep_of_a_changed_checkout_is_refused_before_ray_starts(tmp_path):
    """Each run clones HEAD: changes that are not committed would be left out."""
    from lorasent.experiments.sweep import sweep

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    (tmp_path / "README.md").write_text("x\n")
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], [*git, "commit", "-qm", "x"]):
        subprocess.run(argv, cwd=tmp_path, check=True)
    (tmp_path / "README.md").write_text("y\n")
    with pytest.raises(LorasentError) as err:
        sweep(name="s", sets=["train.lora.r=4,8"], repo=tmp_path)
    assert str(err.value) == ("sweep: each run clones commit HEAD, and README.md differs from "
                              "it: commit it (or `git stash`)")
    (tmp_path / "params.yaml").write_text(PARAMS.replace("r: 8", "r: 16"))
    with pytest.raises(LorasentError) as err:
        sweep(name="s", sets=["train.lora.r=4,8"], repo=tmp_path)
    assert str(err.value).endswith("and README.md, params.yaml differ from it: commit them "
                                   "(or `git stash`), or give the params changes as -S")


def test_a_learning_curve_of_edited_params_says_what_that_command_can_do(tmp_path):
    """learning-curve has no -S: it was told to "give the params changes as -S"."""
    from lorasent.experiments.learning_curve import learning_curve

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], [*git, "commit", "-qm", "x"]):
        subprocess.run(argv, cwd=tmp_path, check=True)
    (tmp_path / "params.yaml").write_text(PARAMS.replace("r: 8", "r: 16"))
    with pytest.raises(LorasentError) as err:
        learning_curve(name="lc", repo=tmp_path, out=tmp_path / "out", progress=_never,
                       runner=_never)
    assert str(err.value) == (
        "learning-curve: each run clones commit HEAD, and params.yaml differs from it: commit "
        "it for a curve of the edited params, or `git stash` it for HEAD's (learning-curve "
        "trains HEAD's params as committed; it takes no -S)")
    assert not (tmp_path / "out").exists()


# An --address where nothing, or something other than Ray, answers: tests/test_addresses.py.

def test_an_address_without_a_port_is_tried_at_rays_default_port_for_its_scheme(monkeypatch):
    import socket

    from lorasent.experiments import cluster

    tried: list[tuple[str, int]] = []

    def connect(address: tuple[str, int], timeout: float) -> socket.socket:
        tried.append(address)
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", connect)
    for address in ("head", "ray://head", "ray://head:4321"):
        with pytest.raises(LorasentError):
            cluster._reachable(address)
    assert tried == [("head", 6379), ("head", 10001), ("head", 4321)]


@pytest.mark.parametrize(("sets", "message"), [
    (["train.lora.r=4", "train.lora.r=8"],
     "sweep: -S train.lora.r is given 2 times (4, 8): give it once, its values as one grid "
     "axis: -S train.lora.r=4,8"),
    (["params.yaml:train.lora.r=4,8", "train.lora.r=16", "train.max_steps=5"],
     "sweep: -S train.lora.r is given 2 times (4, 8, 16): give it once, its values as one "
     "grid axis: -S train.lora.r=4,8,16"),
    (['prompt.template="a, b"', "prompt.template=c"],
     "sweep: -S prompt.template is given 2 times (\"a, b\", c): give it once, its values as "
     "one grid axis: -S prompt.template=a,b"),
])
def test_a_key_given_twice_is_refused_naming_it_not_half_dropped(sets, message):
    """`-S train.lora.r=4 -S train.lora.r=8` ran r=8 alone: DVC applies the settings in
    turn, the second replacing the first."""
    with pytest.raises(LorasentError) as err:
        plan("g", sets, 1, 0)
    assert str(err.value) == message


def test_a_key_given_twice_is_refused_by_the_command_before_ray_starts(monkeypatch):
    from lorasent.experiments import sweep

    monkeypatch.setattr(sweep, "sweep_runs", _never)
    done = CliRunner().invoke(main, ["sweep", "-S", "train.lora.r=4", "-S", "train.lora.r=8"],
                              prog_name="lorasent")
    assert done.exit_code == 1 and done.output == (
        "lorasent sweep: error: -S train.lora.r is given 2 times (4, 8): give it once, its "
        "values as one grid axis: -S train.lora.r=4,8\n")


def _never(*args, **kwargs):
    raise AssertionError("a run started")


BAD_NAME = ("--name 'bad name..x' makes experiment names such as 'bad name..x-seed0' that "
            "DVC refuses (git's ref-name rules: no spaces, control characters, '..', '~', "
            "'^', ':', '?', '*', '[', '\\', '@{' or '/', no '.' or '-' at the start, no '.' "
            "or '.lock' at the end); use letters, digits, '-', '_' and '.'")


@pytest.mark.parametrize("name", ["bad name..x", "a/b", "-x", "x:y", "q?", "a@{b", ".x",
                                  "", "x\ty"])
def test_a_name_dvc_would_refuse_is_refused_by_the_plan(name):
    """Each run cloned and failed with "dvc exp run exited with 255", the reason only in
    its log."""
    with pytest.raises(LorasentError) as err:
        plan(name, ["train.lora.r=4,8"], 1, 0)
    assert str(err.value).startswith(f"sweep: --name {name!r} makes experiment names such "
                                     f"as {name + '-seed0'!r} that DVC refuses (")
    for fine in ("x.lock", "café", "lr-1e-4_a.b", "@"):  # names DVC takes
        plan(fine, ["train.lora.r=4,8"], 1, 0)


@pytest.mark.parametrize("command", [
    ["sweep", "-S", "train.lora.r=4,8"], ["learning-curve"], ["seeds"]])
def test_every_command_of_experiments_refuses_a_bad_name_before_any_run(command, monkeypatch,
                                                                        tmp_path):
    from lorasent.experiments import seeds, sweep

    monkeypatch.setattr(sweep, "sweep_runs", _never)
    monkeypatch.setattr(seeds, "run_dvc", _never)
    out = ["--out", str(tmp_path / "lc")] if command[0] == "learning-curve" else []
    done = CliRunner().invoke(main, [*command, "--name", "bad name..x", *out],
                              prog_name="lorasent")
    assert done.exit_code == 1 and done.output == (
        f"lorasent {command[0]}: error: {BAD_NAME}\n")
    assert not (tmp_path / "lc").exists()


def test_seeds_checks_its_settings_as_sweep_does_before_anything_is_queued(monkeypatch):
    from lorasent.experiments import seeds

    monkeypatch.setattr(seeds, "run_dvc", _never)
    for sets, message in (
            (["train.lora.r=4", "train.lora.r=8"],
             "seeds: -S train.lora.r is given 2 times (4, 8): every run takes one value of a "
             "key; give it once"),
            (["train.lora.r=4,8"], "seeds: -S train.lora.r=4,8: every run takes one value of "
             "a key; `lorasent sweep -S train.lora.r=4,8` runs each value over seeds"),
            (["base.seed=1"], "seeds: -S base.seed is what the runs vary; set the first seed "
             "in params.yaml instead")):
        with pytest.raises(LorasentError) as err:
            seeds.run_seeds(n=2, name="s", sets=sets, base_seed=42, repo=REPO)
        assert str(err.value) == message
    with pytest.raises(LorasentError) as err:
        seeds.run_seeds(n=2, name="s", sets=["train.lora.r=0"], base_seed=42, repo=REPO)
    assert str(err.value) == ("seeds: params.yaml of run s-seed42: invalid params; "
                              "train.lora.r: input should be greater than 0 (got 0)")


@pytest.mark.parametrize(("options", "message"), [
    (["--address", "head:6379", "--num-gpus", "2"],
     "--num-gpus declares the GPUs of a local cluster; a cluster at --address has its own "
     "(ray start --num-gpus)"),
    (["--cache-dir", "shared/cache"],
     "--cache-dir shared/cache: give an absolute path (a folder every machine of the cluster "
     "sees there); a relative one would be taken from each run's clone"),
])
def test_cluster_options_are_checked_before_the_plan_is_said(options, message, monkeypatch):
    from lorasent.experiments import sweep

    monkeypatch.setattr(sweep, "sweep_runs", _never)
    for command in (["sweep", "-S", "train.lora.r=4,8"], ["learning-curve"]):
        done = CliRunner().invoke(main, [*command, *options], prog_name="lorasent")
        assert done.exit_code == 1 and done.output == (
            f"lorasent {command[0]}: error: {message}\n"), done.output


def test_grid_values_equal_once_parsed_are_one_point_and_the_line_says_so():
    """`-S train.lora.r=8,08` trained r = 8 twice, as sweep-r8 and sweep-r08."""
    from lorasent.experiments.grid import one_value_each

    sets, notes = one_value_each(PARAMS, ["params.yaml:train.lora.r=8,08,16,8.0",
                                          "train.learning_rate=1e-4,0.0001",
                                          "train.max_steps=5"])
    assert sets == ["train.lora.r=8,16", "train.learning_rate=choice(0.0001)",
                    "train.max_steps=5"]
    assert notes == [
        "sweep: -S params.yaml:train.lora.r=8,08,16,8.0: 08 and 8.0 equal 8 once parsed; "
        "equal values are one grid point, so the axis is train.lora.r=8,16",
        "sweep: -S train.learning_rate=1e-4,0.0001: 0.0001 is given 2 times; equal values "
        "are one grid point, so the axis is train.learning_rate=0.0001"]
    assert [r.name for r in plan("sweep", sets, 1, 42)] == [
        "sweep-r8-learning_rate0.0001-seed42", "sweep-r16-learning_rate0.0001-seed42"]
    assert one_value_each(PARAMS, ["train.lora.r=4,8"]) == (["train.lora.r=4,8"], [])


@pytest.mark.parametrize("command", ["sweep", "learning-curve"])
def test_a_git_failure_is_prefixed_with_the_command_that_runs(command, tmp_path,
                                                               monkeypatch):
    """Issue 70, kind 6: the learning curve's git failures outside a repo (and its repo
    checks') began "sweep:"."""
    from lorasent.experiments.repo_checks import _on_git_remote, check_repo

    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.chdir(outside)
    done = CliRunner().invoke(main, [command], prog_name="lorasent")
    assert done.exit_code == 1 and done.output.startswith(
        f"lorasent {command}: error: `git show HEAD:params.yaml` failed in {outside}: fatal: "
        "not a git repository"), done.output
    assert done.output.count("sweep:") == (command == "sweep")
    with pytest.raises(LorasentError) as err:
        check_repo(outside, [], None, command)
    assert str(err.value).startswith(f"{command}: `git rev-parse HEAD` failed in {outside}")
    subprocess.run(["git", "init", "-q"], cwd=outside, check=True)
    with pytest.raises(LorasentError) as err:
        _on_git_remote(outside, "nosuch", "c" * 40, command)
    assert str(err.value).startswith(f"{command}: `git remote get-url nosuch` failed in ")


def test_grid_values_equal_only_with_the_other_settings_are_one_point_too():
    """Issue 70, kind 6: values valid only with another -S (`split.validation_size` 0 needs
    `train.eval_strategy=no`) were compared as written: 0, 0.0 and 00 made three groups.
    Each spelling of each number, crossed with another axis."""
    from lorasent.experiments.grid import one_value_each

    epoch = PARAMS.replace("  eval_strategy: no ", "  eval_strategy: epoch ")
    assert epoch != PARAMS
    for spellings in (["0", "0.0", "00"], ["0", "0e0", "+0", "-0", "0.00"]):
        for other in (["train.eval_strategy=no"], ["train.eval_strategy=no",
                                                    "train.lora.r=4,8"]):
            axis = f"split.validation_size={','.join(spellings)}"
            sets, notes = one_value_each(epoch, [axis, *other])
            assert sets == ["split.validation_size=choice(0)", *other]
            assert len(notes) == 1 and notes[0].endswith(
                "equal values are one grid point, so the axis is split.validation_size=0")
            runs = plan("g", sets, 1, 42)
            check_params(epoch, runs)
            assert sorted({r.group for r in runs}) == (
                ["g-validation_size0"] if len(other) == 1
                else ["g-validation_size0-r4", "g-validation_size0-r8"])
    # values refused with every other setting are compared as written; the grid is
    # then refused as a whole
    sets, notes = one_value_each(epoch, ["split.validation_size=0,0.0"])
    assert (sets, notes) == (["split.validation_size=0,0.0"], [])
    with pytest.raises(LorasentError):
        check_params(epoch, plan("g", sets, 1, 42))


def test_the_sweep_command_trains_equal_values_once(monkeypatch, tmp_path):
    from lorasent.experiments import sweep

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], [*git, "commit", "-qm", "x"]):
        subprocess.run(argv, cwd=tmp_path, check=True)
    started: list[str] = []
    monkeypatch.setattr(sweep, "check_repo", lambda repo, runs, remote, command, timeout_s:
                        ("c" * 40, str(repo), {}))
    def runs(todo, **kwargs):
        started.extend(r.name for r in todo)
        return {r.name: RunResult(r.name, "failed", "", {}, "", 0, 0) for r in todo}

    monkeypatch.setattr(sweep, "sweep_runs", runs)
    monkeypatch.setattr(sweep, "resolve_commits", lambda repo, *names: {})
    lines: list[str] = []
    sweep.sweep(name="s", sets=["train.lora.r=8,08"], seeds=1, repo=tmp_path,
                progress=lines.append)
    assert started == ["s-r8-seed42"]
    assert lines[0] == ("sweep: -S train.lora.r=8,08: 08 equals 8 once parsed; equal values "
                        "are one grid point, so the axis is train.lora.r=8")
