"""``lorasent seeds``: the current params over N seeds, as queued DVC experiments.

Usage: ``lorasent seeds -n 3 --name NAME [-S key=value ...] [-j 1]`` (or ``make seeds``)

A LoRA run moves with its random seed ``base.seed`` (LoRA initialisation, dropout, data
order; the split is ``split.seed``'s, so every seed scores the same test rows). One run
cannot tell a change
from that noise; N runs can. This queues the workspace's params (committed or not, plus
the ``-S`` changes) once per seed ``base.seed``, ``base.seed + 1``, ... with
``dvc exp run --queue``, runs the queue with ``dvc queue start -j J``, waits, and reports
accuracy and macro-F1 as mean ± sd (sample standard deviation) over the seeds. The
experiments are named ``<NAME>-seed<S>``, so that ``lorasent compare 'A-seed*' 'B-seed*'``
compares two groups with Welch's t-test (``lorasent.statistics``). It ends with the
adapter against each supervised reference over the seeds (:func:`references_over_seeds`):
a reference that moves with ``base.seed`` is refitted by each seed's baseline stage and
is a group like the adapter. With at least 2 runs done, :meth:`SeedsResult.record` is
what the command writes to ``metrics/seeds.json`` (:mod:`lorasent.review.seeds_record`),
the params less ``base.seed`` with their hash: ``lorasent metrics`` and the pull-request
comment give its group verdict first while the params are these.

``-j 1`` is the default: each run already uses every core, and on a small machine two at
once only share them (and need twice the memory).
"""

from __future__ import annotations

import functools
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lorasent.contracts import EvalMetrics, PairedVerdict, ValidationMetrics
from lorasent.errors import LorasentError
from lorasent.experiments.selection import (
    CHOSEN,
    RESULT_COLUMNS,
    choice_lines,
    chosen_row,
    validation_accuracy,
    validation_text,
)
from lorasent.programs import environment, program
from lorasent.reference_registry import BY_NAME, SUPERVISED, SupervisedReference
from lorasent.review.collect import read_side, resolve_commits, run_dvc
from lorasent.review.render import with_interval_of
from lorasent.review.seeds_record import (
    FORMAT_VERSION,
    ReferenceRecord,
    SeedRunRecord,
    SeedsRecord,
    Spread,
    params_sha256,
    stored_params,
)
from lorasent.review.verdict import delta_text, group_outcome, p_text
from lorasent.statistics import (
    ALPHA,
    GroupComparison,
    constant_comparison,
    group_comparison,
)

POLL_S = 10  # seconds between two looks at `dvc queue status`
IDLE_POLLS = 3  # looks in a row with experiments queued and no worker before a restart
STATUS_TRIES = 3  # failed looks in a row before a failure of `dvc queue status` is an error


@dataclass(frozen=True)
class SeedRun:
    name: str
    seed: int
    status: str                    # DVC's: Success, Failed, ...
    evals: EvalMetrics | None      # its metrics/eval.json
    validation: ValidationMetrics | None = None  # its metrics/validation.json


