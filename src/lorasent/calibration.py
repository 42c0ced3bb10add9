"""How far a classifier's probabilities can be trusted, and which test rows look mislabelled.

- **Calibration** (:func:`calibration_metrics`): the negative log-likelihood, the Brier
  score (Brier 1950, "Verification of forecasts expressed in terms of probability") and the
  expected calibration error over :data:`ECE_BINS` equal-width bins (Guo et al. 2017, "On
  Calibration of Modern Neural Networks"), each with a 95% percentile bootstrap interval
  over the rows (10,000 resamples, seed 0) drawn from per-stratum sufficient statistics,
  so its cost does not grow with N (:data:`INTERVAL_METHOD`);
  :func:`calibration_deltas` compares two models on the same rows.
- **Temperature scaling** (:func:`fit_temperature`, Guo et al. 2017): one T > 0 such that
  ``softmax(scores / T)`` is calibrated, fitted by scikit-learn.
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

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import numpy.typing as npt
from scipy.special import softmax
from sklearn.base import BaseEstimator, ClassifierMixin

from lorasent.errors import LorasentError
from lorasent.statistics import (
    BOOTSTRAP_SEED,
    percentile_interval,
    resampled_counts,
)

if TYPE_CHECKING:
    from lorasent.metrics import ClassIds

# equal-width confidence bins, Guo et al. 2017 "On Calibration of Modern Neural Networks"
ECE_BINS = 15
PROB_FLOOR = 1e-12  # nll: a probability below it counts as it (at most 27.6 nats a row)
SUM_TOLERANCE = 1e-5  # how far a row of probs may sum from 1 (float32 softmax)
# A stratum (confidence bin, right or wrong) of at least this many rows is resampled as
# its count and a normal draw of its sum (central limit theorem); a smaller one row by row.
STRATUM_ROWS = 50
INTERVAL_METHOD = (
    "percentile bootstrap over test rows (95%, 10,000 resamples, seed 0) from per-stratum "
    f"sufficient statistics: the rows are grouped by (confidence bin, right or wrong), by "
    f"both sides' confidence bins for a paired difference; each "
    f"resample draws the strata's row counts multinomially, and the sum of a stratum of at "
    f"least {STRATUM_ROWS} rows from a normal with its mean and covariance times its count "
    f"(central limit theorem); smaller strata are resampled row by row")

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


def _ece(gap: np.ndarray, bin_of: np.ndarray, bins: int = ECE_BINS,
         rows: np.ndarray | float | None = None) -> np.ndarray:
    """ECE from gaps summed per row or cell along the last axis (any leading resample
    axes): ``sum_b |sum of the gaps in bin b| / N``, the same as ``sum_b rows_b / N *
    |accuracy_b - confidence_b|``.

    Args:
        gap: float ``(..., C)``: per row, or per cell the sum of its rows' gaps.
        bin_of: int (C,): each row's or cell's confidence bin.
        rows: N, ``(...)``; default C (one row per entry).
    """
    onehot = (np.asarray(bin_of)[:, None] == np.arange(bins)).astype(np.float64)
    n = gap.shape[-1] if rows is None else rows
    return np.asarray(np.sum(np.abs(gap @ onehot), axis=-1) / n)


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
    """
    _, _, gap, bin_of = _rows(*_checked(y, probs), bins)
    return float(_ece(gap, bin_of, bins))


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


