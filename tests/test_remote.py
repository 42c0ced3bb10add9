"""Sharing runs: a DVC remote (a local folder, DVC's own "local" remote type) and a git
remote (a bare repository). A clone pulls the outputs of a pushed run and predicts at
once, `make run` with the remote set trains nothing, and an experiment pushed from one
clone is pulled into another and compared there. Nothing is mocked."""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from tiny_repo import GIT, make_tiny_repo, run

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
def origin(tmp_path_factory, packaged_model_dir) -> Origin:
    tmp = tmp_path_factory.mktemp("remote")
    root = make_tiny_repo(tmp / "origin")
    run(root, "dvc", "remote", "add", "--default", "store", str(tmp / "dvc-store"))
    run(root, "git", "add", "-A")
    run(root, *GIT, "commit", "-q", "-m", "a run, with its DVC remote")
    run(root, "dvc", "push")
    bare = tmp / "origin.git"
    run(tmp, "git", "clone", "-q", "--bare", str(root), str(bare))
    run(root, "git", "remote", "add", "origin", str(bare))
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
    assert "dvc repro --pull" in out and "Running stage" not in out, out
    for stage in ("fetch", "split", "train"):  # the stages with DVC-cached outputs
        assert f"Pulling data for stage: '{stage}'" in out, out
    assert json.loads(run(clone, "dvc", "status", "--json")) == {}
    assert _outputs(clone) == origin.outputs


def test_make_run_without_a_remote_runs_the_stages(tmp_path):
    """A project with no DVC remote: plain `dvc repro` (with --pull it would fail)."""
    run(tmp_path, "git", "init", "-q")
    run(tmp_path, "dvc", "init", "-q")
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  hello:\n    cmd: echo hello > out.txt\n    outs: [out.txt]\n")
    out = _make_run(tmp_path, "-f", str(REPO / "Makefile"))
    assert "Running stage 'hello'" in out, out
    assert (tmp_path / "out.txt").read_text() == "hello\n"


def _make_run(root: Path, *args: str) -> str:
    return run(root, "make", *args, "LORASENT_SYSTEM_PYTHON=1", f"PYTHON={sys.executable}",
               "run", logs=True)


def test_an_experiment_travels_through_the_remotes_and_is_compared_there(origin, tmp_path):
    root = origin.root
    run(root, "dvc", "exp", "run", "-n", "lr-up", "-S", "train.learning_rate=0.0004")
    run(root, "dvc", "exp", "push", "origin", "lr-up")

    clone = _clone(origin.bare, tmp_path / "clone")
    run(clone, "dvc", "exp", "pull", "origin", "lr-up")
    assert "lr-up" in run(clone, "dvc", "exp", "list", "--name-only")
    out = run(clone, "lorasent", "compare", "HEAD", "lr-up", "--out", str(tmp_path / "report"))
    assert out.startswith("**") and "accuracy" in out.splitlines()[0], out
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
