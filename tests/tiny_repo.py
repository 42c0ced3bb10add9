"""A copy of this repo with tiny sizes, for the end-to-end tests (`dvc repro`, `dvc exp`).

The real packaged corpus, the tiny random Gemma 3 of tests/tiny_gemma.py as base model
(``base.model`` a local folder: each stage's time is then Python's imports, not the
model; the packaged Gemma runs the five stages in the integration tier), 24 training
rows, 3 optimiser steps (a checkpoint after each, for the kill-and-resume tests), 24
test rows. The session runs it once
(conftest's ``tiny_run``, :func:`make_tiny_run`); a test that changes it works on a clone
(:func:`clone_run`) that shares its DVC cache, so nothing is trained twice for the same
params.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil

from conftest import REPO

TINY = {"split": {"train_size": 24, "validation_size": 8, "test_size": 24},
        "train": {"max_steps": 3, "per_device_train_batch_size": 4, "logging_steps": 1,
                  "save_steps": 1},
        "evaluate": {"batch_size": 8,
                     "test_sets": {"reviews-zh": {"source": "packaged:reviews-zh", "size": 12}}},
        # the encoder references' model loads, forward passes and fine-tune are seconds each
        # baseline run; the fast tier covers them (tests/test_evaluate_sets.py,
        # tests/test_finetuned_encoder.py)
        "baseline": {"encoder": {"enabled": False}, "encoder_ft": {"enabled": False}}}
LABELS = ["negative", "neutral", "positive"]


# A hub token in the environment of every run; no output may ever contain it.
PLANTED_TOKEN = "hf_lorasentPlantedTokenNeverWritten0123456789"


def env() -> dict[str, str]:
    return {**os.environ, "HF_TOKEN": PLANTED_TOKEN, "HUGGING_FACE_HUB_TOKEN": PLANTED_TOKEN,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def run(cwd: Path, *argv: str, timeout_s: float = 1800, logs: bool = False,
        extra_env: Mapping[str, str] | None = None) -> str:
    """``argv``'s stdout (with ``logs``, its stderr too, interleaved); fails on a non-zero
    exit, and on a command still running after ``timeout_s`` seconds, so that a hang
    costs one test, not the CI run's time limit. ``extra_env``: variables added to
    :func:`env`'s (``GIT_SSH_COMMAND``, say)."""
    try:
        done = subprocess.run(argv, cwd=cwd, env={**env(), **(extra_env or {})},
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT if logs else subprocess.PIPE,
                              text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        # what the command wrote so far: bytes, whatever text= said
        out, err = (b.decode(errors="replace") if b else "" for b in (exc.stdout, exc.stderr))
        raise AssertionError(f"{argv} still running after {timeout_s:.0f} s:\n"
                             f"{out}\n{err}") from None
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def kill_after_checkpoint(cwd: Path, step: int, *argv: str, timeout_s: float = 600) -> None:
    """Start ``argv`` and SIGKILL it with every process under it (dvc, the stage, and the
    processes that ``accelerate launch`` starts in sessions of their own: a machine taken
    away) once the train stage's checkpoint of ``step`` is complete."""
    record = cwd / "checkpoints" / f"checkpoint-{step}" / "lorasent-checkpoint.json"
    proc = subprocess.Popen(argv, cwd=cwd, env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while not record.exists():
        assert proc.poll() is None, f"{argv} ended before checkpoint {step} was saved"
        assert time.monotonic() < deadline, f"no checkpoint {step} after {timeout_s} s"
        time.sleep(0.05)
    tree = [proc.pid, *(child.pid for child in psutil.Process(proc.pid).children(recursive=True))]
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


def set_params(root: Path, changes: dict[str, Any]) -> None:
    """``changes`` merged into ``root``'s params.yaml, validated, in the layout DVC
    writes (so that a later ``dvc exp run -S`` changes only its key's line)."""
    from lorasent.params import update_params

    update_params(changes, root / "params.yaml")


def copy_repo(dest: Path) -> Path:
    """What git tracks (and would track) of the working tree: no data, models or venv."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout
    outputs = ("data/raw/", "data/split/", "models/", "metrics/")
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file() and not name.startswith(outputs):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    for stale in ("dvc.lock",):
        (dest / stale).unlink(missing_ok=True)
    return dest

GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]


def make_tiny_run(dest: Path, cache: Path, base_model: Path) -> Path:
    """``dest`` as a git repo holding this repo at tiny sizes on the model folder
    ``base_model``, after one ``dvc repro`` whose run (``dvc.lock``, ``metrics/``) is
    committed; its DVC cache in ``cache``."""
    root = copy_repo(dest)
    set_params(root, {**TINY, "base": {"model": str(base_model)}})
    run(root, "git", "init", "-q")
    run(root, "dvc", "cache", "dir", "--local", str(cache))
    run(root, "git", "add", "-A")
    run(root, *GIT, "commit", "-q", "-m", "tiny")
    run(root, "dvc", "repro")
    run(root, "git", "add", "-A")
    run(root, *GIT, "commit", "-q", "-m", "tiny run")
    return root


def clone_run(source: Path, dest: Path) -> Path:
    """``dest``: a git clone of the tiny run ``source`` with its DVC outputs checked out
    from the DVC cache they share (copied, not linked: a clone may damage its files)."""
    cache = run(source, "dvc", "cache", "dir").strip()
    run(dest.parent, "git", "clone", "-q", str(source), str(dest))
    run(dest, "dvc", "cache", "dir", "--local", cache)
    run(dest, "dvc", "checkout", "-q")
    return dest


def exp_named(node: object, name: str) -> Iterator[dict[str, Any]]:
    """The entries of `dvc exp show --json` output named ``name`` that hold its data."""
    if isinstance(node, dict):
        if node.get("name") == name and "data" in node:
            yield node
        for value in node.values():
            yield from exp_named(value, name)
    elif isinstance(node, list):
        for value in node:
            yield from exp_named(value, name)
