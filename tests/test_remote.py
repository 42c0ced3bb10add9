"""Sharing runs: a DVC remote (a local folder, DVC's own "local" remote type) and a git
remote (a bare repository). A clone pulls the outputs of a pushed run and predicts at
once, `make run` with the remote set trains nothing, and an experiment pushed from one
clone is pulled into another and compared there. Nothing is mocked."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO
from tiny_repo import GIT, clone_run, env, run

pytestmark = pytest.mark.slow

TEXTS = ["I love the new update, works great", "the train is late again", "meeting at 3pm"]


@dataclass(frozen=True)
class Origin:
    """A tiny repo, run, committed with its DVC remote and pushed; the bare git
    repository it pushes to; its outputs and predictions when pushed."""

    root: Path
    bare: Path
    outputs: dict[str, bytes]
    predictions: list[dict[str, Any]]


@pytest.fixture(scope="module")
def origin(tmp_path_factory, tiny_run) -> Origin:
    tmp = tmp_path_factory.mktemp("remote")
    root = clone_run(tiny_run, tmp / "origin")
    run(root, "dvc", "remote", "add", "--default", "store", str(tmp / "dvc-store"))
    run(root, "git", "add", "-A")
    run(root, *GIT, "commit", "-q", "-m", "a run, with its DVC remote")
    run(root, "dvc", "push")
    bare = tmp / "origin.git"
    run(tmp, "git", "clone", "-q", "--bare", str(root), str(bare))
    run(root, "git", "remote", "set-url", "origin", str(bare))  # was the tiny run
    return Origin(root, bare, _outputs(root), _predict(root))


def _clone(bare: Path, dest: Path) -> Path:
    run(dest.parent, "git", "clone", "-q", str(bare), str(dest))
    return dest


def _outputs(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for folder in ("data/split", "models/adapter") for p in (root / folder).rglob("*")
            if p.is_file()}


def _predict(root: Path) -> list[dict[str, Any]]:
    out = root / "predictions.jsonl"
    run(root, "lorasent", "predict", "--output", str(out), *TEXTS)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    out.unlink()
    return rows


def test_a_clone_pulls_every_output_and_predicts_without_training(origin, tmp_path):
    clone = _clone(origin.bare, tmp_path / "clone")
    run(clone, "dvc", "pull")
    assert json.loads(run(clone, "dvc", "status", "--json")) == {}
    assert _outputs(clone) == origin.outputs
    assert _predict(clone) == origin.predictions


def test_make_run_with_a_remote_pulls_instead_of_training(origin, tmp_path):
    clone = _clone(origin.bare, tmp_path / "clone")
    out = _make_run(clone)
    assert "lorasent.run_pipeline --pull" in out and "Running stage" not in out, out
    for stage in ("fetch", "split", "train"):  # the stages with DVC-cached outputs
        assert f"Pulling data for stage: '{stage}'" in out, out
    assert "Unable to pull data" not in out and "DVC remote does not hold" not in out, out
    ran, verdict = _run_and_verdict(out)
    assert ran[-1] == UNCHANGED, out  # all pulled: nothing to commit
    # pulled, not made here: nothing was reproduced, and the verdict says so
    assert verdict == [
        "run: not judged as a reproduction of HEAD: HEAD's outputs were not made here (no "
        "machine record of its train or evaluate stage: they were pulled or checked out, or "
        "the stages ran elsewhere): run the pipeline (make run), or `lorasent reproduce` "
        "without --workspace"], out
    assert json.loads(run(clone, "dvc", "status", "--json")) == {}
    assert _outputs(clone) == origin.outputs


def _damaged_store(origin: Origin, tmp_path: Path) -> tuple[Path, str, bytes]:
    """A copy of the origin's DVC remote with one byte of the adapter's weights changed:
    ``(store, the weights' md5 in dvc.lock, their damaged bytes)``."""
    store = tmp_path / "damaged-store"
    shutil.copytree(origin.root.parent / "dvc-store", store)
    # the committed lock: an experiment run in the origin (another test) leaves its own
    # dvc.lock in the workspace, and a clone checks out HEAD's
    lock = yaml.safe_load(run(origin.root, "git", "show", "HEAD:dvc.lock"))
    adapter = next(o for o in lock["stages"]["train"]["outs"] if o["path"] == "models/adapter")
    listing = json.loads((store / "files/md5" / adapter["md5"][:2] / adapter["md5"][2:])
                         .read_text(encoding="utf-8"))
    good = next(e["md5"] for e in listing if e["relpath"] == "adapter_model.safetensors")
    weights = store / "files/md5" / good[:2] / good[2:]
    weights.chmod(0o644)  # DVC leaves pushed objects read-only
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    return store, good, bytes(data)


def test_a_damaged_object_on_the_remote_stops_make_run_in_one_line(origin, tmp_path):
    """One byte of the adapter changed on the remote (a copy of it): a fresh clone's
    `make run` pulled it, said "Data and pipelines are up to date", and `lorasent
    predict` gave other probabilities without a word. Now the run stops naming the file
    and the remote, the damaged copy is removed, `dvc status` says so, and predict
    refuses to run without it."""
    store, good, data = _damaged_store(origin, tmp_path)
    clone = _clone(origin.bare, tmp_path / "clone")
    run(clone, "dvc", "remote", "modify", "--local", "store", "url", str(store))

    done = subprocess.run(["make", "LORASENT_SYSTEM_PYTHON=1", f"PYTHON={sys.executable}",
                           "run"], cwd=clone, env=env(), capture_output=True, text=True)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("run: ")]
    damaged = hashlib.md5(data).hexdigest()
    assert said == [
        f"run: models/adapter/adapter_model.safetensors as pulled from DVC remote 'store' "
        f"({store}) is damaged: its md5 is {damaged}, dvc.lock records {good} (stage "
        "train); removed here so that nothing uses it. Delete "
        f"files/md5/{good[:2]}/{good[2:]} on the remote and in the DVC cache, then `dvc "
        "push` from a clone with a good copy, or rerun the stage here: dvc repro --force "
        "train"], done.stderr
    assert not (clone / "models/adapter/adapter_model.safetensors").exists()
    assert (clone / "models/adapter/adapter_config.json").is_file()  # not damaged: kept
    assert json.loads(run(clone, "dvc", "status", "--json")) != {}
    refused = subprocess.run(["lorasent", "predict", *TEXTS], cwd=clone, env=env(),
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "adapter_model.safetensors" in refused.stderr
    assert "Traceback" not in refused.stderr, refused.stderr


def test_make_run_without_a_remote_runs_the_stages(tmp_path):
    """A project with no DVC remote: plain `dvc repro` (with --pull it would fail)."""
    run(tmp_path, "git", "init", "-q")
    run(tmp_path, "dvc", "init", "-q")
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  hello:\n    cmd: echo hello > out.txt\n    outs: [out.txt]\n")
    out = _make_run(tmp_path, "-f", str(REPO / "Makefile"))
    assert "Running stage 'hello'" in out, out
    assert (tmp_path / "out.txt").read_text() == "hello\n"
    ran, verdict = _run_and_verdict(out)
    assert ran[-1] == COMMIT, out  # dvc.lock is new; no remote, so no push
    # no commit to judge against: said in one line, and make run still succeeds
    assert len(verdict) == 1 and verdict[0].startswith(
        "run: could not be judged against HEAD: unknown revision 'HEAD'"), out


# make run's own lines (lorasent.run_pipeline), spelled out.
NOT_ON_REMOTE = (
    "run: DVC's 'Missing cache files' and 'Unable to pull data' warnings (above, and any for "
    "a later stage) mean that the DVC remote does not hold these outputs yet (a new remote, "
    "or a run nobody pushed): each such stage runs here instead, and `dvc push` after the "
    "run fills the remote")
COMMIT = ("run: to keep this run, commit params.yaml, dvc.lock and metrics/ together (not "
          "dvc.lock alone): git add params.yaml dvc.lock metrics && git commit")
PUSH = "dvc push, so that clones pull its outputs instead of running the stages again"
UNCHANGED = "run: params.yaml, dvc.lock and metrics/ are as committed: nothing to commit"

# Two stages with DVC-cached outputs, and a small output in git that changes every run.
TWO_STAGES = """\
stages:
  hello:
    cmd: echo hello > out.txt
    outs: [out.txt]
  world:
    cmd: (cat out.txt; echo world) > world.txt && mkdir -p metrics && date +%s%N > metrics/run.txt
    deps: [out.txt]
    outs:
      - world.txt
      - metrics/run.txt:
          cache: false
"""


def test_make_run_on_an_empty_remote_says_once_what_dvcs_warnings_mean(tmp_path):
    """A committed run whose outputs are neither in the cache nor on the (new, empty)
    remote: DVC warns for each stage, make run explains once, before the first stage
    runs, and ends naming everything to commit, then dvc push. Once pushed and
    committed, a second make run has nothing to explain or commit."""
    root = tmp_path / "project"
    root.mkdir()
    run(root, "git", "init", "-q")
    run(root, "dvc", "init", "-q")
    (root / "dvc.yaml").write_text(TWO_STAGES)
    run(root, "dvc", "repro")
    run(root, "git", "add", "-A")
    run(root, *GIT, "commit", "-q", "-m", "a run")
    for made in (root / ".dvc" / "cache", root / "out.txt", root / "world.txt"):
        run(root, "rm", "-rf", str(made))  # as on a fresh clone
    run(root, "dvc", "remote", "add", "--default", "store", str(tmp_path / "empty-store"))

    out = _make_run(root, "-f", str(REPO / "Makefile"))
    lines = out.splitlines()
    assert "lorasent.run_pipeline --pull" in lines[0], out
    for stage in ("hello", "world"):
        assert f"Unable to pull data for stage: '{stage}'" in lines, out
    assert ("WARNING: Some of the cache files do not exist neither locally nor on remote. "
            "Missing cache files:") in lines, out
    assert lines.count(NOT_ON_REMOTE) == 1, out  # once, for both stages
    assert (lines.index("Unable to pull data for stage: 'hello'") < lines.index(NOT_ON_REMOTE)
            < lines.index("Running stage 'hello':")), out
    ran, _ = _run_and_verdict(out)
    assert ran[-1] == f"{COMMIT}; then {PUSH}", out  # metrics/run.txt and dvc.lock changed

    run(root, "dvc", "push")
    run(root, "git", "add", "-A")
    run(root, *GIT, "commit", "-q", "-m", "the run, pushed")
    out = _make_run(root, "-f", str(REPO / "Makefile"))
    assert "Unable to pull data" not in out and NOT_ON_REMOTE not in out, out
    ran, _ = _run_and_verdict(out)
    assert ran[-2:] == ["Data and pipelines are up to date.", UNCHANGED], out


def test_the_closing_hint_tells_to_commit_only_what_changed():
    from lorasent.run_pipeline import closing_hint

    assert closing_hint(True, remote=False) == COMMIT
    assert closing_hint(True, remote=True) == f"{COMMIT}; then {PUSH}"
    assert closing_hint(False, remote=False, pull_warnings=True) == UNCHANGED
    assert closing_hint(False, remote=True) == UNCHANGED
    assert closing_hint(False, remote=True, pull_warnings=True) == (
        f"{UNCHANGED}; the remote lacks the outputs made here: {PUSH}")


def _make_run(root: Path, *args: str) -> str:
    return run(root, "make", *args, "LORASENT_SYSTEM_PYTHON=1", f"PYTHON={sys.executable}",
               "run", logs=True)


def _run_and_verdict(out: str) -> tuple[list[str], list[str]]:
    """make run's output in two: the run's lines (lorasent.run_pipeline's), and what the
    reproduction verdict after it printed (`lorasent reproduce --after-run`)."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.endswith("reproduce --after-run"))
    return lines[:at], lines[at + 1:]


def test_an_experiment_travels_through_the_remotes_and_is_compared_there(origin, tmp_path):
    root = origin.root
    run(root, "dvc", "exp", "run", "-n", "lr-up", "-S", "train.learning_rate=0.0004")
    run(root, "dvc", "exp", "push", "origin", "lr-up")

    clone = _clone(origin.bare, tmp_path / "clone")
    run(clone, "dvc", "exp", "pull", "origin", "lr-up")
    assert "lr-up" in run(clone, "dvc", "exp", "list", "--name-only")
    out = run(clone, "lorasent", "compare", "HEAD", "lr-up", "--out", str(tmp_path / "report"))
    assert "accuracy" in out.splitlines()[0] and not out.startswith("**"), out  # plain text
    assert (tmp_path / "report" / "report.md").is_file()
    # the experiment's adapter came with it: applied, it needs no training
    run(clone, "dvc", "exp", "apply", "lr-up")
    run(clone, "dvc", "checkout")
    assert json.loads(run(clone, "dvc", "status", "--json")) == {}
    assert _outputs(clone)["models/adapter/adapter_model.safetensors"] == (
        root / "models/adapter/adapter_model.safetensors").read_bytes()


def test_docker_run_passes_remote_credentials_by_name_only():
    secret = "s3cr3t-value-never-on-a-command-line"
    out = subprocess.run(["make", "-n", "docker-run", "docker-run-cpu"], cwd=REPO,
                         env={**os.environ, "AWS_SECRET_ACCESS_KEY": secret},
                         capture_output=True, text=True, check=True).stdout
    commands = [line for line in out.splitlines() if line.startswith("docker run")]
    assert len(commands) == 2
    for command in commands:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AZURE_STORAGE_KEY"):
            assert f" -e {name} " in command
    assert secret not in out


def test_a_sweep_run_checks_what_the_remote_gave_before_it_trains(origin, tmp_path):
    """A sweep's run pulls in a clone of its own before `dvc exp run`: the same check, and
    the run fails naming the file (lorasent.experiments.task.pulled_and_checked)."""
    from lorasent.experiments.task import pulled_and_checked

    store, good, _ = _damaged_store(origin, tmp_path)
    clone = _clone(origin.bare, tmp_path / "clone")
    run(clone, "dvc", "cache", "dir", "--local", str(tmp_path / "cache"))
    run(clone, "dvc", "remote", "modify", "--local", "store", "url", str(store))
    with (tmp_path / "run.log").open("w") as log:  # a run's log: a file, as Popen needs
        failed = pulled_and_checked(clone, log)
    assert failed is not None and failed.startswith(
        f"models/adapter/adapter_model.safetensors as pulled from DVC remote 'store' ({store}) "
        "is damaged: its md5 is "), failed
    assert f"dvc.lock records {good} (stage train)" in failed
    assert failed in (tmp_path / "run.log").read_text()
    assert not (clone / "models/adapter/adapter_model.safetensors").exists()
    with (tmp_path / "good.log").open("w") as log:
        assert pulled_and_checked(_clone(origin.bare, tmp_path / "good"), log) is None
