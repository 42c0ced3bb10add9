"""`lorasent sweep` and `lorasent learning-curve` on a local Ray cluster, end to end on the
tiny repo. The sweep: the learning curve's 2 × 2 grid (`train.fraction=0.5,1.0`, 2 seeds)
with 1 CPU per run lands four DVC experiments equal to the same runs made one by one (one
of them), compared as two groups over seeds (Welch's t-test); through --git-remote, a
failed run is reported with its log and the other is pulled back; Ctrl-C stops the
running runs and cancels the queued ones; and with a fake list of GPUs, no two runs ever
hold the same one (the variable each run sees). The learning curve, over 3 seeds: it
reuses the sweep's four runs, trains the third seed's two on nested subsets, says 2
fractions have no backtest (the projection untested), and a second invocation reuses
all six (trains nothing)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tiny_repo import clone_run, env, exp_named, run

pytestmark = pytest.mark.slow

# The learning curve's own grid and names (`lorasent learning-curve --fractions 0.5,1
# --name lc` runs this sweep), so that its test below reuses these runs.
GRID = ("-S", "train.fraction=0.5,1.0", "--seeds", "2")
NAMES = ["lc-fraction0.5-seed42", "lc-fraction0.5-seed43", "lc-fraction1.0-seed42",
         "lc-fraction1.0-seed43"]


def _sweep(root: Path, *args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["lorasent", "sweep", *args], cwd=root, env=env(), text=True,
                          capture_output=True, timeout=timeout_s)


def _folder(progress: str) -> Path:
    """The sweep's folder on this machine, from its first progress line."""
    found = re.search(r"logs in (\S+)/logs", progress)
    assert found, progress
    return Path(found.group(1))


def _show(root: Path, name: str, path: str) -> str:
    """``path`` as experiment ``name`` committed it."""
    ref = run(root, "git", "for-each-ref", "--format=%(objectname)", f"refs/exps/*/*/{name}")
    return run(root, "git", "show", f"{ref.strip()}:{path}")


def _adapter_md5(root: Path, rev: str) -> str:
    lock = _yaml(_show(root, rev, "dvc.lock"))
    return next(out["md5"] for out in lock["stages"]["train"]["outs"]
                if out["path"] == "models/adapter")


def _fraction(name: str) -> float:
    return float(name.split("fraction")[1].split("-")[0])


def _yaml(text: str):
    from ruamel.yaml import YAML

    return YAML(typ="safe").load(text)


