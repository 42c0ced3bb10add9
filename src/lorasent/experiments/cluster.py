"""The runs of a sweep on Ray (:func:`sweep_runs`), one GPU (or N CPUs) per run.

For a small model the useful way to use a machine of N GPUs is N runs at once, one per GPU,
with the recipe unchanged (``base.num_processes`` stays 1: one run spread over all GPUs
changes the effective batch). DVC's queue runs on one machine and does not split GPUs
between its workers, so the runs are Ray tasks (https://docs.ray.io,
:func:`lorasent.experiments.task.run_one`): a local Ray cluster by default, or the cluster
at ``--address`` (``ray start --head`` on one machine, ``ray start --address=<head>:6379``
on the others). Each task asks for one GPU (``num_gpus=1``: Ray gives it a GPU no other
task holds and sets ``CUDA_VISIBLE_DEVICES``, or ``HIP_VISIBLE_DEVICES`` on AMD GPUs as of
Ray 2.60) or, on a cluster without GPUs, for ``--cpus-per-run`` CPUs (Ray sets
``OMP_NUM_THREADS`` to that number: torch's threads). With ``--git-remote``, each run's
experiment is collected back here with ``dvc exp pull`` as it lands.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lorasent.addresses import CONNECT_TIMEOUT_S, RAISE_IT, redact
from lorasent.errors import LorasentError
from lorasent.experiments.grid import RunSpec
from lorasent.experiments.task import (
    POLL_S,
    Events,
    RunResult,
    Source,
    log_place,
    run_log,
    sweep_folder,
)
from lorasent.processes import interrupt
from lorasent.programs import environment, program
from lorasent.review.collect import run_dvc
from lorasent.run_pipeline import one_line

CANCEL_WAIT_S = 60  # seconds Ctrl-C waits for the running runs to stop
# Ray's object store holds only the runs' small descriptions and results here; the
# smallest store Ray accepts keeps a local cluster from reserving 30% of the RAM.
OBJECT_STORE_BYTES = 80 * 2**20


def _dvc(repo: Path, *args: str) -> str:
    return str(run_dvc(repo, *args, as_json=False, command="sweep"))


def sweep_runs(runs: Sequence[RunSpec], *, name: str, repo: Path, commit: str, url: str,
                address: str | None, num_gpus: int | None, cpus_per_run: int | None,
                git_remote: str | None, cache_dir: str | None, progress: Callable[[str], None],
                runner: Callable[..., RunResult],
                timeout_s: float = CONNECT_TIMEOUT_S) -> dict[str, RunResult]:
    """Run ``runs`` on Ray (a local cluster, or the one at ``address``); their results by
    name."""
    import ray

    if address not in (None, "auto"):  # before Ray, which would retry for minutes
        _reachable(address, timeout_s)
    cache = _dvc(repo, "cache", "dir").strip()
    sweep_id = f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    stop = signal.getsignal(signal.SIGTERM)
    try:
        try:
            resources, described = connect(address, num_gpus, git_remote, cpus_per_run)
        except ConnectionError as err:
            raise LorasentError(redact(f"sweep: no Ray cluster at --address {address}: "
                                       f"{' '.join(str(err).split())}")) from None
        # after ray.init, which sets its own SIGTERM handler (sys.exit: a crash dump, no
        # summary, the clones left): `kill` stops the runs as Ctrl-C does
        signal.signal(signal.SIGTERM, interrupt)
        local = repo / ".dvc" / "config.local"
        source = Source(url, commit, ray.get_runtime_context().get_node_id(), cache, cache_dir,
                        sweep_id, str(local) if local.is_file() else None, timeout_s)
        progress(f"sweep: {len(runs)} run{'s' * (len(runs) > 1)} of commit {commit[:7]} on Ray "
                 f"({described}); logs in {sweep_folder(source) / 'logs'}")
        return _run_all(runs, source, resources, progress, runner, git_remote, repo)
    finally:
        signal.signal(signal.SIGTERM, stop)
        ray.shutdown()


RAY_DEFAULT_PORT = 6379   # the GCS port of `ray start --head` (Ray's docs)
RAY_CLIENT_PORT = 10001   # the Ray Client server's port, for ray:// addresses (Ray's docs)
# What a gRPC server (Ray's GCS and its Client server) is sent first, and answers: HTTP/2's
# client preface and an empty SETTINGS frame; the server's preface is a SETTINGS frame
# (RFC 9113, 3.4): 9 bytes of header, type 0x4, stream 0.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 0x4


def _reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, in one line and within ``timeout_s`` seconds (twice: to connect, then for
    the first answer), an ``--address`` (``host[:port]``, port :data:`RAY_DEFAULT_PORT`
    when left out; ``ray://host[:port]``, port :data:`RAY_CLIENT_PORT`) where Ray does not
    answer: nothing accepts a TCP connection, or something that is not a gRPC server
    (Ray's GCS and Client server are) accepts it and stays silent or answers otherwise
    (:data:`HTTP2_PREFACE` sent, a SETTINGS frame expected back; over TLS when
    ``RAY_USE_TLS`` is set). Ray itself would retry for minutes, in lines of its own, and
    at this machine's outward address when the one given is a loopback one; refused
    here, nothing is sent anywhere else.

    Raises:
        LorasentError: naming the address, why, and what to do.
    """
    bare = address.removeprefix("ray://")
    default = RAY_CLIENT_PORT if bare != address else RAY_DEFAULT_PORT
    host, _, port = bare.rpartition(":") if ":" in bare else (bare, "", str(default))
    slow = f"; {RAISE_IT}"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            first = _first_answer(sock, host, timeout_s)
    except ValueError:
        why, slow = f"{port!r} is not a port number", ""
    except TimeoutError:
        why = f"no connection within {timeout_s:g} s"
    except OSError as err:
        why, slow = err.strerror or type(err).__name__, ""
    else:
        if first is not None and len(first) >= 9 and first[3] == HTTP2_SETTINGS \
                and not any(first[5:9]):
            return
        if first is None:
            why = f"something accepted the connection and did not answer within {timeout_s:g} s"
        else:
            slow = ""
            why = ("something accepted the connection and closed it without a word"
                   if not first else "something answers there, but not as Ray's gRPC "
                   "server does")
    raise LorasentError(redact(
        f"sweep: no Ray cluster answers at --address {address} ({why}): check the address "
        "and port (`ray start --head` prints them), start one there with `ray start "
        "--head`, use --address auto for the one `ray start` started on this machine, or "
        f"leave --address out for a local cluster{slow}"))


