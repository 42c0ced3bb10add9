"""``lorasent learning-curve``: would more labels help? Accuracy against training rows.

Usage: ``lorasent learning-curve [--fractions 0.125,0.25,0.5,1] [--seeds 3] [--name lc]``
(and ``lorasent sweep``'s ``--address``, ``--cpus-per-run``, ``--num-gpus``,
``--git-remote``, ``--cache-dir``)

HEAD's params are trained on nested stratified fractions of the training split
(``train.fraction``, :mod:`lorasent.subsets`: each larger subset holds the smaller, for a
given ``base.seed``), each over ``--seeds`` seeds, through ``lorasent sweep``
(:mod:`lorasent.review.sweep`: each run a DVC experiment ``<name>-fraction<f>-seed<S>``,
spread over the GPUs and machines of a Ray cluster). ``base.seed`` draws the split too,
so a seed's runs share one test split (and one order of the training rows) whatever the
fraction, and the spread over seeds holds both the training's noise and the test rows'
draw. Runs that landed before as experiments of HEAD, with the same params, seed and
fraction, are reused, not retrained (the command resumes).

It writes to ``--out`` (default ``reports/learning-curve-<name>``):

- ``learning_curve.json``: per fraction, the training rows, each seed's accuracy and
  macro-F1, their mean and sample standard deviation over seeds, and the 95% test-row
  interval of the mean accuracy (:func:`lorasent.statistics.intervals` on the seeds'
  test rows pooled); the majority-class and zero-shot baselines; the trend (accuracy per
  doubling of the rows, :func:`trend`); the fit and projection (none when accuracy
  falls); the runs that failed;
- ``learning-curve.png``: accuracy against training rows (log scale), the interval band,
  each run, and the baselines as lines (Vega-Lite, drawn by vl-convert as the reports'
  plots are);
- ``learning_curve.md``: the report section.

The fit: accuracy = a − b·n^(−c) (a saturating power law: Hestness et al. 2017, "Deep
Learning Scaling is Predictable, Empirically", arXiv:1712.00409; Figueroa et al. 2012,
"Predicting sample size required for classification performance", BMC Medical
Informatics and Decision Making 12:8) by least squares over every run
(``scipy.optimize.curve_fit``, bounds 0 < a ≤ 1, b ≥ 0, c > 0), projected to 2× and 4×
the full training rows; the interval is a percentile bootstrap over the runs (each
fraction's seeds drawn with replacement, refitted :data:`FIT_RESAMPLES` times).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lorasent.artifacts import output_dir, read_provenance, write_json
from lorasent.errors import LorasentError
from lorasent.params import ParamsError, parse_params, read_yaml
from lorasent.review.collect import git_lines, read_at
from lorasent.review.markup import md_text
from lorasent.review.render import _draw, table
from lorasent.review.sweep import (
    RunResult,
    RunSpec,
    SweepResult,
    SweepRun,
    log_place,
    run_one,
    sweep,
    with_sets,
)
from lorasent.statistics import BOOTSTRAP_SEED, CONFIDENCE, intervals, percentile_interval
from lorasent.subsets import subset_counts

FRACTIONS = (0.125, 0.25, 0.5, 1.0)  # the default: 1/8, 1/4, 1/2 and all
FIT_RESAMPLES = 1000  # bootstrap refits of the power law (each ~1 ms)
FIT_PARAMS = 3        # a, b, c: a fit needs at least this many distinct fractions
A_MAX = 1.0           # the fit's bound on its ceiling a: accuracy cannot pass 1
# A projected gain whose upper bound is below this (accuracy, absolute: one point) is
# "flat": more labels like these are not expected to help. A choice of lorasent's.
FLAT_GAIN = 0.01
# The fit's b ≥ 0 makes every projected gain ≥ 0; a lower bound under half the last
# printed digit (+0.000) is 0, not a gain.
ZERO_GAIN = 0.0005
JSON_FILE = "learning_curve.json"
MD_FILE = "learning_curve.md"
PLOT_TITLE = "Learning curve"  # the PNG is learning-curve.png (render's slug of it)
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
        LorasentError: a fraction whose subset would miss a class (one line naming them).
    """
    text = read_at(repo, "HEAD", "metrics/data.json")
    try:
        counts = json.loads(text)["class_counts"]["train"] if text else None
    except (ValueError, KeyError, TypeError):
        counts = None
    if not isinstance(counts, dict):
        return {}
    return {f: sum(subset_counts(counts, f).values()) for f in fractions}


