"""``lorasent learning-curve``: would more labels help? Accuracy against training rows.

Usage: ``lorasent learning-curve [--fractions 0.125,0.25,0.5,1] [--seeds 3] [--name lc]
[--project-to 2]``
(and ``lorasent sweep``'s ``--address``, ``--cpus-per-run``, ``--num-gpus``,
``--git-remote``, ``--cache-dir``, ``--connect-timeout``)

HEAD's params are trained on nested stratified fractions of the training split
(``train.fraction``, :mod:`lorasent.subsets`: each larger subset holds the smaller, for a
given ``base.seed``), each over ``--seeds`` seeds, through ``lorasent sweep``
(:mod:`lorasent.review.sweep`: each run a DVC experiment ``<name>-fraction<f>-seed<S>``,
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
  doubling of the rows, :func:`trend`); the backtest (:func:`backtest`); the fit and
  projection (none when accuracy falls); the runs that failed;
- ``learning-curve.png``: accuracy against training rows (log scale), the interval band,
  each run, the fit dotted with the projection's interval as a grey band, and the
  baselines as lines (Vega-Lite, drawn by vl-convert as the reports' plots are);
- ``learning_curve.md``: the report section.

The forms (:func:`fit_power_law`, least squares over every run, ``scipy.optimize.
curve_fit``): accuracy = a − b·n^(−c), a saturating power law (Hestness et al. 2017,
"Deep Learning Scaling is Predictable, Empirically", arXiv:1712.00409; Figueroa et al.
2012, "Predicting sample size required for classification performance", BMC Medical
Informatics and Decision Making 12:8); the error rate's power law 1 − accuracy =
b·n^(−c), two parameters; and the last observation, no further gain, the forecast that
is hard to beat (Kielhöfer et al. 2024; Jain et al. 2023 and Mahmood et al. 2022 on how
a 3-parameter fit on few points overstates the gains; Viering & Loog 2022 survey when
power laws fit at all). The backtest fits each form without the largest fraction and
compares their forecasts of that fraction's mean accuracy with the measured one; the
form that erred least is projected, to 2× the largest fraction's rows (``--project-to``
further), with a percentile bootstrap interval over the runs (each fraction's seeds
drawn with replacement, refitted :data:`FIT_RESAMPLES` times) widened on each side by the
backtest's error scaled to the reach (:meth:`Backtest.margin`). The backtest refits
only: it adds no run.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lorasent.atomic import write_json
from lorasent.errors import LorasentError
from lorasent.output_guard import output_dir
from lorasent.params import parse_params, read_yaml
from lorasent.programs import program
from lorasent.provenance import read_machine_record, record_sha256
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
)
from lorasent.run_pipeline import one_line
from lorasent.statistics import BOOTSTRAP_SEED, CONFIDENCE, intervals, percentile_interval
from lorasent.subsets import subset_counts

FRACTIONS = (0.125, 0.25, 0.5, 1.0)  # the default: 1/8, 1/4, 1/2 and all
FIT_RESAMPLES = 1000  # bootstrap refits of each form (each ~1 ms)
# The forms a curve is fitted in (fit_power_law), compared by the backtest.
SATURATING, POWER, LAST = "saturating", "power", "last_observation"
FORMS = {SATURATING: "a − b·n^(−c)", POWER: "1 − b·n^(−c)", LAST: "the last observation"}
FORM_MODELS = {SATURATING: "accuracy = a - b * n^(-c), n = training rows",
               POWER: "error rate = 1 - accuracy = b * n^(-c), n = training rows",
               LAST: "accuracy = the largest fraction's mean accuracy (no further gain)"}
FORM_FRACTIONS = {SATURATING: 3, POWER: 2, LAST: 1}  # distinct fractions (parameters) each needs
BACKTEST_FRACTIONS = 3  # a fit on 2 fractions (the power law's parameters), checked on a third
A_MAX = 1.0           # the fit's bound on its ceiling a: accuracy cannot pass 1
C_MIN, C_MAX = 1e-6, 10.0  # the fits' bounds on the exponent c
# The projection reaches this many times the largest fraction's training rows unless
# --project-to asks further: a fit extrapolates worse the further it goes (Viering & Loog
# 2022, "The Shape of Learning Curves: A Review").
PROJECT_TO = 2.0
BAND_POINTS = 12      # the plot's band: the projection's interval at this many row counts
# A backtest error (accuracy, absolute) above this calls the projection rough. A choice of
# lorasent's: two accuracy points, twice FLAT_GAIN.
ROUGH_ERROR = 0.02
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


# ------------------------------------------------------------------ the fit

def power_law(n: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    """a − b·n^(−c), for ``n`` > 0 (float array, any shape)."""
    return a - b * np.power(n, -c)


def _error_power_law(n: np.ndarray, b: float, c: float) -> np.ndarray:
    """1 − b·n^(−c): the error rate b·n^(−c) as accuracy."""
    return power_law(n, A_MAX, b, c)


@dataclass(frozen=True)
class Fit:
    """A form fitted to the runs, as accuracy = a − b·n^(−c), n the training rows:
    :data:`SATURATING` fits a, b and c; :data:`POWER` fits b and c, a being 1 (the error
    rate's power law); :data:`LAST` is the largest fraction's mean (a; b = 0: no further
    gain). ``bounds``: the fitted parameters that sit at a bound of the fit, e.g.
    ``("a = 1",)``: the data do not fix them."""

    a: float
    b: float
    c: float
    form: str = SATURATING
    bounds: tuple[str, ...] = ()

    def at(self, n: float) -> float:
        return float(power_law(np.asarray(float(n)), self.a, self.b, self.c))

    @property
    def at_bound(self) -> bool:
        """The saturating form's ceiling a at its bound :data:`A_MAX` (to 1e-6): the runs
        show no levelling off, and the bound, not the data, limits the projected gains
        (the form is then the error rate's power law, :data:`POWER`)."""
        return self.form == SATURATING and self.a >= A_MAX - 1e-6


def _bounds(a: float | None, b: float, c: float) -> tuple[str, ...]:
    """The parameters at a bound of :func:`fit_power_law`'s (``b`` as fitted, on rows
    scaled by their largest value; ``a`` None: not fitted), to 1e-6."""
    return tuple(name for name, at in (
        (f"a = {A_MAX:g}", a is not None and a >= A_MAX - 1e-6), ("b = 0", b <= 1e-9),
        ("c = 0", c <= C_MIN + 1e-6), (f"c = {C_MAX:g}", c >= C_MAX - 1e-6)) if at)


def fit_power_law(rows: Sequence[float], accuracy: Sequence[float],
                  form: str = SATURATING) -> Fit | None:
    """The least-squares fit of a form to runs ``(rows[i], accuracy[i])``
    (``scipy.optimize.curve_fit``, trust-region reflective):

    - :data:`SATURATING`: accuracy = a − b·n^(−c), bounds 0 < a ≤ 1, b ≥ 0, 0 < c ≤ 10;
    - :data:`POWER`: the error rate 1 − accuracy = b·n^(−c), bounds b ≥ 0, 0 < c ≤ 10;
    - :data:`LAST`: no fit, the largest row count's mean accuracy (Kielhöfer et al. 2024's
      "last observation" forecast).

    None when it does not converge or fewer distinct row counts are given than the form
    needs (:data:`FORM_FRACTIONS`). n is scaled by its largest value while fitting (the
    same curve, better conditioned).
    """
    from scipy.optimize import OptimizeWarning, curve_fit

    n, y = np.asarray(rows, dtype=float), np.asarray(accuracy, dtype=float)
    if len(set(n.tolist())) < FORM_FRACTIONS[form]:
        return None
    if form == LAST:
        return Fit(float(y[n == n.max()].mean()), 0.0, 1.0, LAST)
    scale = float(n.max())
    x = n / scale
    a0 = min(A_MAX, float(y.max()) + 0.01) if form == SATURATING else A_MAX
    b0 = max(a0 - float(y[x == x.min()].mean()), 1e-3) * float(x.min()) ** 0.5
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            if form == SATURATING:
                (a, b, c), _ = curve_fit(power_law, x, y, p0=(a0, b0, 0.5),
                                         bounds=([1e-9, 0.0, C_MIN], [A_MAX, np.inf, C_MAX]),
                                         method="trf", maxfev=20_000)
            else:
                (b, c), _ = curve_fit(_error_power_law, x, y, p0=(b0, 0.5),
                                      bounds=([0.0, C_MIN], [np.inf, C_MAX]), method="trf",
                                      maxfev=20_000)
                a = A_MAX
    except (RuntimeError, ValueError):
        return None
    # back to rows: b' x^-c = b' scale^c n^-c
    return Fit(float(a), float(b) * scale ** float(c), float(c), form,
               _bounds(float(a) if form == SATURATING else None, float(b), float(c)))


def _redrawn(points: Sequence[tuple[int, Sequence[float]]],
             resamples: int) -> Iterator[list[float]]:
    """``resamples`` redraws of the runs' accuracies: each fraction's seeds drawn with
    replacement (numpy's generator seeded :data:`lorasent.statistics.BOOTSTRAP_SEED`), in
    the order of ``points``."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    for _ in range(resamples):
        yield [a for _, accs in points for a in rng.choice(accs, size=len(accs), replace=True)]


def _spread(points: Sequence[tuple[int, Sequence[float]]],
            drawn: Any) -> tuple[list[float], list[float]]:
    """The :data:`lorasent.statistics.CONFIDENCE` percentile interval of each row of
    ``drawn`` (the refits on :func:`_redrawn` runs): the seeds' spread. NaN (unknown) where
    every fraction of ``points`` has one run: a redraw of one run is that run, so the
    interval would be of width 0, which says nothing of the spread over seeds."""
    rows = len(drawn)
    if max(len(accs) for _, accs in points) < 2:
        return [math.nan] * rows, [math.nan] * rows
    low, high = percentile_interval(np.asarray(drawn))
    return [float(v) for v in low], [float(v) for v in high]


@dataclass(frozen=True)
class Projection:
    """The chosen form fitted to every run and the projected gains in accuracy at 2× the
    largest fraction's training rows (and at ``to``× when asked), each with the bootstrap
    interval over the runs (``seed_interval``: the seeds' spread alone); ``seed_band``:
    ``(rows, low, high)``, that interval of the projected accuracy from those rows to
    ``to``× them; ``check``: the backtest whose error widens both (None: untested). The
    intervals reported (:attr:`interval`, :attr:`band`, the plot's) are the seeds'
    widened on each side by :meth:`margin_at` the reach."""

    fit: Fit
    full_rows: int
    gain: dict[float, float]                    # {2: f(2N) - f(N), to: f(to·N) - f(N)}
    seed_interval: dict[float, tuple[float, float]]  # their 95% percentile intervals
    seeds: int                                  # the fewest runs of a fraction
    resamples: int                              # bootstrap refits that converged
    requested: int = FIT_RESAMPLES              # bootstrap refits tried
    refits_at_bound: int = 0                    # converged refits whose a is at A_MAX
    to: float = PROJECT_TO
    seed_band: tuple[tuple[float, float, float], ...] = ()
    check: Backtest | None = None
    most_seeds: int = 2                         # the most runs of a fraction

    def margin_at(self, reach: float) -> float:
        """Accuracy added to each side of the seeds' interval at ``reach``× the largest
        fraction's rows (:meth:`Backtest.margin`; 0 without a backtest)."""
        return self.check.margin(reach) if self.check is not None else 0.0

    @property
    def margin(self) -> dict[float, float]:
        """:meth:`margin_at` each projected multiple."""
        return {k: self.margin_at(k) for k in self.gain}

    @property
    def interval(self) -> dict[float, tuple[float, float]]:
        """The gains' intervals: the seeds' widened by :attr:`margin`, clipped to the
        gains accuracy can make (:meth:`gain_range`; :attr:`clipped` says where)."""
        return {k: _clip(low - self.margin_at(k), high + self.margin_at(k), *self.gain_range)
                for k, (low, high) in self.seed_interval.items()}

    @property
    def gain_range(self) -> tuple[float, float]:
        """The gains an accuracy in [0, 1] can make from the fit's at the largest
        fraction's rows: ``[-f(N), 1 - f(N)]``."""
        start = self.fit.at(self.full_rows)
        return -start, 1.0 - start

    @property
    def band(self) -> tuple[tuple[float, float, float], ...]:
        """:attr:`seed_band` widened by :meth:`margin_at` each row count's reach, clipped
        to accuracy's range [0, 1] (:attr:`clipped` says where)."""
        return tuple((n, *_clip(low - self.margin_at(n / self.full_rows),
                                high + self.margin_at(n / self.full_rows), 0.0, 1.0))
                     for n, low, high in self.seed_band)

    @property
    def clipped(self) -> list[str]:
        """One phrase per reported interval that reached past accuracy's range [0, 1]
        and was clipped to it (widening by the backtest's error, or a fit that is not
        bounded, can reach past it): what, where, and the value before."""
        found = []
        floor, ceiling = self.gain_range
        for k, (low, high) in self.seed_interval.items():
            low, high = low - self.margin_at(k), high + self.margin_at(k)
            if high > ceiling or low < floor:
                value = high if high > ceiling else low
                found.append(f"the gain's interval at {k:g}× (it reached accuracy "
                             f"{self.fit.at(self.full_rows) + value:.4f})")
        past = [(n, low - self.margin_at(n / self.full_rows),
                 high + self.margin_at(n / self.full_rows)) for n, low, high in self.seed_band]
        out = [(n, hi if hi > 1 else lo) for n, lo, hi in past if hi > 1 or lo < 0]
        if out:
            n, value = out[0]
            found.append(f"the band from {round(n):,} training rows on (it reached accuracy "
                         f"{value:.4f} there)")
        return found

    def clipped_note(self) -> str:
        """``; clipped to accuracy's range [0, 1]: ...`` (:attr:`clipped`), or empty."""
        return (f"; clipped to accuracy's range [0, 1]: {'; '.join(self.clipped)}"
                if self.clipped else "")


def _clip(low: float, high: float, floor: float, ceiling: float) -> tuple[float, float]:
    """``[low, high]`` within ``[floor, ceiling]`` (NaN kept: no interval)."""
    return (low if math.isnan(low) else min(max(low, floor), ceiling),
            high if math.isnan(high) else max(min(high, ceiling), floor))


def project(points: Sequence[tuple[int, Sequence[float]]], resamples: int = FIT_RESAMPLES,
            form: str = SATURATING, to: float = PROJECT_TO,
            check: Backtest | None = None) -> Projection | None:
    """Fit ``form`` to the runs ``points`` (``(training rows, accuracy of each seed)`` per
    fraction, the largest fraction's rows N the base) and project 2N and ``to``·N.

    The interval: ``resamples`` refits on :func:`_redrawn` runs, their
    :data:`lorasent.statistics.CONFIDENCE` percentile interval (the seeds' spread), widened
    on each side by the backtest ``check``'s error scaled to the reach
    (:meth:`Backtest.margin`: the form's own error, which no redraw of the seeds shows;
    none without a backtest); the band the same at :data:`BAND_POINTS` row counts from N
    to ``to``·N. None: fewer fractions with runs than the form needs
    (:data:`FORM_FRACTIONS`), or the fit over every run failed.
    """
    points = [(n, list(accs)) for n, accs in points if accs]
    rows = [float(n) for n, accs in points for _ in accs]
    fit = fit_power_law(rows, [a for _, accs in points for a in accs], form)
    if fit is None:
        return None
    full = max(n for n, _ in points)
    multiples = sorted({2.0, float(to)})
    grid = np.geomspace(full, to * full, BAND_POINTS)
    drawn: list[list[float]] = []
    at_bound = 0
    for ys in _redrawn(points, resamples):
        again = fit_power_law(rows, ys, form)
        if again is not None:
            at_bound += again.at_bound
            drawn.append([again.at(k * full) - again.at(full) for k in multiples]
                         + [again.at(n) for n in grid])
    if drawn:
        low, high = _spread(points, np.asarray(drawn).T)
    else:
        low = high = [math.nan] * (len(multiples) + len(grid))
    k = len(multiples)
    return Projection(fit, full, {m: fit.at(m * full) - fit.at(full) for m in multiples},
                      {m: (low[i], high[i]) for i, m in enumerate(multiples)},
                      min(len(accs) for _, accs in points), len(drawn), resamples, at_bound,
                      float(to), tuple((float(n), lo, hi) for n, lo, hi
                                       in zip(grid, low[k:], high[k:], strict=True)), check,
                      max(len(accs) for _, accs in points))


@dataclass(frozen=True)
class Forecast:
    """One form's forecast, from the smaller fractions, of the largest one's mean
    accuracy, with its bootstrap interval."""

    fit: Fit
    predicted: float
    interval: tuple[float, float]


@dataclass(frozen=True)
class Backtest:
    """Each form (:data:`FORMS`) fitted without the largest fraction and its forecast of
    that fraction's mean accuracy, measured over its seeds."""

    rows: int                     # the largest fraction's training rows
    measured: float               # its mean accuracy
    fitted_on: tuple[int, ...]    # the smaller fractions' training rows
    forecasts: dict[str, Forecast]

    def error(self, form: str) -> float:
        """Predicted minus measured (accuracy)."""
        return self.forecasts[form].predicted - self.measured

    def inside(self, form: str) -> bool | None:
        """The measured mean within the forecast's interval; None: no interval (one seed
        at some fraction: the spread over seeds is unknown)."""
        low, high = self.forecasts[form].interval
        if math.isnan(low) or math.isnan(high):
            return None
        return bool(low <= self.measured <= high)

    @property
    def step(self) -> float:
        """The backtest's reach: the held-out rows over the largest fitted fraction's."""
        return self.rows / max(self.fitted_on)

    def margin(self, reach: float) -> float:
        """The chosen form's backtest error (absolute) scaled to a forecast ``reach``× the
        largest fraction's rows, in proportion to log(reach) / log(:attr:`step`): the error
        it made one step ahead, made once per such step (0 at ``reach`` 1). Added to each
        side of a projection's interval. Forecast errors that grow with the horizon as
        the past ones did: empirical prediction intervals (Williams and Goodman 1971,
        "A Simple Method for the Construction of Empirical Confidence Limits for Economic
        Forecasts", JASA 66(336)), on one past error here; issue 52's study
        (docs/learning-curve-study.md) checked them against runs the fit did not see."""
        return abs(self.error(self.chosen)) * max(math.log(reach), 0.0) / math.log(self.step)

    @property
    def chosen(self) -> str:
        """The form whose forecast erred least; among errors equal to 1e-6, the one that
        needs the fewest fractions (the fewest parameters): a saturating fit whose
        ceiling sits at 1 is the error rate's power law, and that one is taken."""
        return min(self.forecasts, key=lambda f: (round(abs(self.error(f)), 6),
                                                  FORM_FRACTIONS[f]))


def backtest(points: Sequence[tuple[int, Sequence[float]]],
             resamples: int = FIT_RESAMPLES) -> Backtest | None:
    """Fit each form to the runs ``points`` without the largest fraction and forecast that
    fraction's mean accuracy (refits only: no run is added); the intervals as
    :func:`project`'s. None: fewer than :data:`BACKTEST_FRACTIONS` fractions with runs."""
    points = sorted((n, list(accs)) for n, accs in points if accs)
    if len(points) < BACKTEST_FRACTIONS:
        return None
    *rest, (held, accs) = points
    rows = [float(n) for n, seeds in rest for _ in seeds]
    forecasts = {}
    for form in FORMS:
        found = fit_power_law(rows, [a for _, seeds in rest for a in seeds], form)
        if found is None:
            continue
        drawn = [again.at(held) for ys in _redrawn(rest, resamples)
                 if (again := fit_power_law(rows, ys, form)) is not None]
        low, high = _spread(rest, [drawn]) if drawn else ([math.nan], [math.nan])
        forecasts[form] = Forecast(found, found.at(held), (float(low[0]), float(high[0])))
    return Backtest(held, float(np.mean(accs)), tuple(n for n, _ in rest), forecasts)


def no_backtest(fractions: int, failed_largest: float | None) -> str:
    """Why a curve has no backtest, in one line (its projection is then untested)."""
    if failed_largest is not None:
        return (f"no backtest: the largest fraction ({failed_largest:g}) has no run that "
                "finished, so no run the fit did not see can check it; the projection is "
                "untested")
    return (f"no backtest: {fractions} fraction{'s' * (fractions != 1)} with runs, and a "
            f"backtest needs {BACKTEST_FRACTIONS} (a fit on the smaller ones, checked on the "
            "largest); the projection is untested")


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
    with replacement (the generator and percentiles of :func:`project`; NaN, unknown, with
    one run at every fraction: :func:`_spread`). None: fewer than 2 fractions with runs."""
    points = sorted((n, list(accs)) for n, accs in points if accs)
    if len(points) < 2:
        return None
    x = np.log2([float(n) for n, accs in points for _ in accs])
    slope = float(np.polyfit(x, [a for _, accs in points for a in accs], 1)[0])
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    drawn = [np.polyfit(x, [a for _, accs in points
                            for a in rng.choice(accs, size=len(accs), replace=True)], 1)[0]
             for _ in range(resamples)]
    low, high = _spread(points, [drawn])
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


def _gain_text(p: Projection, k: float) -> str:
    low, high = p.interval[k]
    return f"{_signed(p.gain[k])} [{_signed(low)}, {_signed(high)}]"


def sentence(p: Projection | None, fractions: int, t: Trend | None = None,
             check: Backtest | str | None = None) -> str:
    """The answer in one sentence.

    - accuracy falls with more rows (``t``, :attr:`Trend.falls`): it says so
      (:func:`falling`), with no projection;
    - the backtest (``check``) found no fitted form closer than the last observation: more
      labels are not shown to help (:func:`favours_last`);
    - no projection (one fraction with runs, or no fit converged): no number;
    - else :func:`answer`, then what the backtest says of the projection
      (:func:`trust`), or why it has none (``check`` a string: :func:`no_backtest`).
    """
    if t is not None and t.falls:
        return falling(t)
    if isinstance(check, Backtest) and check.chosen == LAST and p is not None:
        return favours_last(check, p)
    if p is None:  # one fraction, or a fit that did not converge
        return (f"no projection: no curve could be fitted to {fractions} "
                f"fraction{'s' * (fractions != 1)} with runs"
                + (f"; give at least {BACKTEST_FRACTIONS} (--fractions) for a projection and "
                   "its backtest" if fractions < BACKTEST_FRACTIONS else ""))
    said = answer(p) + p.clipped_note()
    if isinstance(check, Backtest):
        return f"{said}; {trust(check)}"
    return f"{said}; {check}" if check else said


def answer(p: Projection) -> str:
    """What doubling the labels is expected to add:

    - one seed at some fraction: no spread to tell noise from a gain;
    - the 2× gain's upper bound below :data:`FLAT_GAIN`: "the curve is flat: ...";
    - else its interval above 0 (:data:`ZERO_GAIN`): "doubling the labels is expected
      to add ..." (and at ``--project-to``× when asked), saying so when the fit's ceiling
      is at its bound (:attr:`Fit.at_bound`: the gains are then the bound's, and larger
      ones cannot be ruled out) or another parameter is (:attr:`Fit.bounds`);
    - else "too noisy to tell", with the seeds per fraction that would narrow the
      interval to a side (a percentile interval's width shrinks as 1/√seeds:
      ``ceil(seeds · (half width / room)²)``, the room being the distance from the gain to
      0 or to :data:`FLAT_GAIN`, whichever it can reach, less the backtest's
      :attr:`Projection.margin`, which no seed narrows), or that no number of seeds
      would, when the margin alone reaches that far.

    The interval is the seeds' spread widened by the backtest's error
    (:attr:`Projection.margin`), and the sentence says so when it is.
    """
    if p.seeds < 2:
        return (f"too noisy to tell: a fraction with one run has no spread over seeds; "
                f"{3 - p.seeds} more seeds per fraction would measure it (--seeds 3)")
    low, high = p.interval[2]
    widened = (f" (each interval: the seeds' spread widened by the backtest's error, "
               f"±{p.margin_at(2):.3f} at 2×)" if p.margin_at(2) else "")
    doubled = f"doubling the labels is expected to add {_gain_text(p, 2)} accuracy"
    if high < FLAT_GAIN:
        return (f"the curve is flat: {doubled}, under {FLAT_GAIN:g}{widened}; more labels like "
                "these are not expected to help; look at the test-label audit "
                "(metrics/label_issues.csv)")
    if low >= ZERO_GAIN:
        bound = (f"; the fit's ceiling is at its bound, accuracy {A_MAX:g} (and in "
                 f"{p.refits_at_bound:,} of {p.resamples:,} refits): the runs show no levelling "
                 "off yet, so the bound, not the data, limits these gains"
                 if p.fit.at_bound else _bounds_text(p.fit))
        further = "".join(f", {_gain_text(p, k)} at {k:g}×" for k in p.gain if k != 2)
        return f"{doubled}{further}{widened}{bound}"
    seeds_low, seeds_high = p.seed_interval[2]
    half = (seeds_high - seeds_low) / 2
    room = max(p.gain[2], FLAT_GAIN - p.gain[2]) - p.margin_at(2)
    noisy = f"too noisy to tell: {doubled.replace('is expected to add', 'adds')}{widened}"
    if room <= 0:
        return (f"{noisy}; more seeds would not tell: the backtest's error alone spans it; "
                "runs at a larger fraction would")
    more = max(1, math.ceil(p.seeds * (half / room) ** 2) - p.seeds)
    return (f"{noisy}; about {more} more seed{'s' * (more != 1)} per fraction would tell "
            f"(--seeds {p.seeds + more})")


def _bounds_text(fit: Fit) -> str:
    """``; the fit's c = 10 is at the fit's bound: ...`` (:attr:`Fit.bounds`), or empty."""
    if not fit.bounds:
        return ""
    one = len(fit.bounds) == 1
    return (f"; the fit's {' and '.join(fit.bounds)} {'is' if one else 'are'} at the fit's "
            f"bound: the runs do not fix {'it' if one else 'them'}")


def _others(b: Backtest, form: str) -> str:
    """The other forms' errors: ``a − b·n^(−c) missed by 0.021, the last observation by
    0.055``."""
    return ", ".join(f"{FORMS[f]} {'missed ' if i == 0 else ''}by {abs(b.error(f)):.3f}"
                     for i, f in enumerate(f for f in b.forecasts if f != form))


def trust(b: Backtest) -> str:
    """How far the projection can be trusted, from the backtest: the chosen form's error
    at the largest fraction, whether the measured mean fell inside its interval, and the
    other forms' errors (the last observation's among them). Within
    :data:`ROUGH_ERROR` and inside: "predicted ... within 0.004"; else "... missed by
    0.050 ...: treat the projection as rough"."""
    form = b.chosen
    error = abs(b.error(form))
    what = (f"the fit ({FORMS[form]}, the closest of {len(b.forecasts)} forms in the "
            f"backtest) predicted {b.rows:,} rows from the smaller runs")
    inside = b.inside(form)
    where = ("no interval: one seed per fraction has no spread over seeds" if inside is None
             else f"{'inside' if inside else 'outside'} its interval")
    if error <= ROUGH_ERROR and inside is not False:
        return f"{what} within {error:.3f} ({where}; {_others(b, form)})"
    return (f"{what} but missed by {error:.3f} ({where}; {_others(b, form)}): "
            "treat the projection as rough")


def favours_last(b: Backtest, p: Projection) -> str:
    """The sentence when no fitted form predicted the largest fraction from the smaller
    ones better than the last observation did (Kielhöfer et al. 2024: a forecast hard to
    beat): no gain is projected. With one seed at some fraction that cannot be told from
    noise (no spread over seeds to judge the errors by), and the sentence says so."""
    closest = (f"from the smaller runs, no further gain (the last observation) predicted "
               f"{b.rows:,} rows within {abs(b.error(LAST)):.3f}, closer than the fitted "
               f"curves ({_others(b, LAST)})")
    if p.seeds < 2:
        return (f"one seed cannot tell whether more labels help: {closest}, but "
                "a fraction with one run has no spread over seeds (unknown), so neither a "
                f"gain nor its absence is shown; {3 - p.seeds} more seeds per fraction would "
                "tell (--seeds 3)")
    return (f"more labels like these are not shown to help: {closest}; the projection is "
            f"no gain, accuracy {p.fit.a:.3f} at {p.full_rows:,} rows")



# ------------------------------------------------------------------ the curve

@dataclass(frozen=True)
class Point:
    """One fraction: its training rows and each seed's landed run."""

    fraction: float
    train_rows: int | None
    runs: list[SweepRun]

    def values(self, key: str) -> list[float]:
        return [float(getattr(run.evals, key)) for run in self.runs if run.evals is not None]


@dataclass(frozen=True)
class Analysis:
    """What the runs say: the trend, the backtest (or why there is none: ``untested``),
    the projection of the form the backtest chose, and the sentence (:func:`analyse`)."""

    trend: Trend | None = None
    backtest: Backtest | None = None
    untested: str = ""
    projection: Projection | None = None
    sentence: str = ""

    def record(self) -> dict[str, Any]:
        """``learning_curve.json``'s ``trend``, ``backtest``, ``fit`` and ``sentence``."""
        p, t, b = self.projection, self.trend, self.backtest
        interval, margin = (p.interval, p.margin) if p is not None else ({}, {})
        return {
            "trend": None if t is None else {
                "model": "accuracy = intercept + slope * log2(n), n = training rows",
                "accuracy_per_doubling": t.slope, "ci95_low": _known(t.interval[0]),
                "ci95_high": _known(t.interval[1]), "falls": t.falls},
            "backtest": None if b is None else {
                "held_out_train_rows": b.rows, "measured_accuracy_mean": b.measured,
                "fitted_on_train_rows": list(b.fitted_on),
                "forecasts": {form: {"model": FORM_MODELS[form], "predicted": f.predicted,
                                     "ci95_low": _known(f.interval[0]),
                                     "ci95_high": _known(f.interval[1]),
                                     "error": b.error(form), "inside": b.inside(form),
                                     "at_bound": list(f.fit.bounds)}
                              for form, f in b.forecasts.items()},
                "chosen": b.chosen, "rough_error": ROUGH_ERROR},
            "fit": None if p is None else {
                "form": p.fit.form,
                "model": FORM_MODELS[p.fit.form],
                "a": p.fit.a, "b": p.fit.b, "c": p.fit.c,
                "at_bound": list(p.fit.bounds),
                "tested": b is not None,
                "untested": self.untested or None,
                "full_train_rows": p.full_rows,
                "project_to": p.to,
                "projected": {f"{k:g}x": {
                    "train_rows": round(k * p.full_rows), "accuracy": p.fit.at(k * p.full_rows),
                    "gain": p.gain[k], "gain_ci95_low": _known(interval[k][0]),
                    "gain_ci95_high": _known(interval[k][1]),
                    "gain_seeds_ci95_low": _known(p.seed_interval[k][0]),
                    "gain_seeds_ci95_high": _known(p.seed_interval[k][1]),
                    "backtest_margin": margin[k]} for k in p.gain},
                "interval": (ONE_SEED if p.most_seeds < 2 else
                             "the seeds' bootstrap interval widened on each side by the "
                             "backtest's error x log(reach) / log(the backtest's step)"
                             if b is not None else "the seeds' bootstrap interval (untested: "
                             "no backtest to widen it by)"),
                "band": [{"train_rows": n, "accuracy_ci95_low": _known(low),
                          "accuracy_ci95_high": _known(high),
                          "accuracy_seeds_ci95_low": _known(s_low),
                          "accuracy_seeds_ci95_high": _known(s_high)}
                         for (n, low, high), (_, s_low, s_high)
                         in zip(p.band, p.seed_band, strict=True)],
                "clipped": p.clipped,
                "a_at_bound": p.fit.at_bound,
                "bootstrap": {"resamples": p.requested, "converged": p.resamples,
                              "a_at_bound": p.refits_at_bound,
                              "seed": BOOTSTRAP_SEED, "confidence": CONFIDENCE},
            },
            "sentence": self.sentence,
        }


ONE_SEED = ("none: one run per fraction has no spread over seeds (unknown), so every "
            "interval over seeds is null")


def _known(value: float) -> float | None:
    """``value``, or None for NaN (an interval over seeds that one seed cannot give)."""
    return None if math.isnan(value) else value


def analyse(points: Sequence[tuple[int, Sequence[float]]], *,
            failed_largest: float | None = None, resamples: int = FIT_RESAMPLES,
            to: float = PROJECT_TO) -> Analysis:
    """The :class:`Analysis` of the runs ``points`` (``(training rows, accuracy of each
    seed)`` per fraction with runs). ``failed_largest``: the grid's largest fraction when
    none of its runs finished (then no backtest, and the projection starts from the
    largest fraction with runs).

    A curve that falls (:attr:`Trend.falls`) gets no backtest and no projection. Else the
    :func:`backtest` picks the form (:attr:`Backtest.chosen`); without one
    (:func:`no_backtest`) the projection is :data:`POWER`'s, said to be untested.
    """
    points = sorted((n, list(accs)) for n, accs in points if accs)
    t = trend(points, resamples)
    if t is not None and t.falls:
        # no projection: the forms only rise (b >= 0) and would call the fall flat
        return Analysis(t, sentence=sentence(None, len(points), t))
    check = None if failed_largest is not None else backtest(points, resamples)
    untested = "" if check is not None else no_backtest(len(points), failed_largest)
    p = project(points, resamples, check.chosen if check else POWER, to, check)
    return Analysis(t, check, untested, p, sentence(p, len(points), t, check or untested))


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


# ------------------------------------------------------------------ the outputs

def plot_spec(record: dict[str, Any]) -> dict[str, Any]:
    """A Vega-Lite spec: each run's accuracy against training rows (log x), the mean's
    test-row interval as a band, the mean as a line, the chosen form's fit dotted from the
    smallest fraction to the projection's end (``--project-to``× the largest fraction's
    rows) with the projection's interval as a grey band, the baselines as rules."""
    runs = [{"rows": f["train_rows"], "accuracy": r["accuracy"]}
            for f in record["fractions"] for r in f["runs"] if f["train_rows"]]
    means = [{"rows": f["train_rows"], "accuracy": f["accuracy_mean"],
              "low": f["accuracy_ci95_low"], "high": f["accuracy_ci95_high"]}
             for f in record["fractions"] if f["train_rows"] and f["accuracy_mean"] is not None]
    fit = record["fit"] if means else None  # drawn from the smallest fraction's mean
    # ticks at each fraction's rows and at the projections (a log axis's own ticks run
    # together near its end: "5,0006,000")
    ticks = sorted({m["rows"] for m in means}
                   | ({p["train_rows"] for p in fit["projected"].values()} if fit else set()))
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
        band = [{"rows": b["train_rows"], "low": b["accuracy_ci95_low"],
                 "high": b["accuracy_ci95_high"]} for b in fit["band"]
                if b["accuracy_ci95_low"] is not None and math.isfinite(b["accuracy_ci95_low"])]
        if band:  # the projection's interval, from the largest fraction's rows on
            layers.append({"data": {"values": band}, "mark": {"type": "area", "opacity": 0.15,
                                                               "color": "gray"},
                           "encoding": {"x": x, "y": {**y, "field": "low"},
                                        "y2": {"field": "high"}}})
        # the fitted form from the smallest fraction to the projection's end, dashed
        end = max(p["train_rows"] for p in fit["projected"].values())
        grid = np.geomspace(min(m["rows"] for m in means), end, 40)
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


def _number(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def backtest_lines(record: dict[str, Any]) -> list[str]:
    """The report's backtest: each form's forecast of the largest fraction against the
    measured mean, or the line saying why there is none."""
    b, fit = record.get("backtest"), record["fit"]
    if b is None:
        return ["", md_text(fit["untested"], None) + "."] if fit and fit["untested"] else []
    shown = ", ".join(f"{n:,}" for n in b["fitted_on_train_rows"])
    rows = [[FORMS[form] + (" (chosen)" if form == b["chosen"] else ""),
             f"{_number(f['predicted'])} " + (
                 "(no interval: one seed, the spread over seeds unknown)"
                 if f["ci95_low"] is None else
                 f"[{_number(f['ci95_low'])}, {_number(f['ci95_high'])}]"),
             f"{f['error']:+.4f}",
             "—" if f["inside"] is None else "yes" if f["inside"] else "no",
             ", ".join(f["at_bound"]) or "—"] for form, f in b["forecasts"].items()]
    return ["", f"Backtest: each form fitted to the runs of {shown} rows, then its forecast of "
            f"the mean accuracy at {b['held_out_train_rows']:,} rows against the measured "
            f"{_number(b['measured_accuracy_mean'])}; the form that erred least is the "
            "projection's:", "",
            *table(["form", "forecast [95% interval]", "error", "measured inside",
                    "parameters at a bound"], rows)]


def fit_line(fit: dict[str, Any]) -> str:
    """The fit in one line: its form, its parameters, its bootstrap, its bounds."""
    how = "chosen by the backtest" if fit["tested"] else "untested"
    refits = (f"{fit['bootstrap']['converged']} of {fit['bootstrap']['resamples']} bootstrap "
              "refits converged")
    if fit["form"] == LAST:
        return (f"Forecast ({FORMS[LAST]}, {how}): accuracy stays {fit['a']:.4f} beyond "
                f"{fit['full_train_rows']:,} rows ({refits}).")
    bound = (f"; at a bound: {', '.join(fit['at_bound'])} (the runs do not fix "
             f"{'it' if len(fit['at_bound']) == 1 else 'them'})" if fit["at_bound"] else "")
    return (f"Fit ({FORMS[fit['form']]}, {how}): accuracy = {fit['a']:.4f} − "
            f"{fit['b']:.4g}·n^(−{fit['c']:.4f}) (n: training rows; {refits}{bound}); "
            f"projected to {fit['project_to']:g}× {fit['full_train_rows']:,} rows.")


def markdown(record: dict[str, Any], image: str | None) -> str:
    """The report section: the sentence, the table of fractions, the backtest, the fit,
    the failures; every value a run or a user controls escaped
    (:mod:`lorasent.review.markup`)."""
    lines = ["## Learning curve", "", md_text(record["sentence"], None), ""]
    if image:
        lines += [f"![{PLOT_TITLE}]({image})", ""]
    rows = []
    for f in record["fractions"]:
        interval = ("—" if f["accuracy_ci95_low"] is None else
                    f"[{_number(f['accuracy_ci95_low'])}, {_number(f['accuracy_ci95_high'])}]")
        rows.append([f"{f['fraction']:g}", str(f["train_rows"] or "—"), str(len(f["runs"])),
                     _number(f["accuracy_mean"]), _number(f["accuracy_sd"]), interval,
                     _number(f["macro_f1_mean"]), _number(f["macro_f1_sd"])])
    lines += table(["fraction", "training rows", "seeds", "accuracy (mean)", "sd over seeds",
                    "95% test-row interval", "macro-F1 (mean)", "sd over seeds"], rows)
    lines += backtest_lines(record)
    if record["fit"]:
        lines += ["", fit_line(record["fit"])]
    base = [f"{name.replace('_', ' ')} {_number(v)}" for name, v in record["baselines"].items()
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
    write_record(record, out)
    return record


def write_record(record: dict[str, Any], out: Path) -> None:
    """:func:`write_outputs` of a record."""
    with output_dir(out, command=OUT_MARKER) as tmp:
        image = (_draw(plot_spec(record), tmp) if any(f["runs"] for f in record["fractions"])
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


# ------------------------------------------------------------------ the estimate

TRAIN_RECORD = "metrics/provenance/train.json"  # the tracked record of the train stage
MACHINE_RECORD = "metrics/provenance/machine/train.json"  # its machine facts (git-ignored)
HISTORY_COMMITS = 500  # the newest commits (all refs) searched for the record a time belongs to


def estimate(repo: Path, runs: Sequence[RunSpec], fractions: dict[str, float]) -> str:
    """About how long the runs train, from the last training here: its wall time
    (:data:`MACHINE_RECORD`, git-ignored, :func:`lorasent.artifacts.read_machine_record`)
    times each run's fraction of the training split over the fraction it trained.

    The time belongs to the tracked record it was written with (its ``record_sha256``).
    When that is not the record here now (a run since, or a checkout of a record made on
    another machine), the fraction is that record's, found in the history
    (:func:`measured_for`), and the line says which commit's record and which params
    differ from the one here; a record no commit holds is taken as a training on all the
    rows, and said so. ``unknown`` only without a time: no machine record ("no record"),
    a damaged one, or one of a failed training."""
    where = MACHINE_RECORD
    try:
        machine = read_machine_record(repo / TRAIN_RECORD)
    except ValueError:
        return f"about how long: unknown ({where} is damaged: not a JSON object)"
    if machine is None:
        return f"about how long: unknown (no record of a training on this machine: {where})"
    if machine.get("status") == "failed":
        return ("about how long: unknown (the last training on this machine failed: "
                f"{one_line(machine.get('error'))}; {where})")
    seconds = machine.get("wall_time_s")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
        return f"about how long: unknown ({where} holds no training time)"
    try:
        here = (repo / TRAIN_RECORD).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        here = None
    note = ""
    if here is not None and machine.get("record_sha256") == record_sha256(here):
        record = _json_object(here)
    else:
        found = measured_for(repo, machine.get("record_sha256"))
        if found is None:
            record = {}
            note = (", measured for a train record no commit here holds (its params unknown: "
                    "taken as a training on all the rows)")
        else:
            commit, record = found
            other = _params_differ(record, _json_object(here) if here is not None else {})
            note = (f", measured for the train record of commit {commit[:7]}, not the one here "
                    f"(train.fraction {_fraction(record):g}"
                    + (f"; other params: {', '.join(other)}" if other else "") + ")")
    share = _fraction(record)
    total = sum(seconds * fractions[run.group] / share for run in runs)
    return (f"about {total / 60:.0f} min of training one after the other (the last training "
            f"here took {seconds:.0f} s{note}; each run scaled by its share of the rows; "
            "evaluation not counted, runs side by side take less)")


def _json_object(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _fraction(record: dict[str, Any]) -> float:
    """The ``train.fraction`` a train record's params hold (1.0: all, before the key)."""
    params = record.get("params")
    train = params.get("train") if isinstance(params, dict) else None
    value = train.get("fraction") if isinstance(train, dict) else None
    return float(value) if isinstance(value, int | float) and 0 < value <= 1 else 1.0


def _params_differ(record: dict[str, Any], here: dict[str, Any], most: int = 4) -> list[str]:
    """The params keys (``a.b.c``) whose values differ between two train records, other
    than ``train.fraction`` (the estimate scales by it), at most ``most`` then ``...``."""
    def flat(node: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(node, dict):
            return {prefix: node}
        return {k: v for key, sub in node.items() for k, v in flat(sub, f"{prefix}{key}.").items()}

    a, b = flat(record.get("params", {})), flat(here.get("params", {}))
    keys = [k.rstrip(".") for k in dict.fromkeys([*a, *b])
            if a.get(k) != b.get(k) and k.rstrip(".") != "train.fraction"]
    return keys[:most] + (["..."] if len(keys) > most else [])


def measured_for(repo: Path, sha256: Any) -> tuple[str, dict[str, Any]] | None:
    """``(commit, record)``: the newest commit of any ref (branches, tags, DVC experiments'
    refs) among the newest :data:`HISTORY_COMMITS` that changed :data:`TRAIN_RECORD` to a
    file whose SHA-256 is ``sha256`` (:func:`lorasent.artifacts.record_sha256`), and that
    record; None when none does (or ``sha256`` is not a string)."""
    if not isinstance(sha256, str):
        return None
    blobs: dict[str, str] = {}  # blob id -> the newest commit that wrote it
    commit = ""
    for line in git_lines(repo, "log", "--all", f"-n{HISTORY_COMMITS}", "--format=%H", "--raw",
                          "--no-abbrev", "--no-renames", "--", TRAIN_RECORD) or []:
        fields = line.split()
        if len(fields) == 1:
            commit = fields[0]
        elif line.startswith(":") and len(fields) >= 4:
            blobs.setdefault(fields[3], commit)
    wanted = [blob for blob in blobs if set(blob) != {"0"}]  # a deletion writes no blob
    if not wanted:
        return None
    done = subprocess.run([program("git"), "cat-file", "--batch"], cwd=repo, capture_output=True,
                          input="".join(f"{blob}\n" for blob in wanted).encode())
    out, at = done.stdout, 0
    for blob in wanted:  # "<id> blob <size>\n<bytes>\n" each, in the order asked
        header_end = out.find(b"\n", at)
        header = out[at:header_end].split()
        if len(header) != 3:
            break
        size = int(header[2])
        body = out[header_end + 1:header_end + 1 + size]
        at = header_end + 1 + size + 1
        text = body.decode("utf-8", errors="replace")
        if record_sha256(text) == sha256:
            return blobs[blob], _json_object(text)
    return None


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
    from lorasent.review.sweep import _git, check_options, plan

    check_options("learning-curve", address=cluster.get("address"),
                  num_gpus=cluster.get("num_gpus"), cache_dir=cluster.get("cache_dir"))

    repo = repo.resolve()
    fractions = sorted(fractions)
    rows = check_classes(repo, fractions)
    sets = fraction_sets(fractions)
    params_text = _git(repo, "show", "HEAD:params.yaml")
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
