"""``lorasent sweep``: a grid of params × seeds as Ray tasks, one GPU (or N CPUs) per run,
each run a named DVC experiment.

Usage: ``lorasent sweep -S train.lora.r=4,8 --seeds 3 --name lora-r`` (or ``make sweep``)

For a small model the useful way to use a machine of N GPUs is N runs at once, one per GPU,
with the recipe unchanged (``base.num_processes`` stays 1: one run spread over all GPUs
changes the effective batch). DVC's queue runs on one machine and does not split GPUs
between its workers, so the runs are Ray tasks (https://docs.ray.io): a local Ray cluster
by default, or the cluster at ``--address`` (``ray start --head`` on one machine, ``ray
start --address=<head>:6379`` on the others). Each task asks for one GPU (``num_gpus=1``:
Ray gives it a GPU no other task holds and sets ``CUDA_VISIBLE_DEVICES``, or
``HIP_VISIBLE_DEVICES`` on AMD GPUs as of Ray 2.60) or, on a cluster without GPUs, for
``--cpus-per-run`` CPUs (Ray sets ``OMP_NUM_THREADS`` to that number: torch's threads).

A run, on whichever machine Ray puts it (:func:`run_one`):

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
   to it (and to the DVC remote), and this command collects each experiment back with
   ``dvc exp pull``;
4. removes its clone; the log stays.

The grid: each ``-S key=v1,v2`` expands as ``dvc exp run --queue -S`` expands it (Hydra's
override grammar, which DVC uses: ``a,b``, ``range(1,4)``, ``choice(a,b)``; quote a value
that holds a comma) and is crossed with ``--seeds`` seeds ``base.seed``, ``base.seed + 1``,
... (HEAD's ``base.seed``). Each grid point is a group, ``<name>-<key><value>...`` (the
last part of each swept key), and its runs are ``<group>-seed<S>``: ``lorasent compare
'<group A>-seed*' '<group B>-seed*'`` compares two groups over seeds, and ``make
exp-show`` lists them. The summary gives each group's mean ± sd and its verdict over seeds
against the first group (Welch's t-test, :func:`lorasent.review.verdict.group_review`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorasent.addresses import CONNECT_TIMEOUT_S, RAISE_IT, connect_timeout_s, redact
from lorasent.contracts import EvalMetrics
from lorasent.errors import LorasentError
from lorasent.params import ParamsError, merge, parse_params, read_yaml
from lorasent.programs import environment, program, visible_devices
from lorasent.review.collect import (
    git_lines,
    read_at,
    read_lock,
    read_side,
    resolve_commits,
    run_dvc,
)
from lorasent.review.render import with_interval_of
from lorasent.review.verdict import Side, group_review
from lorasent.run_pipeline import one_line
from lorasent.statistics import GroupComparison

Progress = Callable[[str], None]

POLL_S = 0.5        # seconds between two looks at a run's process (and at Ctrl-C)
STOP_GRACE_S = 20   # seconds a stopped run's processes get after SIGTERM, before SIGKILL
CANCEL_WAIT_S = 60  # seconds Ctrl-C waits for the running runs to stop
# Ray's object store holds only the runs' small descriptions and results here; the
# smallest store Ray accepts keeps a local cluster from reserving 30% of the RAM.
OBJECT_STORE_BYTES = 80 * 2**20
SWEEP_FOLDER = "lorasent-sweep"  # under each machine's temp folder: <sweep id>/{clones,logs}


@dataclass(frozen=True)
class RunSpec:
    """One run of the grid: the experiment's name, its group, seed and params changes
    (``key=value`` as ``dvc exp run -S`` takes them, ``base.seed`` last)."""

    name: str
    group: str
    seed: int
    sets: tuple[str, ...]


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


@dataclass(frozen=True)
class SweepRun:
    spec: RunSpec
    result: RunResult
    side: Side | None  # what its experiment committed, once landed

    @property
    def evals(self) -> EvalMetrics | None:
        return self.side.evals if self.side is not None else None


# ------------------------------------------------------------------ the grid

def _overrides(sets: Sequence[str], command: str = "sweep", grid: bool = True) -> list[Any]:
    """``sets`` parsed by Hydra's override parser, as DVC parses ``-S``.

    ``grid``: several values of a key make a grid axis (``sweep``, ``learning-curve``);
    False: each key takes one value (``seeds``: every run takes the same params).

    Raises:
        LorasentError: a setting Hydra cannot parse, of a file other than params.yaml, of
            ``base.seed`` (what the runs vary), that adds or deletes a key, a key given
            twice (the second would silently replace the first: DVC applies them in
            turn), or, without ``grid``, several values of a key; one line, prefixed
            ``command``.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    verb = "swept" if grid else "set"
    plain = []
    for s in sets:
        file, sep, rest = s.partition(":")
        if sep and "=" not in file:
            if file != "params.yaml":
                raise LorasentError(f"{command}: -S {s}: only params.yaml keys can be {verb}")
            s = rest
        plain.append(s)
    try:
        parsed = OverridesParser.create().parse_overrides(plain)
    except HydraException as err:
        raise LorasentError(f"{command}: -S: {' '.join(str(err).split())}") from None
    given: dict[str, list[Any]] = {}
    for s, o in zip(sets, parsed, strict=True):
        if o.key_or_group == "base.seed":
            raise LorasentError(f"{command}: -S base.seed is what the runs vary; set the first "
                                "seed in params.yaml and the number with --seeds"
                                if grid else f"{command}: -S base.seed is what the runs vary; "
                                "set the first seed in params.yaml instead")
        if o.is_add() or o.is_delete() or o.is_force_add():
            raise LorasentError(f"{command}: -S {s}: only changes of keys params.yaml has")
        if o.value_type == ValueType.GLOB_CHOICE_SWEEP:
            raise LorasentError(f"{command}: -S {s}: a glob sweep has no values here; list them")
        if not grid and o.is_sweep_override():
            raise LorasentError(f"{command}: -S {s}: every run takes one value of a key; "
                                f"`lorasent sweep -S {s}` runs each value over seeds")
        given.setdefault(o.key_or_group, []).append(o)
    for key, twice in given.items():
        if len(twice) > 1:
            raise LorasentError(_twice(command, key, twice, grid))
    return parsed


