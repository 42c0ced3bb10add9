"""The metrics contract, with exact values."""

import json

import numpy as np
import pytest

from lorasent.errors import LorasentError
from lorasent.metrics import (
    classification_metrics,
    confusion_records,
    majority_baseline,
    predictions_csv,
    read_predictions,
    relative_error_reduction,
    run_warnings,
)

LABELS = ["a", "b", "c"]


def test_classification_metrics_exact_values():
    m = classification_metrics([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0], LABELS)
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["per_class"]["a"] == pytest.approx(
        {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2})
    assert m["per_class"]["b"] == pytest.approx(
        {"precision": 2 / 3, "recall": 1.0, "f1": 0.8, "support": 2})
    assert m["per_class"]["c"] == pytest.approx(
        {"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "support": 2})
    assert m["macro_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert m["confusion_matrix"] == {"a": {"a": 1, "b": 1, "c": 0},
                                     "b": {"a": 0, "b": 2, "c": 0},
                                     "c": {"a": 1, "b": 0, "c": 1}}


def test_class_absent_from_test_set_keeps_its_row_and_column():
    m = classification_metrics([0, 0, 1], [0, 1, 1], LABELS)
    assert list(m["per_class"]) == LABELS
    assert m["per_class"]["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    assert m["confusion_matrix"]["c"] == {"a": 0, "b": 0, "c": 0}
    assert all(list(row) == LABELS for row in m["confusion_matrix"].values())
    assert m["macro_f1"] == pytest.approx((2 / 3 + 2 / 3 + 0) / 3)


def test_class_never_predicted_scores_zero_not_nan():
    m = classification_metrics([0, 1, 2], [0, 0, 0], LABELS)
    assert m["accuracy"] == pytest.approx(1 / 3)
    assert m["per_class"]["b"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert m["per_class"]["a"]["precision"] == pytest.approx(1 / 3)
    json.dumps(m, allow_nan=False)


def test_confusion_records_hold_every_cell_of_a_never_predicted_class_in_label_order():
    labels = ["pos", "neg", "neu"]  # not sorted: the params' order is the plot's
    # 6 rows; `neu` is never predicted
    m = classification_metrics([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 0, 1], labels)
    assert confusion_records(m["confusion_matrix"], labels) == [
        {"actual": "pos", "predicted": "pos", "count": 1},
        {"actual": "pos", "predicted": "neg", "count": 1},
        {"actual": "pos", "predicted": "neu", "count": 0},
        {"actual": "neg", "predicted": "pos", "count": 0},
        {"actual": "neg", "predicted": "neg", "count": 2},
        {"actual": "neg", "predicted": "neu", "count": 0},
        {"actual": "neu", "predicted": "pos", "count": 1},
        {"actual": "neu", "predicted": "neg", "count": 1},
        {"actual": "neu", "predicted": "neu", "count": 0}]
    assert all(type(r["count"]) is int for r in confusion_records(m["confusion_matrix"], labels))


def test_confusion_records_name_the_missing_or_wrong_cell():
    with pytest.raises(ValueError) as err:
        confusion_records({"a": {"a": 1, "b": 0}}, ["a", "b"], "metrics/eval.json:confusion_matrix")
    assert str(err.value) == ("metrics/eval.json:confusion_matrix.b: no row for class 'b' "
                              "(classes a, b)")
    with pytest.raises(ValueError) as err:
        confusion_records({"a": {"a": 1}, "b": {"a": -1, "b": 2}}, ["a", "b"])
    assert str(err.value) == "confusion_matrix.a.b: None is not a count of rows (an int >= 0)"
    with pytest.raises(ValueError, match=r"^confusion_matrix\.b\.a: -1 is not a count"):
        confusion_records({"a": {"a": 1, "b": 0}, "b": {"a": -1, "b": 2}}, ["a", "b"])


def test_label_order_comes_from_params_not_sorting():
    labels = ["消极", "中性", "积极"]  # sorted() would give 中性, 消极, 积极
    m = classification_metrics([0, 1, 2], [0, 1, 1], labels)
    assert list(m["per_class"]) == labels
    assert list(m["confusion_matrix"]) == labels
    assert m["confusion_matrix"]["积极"] == {"消极": 0, "中性": 1, "积极": 0}


@pytest.mark.parametrize("bad", [([], []), ([0, 1], [0]), ([0, 3], [0, 1])])
def test_bad_ids_raise(bad: tuple[list[int], list[int]]):
    with pytest.raises(ValueError):
        classification_metrics(*bad, LABELS)


def test_relative_error_reduction_seed_000():
    value, note = relative_error_reduction(0.734, 0.594)
    assert value == pytest.approx(0.14 / 0.406)
    assert note is None


def test_relative_error_reduction_reference_one_is_null_with_reason():
    value, note = relative_error_reduction(1.0, 1.0)
    assert value is None
    assert note is not None and "no errors" in note
    json.dumps({"relative_error_reduction": value, "note": note}, allow_nan=False)


def test_relative_error_reduction_negative_when_worse():
    assert relative_error_reduction(0.5, 0.75)[0] == pytest.approx(-1.0)


def test_majority_baseline_takes_class_from_train():
    assert majority_baseline([0, 1, 1, 2], [1, 1, 0], 3) == pytest.approx((1, 2 / 3))
    assert majority_baseline([0, 1], [1, 1], 3) == (0, 0.0)  # ties: first listed class


def test_predictions_csv_rows_and_probabilities():
    scores = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]))
    text = predictions_csv(["9f2c", "07aa"], [0, 1], scores, LABELS)
    assert text.splitlines() == [
        "id,actual,predicted,p_a,p_b,p_c",
        "9f2c,a,a,0.700000,0.200000,0.100000",
        "07aa,b,c,0.100000,0.100000,0.800000",
    ]
    back = read_predictions(text, "predictions.csv")
    assert (back.ids, back.labels) == (["9f2c", "07aa"], LABELS)
    assert back.actual.tolist() == [0, 1] and back.predicted.tolist() == [0, 2]
    np.testing.assert_allclose(back.probabilities, np.exp(scores), atol=1e-6)


def test_metrics_csvs_neutralise_formulas_and_read_back_as_written():
    """Issue 51: predictions.csv and label_issues.csv, as evaluate writes them, hold no
    cell a spreadsheet runs; their readers give the values back (a row id or label of a
    file that holds one)."""
    from lorasent.calibration import LabelIssues
    from lorasent.review.collect import read_label_issues
    from lorasent.stages.evaluate import label_issues_csv

    scores = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.2, 0.6, 0.2]]))
    ids = ["=1+1", "-2", "'q"]
    text = predictions_csv(ids, [0, 1, 2], scores, LABELS)
    assert text.splitlines()[1:] == ["'=1+1,a,a,0.700000,0.200000,0.100000",
                                     "-2,b,c,0.100000,0.100000,0.800000",
                                     "''q,c,b,0.200000,0.600000,0.200000"]
    assert read_predictions(text, "predictions.csv").ids == ids
    issues = LabelIssues(np.array([2, 0]), np.array([0.2, 0.7]), np.array([1, 0]), "m")
    text = label_issues_csv(ids, np.array([0, 1, 2]), issues, LABELS)
    assert text.splitlines() == ["rank,id,actual,suggested,self_confidence",
                                 "1,''q,c,b,0.200000", "2,'=1+1,a,a,0.700000"]
    assert list(read_label_issues(text, "label_issues.csv")) == ["'q", "=1+1"]


