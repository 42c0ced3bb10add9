"""Calibration, temperature scaling, risk-coverage and label issues, with exact values:
by hand on four rows, against scikit-learn, scipy and cleanlab elsewhere."""

import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from cleanlab.filter import find_label_issues
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax
from sklearn.metrics import brier_score_loss, log_loss

from conftest import REPO, monte_carlo_error
from lorasent import statistics
from lorasent.calibration import (
    ECE_BINS,
    PROB_FLOOR,
    CalibrationError,
    apply_temperature,
    brier,
    calibration_deltas,
    calibration_metrics,
    coverage_at,
    ece,
    fit_temperature,
    interval_method,
    interval_note,
    label_issues,
    nll,
    reliability_bins,
    risk_coverage,
)
from lorasent.statistics import RESAMPLES, resamples_for

# Four rows, K = 3, three of them with a confidence on a bin edge of the 15 bins
# (0.8 = 12/15, 0.6 = 9/15, 0.4 = 6/15); row 2 ties 0.4/0.4 and predicts class 0.
Y = np.array([0, 1, 1, 1])
P = np.array([[0.8, 0.1, 0.1],     # conf 0.80, right, bin 11 = (11/15, 12/15]
              [0.2, 0.6, 0.2],     # conf 0.60, right, bin 8 = (8/15, 9/15]
              [0.4, 0.4, 0.2],     # conf 0.40, wrong, bin 5 = (5/15, 6/15]
              [0.05, 0.3, 0.65]])  # conf 0.65, wrong, bin 9 = (9/15, 10/15]