@dataclass(frozen=True)
class SeedsResult:
    """The runs of ``lorasent seeds``, in seed order, and ``params``: the params every run
    took (params.yaml with the ``-S`` changes, ``base.seed`` aside), as read; None where
    not known (then no :meth:`record`)."""

    runs: list[SeedRun]
    params: dict[str, Any] | None = None

    @property
    def done(self) -> list[tuple[int, EvalMetrics]]:
        """``(base.seed, eval.json)`` of each run that has its metrics."""
        return [(run.seed, run.evals) for run in self.runs if run.evals is not None]

    def record(self) -> SeedsRecord | None:
        """The seeds record (:class:`lorasent.review.seeds_record.SeedsRecord`): the
        params less ``base.seed`` and their hash, each run, and the adapter against each
        supervised reference over the seeds (:func:`references_over_seeds`); None
        without ``params`` or with fewer than 2 runs done (no group)."""
        done = self.done
        if self.params is None or len(done) < 2:
            return None
        found = references_over_seeds(done)
        runs = [SeedRunRecord(experiment=run.name, seed=run.seed, status=run.status,
                              test_accuracy=run.evals.accuracy if run.evals else None,
                              test_macro_f1=run.evals.macro_f1 if run.evals else None,
                              validation_accuracy=validation_accuracy(run.validation))
                for run in self.runs]
        return SeedsRecord(
            lorasent_seeds_record=FORMAT_VERSION,
            name=self.runs[0].name.rsplit("-seed", 1)[0],
            params_sha256=params_sha256(self.params), params=stored_params(self.params),
            runs=runs, references=[_reference_record(r) for r in found.compared],
            strongest=[r.entry.name for r in found.strongest], not_fitted=found.not_fitted)

    def summary(self) -> str:
        """The runs in seed order (validation accuracy, test accuracy and macro-F1, each
        with its 95% interval), the seed validation chose marked and the lines on that
        choice (:mod:`lorasent.experiments.selection`), mean ± sd of accuracy and
        macro-F1, and how to compare groups."""
        lines = [f"{'experiment':<24} {'base.seed':>9}  "
                 f"{RESULT_COLUMNS}"]
        scores = [validation_accuracy(run.validation) for run in self.runs]
        tested = [run.evals is not None for run in self.runs]
        chosen = chosen_row(scores, tested)
        for i, run in enumerate(self.runs):
            if run.evals is None:
                lines.append(f"{run.name:<24} {run.seed:>9}  {run.status}: see "
                             f"`dvc queue logs {run.name}`")
                continue
            mark = f"  {CHOSEN}" if i == chosen else ""
            lines.append(f"{run.name:<24} {run.seed:>9}  "
                         f"{validation_text(run.validation):<36}"
                         f"{with_interval_of(run.evals, 'accuracy'):<30}"
                         f"{with_interval_of(run.evals, 'macro_f1')}{mark}")
        lines += choice_lines(scores, tested)
        done = [run.evals for run in self.runs if run.evals is not None]
        if len(done) > 1:
            for key, name in (("accuracy", "accuracy"), ("macro_f1", "macro-F1")):
                lines.append(f"{name} over seeds: "
                             f"{GroupComparison.spread([getattr(e, key) for e in done])}")
        prefix = self.runs[0].name.rsplit("-seed", 1)[0]
        lines.append(f"Compare with another group: lorasent compare '{prefix}-seed*' "
                     "'<other>-seed*'")
        if len(done) > 1:
            lines += references_over_seeds(self.done).lines
        return "\n".join(lines)


