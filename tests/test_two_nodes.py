"""Two machines train together, on one host: two clones of the tiny run, each a
"machine" with its own folder and DVC cache, sharing nothing but the loopback network,
follow docs/scale-out.md's "Several machines" steps with
configs/accelerate/two-nodes-cpu.yaml (gloo, one process a machine)."""

import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tiny_repo import GIT, clone_run, env, run, set_params

CONFIG = "configs/accelerate/two-nodes-cpu.yaml"
ADAPTER = "models/adapter/adapter_model.safetensors"
# one torch thread a process: each machine gets one of this host's 2 cores, as each of
# the 2 processes of the one-machine run does (torchrun sets it there, 2 processes a node)
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _files(root: Path) -> dict[str, str]:
    """Every file of a machine's folder but git's and DVC's own, with its sha256."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] not in (".git", ".dvc")}


def _start(cwd: Path, log: Path, argv: list[str], extra: dict[str, str],
           started: list[psutil.Process]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, cwd=cwd, env={**env(), **ONE_THREAD, **extra},
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    started.append(psutil.Process(proc.pid))
    return proc


def _watch(procs: list[subprocess.Popen[bytes]], started: list[psutil.Process],
           timeout_s: float) -> None:
    """Wait for ``procs``, noting every process under them as it appears (torchrun's
    workers run in sessions of their own), so that the end can kill each by pid."""
    deadline = time.monotonic() + timeout_s
    while any(p.poll() is None for p in procs):
        for proc in list(started):
            with contextlib.suppress(psutil.NoSuchProcess):
                started.extend(c for c in proc.children(recursive=True) if c not in started)
        assert time.monotonic() < deadline, f"still running after {timeout_s} s"
        time.sleep(0.2)


def _kill(started: list[psutil.Process]) -> None:
    for proc in started:
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.is_running():
                os.kill(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_two_machines_train_as_two_processes_of_one(tiny_two_processes, tmp_path):
    # machine A: the main one; its DVC cache is the tiny run's
    a = clone_run(tiny_two_processes, tmp_path / "a")
    port = _free_port()
    text = (a / CONFIG).read_text(encoding="utf-8")
    text = re.sub(r"(?m)^main_process_ip: \S+", "main_process_ip: 127.0.0.1", text)
    text = re.sub(r"(?m)^main_process_port: \d+", f"main_process_port: {port}", text)
    (a / CONFIG).write_text(text, encoding="utf-8")
    set_params(a, {"base": {"num_processes": 1}, "train": {"accelerate_config": CONFIG}})
    run(a, "dvc", "remote", "add", "-d", "shared", str(tmp_path / "dvc-remote"))
    run(a, "git", "add", "-A")
    run(a, *GIT, "commit", "-q", "-m", "train on two machines")
    run(a, "dvc", "push", "-q", "data/split", "models/base")
    # machine B: the same commit (git clone), its own DVC cache, the inputs from the remote
    b = tmp_path / "b"
    run(tmp_path, "git", "clone", "-q", str(a), str(b))
    run(b, "dvc", "cache", "dir", "--local", str(tmp_path / "b-cache"))
    run(b, "dvc", "pull", "-q", "data/split", "models/base")
    assert not (b / "models/adapter").exists()
    before = _files(b)

    started: list[psutil.Process] = []
    try:
        main = _start(a, tmp_path / "a.log", ["dvc", "repro", "train"], {}, started)
        second = _start(b, tmp_path / "b.log", ["lorasent", "train"],
                        {"LORASENT_ACCELERATE_ARGS": "--machine_rank=1"}, started)
        _watch([main, second], started, timeout_s=300)
        logs = {name: (tmp_path / f"{name}.log").read_text() for name in ("a", "b")}
        assert (main.returncode, second.returncode) == (0, 0), logs

        record = json.loads((a / "metrics/provenance/train.json").read_text(encoding="utf-8"))
        assert (record["status"], record["processes"], record["steps"]) == ("ok", 2, 3)
        assert record["effective_batch_size"] == 4 * 1 * 2  # per device x accumulation x 2
        # the one-machine run's bytes: same processes, threads, batches and seed
        assert (a / ADAPTER).read_bytes() == (tiny_two_processes / ADAPTER).read_bytes()
        # machine B wrote none of its outputs (adapter, metrics, dvc.lock) and changed no
        # file; Trainer saves each process's RNG state in its own machine's checkpoints/
        # (rank 1's there), and only rank 0 removes that folder at the end: left on B
        after = _files(b)
        assert {name: after[name] for name in before} == before
        assert set(after) - set(before) == {
            f"checkpoints/checkpoint-{step}/rng_state_1.pth" for step in (1, 2, 3)}

        # machine B alone, where nobody listens (machine A is done): one line, in time
        t0 = time.monotonic()
        alone = _start(b, tmp_path / "alone.log", ["lorasent", "train"],
                       {"LORASENT_ACCELERATE_ARGS": "--machine_rank=1 --rdzv_conf=timeout=3"},
                       started)
        _watch([alone], started, timeout_s=60)
        out = (tmp_path / "alone.log").read_text()
        assert alone.returncode == 1 and time.monotonic() - t0 < 60, out
        assert out.splitlines() == [  # all it prints
            f"lorasent train: error: machine rank 1: nobody listens at the main machine's "
            f"127.0.0.1:{port} after 3 s; start the train stage on the main machine (rank 0) "
            "first, and check main_process_ip, main_process_port and that the port is open "
            "between the machines"]
        assert _files(b) == after
    finally:
        _kill(started)
    assert not [p.pid for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