def _softmax_rows(n, k, temperature, seed, scale=2.0):
    """Scores z ~ N(0, scale) and labels drawn from softmax(z / temperature)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, scale, (n, k))
    p = apply_temperature(z, temperature)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return z, np.minimum(y, k - 1)


def _scipy_temperature(z, y):
    """T minimising the NLL of softmax(z / T), by scipy over log T."""
    def loss(log_t):
        return -np.mean(log_softmax(z / np.exp(log_t), axis=1)[np.arange(len(y)), y])
    found = minimize_scalar(loss, bounds=(-10, 10), method="bounded", options={"xatol": 1e-10})
    return float(np.exp(found.x))


def test_nll_brier_and_ece_by_hand():
    assert nll(Y, P) == pytest.approx(-(math.log(0.8) + math.log(0.6) + math.log(0.4)
                                        + math.log(0.3)) / 4, rel=1e-12)
    # rows: 0.04+0.01+0.01, 0.04+0.16+0.04, 0.16+0.36+0.04, 0.0025+0.49+0.4225
    assert brier(Y, P) == pytest.approx(1.775 / 4, rel=1e-12)
    # one row per bin: (|0.8-1| + |0.6-1| + |0.4-0| + |0.65-0|) / 4; with [lo, hi) bins
    # rows 1 and 3 would share bin 9 and give 0.2125
    assert ece(Y, P) == pytest.approx(1.65 / 4, rel=1e-12)
    assert ece(Y, P, bins=1) == pytest.approx(abs(2.45 / 4 - 0.5), rel=1e-12)
    # two bins: [0, 0.5] holds row 2, (0.5, 1] rows 0, 1, 3 (conf 2.05, 2 right)
    assert ece(Y, P, bins=2) == pytest.approx((0.4 + 0.05) / 4, rel=1e-12)


def test_reliability_bins_put_an_edge_in_the_lower_bin():
    table = reliability_bins(Y, P)
    assert len(table) == ECE_BINS
    assert [row["bin"] for row in table] == list(range(15))
    assert table[0]["low"] == 0.0 and table[14]["high"] == 1.0
    assert table[8]["low"] == pytest.approx(8 / 15) and table[8]["high"] == 0.6
    filled = {row["bin"]: (row["rows"], row["confidence"], row["accuracy"])
              for row in table if row["rows"]}
    assert filled == {5: (1, 0.4, 0.0), 8: (1, 0.6, 1.0), 9: (1, 0.65, 0.0),
                      11: (1, 0.8, 1.0)}
    assert all(row["confidence"] is None and row["accuracy"] is None
               for row in table if not row["rows"])
    # ECE is the row-weighted gap of the diagram
    gaps = sum(row["rows"] / 4 * abs(row["accuracy"] - row["confidence"])
               for row in table if row["accuracy"] is not None and row["confidence"] is not None)
    assert ece(Y, P) == pytest.approx(gaps, rel=1e-12)


def test_a_confidence_of_one_is_in_the_last_bin_and_of_one_half_in_its_own():
    y, p = np.array([0, 1]), np.array([[1.0, 0.0], [0.5, 0.5]])
    rows = [row["rows"] for row in reliability_bins(y, p, bins=4)]
    assert rows == [0, 1, 0, 1]  # 0.5 in (0.25, 0.5], 1.0 in (0.75, 1]


def test_nll_and_brier_equal_scikit_learn():
    rng = np.random.default_rng(3)
    for k in (2, 4):
        p = rng.dirichlet(np.ones(k), 50)
        y = rng.integers(0, k, 50)
        labels = list(range(k))
        assert nll(y, p) == pytest.approx(log_loss(y, p, labels=labels), rel=1e-12)
        # ours is the sum over classes: scikit-learn's scale_by_half=False
        assert brier(y, p) == pytest.approx(
            brier_score_loss(y, p, labels=labels, scale_by_half=False), rel=1e-12)
    # scikit-learn 1.9's default keeps the sum for K > 2 and halves it for K = 2
    assert brier(Y, P) == pytest.approx(brier_score_loss(Y, P, labels=[0, 1, 2]), rel=1e-12)
    y2, p2 = np.array([0, 1, 1]), np.array([[0.8, 0.2], [0.3, 0.7], [0.4, 0.6]])
    assert brier(y2, p2) == pytest.approx(2 * brier_score_loss(y2, p2), rel=1e-12)


def test_nll_counts_a_zero_probability_as_1e_12():
    assert nll([1], [[1.0, 0.0]]) == pytest.approx(-math.log(1e-12), rel=1e-12)


@pytest.mark.parametrize(("y", "probs", "message"), [
    ([0, 1], [[0.5, 0.5]], "shape"),
    ([], np.zeros((0, 2)), "shape"),
    ([0], [[1.0]], "K >= 2"),
    ([0, 2], [[0.5, 0.5], [0.5, 0.5]], r"ids in \[0, 2\)"),
    ([0.0, 1.0], [[0.5, 0.5], [0.5, 0.5]], "int class ids"),
    ([0, 1], [[0.5, 0.6], [0.5, 0.5]], "sum to 1"),
    ([0, 1], [[1.5, -0.5], [0.5, 0.5]], "sum to 1"),
    ([0, 1], [[np.nan, 0.5], [0.5, 0.5]], "NaN"),
])
def test_bad_inputs_are_one_clear_value_error(y, probs, message):
    with pytest.raises(ValueError, match=message):
        calibration_metrics(y, probs)


def _overconfident(n=600, seed=1):
    """Labels from softmax(z); probabilities softmax(2z) (overconfident) and softmax(z)."""
    z, y = _softmax_rows(n, 3, 1.0, seed)
    return y, apply_temperature(z, 0.5), apply_temperature(z, 1.0)


def test_intervals_are_bit_identical_across_runs_and_hold_their_point():
    y, p, _ = _overconfident()
    first, second = calibration_metrics(y, p), calibration_metrics(y, p)
    assert first == second
    assert first["ece_bins"] == 15
    for name, value in (("nll", nll(y, p)), ("brier", brier(y, p)), ("ece", ece(y, p))):
        assert first[name] == pytest.approx(value, rel=1e-12)
        assert first[f"{name}_ci95_low"] < value < first[f"{name}_ci95_high"], name


def _calibrated(seed, n=300):
    """``n`` rows whose labels are drawn from their own probabilities (K = 3): calibrated,
    so the plug-in ECE's upward bias is all of it."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet([1, 1, 1], size=n)
    return np.array([rng.choice(3, p=row) for row in p]), p


