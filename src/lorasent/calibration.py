"""How far a classifier's probabilities can be trusted, and which test rows look mislabelled.

- **Calibration** (:func:`calibration_metrics`): the negative log-likelihood, the Brier
  score (Brier 1950, "Verification of forecasts expressed in terms of probability") and the
  expected calibration error over :data:`ECE_BINS` equal-width bins (Guo et al. 2017, "On
  Calibration of Modern Neural Networks"), each with a 95% percentile bootstrap interval
  over the rows (10,000 resamples up to 10,000 rows, fewer above, seed 0), each resample
  drawn exactly, as counts of the distinct rows (:func:`interval_method`);
  :func:`calibration_deltas` compares two models on the same rows.
- **Temperature scaling** (:func:`fit_temperature`, Guo et al. 2017): one T > 0 such that
  ``softmax(scores / T)`` is calibrated, fitted by scikit-learn; :func:`temperature_scaling`
  fits it on the validation split's scores for the train stage and measures it
  (``calibration.json``: :class:`lorasent.contracts.TemperatureScaling`).
- **Selective classification** (:func:`risk_coverage`, Geifman & El-Yaniv 2017, "Selective
  Classification for Deep Neural Networks"): the accuracy on the rows kept when the model
  abstains below a confidence.
- **Label issues** (:func:`label_issues`): confident learning (Northcutt et al. 2021,
  "Confident Learning: Estimating Uncertainty in Dataset Labels") by cleanlab.

Every function takes ``y``, gold class ids (N,) in ``[0, K)``, and ``probs``, (N, K)
probabilities whose rows sum to 1; they raise ValueError when these do not fit. The
predicted class of a row is its argmax (the first on ties, as lorasent predicts) and its
*confidence* that class's probability.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import numpy.typing as npt
from scipy.special import softmax
from sklearn.base import BaseEstimator, ClassifierMixin

from lorasent.contracts import (
    TEMPERATURE_MAX,
    TEMPERATURE_MIN,
    RiskCoveragePoint,
    TemperatureScaling,
    temperature_out_of_range,
)
from lorasent.errors import LorasentError
from lorasent.metrics import probabilities
from lorasent.statistics import (
    BOOTSTRAP_SEED,
    bootstrap,
    method_text,
    resamples_for,
)

if TYPE_CHECKING:
    from lorasent.metrics import ClassIds

# temperature_scaling's warnings are the train stage's (it fits the temperature): logged
# under its name, as its log has always shown them.
log = logging.getLogger("lorasent.stages.train")

# equal-width confidence bins, Guo et al. 2017 "On Calibration of Modern Neural Networks"
ECE_BINS = 15
PROB_FLOOR = 1e-12  # nll: a probability below it counts as it (at most 27.6 nats a row)
SUM_TOLERANCE = 1e-5  # how far a row of probs may sum from 1 (float32 softmax)


def interval_method(rows: int) -> str:
    """``calibration.interval_method`` of ``eval.json`` for a test set of ``rows`` rows:
    :data:`INTERVAL_METHOD` up to 10,000 rows; above, it names the fewer resamples
    (``lorasent.statistics.resamples_for``)."""
    return (method_text("the distinct rows (their NLL, Brier term, gap and confidence bin; "
                        "both sides' for a paired difference)", rows)
            + f" ({resamples_for(rows):,} resamples, 95%, seed {BOOTSTRAP_SEED})")


INTERVAL_METHOD = interval_method(1)  # every test set of at most 10,000 rows

Array = npt.NDArray[np.float64]


class CalibrationError(LorasentError):
    """Too few rows or classes to fit a temperature."""


def _checked(y: ClassIds, probs: npt.ArrayLike, *, scores: bool = False
             ) -> tuple[npt.NDArray[np.int64], Array]:
    """``y`` as int64 (N,) and ``probs`` as float64 (N, K), or ValueError; with
    ``scores``, any finite values instead of probabilities."""
    ids, p = np.asarray(y), np.asarray(probs, dtype=np.float64)
    what = "scores" if scores else "probs"
    if ids.ndim != 1 or p.ndim != 2 or len(ids) != len(p) or len(ids) == 0 or p.shape[1] < 2:
        raise ValueError(f"need y of shape (N,) and {what} of shape (N, K) with N > 0 and "
                         f"K >= 2; got {ids.shape} and {p.shape}")
    if not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= p.shape[1]:
        raise ValueError(f"y must hold int class ids in [0, {p.shape[1]}); got "
                         f"{ids.dtype} {sorted(set(ids.tolist()))[:10]}")
    if not np.all(np.isfinite(p)):
        raise ValueError(f"{what} hold NaN or infinite values")
    if not scores and (p.min() < 0 or p.max() > 1 or
                       np.abs(p.sum(axis=1) - 1).max() > SUM_TOLERANCE):
        raise ValueError(f"probs must be probabilities whose rows sum to 1 (within "
                         f"{SUM_TOLERANCE}); row sums span [{p.sum(axis=1).min()}, "
                         f"{p.sum(axis=1).max()}]")
    return ids.astype(np.int64), p


def _bin_of(confidence: Array, bins: int) -> npt.NDArray[np.int64]:
    """Bin i of ``bins`` equal-width bins: ``(i/bins, (i+1)/bins]``, bin 0 ``[0, 1/bins]``."""
    if not (isinstance(bins, int | np.integer) and bins >= 1):
        raise ValueError(f"bins must be a positive int; got {bins!r}")
    edges = np.linspace(0.0, 1.0, bins + 1)
    return np.maximum(np.searchsorted(edges, confidence, side="left") - 1, 0)


def _rows(y: npt.NDArray[np.int64], p: Array, bins: int = ECE_BINS
          ) -> tuple[Array, Array, Array, npt.NDArray[np.int64]]:
    """Per row: NLL, Brier term, confidence − correct (the ECE's gap) and confidence bin."""
    n = np.arange(len(y))
    onehot = np.zeros_like(p)
    onehot[n, y] = 1.0
    confidence = p.max(axis=1)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    return (-np.log(np.maximum(p[n, y], PROB_FLOOR)), np.sum((p - onehot) ** 2, axis=1),
            confidence - correct, _bin_of(confidence, bins))


def nll(y: ClassIds, probs: npt.ArrayLike) -> float:
    """Mean negative log-likelihood of the gold class, in nats (natural log).

    Probabilities below :data:`PROB_FLOOR` (1e-12) count as 1e-12, so one row adds at
    most 27.6 nats. Equals scikit-learn's ``log_loss`` where no probability is that small.
    """
    return float(np.mean(_rows(*_checked(y, probs))[0]))


def brier(y: ClassIds, probs: npt.ArrayLike) -> float:
    """Multiclass Brier score (Brier 1950): mean over rows of ``sum_k (p_k - onehot_k)^2``.

    In [0, 2]; scikit-learn's ``brier_score_loss`` with ``scale_by_half=False`` (its default
    for K > 2; for K = 2 it halves the sum by default, this does not).
    """
    return float(np.mean(_rows(*_checked(y, probs))[1]))


def ece(y: ClassIds, probs: npt.ArrayLike, bins: int = ECE_BINS) -> float:
    """Expected calibration error of the top-class confidence (Guo et al. 2017).

    ``sum_b rows_b / N * |accuracy_b - confidence_b|`` over ``bins`` equal-width bins of
    the confidence: bin i is ``(i/bins, (i+1)/bins]``, the first ``[0, 1/bins]``. In [0, 1].
    Computed as ``sum_b |sum of the gaps (confidence - correct) in bin b| / N``, each bin's
    gaps added in the rows' order (``numpy.bincount``; see :func:`_three`).
    """
    _, _, gap, bin_of = _rows(*_checked(y, probs), bins)
    return float(np.sum(np.abs(np.bincount(bin_of, weights=gap, minlength=bins))) / len(gap))


class ReliabilityBin(TypedDict):
    bin: int
    low: float
    high: float
    rows: int
    confidence: float | None
    accuracy: float | None


def reliability_bins(y: ClassIds, probs: npt.ArrayLike, bins: int = ECE_BINS
                     ) -> list[ReliabilityBin]:
    """The reliability diagram behind :func:`ece`: one dict per bin, in order.

    Returns:
        ``{"bin": i, "low", "high"`` (the bin's edges), ``"rows"``, ``"confidence"`` (mean
        top probability), ``"accuracy"}`` (share of its rows predicted right); an empty
        bin has ``rows`` 0 and ``confidence``/``accuracy`` None.
    """
    ids, p = _checked(y, probs)
    confidence, correct = p.max(axis=1), p.argmax(axis=1) == ids
    bin_of, edges = _bin_of(confidence, bins), np.linspace(0.0, 1.0, bins + 1)
    out: list[ReliabilityBin] = []
    for b in range(bins):
        inside = bin_of == b
        rows = int(inside.sum())
        out.append({"bin": b, "low": float(edges[b]), "high": float(edges[b + 1]),
                    "rows": rows,
                    "confidence": float(confidence[inside].mean()) if rows else None,
                    "accuracy": float(correct[inside].mean()) if rows else None})
    return out


def _values(y: npt.NDArray[np.int64], p: Array) -> tuple[Array, npt.NDArray[np.int64]]:
    """Per row: (NLL, Brier term, gap) float (N, 3) and its confidence bin int (N,)."""
    nll_row, brier_row, gap, bin_of = _rows(y, p)
    return np.stack([nll_row, brier_row, gap], axis=1), bin_of


def _three(counts: np.ndarray, values: Array, bin_of: npt.NDArray[np.int64]) -> Array:
    """NLL, Brier and ECE of B resamples given as counts: float ``(3, B)``.

    Args:
        counts: int ``(B, C)``: how often each cell is drawn (a row of ones: the rows
            themselves).
        values: float (C, 3): each cell's NLL, Brier term and gap (:func:`_values`).
        bin_of: int (C,): each cell's confidence bin, in ``[0, ECE_BINS)``.

    Every sum runs in an order fixed by the data: elementwise products summed by
    ``numpy.sum``, the gaps per bin by ``numpy.bincount`` in the cells' order. Never a
    matrix product: its BLAS kernel (OpenBLAS picks one per CPU, or as the environment's
    ``OPENBLAS_CORETYPE`` says) orders the additions its own way, so that two processes on
    one machine wrote other last bits (docs/reproducibility.md).
    """
    weights = np.asarray(counts, dtype=np.float64)
    return _Sums(values, bin_of).of(weights, np.sum(weights, axis=1))


class _Sums:
    """:func:`_three` of one side's cells for batch after batch of resamples: the values'
    columns laid out once, each batch size's bin offsets made once. The same bits as
    :func:`_three` (the same products, sums and bincounts), whatever the batch."""

    def __init__(self, values: Array, bin_of: npt.NDArray[np.int64]) -> None:
        self.columns = [np.ascontiguousarray(values[:, i]) for i in range(3)]
        self.bin_of = bin_of
        self.offsets: dict[int, npt.NDArray[np.int64]] = {}

    def of(self, weights: Array, n: Array | float) -> Array:
        """float ``(3, B)`` of float weights ``(B, C)`` whose rows sum to ``n``."""
        b = len(weights)
        if b not in self.offsets:
            self.offsets[b] = (self.bin_of + ECE_BINS * np.arange(b)[:, None]).ravel()
        per_bin = np.bincount(self.offsets[b], weights=(weights * self.columns[2]).ravel(),
                              minlength=b * ECE_BINS)
        return np.stack([np.sum(weights * self.columns[0], axis=1) / n,
                         np.sum(weights * self.columns[1], axis=1) / n,
                         np.sum(np.abs(per_bin.reshape(-1, ECE_BINS)), axis=1) / n])


def _resampled(values: Array, bins: npt.NDArray[np.int64]
               ) -> tuple[Array, tuple[np.ndarray, np.ndarray]]:
    """NLL, Brier and ECE of one side (``values`` (N, 3), ``bins`` (N, 1)), or B − A of
    two (``values`` (N, 6), A's columns first; ``bins`` (N, 2)), with 95% intervals.

    Rows that agree in all their values and bins are one cell (``numpy.unique``); a
    resample draws the N rows over the cells exactly
    (``lorasent.statistics.resampled_counts``: one multinomial, or the rows one by one
    where the cells outnumber ``row_draws_above(N)`` × N), so that each resampled value is
    one that some resample of the rows takes, and so is each bound: no approximation puts
    one where no resample can. 10,000 resamples up to 10,000 rows (fewer above,
    ``lorasent.statistics.resamples_for``), 95%, seed 0, as ``lorasent.statistics``.

    Returns:
        ``(points, (low, high))``: float (3,) each: NLL, Brier, ECE.
    """
    sides = bins.shape[1]
    cell, counts = np.unique(np.concatenate([values, bins.astype(np.float64)], axis=1),
                             axis=0, return_counts=True)
    cell_values, cell_bins = cell[:, :3 * sides], cell[:, 3 * sides:].astype(np.int64)
    each = [_Sums(cell_values[:, 3 * s:3 * s + 3], cell_bins[:, s]) for s in range(sides)]
    n = float(len(values))  # a resample's counts sum to N exactly, as float64 too

    def statistic(weights: np.ndarray) -> np.ndarray:
        w = weights.astype(np.float64)
        found = [side.of(w, n) for side in each]
        return found[0] if sides == 1 else found[1] - found[0]

    ones = np.ones((1, len(values)), dtype=np.int64)
    point = [_three(ones, values[:, 3 * s:3 * s + 3], bins[:, s]) for s in range(sides)]
    return (point[0] if sides == 1 else point[1] - point[0])[:, 0], bootstrap(counts, statistic)


_NAMES = ("nll", "brier", "ece")
# why a percentile interval may leave out its own estimate (issue 62): the plug-in ECE is
# biased upward, the more so the fewer rows per bin (Kumar et al. 2019, "Verified
# Uncertainty Calibration"), and a resample repeats rows, which sharpens the bins, so
# for a well-calibrated model nearly every resample's ECE lies above the estimate
BIAS_REASON = {
    "ece": "ECE over equal-width bins is biased upward, the more so the fewer rows per "
           "bin (Kumar et al. 2019), and a resample repeats rows",
    "nll": "a resample repeats rows, and the few rows of a probability near 0 weigh most",
    "brier": "a resample repeats rows",
}


def interval_note(names: Iterable[str], points: Iterable[float], low: Iterable[float],
                  high: Iterable[float], *, label: str = "") -> str | None:
    """Why a percentile bootstrap interval leaves out its own estimate, or None where
    every interval holds its estimate.

    The percentile bootstrap reads a biased statistic's resamples, which sit off the
    estimate by about the bias; the interval is then the spread of the resampled
    statistic and the estimate is still the point (Efron & Tibshirani 1993, "An
    Introduction to the Bootstrap", ch. 10 and 14). The record keeps both and this line.

    Args:
        names: the statistics' keys (``ece``, ``nll``, ``brier``), in ``BIAS_REASON``.
        points, low, high: each statistic's estimate and 95% bounds.
        label: the words before each name (``"Δ "`` for a paired difference).

    Returns:
        e.g. ``the 95% interval of ECE [0.0297, 0.0744] lies above its estimate 0.0295:
        ECE over equal-width bins is biased upward ...; the interval is the spread of the
        resampled ECE, the estimate is the point``.
    """
    notes = []
    for name, point, lo, hi in zip(names, points, low, high, strict=True):
        if lo <= point <= hi:
            continue
        side = "above" if lo > point else "below"
        what = f"{label}{name.upper() if name != 'brier' else 'Brier score'}"
        notes.append(f"the 95% interval of {what} [{lo:.4f}, {hi:.4f}] lies {side} its "
                     f"estimate {point:.4f}: {BIAS_REASON[name]}; the interval is the "
                     f"spread of the resampled {what}, the estimate is the point")
    return "; ".join(notes) or None


def calibration_metrics(y: ClassIds, probs: npt.ArrayLike) -> dict[str, Any]:
    """NLL, Brier score and ECE (:data:`ECE_BINS` bins), each with its 95% interval.

    The intervals are a percentile bootstrap over the rows (10,000 resamples up to 10,000
    rows, fewer above: :func:`interval_method`; seed 0), the three scored on the same
    resampled rows, each resample drawn exactly; bit-identical across runs and processes.
    ECE is biased upwards on few rows per bin, so for a well-calibrated model its
    resamples may sit above the point, and the interval miss it: read it as a spread.

    Returns:
        ``nll``, ``nll_ci95_low``, ``nll_ci95_high``, the same for ``brier`` and ``ece``,
        and ``ece_bins``: 15; ``interval_note`` (str, :func:`interval_note`) only where
        an interval leaves out its estimate.
    """
    values, bin_of = _values(*_checked(y, probs))
    points, (low, high) = _resampled(values, bin_of[:, None])
    out: dict[str, Any] = {}
    for name, value, lo, hi in zip(_NAMES, points, low, high, strict=True):
        out[name], out[f"{name}_ci95_low"], out[f"{name}_ci95_high"] = (
            float(value), float(lo), float(hi))
    out["ece_bins"] = ECE_BINS
    note = interval_note(_NAMES, points, low, high)
    if note:
        out["interval_note"] = note
    return out


def calibration_deltas(y: ClassIds, probs_a: npt.ArrayLike, probs_b: npt.ArrayLike
                       ) -> dict[str, Any]:
    """B − A in NLL, Brier score and ECE on the same rows, with paired 95% intervals.

    Args:
        y: gold ids (N,); probs_a, probs_b: (N, K), row i the same test row in both.

    Raises:
        ValueError: the shapes differ or do not fit (see the module's docstring).

    Returns:
        ``delta_nll``, ``delta_nll_ci95_low``, ``delta_nll_ci95_high``, the same for
        ``brier`` and ``ece``: negative means B is better calibrated. The bootstrap
        resamples the same rows for A and B (:func:`interval_method`);
        ``delta_interval_note`` only where an interval leaves out its estimate.
    """
    (ids, a), (_, b) = _checked(y, probs_a), _checked(y, probs_b)
    if a.shape != b.shape:
        raise ValueError(f"need probs_a and probs_b of one shape; got {a.shape} and {b.shape}")
    (values_a, bin_a), (values_b, bin_b) = _values(ids, a), _values(ids, b)
    points, (low, high) = _resampled(np.concatenate([values_a, values_b], axis=1),
                                     np.stack([bin_a, bin_b], axis=1))
    out: dict[str, Any] = {}
    for name, value, lo, hi in zip(_NAMES, points, low, high, strict=True):
        out[f"delta_{name}"], out[f"delta_{name}_ci95_low"], out[f"delta_{name}_ci95_high"] = (
            float(value), float(lo), float(hi))
    note = interval_note(_NAMES, points, low, high, label="Δ ")
    if note:
        out["delta_interval_note"] = note
    return out


class _Scores(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """A classifier whose decision function is its input: the scores to calibrate."""

    def __init__(self, num_labels: int = 2) -> None:
        self.num_labels = num_labels

    def fit(self, scores: np.ndarray, y: np.ndarray) -> _Scores:
        self.classes_ = np.arange(self.num_labels)
        return self

    def decision_function(self, scores: np.ndarray) -> np.ndarray:
        # two classes: scikit-learn takes a margin x as the logits (-x, x)
        return (scores[:, 1] - scores[:, 0]) / 2 if self.num_labels == 2 else scores

    def predict(self, scores: np.ndarray) -> np.ndarray:
        return np.argmax(scores, axis=1)


def fit_temperature(scores: npt.ArrayLike, y: ClassIds) -> float:
    """Temperature scaling (Guo et al. 2017): the T > 0 minimising the NLL of
    ``softmax(scores / T)`` on these rows, fitted by scikit-learn.

    scikit-learn's ``CalibratedClassifierCV(method="temperature")`` around a
    ``FrozenEstimator`` whose decision function is the scores; it searches log(1/T) in
    [-10, 10], so T lies in [4.5e-5, 22026]. A class absent from ``y`` still has its
    column: one zero-weight row per class is added, because scikit-learn fits only the
    classes it sees in ``y``.

    Args:
        scores: (N, K) float logits or log-probabilities (e.g. summed label-word
            log-probabilities), of rows the model did not train on (a validation split).
        y: gold class ids (N,) in ``[0, K)``.

    Returns:
        T; ``apply_temperature(scores, T)`` gives the calibrated probabilities.

    Raises:
        CalibrationError: fewer than 2 rows, or rows of one class only (such a split says
            how sure to be of that one class, not how to weigh the classes).
        ValueError: shapes or ids do not fit, or a score is not finite.
    """
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    ids, z = _checked(y, scores, scores=True)
    present = np.unique(ids)
    if len(ids) < 2 or len(present) < 2:
        raise CalibrationError(f"temperature scaling needs at least 2 rows of at least 2 "
                               f"classes; got {len(ids)} rows of classes {present.tolist()}: "
                               f"fit it on a larger split")
    k = z.shape[1]
    z_all = np.vstack([z, np.zeros((k, k))])
    ids_all = np.concatenate([ids, np.arange(k)])
    weight = np.concatenate([np.ones(len(ids)), np.zeros(k)])
    # One "fold" of all rows: a frozen estimator fits nothing, so no row need be held out.
    every_row = np.arange(len(ids_all))
    model = CalibratedClassifierCV(FrozenEstimator(_Scores(k).fit(z, ids)),
                                   method="temperature", cv=[(every_row, every_row)])
    with warnings.catch_warnings():
        # the weights are meant for the calibration alone, as the warning says they are
        warnings.filterwarnings("ignore", "Since FrozenEstimator does not appear to accept")
        model.fit(z_all, ids_all, sample_weight=weight)
    # calibrated_classifiers_: the (classifier, calibrator) pairs; beta_ is 1 / T
    return float(1.0 / model.calibrated_classifiers_[0].calibrators[0].beta_)


def apply_temperature(scores: npt.ArrayLike, temperature: float) -> Array:
    """``softmax(scores / T)``: (N, K) float64 probabilities from (N, K) scores.

    T > 1 softens the probabilities, T < 1 sharpens them; the argmax never changes.

    Raises:
        ValueError: T is not a positive finite number, or the scores are not a finite
            (N, K) array.
    """
    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"the temperature must be a positive number; got {temperature}")
    z = np.asarray(scores, dtype=np.float64)
    if z.ndim != 2 or not np.all(np.isfinite(z)):
        raise ValueError(f"need finite scores of shape (N, K); got {z.shape}")
    return softmax(z / temperature, axis=1)


def risk_coverage(y: ClassIds, probs: npt.ArrayLike) -> list[dict[str, float | int]]:
    """The risk-coverage curve of selective classification (Geifman & El-Yaniv 2017).

    The model answers a row only when its confidence is at least a threshold and abstains
    otherwise. One point per distinct confidence, highest first; the last point keeps
    every row (full coverage).

    Returns:
        ``{"min_confidence", "coverage"`` (share of rows kept), ``"accuracy"`` (share of
        the kept rows predicted right; the risk is 1 − accuracy), ``"rows"}`` (kept).
        Coverage rises and ``rows`` grows strictly along the list.
    """
    ids, p = _checked(y, probs)
    confidence = p.max(axis=1)
    order = np.argsort(-confidence, kind="stable")
    sorted_confidence = confidence[order]
    right = np.cumsum(p.argmax(axis=1)[order] == ids[order])
    last = np.flatnonzero(np.append(sorted_confidence[1:] != sorted_confidence[:-1], True))
    return [{"min_confidence": float(sorted_confidence[i]), "coverage": (i + 1) / len(ids),
             "accuracy": float(right[i] / (i + 1)), "rows": int(i + 1)} for i in last]


def coverage_at(y: ClassIds, probs: npt.ArrayLike, min_confidence: float
                ) -> tuple[float, float | None]:
    """``(coverage, selective accuracy)`` when rows of confidence >= ``min_confidence``
    are kept; the accuracy is None when no row is kept."""
    ids, p = _checked(y, probs)
    kept = p.max(axis=1) >= min_confidence
    right = p.argmax(axis=1)[kept] == ids[kept]
    return float(kept.mean()), float(right.mean()) if kept.any() else None


# Temperature scaling as the train stage fits it (calibration.json's ``method``).
TEMPERATURE_METHOD = (
    "temperature scaling (Guo et al. 2017, On Calibration of Modern Neural Networks): the "
    "class scores are divided by one temperature T > 0 before the softmax, T chosen to "
    "minimise the negative log-likelihood of the validation rows (lorasent.calibration."
    "fit_temperature), as scikit-learn's CalibratedClassifierCV(method='temperature') fits it")
# calibration.json's ``note`` when the validation split has no rows.
NO_VALIDATION_NOTE = ("no validation split (split.validation_size: 0): temperature scaling "
                      "not fitted; predict uses the raw probabilities")
# calibration.json's ``note`` when the validation rows cannot be fitted (the reason follows).
NOT_FITTED_NOTE = "temperature scaling not fitted ({}); predict uses the raw probabilities"
# calibration.json's ``note`` when the fitted T is outside the range calibration.json
# takes (lorasent.contracts.TEMPERATURE_MIN, TEMPERATURE_MAX): T, then the range. Short:
# `lorasent metrics` shows it on one line; the train log adds DEGENERATE_WHY.
DEGENERATE_NOTE = ("fitted T = {:.4g} is outside [{:g}, {:g}] (degenerate validation rows): "
                   "not kept; predict uses the raw probabilities")
DEGENERATE_WHY = ("every validation row right, or every one wrong, by a wide margin drives "
                  "the fit to scikit-learn's bounds; a larger validation split gives a usable T")
# The thresholds of calibration.json's risk-coverage: 0.00, 0.05, ..., 0.95.
CONFIDENCE_GRID = tuple(round(0.05 * k, 2) for k in range(20))


def temperature_scaling(scores: np.ndarray, y: Sequence[int]) -> TemperatureScaling:
    """``calibration.json`` for the validation rows' class scores, as the train stage
    writes it: the temperature T (:func:`fit_temperature`), the NLL, ECE
    (:data:`ECE_BINS` bins) and Brier score of the raw softmax and of
    ``softmax(scores / T)``, and the scaled probabilities' risk-coverage at each
    threshold of :data:`CONFIDENCE_GRID` (:func:`coverage_at`: a row is kept when its
    top probability is at least the threshold). A fit that fails or falls outside the
    range is logged as a warning of the train stage (logger ``lorasent.stages.train``).

    Args:
        scores: float (N, K), label-word log-probabilities or head logits
            (:func:`lorasent.scoring.score_texts`).
        y: the N true class ids.

    Returns:
        The record. Not fitted, ``temperature`` None and no risk-coverage: with N = 0
        (``note``: :data:`NO_VALIDATION_NOTE`), or rows T cannot be fitted on (fewer
        than 2, or of one class: :data:`NOT_FITTED_NOTE` with the reason; the raw
        softmax's metrics are given), or rows whose fitted T is outside
        [:data:`lorasent.contracts.TEMPERATURE_MIN`,
        :data:`lorasent.contracts.TEMPERATURE_MAX`] (``note``: :data:`DEGENERATE_NOTE`,
        the raw softmax's metrics given: such a T would make every later prediction all
        but one-hot or uniform).
    """
    n = len(y)
    if n == 0:
        return _not_fitted(0, NO_VALIDATION_NOTE)
    labels = np.asarray(y, dtype=np.int64)
    before = probabilities(scores)
    raw = {"nll_before": nll(labels, before), "ece_before": ece(labels, before, bins=ECE_BINS),
           "brier_before": brier(labels, before)}
    try:
        temperature = fit_temperature(scores, labels)
    except CalibrationError as err:
        log.warning("train: %s", NOT_FITTED_NOTE.format(err))
        return _not_fitted(n, NOT_FITTED_NOTE.format(err)).model_copy(update=raw)
    if temperature_out_of_range(temperature) is not None:
        note = DEGENERATE_NOTE.format(temperature, TEMPERATURE_MIN, TEMPERATURE_MAX)
        log.warning("train: %s: %s", note, DEGENERATE_WHY)
        return _not_fitted(n, note).model_copy(update=raw)
    after = apply_temperature(scores, temperature)
    points = []
    for threshold in CONFIDENCE_GRID:
        coverage, accuracy = coverage_at(labels, after, threshold)
        points.append(RiskCoveragePoint(min_confidence=threshold, coverage=coverage,
                                        accuracy=accuracy, rows=round(coverage * n)))
    return TemperatureScaling(
        method=TEMPERATURE_METHOD, fitted_on="validation", validation_rows=n,
        temperature=temperature, note=None, ece_bins=ECE_BINS,
        nll_before=nll(labels, before), nll_after=nll(labels, after),
        ece_before=ece(labels, before, bins=ECE_BINS),
        ece_after=ece(labels, after, bins=ECE_BINS),
        brier_before=brier(labels, before), brier_after=brier(labels, after),
        risk_coverage=points)


def _not_fitted(rows: int, note: str) -> TemperatureScaling:
    """``calibration.json`` without a temperature: ``note`` says why, the metrics are
    None, the risk-coverage empty."""
    return TemperatureScaling(
        method=TEMPERATURE_METHOD, fitted_on="validation", validation_rows=rows,
        temperature=None, note=note, ece_bins=ECE_BINS, nll_before=None, nll_after=None,
        ece_before=None, ece_after=None, brier_before=None, brier_after=None,
        risk_coverage=[])



@dataclass(frozen=True, eq=False)  # eq: arrays do not compare to one bool
class LabelIssues:
    """Test rows whose given label looks wrong, most likely mislabelled first."""

    indices: npt.NDArray[np.int64]        # row numbers, ranked
    self_confidence: Array                # per flagged row: probability of its given label
    suggested: npt.NDArray[np.int64]      # per flagged row: the argmax class
    method: str                           # how they were found, with cleanlab's version


def label_issues(y: ClassIds, probs: npt.ArrayLike) -> LabelIssues:
    """Rows likely mislabelled, by confident learning (Northcutt et al. 2021).

    cleanlab's ``find_label_issues(labels, pred_probs, filter_by="prune_by_noise_rate",
    return_indices_ranked_by="self_confidence")``, in one process (``n_jobs=1``: the
    result is the same). The probabilities must be out-of-sample: of rows the model did
    not train on (a test split).

    A class absent from ``y`` keeps its column: cleanlab counts no row as confidently of
    that class, and its warning that it "may not flag all label issues" in a class of at
    most one row is silenced (expected on small splits). With rows of one class only,
    confident learning cannot estimate how the classes are confused, and no row is
    flagged (cleanlab refuses such labels, except for class 0 where it flags none).

    Returns:
        :class:`LabelIssues`; ``indices`` empty when no row is flagged.
    """
    ids, p = _checked(y, probs)
    version = metadata.version("cleanlab")
    method = (f"cleanlab {version} find_label_issues (confident learning, Northcutt et al. "
              f"2021), filter_by='prune_by_noise_rate', ranked by self_confidence")
    if len(np.unique(ids)) < 2:
        found = np.zeros(0, dtype=np.int64)
    else:
        from cleanlab.filter import find_label_issues
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "May not flag all label issues in class")
            found = np.asarray(find_label_issues(
                ids, p, filter_by="prune_by_noise_rate",
                return_indices_ranked_by="self_confidence", n_jobs=1), dtype=np.int64)
    return LabelIssues(indices=found, self_confidence=p[found, ids[found]],
                       suggested=p[found].argmax(axis=1).astype(np.int64), method=method)
