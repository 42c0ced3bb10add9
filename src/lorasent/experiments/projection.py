"""What a learning curve's runs project: the chosen form fitted to every run and projected
beyond the largest fraction (:func:`project`), the backtest that chooses the form
(:func:`backtest`), and the trend that says which way accuracy goes (:func:`trend`).

The backtest fits each form (:data:`lorasent.experiments.curve_forms.FORMS`) without the
largest fraction and compares their forecasts of that fraction's mean accuracy with the
measured one; the form that erred least is projected, to 2× the largest fraction's rows
(``--project-to`` further), with a percentile bootstrap interval over the runs (each
fraction's seeds drawn with replacement, refitted :data:`FIT_RESAMPLES` times) widened on
each side by the backtest's error scaled to the reach (:meth:`Backtest.margin`). The
backtest refits only: it adds no run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lorasent.experiments.curve_forms import FORMS, SATURATING, Fit, fit_power_law
from lorasent.statistics import BOOTSTRAP_SEED, percentile_interval

FIT_RESAMPLES = 1000  # bootstrap refits of each form (each ~1 ms)
BACKTEST_FRACTIONS = 3  # a fit on 2 fractions (the power law's parameters), checked on a third
# The projection reaches this many times the largest fraction's training rows unless
# --project-to asks further: a fit extrapolates worse the further it goes (Viering & Loog
# 2022, "The Shape of Learning Curves: A Review").
PROJECT_TO = 2.0
BAND_POINTS = 12      # the plot's band: the projection's interval at this many row counts


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
    (:attr:`~lorasent.experiments.curve_forms.Form.fractions`), or the fit over every run
    failed.
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
    """Each form (:data:`~lorasent.experiments.curve_forms.FORMS`) fitted without the
    largest fraction and its forecast of that fraction's mean accuracy, measured over its
    seeds."""

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
                                                  FORMS[f].fractions))


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