def test_an_interval_that_leaves_out_its_estimate_says_why_and_one_that_holds_it_says_nothing():
    """Issue 62: the committed ECE after temperature 0.0295 had the interval [0.0297,
    0.0744]. Seed 5's calibrated rows do the same; seed 0's interval holds its ECE."""
    y, p = _calibrated(5)
    m = calibration_metrics(y, p)
    assert m["ece"] < m["ece_ci95_low"]
    assert m["interval_note"] == (
        f"the 95% interval of ECE [{m['ece_ci95_low']:.4f}, {m['ece_ci95_high']:.4f}] lies "
        f"above its estimate {m['ece']:.4f}: ECE over equal-width bins is biased upward, the "
        "more so the fewer rows per bin (Kumar et al. 2019), and a resample repeats rows; "
        "the interval is the spread of the resampled ECE, the estimate is the point")
    y, p = _calibrated(0)
    m = calibration_metrics(y, p)
    assert m["ece_ci95_low"] <= m["ece"] <= m["ece_ci95_high"]
    assert "interval_note" not in m


def test_interval_note_names_each_statistic_and_side_it_misses():
    assert interval_note(("nll", "brier", "ece"), (0.5, 0.3, 0.02), (0.4, 0.31, 0.0),
                         (0.6, 0.4, 0.05)) == (
        "the 95% interval of Brier score [0.3100, 0.4000] lies above its estimate 0.3000: "
        "a resample repeats rows; the interval is the spread of the resampled Brier score, "
        "the estimate is the point")
    note = interval_note(("ece",), (0.01,), (-0.05,), (0.0,), label="Δ ")
    assert note is not None and note.startswith("the 95% interval of Δ ECE [-0.0500, 0.0000] "
                                                "lies below its estimate 0.0100:")
    assert interval_note(("ece",), (0.02,), (0.02,), (0.05,)) is None


def _row_bootstrap(y, probs_a, probs_b=None, seed=7):
    """The yardstick: resample rows (indices) and score each resample from its rows' NLL,
    Brier term and ECE gap (the definitions of the functions above); B − A with
    ``probs_b``."""
    idx = np.random.default_rng(seed).integers(len(y), size=(RESAMPLES, len(y)))
    out: dict[str, np.ndarray] = {}
    rows_a = [np.array(v) for v in _per_row(y, probs_a)]
    rows_b = None if probs_b is None else [np.array(v) for v in _per_row(y, probs_b)]
    for name, side in (("a", rows_a), ("b", rows_b)):
        if side is None:
            continue
        nll_row, brier_row, gap, bin_of = side
        per_bin = np.bincount((bin_of[idx] + 15 * np.arange(RESAMPLES)[:, None]).ravel(),
                              weights=gap[idx].ravel(), minlength=15 * RESAMPLES)
        values = {"nll": nll_row[idx].mean(axis=1), "brier": brier_row[idx].mean(axis=1),
                  "ece": np.abs(per_bin.reshape(RESAMPLES, 15)).sum(axis=1) / len(y)}
        for metric, v in values.items():
            out[metric] = v if name == "a" else v - out[metric]
    return out


def _per_row(y, p):
    n = np.arange(len(y))
    confidence = p.max(axis=1)
    onehot = np.zeros_like(p)
    onehot[n, y] = 1
    bins = np.maximum(np.searchsorted(np.linspace(0, 1, 16), confidence) - 1, 0)
    return (-np.log(np.maximum(p[n, y], PROB_FLOOR)), ((p - onehot) ** 2).sum(axis=1),
            confidence - (p.argmax(axis=1) == y), bins)


@pytest.mark.parametrize(("n", "paired"), [(300, False), (1000, False), (1000, True)])
def test_the_exact_draws_are_the_row_bootstrap(n, paired):
    """The intervals drawn as counts of the distinct rows are the row bootstrap's
    quantiles within Monte Carlo error: the same distribution, drawn another way."""
    y, p, calibrated = _overconfident(n, seed=n)
    if paired:
        ours = calibration_deltas(y, p, calibrated)
        resampled = _row_bootstrap(y, p, calibrated)
    else:
        ours, resampled = calibration_metrics(y, p), _row_bootstrap(y, p)
    prefix = "delta_" if paired else ""
    for name, values in resampled.items():
        for end, q in (("low", 0.025), ("high", 0.975)):
            assert ours[f"{prefix}{name}_ci95_{end}"] == pytest.approx(
                np.quantile(values, q), abs=monte_carlo_error(values, q)), (name, end)


