"""How far a metric can be trusted: bootstrap intervals, paired tests, spread over seeds.

Resampling is numpy's (``Generator.multinomial``), tests are ``scipy.stats``'
(``binomtest``, ``ttest_ind``, ``ttest_1samp``):

- **Intervals** (:func:`intervals`): a percentile bootstrap over the test rows, 95%,
  10,000 resamples drawn from a fixed seed, so a rerun gives the same bytes (above
  10,000 rows fewer, :func:`resamples_for`: about 10^8 rows drawn). Each
  resample is drawn as counts (:func:`resampled_counts`): one multinomial draw of the N
  rows over the observed (actual, predicted[, reference or other side]) cells, at most
  K^3 of them, so its cost does not grow with N (row by row where the cells are many,
  the draws kept for the next interval over as many rows). Each bound is an order
  statistic of the resamples' values (:func:`percentile_interval`), never a value
  between two of them: an accuracy bound is k/N. Accuracy and macro-F1 are computed on
  the same resamples of the (actual, predicted) cells, whatever reference the set has;
  the relative error reduction (:func:`reduction_interval`) on resamples of its own
  (actual, predicted, reference) cells, the reference's accuracy recomputed on the
  same resampled rows as the adapter's, so its interval carries both sides' noise.
- **Paired comparison** (:func:`paired_comparison`): two classifiers scored on the same
  rows. Δ accuracy and Δ macro-F1 get a paired-bootstrap interval; McNemar's exact test
  (a two-sided binomial test on the rows where exactly one of the two is right,
  McNemar 1947; Dietterich 1998 recommends it for comparing two classifiers on one test
  set) gives the p-value.
- **Seeds** (:func:`group_comparison`): two groups of runs that differ only in
  ``base.seed``; Welch's t-test on their accuracies (Dror et al. 2018, "The Hitchhiker's
  Guide to Testing Statistical Significance in NLP", for comparing over seeds); against
  a value every run shares (:func:`constant_comparison`), the one-sample t-test
  (``ttest_1samp``) that Welch's becomes when one side does not vary.

A paired difference counts as real (:attr:`PairedComparison.significant`) only when the
interval of Δ accuracy excludes 0 *and* McNemar's p-value is below 0.05. The sentences
a reviewer reads are worded in ``lorasent.review.verdict``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np
from scipy import stats

if TYPE_CHECKING:
    from lorasent.metrics import ClassIds

CONFIDENCE = 0.95
RESAMPLES = 10_000
BOOTSTRAP_SEED = 0  # fixed: intervals must not move when base.seed does
ALPHA = 0.05
BATCH = 500  # resamples drawn at once: a (500, cells) array at a time, or fewer (CHUNK)
# At most this many counts (or drawn rows) in one batch: 500 resamples up to 262 cells
# (the default's 27), 218 of a 600-row test set's distinct calibration rows, one of
# 100,000 rows (an array of 0.8 MiB, within a core's cache: faster than larger batches,
# and memory does not grow with N). The values do not depend on it: the intervals' sums
# are whole numbers (exact) or per resample (lorasent.calibration).
CHUNK = 2**17
# Row draws kept for the next interval over as many rows (resampled_counts): at most
# this many (uint8, 128 MiB), so up to 134,217 rows. The review of one test set draws
# its rows once, not once per interval (evaluate's three references, its two
# calibrations; compare's paired test and calibration deltas).
KEPT_DRAWS = 2**27
# Row draws per interval (RESAMPLES resamples of ROWS_FOR_ALL_RESAMPLES rows): above that
# many rows an interval draws ROW_DRAWS // N resamples, not RESAMPLES, at least
# MIN_RESAMPLES (issue 61). Each resample of the rows costs N draws once the cells are
# many (a model's continuous probabilities: every row its own cell), so 10,000 of them
# at 100,000 rows were 10^9 draws and about 50 s per calibration interval on 2 loaded
# cores; 1,000 take about a second (0.45 s to draw them, 0.6 s to score NLL, Brier and
# ECE on them; docs/performance.md).
ROWS_FOR_ALL_RESAMPLES = 10_000
ROW_DRAWS = RESAMPLES * ROWS_FOR_ALL_RESAMPLES
# The fewest resamples an interval draws: Efron & Tibshirani 1993 ("An Introduction to the
# Bootstrap") take about 1,000 or more for a percentile interval, against 25 to 200 for a
# standard error (sec. 6.4); a 2.5% quantile of 1,000 resamples moves by
# sqrt(0.025 * 0.975 / 1000) = 0.005 in probability between two seeds' draws, about 0.08
# of a normal statistic's standard error (0.03 with 10,000).
MIN_RESAMPLES = 1_000
# Cells per row above which one resample is drawn row by row (N indices, counted per cell)
# rather than as one multinomial draw over the cells: numpy's multinomial costs about one
# binomial draw per cell, 1.3e-7 s, against 0.5e-7 to 1e-7 s a row index (measured on the
# 2-core dev machine, numpy 2.4: 500 resamples of 10,000 rows over 3,000 cells 0.20 s
# either way; of 100,000 rows over 5,000 cells 0.8 s against 5.0 s).
ROW_DRAWS_ABOVE = 1 / 2
# The same above ROWS_FOR_ALL_RESAMPLES rows, where the draws differ anyway (fewer
# resamples): a row index now costs about 1e-8 s with its count, a cell's binomial still
# 1e-7 s (issue 61, numpy 2.4, 2 loaded cores: 1,000 resamples of 100,000 rows over
# 3,000 cells 0.6 s as a multinomial against 0.9 s row by row, over 10,000 cells 1.4 s
# against 0.8 s).
ROW_DRAWS_ABOVE_MANY = 1 / 16


def row_draws_above(rows: int) -> float:
    """Cells per row above which a resample of ``rows`` rows is drawn row by row:
    :data:`ROW_DRAWS_ABOVE`, or :data:`ROW_DRAWS_ABOVE_MANY` above
    :data:`ROWS_FOR_ALL_RESAMPLES` rows."""
    return ROW_DRAWS_ABOVE if rows <= ROWS_FOR_ALL_RESAMPLES else ROW_DRAWS_ABOVE_MANY


def resamples_for(rows: int) -> int:
    """How many resamples an interval over ``rows`` test rows draws: :data:`RESAMPLES`
    up to :data:`ROWS_FOR_ALL_RESAMPLES` rows, above ``ROW_DRAWS // rows`` (1,000 at
    100,000 rows), never fewer than :data:`MIN_RESAMPLES`."""
    return max(MIN_RESAMPLES, min(RESAMPLES, ROW_DRAWS // max(rows, 1)))


def fewer_text(rows: int) -> str:
    """The words that say an interval over ``rows`` rows drew fewer than
    :data:`RESAMPLES` resamples, and why; empty up to :data:`ROWS_FOR_ALL_RESAMPLES`."""
    if resamples_for(rows) == RESAMPLES:
        return ""
    return (f"; above {ROWS_FOR_ALL_RESAMPLES:,} rows {ROW_DRAWS:,} / N resamples "
            f"(rounded down, at least {MIN_RESAMPLES:,}), not {RESAMPLES:,}, so that an "
            f"interval draws about {ROW_DRAWS:,} rows: {resamples_for(rows):,} for these "
            f"{rows:,} rows")


def resamples_said(resamples: int | None, named: int = RESAMPLES) -> str:
    """``"1,000 resamples"``: a set's resample count (``intervals.resamples``,
    :func:`resamples_for`), for every place that prints its intervals, where it is not
    ``named``, the count the reader is told or assumes (:data:`RESAMPLES`, or the one a
    header above gives); empty where it is, or where the record does not say (None: a
    file from before ``intervals``)."""
    return "" if resamples is None or resamples == named else f"{resamples:,} resamples"


def method_text(cells: str, rows: int = 1, over: str = "test rows") -> str:
    """How a bootstrap over ``cells`` (what rows are grouped by) draws its resamples: the
    one wording of ``intervals.method`` here and ``calibration.interval_method`` in
    ``lorasent.calibration``, its threshold :func:`row_draws_above` itself; over more
    than :data:`ROWS_FOR_ALL_RESAMPLES` ``rows``, :func:`fewer_text` follows. ``over``
    names the rows resampled (``"validation rows"`` in ``metrics/validation.json``)."""
    return (f"percentile bootstrap over {over}, drawn as counts: one multinomial draw of "
            f"the N rows over {cells} per resample (the same distribution as resampling "
            f"rows; row by row where the cells outnumber {row_draws_above(rows):g} × N)"
            + fewer_text(rows))


class IntervalMethodRecord(TypedDict):
    """``intervals`` as ``eval.json`` writes it (:class:`lorasent.contracts.IntervalMethod`)."""

    method: str
    confidence: float
    resamples: int
    seed: int


def interval_method(rows: int, over: str = "test rows") -> IntervalMethodRecord:
    """``intervals`` of ``eval.json`` and ``baseline.json``
    (:class:`lorasent.contracts.IntervalMethod`) for a test set of ``rows`` rows:
    :data:`METHOD` up to :data:`ROWS_FOR_ALL_RESAMPLES` rows; above, its ``resamples``
    is :func:`resamples_for` and its ``method`` says so. ``over`` names the rows
    (:func:`method_text`): ``"validation rows"`` for ``metrics/validation.json``."""
    return {"method": method_text("the observed (actual, predicted[, reference]) cells", rows,
                                  over),
            "confidence": CONFIDENCE, "resamples": resamples_for(rows),
            "seed": BOOTSTRAP_SEED}


METHOD = interval_method(1)  # every test set of at most ROWS_FOR_ALL_RESAMPLES rows


def cells(*columns: ClassIds) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of the paired int ``columns`` (each of length N) and their counts.

    Returns:
        ``(values, counts)``: int64 ``(len(columns), C)``, column c one distinct
        combination, and int64 ``(C,)`` how many rows hold it; ``C <= min(N, K^len)``.
    """
    stacked = np.stack([np.asarray(c, dtype=np.int64) for c in columns])
    shape = tuple(int(m) + 1 for m in stacked.max(axis=1))
    codes, counts = np.unique(np.ravel_multi_index(tuple(stacked), shape),
                              return_counts=True)  # one int per row: faster than axis=1
    return np.stack(np.unravel_index(codes, shape)).astype(np.int64), counts.astype(np.int64)