@dataclass(frozen=True)
class ReferenceOverSeeds:
    """The adapter's accuracy against one supervised reference's over the seeds.

    Attributes:
        entry: the reference (:data:`lorasent.reference_registry.SUPERVISED`).
        seeds: the ``base.seed`` of each run that has it fitted, in the runs' order.
        reference, adapter: its and the adapter's accuracy (a fraction) in those runs.
        paired: each of those runs' paired verdict (``references.<name>.paired``; None
            on a test set of one row).
        missing: ``{seed: why}`` for the runs without it (``reference_notes.<name>``,
            empty where eval.json gives no reason).
        test: A the reference, B the adapter (Δ = adapter − reference): Welch's t-test
            (:func:`lorasent.statistics.group_comparison`), or the one-sample t-test
            where the reference's accuracy is the same in every run
            (:func:`lorasent.statistics.constant_comparison`); None in fewer than 2 runs.
    """

    entry: SupervisedReference
    seeds: tuple[int, ...]
    reference: tuple[float, ...]
    adapter: tuple[float, ...]
    paired: tuple[PairedVerdict | None, ...]
    missing: dict[int, str]
    test: GroupComparison | None

    @property
    def constant(self) -> bool:
        """The reference scored the same in every run (one-sample test, not Welch's)."""
        return len(set(self.reference)) == 1

    @property
    def mean(self) -> float:
        """The reference's mean accuracy over its runs."""
        return float(np.mean(self.reference))

    @property
    def outcome(self) -> str:
        """The group's verdict in a word (:func:`lorasent.review.verdict.group_outcome`:
        ``better``, ``worse`` only at p < ALPHA, ``no detectable difference``, ``cannot
        be tested``), or ``no group test`` in fewer than 2 runs."""
        return "no group test" if self.test is None else group_outcome(self.test)

    @property
    def test_name(self) -> str:
        return "one-sample t-test" if self.constant else "Welch's t-test"

    def verdict(self) -> str:
        """``the adapter is better (Welch's t-test p = 0.003)``, ``no detectable
        difference (...)``: the group's verdict as the section's sentences say it."""
        if self.test is None:
            return f"no group test (fitted in {len(self.seeds)} run only)"
        if self.test.p_value is None:
            return "cannot be tested (neither side varies over the seeds)"
        word = self.outcome
        said = f"the adapter is {word}" if word in ("better", "worse") else word
        return f"{said} ({self.test_name} {p_text(self.test.p_value)})"

    def lines(self) -> list[str]:
        """Its group line, a line per missing run, a line per run's paired verdict, and
        the sentence that a run's better (or worse) is not the group's verdict when the
        group finds no detectable difference."""
        name = self.entry.short
        adapter = GroupComparison.spread(self.adapter) if len(self.adapter) > 1 else (
            f"{self.adapter[0]:.4f} (1 seed)")
        if self.entry.seeded:
            how = "refitted with each seed"
        elif self.constant:
            how = "the same fit for every seed"
        else:
            how = ("not seeded, but its accuracy moves over the seeds (train.fraction < 1 "
                   "draws the training rows with base.seed)")
        reference = (f"{self.reference[0]:.4f}" if self.constant and not self.entry.seeded
                     else GroupComparison.spread(self.reference) if len(self.reference) > 1
                     else f"{self.reference[0]:.4f} (1 seed)")
        delta = delta_text(float(np.mean(self.adapter)) - self.mean)
        out = [f"{name}, {how}: accuracy {reference} against the adapter's {adapter}, "
               f"Δ {delta}: {self.verdict()}"]
        out += [f"  seed {seed}: not fitted ({why or 'eval.json gives no reason'})"
                for seed, why in self.missing.items()]
        for seed, paired in zip(self.seeds, self.paired, strict=True):
            if paired is None:
                out.append(f"  seed {seed}: no paired test")
                continue
            delta = delta_text(paired.delta_accuracy, paired.delta_accuracy_ci95_low,
                               paired.delta_accuracy_ci95_high)
            out.append(f"  seed {seed}: Δ accuracy {delta}, McNemar "
                       f"{p_text(paired.mcnemar_p)}: {paired.verdict}")
        if self.outcome == "no detectable difference":
            assert self.test is not None and self.test.p_value is not None
            for word in ("better", "worse"):
                said = [str(s) for s, p in zip(self.seeds, self.paired, strict=True)
                        if p is not None and p.verdict == word]
                if said:
                    runs = (f"seed {said[0]}'s paired verdict says" if len(said) == 1
                            else f"the paired verdicts of seeds {', '.join(said)} say")
                    out.append(f"  One seed's \"{word}\" is not the group's verdict: {runs} "
                               f"{word}, on that seed's test rows; over the seeds there is no "
                               f"detectable difference ({self.test_name} "
                               f"{p_text(self.test.p_value)} ≥ {ALPHA}).")
        return out