def test_predictions_without_row_ids_cannot_be_paired():
    with pytest.raises(LorasentError, match="old.csv: no `id` column.*rerun its stage"):
        read_predictions("index,actual,predicted,p_a\n0,a,a,1.0\n", "old.csv")


def _metrics(matrix, reference="zero_shot", reference_accuracy=0.5):
    rows = sum(sum(r.values()) for r in matrix.values())
    right = sum(matrix[label][label] for label in matrix)
    return {"accuracy": right / rows, "confusion_matrix": matrix, "reference": reference,
            "reference_accuracy": reference_accuracy,
            "baseline": {"majority_class": "a", "majority_accuracy": 0.5}}


def test_no_warning_for_a_healthy_run():
    healthy = {"a": {"a": 5, "b": 1}, "b": {"a": 1, "b": 3}}
    assert run_warnings(_metrics(healthy)) == []


def test_warnings_for_a_one_class_adapter_below_the_majority_class():
    # 10 rows, half of them `a` (the majority class): the adapter says `b` for 9 of them
    found = run_warnings(_metrics({"a": {"a": 0, "b": 5, "c": 0}, "b": {"a": 1, "b": 3, "c": 0},
                                   "c": {"a": 0, "b": 1, "c": 0}}))
    assert found == [
        "accuracy 0.300 is below the majority-class baseline 0.500 (always `a`): the adapter "
        "does worse than predicting one class",
        "never predicted: `c` (1 of 10 test rows are c)",
        "`b` is predicted for 9 of 10 rows (90%), though 40% of them are b",
    ]


def test_warning_for_a_reference_below_the_majority_class():
    found = run_warnings(_metrics({"a": {"a": 5, "b": 1}, "b": {"a": 1, "b": 3}},
                                  reference_accuracy=0.4))
    assert found == ["the relative error reduction is measured against the zero_shot baseline "
                     "(0.400), which is itself below the majority-class baseline (0.500); "
                     "against the majority class it is 0.600"]
    assert run_warnings(_metrics({"a": {"a": 5, "b": 1}, "b": {"a": 1, "b": 3}},
                                 reference="majority", reference_accuracy=0.4)) == []
