"""Intervals, paired tests and seed spread, with exact values where they are knowable."""

import subprocess

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import f1_score

from conftest import REPO, monte_carlo_error
from lorasent import statistics
from lorasent.metrics import read_predictions
from lorasent.review.verdict import group_verdict, paired_verdict
from lorasent.statistics import (
    METHOD,
    RESAMPLES,
    PairedComparison,
    cells,
    group_comparison,
    interval_method,
    intervals,
    macro_f1,
    mcnemar_exact,
    paired_comparison,
    resampled_counts,
    resamples_for,
)

LABELS = ["negative", "neutral", "positive"]
COMMITTED_RUN = "86c64df"  # the run whose intervals the count bootstrap must keep


def read_committed(path):
    """A predictions file as committed at :data:`COMMITTED_RUN` (through git, not the
    workspace: a rerun changes the workspace's)."""
    done = subprocess.run(["git", "show", f"{COMMITTED_RUN}:{path}"], cwd=REPO,
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"no commit {COMMITTED_RUN} here (a shallow clone or an archive)")
    return read_predictions(done.stdout, f"{COMMITTED_RUN}:{path}")


def _predictions(n=600, right=0.7, seed=1):
    """A fixed n-row vector of gold ids and predictions that are right about ``right``
    of the time."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    return y, np.where(rng.random(n) < right, y, rng.integers(0, 3, n))


def test_mcnemar_exact_p():
    assert mcnemar_exact(10, 2) == pytest.approx(0.03857, abs=5e-6)
    assert mcnemar_exact(2, 10) == mcnemar_exact(10, 2)
    assert mcnemar_exact(0, 0) == 1.0


def test_macro_f1_equals_scikit_learn_on_every_resample_of_a_batch():
    y, pred = _predictions(n=50)
    weights = np.stack([np.ones(50, int), np.arange(50) % 3, (np.arange(50) < 10) * 4])
    expected = [f1_score(y, pred, labels=[0, 1, 2], average="macro", zero_division=0,
                         sample_weight=w) for w in weights]
    np.testing.assert_allclose(macro_f1(y, pred, 3, weights), expected, rtol=1e-12)
    assert macro_f1(y, pred, 3) == pytest.approx(expected[0], rel=1e-12)


def test_cells_are_the_distinct_rows_and_their_counts():
    values, counts = cells(np.array([2, 0, 2, 2]), np.array([1, 0, 1, 0]))
    assert values.tolist() == [[0, 2, 2], [0, 0, 1]]
    assert counts.tolist() == [1, 1, 2]


@pytest.mark.parametrize("counts", [[300, 200, 100], [1] * 40])
def test_resampled_counts_sum_to_the_rows_and_average_the_counts(counts):
    """Both draws (multinomial over few cells, row by row over many) keep N per resample,
    and each cell's mean count is its count, within Monte Carlo error."""
    drawn = np.concatenate(list(resampled_counts(np.array(counts))))
    assert drawn.shape == (RESAMPLES, len(counts))
    assert set(drawn.sum(axis=1).tolist()) == {sum(counts)}
    n = sum(counts)
    p = np.array(counts) / n
    error = np.sqrt(n * p * (1 - p) / RESAMPLES)
    assert np.all(np.abs(drawn.mean(axis=0) - counts) < 5 * error)