@dataclass(frozen=True)
class SeedReferences:
    """The adapter against each supervised reference over the seeds.

    Attributes:
        compared: each reference fitted in at least one run, in registry order.
        not_fitted: ``{name: why}`` for each reference fitted in no run (its
            ``reference_notes`` over the runs, distinct ones joined by ``; ``).
        strongest: the compared references of the highest mean accuracy over their runs:
            one, or several on a tie (in registry order); empty when none was fitted.
    """

    compared: list[ReferenceOverSeeds]
    not_fitted: dict[str, str]
    strongest: list[ReferenceOverSeeds]

    @property
    def lines(self) -> list[str]:
        """The section ``lorasent seeds`` ends with: a heading, the verdict against the
        strongest reference (or the tied ones), each reference's lines
        (:meth:`ReferenceOverSeeds.lines`), then those fitted in no run and why."""
        out = [f"The adapter against each reference over the seeds (accuracy; better or "
               f"worse only at p < {ALPHA}):"]
        if not self.compared:
            out.append("No supervised reference was fitted in any run.")
        elif len(self.strongest) == 1:
            best = self.strongest[0]
            out.append(f"Against the strongest reference, {best.entry.short} (mean accuracy "
                       f"{best.mean:.4f} over {len(best.seeds)} seeds): {best.verdict()}.")
        else:
            tied = " and ".join(r.entry.short for r in self.strongest)
            verdicts = "; ".join(f"against {r.entry.short} {r.verdict()}"
                                 for r in self.strongest)
            out.append(f"The strongest references tie, {tied} (mean accuracy "
                       f"{self.strongest[0].mean:.4f} over the seeds): {verdicts}.")
        for compared in self.compared:
            out += compared.lines()
        out += [f"{BY_NAME[name].short}: not fitted in any run "
                f"({why or 'eval.json gives no reason'})"
                for name, why in self.not_fitted.items()]
        return out


def _spread(values: Sequence[float]) -> Spread:
    """Values, their mean and sample sd (ddof 1, :meth:`GroupComparison.spread`'s)."""
    return Spread(values=list(values), mean=float(np.mean(values)),
                  sd=float(np.std(values, ddof=1)) if len(values) > 1 else None)


def _reference_record(r: ReferenceOverSeeds) -> ReferenceRecord:
    """One reference over the seeds as the seeds record keeps it."""
    return ReferenceRecord(
        name=r.entry.name, seeds=list(r.seeds), reference=_spread(r.reference),
        adapter=_spread(r.adapter), test=None if r.test is None else r.test_name,
        p_value=None if r.test is None else r.test.p_value, outcome=r.outcome,
        verdict=r.verdict(), paired=[None if p is None else p.verdict for p in r.paired])


def references_over_seeds(runs: Sequence[tuple[int, EvalMetrics]]) -> SeedReferences:
    """The adapter against each supervised reference (registry order) over ``runs``,
    ``(base.seed, eval.json)`` each, as :class:`SeedReferences`.

    A reference null or absent in every run is listed as not fitted, with its
    ``reference_notes``; one fitted in some runs only is compared over those (the
    adapter over the same runs). Its accuracy and the adapter's over those runs are
    compared as groups: Welch's t-test (:func:`lorasent.statistics.group_comparison`,
    as ``lorasent compare`` compares groups of seeds), or, where the reference scores
    the same in every run (one that does not move with the seed), the one-sample t-test
    of the adapter's accuracies against that value
    (:func:`lorasent.statistics.constant_comparison`). The strongest is the highest
    mean accuracy; means within 1e-12 of it tie (the same k/N values summed in another
    order).
    """
    compared: list[ReferenceOverSeeds] = []
    not_fitted: dict[str, str] = {}
    for entry in SUPERVISED:
        have = [(seed, evals, ref) for seed, evals in runs
                if (ref := (evals.references or {}).get(entry.name)) is not None]
        notes = {seed: (evals.reference_notes or {}).get(entry.name, "")
                 for seed, evals in runs
                 if (evals.references or {}).get(entry.name) is None}
        if not have:
            not_fitted[entry.name] = "; ".join(dict.fromkeys(n for n in notes.values() if n))
            continue
        reference = tuple(ref.accuracy for _, _, ref in have)
        adapter = tuple(evals.accuracy for _, evals, _ in have)
        test = (None if len(have) < 2
                else constant_comparison("accuracy", reference[0], adapter)
                if len(set(reference)) == 1
                else group_comparison("accuracy", reference, adapter))
        compared.append(ReferenceOverSeeds(entry, tuple(seed for seed, _, _ in have),
                                           reference, adapter,
                                           tuple(ref.paired for _, _, ref in have),
                                           notes, test))
    best = max((r.mean for r in compared), default=0.0)
    strongest = [r for r in compared if np.isclose(r.mean, best, rtol=0, atol=1e-12)]
    return SeedReferences(compared, not_fitted, strongest)


