"""``lorasent learning-curve``: would more labels help? Accuracy against training rows.

Usage: ``lorasent learning-curve [--fractions 0.125,0.25,0.5,1] [--seeds 3] [--name lc]
[--project-to 2]``
(and ``lorasent sweep``'s ``--address``, ``--cpus-per-run``, ``--num-gpus``,
``--git-remote``, ``--cache-dir``, ``--connect-timeout``)

HEAD's params are trained on nested stratified fractions of the training split
(``train.fraction``, :mod:`lorasent.subsets`: each larger subset holds the smaller, for a
given ``base.seed``), each over ``--seeds`` seeds, through ``lorasent sweep``
(:mod:`lorasent.experiments.sweep`: each run a DVC experiment ``<name>-fraction<f>-seed<S>``,
spread over the GPUs and machines of a Ray cluster). ``split.seed`` draws the split, so
every run shares one test split and none trains on another's test rows; a seed's runs
share one order of the training rows whatever the fraction, and the spread over seeds
holds the training's noise and which rows each fraction keeps. Runs that landed before
as experiments of HEAD, with the same params, seed and fraction, are reused, not
retrained (the command resumes).

It writes to ``--out`` (default ``reports/learning-curve-<name>``):

- ``learning_curve.json``: per fraction, the training rows, each seed's accuracy and
  macro-F1, their mean and sample standard deviation over seeds, and the 95% test-row
  interval of the mean accuracy (:func:`lorasent.statistics.intervals` on the seeds'
  test rows pooled); the majority-class and zero-shot baselines; the trend (accuracy per
  doubling of the rows, :func:`~lorasent.experiments.projection.trend`); the backtest
  (:func:`~lorasent.experiments.projection.backtest`); the fit and projection (none when
  accuracy falls); the runs that failed;
- ``learning-curve.png``: accuracy against training rows (log scale), the interval band,
  each run, the fit dotted with the projection's interval as a grey band, and the
  baselines as lines (Vega-Lite, drawn by vl-convert as the reports' plots are);
- ``learning_curve.md``: the report section.

The forms a curve is fitted in are :mod:`lorasent.experiments.curve_forms`; the projection,
its backtest and the trend :mod:`lorasent.experiments.projection`; the sentence
:mod:`lorasent.experiments.curve_sentence`; the record, plot and Markdown
:mod:`lorasent.experiments.curve_report`; the run-time estimate said before the runs start
:mod:`lorasent.experiments.runtime_estimate`. This module plans the grid, runs it and
writes the outputs.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lorasent.atomic import write_json
from lorasent.errors import LorasentError
from lorasent.experiments.curve_report import Analysis, analyse, markdown, plot_spec
from lorasent.experiments.grid import RunSpec, plan
from lorasent.experiments.projection import FIT_RESAMPLES, PROJECT_TO, Projection, Trend
from lorasent.experiments.runtime_estimate import estimate
from lorasent.experiments.sweep import SweepResult, SweepRun, check_options, sweep
from lorasent.experiments.task import RunResult, log_place, run_one
from lorasent.git import git
from lorasent.output_guard import output_dir
from lorasent.params import parse_params, read_yaml
from lorasent.review.collect import read_at
from lorasent.review.render import draw
from lorasent.statistics import intervals
from lorasent.subsets import subset_counts

FRACTIONS = (0.125, 0.25, 0.5, 1.0)  # the default: 1/8, 1/4, 1/2 and all
JSON_FILE = "learning_curve.json"
MD_FILE = "learning_curve.md"
OUT_MARKER = "learning-curve"  # artifacts.check_output_folder's command


# ------------------------------------------------------------------ the grid

def parse_fractions(text: str) -> list[float]:
    """``"0.125,0.25,0.5,1"`` → ``[0.125, 0.25, 0.5, 1.0]``, sorted.

    Raises:
        LorasentError: a value that is not a number, outside (0, 1], or given twice.
    """
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise LorasentError(f"learning-curve: --fractions {text}: {part.strip()!r} is not "
                                "a number; give fractions of the training split such as "
                                "0.125,0.25,0.5,1") from None
        if not 0 < value <= 1:
            raise LorasentError(f"learning-curve: --fractions {text}: {value:g} is not in "
                                "(0, 1]; a fraction of 0 trains on nothing, one above 1 on "
                                "rows the split does not have")
        if value in values:
            raise LorasentError(f"learning-curve: --fractions {text}: {value:g} is given twice")
        values.append(value)
    return sorted(values)


def fraction_sets(fractions: Sequence[float]) -> list[str]:
    """The sweep's one setting: ``train.fraction=0.125,0.25,...,1.0``."""
    return ["train.fraction=" + ",".join(repr(float(f)) for f in fractions)]