# ------------------------------------------------------------------ the fit

def power_law(n: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    """a − b·n^(−c), for ``n`` > 0 (float array, any shape)."""
    return a - b * np.power(n, -c)


@dataclass(frozen=True)
class Fit:
    """accuracy = a − b·n^(−c), n the training rows."""

    a: float
    b: float
    c: float

    def at(self, n: float) -> float:
        return float(power_law(np.asarray(float(n)), self.a, self.b, self.c))

    @property
    def at_bound(self) -> bool:
        """The ceiling a at its bound :data:`A_MAX` (to 1e-6): the runs show no levelling
        off, and the bound, not the data, limits the projected gains."""
        return self.a >= A_MAX - 1e-6


def fit_power_law(rows: Sequence[float], accuracy: Sequence[float]) -> Fit | None:
    """The least-squares fit of accuracy = a − b·n^(−c) to runs ``(rows[i], accuracy[i])``
    (``scipy.optimize.curve_fit``, trust-region reflective, bounds 0 < a ≤ 1, b ≥ 0,
    0 < c ≤ 10); None when it does not converge or fewer than :data:`FIT_PARAMS`
    distinct row counts are given. n is scaled by its largest value while fitting (the
    same curve, better conditioned)."""
    from scipy.optimize import OptimizeWarning, curve_fit

    n, y = np.asarray(rows, dtype=float), np.asarray(accuracy, dtype=float)
    if len(set(n.tolist())) < FIT_PARAMS:
        return None
    scale = float(n.max())
    x = n / scale
    a0 = min(A_MAX, float(y.max()) + 0.01)
    b0 = max(a0 - float(y[x == x.min()].mean()), 1e-3) * float(x.min()) ** 0.5
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            (a, b, c), _ = curve_fit(power_law, x, y, p0=(a0, b0, 0.5),
                                     bounds=([1e-9, 0.0, 1e-6], [A_MAX, np.inf, 10.0]),
                                     method="trf", maxfev=20_000)
    except (RuntimeError, ValueError):
        return None
    # back to rows: b' x^-c = b' scale^c n^-c
    return Fit(float(a), float(b) * scale ** float(c), float(c))


@dataclass(frozen=True)
class Projection:
    """The fit over every run and the projected gains in accuracy at 2× and 4× the full
    training rows, each with its bootstrap interval over the runs."""

    fit: Fit
    full_rows: int
    gain: dict[int, float]                    # {2: f(2N) - f(N), 4: f(4N) - f(N)}
    interval: dict[int, tuple[float, float]]  # their 95% percentile intervals
    seeds: int                                # the fewest runs of a fraction
    resamples: int                            # bootstrap refits that converged
    requested: int = FIT_RESAMPLES            # bootstrap refits tried
    refits_at_bound: int = 0                  # converged refits whose a is at A_MAX


def project(points: Sequence[tuple[int, Sequence[float]]],
            resamples: int = FIT_RESAMPLES) -> Projection | None:
    """Fit the runs ``points`` (``(training rows, accuracy of each seed)`` per fraction,
    the full training split's rows the largest) and project 2× and 4× the largest.

    The interval: ``resamples`` refits, each on the seeds of every fraction drawn with
    replacement (numpy's generator seeded :data:`lorasent.statistics.BOOTSTRAP_SEED`),
    their :data:`lorasent.statistics.CONFIDENCE` percentile interval. None: fewer than
    :data:`FIT_PARAMS` fractions with runs, or the fit over every run failed.
    """
    points = [(n, list(accs)) for n, accs in points if accs]
    if len(points) < FIT_PARAMS:
        return None
    rows = [float(n) for n, accs in points for _ in accs]
    fit = fit_power_law(rows, [a for _, accs in points for a in accs])
    if fit is None:
        return None
    full = max(n for n, _ in points)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    drawn: list[tuple[float, float]] = []
    at_bound = 0
    for _ in range(resamples):
        ys = [a for _, accs in points for a in rng.choice(accs, size=len(accs), replace=True)]
        again = fit_power_law(rows, ys)
        if again is not None:
            at_bound += again.at_bound
            drawn.append((again.at(2 * full) - again.at(full), again.at(4 * full) - again.at(full)))
    if drawn:
        low, high = percentile_interval(np.asarray(drawn).T)
        interval = {2: (float(low[0]), float(high[0])), 4: (float(low[1]), float(high[1]))}
    else:
        interval = {2: (math.nan, math.nan), 4: (math.nan, math.nan)}
    gain = {k: fit.at(k * full) - fit.at(full) for k in (2, 4)}
    return Projection(fit, full, gain, interval, min(len(accs) for _, accs in points),
                      len(drawn), resamples, at_bound)


@dataclass(frozen=True)
class Trend:
    """Which way accuracy goes as the training rows grow: the least-squares slope of
    accuracy against log2(training rows) over every run (the accuracy each doubling of
    the rows adds; negative: it falls), its bootstrap interval, and the smallest and
    largest fractions' rows and mean accuracy."""

    slope: float
    interval: tuple[float, float]
    first: tuple[int, float]  # (training rows, mean accuracy) of the smallest fraction
    last: tuple[int, float]   # of the largest
    seeds: int                # the fewest runs of a fraction

    @property
    def falls(self) -> bool:
        """Accuracy falls with more rows: the largest fraction's mean below the
        smallest's and the slope negative, its whole interval below 0 (with one seed at
        a fraction, the slope alone: no spread to tell it from noise)."""
        return self.last[1] < self.first[1] and self.slope < 0 and (
            self.seeds < 2 or self.interval[1] < 0)


def trend(points: Sequence[tuple[int, Sequence[float]]],
          resamples: int = FIT_RESAMPLES) -> Trend | None:
    """The :class:`Trend` of the runs ``points`` (``(training rows, accuracy of each
    seed)`` per fraction): the slope by least squares (``numpy.polyfit``, degree 1, on
    log2 of the rows), its interval from ``resamples`` redraws of each fraction's seeds
    with replacement (the generator and percentiles of :func:`project`). None: fewer than
    2 fractions with runs."""
    points = sorted((n, list(accs)) for n, accs in points if accs)
    if len(points) < 2:
        return None
    x = np.log2([float(n) for n, accs in points for _ in accs])
    slope = float(np.polyfit(x, [a for _, accs in points for a in accs], 1)[0])
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    drawn = [np.polyfit(x, [a for _, accs in points
                            for a in rng.choice(accs, size=len(accs), replace=True)], 1)[0]
             for _ in range(resamples)]
    low, high = percentile_interval(np.asarray([drawn]))
    (n0, a0), (n1, a1) = points[0], points[-1]
    return Trend(slope, (float(low[0]), float(high[0])), (n0, float(np.mean(a0))),
                 (n1, float(np.mean(a1))), min(len(accs) for _, accs in points))


def falling(t: Trend) -> str:
    """The sentence of a curve whose accuracy falls (:attr:`Trend.falls`): no projection,
    the power law only rises."""
    said = (f"accuracy falls as the training rows grow: {t.first[1]:.3f} at {t.first[0]:,} rows, "
            f"{t.last[1]:.3f} at {t.last[0]:,}")
    if t.seeds < 2:
        return (f"{said}, but a fraction with one run has no spread over seeds to tell a fall "
                f"from noise; {3 - t.seeds} more seeds per fraction would (--seeds 3); no "
                "projection")
    return (f"{said} ({_signed(t.slope)} [{_signed(t.interval[0])}, {_signed(t.interval[1])}] "
            "per doubling of the rows); no projection (a − b·n^(−c) only rises): more labels "
            "will not help until that is understood; look at what the larger fractions add: "
            "their training loss (more rows are more steps at one learning rate), their "
            "labels, and the test-label audit (metrics/label_issues.csv)")


def _signed(x: float) -> str:
    return f"{x:+.3f}"


def _gain_text(p: Projection, k: int) -> str:
    low, high = p.interval[k]
    return f"{_signed(p.gain[k])} [{_signed(low)}, {_signed(high)}]"


def sentence(p: Projection | None, fractions: int, t: Trend | None = None) -> str:
    """The answer in one sentence.

    - accuracy falls with more rows (``t``, :attr:`Trend.falls`): it says so
      (:func:`falling`), with no projection;
    - fewer than :data:`FIT_PARAMS` fractions with runs: it cannot fit, no number;
    - one seed at some fraction: no spread to tell noise from a gain;
    - the 2× gain's upper bound below :data:`FLAT_GAIN`: "the curve is flat: ...";
    - else its interval above 0 (:data:`ZERO_GAIN`): "doubling the labels is expected
      to add ...", saying so when the fit's ceiling is at its bound (:attr:`Fit.at_bound`:
      the gains are then the bound's, and larger ones cannot be ruled out);
    - else "too noisy to tell", with the seeds per fraction that would narrow the
      interval to a side (a percentile interval's width shrinks as 1/√seeds:
      ``ceil(seeds · (half width / margin)²)``, the margin being the distance from the
      gain to 0 or to :data:`FLAT_GAIN`, whichever it can reach).
    """
    if t is not None and t.falls:
        return falling(t)
    if p is None:
        return (f"cannot fit accuracy = a − b·n^(−c) ({FIT_PARAMS} parameters) to {fractions} "
                f"fraction{'s' * (fractions != 1)} with runs: give at least {FIT_PARAMS} "
                "(--fractions) for a projection")
    if p.seeds < 2:
        return (f"too noisy to tell: a fraction with one run has no spread over seeds; "
                f"{3 - p.seeds} more seeds per fraction would measure it (--seeds 3)")
    low, high = p.interval[2]
    doubled = f"doubling the labels is expected to add {_gain_text(p, 2)} accuracy"
    if high < FLAT_GAIN:
        return (f"the curve is flat: {doubled}, under {FLAT_GAIN:g}; more labels like these are "
                "not expected to help; look at the test-label audit (metrics/label_issues.csv)")
    if low >= ZERO_GAIN:
        bound = (f"; the fit's ceiling is at its bound, accuracy {A_MAX:g} (and in "
                 f"{p.refits_at_bound:,} of {p.resamples:,} refits): the runs show no levelling "
                 "off yet, so the bound, not the data, limits these gains"
                 if p.fit.at_bound else "")
        return f"{doubled} ({_gain_text(p, 4)} at 4×){bound}"
    half = (high - low) / 2
    margin = max(p.gain[2], FLAT_GAIN - p.gain[2])
    more = max(1, math.ceil(p.seeds * (half / margin) ** 2) - p.seeds)
    return (f"too noisy to tell: {doubled.replace('is expected to add', 'adds')}; about "
            f"{more} more seed{'s' * (more != 1)} per fraction would tell "
            f"(--seeds {p.seeds + more})")


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
    projection: Projection | None = None
    trend: Trend | None = None
    summary_sentence: str = ""
    baselines: dict[str, float | None] = field(default_factory=dict)
    labels: int = 0

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
        p, t = self.projection, self.trend
        return {
            "fractions": fractions,
            "baselines": self.baselines,
            "trend": None if t is None else {
                "model": "accuracy = intercept + slope * log2(n), n = training rows",
                "accuracy_per_doubling": t.slope, "ci95_low": t.interval[0],
                "ci95_high": t.interval[1], "falls": t.falls},
            "fit": None if p is None else {
                "model": "accuracy = a - b * n^(-c), n = training rows",
                "a": p.fit.a, "b": p.fit.b, "c": p.fit.c,
                "full_train_rows": p.full_rows,
                "projected": {f"{k}x": {"train_rows": k * p.full_rows,
                                        "accuracy": p.fit.at(k * p.full_rows),
                                        "gain": p.gain[k], "gain_ci95_low": p.interval[k][0],
                                        "gain_ci95_high": p.interval[k][1]} for k in (2, 4)},
                "a_at_bound": p.fit.at_bound,
                "bootstrap": {"resamples": p.requested, "converged": p.resamples,
                              "a_at_bound": p.refits_at_bound,
                              "seed": BOOTSTRAP_SEED, "confidence": CONFIDENCE},
            },
            "sentence": self.summary_sentence,
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
          resamples: int = FIT_RESAMPLES) -> LearningCurve:
    """The curve of a sweep's runs (grid order: fraction by fraction, seeds within)."""
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
    curve.trend = trend(fitted, resamples)
    # a curve that falls gets no projection: the power law's b >= 0 would call it flat
    curve.projection = (None if curve.trend is not None and curve.trend.falls
                        else project(fitted, resamples))
    curve.summary_sentence = sentence(curve.projection, len(fitted), curve.trend)
    return curve


# ------------------------------------------------------------------ the outputs

def plot_spec(record: dict[str, Any]) -> dict[str, Any]:
    """A Vega-Lite spec: each run's accuracy against training rows (log x), the mean's
    test-row interval as a band, the mean as a line, the fit (to 4× the rows) dotted,
    the baselines as rules."""
    runs = [{"rows": f["train_rows"], "accuracy": r["accuracy"]}
            for f in record["fractions"] for r in f["runs"] if f["train_rows"]]
    means = [{"rows": f["train_rows"], "accuracy": f["accuracy_mean"],
              "low": f["accuracy_ci95_low"], "high": f["accuracy_ci95_high"]}
             for f in record["fractions"] if f["train_rows"] and f["accuracy_mean"] is not None]
    fit = record["fit"] if means else None  # drawn from the smallest fraction's mean
    # ticks at each fraction's rows and at the projections' 2x and 4x (a log axis's own
    # ticks run together near its end: "5,0006,000")
    ticks = sorted({m["rows"] for m in means}
                   | ({k * fit["full_train_rows"] for k in (2, 4)} if fit else set()))
    x = {"field": "rows", "type": "quantitative", "title": "training rows",
         "scale": {"type": "log", "nice": False},
         "axis": {"format": ",d", **({"values": ticks} if ticks else {})}}
    y = {"field": "accuracy", "type": "quantitative", "title": "accuracy (test split)",
         "scale": {"zero": False}}
    layers: list[dict[str, Any]] = [
        {"data": {"values": [m for m in means if m["low"] is not None]}, "mark": {
            "type": "area", "opacity": 0.2},
         "encoding": {"x": x, "y": {**y, "field": "low"}, "y2": {"field": "high"}}},
        {"data": {"values": means}, "mark": {"type": "line", "point": True},
         "encoding": {"x": x, "y": y}},
        {"data": {"values": runs}, "mark": {"type": "point", "opacity": 0.6},
         "encoding": {"x": x, "y": y}},
    ]
    if fit:
        # the fitted power law from the smallest fraction to 4x the full rows, dashed
        grid = np.geomspace(min(m["rows"] for m in means), 4 * fit["full_train_rows"], 40)
        fitted = [{"rows": float(n), "accuracy": float(power_law(n, fit["a"], fit["b"], fit["c"]))}
                  for n in grid]
        layers.append({"data": {"values": fitted}, "mark": {"type": "line", "strokeDash": [2, 2],
                                                             "color": "gray"},
                       "encoding": {"x": x, "y": y}})
    names = {"majority_class": "majority-class baseline", "zero_shot": "zero-shot baseline"}
    rules = [{"accuracy": v, "baseline": names[k]} for k, v in record["baselines"].items()
             if v is not None]
    if rules:
        layers.append({"data": {"values": rules}, "mark": {"type": "rule", "strokeDash": [4, 4]},
                       "encoding": {"y": {"field": "accuracy", "type": "quantitative"},
                                    "color": {"field": "baseline", "type": "nominal"}}})
    return {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "title": PLOT_TITLE,
            "width": 480, "height": 300, "layer": layers}


def markdown(record: dict[str, Any], image: str | None) -> str:
    """The report section: the sentence, the table of fractions, the fit, the failures;
    every value a run or a user controls escaped (:mod:`lorasent.review.markup`)."""
    lines = ["## Learning curve", "", md_text(record["sentence"], None), ""]
    if image:
        lines += [f"![{PLOT_TITLE}]({image})", ""]

    def number(value: float | None, digits: int = 4) -> str:
        return "—" if value is None else f"{value:.{digits}f}"

    rows = []
    for f in record["fractions"]:
        interval = ("—" if f["accuracy_ci95_low"] is None else
                    f"[{number(f['accuracy_ci95_low'])}, {number(f['accuracy_ci95_high'])}]")
        rows.append([f"{f['fraction']:g}", str(f["train_rows"] or "—"), str(len(f["runs"])),
                     number(f["accuracy_mean"]), number(f["accuracy_sd"]), interval,
                     number(f["macro_f1_mean"]), number(f["macro_f1_sd"])])
    lines += table(["fraction", "training rows", "seeds", "accuracy (mean)", "sd over seeds",
                    "95% test-row interval", "macro-F1 (mean)", "sd over seeds"], rows)
    fit = record["fit"]
    if fit:
        lines += ["", f"Fit: accuracy = {fit['a']:.4f} − {fit['b']:.4g}·n^(−{fit['c']:.4f}) "
                  f"(n: training rows; {fit['bootstrap']['converged']} of "
                  f"{fit['bootstrap']['resamples']} bootstrap refits converged)."]
    base = [f"{name.replace('_', ' ')} {number(v)}" for name, v in record["baselines"].items()
            if v is not None]
    if base:
        lines += ["", "Baselines (accuracy): " + md_text(", ".join(base), None) + "."]
    if record["failed"]:
        lines += ["", f"The curve is drawn from the runs that finished; {len(record['failed'])} "
                  "failed:", ""]
        lines += [f"- {md_text(f['experiment'])} ({md_text(' '.join(f['params']))}): "
                  f"{md_text(f['error'])}; log {md_text(f['log'])}" for f in record["failed"]]
    return "\n".join(lines) + "\n"


def write_outputs(curve: LearningCurve, out: Path) -> dict[str, Any]:
    """``learning_curve.json``, the plot and ``learning_curve.md`` in ``out``, replaced as a
    whole (:func:`lorasent.artifacts.output_dir`: the caller checked it with
    :func:`lorasent.artifacts.check_output_folder`); returns the record."""
    record = curve.record()
    with output_dir(out, command=OUT_MARKER) as tmp:
        image = (_draw(plot_spec(record), tmp) if any(f["runs"] for f in record["fractions"])
                 else None)
        write_json(tmp / JSON_FILE, record)
        (tmp / MD_FILE).write_text(markdown(record, image), encoding="utf-8")
    return record


# ------------------------------------------------------------------ resuming, the estimate

def landed_on(repo: Path, commit: str) -> set[str]:
    """The names of the experiments whose baseline is ``commit`` (their refs are
    ``refs/exps/<2 hex>/<38 hex>/<name>``)."""
    names = set()
    for ref in git_lines(repo, "for-each-ref", "--format=%(refname)", "refs/exps") or []:
        parts = ref.strip().split("/")
        if len(parts) == 5 and parts[2] + parts[3] == commit:
            names.add(parts[4])
    return names


def reusable(repo: Path, commit: str, runs: Sequence[RunSpec]) -> list[str]:
    """The runs of the grid that landed before as experiments of ``commit`` (HEAD) with
    the params that run would have (HEAD's params.yaml with its settings).

    Raises:
        LorasentError: an experiment of that name and commit with other params (one line
            naming it and what to do).
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
            raise LorasentError(f"learning-curve: experiment {run.name} of this commit has "
                                "other params than that run would; remove it (dvc exp remove "
                                f"{run.name}) or choose another --name")
        found.append(run.name)
    return found


def estimate(repo: Path, runs: Sequence[RunSpec], fractions: dict[str, float]) -> str:
    """About how long the runs train, from the last training here: its wall time
    (``metrics/provenance/machine/train.json``, git-ignored) times each run's fraction
    of the training split it had; ``unknown`` without that record."""
    try:
        facts = read_provenance(repo / "metrics/provenance/train.json")
    except (OSError, ValueError):
        facts = {}
    seconds = facts.get("wall_time_s")
    if not isinstance(seconds, int | float) or seconds <= 0:
        return ("about how long: unknown (no record of a training on this machine: "
                "metrics/provenance/machine/train.json)")
    share = facts.get("params", {}).get("train", {}).get("fraction", 1.0) or 1.0
    total = sum(seconds * fractions[run.group] / share for run in runs)
    return (f"about {total / 60:.0f} min of training one after the other (the last training "
            f"here took {seconds:.0f} s; each run scaled by its share of the rows; evaluation "
            "not counted, runs side by side take less)")


def learning_curve(*, name: str, fractions: Sequence[float] = FRACTIONS, seeds: int = 3,
                   repo: Path = Path("."), out: Path, progress: Callable[[str], None],
                   runner: Callable[..., RunResult] | None = None,
                   resamples: int = FIT_RESAMPLES, **cluster: Any) -> LearningCurve:
    """Run (or reuse) the grid ``fractions`` × ``seeds`` through :func:`sweep` and write
    the curve to ``out`` (:func:`write_outputs`).

    Args:
        name: the experiments' prefix: ``<name>-fraction<f>-seed<S>``.
        fractions: shares of the training split, each in (0, 1].
        seeds: runs per fraction.
        out: the output folder (checked by the caller).
        progress: called with each line for the user (the plan, the estimate, each run).
        runner: :func:`sweep`'s (tests).
        cluster: :func:`sweep`'s ``address``, ``num_gpus``, ``cpus_per_run``,
            ``git_remote``, ``cache_dir``.

    Raises:
        LorasentError: bad fractions or seeds, a fraction whose subset misses a class,
            a repo or settings :func:`sweep` refuses, an experiment of the grid's name
            with other params; all before any run starts.
    """
    from lorasent.review.sweep import _git, plan

    repo = repo.resolve()
    fractions = sorted(fractions)
    rows = check_classes(repo, fractions)
    sets = fraction_sets(fractions)
    params_text = _git(repo, "show", "HEAD:params.yaml")
    base_seed = parse_params(read_yaml(params_text, "params.yaml"), "params.yaml").base.seed
    grid = plan(name, sets, seeds, base_seed)
    commit = _git(repo, "rev-parse", "HEAD").strip()
    reuse = reusable(repo, commit, grid)
    share = {run.group: f for run, f in zip(grid[::seeds], fractions, strict=True)}

    def checked(_commit: str, todo: list[RunSpec]) -> None:
        progress(f"learning-curve: {len(fractions)} fractions × {seeds} seeds = {len(grid)} "
                 f"runs; {len(reuse)} landed before and are reused, {len(todo)} to run; "
                 + (estimate(repo, todo, share) if todo else "nothing to train"))

    started = time.monotonic()
    result = sweep(name=name, sets=sets, seeds=seeds, repo=repo, progress=progress,
                   reuse=reuse, checked=checked,
                   runner=runner or run_one, **cluster)
    curve = build(result, fractions, rows, resamples)
    write_outputs(curve, out)
    progress(f"learning-curve: done in {time.monotonic() - started:.0f} s")
    return curve