def _first_answer(sock: socket.socket, host: str, timeout_s: float) -> bytes | None:
    """The first bytes (up to a frame header's 9) that ``sock``'s server sends back to
    :data:`HTTP2_PREFACE` within ``timeout_s`` seconds; None when it sends none in that
    time, ``b""`` when it closes the connection."""
    import ssl

    if os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true"):
        context = ssl.create_default_context()  # the probe reads no secret: no check
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])
        sock = context.wrap_socket(sock, server_hostname=host)
    sock.settimeout(timeout_s)
    try:
        sock.sendall(HTTP2_PREFACE)
        got = b""
        while len(got) < 9:
            chunk = sock.recv(9 - len(got))
            if not chunk:
                break
            got += chunk
    except TimeoutError:
        return got or None
    except ConnectionError:  # reset: it closed the connection on the preface
        pass
    return got


def _run_all(runs: Sequence[RunSpec], source: Source, resources: dict[str, float],
             progress: Callable[[str], None], runner: Callable[..., RunResult],
             git_remote: str | None, repo: Path) -> dict[str, RunResult]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # on this command's machine: an actor Ray put on another would die with it, and
    # with it the progress of every run (found with a machine lost mid-sweep)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    events: Any = ray.remote(num_cpus=0)(Events).options(scheduling_strategy=here).remote()
    task = ray.remote(max_retries=0)(runner)
    refs = {task.options(name=spec.name, **resources).remote(spec, source, events): spec
            for spec in runs}
    t0 = time.monotonic()

    def say(text: str) -> None:
        progress(f"sweep: {text} ({time.monotonic() - t0:.0f} s)")

    for spec in runs:
        say(f"{spec.name} queued")
    results: dict[str, RunResult] = {}
    started: dict[str, str] = {}  # run: the node it started on
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
            for exp, node, devices in ray.get(events.take.remote()):
                started[exp] = node
                say(f"{exp} running on {node}" + (
                    f", {', '.join(f'{k}={v}' for k, v in devices.items())}"
                    if devices else ""))
            for ref in done:
                spec = refs[ref]
                result = _result_of(ref, spec, started.get(spec.name), source)
                if result.status == "succeeded" and git_remote is not None:
                    result = _pull(repo, git_remote, result)
                results[spec.name] = result
                if result.status == "succeeded":
                    say(f"{spec.name} succeeded in {result.ended - result.started:.0f} s")
                else:
                    say(f"{spec.name} failed ({result.error}): log {log_place(result)}")
    except KeyboardInterrupt:
        running = [refs[ref].name for ref in pending if refs[ref].name in started]
        progress(f"sweep: interrupted: stopping {len(running)} running runs and cancelling "
                 f"{len(pending) - len(running)} queued ones (waiting up to {CANCEL_WAIT_S} s)")
        for ref in pending:
            ray.cancel(ref)
        ray.wait(pending, num_returns=len(pending), timeout=CANCEL_WAIT_S)
        landed = [n for n, r in results.items() if r.status == "succeeded"]
        raise LorasentError(
            f"sweep: interrupted: {len(running)} running runs stopped "
            f"({', '.join(running) or 'none'}), {len(pending) - len(running)} queued ones "
            f"cancelled, {len(landed)} landed ({', '.join(landed) or 'none'}); their "
            "clones are removed, their logs kept") from None
    return results