def _strata_bootstrap(rows: Array, stratum: npt.NDArray[np.int64],
                      statistic: Callable[[Array, Array, np.ndarray], np.ndarray]
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of ``statistic`` over resampled rows, from per-stratum sufficient
    statistics (:data:`INTERVAL_METHOD`).

    Resampling N rows with replacement draws each stratum a multinomial number of times
    (exact, ``lorasent.statistics.resampled_counts``); the sum of n rows drawn from a
    stratum of at least :data:`STRATUM_ROWS` rows is drawn from a normal of mean n * its
    rows' mean and covariance n * their covariance (the central limit theorem), so a
    resample costs O(strata x D^2), not O(N). A smaller stratum's rows are cells of their
    own, drawn exactly. Same 10,000 resamples, 95%, seed 0 as ``lorasent.statistics``.

    Args:
        rows: float (N, D): per row the D values whose sums the statistic needs.
        stratum: int (N, S): per row its stratum's key (S ints).
        statistic: ``statistic(sums, counts, key)``: sums ``(B, C, D)`` and counts
            ``(B, C)`` per cell of B resamples, key (C, S) the cells' strata, returns
            ``(M, B)``.
    """
    keys, inverse, sizes = np.unique(stratum, axis=0, return_inverse=True,
                                     return_counts=True)
    inverse = inverse.reshape(-1)
    big = sizes >= STRATUM_ROWS
    small_rows = np.flatnonzero(~big[inverse])
    d = rows.shape[1]
    mean = np.zeros((int(big.sum()) + len(small_rows), d))
    root = np.zeros((int(big.sum()), d, d))  # covariance = root @ root.T
    for i, s in enumerate(np.flatnonzero(big)):
        values = rows[inverse == s]
        mean[i] = values.mean(axis=0)
        # root = X^T U / sqrt(m) for the centred rows X = U S V^T: root @ root.T is their
        # covariance, and equal columns of X (a side against itself) get equal rows
        centred = values - mean[i]
        u = np.linalg.svd(centred, full_matrices=False)[0]
        root[i] = np.einsum("md,me->de", centred, u) / np.sqrt(len(values))
    mean[len(root):] = rows[small_rows]
    key = np.concatenate([keys[big], stratum[small_rows]])
    counts = np.concatenate([sizes[big], np.ones(len(small_rows), dtype=np.int64)])
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    drawn = []
    step = max(1, 2**22 // (len(counts) * d))  # (step, C, D) float64: at most 32 MiB
    for batch in resampled_counts(counts, rng):
        noise = rng.standard_normal((len(batch), len(root), d))
        for at in range(0, len(batch), step):
            weights = batch[at:at + step]
            sums = weights[..., None] * mean
            sums[:, :len(root)] += np.sqrt(weights[:, :len(root), None]) * np.einsum(
                "sij,bsj->bsi", root, noise[at:at + step])
            drawn.append(statistic(sums, weights, key))
    return percentile_interval(np.concatenate(drawn, axis=1))


def _three(sums: np.ndarray, counts: np.ndarray, bin_of: np.ndarray) -> np.ndarray:
    """NLL, Brier and ECE from per-cell sums ``(..., C, 3)`` of :func:`_rows`' NLL, Brier
    term and gap, rows per cell ``(..., C)`` and each cell's bin (C,): ``(3, ...)``."""
    n = np.sum(counts, axis=-1)
    return np.stack([np.sum(sums[..., 0], axis=-1) / n, np.sum(sums[..., 1], axis=-1) / n,
                     _ece(sums[..., 2], bin_of, ECE_BINS, n)])


def _strata(y: npt.NDArray[np.int64], p: Array) -> tuple[Array, npt.NDArray[np.int64]]:
    """Per row: (NLL, Brier term, gap) float (N, 3) and its stratum (bin, right) (N, 2)."""
    nll_row, brier_row, gap, bin_of = _rows(y, p)
    right = (p.argmax(axis=1) == y).astype(np.int64)
    return np.stack([nll_row, brier_row, gap], axis=1), np.stack([bin_of, right], axis=1)


_NAMES = ("nll", "brier", "ece")


def calibration_metrics(y: ClassIds, probs: npt.ArrayLike) -> dict[str, float | int]:
    """NLL, Brier score and ECE (:data:`ECE_BINS` bins), each with its 95% interval.

    The intervals are a percentile bootstrap over the rows (10,000 resamples, seed 0), the
    three scored on the same resampled rows, drawn from per-stratum sufficient statistics
    (:data:`INTERVAL_METHOD`); bit-identical across runs. ECE is biased upwards on few rows
    per bin, so for a well-calibrated model its resamples may sit above the point, and the
    interval miss it: read it as a spread.

    Returns:
        ``nll``, ``nll_ci95_low``, ``nll_ci95_high``, the same for ``brier`` and ``ece``,
        and ``ece_bins``: 15.
    """
    values, stratum = _strata(*_checked(y, probs))
    low, high = _strata_bootstrap(
        values, stratum, lambda sums, counts, key: _three(sums, counts, key[:, 0]))
    points = _three(values, np.ones(len(values)), stratum[:, 0])
    out: dict[str, float | int] = {}
    for name, value, lo, hi in zip(_NAMES, points, low, high, strict=True):
        out[name], out[f"{name}_ci95_low"], out[f"{name}_ci95_high"] = (
            float(value), float(lo), float(hi))
    out["ece_bins"] = ECE_BINS
    return out


def calibration_deltas(y: ClassIds, probs_a: npt.ArrayLike, probs_b: npt.ArrayLike
                       ) -> dict[str, float]:
    """B − A in NLL, Brier score and ECE on the same rows, with paired 95% intervals.

    Args:
        y: gold ids (N,); probs_a, probs_b: (N, K), row i the same test row in both.

    Raises:
        ValueError: the shapes differ or do not fit (see the module's docstring).

    Returns:
        ``delta_nll``, ``delta_nll_ci95_low``, ``delta_nll_ci95_high``, the same for
        ``brier`` and ``ece``: negative means B is better calibrated. The bootstrap
        resamples the same rows for A and B, stratified by (A's bin, B's bin)
        (:data:`INTERVAL_METHOD`).
    """
    (ids, a), (_, b) = _checked(y, probs_a), _checked(y, probs_b)
    if a.shape != b.shape:
        raise ValueError(f"need probs_a and probs_b of one shape; got {a.shape} and {b.shape}")
    (values_a, stratum_a), (values_b, stratum_b) = _strata(ids, a), _strata(ids, b)

    def statistic(sums: np.ndarray, counts: np.ndarray, key: np.ndarray) -> np.ndarray:
        return (_three(sums[..., 3:], counts, key[:, 1])
                - _three(sums[..., :3], counts, key[:, 0]))

    values = np.concatenate([values_a, values_b], axis=1)
    # (bin A, bin B): 225 strata at most, not 900 (the ECE needs only each side's bin)
    stratum = np.stack([stratum_a[:, 0], stratum_b[:, 0]], axis=1)
    low, high = _strata_bootstrap(values, stratum, statistic)
    points = statistic(values, np.ones(len(values)), stratum)
    out = {}
    for name, value, lo, hi in zip(_NAMES, points, low, high, strict=True):
        out[f"delta_{name}"], out[f"delta_{name}_ci95_low"], out[f"delta_{name}_ci95_high"] = (
            float(value), float(lo), float(hi))
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
