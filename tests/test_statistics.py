"""Intervals, paired tests and seed spread, with exact values where they are knowable."""

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import f1_score

from lorasent.review.verdict import group_verdict, paired_verdict
from lorasent.statistics import (
    BOOTSTRAP_SEED,
    RESAMPLES,
    PairedComparison,
    group_comparison,
    intervals,
    macro_f1,
    mcnemar_exact,
    paired_comparison,
)

LABELS = ["negative", "neutral", "positive"]


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


def test_macro_f1_equals_scikit_learn_on_every_row_of_a_batch():
    y, pred = _predictions(n=50)
    batch_y, batch_pred = np.stack([y, y[::-1], y]), np.stack([pred, pred, np.zeros(50, int)])
    expected = [f1_score(a, b, labels=[0, 1, 2], average="macro", zero_division=0)
                for a, b in zip(batch_y, batch_pred, strict=True)]
    np.testing.assert_allclose(macro_f1(batch_y, batch_pred, 3), expected, rtol=1e-12)


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


def test_intervals_agree_with_scipy_bootstrap_on_a_600_row_vector():
    """Accuracy and macro-F1, resampled together, give what scipy gives for each alone,
    from the same seed."""
    y, pred = _predictions()
    ours = intervals(y, pred, 3)

    def scipy_interval(samples, statistic, **kwargs):
        found = stats.bootstrap(samples, statistic, n_resamples=RESAMPLES, method="percentile",
                                rng=np.random.default_rng(BOOTSTRAP_SEED), **kwargs)
        return found.confidence_interval

    accuracy = scipy_interval(((y == pred).astype(float),), np.mean)
    # macro_f1 is scikit-learn's on every resample (the test above)
    f1 = scipy_interval((y, pred), lambda a, b, axis: macro_f1(a, b, 3, axis), paired=True)
    for name, expected in (("accuracy", accuracy), ("macro_f1", f1)):
        assert ours[f"{name}_ci95_low"] == pytest.approx(expected.low, abs=1e-3)
        assert ours[f"{name}_ci95_high"] == pytest.approx(expected.high, abs=1e-3)
    # about ±0.035 around 0.75, as for the default run's 600 tweets
    low, high = ours["accuracy_ci95_low"], ours["accuracy_ci95_high"]
    assert low is not None and high is not None
    assert high - low == pytest.approx(0.07, abs=0.01)


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