def test_a_heavy_tailed_stratum_s_interval_is_one_its_resamples_take():
    """Issue 51's kind of case: 50 rows in one confidence bin, all wrong, whose NLL is
    -log 0.04 = 3.2189 but for 2 rows at -log 1e-9 = 20.72. No resample's NLL is below
    3.2189, and 13% of them ((48/50)^50) draw neither outlier: the 2.5% bound is 3.2189.
    The normal approximation of the stratum's sum gave [2.9635, 4.8692]."""
    y, p = np.zeros(50, dtype=np.int64), np.tile([0.04, 0.48, 0.48], (50, 1))
    p[:2] = [1e-9, 0.4999999995, 0.5]
    found = calibration_metrics(y, p)
    assert found["nll"] == pytest.approx((48 * -math.log(0.04) - 2 * math.log(1e-9)) / 50)
    assert found["nll_ci95_low"] == pytest.approx(-math.log(0.04), rel=1e-15)
    assert found["nll"] < found["nll_ci95_high"] <= -math.log(1e-9)


def test_a_paired_delta_worse_on_3_of_2000_rows_never_reaches_below_zero():
    """Issue 51's case: B worse than A on 3 rows and equal on the rest, so no resample's
    Δ NLL or Δ Brier is negative; the normal approximation's interval began at −0.0010."""
    y, a, _ = _overconfident(2000, seed=3)
    b = a.copy()
    # 3 rows whose gold class is their least likely: a quarter of its probability moves
    # to the middle class, the top class and so the confidence bin stay as they were
    least = np.flatnonzero(a.argmin(axis=1) == y)[:3]
    for i in least:
        middle = np.argsort(a[i])[1]
        b[i, middle] += b[i, y[i]] / 4
        b[i, y[i]] *= 3 / 4
    assert (b.max(axis=1) == a.max(axis=1)).all()
    rows = np.array([_per_row(y, b)[i] - _per_row(y, a)[i] for i in (0, 1)])
    assert (np.count_nonzero(rows, axis=1) == 3).all() and (rows >= 0).all()
    deltas = calibration_deltas(y, a, b)
    for i, name in ((0, "nll"), (1, "brier")):
        assert 0 <= deltas[f"delta_{name}_ci95_low"] <= deltas[f"delta_{name}"], name
        assert deltas[f"delta_{name}_ci95_high"] <= rows[i].max(), name


def _fewer(mp):
    """The regime of more than 10,000 rows on a few rows (issue 61): fewer resamples
    (10^5 / N, at least 100) above 2 rows, drawn row by row from N / 16 cells on."""
    mp.setattr(statistics, "ROWS_FOR_ALL_RESAMPLES", 2)
    mp.setattr(statistics, "ROW_DRAWS", 100_000)
    mp.setattr(statistics, "MIN_RESAMPLES", 100)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.integers(3, 60), st.integers(0, 2**32 - 1), st.floats(0.05, 8.0), st.booleans())
def test_every_interval_lies_within_what_its_resamples_can_take(n, seed, spread, fewer):
    """Property: a resample's mean NLL or Brier term lies between the smallest and the
    largest row's (paired: the smallest and largest row's Δ), and its ECE in [0, the
    largest |gap|]: so does every bound drawn from such resamples, with 10,000 resamples
    or with the fewer ones of a test set above 10,000 rows."""
    with pytest.MonkeyPatch.context() as mp:
        if fewer:
            _fewer(mp)
        _within_what_resamples_take(n, seed, spread)