def _draw_rows(n: int, total: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """``total`` resamples of ``n`` rows drawn one by one (``Generator.integers``) in
    batches: int64 ``(b, n)``, how often each row is drawn."""
    batch = min(BATCH, max(1, CHUNK // n))
    for start in range(0, total, batch):
        b = min(batch, total - start)
        drawn = rng.integers(n, size=(b, n))
        drawn += n * np.arange(b)[:, None]
        yield np.bincount(drawn.ravel(), minlength=b * n).reshape(b, n)


@functools.lru_cache(maxsize=1)
def _drawn_rows(n: int, total: int) -> np.ndarray | None:
    """``total`` resamples of ``n`` rows drawn one by one from
    ``default_rng(BOOTSTRAP_SEED)``, kept as uint8 ``(total, n)`` for the next interval
    over as many rows (:data:`KEPT_DRAWS`); None where they do not fit in it."""
    if total * n > KEPT_DRAWS:
        return None
    kept = np.empty((total, n), dtype=np.uint8)
    done = 0
    for drawn in _draw_rows(n, total, np.random.default_rng(BOOTSTRAP_SEED)):
        if drawn.max() > np.iinfo(np.uint8).max:  # a row drawn 256 times: never kept
            return None
        kept[done:done + len(drawn)] = drawn
        done += len(drawn)
    kept.setflags(write=False)
    return kept


def _per_class(counts: np.ndarray, classes: np.ndarray, k: int) -> np.ndarray:
    """float64 ``(B, k)``: each row of ``counts`` ``(B, C)`` summed over the columns of
    each class (``classes`` (C,) in ``[0, k)``), by ``numpy.bincount``: whole numbers,
    exact whatever the order of the additions."""
    b = len(counts)
    return np.bincount((classes + k * np.arange(b)[:, None]).ravel(),
                       weights=counts.ravel(), minlength=b * k).reshape(b, k)


def resampled_counts(counts: np.ndarray, rng: np.random.Generator | None = None
                     ) -> Iterator[np.ndarray]:
    """The bootstrap's resamples as counts: how often each cell is drawn in each.

    Drawing N rows with replacement from N rows grouped into C cells of ``counts`` rows
    draws each cell a multinomial(N, counts / N) number of times (Efron & Tibshirani 1993,
    "An Introduction to the Bootstrap", ch. 6), so a resample costs O(C), not O(N)
    (numpy's ``Generator.multinomial``). Where C > N * :func:`row_draws_above` the N rows
    are drawn one by one instead (``Generator.integers``) and counted per cell: the same
    distribution, whichever is cheaper. The draws are the same whatever the batches'
    sizes: a batch of fewer resamples takes the next draws of the same stream. Drawn row
    by row, they are the same for every interval over N rows, whatever its cells (row i
    is the i-th of the cells in order): kept for the next such interval
    (:data:`KEPT_DRAWS`).

    Args:
        counts: int (C,), rows per cell, summing to N > 0.
        rng: the generator; default ``numpy.random.default_rng(BOOTSTRAP_SEED)``.

    Yields:
        int64 arrays of shape ``(b, C)``: b <= :data:`BATCH` resamples, fewer where
        b × C (or b × N, row by row) would exceed :data:`CHUNK`; ``resamples_for(N)``
        rows in all (:data:`RESAMPLES` up to 10,000 rows); each row sums to N.
    """
    counts = np.asarray(counts, dtype=np.int64)
    n, c = int(counts.sum()), len(counts)
    total = resamples_for(n)
    kept = None
    if rng is None:
        rng = np.random.default_rng(BOOTSTRAP_SEED)
        kept = _drawn_rows(n, total) if c > n * row_draws_above(n) else None
    if c > n * row_draws_above(n):
        step = min(BATCH, max(1, CHUNK // n))
        rows = (_draw_rows(n, total, rng) if kept is None
                else (kept[i:i + step] for i in range(0, total, step)))
        one_each = bool(np.all(counts == 1))  # a row per cell: its counts are the cells'
        cell_of_row = np.repeat(np.arange(c), counts)
        for drawn in rows:  # a cell's count: its rows' counts summed (whole numbers: exact)
            yield (drawn.astype(np.int64) if one_each
                   else _per_class(drawn, cell_of_row, c).astype(np.int64))
        return
    batch = min(BATCH, max(1, CHUNK // c))
    for start in range(0, total, batch):
        yield rng.multinomial(n, counts / n, size=min(batch, total - start))


def percentile_interval(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The :data:`CONFIDENCE` percentile interval of resampled values ``(M, B)``: two
    ``(M,)`` float arrays; NaN where some resample is NaN (callers make it None).

    Each bound is one of the B values, an order statistic, never interpolated between
    two (issue 70): the low bound ``numpy.quantile(method="lower")`` of the 2.5%
    quantile, the high bound ``method="higher"`` of the 97.5% (the sorted values'
    position ``q (B - 1)`` of numpy's linear default, rounded down, and up): of 10,000
    resamples the 250th from each end (0-based 249 and 9,750), of 1,000 the 25th. So
    every bound is a value some resample takes (an accuracy bound is k/N), and the
    interval holds the interpolated one (``numpy.percentile``'s linear default).
    """
    tail = (1 - CONFIDENCE) / 2
    low = np.quantile(values, tail, axis=-1, method="lower")
    high = np.quantile(values, 1 - tail, axis=-1, method="higher")
    return np.atleast_1d(low), np.atleast_1d(high)


def bootstrap(counts: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray]
              ) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of a multi-valued ``statistic`` of cells' counts (:data:`METHOD`).

    The one resampling of lorasent's intervals (95%, 10,000 resamples up to 10,000 rows,
    :func:`resamples_for`, seed 0), here and in ``lorasent.calibration``.

    Args:
        counts: int (C,), the test rows per cell (:func:`cells`).
        statistic: ``statistic(weights)`` on int weights ``(B, C)`` (B resamples' counts)
            returns ``(M, B)``: M values per resample.

    Returns:
        ``(low, high)``: float arrays of shape ``(M,)``. A statistic undefined on some
        resample (NaN) gives a NaN bound, which callers turn into ``None``.
    """
    return percentile_interval(np.concatenate(
        [statistic(weights) for weights in resampled_counts(counts)], axis=1))


def accuracy(y_true: np.ndarray, y_pred: np.ndarray, weights: np.ndarray | None = None
             ) -> np.ndarray:
    """Share of equal ids, each row or cell counted ``weights`` times.

    Args:
        y_true, y_pred: int (C,): rows, or the cells of :func:`cells`.
        weights: ``(..., C)`` counts (one bootstrap resample per leading index); None:
            each once.

    Returns:
        float ``(...)``.
    """
    right = (np.asarray(y_true) == np.asarray(y_pred)).astype(np.float64)
    if weights is None:
        return np.asarray(np.mean(right))
    return np.asarray((weights @ right) / np.sum(weights, axis=-1))


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, num_labels: int,
             weights: np.ndarray | None = None) -> np.ndarray:
    """Unweighted mean of the per-class F1 over ``num_labels`` classes, rows or cells
    counted ``weights`` times (see :func:`accuracy`).

    The same as scikit-learn's ``f1_score(average="macro", labels=range(K),
    zero_division=0)`` (a class with no true and no predicted row counts 0), for all
    resamples at once.
    """
    classes = np.arange(num_labels)
    true_c = np.asarray(y_true)[:, None] == classes  # (C, K)
    pred_c = np.asarray(y_pred)[:, None] == classes
    w = np.ones(len(true_c)) if weights is None else np.asarray(weights, dtype=np.float64)
    tp = w @ (true_c & pred_c).astype(np.float64)  # (..., K), one matrix product
    wrong = w @ (true_c ^ pred_c).astype(np.float64)  # false positives + negatives
    denominator = 2 * tp + wrong
    f1 = np.divide(2 * tp, denominator, out=np.zeros(np.shape(tp)), where=denominator > 0)
    return np.asarray(np.mean(f1, axis=-1))


class _Tally:
    """Accuracy and macro-F1 of one side's cells for batch after batch of resamples.

    From each resample's counts of the cells (int ``(B, C)``) it sums per class the true
    rows, the predicted rows and the rows right (:class:`_ByClass`): whole numbers, so
    the same values as :func:`accuracy` and :func:`macro_f1` of these counts (their
    matrix products of whole numbers are exact too), at a cost of about three passes
    over the counts, not K.
    """

    def __init__(self, y_true: np.ndarray, y_pred: np.ndarray, num_labels: int) -> None:
        right = np.flatnonzero(y_true == y_pred)
        self.true, self.predicted = _ByClass(y_true, num_labels), _ByClass(y_pred, num_labels)
        self.tp = _ByClass(y_true[right], num_labels, right)

    def accuracy_and_f1(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Float ``(B,)`` each: accuracy and macro-F1 of each resample (row) of ``counts``."""
        true, predicted, tp = (g.sums(counts) for g in (self.true, self.predicted, self.tp))
        wrong = (true + predicted - 2 * tp).astype(np.float64)  # false positives + negatives
        tp_f = tp.astype(np.float64)
        denominator = 2 * tp_f + wrong
        f1 = np.divide(2 * tp_f, denominator, out=np.zeros(np.shape(tp_f)),
                       where=denominator > 0)
        return np.sum(tp, axis=1) / np.sum(counts, axis=1), np.mean(f1, axis=-1)


class _ByClass:
    """Columns (cells or rows) of a class each, summed per class for a batch of counts:
    the columns ordered by class once, then ``numpy.add.reduceat`` over at most K runs."""

    def __init__(self, classes: np.ndarray, k: int, columns: np.ndarray | None = None
                 ) -> None:
        order = np.argsort(classes, kind="stable")
        picked = order if columns is None else columns[order]
        # None: every column, in class order already (the cells are sorted by y_true);
        # a subset (``columns``) is always picked, even one that starts 0, 1, ...
        whole = columns is None and np.array_equal(order, np.arange(len(classes)))
        self.columns = None if whole else picked
        ordered = classes[order]
        self.starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])[
            :len(ordered)]
        self.classes, self.k = ordered[self.starts], k

    def sums(self, counts: np.ndarray) -> np.ndarray:
        """int64 ``(B, K)``: each resample's counts summed per class."""
        out = np.zeros((len(counts), self.k), dtype=np.int64)
        if len(self.starts):
            picked = counts if self.columns is None else counts[:, self.columns]
            out[:, self.classes] = np.add.reduceat(picked, self.starts, axis=1)
        return out


def _as_drawn(cell: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cells as :func:`resampled_counts` draws them: themselves, or where it draws
    row by row the rows themselves in the cells' order (each cell repeated over its
    rows, counts of 1), the same draws counted per row, not per cell."""
    n = int(counts.sum())
    if len(counts) <= n * row_draws_above(n):
        return cell, counts
    return np.repeat(cell, counts, axis=1), np.ones(n, dtype=np.int64)


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def intervals(y_true: ClassIds, y_pred: ClassIds, num_labels: int,
              reference_pred: ClassIds | None = None) -> dict[str, float | None]:
    """95% bootstrap intervals of accuracy, macro-F1 and the relative error reduction.

    Accuracy and macro-F1 come from resamples of the (actual, predicted) cells alone, so
    a classifier's intervals are the same whatever reference is passed, or none; the
    relative error reduction's from :func:`reduction_interval`.

    Args:
        y_true, y_pred: gold and predicted class ids, ints in ``[0, K)``, length N > 0.
        num_labels: K.
        reference_pred: the reference's predicted ids on the same N rows (zero-shot
            predictions, or the majority class repeated). Without it there is no
            relative error reduction interval.

    Returns:
        ``accuracy_ci95_low``, ``accuracy_ci95_high``, ``macro_f1_ci95_low``,
        ``macro_f1_ci95_high`` and, with a reference, ``relative_error_reduction_ci95_low``
        and ``_high`` (``None`` when some resample's reference makes no errors, so the
        ratio is undefined). Each bound a value some resample takes
        (:func:`percentile_interval`); bit-identical across runs (fixed seed).
    """
    cell, counts = _as_drawn(*cells(y_true, y_pred))
    tally = _Tally(cell[0], cell[1], num_labels)
    low, high = bootstrap(counts, lambda weights: np.stack(tally.accuracy_and_f1(weights)))
    out: dict[str, float | None] = {}
    for name, lo, hi in zip(["accuracy", "macro_f1"], low, high, strict=True):
        out[f"{name}_ci95_low"], out[f"{name}_ci95_high"] = _finite(lo), _finite(hi)
    if reference_pred is not None:
        out["relative_error_reduction_ci95_low"], out["relative_error_reduction_ci95_high"] = (
            reduction_interval(y_true, y_pred, reference_pred))
    return out


def reduction_interval(y_true: ClassIds, y_pred: ClassIds, reference_pred: ClassIds
                       ) -> tuple[float | None, float | None]:
    """95% bootstrap interval of the relative error reduction
    ``(accuracy - reference accuracy) / (1 - reference accuracy)``.

    Drawn over the (actual, predicted, reference) cells: each resample scores the
    classifier and the reference on the same resampled rows, so the interval carries
    both sides' noise.

    Args:
        y_true, y_pred, reference_pred: gold, predicted and the reference's predicted
            class ids on the same N > 0 rows.

    Returns:
        ``(low, high)``, fractions (the reduction may be negative); ``(None, None)`` when
        some resample's reference makes no errors (the ratio is undefined there).
    """
    cell, counts = _as_drawn(*cells(y_true, y_pred, reference_pred))
    right, reference_right = np.flatnonzero(cell[0] == cell[1]), np.flatnonzero(
        cell[0] == cell[2])

    def statistic(weights: np.ndarray) -> np.ndarray:
        rows = np.sum(weights, axis=1)
        acc, ref_acc = (np.sum(weights[:, r], axis=1) / rows for r in (right, reference_right))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(ref_acc < 1, (acc - ref_acc) / (1 - ref_acc), np.nan)[None, :]

    low, high = bootstrap(counts, statistic)
    return _finite(low[0]), _finite(high[0])


def mcnemar_exact(b: int, c: int) -> float:
    """McNemar's exact two-sided p-value: ``b`` rows only B got right, ``c`` only A.

    A binomial test of ``b`` successes in ``b + c`` trials at p = 0.5
    (``scipy.stats.binomtest``); 1.0 when no row differs. b = 10, c = 2 gives 0.03857.
    """
    return 1.0 if b + c == 0 else float(stats.binomtest(b, b + c, 0.5).pvalue)


@dataclass(frozen=True)
class PairedComparison:
    """B against A on the same N rows; deltas are B − A."""

    rows: int
    accuracy: tuple[float, float]            # (A, B)
    macro_f1: tuple[float, float]
    delta_accuracy: float
    delta_accuracy_ci: tuple[float, float]   # paired bootstrap, 95%
    delta_macro_f1: float
    delta_macro_f1_ci: tuple[float, float]
    only_b_right: int                        # McNemar's b
    only_a_right: int                        # McNemar's c
    p_value: float                           # McNemar's exact test
    flips: dict[str, dict[str, int]]         # actual class -> {"fixed", "broken"}: rows

    @property
    def resamples(self) -> int:
        """The resamples its paired intervals drew: :func:`resamples_for` of its rows."""
        return resamples_for(self.rows)

    @property
    def resolution(self) -> float:
        """Half the width of Δ accuracy's interval: smaller differences are noise."""
        return (self.delta_accuracy_ci[1] - self.delta_accuracy_ci[0]) / 2

    @property
    def significant(self) -> bool:
        low, high = self.delta_accuracy_ci
        return self.p_value < ALPHA and (low > 0 or high < 0)


def paired_comparison(y_true: ClassIds, pred_a: ClassIds, pred_b: ClassIds,
                      labels: Sequence[str]) -> PairedComparison:
    """Compare B's predictions with A's on the same rows (same order).

    Args:
        y_true, pred_a, pred_b: class ids in ``[0, K)``, each of length N > 0, row i
            the same test row in all three.
        labels: the K class names.

    Raises:
        ValueError: lengths differ or N is 0.
    """
    y, a, b = (np.asarray(v, dtype=np.int64) for v in (y_true, pred_a, pred_b))
    if not (len(y) == len(a) == len(b) > 0):
        raise ValueError(f"need N > 0 rows in all three; got {len(y)}, {len(a)}, {len(b)}")
    k = len(labels)

    cell, counts = _as_drawn(*cells(y, a, b))

    tally = [_Tally(cell[0], cell[i], k) for i in (1, 2)]

    def statistic(weights: np.ndarray) -> np.ndarray:
        (acc_a, f1_a), (acc_b, f1_b) = (t.accuracy_and_f1(weights) for t in tally)
        return np.stack([acc_b - acc_a, f1_b - f1_a])

    low, high = bootstrap(counts, statistic)
    a_right, b_right = a == y, b == y
    only_b, only_a = int(np.sum(b_right & ~a_right)), int(np.sum(a_right & ~b_right))
    # each row once: the cells' counts (the same values as accuracy() and macro_f1() of
    # the rows, without their (N, K) matrices)
    points = [t.accuracy_and_f1(counts[None, :]) for t in tally]
    acc = (float(points[0][0][0]), float(points[1][0][0]))
    f1 = (float(points[0][1][0]), float(points[1][1][0]))
    return PairedComparison(
        rows=len(y), accuracy=acc, macro_f1=f1,
        delta_accuracy=acc[1] - acc[0], delta_accuracy_ci=(float(low[0]), float(high[0])),
        delta_macro_f1=f1[1] - f1[0], delta_macro_f1_ci=(float(low[1]), float(high[1])),
        only_b_right=only_b, only_a_right=only_a, p_value=mcnemar_exact(only_b, only_a),
        flips={label: {"fixed": int(np.sum((y == i) & b_right & ~a_right)),
                       "broken": int(np.sum((y == i) & a_right & ~b_right))}
               for i, label in enumerate(labels)})


@dataclass(frozen=True)
class GroupComparison:
    """Two groups of runs (one per seed); each value is one run's metric."""

    metric: str
    a: tuple[float, ...]
    b: tuple[float, ...]
    p_value: float | None  # Welch's t-test; None when neither group varies

    @staticmethod
    def spread(values: Sequence[float]) -> str:
        """``mean ± sd`` (sample standard deviation, ddof 1) and the number of runs."""
        return f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f} ({len(values)} seeds)"

    @property
    def delta(self) -> float:
        return float(np.mean(self.b) - np.mean(self.a))

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < ALPHA


def group_comparison(metric: str, a: Sequence[float], b: Sequence[float]) -> GroupComparison:
    """Welch's t-test (``scipy.stats.ttest_ind(equal_var=False)``) of B's runs against A's.

    Raises:
        ValueError: a group has fewer than 2 runs (no spread to measure).
    """
    if min(len(a), len(b)) < 2:
        raise ValueError(f"each group needs at least 2 runs to measure the spread over seeds; "
                         f"got {len(a)} and {len(b)}")
    if np.std(a) == 0 and np.std(b) == 0:
        p = None if np.mean(a) != np.mean(b) else 1.0
    else:
        p = float(stats.ttest_ind(b, a, equal_var=False).pvalue)
    return GroupComparison(metric, tuple(map(float, a)), tuple(map(float, b)), p)


def constant_comparison(metric: str, constant: float, b: Sequence[float]) -> GroupComparison:
    """B's runs against one value that every run shares (a reference fitted the same way
    whatever the seed): the one-sample t-test of B's values against ``constant``
    (``scipy.stats.ttest_1samp``, df = len(b) − 1). It is :func:`group_comparison`'s
    Welch's t-test with a side that does not vary (Welch's statistic and
    Welch–Satterthwaite df reduce to it), computed as such because ``ttest_ind`` warns
    of precision loss on a side of equal values.

    Returns:
        a :class:`GroupComparison` whose ``a`` is ``constant`` once per run of B;
        ``p_value`` None when B does not vary either and differs from it, 1.0 when
        every value equals it.

    Raises:
        ValueError: B has fewer than 2 runs (no spread to measure).
    """
    if len(b) < 2:
        raise ValueError(f"the group needs at least 2 runs to measure the spread over seeds; "
                         f"got {len(b)}")
    if np.std(b) == 0:
        p = None if np.mean(b) != constant else 1.0
    else:
        p = float(stats.ttest_1samp(b, constant).pvalue)
    return GroupComparison(metric, (float(constant),) * len(b), tuple(map(float, b)), p)


def with_interval(value: float | None, low: float | None = None, high: float | None = None,
                  *, digits: int = 4, signed: bool = False, minus: str = "-",
                  missing: str = "—", bold: bool = False) -> str:
    """``value [low, high]``: the one way a metric and its interval are printed (the
    evaluate stage's line, ``lorasent metrics``, the model card, the reports and the
    device check).

    Args:
        value: the number; None: ``missing`` alone (bold with ``bold``), or only the
            interval when there is one (a table column of intervals).
        low, high: the interval's bounds; None (either): no interval.
        digits: decimals of every number.
        signed: ``+`` before a positive number (a difference).
        minus: the minus sign: ``"−"`` (U+2212) in the sentences of a verdict.
        missing: the text of a value that is None.
        bold: the value between Markdown's ``**``.

    Returns:
        e.g. ``0.7317 [0.6950, 0.7667]``; ``+0.012 [−0.004, +0.027]`` with ``digits=3,
        signed=True, minus="−"``; ``0.7317`` without bounds.
    """
    def number(x: float) -> str:
        return f"{x:{'+' if signed else ''}.{digits}f}".replace("-", minus)

    span = f"[{number(low)}, {number(high)}]" if low is not None and high is not None else ""
    if value is None and span:
        return span
    shown = missing if value is None else number(value)
    shown = f"**{shown}**" if bold else shown
    return f"{shown} {span}" if span else shown