def check_classes(repo: Path, fractions: Sequence[float]) -> dict[float, int]:
    """Training rows per fraction (:func:`lorasent.subsets.subset_counts`) from HEAD's
    ``metrics/data.json`` (the split's class counts), or ``{}`` when HEAD has none (the
    split not yet run and committed: the train stage checks then).

    Raises:
        LorasentError: a fraction whose subset would miss a class, or two fractions whose
            subsets have the same rows (rounded up per class: the same subset, nested),
            one line naming them.
    """
    text = read_at(repo, "HEAD", "metrics/data.json")
    try:
        counts = json.loads(text)["class_counts"]["train"] if text else None
    except (ValueError, KeyError, TypeError):
        counts = None
    if not isinstance(counts, dict):
        return {}
    rows = {f: sum(subset_counts(counts, f).values()) for f in fractions}
    same = [(f, g) for f, g in itertools.combinations(sorted(rows), 2) if rows[f] == rows[g]]
    if same:
        f, g = same[0]
        raise LorasentError(f"learning-curve: --fractions {f:g} and {g:g} both train on the "
                            f"same {rows[f]:,} rows (each class's share rounded up, the "
                            "subsets nested: the same runs twice); leave one out or give "
                            "fractions further apart")
    return rows


# ------------------------------------------------------------------ the curve

@dataclass(frozen=True)
class Point:
    """One fraction: its training rows and each seed's landed run."""

    fraction: float
    train_rows: int | None
    runs: list[SweepRun]

    def values(self, key: str) -> list[float]:
        return [float(getattr(run.evals, key)) for run in self.runs if run.evals is not None]


@dataclass
class LearningCurve:
    points: list[Point]
    failed: list[SweepRun]
    sweep: SweepResult
    analysis: Analysis = field(default_factory=Analysis)
    baselines: dict[str, float | None] = field(default_factory=dict)
    labels: int = 0

    @property
    def projection(self) -> Projection | None:
        return self.analysis.projection

    @property
    def trend(self) -> Trend | None:
        return self.analysis.trend

    @property
    def summary_sentence(self) -> str:
        return self.analysis.sentence

    def record(self) -> dict[str, Any]:
        """``learning_curve.json``'s content."""
        fractions = []
        for point in self.points:
            acc, f1 = point.values("accuracy"), point.values("macro_f1")
            fractions.append({
                "fraction": point.fraction,
                "train_rows": point.train_rows,
                "runs": [{"experiment": run.spec.name, "seed": run.spec.seed,
                          "accuracy": run.evals.accuracy, "macro_f1": run.evals.macro_f1}
                         for run in point.runs if run.evals is not None],
                "accuracy_mean": float(np.mean(acc)) if acc else None,
                "accuracy_sd": float(np.std(acc, ddof=1)) if len(acc) > 1 else None,
                "macro_f1_mean": float(np.mean(f1)) if f1 else None,
                "macro_f1_sd": float(np.std(f1, ddof=1)) if len(f1) > 1 else None,
                **self._pooled_interval(point),
            })
        return {
            "fractions": fractions,
            "baselines": self.baselines,
            **self.analysis.record(),
            "failed": [{"experiment": run.spec.name, "params": list(run.spec.sets),
                        "error": run.result.error or "no metrics/eval.json",
                        "log": log_place(run.result)} for run in self.failed],
        }

    def _pooled_interval(self, point: Point) -> dict[str, float | None]:
        """The 95% test-row interval of the mean accuracy: the seeds' test rows pooled
        (equal test splits: the pooled accuracy is the mean)."""
        sides = [run.side for run in point.runs if run.side and run.side.predictions]
        if not sides or len(sides) != len(point.values("accuracy")):
            return {"accuracy_ci95_low": None, "accuracy_ci95_high": None}
        found = intervals(np.concatenate([s.predictions.actual for s in sides if s.predictions]),
                          np.concatenate([s.predictions.predicted for s in sides
                                          if s.predictions]), self.labels)
        return {"accuracy_ci95_low": found["accuracy_ci95_low"],
                "accuracy_ci95_high": found["accuracy_ci95_high"]}


def build(result: SweepResult, fractions: Sequence[float], rows: dict[float, int],
          resamples: int = FIT_RESAMPLES, to: float = PROJECT_TO) -> LearningCurve:
    """The curve of a sweep's runs (grid order: fraction by fraction, seeds within),
    analysed (:func:`analyse`) and projected to ``to``× the largest fraction's rows."""
    groups = list(result.groups().values())
    points = []
    for fraction, runs in zip(fractions, groups, strict=True):
        landed = [run for run in runs if run.evals is not None]
        n = rows.get(fraction)
        if landed and landed[0].side is not None and landed[0].side.train:
            n = int(landed[0].side.train.get("train_rows", n) or 0) or n
        points.append(Point(fraction, n, landed))
    curve = LearningCurve(points, result.failed, result)
    first = next((run.evals for p in points for run in p.runs if run.evals), None)
    if first is not None:
        curve.labels = len(first.labels)
        curve.baselines = {"majority_class": first.baseline.majority_accuracy,
                           "zero_shot": first.baseline.zero_shot_accuracy}
    fitted = [(p.train_rows, p.values("accuracy")) for p in points
              if p.train_rows and p.values("accuracy")]
    top = max(points, key=lambda p: p.fraction)
    curve.analysis = analyse(fitted, resamples=resamples, to=to, failed_largest=None
                             if top.train_rows and top.values("accuracy") else top.fraction)
    return curve


