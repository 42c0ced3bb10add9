"""``lorasent reproduce [REV]``: did this machine reproduce REV's run, and how closely?

Usage: ``lorasent reproduce`` (or ``make reproduce``) reruns HEAD's pipeline in a
temporary clone and judges what it wrote against what HEAD committed;
``--workspace`` judges the outputs a run already left here (``make run`` ends so);
``--no-train`` re-scores the committed adapter only (the evaluate stage).

PyTorch promises bitwise reproducibility only "on one specific platform and PyTorch
release" (https://pytorch.org/docs/stable/notes/randomness.html); another CPU family, a
GPU or bf16 rounds sums another way. So "reproduced" has tiers, judged in this order
(:data:`lorasent.review.tiers.TIERS`; docs/reproducibility.md):

- **identical**: every output of the pipeline byte for byte (its provenance records
  aside: they describe the machine, shown side by side below the verdict);
- **equivalent**: the same inputs, the same predicted labels on every test row but rows
  whose top-two probability margin is under the tolerance (a tie either way), every
  probability within the tolerance (:data:`lorasent.review.diffs.TOLERANCE`,
  ``--tolerance``), every metric within its own
  (:func:`lorasent.review.diffs.metric_tolerance`), the adapter's weights judged by what
  they predict;
- **consistent**: the predictions differ (a retraining on other hardware), but on the
  same test rows the paired test (paired bootstrap of Δ accuracy and McNemar's exact
  test, ``lorasent.statistics.paired_comparison``) finds no detectable difference from
  REV, on every test set; for seed groups, ``--seed-groups`` judges REV's group against
  this machine's by Welch's t-test, as MLPerf judges a new platform's runs against
  reference runs over seeds;
- **different**: anything else, with the paired verdict and the files.

Before any tier, each file read for the verdict is checked as what it claims to be
(:func:`lorasent.review.claims.damage`): probabilities in [0, 1] whose rows sum to 1
within the tolerance, each row's label its most probable class, metrics that follow from
the predictions beside them; a file that is not makes the verdict "different", its first
line naming the file.

The verdict is one line first (naming each test set that moved); then each file that
differs, with its largest deviation (lorasent.review.diffs); then the two machines side
by side (:data:`lorasent.review.tiers.MACHINE_ROWS`). Exit status 0 for identical,
equivalent and consistent, 1 for different.

REV is run in a clone in the temp folder (``git clone``, ``git checkout --detach``, the
clone's DVC cache this repo's: nothing is written to the workspace; the cache gains the
objects the run makes). ``dvc repro --force --no-run-cache`` runs every stage (with
``--no-train``: ``dvc checkout`` of REV's outputs, ``dvc pull`` where the cache lacks
them and a remote is set, then the evaluate stage alone; without REV's adapter it
retrains, after saying how long that took here, or, on a machine that never ran it, how
long the committed training's steps take at ``make bench``'s step). Ctrl-C or SIGTERM
stops DVC's process group and removes the clone.

This module checks the workspace and reruns REV; lorasent.review.tiers gives the verdict.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from lorasent.addresses import redact
from lorasent.errors import LorasentError
from lorasent.git import run_git
from lorasent.paths import ADAPTER_DIR, BASE_MODEL_DIR, PROVENANCE_DIR, SPLIT_DIR
from lorasent.programs import environment, program
from lorasent.provenance import machine_facts, machine_path
from lorasent.review.collect import check_revisions, read_lock, resolve_commits, run_dvc
from lorasent.review.diffs import TOLERANCE
from lorasent.review.markup import visible
from lorasent.review.tiers import Verdict, judge, listing, outputs, under

Progress = Callable[[str], None]


# ------------------------------------------------------------------ the checks


def not_reps(repo: Path, commit: str) -> tuple[list[str], list[str]]:
    """``(code, other)``: the files, outputs of the pipeline aside, that differ from
    ``commit`` in ``repo`` (tracked changes and untracked files git does not ignore):
    those a stage reads (params files, its deps) and the rest."""
    lock = read_lock(repo, commit)
    outs = [Path(p) for p in outputs(lock)] + [Path("dvc.lock")]
    diff = run_git(repo, "diff", "--name-only", commit, "--").stdout.splitlines()
    new = run_git(repo, "ls-files", "--others", "--exclude-standard").stdout.splitlines()
    files = sorted(p for p in set(diff) | set(new) if not under(p, outs))
    deps = {d["path"] for stage in (lock.get("stages") or {}).values()
            for d in stage.get("deps") or []}
    params = {f for stage in (lock.get("stages") or {}).values() for f in stage.get("params") or {}}
    reads = [Path(p) for p in deps | params | {"dvc.yaml"}]
    code = [p for p in files if under(p, reads)]
    return code, [p for p in files if p not in code]


# Params that choose how the same computation runs, not what it computes: a workspace
# that differs from REV only in these ran REV on another platform (another device, or
# bf16 where REV's run computed in fp32), so it is judged as one: never identical by
# promise, equivalent, consistent or different by the tiers (docs/reproducibility.md).
PLATFORM_PARAMS = (("base", "device"), ("base", "precision"))


def platform_changes(repo: Path, commit: str, code: Sequence[str]) -> list[str] | None:
    """When ``code`` (from :func:`not_reps`) is ``params.yaml`` alone and it differs from
    ``commit``'s only in :data:`PLATFORM_PARAMS`: each as ``key here (REV: value)``;
    None when anything else differs or either file cannot be read."""
    from lorasent.git import git_bytes
    from lorasent.params import read_yaml

    if list(code) != ["params.yaml"]:
        return None
    theirs = git_bytes(repo, "show", f"{commit}:params.yaml")
    try:
        here = read_yaml((repo / "params.yaml").read_text(encoding="utf-8"), "params.yaml")
        there = read_yaml(theirs.decode("utf-8"), f"{commit[:7]}:params.yaml") if theirs \
            else None
    except (OSError, UnicodeDecodeError, LorasentError):
        return None
    if not (isinstance(here, dict) and isinstance(there, dict)):
        return None
    changes = []
    for section, key in PLATFORM_PARAMS:
        mine, rev = (dict(d.get(section) or {}) for d in (here, there))
        if mine.pop(key, None) != rev.pop(key, None):
            changes.append(f"{section}.{key} {here[section].get(key)} "
                           f"(REV: {there[section].get(key)})")
        here, there = {**here, section: mine}, {**there, section: rev}
    return changes if here == there else None


# The stages that write a machine record (metrics/provenance/machine/STAGE.json) when
# they run, in pipeline order: fetch and split write none.
MODEL_STAGES = ("baseline", "train", "evaluate")

# What each of MODEL_STAGES reads (dvc.yaml's deps; a fresh clone's run leaves them as
# REV made them) and its chief output, which DVC keeps as it is when it skips the stage.
_SKIPPED = {"baseline": ("the split, the base model", "metrics/baseline.json"),
            "train": ("the split, the base model", "models/adapter"),
            "evaluate": ("the adapter, the split, the baseline's scores", "metrics/eval.json")}


def skipped_note(ran: Sequence[str]) -> str | None:
    """One line naming every stage of :data:`MODEL_STAGES` not in ``ran`` (those with no
    machine record here: DVC skipped them, their inputs unchanged), in pipeline order,
    with their inputs, what DVC kept and the command that runs them here; None when all
    ran."""
    skipped = [stage for stage in MODEL_STAGES if stage not in ran]
    if not skipped:
        return None
    several = len(skipped) > 1
    names = (", ".join(skipped[:-1]) + " and " if several else "") + skipped[-1]
    inputs = "; ".join(f"{stage}'s: {_SKIPPED[stage][0]}" for stage in skipped)
    kept = ", ".join(_SKIPPED[stage][1] for stage in skipped)
    return (f"  {names} did not run here: DVC found {'their' if several else 'its'} inputs "
            f"unchanged ({inputs}) and kept {'their' if several else 'its'} outputs ({kept} "
            f"and the rest) as they were; `dvc repro --force --single-item "
            f"{' '.join(skipped)}` runs {'them' if several else 'it'} here")


class NotAReproduction(LorasentError):
    """The workspace is not a run of REV's code and params (so: compare, not reproduce)."""


