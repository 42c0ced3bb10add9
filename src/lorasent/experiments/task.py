"""One run of a sweep, a Ray task on whichever machine Ray puts it (:func:`run_one`):

1. clones the commit (this repo's HEAD, clean) into a folder of its own under that
   machine's temp folder, and points the clone's DVC cache at a shared one: this repo's
   cache on this machine, one cache per machine elsewhere (``--cache-dir`` names another).
   A clone on this machine gets a copy of this repo's ``.dvc/config.local`` (a remote's
   credentials or key file); the other machines' runs take theirs from their
   environment. Each clone has its own ``.dvc/tmp``, so runs never wait on each other's
   ``rw.lock``;
2. runs ``dvc exp run --temp -n <name> -S <key>=<value> ... -S base.seed=<S>`` there
   (``--pull`` when the commit configures a DVC remote), all output in its log;
3. pushes the experiment with ``dvc exp push origin <name>`` (``--no-cache`` without a
   DVC remote). The clone's ``origin`` is this repo on a one-machine cluster, so the
   experiment lands here; with ``--git-remote``, the runs clone from that remote and push
   to it (and to the DVC remote), and ``lorasent sweep`` collects each experiment back
   with ``dvc exp pull`` (:mod:`lorasent.experiments.cluster`);
4. removes its clone; the log stays.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorasent.addresses import redact
from lorasent.experiments.grid import RunSpec
from lorasent.processes import stop
from lorasent.programs import environment, program, visible_devices
from lorasent.review.collect import read_lock

POLL_S = 0.5        # seconds between two looks at a run's process (and at Ctrl-C)
SWEEP_FOLDER = "lorasent-sweep"  # under each machine's temp folder: <sweep id>/{clones,logs}


@dataclass(frozen=True)
class Source:
    """Where every run clones from and pushes to, and where it works.

    ``url``: a git URL or this repo's path; ``local_node``: the Ray node id of the machine
    this command runs on, where ``cache_dir`` (this repo's DVC cache) is used; other
    machines use ``remote_cache_dir`` (``--cache-dir``; None: one cache per machine,
    ``<temp>/lorasent-sweep/dvc-cache``, kept from sweep to sweep). ``sweep_id`` names
    the sweep's folder on every machine. ``local_config``: this repo's
    ``.dvc/config.local`` (a DVC remote's credentials or key file set with ``--local``),
    copied into the clones of the runs on this machine only: its paths and secrets are
    this machine's, and a path travels to the other machines, never its content (they
    need their own, in their environment, as for ``dvc push`` there).
    ``connect_timeout_s``: the seconds a run's check of the DVC remote waits for it to
    connect and answer (``--connect-timeout``: this command's, on every machine).
    """

    url: str
    commit: str
    local_node: str
    cache_dir: str
    remote_cache_dir: str | None
    sweep_id: str
    local_config: str | None = None
    connect_timeout_s: float | None = None


@dataclass(frozen=True)
class RunResult:
    """What a run reports back: ``status`` is ``succeeded``, ``reused`` (an experiment
    that had landed before, not run again) or ``failed`` (then ``error``
    says which step, and ``log`` holds its output); ``node`` is the machine's address,
    ``devices`` the GPU variables Ray set for it (:func:`lorasent.programs.visible_devices`),
    ``started``/``ended`` Unix times in seconds; ``here``: it ran on this command's
    machine."""

    name: str
    status: str
    node: str
    devices: dict[str, str]
    log: str
    started: float
    ended: float
    error: str = ""
    here: bool = True



def device_text(result: RunResult) -> str:
    """``GPU 1`` (the ids Ray gave the run) or ``CPU``."""
    ids = next(iter(result.devices.values()), None)
    return f"GPU {ids}" if ids else "CPU"


def log_place(result: RunResult) -> str:
    """The log's path, after its machine's address when Ray ran it on another machine."""
    return result.log if result.here else f"{result.node}:{result.log}"



class Events:
    """A Ray actor that collects each run's start, ``(name, node, devices)``, for the
    progress lines. A run tells it without waiting for an answer: a task that waits in
    ``ray.get`` lends its CPUs to the next queued task, and two runs would share them."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str, dict[str, str]]] = []

    def put(self, event: tuple[str, str, dict[str, str]]) -> None:
        self.started.append(event)

    def take(self) -> list[tuple[str, str, dict[str, str]]]:
        taken, self.started = self.started, []
        return taken


def run_one(spec: RunSpec, source: Source, events: Any = None) -> RunResult:
    """Run ``spec`` in a clone of its own and push its experiment (the module's steps 1-4);
    on the machine Ray chose, with the GPU variables Ray set. ``events``: an
    :class:`Events` actor told ``(name, node, devices)`` once the run starts.

    Never raises for a failed step: the result says which step failed and where the log
    is. A Ctrl-C of the sweep (Ray's cancel: ``KeyboardInterrupt`` here) stops the step's
    processes (SIGTERM, then SIGKILL after :data:`lorasent.processes.STOP_GRACE_S`),
    removes the clone and goes on up.
    """
    import ray

    started, node = time.time(), ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    devices = visible_devices()
    if events is not None:
        events.put.remote((spec.name, node, devices))  # no ray.get: see Events
    node_id = ray.get_runtime_context().get_node_id()
    here = node_id == source.local_node
    folder = sweep_folder(source)
    clone, log = folder / "clones" / spec.name, run_log(source, spec)
    cache = source.cache_dir if here else (source.remote_cache_dir
                                           or str(folder.parent / "dvc-cache"))
    log.parent.mkdir(parents=True, exist_ok=True)
    clone.parent.mkdir(parents=True, exist_ok=True)

    def result(status: str, error: str = "") -> RunResult:
        return RunResult(spec.name, status, node, devices, str(log), started, time.time(), error,
                         here)

    try:
        with log.open("w", encoding="utf-8") as out:
            out.write(f"# {spec.name} of commit {source.commit[:7]} on {node} (host "
                      f"{socket.gethostname()}, Ray node {node_id[:12]})\n")
            steps: list[tuple[str, list[str], Path]] = [
                ("clone", [program("git"), "clone", "-q", "--no-checkout", source.url,
                           str(clone)], folder),
                ("checkout", [program("git"), "checkout", "-q", "--detach", source.commit],
                 clone),
                ("cache", [program("dvc"), "cache", "dir", "--local", cache], clone)]
            for step, argv, cwd in steps:
                if code := _step(argv, cwd, out):
                    return result("failed", f"{step} exited with {code}")
                if step == "checkout" and here and source.local_config:
                    shutil.copy2(source.local_config, clone / ".dvc" / "config.local")
            remote = _step([program("dvc"), "remote", "default"], clone, out) == 0
            if remote and (damage := pulled_and_checked(clone, out,
                                                        source.connect_timeout_s)):
                return result("failed", damage)
            for step, argv in (
                    ("dvc exp run", [program("dvc"), "exp", "run", "--temp", "-n", spec.name,
                                     *(["--pull"] if remote else []),
                                     *(a for s in spec.sets for a in ("-S", s))]),
                    ("dvc exp push", [program("dvc"), "exp", "push",
                                      *([] if remote else ["--no-cache"]), "origin",
                                      spec.name])):
                if code := _step(argv, clone, out):
                    return result("failed", f"{step} exited with {code}")
        return result("succeeded")
    except OSError as err:
        return result("failed", f"{type(err).__name__}: {err}")
    finally:
        shutil.rmtree(clone, ignore_errors=True)


def sweep_folder(source: Source) -> Path:
    """The sweep's folder on the machine this runs on (its temp folder)."""
    return Path(tempfile.gettempdir()) / SWEEP_FOLDER / source.sweep_id


def run_log(source: Source, spec: RunSpec) -> Path:
    """The run's log on the machine it runs on."""
    return sweep_folder(source) / "logs" / f"{spec.name}.log"


def pulled_and_checked(clone: Path, out: Any, timeout_s: float | None = None) -> str | None:
    """``dvc pull`` in a run's clone (what the remote lacks, the run makes), then every
    output it gave hashed against the commit's dvc.lock before the run uses it
    (``lorasent.run_pipeline.check_checked_out``, as ``make run`` does): the line that fails the
    run when one is damaged, also written to its log ``out``; None when all match. First
    the remote is asked whether it lets this machine in (``lorasent.run_pipeline.remote_problem``:
    each machine has its own key or credentials; ``timeout_s``: the seconds it gets to
    answer): when not, that line fails the run."""
    from lorasent.run_pipeline import check_checked_out, remote_problem

    if problem := remote_problem(clone, timeout_s):
        out.write(f"{problem}\n")
        return problem
    _step([program("dvc"), "pull"], clone, out)
    stages = list(read_lock(clone, "workspace").get("stages") or {})
    damage = check_checked_out(stages, True, clone)
    if damage:
        out.write(f"{damage}\n")
    return damage.removeprefix("run: ") if damage else None


def _step(argv: list[str], cwd: Path, out: Any) -> int:
    """Run ``argv`` in ``cwd``, its output appended to ``out``, in a session of its own
    (a Ctrl-C at the terminal reaches this command alone, which stops the runs in
    order); returns its exit status. Interrupted (Ray's cancel), it stops the session's
    processes and raises. The command line and each line of its output go through
    :func:`lorasent.addresses.redact` (``git clone https://user:token@host/...``)."""
    out.write(redact(f"$ {' '.join(argv)}") + "\n")
    out.flush()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=environment(),
                            start_new_session=True)
    copier = threading.Thread(target=_copy_redacted, args=(proc.stdout, out), daemon=True)
    copier.start()
    try:
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = proc.wait(timeout=POLL_S)
                copier.join()
                return code
    except BaseException:
        stop(proc)
        copier.join(timeout=5)
        out.write("$ stopped: the sweep was cancelled\n")
        raise


def _copy_redacted(pipe: Any, out: Any) -> None:
    """Each line of ``pipe`` (a program's output, bytes) to ``out`` through
    :func:`lorasent.addresses.redact`."""
    with pipe:
        for raw in pipe:
            out.write(redact(raw.decode("utf-8", errors="replace")))
            out.flush()