def write_outputs(curve: LearningCurve, out: Path) -> dict[str, Any]:
    """``learning_curve.json``, the plot and ``learning_curve.md`` in ``out``, replaced as a
    whole (:func:`lorasent.output_guard.output_dir`: the caller checked it with
    :func:`lorasent.output_guard.check_output_folder`); returns the record."""
    record = curve.record()
    write_record(record, out)
    return record


def write_record(record: dict[str, Any], out: Path) -> None:
    """:func:`write_outputs` of a record."""
    with output_dir(out, command=OUT_MARKER) as tmp:
        image = (draw(plot_spec(record), tmp) if any(f["runs"] for f in record["fractions"])
                 else None)
        write_json(tmp / JSON_FILE, record)
        (tmp / MD_FILE).write_text(markdown(record, image), encoding="utf-8")


def record_points(record: dict[str, Any]) -> list[tuple[int, list[float]]]:
    """``learning_curve.json``'s runs as :func:`analyse` takes them: ``(training rows,
    each seed's accuracy)`` for every fraction with rows and runs, in the record's order."""
    return [(f["train_rows"], [r["accuracy"] for r in f["runs"]])
            for f in record["fractions"] if f["train_rows"] and f["runs"]]


def refit(record: dict[str, Any], resamples: int = FIT_RESAMPLES,
          to: float = PROJECT_TO) -> dict[str, Any]:
    """``learning_curve.json``'s ``record`` analysed again (:func:`analyse`) from the
    accuracies it holds, the runs not made again: its fractions, baselines and failed
    runs as they are, the trend, backtest, fit and sentence of this code. How the
    committed curve of docs/learning-curve-default/ is kept up to date with the code."""
    points = record_points(record)
    top = max(record["fractions"], key=lambda f: f["fraction"])
    found = analyse(points, resamples=resamples, to=to,
                    failed_largest=None if top["train_rows"] and top["runs"] else top["fraction"])
    return {"fractions": record["fractions"], "baselines": record["baselines"],
            **found.record(), "failed": record["failed"]}


def learning_curve(*, name: str, fractions: Sequence[float] = FRACTIONS, seeds: int = 3,
                   repo: Path = Path("."), out: Path, progress: Callable[[str], None],
                   runner: Callable[..., RunResult] | None = None,
                   resamples: int = FIT_RESAMPLES, project_to: float = PROJECT_TO,
                   **cluster: Any) -> LearningCurve:
    """Run (or reuse) the grid ``fractions`` × ``seeds`` through :func:`sweep` and write
    the curve to ``out`` (:func:`write_outputs`).

    Args:
        name: the experiments' prefix: ``<name>-fraction<f>-seed<S>``.
        fractions: shares of the training split, each in (0, 1].
        seeds: runs per fraction.
        out: the output folder (checked by the caller).
        progress: called with each line for the user (the plan, the estimate, each run).
        runner: :func:`sweep`'s (tests).
        project_to: the projection's end, in multiples of the largest fraction's rows.
        cluster: :func:`sweep`'s ``address``, ``num_gpus``, ``cpus_per_run``,
            ``git_remote``, ``cache_dir``, ``connect_timeout``.

    Raises:
        LorasentError: bad fractions or seeds, a fraction whose subset misses a class,
            two fractions of the same training rows, a repo or settings :func:`sweep`
            refuses, an experiment of the grid's name with other params; all before any
            run starts.
    """
    check_options("learning-curve", address=cluster.get("address"),
                  num_gpus=cluster.get("num_gpus"), cache_dir=cluster.get("cache_dir"))

    repo = repo.resolve()
    fractions = sorted(fractions)
    rows = check_classes(repo, fractions)
    sets = fraction_sets(fractions)
    params_text = git(repo, "show", "HEAD:params.yaml", command="learning-curve")
    base_seed = parse_params(read_yaml(params_text, "params.yaml"), "params.yaml").base.seed
    grid = plan(name, sets, seeds, base_seed, command="learning-curve")
    share = {run.group: f for run, f in zip(grid[::seeds], fractions, strict=True)}

    def checked(_commit: str, todo: list[RunSpec]) -> None:
        progress(f"learning-curve: {len(fractions)} fractions × {seeds} seeds = {len(grid)} "
                 f"runs; {len(grid) - len(todo)} landed before and are reused, {len(todo)} to "
                 "run; " + (estimate(repo, todo, share) if todo else "nothing to train"))

    started = time.monotonic()
    result = sweep(name=name, sets=sets, seeds=seeds, repo=repo, progress=progress,
                   checked=checked, command="learning-curve", runner=runner or run_one,
                   **cluster)
    curve = build(result, fractions, rows, resamples, project_to)
    write_outputs(curve, out)
    progress(f"learning-curve: done in {time.monotonic() - started:.0f} s")
    return curve