def check_workspace(repo: Path, rev: str, commit: str) -> tuple[list[str], list[str]]:
    """Refuse a workspace that is not a run of REV as it stands, before any reading.

    Returns:
        the model stages that ran here (a machine record of this machine's), in pipeline
        order, and the platform params that differ from REV's (:func:`platform_changes`).

    Raises:
        NotAReproduction: params (but :data:`PLATFORM_PARAMS`) or code differ from REV's;
            files that are no output
            differ; ``dvc status`` finds stages out of date; or neither train nor
            evaluate ran here (no machine record: their outputs were pulled or checked
            out).
    """
    from lorasent.review.collect import workspace_staleness

    code, other = not_reps(repo, commit)
    platform = (platform_changes(repo, commit, code) if code else None) or []
    if code and not platform:
        raise NotAReproduction(
            f"params or code differ from {visible(rev)}'s ({listing(code)}): this is not a "
            f"reproduction of {visible(rev)}; `lorasent compare {visible(rev)} workspace` "
            "compares the two runs")
    if other:
        raise NotAReproduction(
            f"the workspace holds files that are not {visible(rev)}'s ({listing(other)}); "
            "commit or stash them (git stash -u), or run `lorasent reproduce "
            f"{visible(rev)}` without --workspace, which reruns it in a clean clone")
    stale = workspace_staleness(repo)
    if stale:
        raise NotAReproduction(
            f"the outputs here are not those of a run of this code and params (stale: "
            f"{', '.join(stale.stages)}): run `dvc repro` (make run) first")
    ran = [stage for stage in MODEL_STAGES
           if (repo / PROVENANCE_DIR / f"{stage}.json").is_file() and machine_facts(
               (repo / PROVENANCE_DIR / f"{stage}.json").read_text(encoding="utf-8"),
               repo / machine_path(PROVENANCE_DIR / f"{stage}.json"))]
    if "evaluate" not in ran and "train" not in ran:
        raise NotAReproduction(
            f"{visible(rev)}'s outputs were not made here (no machine record of its train or "
            "evaluate stage: they were pulled or checked out, or the stages ran elsewhere): "
            "run the pipeline (make run), or `lorasent reproduce` without --workspace")
    return ran, platform