def _within_what_resamples_take(n, seed, spread):
    rng = np.random.default_rng(seed)
    z = rng.standard_t(1.5, (n, 3)) * spread  # heavy tails: some near-certain rows
    y = rng.integers(0, 3, n)
    a, b = apply_temperature(z, 1.0), apply_temperature(z + rng.normal(0, 1, z.shape), 1.0)
    rows_a, rows_b = _per_row(y, a), _per_row(y, b)
    tiny = 1e-12  # the means' own rounding
    found = calibration_metrics(y, a)
    for i, name in ((0, "nll"), (1, "brier")):
        low, high = rows_a[i].min(), rows_a[i].max()
        assert low - tiny <= found[f"{name}_ci95_low"] <= found[f"{name}_ci95_high"] <= high + tiny
    assert 0 <= found["ece_ci95_low"] <= found["ece_ci95_high"] <= np.abs(rows_a[2]).max() + tiny
    deltas = calibration_deltas(y, a, b)
    for i, name in ((0, "nll"), (1, "brier")):
        gap = rows_b[i] - rows_a[i]
        assert (gap.min() - tiny <= deltas[f"delta_{name}_ci95_low"]
                <= deltas[f"delta_{name}_ci95_high"] <= gap.max() + tiny), name


def _seed_s_resamples(y, probs_a, probs_b=None):
    """The yardstick of the draws: ``resamples_for(N)`` × N row indices from the seed's
    stream, row i the i-th row in the order of the distinct rows (their NLL, Brier term,
    gap and bin; both sides'), each resample scored from its rows as the definitions say."""
    sides = [np.array(_per_row(y, p)).T for p in (probs_a, probs_b) if p is not None]
    table = np.concatenate([side[:, :3] for side in sides] + [side[:, 3:] for side in sides],
                           axis=1)
    _, inverse = np.unique(table, axis=0, return_inverse=True)
    order = np.argsort(inverse.ravel(), kind="stable")
    b = resamples_for(len(y))
    idx = order[np.random.default_rng(0).integers(len(y), size=(b, len(y)))]
    found = []
    for side in sides:
        nll_row, brier_row, gap, bin_of = side.T
        per_bin = np.bincount((bin_of.astype(int)[idx] + 15 * np.arange(b)[:, None]).ravel(),
                              weights=gap[idx].ravel(), minlength=15 * b)
        found.append({"nll": nll_row[idx].mean(axis=1), "brier": brier_row[idx].mean(axis=1),
                      "ece": np.abs(per_bin.reshape(b, 15)).sum(axis=1) / len(y)})
    return found[0] if len(found) == 1 else {k: found[1][k] - found[0][k] for k in found[0]}


@pytest.mark.parametrize("fewer", [False, True])
def test_the_bounds_are_the_percentiles_of_the_seed_s_own_resamples(fewer):
    """Not only the same distribution: the very resamples of the seed's stream, 10,000 of
    them, or the first 333 where a test set's rows call for fewer (300 rows here, in the
    regime of more than 10,000; issue 61); equal but for the order of the additions. Each
    bound is one of them, the 2.5% and 97.5% order statistics (issue 70), not a value
    interpolated between two."""
    y, p, calibrated = _overconfident(300, seed=11)
    with pytest.MonkeyPatch.context() as mp:
        if fewer:
            _fewer(mp)
        assert resamples_for(300) == (333 if fewer else RESAMPLES)
        found = [(calibration_metrics(y, p), "", _seed_s_resamples(y, p)),
                 (calibration_deltas(y, p, calibrated), "delta_",
                  _seed_s_resamples(y, p, calibrated))]
    for ours, prefix, resampled in found:
        for name, values in resampled.items():
            low = np.quantile(values, 0.025, method="lower")
            high = np.quantile(values, 0.975, method="higher")
            assert ours[f"{prefix}{name}_ci95_low"] == pytest.approx(low, rel=1e-12, abs=1e-15)
            assert ours[f"{prefix}{name}_ci95_high"] == pytest.approx(high, rel=1e-12,
                                                                      abs=1e-15)