def _result_of(ref: Any, spec: RunSpec, node: str | None, source: Source) -> RunResult:
    """The task's result; a task that died (its worker or machine lost) as a failed run
    that names ``node``, the machine it started on, and its log there (None: it died
    before it started, and wrote none), with the first sentence of Ray's reason. Ray
    does not retry it (``max_retries=0``): the same sweep run again makes it."""
    import ray

    try:
        return ray.get(ref)
    except (ray.exceptions.RayError, OSError) as err:
        now = time.time()
        why = redact(one_line(err).split(". ")[0][:200])
        if node is None:
            return RunResult(spec.name, "failed", "?", {}, "(none: the task died before it "
                             "started)", now, now, f"the task died: {why}")
        return RunResult(spec.name, "failed", node, {}, str(run_log(source, spec)), now, now,
                         f"the task died on {node}: {why}", here=False)


def _pull(repo: Path, git_remote: str, result: RunResult) -> RunResult:
    """``dvc exp pull <git_remote> <name>`` (its cache too, with a DVC remote)."""
    args = ["exp", "pull", git_remote, result.name]
    done = subprocess.run([program("dvc"), "remote", "default"], cwd=repo,
                          capture_output=True, env=environment())
    try:
        _dvc(repo, *args[:2], *([] if done.returncode == 0 else ["--no-cache"]), *args[2:])
    except LorasentError as err:
        return dataclasses.replace(result, status="failed", error=f"collecting it: {err}")
    return result


def connect(address: str | None, num_gpus: int | None, git_remote: str | None,
             cpus_per_run: int | None) -> tuple[dict[str, float], str]:
    """Connect to Ray (start a local cluster without ``address``) and choose each run's
    resources: ``({"num_gpus": 1, "num_cpus": c} or {"num_cpus": c}, description)``."""
    import ray

    quiet: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                             "logging_level": logging.ERROR}
    if address is None:
        ray.init(num_gpus=num_gpus, object_store_memory=OBJECT_STORE_BYTES, **quiet)
    else:
        ray.init(address=address, **quiet)
    nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    if len(nodes) > 1 and git_remote is None:
        raise LorasentError(f"sweep: the Ray cluster has {len(nodes)} machines, and runs on "
                            "the others cannot clone this folder: push HEAD and pass "
                            "--git-remote (e.g. origin)")
    gpus = max((n["Resources"].get("GPU", 0) for n in nodes), default=0)
    cpus = max((n["Resources"].get("CPU", 0) for n in nodes), default=0)
    if cpus_per_run is not None and cpus_per_run > cpus:
        raise LorasentError(f"sweep: --cpus-per-run {cpus_per_run}, and no machine of the "
                            f"cluster has more than {cpus:g} CPUs")
    if gpus:
        per_run = cpus_per_run or 1
        return ({"num_gpus": 1, "num_cpus": per_run},
                f"1 GPU and {per_run} CPU{'s' * (per_run > 1)} per run")
    per_run = cpus_per_run or int(cpus)
    return {"num_cpus": per_run}, f"{per_run} CPU{'s' * (per_run > 1)} per run, no GPU"