# ------------------------------------------------------------------ rerunning REV


def _run(argv: list[str], cwd: Path, progress: Progress) -> None:
    """``argv`` in ``cwd``, its output passed on to standard error (standard output holds
    the verdict alone); in a session of its own, stopped with its children (SIGTERM,
    then SIGKILL) when this process is interrupted.

    Raises:
        LorasentError: a non-zero exit, naming the command.
    """
    from lorasent.processes import stop

    progress(redact(f"reproduce: $ {' '.join(argv)}"))
    sys.stderr.flush()
    proc = subprocess.Popen(argv, cwd=cwd, env=environment(), stdin=subprocess.DEVNULL,
                            stdout=sys.stderr, start_new_session=True)
    try:
        code = proc.wait()
    except BaseException:
        stop(proc)
        raise
    if code:
        raise LorasentError(f"reproduce: `{' '.join(argv[:3])}` exited with {code} in the "
                            f"clone of REV (its output above)")


@contextlib.contextmanager
def _terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt here, so that the clone is removed either way."""
    from lorasent.processes import interrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


BENCH_RESULTS = Path("bench") / "results.json"  # make bench's committed results
TRAIN_RECORD = PROVENANCE_DIR / "train.json"  # the tracked record of the train stage


def bench_train_step(path: Path, model: str, batch_size: int) -> float | None:
    """Seconds a training step took in ``make bench`` (:mod:`lorasent.tools.bench`): its
    train part's ``project`` way (the train stage's step, fp32) for ``model`` (its name
    without ``packaged:``) at ``batch_size`` examples, as its ``results.json`` holds it
    (``results.train.<model>.ways.project.seconds_per_step``), measured on the bench's
    machine.

    Returns None, never raises, when ``path`` is absent, unreadable or not such JSON, or
    holds no positive finite step for that model and batch size."""
    try:
        part = json.loads(path.read_text(encoding="utf-8"))["results"]["train"][model]
        seconds = part["ways"]["project"]["seconds_per_step"]
        same_batch = part["batch_size"] == batch_size
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    if (not same_batch or isinstance(seconds, bool) or not isinstance(seconds, int | float)
            or not 0 < seconds < float("inf")):
        return None
    return float(seconds)


def _committed_estimate(repo: Path, stages: Sequence[str]) -> str | None:
    """With ``train`` among ``stages``: its steps in the committed train record
    (:data:`TRAIN_RECORD`) times make bench's step (:func:`bench_train_step`, for the
    record's packaged model and batch size), the line naming that source and the stages
    left out (no committed file holds their time on the real data). None where either
    file lacks what it needs."""
    if "train" not in stages:
        return None
    try:
        record = json.loads((repo / TRAIN_RECORD).read_text(encoding="utf-8"))
        steps, batch = record["steps"], record["effective_batch_size"]
        model = record["params"]["base"]["model"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    if (not isinstance(model, str) or not model.startswith("packaged:")
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 1
                   for n in (steps, batch))):
        return None
    step = bench_train_step(repo / BENCH_RESULTS, model.removeprefix("packaged:"), batch)
    if step is None:
        return None
    total = steps * step
    about = f"{round(total / 60)} min" if total >= 90 else f"{round(total)} s"
    others = [s for s in stages if s != "train"]
    left = f"; {' and '.join(others)} not estimated" if others else ""
    return (f"about {about}: {steps} steps x {step:.2f} s a step (make bench's fp32 step on "
            f"its machine, {BENCH_RESULTS.as_posix()}), not this machine's{left}")


def _estimate(repo: Path, stages: Sequence[str]) -> str:
    """How long ``stages`` took when they last ran here (their machine records); without
    those, the train stage's committed steps times make bench's committed step
    (:func:`_committed_estimate`)."""
    seconds = []
    for stage in stages:
        try:
            record = json.loads((repo / machine_path(PROVENANCE_DIR / f"{stage}.json"))
                                .read_text(encoding="utf-8"))
            seconds.append(float(record["wall_time_s"]))
        except (OSError, ValueError, KeyError, TypeError):
            return (_committed_estimate(repo, stages)
                    or "no record of these stages on this machine to estimate from")
    total = sum(seconds)
    return f"about {int(total // 60)} min {int(total % 60)} s, as they last took here"


def reproduce(repo: Path, rev: str = "HEAD", *, workspace: bool = False, no_train: bool = False,
              tolerance: float = TOLERANCE, progress: Progress = print,
              connect_timeout: float | None = None) -> Verdict:
    """Judge REV's run reproduced here: the workspace's outputs (``workspace``), or a
    rerun in a temporary clone (every stage; with ``no_train`` the evaluate stage on REV's
    adapter, its outputs pulled from the default DVC remote, which gets
    ``connect_timeout`` seconds to answer: :func:`lorasent.run_pipeline.remote_problem`).

    Raises:
        LorasentError: REV unknown; the workspace is not a run of REV
            (:class:`NotAReproduction`); with ``no_train``, a default DVC remote that
            refuses this machine or does not answer; a step of the rerun failed.
    """
    if not (0 < tolerance < 1):
        raise LorasentError(f"reproduce: --tolerance must be in (0, 1); got {tolerance:g}")
    check_revisions(repo, {"REV": [rev]}, command="reproduce")
    commit = _full_commit(repo, rev)
    if workspace:
        ran, platform = check_workspace(repo, rev, commit)
        # without evaluate, train ran here and made the adapter dvc.lock records (REV's,
        # in a fresh clone on REV's kind of machine): DVC skipped evaluate (and baseline,
        # whose inputs a fresh clone checks out as REV made them)
        verdict = judge(repo, rev, commit, tolerance,
                        record_stage="evaluate" if "evaluate" in ran else "train")
        if note := skipped_note(ran):
            verdict.notes.append(note)
        if platform:
            verdict.notes.append(
                f"  another platform's run of {visible(rev)}: the workspace's params differ "
                f"only in how it computes ({'; '.join(visible(c) for c in platform)})")
        return verdict
    clone = Path(tempfile.mkdtemp(prefix="lorasent-reproduce-"))
    try:
        with _terminated_as_interrupt():
            return _rerun(repo, rev, commit, clone, no_train, tolerance, progress,
                          connect_timeout)
    finally:
        shutil.rmtree(clone, ignore_errors=True)


def _full_commit(repo: Path, rev: str) -> str:
    short = resolve_commits(repo, rev).get(rev, rev)
    return str(run_git(repo, "rev-parse", f"{short}^{{commit}}").stdout).strip() or short


def _rerun(repo: Path, rev: str, commit: str, clone: Path, no_train: bool, tolerance: float,
           progress: Progress, connect_timeout: float | None = None) -> Verdict:
    cache = run_dvc(repo, "cache", "dir", as_json=False, command="reproduce").strip()
    _run([program("git"), "clone", "-q", "--no-checkout", str(repo.resolve()), str(clone)],
         clone.parent, progress)
    _run([program("git"), "checkout", "-q", "--detach", commit], clone, progress)
    local = repo / ".dvc" / "config.local"
    if local.is_file():  # a default remote set with --local
        shutil.copy2(local, clone / ".dvc" / "config.local")
    for argv in (["cache", "dir", "--local", cache],
                 # links, not copies, of REV's outputs (a 1 GiB base model): DVC keeps its
                 # cache read-only, and a stage replaces its outputs, never edits them
                 ["config", "--local", "cache.type", "reflink,hardlink,symlink,copy"]):
        _run([program("dvc"), *argv], clone, lambda _: None)
    stages = ["evaluate"]
    if no_train:
        have = _checkout(clone, progress, connect_timeout)
        lacking = [p for p in (ADAPTER_DIR.as_posix(), SPLIT_DIR.as_posix(),
                               BASE_MODEL_DIR.as_posix()) if p not in have]
        if lacking:
            stages = ["fetch", "split", "baseline", "train", "evaluate"]
            progress(f"reproduce: {visible(rev)}'s {', '.join(lacking)} are neither in the "
                     "DVC cache nor on a remote: the pipeline runs from the start, training "
                     f"included ({_estimate(repo, ['baseline', 'train', 'evaluate'])})")
            _run([program("dvc"), "repro", "--quiet", "--force", "--no-run-cache"], clone,
                 progress)
        else:
            progress(f"reproduce: re-scoring {visible(rev)}'s adapter "
                     f"({_estimate(repo, stages)})")
            _run([program("dvc"), "repro", "--quiet", "--force", "--no-run-cache",
                  "--single-item", "evaluate"], clone, progress)
    else:
        progress(f"reproduce: running {visible(rev)}'s pipeline from the start, training "
                 f"included ({_estimate(repo, ['baseline', 'train', 'evaluate'])})")
        _run([program("dvc"), "repro", "--quiet", "--force", "--no-run-cache"], clone,
             progress)
    return judge(clone, rev, commit, tolerance)


def _checkout(clone: Path, progress: Progress, connect_timeout: float | None = None
              ) -> set[str]:
    """Check REV's outputs out of the cache, pulling what it lacks where a default remote
    is set (asked first whether it lets this machine in and answers within
    ``connect_timeout`` seconds, ``lorasent.run_pipeline.remote_problem``, as ``make run`` asks),
    and hash them against REV's dvc.lock (``lorasent.run_pipeline.check_checked_out``, as ``make
    run`` does): the output paths that are there afterwards.

    Raises:
        LorasentError: the default remote refuses this machine or does not answer; a
            file the cache or the remote gave is not what dvc.lock records.
    """
    from lorasent.run_pipeline import check_checked_out, remote_problem

    remote = subprocess.run([program("dvc"), "remote", "default"], cwd=clone,
                            capture_output=True).returncode == 0
    if remote and (problem := remote_problem(clone, connect_timeout)):
        raise LorasentError(f"reproduce: {problem}; nothing was pulled or re-scored")
    for argv in (["checkout", "--quiet"], ["pull", "--quiet"]):
        if argv[0] == "pull" and not remote:
            break
        subprocess.run([program("dvc"), *argv], cwd=clone, env=environment(),
                       capture_output=True)
    damage = check_checked_out(["fetch", "split", "train"], remote, clone)
    if damage:
        raise LorasentError(damage.replace("run: ", "reproduce: ", 1)
                            .replace("removed here", "removed from the clone"))
    lock = read_lock(clone, "workspace")
    return {p for p, md5 in outputs(lock).items() if (clone / p).exists()
            and (not md5.endswith(".dir") or (clone / p).is_dir())}