@pytest.fixture(scope="module")
def swept(tmp_path_factory, tiny_run):
    """A clone of the tiny run after `lorasent sweep` of the 2 × 2 grid, 1 CPU per run (2
    at once on 2 cores; fraction 1.0 at seed 42 is the committed run: nothing to train);
    and the sweep's output."""
    root = clone_run(tiny_run, tmp_path_factory.mktemp("ray-sweep") / "repo")
    done = _sweep(root, *GRID, "--name", "lc", "--cpus-per-run", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    return root, done


def test_a_two_by_two_sweep_lands_four_named_experiments(swept):
    root, done = swept
    shown = json.loads(run(root, "dvc", "exp", "show", "--json"))
    for name in NAMES:
        (exp,) = exp_named(shown, name)
        params = exp["data"]["params"]["params.yaml"]["data"]
        assert params["train"]["fraction"] == _fraction(name)
        assert params["base"]["seed"] == int(name.rsplit("seed", 1)[1])
    # the progress: each run queued, running, succeeded; then the summary
    for name in NAMES:
        states = re.findall(rf"^sweep: {name} (queued|running|succeeded)", done.stderr, re.M)
        assert states == ["queued", "running", "succeeded"], done.stderr
    out = done.stdout.splitlines()
    assert [line.split()[0] for line in out[1:5]] == NAMES
    assert all(line.split()[2] == "CPU" for line in out[1:5])
    # then the choice on validation (lorasent.experiments.selection), a blank line, the groups
    at = next(i for i, line in enumerate(out) if line.startswith("lc-fraction0.5: accuracy "))
    assert at > 5 and out[at - 1] == "" and " (2 seeds); macro-F1 " in out[at]
    assert out[at + 2].startswith("lc-fraction1.0 against lc-fraction0.5: ") and \
        "over seeds" in out[at + 2]
    assert out[-1] == ("Compare two groups: lorasent compare 'lc-fraction0.5-seed*' "
                       "'lc-fraction1.0-seed*'")
    # each run had one CPU: one torch thread, and no GPU variable
    device = json.loads(_show(root, NAMES[0], "metrics/provenance/train.json"))["device"]
    # (which GPU variable a run had is a machine fact: metrics/provenance/machine/, not here)
    assert device["torch_threads"] == 1 and "visible_devices" not in device
    # the clones are gone, the logs stay
    folder = _folder(done.stderr)
    assert not any((folder / "clones").iterdir())
    assert sorted(p.name for p in (folder / "logs").iterdir()) == [f"{n}.log" for n in NAMES]
    shutil.rmtree(folder)


def test_the_groups_compare_over_seeds(swept, tmp_path):
    """`lorasent compare` of the sweep's two groups: mean ± sd and Welch's t-test."""
    from lorasent.review.render import terminal_text
    from lorasent.review.verdict import group_verdict
    from lorasent.statistics import group_comparison

    root, _ = swept
    printed = run(root, "lorasent", "compare", "lc-fraction0.5-seed*", "lc-fraction1.0-seed*",
                  "--out", str(tmp_path / "report"))
    text = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    shown = json.loads(run(root, "dvc", "exp", "show", "--json"))
    accuracy = {name: next(exp_named(shown, name))["data"]["metrics"]["metrics/eval.json"][
        "data"]["accuracy"] for name in NAMES}
    expected = group_comparison("accuracy", [accuracy[n] for n in NAMES[:2]],
                                [accuracy[n] for n in NAMES[2:]])
    # the terminal's plain text of verdict.md's bold line
    assert printed.startswith(terminal_text(f"**{group_verdict(expected)}**") + "\n")
    assert "over seeds" in printed and "(2 seeds)" in printed
    assert ("A is **lc-fraction0.5-seed42, lc-fraction0.5-seed43**, B is "
            "**lc-fraction1.0-seed42, lc-fraction1.0-seed43**") in text
    assert "| B | lc-fraction1.0-seed43 | 43 | 24 |" in text
    assert "| `train.fraction` | 0.5 | 1.0 |" in text  # the params that differ, but the seed
    assert "- ⚠ 2 runs on a side give Welch's t-test little power" in text


def test_the_runs_equal_the_same_runs_made_one_by_one(swept, tiny_run, tmp_path):
    """One of the four runs (one whose value and seed both differ from HEAD's; the sweep
    makes every run the same way) made again by `dvc exp run` with one torch
    thread, in a clone with a DVC cache of its own (DVC's run cache cannot hand back the
    sweep's outputs)."""
    root, _ = swept
    cache = tmp_path / "own-cache"
    shutil.copytree(run(tiny_run, "dvc", "cache", "dir").strip(), cache)
    solo = tmp_path / "solo"
    run(tmp_path, "git", "clone", "-q", str(tiny_run), str(solo))
    run(solo, "dvc", "cache", "dir", "--local", str(cache))
    run(solo, "dvc", "checkout", "-q")
    name = NAMES[1]
    done = subprocess.run(["dvc", "exp", "run", "-n", name, "-S",
                           f"train.fraction={_fraction(name)}", "-S", "base.seed=43"],
                          cwd=solo, text=True, capture_output=True,
                          env={**env(), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is cached" not in done.stdout  # trained here, not restored
    assert _adapter_md5(solo, name) == _adapter_md5(root, name)
    assert _show(solo, name, "metrics/eval.json") == _show(root, name, "metrics/eval.json")


def test_a_failed_run_is_reported_with_its_log_and_the_other_comes_back_from_the_remote(
        tiny_copy, tmp_path):
    """Through --git-remote, as on a cluster of several machines (the runs clone the
    remote and push there; the sweep pulls each experiment back with `dvc exp pull`): a
    run with a missing base model fails with its log, and the other lands."""
    bare = tmp_path / "remote.git"
    run(tmp_path, "git", "init", "-q", "--bare", str(bare))
    run(tiny_copy, "git", "remote", "add", "shared", str(bare))
    model = _yaml((tiny_copy / "params.yaml").read_text())["base"]["model"]
    args = ("-S", f"base.model={model},/nonexistent/model", "--seeds", "1", "--name", "far",
            "--git-remote", "shared", "--cpus-per-run", "1")
    refused = _sweep(tiny_copy, *args)
    assert refused.returncode == 1 and refused.stderr.strip().endswith(
        f"is not on shared ({bare}), and the runs clone it from there: git push shared HEAD")
    run(tiny_copy, "git", "push", "-q", "shared", "HEAD:refs/heads/main")
    done = _sweep(tiny_copy, *args)
    assert done.returncode == 1
    # one line of error, after the summary
    assert done.stderr.splitlines()[-1] == ("lorasent sweep: error: 1 of 2 runs failed: "
                                            "far-model_nonexistent_model-seed42; the same "
                                            "command again makes only the runs that did not "
                                            "land")
    failed = re.search(r"^sweep: far-model_nonexistent_model-seed42 failed \(dvc exp run "
                       r"exited with \d+\): log (\S+) \(", done.stderr, re.M)
    assert failed, done.stderr
    log = Path(failed.group(1)).read_text(encoding="utf-8")
    assert "exp run --temp -n far-model_nonexistent_model-seed42 " in log
    assert "lorasent fetch: error: base.model: '/nonexistent/model' is neither" in log
    assert f"log {failed.group(1)}" in done.stdout
    (good,) = run(tiny_copy, "dvc", "exp", "list", "--name-only").split()
    assert good.startswith("far-model") and good in run(bare, "git", "for-each-ref",
                                                        "refs/exps")
    assert _show(tiny_copy, good, "metrics/eval.json") == \
        (tiny_copy / "metrics/eval.json").read_text(encoding="utf-8")  # nothing changed
    shutil.rmtree(_folder(done.stderr))


def _sweep_processes(marker: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if marker in cmdline:
            found.append(cmdline)
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_stops_the_running_runs_and_cancels_the_queued_ones(tiny_copy, sig):
    """Ctrl-C at a terminal: SIGINT to the command's process group; `kill` (SIGTERM to the
    command alone, which ray.init would have made a sys.exit: Ray's crash dump, no
    summary, the clones left) does the same."""
    proc = subprocess.Popen(["lorasent", "sweep", "-S", "train.lora.r=2,16", "--seeds", "2",
                             "--name", "stopped", "--cpus-per-run", "1"], cwd=tiny_copy,
                            env=env(), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            # pytest-xdist's workers ignore SIGINT, and a child inherits that
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    lines, deadline = [], time.monotonic() + 300
    for line in proc.stderr:
        lines.append(line)
        if sum(" running on " in seen for seen in lines) == 2:
            break
        assert time.monotonic() < deadline, "".join(lines)
    while len(_sweep_processes("exp run --temp -n stopped-")) < 2:  # both in `dvc exp run`
        assert time.monotonic() < deadline, "".join(lines)
        time.sleep(0.5)
    time.sleep(2)  # and in its stages
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    last = err.splitlines()[-1]
    assert last.startswith("lorasent sweep: error: interrupted: 2 running runs stopped "
                           "(stopped-r2-seed"), err
    assert "2 queued ones cancelled, 0 landed (none)" in last
    assert _sweep_processes("exp run --temp -n stopped-") == []
    assert run(tiny_copy, "dvc", "exp", "list", "--name-only").split() == []
    folder = _folder("".join(lines))
    assert not any((folder / "clones").iterdir())
    shutil.rmtree(folder)


def _record(spec, source, events=None):
    """A run that only records the GPU variable Ray set and when it held it."""
    from lorasent.experiments.task import RunResult
    from lorasent.programs import visible_devices

    started = time.time()
    time.sleep(1)
    return RunResult(spec.name, "failed", "local", visible_devices(), "", started, time.time(),
                     "recorded only")


@pytest.mark.parametrize("gpus", [1, 2])
def test_two_runs_never_hold_the_same_gpu(tiny_run, gpus):
    """A fake list of ``gpus`` GPUs on this CPU machine (Ray's ``num_gpus``), 1 CPU per
    run on 2 CPUs, 4 runs: each run sees one GPU in CUDA_VISIBLE_DEVICES, and two runs
    that overlap in time see different ones (with 1 GPU, none overlap)."""
    from ray import cloudpickle

    from lorasent.experiments.sweep import sweep

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers lack tests/
    result = sweep(name="gpus", sets=["train.lora.r=2,4"], seeds=2, repo=tiny_run,
                   num_gpus=gpus, cpus_per_run=1, runner=_record)
    held = [(run.result.devices, run.result.started, run.result.ended) for run in result.runs]
    assert [set(devices) for devices, _, _ in held] == [{"CUDA_VISIBLE_DEVICES"}] * 4
    assert {devices["CUDA_VISIBLE_DEVICES"] for devices, _, _ in held} == \
        {str(i) for i in range(gpus)}
    for i, (a, start_a, end_a) in enumerate(held):
        for b, start_b, end_b in held[i + 1:]:
            if start_a < end_b and start_b < end_a:
                assert a != b
    overlapping = any(s1 < e2 and s2 < e1 for i, (_, s1, e1) in enumerate(held)
                      for _, s2, e2 in held[i + 1:])
    assert overlapping == (gpus == 2)


# ---------------------------------------------------------------------- learning curve

LC_ARGS = ("--fractions", "0.5,1", "--seeds", "3", "--name", "lc", "--cpus-per-run", "1")
LC_NAMES = [f"lc-fraction{f}-seed{s}" for f in ("0.5", "1.0") for s in (42, 43, 44)]


def _curve(root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["lorasent", "learning-curve", *LC_ARGS, "--out", str(out)],
                          cwd=root, env=env(), text=True, capture_output=True, timeout=900)


@pytest.fixture(scope="module")
def curved(swept):
    """`lorasent learning-curve` over 3 seeds in the sweep's clone, after the sweep's tests
    (which count its groups' 2 seeds): the sweep's four runs are the curve's first two
    seeds."""
    root, _ = swept
    out = root.parent / "lc-out"
    done = _curve(root, out)
    assert done.returncode == 0, done.stdout + done.stderr
    return root, out, done, (out / "learning_curve.json").read_text(encoding="utf-8")


def test_the_learning_curve_reuses_the_sweeps_runs_and_trains_the_rest_on_nested_subsets(
        curved):
    root, out, done, _ = curved
    assert "learning-curve: 2 fractions × 3 seeds = 6 runs; 4 landed before and are " \
           "reused, 2 to run; about " in done.stderr
    # only the third seed's runs went through the sweep
    assert sorted(re.findall(r"^sweep: (\S+) queued", done.stderr, re.M)) == \
        [LC_NAMES[2], LC_NAMES[5]], done.stderr
    shown = json.loads(run(root, "dvc", "exp", "show", "--json"))
    for name in LC_NAMES:
        (exp,) = exp_named(shown, name)
        assert exp["data"]["params"]["params.yaml"]["data"]["train"]["fraction"] == \
            _fraction(name)
    record = json.loads((out / "learning_curve.json").read_text(encoding="utf-8"))
    counts = json.loads(run(root, "git", "show", "HEAD:metrics/data.json"))["class_counts"]
    half = sum(-(-n // 2) for n in counts["train"].values())  # ceil of each class's half
    assert [f["train_rows"] for f in record["fractions"]] == [half, sum(counts["train"].values())]
    assert [[r["experiment"] for r in f["runs"]] for f in record["fractions"]] == \
        [LC_NAMES[:3], LC_NAMES[3:]]
    assert record["backtest"] is None and record["failed"] == []
    # the tiny runs' accuracy may fall with more rows: then no projection at all
    assert record["trend"]["falls"] or record["sentence"].endswith(
        "no backtest: 2 fractions with runs, and a backtest needs 3 (a fit on the smaller "
        "ones, checked on the largest); the projection is untested")
    assert (out / "learning-curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert done.stdout.splitlines()[-2] == f"learning-curve: {record['sentence']}"


def test_a_second_learning_curve_reuses_every_run_and_trains_nothing(curved):
    root, out, done, first = curved
    before = run(root, "git", "for-each-ref", "refs/exps")
    again = _curve(root, out)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "6 landed before and are reused, 0 to run; nothing to train" in again.stderr
    assert " on Ray " not in again.stderr  # no cluster started
    assert run(root, "git", "for-each-ref", "refs/exps") == before
    assert (out / "learning_curve.json").read_text(encoding="utf-8") == first
    shutil.rmtree(_folder(done.stderr))  # the sweep's logs, kept for a failed run