def test_the_interval_method_names_fewer_resamples_only_above_10_000_rows():
    """metrics/eval.json's ``calibration.interval_method`` (600 rows) keeps its bytes."""
    assert interval_method(600) == interval_method(10_000) == (
        "percentile bootstrap over test rows, drawn as counts: one multinomial draw of the "
        "N rows over the distinct rows (their NLL, Brier term, gap and confidence bin; both "
        "sides' for a paired difference) per resample (the same distribution as resampling "
        "rows; row by row where the cells outnumber 0.5 × N) (10,000 resamples, 95%, seed 0)")
    assert interval_method(100_000).endswith(
        "row by row where the cells outnumber 0.0625 × N); above 10,000 rows 100,000,000 / N "
        "resamples (rounded down, at least 1,000), not 10,000, so that an interval draws "
        "about 100,000,000 rows: 1,000 for these 100,000 rows (1,000 resamples, 95%, seed 0)")


def test_the_intervals_do_not_depend_on_the_blas_kernel():
    """The container tier's one-ulp difference (issue 50): ECE summed per bin by a matrix
    product took OpenBLAS's kernel's order of additions, which the CPU or
    ``OPENBLAS_CORETYPE`` chooses (Prescott's and Haswell's differed in the last bit).
    Two processes with other kernels now write the same bytes."""
    import json

    rng = np.random.default_rng(1)
    z, y = rng.normal(size=(600, 3)) * 2, rng.integers(0, 3, 600)
    a, b = apply_temperature(z, 1.0), apply_temperature(z, 0.7)
    here = json.dumps([calibration_metrics(y, a), calibration_deltas(y, a, b)])
    code = ("import json, numpy as np; from lorasent.calibration import calibration_metrics, "
            "calibration_deltas, apply_temperature; rng = np.random.default_rng(1); "
            "z, y = rng.normal(size=(600, 3)) * 2, rng.integers(0, 3, 600); "
            "a, b = apply_temperature(z, 1.0), apply_temperature(z, 0.7); "
            "print(json.dumps([calibration_metrics(y, a), calibration_deltas(y, a, b)]))")
    # this process: the CPU's own kernel (Haswell's here); another with the oldest x86-64 one
    env = {**os.environ, "OPENBLAS_CORETYPE": "Prescott"}
    prescott = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                              capture_output=True, text=True).stdout.strip()
    assert prescott == here


def test_the_committed_run_s_calibration_intervals_move_less_than_0_005():
    """metrics/eval.json at 86c64df (600 tweets, the row bootstrap of scipy): the same
    bounds within 0.005 from the exact draws of counts."""
    pinned = {"nll": (0.5967945067354744, 0.7088058737032181),
              "brier": (0.34799887716945144, 0.42097728643168464),
              "ece": (0.03126782111277021, 0.07952120852063413)}
    from test_statistics import read_committed

    run = read_committed("metrics/predictions.csv")
    found = calibration_metrics(run.actual, run.probabilities)
    for name, (low, high) in pinned.items():
        assert found[f"{name}_ci95_low"] == pytest.approx(low, abs=0.005), name
        assert found[f"{name}_ci95_high"] == pytest.approx(high, abs=0.005), name


def test_deltas_refuse_probabilities_of_other_shapes_and_ece_a_bad_bin_count():
    with pytest.raises(ValueError, match="one shape"):
        calibration_deltas([0, 1], [[0.5, 0.5], [0.5, 0.5]], np.full((2, 3), 1 / 3))
    with pytest.raises(ValueError, match="bins must be a positive int"):
        ece(Y, P, bins=0)


def test_deltas_of_identical_probabilities_are_zero():
    y, p, _ = _overconfident(n=200)
    assert set(calibration_deltas(y, p, p).values()) == {0.0}


