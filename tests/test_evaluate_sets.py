"""The evaluate stage's arithmetic per test set: which reference, the relative error
reduction against each, calibration and the label-issues file (no model: hand-built
scores with known answers)."""

import csv
import io
from typing import Any

import numpy as np
import pytest

from lorasent import contracts
from lorasent.calibration import apply_temperature, calibration_metrics, label_issues
from lorasent.contracts import TemperatureScaling
from lorasent.metrics import probabilities
from lorasent.stages.evaluate import (
    ScoredSet,
    _set_metrics,
    choose_reference,
    label_issues_csv,
)

LABELS = ["negative", "neutral", "positive"]


@pytest.mark.parametrize(("wanted", "accuracies", "expected"), [
    ("auto", {"majority": 0.43, "zero_shot": 0.37, "zero_shot_calibrated": 0.52},
     "zero_shot_calibrated"),
    ("auto", {"majority": 0.43, "zero_shot": 0.52, "zero_shot_calibrated": 0.52}, "zero_shot"),
    ("auto", {"majority": 0.43, "zero_shot": 0.52, "zero_shot_calibrated": None}, "zero_shot"),
    ("auto", {"majority": 0.43, "zero_shot": None, "zero_shot_calibrated": None}, "majority"),
    ("zero_shot", {"majority": 0.43, "zero_shot": 0.37, "zero_shot_calibrated": 0.52},
     "zero_shot"),
    ("majority", {"majority": 0.43, "zero_shot": 0.37, "zero_shot_calibrated": 0.52},
     "majority"),
    ("zero_shot_calibrated", {"majority": 0.43, "zero_shot": None,
                              "zero_shot_calibrated": None}, "majority"),
])
def test_reference_choice(wanted, accuracies, expected):
    assert choose_reference(wanted, accuracies, "no zero-shot in seq_cls")[0] == expected


def test_auto_says_why_it_took_the_calibrated_baseline():
    name, note = choose_reference("auto", {"majority": 0.43, "zero_shot": 0.3683,
                                           "zero_shot_calibrated": 0.52}, None)
    assert note == ("evaluate.reference auto: the calibrated zero-shot baseline (0.5200) beats "
                    "the uncalibrated one (0.3683)")
    assert choose_reference("majority", {"majority": 0.4}, "why")[1] is None
    assert choose_reference("zero_shot", {"majority": 0.4, "zero_shot": None}, "why") == (
        "majority", "why")


def scored(report=None):
    # 8 rows; the adapter is right on rows 0-5 (accuracy 0.75); the majority class
    # (negative) on 3 rows, the zero-shot on 2, the calibrated zero-shot on 4
    y = np.array([0, 0, 0, 1, 1, 2, 2, 1])
    predicted = np.array([0, 0, 0, 1, 1, 2, 0, 0])
    scores = np.log(np.full((8, 3), 0.1) + 0.7 * np.eye(3)[predicted]).astype(np.float32)
    return ScoredSet("set", [f"r{i}" for i in range(8)], y, scores, {
        "majority": np.zeros(8, dtype=np.int64),
        "zero_shot": np.array([2, 2, 0, 2, 2, 2, 0, 0]),
        "zero_shot_calibrated": np.array([0, 0, 1, 1, 2, 2, 2, 2])}, None, report)


def test_relative_error_reduction_against_each_reference():
    metrics, _ = _set_metrics(scored(), labels=LABELS, wanted="auto", scaling=None,
                              majority_class="negative", issues_file="f.csv")
    refs = metrics["references"]
    assert metrics["accuracy"] == 0.75
    assert (refs["majority"]["accuracy"], refs["zero_shot"]["accuracy"],
            refs["zero_shot_calibrated"]["accuracy"]) == (0.375, 0.25, 0.625)
    # (0.75 - ref) / (1 - ref)
    assert refs["majority"]["relative_error_reduction"] == pytest.approx(0.6)
    assert refs["zero_shot"]["relative_error_reduction"] == pytest.approx(2 / 3)
    assert refs["zero_shot_calibrated"]["relative_error_reduction"] == pytest.approx(1 / 3)
    assert metrics["reference"] == "zero_shot_calibrated"
    assert metrics["reference_accuracy"] == 0.625
    assert metrics["relative_error_reduction"] == refs["zero_shot_calibrated"][
        "relative_error_reduction"]
    assert metrics["baseline"]["zero_shot_calibrated_accuracy"] == 0.625
    for end in ("low", "high"):  # the headline's interval is the chosen reference's
        assert metrics[f"relative_error_reduction_ci95_{end}"] == refs["zero_shot_calibrated"][
            f"relative_error_reduction_ci95_{end}"]


def test_calibration_raw_and_scaled():
    s = scored()
    scaling = TemperatureScaling.model_validate(TEMPERATURE)
    metrics, _ = _set_metrics(s, labels=LABELS, wanted="auto", scaling=scaling,
                              majority_class="negative", issues_file="f.csv")
    raw = calibration_metrics(s.y, probabilities(s.scores))
    scaled = calibration_metrics(s.y, apply_temperature(s.scores, 2.0))
    assert {k: metrics["calibration"][k] for k in raw} == raw
    assert metrics["calibration"]["temperature"] == 2.0
    assert metrics["calibration"]["scaled"] == {k: v for k, v in scaled.items() if k != "ece_bins"}
    unscaled, _ = _set_metrics(s, labels=LABELS, wanted="auto", scaling=None,
                               majority_class="negative", issues_file="f.csv")
    assert unscaled["calibration"]["scaled"] is None
    assert "no calibration.json" in unscaled["calibration"]["temperature_note"]


def test_an_extra_set_validates_and_warns_about_overlap():
    metrics, _ = _set_metrics(scored({"overlap_with_train": 2}), labels=LABELS, wanted="auto",
                              scaling=None, majority_class="negative", issues_file="f.csv")
    parsed = contracts.TestSetMetrics(**metrics, source="x.csv", data={"overlap_with_train": 2})
    assert parsed.warnings[-1] == (
        "2 of the 8 rows of test set set are also in the training split (same normalised "
        "text): its accuracy is partly measured on rows the adapter trained on")


def test_label_issues_file_ranks_the_flagged_rows():
    s = scored()
    issues = label_issues(s.y, probabilities(s.scores))
    text = label_issues_csv(s.ids, s.y, issues, LABELS)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["rank"] for r in rows] == [str(i + 1) for i in range(len(issues.indices))]
    assert [r["id"] for r in rows] == [s.ids[i] for i in issues.indices]
    for row, i in zip(rows, issues.indices, strict=True):
        assert row["actual"] == LABELS[s.y[i]]
        assert float(row["self_confidence"]) == pytest.approx(
            probabilities(s.scores)[i, s.y[i]], abs=5e-7)
    empty = label_issues_csv([], np.array([], dtype=np.int64), type(issues)(
        np.array([], dtype=np.int64), np.array([]), np.array([], dtype=np.int64), "m"), LABELS)
    assert empty == "rank,id,actual,suggested,self_confidence\n"


TEMPERATURE: dict[str, Any] = {"method": "m", "fitted_on": "validation", "validation_rows": 4,
               "temperature": 2.0, "note": None, "ece_bins": 15, "nll_before": 1.0,
               "nll_after": 0.9, "ece_before": 0.2, "ece_after": 0.1, "brier_before": 0.5,
               "brier_after": 0.4, "risk_coverage": []}