def _row_bootstrap(y, pred, reference, k, seed=7):
    """Today's way, kept here as the yardstick: resample rows (indices), score each
    resample with plain numpy on the (B, N) arrays."""
    idx = np.random.default_rng(seed).integers(len(y), size=(RESAMPLES, len(y)))
    yy, pp, rr = y[idx], pred[idx], reference[idx]
    acc, ref_acc = np.mean(yy == pp, axis=1), np.mean(yy == rr, axis=1)
    f1 = []
    for c in range(k):
        tp = np.sum((yy == c) & (pp == c), axis=1)
        wrong = np.sum((yy == c) ^ (pp == c), axis=1)
        f1.append(np.divide(2 * tp, 2 * tp + wrong, out=np.zeros(len(tp)),
                            where=2 * tp + wrong > 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        rer = np.where(ref_acc < 1, (acc - ref_acc) / (1 - ref_acc), np.nan)
    return {"accuracy": acc, "macro_f1": np.mean(f1, axis=0), "relative_error_reduction": rer}


@pytest.mark.parametrize(("n", "k", "right", "seed"),
                         [(30, 2, 0.8, 1), (200, 3, 0.6, 2), (600, 3, 0.7, 3),
                          (1000, 5, 0.5, 4), (800, 20, 0.4, 5)])
def test_the_count_bootstrap_is_the_row_bootstrap(n, k, right, seed):
    """Property: on random predictions, the intervals drawn as counts over cells are the
    row bootstrap's quantiles within Monte Carlo error."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    pred = np.where(rng.random(n) < right, y, rng.integers(0, k, n))
    reference = np.where(rng.random(n) < right / 2, y, rng.integers(0, k, n))
    ours = intervals(y, pred, k, reference)
    for name, resampled in _row_bootstrap(y, pred, reference, k).items():
        for end, q in (("low", 0.025), ("high", 0.975)):
            expected = np.quantile(resampled, q)
            assert ours[f"{name}_ci95_{end}"] == pytest.approx(
                expected, abs=monte_carlo_error(resampled, q)), (name, end)


def test_one_class_one_row_and_a_class_nobody_predicts():
    """The bad cases: the intervals of the row bootstrap, or None with the reason."""
    one = intervals([1], [1], 3, [0])
    assert one == {"accuracy_ci95_low": 1.0, "accuracy_ci95_high": 1.0,
                   "macro_f1_ci95_low": 1 / 3, "macro_f1_ci95_high": 1 / 3,
                   "relative_error_reduction_ci95_low": 1.0,
                   "relative_error_reduction_ci95_high": 1.0}
    # a perfect reference: the ratio is undefined on every resample
    assert intervals([1], [0], 3, [1])["relative_error_reduction_ci95_low"] is None
    single_class = intervals([2] * 50, [2] * 40 + [0] * 10, 3)
    assert single_class["accuracy_ci95_low"] == pytest.approx(0.7, abs=0.02)
    # class 1 is never predicted nor true, class 0 never true: both count 0 in macro-F1
    high = single_class["macro_f1_ci95_high"]
    assert high is not None and high < 1 / 3


def test_twenty_classes_on_100k_rows_stay_within_the_cells():
    """No K^3 blow-up: only the observed cells are drawn (at most N of them)."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 20, 100_000)
    a, b = (np.where(rng.random(len(y)) < 0.6, y, rng.integers(0, 20, len(y)))
            for _ in range(2))
    values, counts = cells(y, a, b)
    assert values.shape[1] == len(counts) <= min(len(y), 20**3)
    drawn = next(resampled_counts(counts))
    # 6,995 cells outnumber 100,000 / 16: drawn row by row, one resample of 100,000 rows
    # a batch (CHUNK, issue 61), counted per cell
    assert len(counts) == 6_995 and drawn.shape == (1, len(counts))
    assert drawn.sum() == len(y)


def test_fewer_resamples_above_10_000_rows_at_least_1_000():
    """Issue 61: 10,000 resamples up to 10,000 rows; above, 10^8 / N (rounded down), at
    least 1,000, so an interval draws about 10^8 rows, not 10^9 at 100,000."""
    assert [resamples_for(n) for n in (1, 600, 10_000, 10_001, 30_000, 100_000, 10**6)] == [
        10_000, 10_000, 10_000, 9_999, 3_333, 1_000, 1_000]


def test_the_interval_method_is_today_s_up_to_10_000_rows_and_names_fewer_above():
    """The committed run's ``intervals`` (600 rows) keep their bytes; a larger test set's
    say how many resamples it drew and why."""
    assert interval_method(600) == interval_method(10_000) == METHOD
    assert METHOD["resamples"] == RESAMPLES
    assert METHOD["method"].endswith("(the same distribution as resampling rows; row by "
                                     "row where the cells outnumber 0.5 × N)")
    big = interval_method(100_000)
    assert {k: v for k, v in big.items() if k != "method"} == {
        "confidence": 0.95, "resamples": 1_000, "seed": 0}
    assert big["method"] == (
        "percentile bootstrap over test rows, drawn as counts: one multinomial draw of the "
        "N rows over the observed (actual, predicted[, reference]) cells per resample (the "
        "same distribution as resampling rows; row by row where the cells outnumber 0.0625 "
        "× N); above 10,000 rows 100,000,000 / N resamples (rounded down, at least 1,000), "
        "not 10,000, so that an interval draws about 100,000,000 rows: 1,000 for these "
        "100,000 rows")


def _stream(counts, resamples):
    """The yardstick of the draws row by row: ``resamples`` × N row indices from the
    seed's stream, row i the i-th of the cells in order, counted per cell."""
    n, c = sum(counts), len(counts)
    idx = np.random.default_rng(0).integers(n, size=(resamples, n))
    cell_of_row = np.repeat(np.arange(c), counts)[idx] + c * np.arange(resamples)[:, None]
    return np.bincount(cell_of_row.ravel(), minlength=resamples * c).reshape(resamples, c)


@pytest.mark.parametrize("counts", [[1] * 50, [2] * 20 + [1] * 10, [3, 0, 1] * 9])
def test_the_draws_kept_for_the_next_interval_are_the_seed_s_draws(counts):
    """Drawn row by row, the resamples are kept for the next interval over as many rows
    (issue 61): they, the fresh draws and the yardstick's are the same, count for count."""
    statistics._drawn_rows.cache_clear()
    expected = _stream(counts, RESAMPLES)
    fresh = np.concatenate(list(resampled_counts(np.array(counts), np.random.default_rng(0))))
    first = np.concatenate(list(resampled_counts(np.array(counts))))  # draws and keeps
    again = np.concatenate(list(resampled_counts(np.array(counts))))  # from the kept draws
    assert statistics._drawn_rows.cache_info().hits >= 1
    for drawn in (fresh, first, again):
        assert drawn.dtype == np.int64 and np.array_equal(drawn, expected)


def test_above_the_rows_for_all_resamples_the_draws_are_the_first_of_the_same_stream(
        monkeypatch):
    """Fewer resamples are the first ones of the same stream, drawn row by row from 1/16
    of a cell per row on: here 40 rows above a threshold moved to 20 rows, 10^5 / 40 =
    2,500 resamples over 5 cells (a multinomial below that many rows)."""
    monkeypatch.setattr(statistics, "ROWS_FOR_ALL_RESAMPLES", 20)
    monkeypatch.setattr(statistics, "ROW_DRAWS", 100_000)
    monkeypatch.setattr(statistics, "MIN_RESAMPLES", 100)
    counts = [10, 10, 10, 5, 5]
    assert resamples_for(40) == 2_500 and len(counts) > 40 / 16
    drawn = np.concatenate(list(resampled_counts(np.array(counts))))
    assert np.array_equal(drawn, _stream(counts, RESAMPLES)[:2_500])
    assert interval_method(40)["resamples"] == 2_500


def test_intervals_drawn_row_by_row_are_the_percentiles_of_the_seed_s_own_resamples():
    """Many cells (20 classes, 300 rows): the rows are drawn one by one, and the bounds are
    exactly the 2.5% and 97.5% order statistics of those resamples' accuracy and macro-F1
    (whole-number counts: no rounding apart): values of the resamples, not between two."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 20, 300)
    pred = np.where(rng.random(300) < 0.5, y, rng.integers(0, 20, 300))
    cell, counts = cells(y, pred)
    assert len(counts) > 150  # row by row
    drawn = _stream(counts.tolist(), RESAMPLES)
    acc = drawn @ (cell[0] == cell[1]) / 300
    f1 = macro_f1(cell[0], cell[1], 20, drawn)
    found = intervals(y, pred, 20)
    for name, values in (("accuracy", acc), ("macro_f1", f1)):
        low = np.quantile(values, 0.025, method="lower")
        high = np.quantile(values, 0.975, method="higher")
        assert (found[f"{name}_ci95_low"], found[f"{name}_ci95_high"]) == (low, high), name
        assert np.sort(values)[[249, 9_750]].tolist() == [low, high], name


def test_the_committed_run_s_intervals_move_less_than_0_005():
    """The intervals of the run committed at 86c64df (600 tweets), drawn as counts, are
    that run's eval.json values (the row bootstrap of scipy) within 0.005."""
    pinned = {  # metrics/eval.json at 86c64df: (low, high)
        "accuracy": (0.665, 0.7383333333333333),
        "macro_f1": (0.6248178445436147, 0.708963457864121),
        "relative_error_reduction": (0.4338592465098489, 0.5601092896174864)}
    pinned_references = {"majority": (0.41284403669724784, 0.5409356725146197),
                         "zero_shot": (0.46556473829201095, 0.586736253180979)}
    pinned_baseline = {"baseline_predictions.csv": {"accuracy": (0.33000000000000007,
                                                                 0.4066666666666667),
                                                    "macro_f1": (0.2799637266671704,
                                                                 0.3333544412300129)}}
    run = read_committed("metrics/predictions.csv")
    calibrated = read_committed("metrics/baseline_calibrated_predictions.csv")
    zero_shot = read_committed("metrics/baseline_predictions.csv")
    y, k = run.actual, len(run.labels)
    found = intervals(y, run.predicted, k, calibrated.predicted)
    majority = np.zeros_like(y)  # "negative", metrics/eval.json's majority_class
    for name, (low, high) in pinned.items():
        assert found[f"{name}_ci95_low"] == pytest.approx(low, abs=0.005), name
        assert found[f"{name}_ci95_high"] == pytest.approx(high, abs=0.005), name
    for name, reference in (("majority", majority), ("zero_shot", zero_shot.predicted)):
        found = intervals(y, run.predicted, k, reference)
        low, high = pinned_references[name]
        assert found["relative_error_reduction_ci95_low"] == pytest.approx(low, abs=0.005)
        assert found["relative_error_reduction_ci95_high"] == pytest.approx(high, abs=0.005)
    found = intervals(y, zero_shot.predicted, k)
    for name, (low, high) in pinned_baseline["baseline_predictions.csv"].items():
        assert found[f"{name}_ci95_low"] == pytest.approx(low, abs=0.005), name
        assert found[f"{name}_ci95_high"] == pytest.approx(high, abs=0.005), name


def test_interval_is_bit_identical_across_runs_and_holds_its_point():
    y, pred = _predictions()
    reference = np.zeros_like(y)
    first, second = intervals(y, pred, 3, reference), intervals(y, pred, 3, reference)
    assert first == second
    acc = np.mean(y == pred)
    ref = np.mean(y == reference)
    points = {"accuracy": acc, "macro_f1": macro_f1(y, pred, 3),
              "relative_error_reduction": (acc - ref) / (1 - ref)}
    for name, point in points.items():
        assert first[f"{name}_ci95_low"] < point < first[f"{name}_ci95_high"], name


def test_relative_error_reduction_interval_is_none_when_the_reference_is_perfect():
    y, pred = _predictions(n=40)
    found = intervals(y, pred, 3, reference_pred=y)
    assert found["relative_error_reduction_ci95_low"] is None
    assert found["relative_error_reduction_ci95_high"] is None


def test_a_run_against_itself_is_no_detectable_difference():
    y, pred = _predictions()
    same = paired_comparison(y, pred, pred, LABELS)
    assert (same.delta_accuracy, same.delta_accuracy_ci, same.p_value) == (0.0, (0.0, 0.0), 1.0)
    assert same.delta_macro_f1 == 0.0 and not same.significant
    assert same.flips == {label: {"fixed": 0, "broken": 0} for label in LABELS}
    assert paired_verdict(same) == ("No detectable difference: accuracy +0.000 [+0.000, +0.000], "
                              "McNemar p = 1; macro-F1 +0.000 [+0.000, +0.000]. A and B are "
                              "right on exactly the same rows.")


def test_a_clear_improvement_is_reported_with_its_interval_and_p():
    y, a = _predictions(right=0.6)
    b = np.where(np.arange(len(y)) % 3 == 0, y, a)  # fixes a third of A's errors
    found = paired_comparison(y, a, b, LABELS)
    assert found.only_a_right == 0 and found.only_b_right == int(np.sum((b == y) & (a != y)))
    assert sum(f["fixed"] for f in found.flips.values()) == found.only_b_right
    assert found.significant and found.delta_accuracy_ci[0] > 0
    assert paired_verdict(found).startswith(
        f"B is better than A: accuracy +{found.delta_accuracy:.3f}")


def test_noise_is_no_detectable_difference_and_names_the_resolution():
    y, a = _predictions()
    right, wrong = np.flatnonzero(a == y), np.flatnonzero(a != y)
    b = a.copy()
    b[right[:5]] = (y[right[:5]] + 1) % 3  # B breaks 5 of A's right rows ...
    b[wrong[:3]] = y[wrong[:3]]             # ... and fixes 3 of its wrong ones
    found = paired_comparison(y, a, b, LABELS)
    assert (found.only_b_right, found.only_a_right) == (3, 5)
    assert found.p_value == pytest.approx(mcnemar_exact(3, 5)) and not found.significant
    assert paired_verdict(found).startswith("No detectable difference: accuracy −0.003 [")
    assert paired_verdict(found).endswith(
        f"With 600 test rows, accuracy differences smaller than about "
        f"{found.resolution:.3f} cannot be told apart from noise.")


def test_seed_groups_welch():
    found = group_comparison("accuracy", [0.70, 0.71, 0.69], [0.74, 0.75, 0.76])
    assert found.p_value == pytest.approx(
        stats.ttest_ind([0.74, 0.75, 0.76], [0.70, 0.71, 0.69], equal_var=False).pvalue)
    assert group_verdict(found) == (
        "B is better than A over seeds: accuracy 0.7000 ± 0.0100 (3 seeds) in A against "
        "0.7500 ± 0.0100 (3 seeds) in B, Δ +0.050, Welch's t-test p = 0.0036.")
    same = group_comparison("accuracy", [0.7, 0.7], [0.7, 0.7])
    assert same.p_value == 1.0 and group_verdict(same).startswith("No detectable difference")
    with pytest.raises(ValueError, match="at least 2 runs"):
        group_comparison("accuracy", [0.7], [0.7, 0.71])


def test_a_macro_f1_change_outside_the_noise_is_said_when_accuracy_is_not():
    found = PairedComparison(
        rows=48, accuracy=(0.479, 0.396), macro_f1=(0.352, 0.189), delta_accuracy=-0.083,
        delta_accuracy_ci=(-0.271, 0.104), delta_macro_f1=-0.163,
        delta_macro_f1_ci=(-0.261, -0.053), only_b_right=6, only_a_right=10, p_value=0.45,
        flips={})
    assert paired_verdict(found) == (
        "No detectable difference in accuracy: accuracy −0.083 [−0.271, +0.104], McNemar "
        "p = 0.45; macro-F1 −0.163 [−0.261, −0.053]. With 48 test rows, accuracy differences "
        "smaller than about 0.188 cannot be told apart from noise. But macro-F1 is lower in "
        "B: its "
        "interval excludes 0 (report.md's per-class table).")


@pytest.mark.parametrize(("actual", "predicted"), [
    ([0] * 20, [0] * 11 + [1] * 9),     # the right rows are the first cell (CI, stop 67)
    ([2] * 50, [2] * 40 + [0] * 10),    # the right rows are the last cell
    ([0, 0, 1, 1, 2], [0, 1, 1, 2, 2]),  # every class right once, in cell order
    ([1, 2, 2, 0], [0, 0, 2, 0])])
def test_the_tally_of_resampled_cells_is_accuracy_and_macro_f1_of_them(actual, predicted):
    """The per-class sums of the cells the intervals use are the values accuracy() and
    macro_f1() give for the same resampled counts, whichever cells hold the right rows."""
    cell, counts = statistics.cells(np.array(actual), np.array(predicted))
    weights = next(statistics.resampled_counts(counts))
    acc, f1 = statistics._Tally(cell[0], cell[1], 3).accuracy_and_f1(weights)
    assert np.array_equal(acc, statistics.accuracy(cell[0], cell[1], weights))
    assert np.array_equal(f1, statistics.macro_f1(cell[0], cell[1], 3, weights))
    share = float(np.mean(np.array(actual) == np.array(predicted)))
    found = intervals(actual, predicted, 3)
    low, high = found["accuracy_ci95_low"], found["accuracy_ci95_high"]
    assert low is not None and high is not None and low <= share <= high


def _every_resample(k, *columns):
    """Every resample's accuracy and macro-F1 of ``columns[1]`` (and, given a third
    column, the relative error reduction against it), recomputed from the seed's own
    draws of the cells the intervals draw: the values a bound must be one of."""
    cell, counts = statistics._as_drawn(*cells(*columns))
    weights = np.concatenate(list(resampled_counts(counts)))
    rows = weights.sum(axis=1)
    acc = weights @ (cell[0] == cell[1]).astype(np.float64) / rows
    found = {"accuracy": acc, "macro_f1": macro_f1(cell[0], cell[1], k, weights)}
    if len(columns) == 3:
        ref = weights @ (cell[0] == cell[2]).astype(np.float64) / rows
        with np.errstate(divide="ignore", invalid="ignore"):
            found["relative_error_reduction"] = np.where(ref < 1, (acc - ref) / (1 - ref),
                                                         np.nan)
    return found


@pytest.mark.parametrize("n", [*range(1, 61), 10_001, 25_000, 100_000])
def test_every_bound_is_a_value_some_resample_takes(n):
    """Issue 70: no bound interpolated between two resamples (0.2911 on 48 rows is
    neither 13/48 nor 14/48). Over many sizes, 2 to 5 classes, 10,000 resamples or
    fewer (above 10,000 rows): an accuracy bound is k/N, and every bound, the macro-F1's
    and the relative error reduction's too, is the value of one of the seed's resamples,
    the 2.5% and 97.5% order statistics of them."""
    k = 2 + n % 4
    rng = np.random.default_rng(n)
    y = rng.integers(0, k, n)
    pred = np.where(rng.random(n) < 0.6, y, rng.integers(0, k, n))
    reference = np.where(rng.random(n) < 0.4, y, rng.integers(0, k, n))
    found = intervals(y, pred, k, reference)
    values = {**_every_resample(k, y, pred),
              "relative_error_reduction": _every_resample(k, y, pred, reference)[
                  "relative_error_reduction"]}
    assert len(values["accuracy"]) == resamples_for(n)
    for end in ("low", "high"):
        bound = found[f"accuracy_ci95_{end}"]
        assert bound is not None and bound == round(bound * n) / n, (end, bound)
    for name, resampled in values.items():
        if np.isnan(resampled).any():  # a resample whose reference makes no errors
            assert found[f"{name}_ci95_low"] is found[f"{name}_ci95_high"] is None
            continue
        ordered = np.sort(resampled)
        b = len(ordered)
        assert [found[f"{name}_ci95_low"], found[f"{name}_ci95_high"]] == [
            ordered[int(np.floor(0.025 * (b - 1)))], ordered[int(np.ceil(0.975 * (b - 1)))]
        ], name


@pytest.mark.parametrize("b", [1, 2, 3, 39, 40, 41, 999, 1_000, 3_333, 10_000])
def test_a_percentile_interval_takes_its_bounds_from_the_values(b):
    """Property, on random values with ties: each bound is one of the B values, and the
    interval holds numpy's interpolated percentiles (never narrower)."""
    rng = np.random.default_rng(b)
    values = np.round(rng.normal(size=(3, b)), 2)
    low, high = statistics.percentile_interval(values)
    interpolated = np.percentile(values, [2.5, 97.5], axis=-1)
    for row, lo, hi, (p_lo, p_hi) in zip(values, low, high, interpolated.T, strict=True):
        assert lo in row and hi in row
        assert lo <= p_lo <= p_hi <= hi


@pytest.mark.parametrize("n", [2, 7, 30, 48, 600, 12_000])
def test_the_adapter_s_intervals_do_not_move_with_its_reference(n):
    """Issue 70: accuracy and macro-F1's intervals are drawn from their own resamples:
    the same predictions give the same bounds with no reference, a reference, another,
    a tied one (as right as the adapter, or the adapter itself) and a perfect one."""
    rng = np.random.default_rng(n)
    y = rng.integers(0, 3, n)
    pred = np.where(rng.random(n) < 0.6, y, rng.integers(0, 3, n))
    alone = intervals(y, pred, 3)
    assert set(alone) == {"accuracy_ci95_low", "accuracy_ci95_high", "macro_f1_ci95_low",
                          "macro_f1_ci95_high"}
    tied = np.where(pred == y, (y + 1) % 3, y)[::-1]  # right as often, elsewhere: no
    references = [np.zeros(n, dtype=np.int64), rng.integers(0, 3, n), pred, y,
                  np.where(pred == y, y, (y + 1) % 3), tied]
    for i, reference in enumerate(references):
        found = intervals(y, pred, 3, reference)
        assert {key: found[key] for key in alone} == alone, i