def test_deltas_are_b_minus_a_with_a_paired_interval():
    y, sharp, calibrated = _overconfident()
    deltas = calibration_deltas(y, sharp, calibrated)
    assert list(deltas) == [f"delta_{name}{end}" for name in ("nll", "brier", "ece")
                            for end in ("", "_ci95_low", "_ci95_high")]
    for name, metric in (("nll", nll), ("brier", brier), ("ece", ece)):
        value = metric(y, calibrated) - metric(y, sharp)
        assert deltas[f"delta_{name}"] == pytest.approx(value, rel=1e-12, abs=1e-15)
        assert deltas[f"delta_{name}_ci95_low"] < value < deltas[f"delta_{name}_ci95_high"]
        assert deltas[f"delta_{name}_ci95_high"] < 0, name  # the calibrated B is better
    # A and B swapped: the strata are listed in another order, so other draws
    reverse = calibration_deltas(y, calibrated, sharp)
    assert reverse["delta_ece_ci95_low"] == pytest.approx(-deltas["delta_ece_ci95_high"],
                                                          abs=2e-3)


def test_fit_temperature_recovers_the_temperature_of_the_labels():
    """20,000 rows of labels drawn from softmax(z / 2): the fitted T is within 3% of 2
    (over 30 seeds its standard deviation is 0.027, 1.3%) and equals scipy's minimum of
    the NLL."""
    z, y = _softmax_rows(20_000, 3, 2.0, seed=5)
    found = fit_temperature(z, y)
    assert found == pytest.approx(2.0, rel=0.03)
    assert found == pytest.approx(_scipy_temperature(z, y), rel=1e-6)
    calibrated = apply_temperature(z, found)
    assert nll(y, calibrated) < nll(y, apply_temperature(z, 1.0))


@pytest.mark.parametrize("k", [2, 4])
def test_fit_temperature_equals_scipy_for_two_classes_and_float32_log_probabilities(k):
    z, y = _softmax_rows(500, k, 0.7, seed=k)
    scores = log_softmax(z, axis=1).astype(np.float32)  # as lorasent's scores are
    assert fit_temperature(scores, y) == pytest.approx(
        _scipy_temperature(scores.astype(np.float64), y), rel=1e-5)


def test_fit_temperature_keeps_the_column_of_a_class_absent_from_y():
    z, y = _softmax_rows(300, 3, 1.5, seed=7)
    kept = y != 1
    assert fit_temperature(z[kept], y[kept]) == pytest.approx(
        _scipy_temperature(z[kept], y[kept]), rel=1e-6)


@pytest.mark.parametrize(("y", "scores"), [([0], [[1.0, 0.0]]),
                                           ([1, 1, 1], [[1.0, 0.0], [0.0, 1.0], [2.0, 0.5]])])
def test_fit_temperature_refuses_one_row_or_one_class(y, scores):
    with pytest.raises(CalibrationError, match="at least 2 rows of at least 2 classes"):
        fit_temperature(scores, y)