def run_seeds(*, n: int, name: str, sets: Sequence[str] = (), jobs: int = 1,
              base_seed: int, repo: Path = Path("."), timeout_s: float | None = None,
              progress: Callable[[str], None] = lambda line: None) -> SeedsResult:
    """Queue ``n`` experiments ``<name>-seed<S>`` (S = base_seed, base_seed + 1, ...),
    run them ``jobs`` at a time and wait for them.

    Args:
        n: runs, at least 2 (one gives no spread).
        name: prefix of the experiment names.
        sets: extra ``key=value`` params changes, as ``dvc exp run -S`` takes them.
        jobs: queue workers (``dvc queue start -j``).
        base_seed: the first seed (the params' ``base.seed``).
        timeout_s: give up waiting after this many seconds (None: wait for the queue).
        progress: called with a line for the user: the uncommitted params every run
            takes, each run's status as it changes.

    Raises:
        LorasentError: before anything is queued: ``n`` < 2, a ``name`` or ``-S`` that
            ``lorasent sweep`` would refuse too (its :func:`~lorasent.experiments.grid.plan`:
            ``-S base.seed``, a key given twice, several values of a key), a run whose
            params are invalid (:func:`~lorasent.experiments.grid.check_params`), an
            experiment of that name; after: ``dvc`` is neither beside the running Python
            nor on PATH (``lorasent.programs.program``), DVC refuses to queue, or the wait
            timed out.
    """
    from lorasent.experiments.grid import check_params, plan, with_sets
    from lorasent.params import read_yaml

    if n < 2:
        raise LorasentError(f"seeds: -n {n}: at least 2 runs are needed to measure a spread")
    specs = plan(name, sets, n, base_seed, command="seeds", grid=False)
    try:
        params_text = (repo / "params.yaml").read_text(encoding="utf-8")
    except OSError as err:
        raise LorasentError(f"seeds: cannot read {repo / 'params.yaml'}, the params every "
                            f"run takes: {err.strerror or err}") from None
    check_params(params_text, specs, command="seeds", one_process=False)
    params = with_sets(read_yaml(params_text, "params.yaml"), specs[0].sets)
    runs = {spec.name: spec.seed for spec in specs}
    existing = set(run_dvc(repo, "exp", "list", "--all-commits", "--name-only",
                           as_json=False, command="seeds").split())
    if clash := sorted(existing & set(runs)):
        raise LorasentError(f"seeds: experiments {', '.join(clash)} exist already; choose "
                            f"another --name, or remove them (dvc exp remove {' '.join(clash)})")
    uncommitted = [f"{key}: {v.get('old')} -> {v.get('new')}"
                   for keys in run_dvc(repo, "params", "diff", "--json",
                                       command="seeds").values()
                   for key, v in keys.items()]
    if uncommitted:
        progress("seeds: params.yaml differs from HEAD, and every run takes it: "
                 + "; ".join(uncommitted) + " (after a `dvc exp run`, `git checkout -- . && "
                 "dvc checkout` returns to HEAD's params)")
    for spec in specs:
        run_dvc(repo, "exp", "run", "--queue", "-n", spec.name,
                *(arg for s in spec.sets for arg in ("-S", s)), as_json=False, command="seeds")
    start = functools.partial(_start_workers, repo, jobs)
    start()
    progress(f"seeds: queued {', '.join(runs)}; running {jobs} at a time "
             f"(`dvc queue status`, `dvc queue logs {next(iter(runs))}` to follow)")
    statuses = wait_for(repo, list(runs), timeout_s, progress, restart=start)
    commits = resolve_commits(repo, *runs)
    sides = {exp: read_side(repo, exp, commits) for exp in runs if exp in commits}
    return SeedsResult([SeedRun(exp, seed, statuses[exp],
                                sides[exp].evals if exp in sides else None,
                                sides[exp].validation if exp in sides else None)
                        for exp, seed in runs.items()], params)