def _twice(command: str, key: str, overrides: Sequence[Any], grid: bool) -> str:
    """The one line that refuses ``key`` given in several ``-S``: each value it was given,
    and (``grid``) the one ``-S`` that makes them a grid axis."""
    values = [v for o in overrides for v in (o.sweep_string_iterator() if o.is_sweep_override()
                                             else [o.get_value_element_as_str()])]
    said = f"{command}: -S {key} is given {len(overrides)} times ({', '.join(values)})"
    if not grid:
        return f"{said}: every run takes one value of a key; give it once"
    axis = (f"-S {key}={','.join(dict.fromkeys(values))}"
            if all(re.fullmatch(r"[\w.+-]+", v) for v in values) else f"-S {key}=a,b")
    return f"{said}: give it once, its values as one grid axis: {axis}"



def one_value_each(params_text: str, sets: Sequence[str], command: str = "sweep"
                   ) -> tuple[list[str], list[str]]:
    """``sets`` with each grid axis's values that equal an earlier value of it once
    parsed and validated as params (``-S train.lora.r=8,08``: both train r = 8; ``1e-4,
    0.0001``) left out, and one line per such axis that says so. A value is parsed alone
    on ``params_text`` (:func:`with_sets`, then the params' validation); one the params
    refuse alone is compared as written. ``sets`` must parse (:func:`_overrides`)."""
    raw = read_yaml(params_text, "params.yaml")
    kept_sets: list[str] = []
    notes: list[str] = []
    for s, o in zip(sets, _overrides(sets, command), strict=True):
        if not o.is_sweep_override():
            kept_sets.append(s)
            continue
        key = o.key_or_group
        kept: list[tuple[str, Any]] = []
        merged: dict[str, list[str]] = {}
        for value in o.sweep_string_iterator():
            try:
                parsed: Any = parse_params(with_sets(raw, [f"{key}={value}"]), "params.yaml")
            except (ParamsError, LorasentError):
                parsed = value
            same = next((v for v, p in kept if p == parsed), None)
            if same is None:
                kept.append((value, parsed))
            else:
                merged.setdefault(same, []).append(value)
        if not merged:
            kept_sets.append(s)
            continue
        axis = f"{key}={','.join(v for v, _ in kept)}"
        # still an axis with one value left, so that its runs keep their names (s-r8-...)
        kept_sets.append(axis if len(kept) > 1 else f"{key}=choice({kept[0][0]})")
        said = "; ".join(
            f"{value} is given {len(others) + 1} times" if set(others) == {value} else
            f"{' and '.join(dict.fromkeys(others))} equal{'s' * (len(set(others)) == 1)} "
            f"{value} once parsed" for value, others in merged.items())
        notes.append(f"{command}: -S {s}: {said}; equal values are one grid point, so the "
                     f"axis is {axis}")
    return kept_sets, notes