def test_apply_temperature():
    z = np.array([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    p = apply_temperature(z, 1.0)
    assert p.dtype == np.float64 and p.shape == (2, 3)
    e = np.exp([2.0, 0.0, -1.0])
    np.testing.assert_allclose(p[0], e / e.sum(), rtol=1e-12)
    np.testing.assert_allclose(p[1], 1 / 3, rtol=1e-12)
    np.testing.assert_allclose(apply_temperature(z, 2.0)[0], np.sqrt(e) / np.sqrt(e).sum(),
                               rtol=1e-12)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive"):
            apply_temperature(z, bad)


def test_risk_coverage_by_hand():
    assert risk_coverage(Y, P) == [
        {"min_confidence": 0.8, "coverage": 0.25, "accuracy": 1.0, "rows": 1},
        {"min_confidence": 0.65, "coverage": 0.5, "accuracy": 0.5, "rows": 2},
        {"min_confidence": 0.6, "coverage": 0.75, "accuracy": 2 / 3, "rows": 3},
        {"min_confidence": 0.4, "coverage": 1.0, "accuracy": 0.5, "rows": 4}]
    assert coverage_at(Y, P, 0.6) == (0.75, 2 / 3)
    assert coverage_at(Y, P, 0.61) == (0.5, 0.5)
    assert coverage_at(Y, P, 0.0) == (1.0, 0.5)
    assert coverage_at(Y, P, 0.9) == (0.0, None)


def test_risk_coverage_is_one_point_per_distinct_confidence_with_rising_coverage():
    y, p, _ = _overconfident()
    p = np.round(p, 2)
    p /= p.sum(axis=1, keepdims=True)
    curve = risk_coverage(y, p)
    distinct = np.unique(p.max(axis=1))
    assert [point["min_confidence"] for point in curve] == sorted(distinct, reverse=True)
    coverage = [point["coverage"] for point in curve]
    assert all(a < b for a, b in zip(coverage, coverage[1:], strict=False))
    assert curve[-1]["coverage"] == 1.0 and curve[-1]["rows"] == len(y)
    assert curve[-1]["accuracy"] == pytest.approx(np.mean(p.argmax(axis=1) == y))
    for point in curve[::7]:
        assert coverage_at(y, p, point["min_confidence"]) == pytest.approx(
            (point["coverage"], point["accuracy"]))


def _noisy_labels(n=300, k=3, flip=15, seed=0, classes=None):
    """Out-of-sample-like probabilities that favour the true class, and labels of which
    ``flip`` rows were moved to another class."""
    rng = np.random.default_rng(seed)
    truth = rng.choice(classes if classes is not None else k, n)
    logits = rng.normal(0.0, 1.0, (n, k))
    logits[np.arange(n), truth] += 3.0
    p = apply_temperature(logits, 1.0)
    flipped = rng.choice(n, flip, replace=False)
    given = truth.copy()
    present = np.unique(truth)
    for i in flipped:
        given[i] = rng.choice(present[present != truth[i]])
    return given, p, flipped


def _direct(y, p):
    return find_label_issues(y, p, filter_by="prune_by_noise_rate",
                             return_indices_ranked_by="self_confidence")


def test_label_issues_finds_the_flipped_rows_as_cleanlab_does():
    y, p, flipped = _noisy_labels()
    found = label_issues(y, p)
    np.testing.assert_array_equal(found.indices, _direct(y, p))
    assert set(flipped) <= set(found.indices.tolist())
    assert len(found.indices) <= 1.2 * len(flipped)
    assert found.indices.dtype == np.int64 and found.suggested.dtype == np.int64
    np.testing.assert_array_equal(found.self_confidence, p[found.indices, y[found.indices]])
    np.testing.assert_array_equal(found.suggested, p[found.indices].argmax(axis=1))
    assert np.all(np.diff(found.self_confidence) >= 0)  # least confident first
    assert found.method.startswith("cleanlab 2.9.0 find_label_issues")
    assert "prune_by_noise_rate" in found.method and "self_confidence" in found.method


def test_label_issues_with_a_class_absent_from_the_labels_warns_nothing():
    y, p, flipped = _noisy_labels(classes=[0, 2], seed=2)
    assert 1 not in y
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = label_issues(y, p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cleanlab: "May not flag all label issues in class: 1"
        np.testing.assert_array_equal(found.indices, _direct(y, p))
    assert len(set(flipped) & set(found.indices.tolist())) >= 14  # of 15


@pytest.mark.parametrize(("y", "p"), [
    (Y, P),                                                # 4 rows
    (np.array([0, 1]), np.array([[0.9, 0.1], [0.2, 0.8]])),  # 2 rows
    (np.array([2, 2, 2]), np.full((3, 3), 1 / 3)),          # one class (cleanlab refuses)
    (np.array([0, 0]), np.array([[0.1, 0.9], [0.2, 0.8]])),  # one class, class 0
    (np.array([0, 1, 2, 0, 1, 2]), np.eye(3)[[0, 1, 2, 0, 1, 2]]),  # perfect: no issue
])
def test_label_issues_of_tiny_or_clean_splits_flag_nothing_and_warn_nothing(y, p):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = label_issues(y, p)
    assert found.indices.tolist() == [] and found.indices.dtype == np.int64
    assert found.self_confidence.shape == (0,) and found.suggested.shape == (0,)


def test_importing_the_module_leaves_cleanlab_unimported():
    code = ("import sys, lorasent.calibration; "
            "assert 'cleanlab' not in sys.modules, 'cleanlab imported'; "
            "assert 'sklearn.calibration' not in sys.modules, 'sklearn.calibration imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO,
                   env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