def _start_workers(repo: Path, jobs: int) -> None:
    """``dvc queue start -j jobs``. dvc-task forks each worker from a process that keeps
    the caller's stdout and stderr until the worker exits: a pipe here would be read
    until then, so no pipe."""
    subprocess.run([program("dvc"), "queue", "start", "-j", str(jobs)], cwd=repo, check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=environment())


def wait_for(repo: Path, names: Sequence[str], timeout_s: float | None = None,
             progress: Callable[[str], None] = lambda line: None,
             restart: Callable[[], None] | None = None) -> dict[str, str]:
    """Poll ``dvc queue status`` until none of ``names`` is queued or running; returns
    ``{name: final status}``. Each change of status goes to ``progress``.

    A worker can stop while experiments are still queued (one that took an earlier
    `dvc queue stop` still waiting in the broker for a shutdown message, for example):
    when three polls in a row find queued experiments and no worker, ``restart`` starts
    workers again, at most once per experiment.

    ``dvc queue status`` reads the JSON files its workers write, and one read while a
    worker writes fails ("unexpected error - Expecting value: line 1 column 1 (char 0)",
    the race of treeverse/dvc#8014): a failed look is taken again at the next poll, and
    only ``STATUS_TRIES`` failures in a row are an error.

    Raises:
        LorasentError: still pending after ``timeout_s`` seconds, queued with no
            worker and no restart left, or ``dvc queue status`` failed ``STATUS_TRIES``
            times in a row (its last error).
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    started, idle_polls, restarts = time.monotonic(), 0, len(names)
    seen: dict[str, str] = {}
    failures = 0
    while True:
        statuses, workers = {}, None
        try:
            shown = run_dvc(repo, "queue", "status", as_json=False, command="seeds")
        except LorasentError:
            failures += 1
            if failures == STATUS_TRIES:
                raise
            time.sleep(POLL_S)
            continue
        failures = 0
        for line in shown.splitlines():
            words = line.split()
            for exp in names:
                if exp in words:
                    statuses[exp] = words[-1]
            if line.startswith("Worker status:"):
                workers = sum(int(w) for w in re.findall(r"\d+", line))
        for exp, status in statuses.items():
            if seen.get(exp) != status:
                progress(f"seeds: {exp} {status} ({time.monotonic() - started:.0f} s)")
        seen = statuses
        pending = [exp for exp in names if statuses.get(exp) in (None, "Queued", "Running")]
        if not pending:
            return statuses
        idle_polls = idle_polls + 1 if workers == 0 else 0
        if idle_polls >= IDLE_POLLS:
            if restart is None or restarts == 0:
                raise LorasentError(f"seeds: {', '.join(pending)} queued but no queue worker "
                                    "runs; `dvc queue start` runs them")
            progress(f"seeds: no queue worker runs while {', '.join(pending)} wait; "
                     "starting one again")
            restart()
            restarts, idle_polls = restarts - 1, 0
        if deadline is not None and time.monotonic() > deadline:
            raise LorasentError(f"seeds: {', '.join(pending)} still pending after "
                                f"{timeout_s:.0f} s; `dvc queue status` to follow them")
        time.sleep(POLL_S)