# The experiment names DVC refuses (`dvc exp run -n`): dvc.repo.experiments.utils.
# check_ref_format, which takes refs/exps/<2 hex>/<38 hex>/<name> to git's ref-name rules
# (https://git-scm.com/docs/git-check-ref-format, as dulwich.refs.check_ref_format, DVC's
# git backend for it, applies them) and refuses a "/". A name starting with "-" is read
# as an option by dvc's command line.
NAME_RULES = ("git's ref-name rules: no spaces, control characters, '..', '~', '^', ':', '?', "
              "'*', '[', '\\', '@{' or '/', no '.' or '-' at the start, no '.' or '.lock' at "
              "the end")


def check_name(name: str, command: str) -> None:
    """Refuse ``--name`` when the experiments it names, ``<name>-...-seed<S>`` (the rest
    made of letters, digits and ``._+-``), are names DVC refuses (:data:`NAME_RULES`).

    Raises:
        LorasentError: one line naming the name, an experiment name it makes, the rules
            and what to use.
    """
    from dulwich.refs import Ref, check_ref_format

    run = f"{name}-seed0"
    if run.startswith("-") or "/" in run or not check_ref_format(
            Ref(f"refs/exps/00/{'0' * 38}/{run}".encode())):
        raise LorasentError(
            f"{command}: --name {name!r} makes experiment names such as {run!r} that DVC "
            f"refuses ({NAME_RULES}); use letters, digits, '-', '_' and '.'")


def _slug(key: str, value: str) -> str:
    """``train.lora.r``, ``8`` → ``r8``: a group name's part, git-ref safe."""
    text = re.sub(r"[^A-Za-z0-9._+-]+", "_", key.rsplit(".", 1)[-1] + value).strip("._-")
    return re.sub(r"\.{2,}", ".", text)


def plan(name: str, sets: Sequence[str], seeds: int, base_seed: int, *,
         command: str = "sweep", grid: bool = True) -> list[RunSpec]:
    """The runs of the grid ``sets`` × ``seeds`` seeds from ``base_seed``, grid point by
    grid point (in the order of the values given), each point's seeds in order: the one
    check of ``--name``, ``--seeds`` and ``-S`` of ``sweep``, ``learning-curve`` and
    ``seeds`` (``grid=False``: one value per key), before anything runs.

    Raises:
        LorasentError: ``seeds`` < 1, a ``name`` DVC refuses (:func:`check_name`), a bad
            ``-S`` (:func:`_overrides`), or two grid points that would get the same group
            name; prefixed ``command``.
    """
    if seeds < 1:
        raise LorasentError(f"{command}: --seeds {seeds}: at least 1")
    check_name(name, command)
    overrides = _overrides(sets, command, grid)
    axes = [[(o.key_or_group, v) for v in o.sweep_string_iterator()] if o.is_sweep_override()
            else [(o.key_or_group, o.get_value_element_as_str())] for o in overrides]
    swept = {o.key_or_group for o in overrides if o.is_sweep_override()}
    runs: list[RunSpec] = []
    groups: dict[str, tuple[tuple[str, str], ...]] = {}
    for point in itertools.product(*axes):
        group = "-".join([name, *(_slug(k, v) for k, v in point if k in swept)])
        if group in groups:
            raise LorasentError(f"{command}: {groups[group]} and {point} both make the group "
                                f"name {group}; choose values that differ in letters or "
                                "digits")
        groups[group] = point
        runs += [RunSpec(f"{group}-seed{seed}", group, seed,
                         (*(f"{k}={v}" for k, v in point), f"base.seed={seed}"))
                 for seed in range(base_seed, base_seed + seeds)]
    return runs


def with_sets(raw: dict[str, Any], sets: Sequence[str]) -> dict[str, Any]:
    """The params ``raw`` (params.yaml as read) with a run's ``sets`` (``key=value`` each,
    parsed as ``dvc exp run -S`` parses them) applied."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    changes: dict[str, Any] = {}
    for o in OverridesParser.create().parse_overrides(list(sets)):
        *path, last = o.key_or_group.split(".")
        node = changes
        for part in path:
            node = node.setdefault(part, {})
        node[last] = o.value()
    return merge(raw, changes)


def check_params(params_text: str, runs: Sequence[RunSpec], *, command: str = "sweep",
                 one_process: bool = True) -> None:
    """Validate each run's params (``params_text`` with its changes) before anything
    starts, and (``one_process``) that each runs in one process (``base.num_processes:
    1``: a run of a sweep has one GPU).

    Raises:
        LorasentError: the first run whose params are invalid, naming it and the key;
            prefixed ``command``.
    """
    raw = read_yaml(params_text, "params.yaml")
    for run in runs:
        try:
            params = parse_params(with_sets(raw, run.sets), f"params.yaml of run {run.name}")
        except ParamsError as err:
            raise LorasentError(f"{command}: " + "; ".join(
                line.strip() for line in str(err).splitlines())) from None
        if one_process and params.base.num_processes != 1:
            raise LorasentError(
                f"sweep: run {run.name} has base.num_processes {params.base.num_processes}; "
                "a sweep gives each run one GPU and runs the others beside it: set 1")


# ------------------------------------------------------------------ one run (a Ray task)

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
    processes (SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`), removes the clone and
    goes on up.
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
    (``lorasent.repro.check_checked_out``, as ``make run`` does): the line that fails the
    run when one is damaged, also written to its log ``out``; None when all match. First
    the remote is asked whether it lets this machine in (``lorasent.repro.remote_problem``:
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
        _stop(proc)
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


def _stop(proc: subprocess.Popen[Any], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to ``proc``'s session (dvc and the stage it runs), SIGKILL after
    ``grace_s`` seconds."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait_s)
            return


# ------------------------------------------------------------------ the sweep

@dataclass(frozen=True)
class SweepResult:
    runs: list[SweepRun]

    @property
    def failed(self) -> list[SweepRun]:
        return [run for run in self.runs if run.evals is None]

    def groups(self) -> dict[str, list[SweepRun]]:
        out: dict[str, list[SweepRun]] = {}
        for run in self.runs:
            out.setdefault(run.spec.group, []).append(run)
        return out

    def summary(self) -> str:
        """Each run (device, accuracy and macro-F1 with their 95% intervals), each group's
        mean ± sd over its seeds, each group's verdict against the first, and the compare
        command."""
        width = max(len(run.spec.name) for run in self.runs) + 2
        lines = [f"{'experiment':<{width}}{'base.seed':>9}  {'device':<14}"
                 f"{'accuracy [95% interval]':<28}macro-F1 [95% interval]"]
        for run in self.runs:
            device = "reused" if run.result.status == "reused" else device_text(run.result)
            head = f"{run.spec.name:<{width}}{run.spec.seed:>9}  {device:<14}"
            if run.evals is None:
                why = run.result.error or "its experiment has no metrics/eval.json"
                lines.append(head + f"failed ({why}): log {log_place(run.result)}")
            else:
                lines.append(head + f"{with_interval_of(run.evals, 'accuracy'):<28}"
                             f"{with_interval_of(run.evals, 'macro_f1')}")
        groups = self.groups()
        lines.append("")
        for group, runs in groups.items():
            done = [run.evals for run in runs if run.evals is not None]
            spread = ("; ".join(f"{label} {GroupComparison.spread([getattr(e, key) for e in done])}"
                                for key, label in (("accuracy", "accuracy"),
                                                   ("macro_f1", "macro-F1")))
                      if len(done) > 1 else
                      f"{len(done)} run with metrics: no spread over seeds")
            lines.append(f"{group}: {spread}")
        names = list(groups)
        reference = [run for run in groups[names[0]] if run.evals is not None]
        for group in names[1:]:
            other = [run for run in groups[group] if run.evals is not None]
            if min(len(reference), len(other)) < 2:
                lines.append(f"{group} against {names[0]}: no verdict, a group has fewer than "
                             "2 runs with metrics (--seeds 2 or more)")
                continue
            review, _ = group_review([run.side for run in reference if run.side],
                                     [run.side for run in other if run.side])
            lines.append(f"{group} against {names[0]}: {review.verdict}")
        lines += [f"WARNING {run.spec.name}: {warning}" for run in self.runs if run.evals
                  for warning in run.evals.warnings]
        if len(names) > 1:
            lines.append(f"Compare two groups: lorasent compare '{names[0]}-seed*' "
                         f"'{names[1]}-seed*'")
        return "\n".join(lines)


def device_text(result: RunResult) -> str:
    """``GPU 1`` (the ids Ray gave the run) or ``CPU``."""
    ids = next(iter(result.devices.values()), None)
    return f"GPU {ids}" if ids else "CPU"


def log_place(result: RunResult) -> str:
    """The log's path, after its machine's address when Ray ran it on another machine."""
    return result.log if result.here else f"{result.node}:{result.log}"


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run([program("git"), *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise LorasentError(redact(f"sweep: `git {' '.join(args)}` failed in {repo.resolve()}: "
                                   + " ".join(done.stderr.strip().splitlines()[-2:])))
    return done.stdout


def _dvc(repo: Path, *args: str) -> str:
    return str(run_dvc(repo, *args, as_json=False, command="sweep"))


# What to do with files that differ from HEAD ({it}: it or them); with params.yaml among
# them, by command: sweep takes params changes as -S; learning-curve has no -S, it trains
# HEAD's params as committed.
COMMIT_THEM = "commit {it} (or `git stash`)"
PARAMS_EDIT = {"sweep": COMMIT_THEM + ", or give the params changes as -S",
               "learning-curve": "commit {it} for a curve of the edited params, or `git stash` "
                                 "{it} for HEAD's (learning-curve trains HEAD's params as "
                                 "committed; it takes no -S)"}


def landed_on(repo: Path, commit: str) -> set[str]:
    """The names of the experiments whose baseline is ``commit`` (their refs are
    ``refs/exps/<2 hex>/<38 hex>/<name>``)."""
    names = set()
    for ref in git_lines(repo, "for-each-ref", "--format=%(refname)", "refs/exps") or []:
        parts = ref.strip().split("/")
        if len(parts) == 5 and parts[2] + parts[3] == commit:
            names.add(parts[4])
    return names


def reusable(repo: Path, commit: str, runs: Sequence[RunSpec],
             command: str = "sweep") -> list[str]:
    """The runs of the grid that landed before as experiments of ``commit`` (HEAD) with
    the params that run would have (HEAD's params.yaml with its settings): a sweep or a
    learning curve run again under its name makes only the runs that are missing (a run
    that failed, a machine lost).

    Raises:
        LorasentError: an experiment of that name and commit with other params (one line
            naming it and what to do), prefixed ``command``.
    """
    landed = landed_on(repo, commit)
    head = read_yaml(read_at(repo, commit, "params.yaml") or "", "params.yaml")
    found = []
    for run in runs:
        if run.name not in landed:
            continue
        ref = next(iter(git_lines(repo, "for-each-ref", "--format=%(objectname)",
                                  f"refs/exps/*/*/{run.name}") or []), "").strip()
        try:
            same = parse_params(read_yaml(read_at(repo, ref, "params.yaml") or "",
                                          f"{run.name}:params.yaml"), run.name) == \
                parse_params(with_sets(head, run.sets), run.name)
        except ParamsError:
            same = False
        if not same:
            raise LorasentError(f"{command}: experiment {run.name} of this commit has "
                                "other params than that run would; remove it (dvc exp remove "
                                f"{run.name}) or choose another --name")
        found.append(run.name)
    return found


def _check_repo(repo: Path, runs: Sequence[RunSpec], git_remote: str | None,
                command: str = "sweep", timeout_s: float | None = None
                ) -> tuple[str, str, list[str]]:
    """``(commit, url, reuse)``: HEAD, which must be clean (the runs clone it) and, with a
    ``git_remote``, on that remote; the url the runs clone from; and the runs that landed
    before (:func:`reusable`). No other run's name may be an existing experiment's.
    Errors are prefixed ``command`` and say what to do with an edited params.yaml for it
    (:data:`PARAMS_EDIT`). The git remote is checked by :func:`_on_git_remote`, within
    ``timeout_s`` seconds."""
    commit = _git(repo, "rev-parse", "HEAD").strip()
    dirty = [line[3:] for line in _git(repo, "status", "--porcelain",
                                       "--untracked-files=no").splitlines()]
    if dirty:
        files = ", ".join(dirty[:5]) + (" ..." if len(dirty) > 5 else "")
        raise LorasentError(
            f"{command}: each run clones commit HEAD, and {files} "
            f"{'differs' if len(dirty) == 1 else 'differ'} from it: "
            + (PARAMS_EDIT.get(command, COMMIT_THEM) if "params.yaml" in dirty
               else COMMIT_THEM).format(it="it" if len(dirty) == 1 else "them"))
    reuse = reusable(repo, commit, runs, command)
    existing = set(_dvc(repo, "exp", "list", "--all-commits", "--name-only").split())
    if clash := sorted(existing & {run.name for run in runs} - set(reuse)):
        raise LorasentError(f"{command}: experiments {', '.join(clash)} exist already; choose "
                            f"another --name, or remove them (dvc exp remove {' '.join(clash)})")
    if git_remote is None:
        return commit, str(repo.resolve()), reuse
    return commit, _on_git_remote(repo, git_remote, commit, command, timeout_s), reuse


def _on_git_remote(repo: Path, git_remote: str, commit: str, command: str = "sweep",
                   timeout_s: float | None = None) -> str:
    """The URL of ``repo``'s git remote ``git_remote``, which answers and holds
    ``commit``: its branches as they are now (``git ls-remote``) fetched, and ``commit``
    an ancestor of one of them.

    The remote gets ``timeout_s`` seconds (None:
    :func:`lorasent.addresses.connect_timeout_s`) to connect and list its branches: one
    that accepts the connection and stays silent would hold the command for as long as git
    and ssh wait (no limit), without a word. Every line names the URL through
    :func:`lorasent.addresses.redact`.

    Raises:
        LorasentError: the remote did not answer in time, refused (git's last line), or
            lacks ``commit``; prefixed ``command``.
    """
    url = _git(repo, "remote", "get-url", git_remote).strip()
    wait_s = connect_timeout_s(timeout_s)

    def ask(*args: str, limit_s: float | None = None) -> str:
        proc = subprocess.Popen([program("git"), *args], cwd=repo, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                env=environment(), start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            _stop(proc, grace_s=1.0)
            proc.communicate()
            raise LorasentError(redact(
                f"{command}: git remote {git_remote} ({url}) did not answer within "
                f"{limit_s:g} s (`git {args[0]}`: the time it gets to connect and list its "
                "branches): check its address (host, port) and that a git server runs "
                f"there; {RAISE_IT}")) from None
        if proc.returncode != 0:
            said = stderr.strip().splitlines()
            raise LorasentError(redact(
                f"{command}: git remote {git_remote} ({url}) does not answer "
                f"({one_line(said[-1] if said else proc.returncode)}); the runs clone from "
                "it: check its address and this machine's key"))
        return stdout

    # the remote's branches as they are now, not as this clone last saw them (another
    # machine may have pushed, or a branch been deleted or reset there since): their tips
    # fetched, and HEAD an ancestor of one of them
    tips = [line.split()[0] for line in ask("ls-remote", "--heads", git_remote,
                                            limit_s=wait_s).splitlines() if line.strip()]
    ask("fetch", "--quiet", git_remote)
    if not any(subprocess.run([program("git"), "merge-base", "--is-ancestor", commit, tip],
                              cwd=repo, capture_output=True).returncode == 0 for tip in tips):
        raise LorasentError(redact(f"{command}: commit {commit[:7]} is not on {git_remote} "
                                   f"({url}), and the runs clone it from there: git push "
                                   f"{git_remote} HEAD"))
    return url


def _cluster(address: str | None, num_gpus: int | None, git_remote: str | None,
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


def sweep(*, name: str, sets: Sequence[str] = (), seeds: int = 3, repo: Path = Path("."),
          address: str | None = None, num_gpus: int | None = None,
          cpus_per_run: int | None = None, git_remote: str | None = None,
          cache_dir: str | None = None, progress: Progress = lambda line: None,
          runner: Callable[..., RunResult] = run_one,
          checked: Callable[[str, list[RunSpec]], None] | None = None,
          command: str = "sweep", connect_timeout: float | None = None) -> SweepResult:
    """Run the grid ``sets`` × ``seeds`` seeds as Ray tasks and wait for them.

    Args:
        name: the experiments' prefix (:func:`plan`).
        sets: ``-S`` settings, a setting with several values a grid axis.
        seeds: runs per grid point (``base.seed``, ``base.seed + 1``, ... from HEAD).
        address: a Ray cluster (``auto``: the one ``ray start`` started here); None: a
            local cluster for this sweep (``ray.init``), GPUs as Ray detects them.
        num_gpus: declare this many GPUs to the local cluster (GPUs Ray does not detect;
            a fake list on a CPU machine, for tests).
        cpus_per_run: CPUs per run; default 1 beside a GPU, else all of a machine's.
        git_remote: clone from and push to this git remote of the repo (several
            machines); None: this folder.
        cache_dir: the DVC cache of the runs on other machines (a shared filesystem);
            None: one per machine, ``<temp>/lorasent-sweep/dvc-cache``.
        progress: called with a line at each run's change of state.
        runner: the task's function (:func:`run_one`; tests give one that records).
        checked: called with HEAD's commit and the runs to make once the settings and
            the repo are checked, before Ray starts (``lorasent learning-curve`` says
            there how many runs and about how long).
        command: the command the user ran, the prefix of the errors of the checks
            (``learning-curve`` runs a sweep).
        connect_timeout: the seconds each address (the git remote, the default DVC
            remote, here and in each run, and ``address``) gets to connect and give its
            first answer; None: :func:`lorasent.addresses.connect_timeout_s`
            (``LORASENT_CONNECT_TIMEOUT``, else 10).

    Runs of the grid that landed before as experiments of HEAD with the same params
    (:func:`reusable`) are taken as they are (status ``reused``), not run again: the
    same command run again after a failure or a lost machine makes the missing runs.

    Returns:
        every run, in grid order, with its metrics when it landed.

    Raises:
        LorasentError: bad settings or repo state (an experiment of a run's name with
            other params among them), a git remote that does not answer or lacks HEAD,
            or a default DVC remote that refuses this machine or does not answer, within
            ``connect_timeout`` (all before anything runs), no Ray cluster at
            ``address`` (nothing there, or something other than Ray), or Ctrl-C (after
            stopping the runs; landed ones stay).
    """
    from lorasent.run_pipeline import remote_problem

    repo = repo.resolve()
    check_options(command, address=address, num_gpus=num_gpus, cache_dir=cache_dir)
    timeout_s = connect_timeout_s(connect_timeout)
    params_text = _git(repo, "show", "HEAD:params.yaml")
    base_seed = parse_params(read_yaml(params_text, "params.yaml"), "params.yaml").base.seed
    sets, repeated = one_value_each(params_text, sets, command)
    for line in repeated:
        progress(line)
    runs = plan(name, sets, seeds, base_seed, command=command)
    check_params(params_text, runs, command=command)
    commit, url, reuse = _check_repo(repo, runs, git_remote, command, timeout_s)
    if problem := remote_problem(repo, timeout_s):  # the runs pull from it, and this command too
        raise LorasentError(f"{command}: {problem}; no run was started")
    todo = [run for run in runs if run.name not in reuse]
    if checked is not None:
        checked(commit, todo)
    results = {exp: RunResult(exp, "reused", "", {}, "", 0.0, 0.0) for exp in reuse}
    if todo:
        if reuse:
            progress(f"{command}: {len(reuse)} of {len(runs)} runs landed before with these "
                     f"params and are reused ({', '.join(reuse)}); {len(todo)} to run")
        results |= _sweep_runs(todo, name=name, repo=repo, commit=commit, url=url,
                               address=address, num_gpus=num_gpus, cpus_per_run=cpus_per_run,
                               git_remote=git_remote, cache_dir=cache_dir, progress=progress,
                               runner=runner, timeout_s=timeout_s)
    commits = resolve_commits(repo, *(r.name for r in results.values()
                                      if r.status in ("succeeded", "reused")))
    return SweepResult([SweepRun(spec, results[spec.name],
                                 read_side(repo, spec.name, commits)
                                 if spec.name in commits else None) for spec in runs])


def check_options(command: str, *, address: str | None, num_gpus: int | None,
                  cache_dir: str | None) -> None:
    """The cluster options that can be checked before Ray starts.

    Raises:
        LorasentError: ``--num-gpus`` with ``--address`` (a cluster declares its own), or a
            ``--cache-dir`` that is not an absolute path (each run's ``dvc cache dir
            --local`` would take it from its own clone's folder).
    """
    if address is not None and num_gpus is not None:
        raise LorasentError(f"{command}: --num-gpus declares the GPUs of a local cluster; a "
                            "cluster at --address has its own (ray start --num-gpus)")
    if cache_dir is not None and not Path(cache_dir).is_absolute():
        raise LorasentError(f"{command}: --cache-dir {cache_dir}: give an absolute path (a "
                            "folder every machine of the cluster sees there); a relative one "
                            "would be taken from each run's clone")


def _sweep_runs(runs: Sequence[RunSpec], *, name: str, repo: Path, commit: str, url: str,
                address: str | None, num_gpus: int | None, cpus_per_run: int | None,
                git_remote: str | None, cache_dir: str | None, progress: Progress,
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
            resources, described = _cluster(address, num_gpus, git_remote, cpus_per_run)
        except ConnectionError as err:
            raise LorasentError(redact(f"sweep: no Ray cluster at --address {address}: "
                                       f"{' '.join(str(err).split())}")) from None
        # after ray.init, which sets its own SIGTERM handler (sys.exit: a crash dump, no
        # summary, the clones left): `kill` stops the runs as Ctrl-C does
        signal.signal(signal.SIGTERM, _interrupt)
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


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _run_all(runs: Sequence[RunSpec], source: Source, resources: dict[str, float],
             progress: Progress, runner: Callable[..., RunResult], git_remote: str | None,
             repo: Path) -> dict[str, RunResult]:
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
