"""The adapter record and eval.json as pydantic models (issue 29, item 2): the files'
bytes survive a round trip through them, a damaged file is one line, and the names that
the Makefile's `exp-show`, the pull-request comment and the report give eval.json's keys
are fields of the model. Adapters trained in the tests round-trip too (test_predict's
`trained`, test_seq_cls)."""

import json
import re
from pathlib import Path
from typing import Any

import pytest
from dvc.utils.flatten import flatten

from conftest import REPO, committed
from lorasent.contracts import (
    AdapterRecord,
    EvalMetrics,
    TemperatureScaling,
    ValidationMetrics,
    dump,
    parse,
    read,
)
from lorasent.errors import LorasentError

LABELS = ["negative", "neutral", "positive"]


def round_trip(text: str,
               model: type[EvalMetrics] | type[AdapterRecord] | type[TemperatureScaling]
               | type[ValidationMetrics]) -> str:
    """``text`` parsed through ``model`` and written as ``lorasent.atomic.write_json``
    writes it."""
    found = model.model_validate(json.loads(text))
    return json.dumps(dump(found), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def test_the_committed_eval_json_round_trips_to_the_same_bytes():
    text = committed("metrics/eval.json")
    assert round_trip(text, EvalMetrics) == text


def _regexes() -> tuple[str, str]:
    """The Makefile's exp-show `--drop` and `--keep` regexes, as make passes them."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    drop, keep = (re.search(rf"--{opt} '([^']*)'", makefile) for opt in ("drop", "keep"))
    assert drop and keep
    return drop.group(1).replace("$$", "$"), keep.group(1).replace("$$", "$")


def _shown(columns: list[str]) -> list[str]:
    """The columns `dvc exp show --keep K --drop D` leaves: those K matches at their
    start, and those D does not (dvc.commands.experiments.show)."""
    drop, keep = _regexes()
    return [c for c in columns if re.match(keep, c) or not re.match(drop, c)]


def test_exp_show_keeps_the_headline_its_intervals_and_each_class_f1():
    evals = EvalMetrics.model_validate_json(committed("metrics/eval.json"))
    headline = [f"{name}{end}" for name in ("accuracy", "macro_f1", "relative_error_reduction")
                for end in ("", "_ci95_low", "_ci95_high")]
    assert _shown(list(flatten(dump(evals)))) == [
        *headline, *(f"per_class.{label}.f1" for label in LABELS), "calibration.ece",
        "calibration.scaled.ece", "test_sets.reviews-zh.accuracy"]
    train = json.loads(committed("metrics/train/metrics.json"))
    assert _shown(list(flatten(train))) == ["train.loss"]


def test_the_pull_request_fold_leaves_out_what_no_reviewer_reads():
    from lorasent.review.pr_comment import UNREAD
    from lorasent.stages.evaluate import REFERENCES

    evals = EvalMetrics.model_validate_json(committed("metrics/eval.json"))
    columns = list(flatten(dump(evals)))
    on = {name for name, ref in (evals.references or {}).items() if ref}  # null: switched off
    assert [c for c in columns if not UNREAD.search(c)] == [
        "accuracy", "macro_f1", "relative_error_reduction",
        *(f"per_class.{label}.{key}" for label in LABELS
          for key in ("precision", "recall", "f1", "support")),
        "labels", "test_rows", "mode", "reference", "reference_note", "reference_accuracy",
        "relative_error_reduction_note",
        *(f"references.{name}{key}" for name in REFERENCES
          for key in ((".relative_error_reduction", ".paired.delta_accuracy", ".paired.verdict")
                      if name in on else ("",))),
        "strongest_supervised", "verdict",
        *(f"calibration.{key}" for key in ("nll", "brier", "ece", "temperature", "scaled.nll",
                                           "scaled.brier", "scaled.ece")),
        "label_issues.rows", "label_issues.share", "warnings",
        *(f"test_sets.reviews-zh.{key}" for key in (
            "accuracy", "macro_f1", "relative_error_reduction", "test_rows", "reference",
            "calibration.ece", "calibration.scaled.ece", "label_issues.rows", "warnings"))]
    left_out = {c for c in columns if UNREAD.search(c)}
    assert {c for c in left_out if not c.startswith("test_sets.")} == {
        *(f"{name}_ci95_{end}" for name in ("accuracy", "macro_f1", "relative_error_reduction")
          for end in ("low", "high")),
        *(f"confusion_matrix.{a}.{p}" for a in LABELS for p in LABELS),
        *(f"baseline.{key}" for key in evals.baseline.model_fields_set),
        "intervals.method", "intervals.confidence", "intervals.resamples", "intervals.seed",
        *(f"references.{name}.{key}" for name in REFERENCES if name in on
          for key in ("accuracy", "relative_error_reduction_note",
                      "relative_error_reduction_ci95_low", "relative_error_reduction_ci95_high")),
        # issue 58: each reference's own scores, the paired test's details and the costs
        *(c for c in columns if re.match(
            r"references\.\w+\.(accuracy_ci95_|macro_f1|per_class\.|method$|cost(\.|$)"
            r"|paired\.(delta_accuracy_ci95_|delta_macro_f1|only_|mcnemar_p$))", c)),
        *(c for c in columns if c.startswith(("cost.", "reference_notes."))),  # why one is off
        *(f"calibration.{scaled}{key}_ci95_{end}" for scaled in ("", "scaled.")
          for key in ("nll", "brier", "ece") for end in ("low", "high")),
        "calibration.ece_bins", "calibration.temperature_note", "label_issues.method",
        "label_issues.file",
        # issue 42: the calibration's interval method, from the first rerun after it on
        *(["calibration.interval_method"]
          if evals.calibration and evals.calibration.interval_method else [])}
    train = json.loads(committed("metrics/train/metrics.json"))
    assert [c for c in flatten(train) if not UNREAD.search(c)] == ["loss", "step", "train.loss"]


def test_the_reports_rows_name_fields_of_eval_json():
    from lorasent.review.render import HEADLINE, PER_CLASS
    from test_render_sets import SIDES  # an eval.json of issue 30, by hand

    evals = EvalMetrics.model_validate_json(committed("metrics/eval.json"))
    columns = set(flatten(dump(evals)))
    assert SIDES[0].evals is not None
    assert {key for key, _ in HEADLINE} <= columns | set(flatten(dump(SIDES[0].evals)))
    assert {f"per_class.negative.{key}" for key, *_ in PER_CLASS} <= columns


def _evals(**changes: Any) -> dict[str, Any]:
    return {**json.loads(committed("metrics/eval.json")), **changes}


def test_a_seq_cls_eval_json_has_no_zero_shot_and_a_null_reduction_has_its_note():
    evals = _evals(mode="seq_cls", reference="majority", reference_note="no zero-shot",
                   relative_error_reduction=None, relative_error_reduction_ci95_low=None,
                   relative_error_reduction_ci95_high=None,
                   relative_error_reduction_note="reference accuracy is 1.0: it makes no "
                                                 "errors to reduce",
                   baseline={"majority_class": "negative", "majority_accuracy": 1.0,
                             "zero_shot_accuracy": None, "zero_shot_macro_f1": None})
    text = json.dumps(evals, indent=2, ensure_ascii=False) + "\n"
    assert round_trip(text, EvalMetrics) == text
    found = EvalMetrics.model_validate(evals)
    assert found.interval("relative_error_reduction") == (None, None, None)
    assert found.baseline.zero_shot_accuracy is None


def test_an_eval_json_of_before_the_intervals_is_read_without_them():
    evals = {key: value for key, value in _evals().items()
             if "ci95" not in key and key not in ("mode", "reference_note", "intervals",
                                                  "warnings")}
    found = EvalMetrics.model_validate(evals)
    assert found.interval("accuracy") == (evals["accuracy"], None, None)  # the committed run's
    assert (found.mode, found.intervals, found.warnings) == (None, None, [])
    assert list(dump(found)) == list(evals)  # nothing added when written back


@pytest.mark.parametrize(("data", "message"), [
    ({**_evals(), "accuracy": "high"},
     "metrics/eval.json: not the EvalMetrics lorasent writes: accuracy: input should be a "
     "valid number, unable to parse string as a number; rerun evaluate (dvc repro)"),
    ({**_evals(), "per_class": {"negative": {"f1": 0.5}}},
     "metrics/eval.json: not the EvalMetrics lorasent writes: per_class.negative.precision: "
     "field required (and 2 more); rerun evaluate (dvc repro)"),
    ({**_evals(), "extra": 1},
     "metrics/eval.json: not the EvalMetrics lorasent writes: extra: extra inputs are not "
     "permitted; rerun evaluate (dvc repro)"),
    ([], "metrics/eval.json: not the EvalMetrics lorasent writes: the top level: input "
         "should be a valid dictionary or instance of evalmetrics; rerun evaluate (dvc repro)"),
])
def test_a_damaged_eval_json_is_one_line_naming_the_key(data, message):
    with pytest.raises(LorasentError) as err:
        parse(EvalMetrics, data, "metrics/eval.json", "rerun evaluate (dvc repro)")
    assert str(err.value) == message


# metrics/validation.json as the train stage writes it (two rows, one of them right)
VALIDATION: dict[str, Any] = {
    "accuracy": 0.5, "accuracy_ci95_low": 0.0, "accuracy_ci95_high": 1.0, "macro_f1": 0.2222,
    "macro_f1_ci95_low": 0.0, "macro_f1_ci95_high": 0.3333,
    "per_class": {label: {"precision": 0.5 * (label == "positive"), "recall": 1.0 * (
        label == "positive"), "f1": 0.6667 * (label == "positive"),
        "support": int(label != "neutral")} for label in LABELS},
    "confusion_matrix": {a: {p: int(a != "neutral" and p == "positive") for p in LABELS}
                         for a in LABELS},
    "labels": LABELS, "validation_rows": 2,
    "intervals": {"method": "percentile bootstrap over validation rows", "confidence": 0.95,
                  "resamples": 10000, "seed": 0},
    "scores_are": "the adapter's", "note": None}


def test_a_validation_json_round_trips_and_each_missing_key_is_one_line():
    text = json.dumps(VALIDATION, indent=2) + "\n"
    assert round_trip(text, ValidationMetrics) == text
    for key in VALIDATION:
        with pytest.raises(LorasentError) as err:
            parse(ValidationMetrics, {k: v for k, v in VALIDATION.items() if k != key},
                  "metrics/validation.json", "rerun train (dvc repro)")
        assert str(err.value) == ("metrics/validation.json: not the ValidationMetrics "
                                  f"lorasent writes: {key}: field required; rerun train "
                                  "(dvc repro)"), key


def test_an_adapter_record_that_is_not_json_is_one_line(tmp_path: Path):
    path = tmp_path / "lorasent.json"
    path.write_text('{"mode": "generative",', encoding="utf-8")
    with pytest.raises(LorasentError) as err:
        read(AdapterRecord, path, "retrain it (dvc repro)")
    assert str(err.value) == (f"{path}: not valid JSON (Expecting property name enclosed in "
                              "double quotes: line 1 column 23 (char 22)); retrain it (dvc repro)")


def test_an_adapter_record_keeps_the_fields_of_its_mode_only():
    common = {"mode": "seq_cls", "labels": LABELS,
              "label2id": {label: i for i, label in enumerate(LABELS)}, "max_length": 32,
              "base_model": {"source": "hf:x/y", "sha256": "a" * 64}, "params": {"k": None}}
    record = AdapterRecord.model_validate({**common, "head": ["classifier", "score"]})
    assert dump(record) == {**common, "head": ["classifier", "score"]}
    exported = record.model_copy(update={"exported_from": "models/adapter"})
    assert list(dump(exported))[-2:] == ["head", "exported_from"]
    with pytest.raises(LorasentError, match=r"mode: input should be 'generative' or 'seq_cls'"):
        parse(AdapterRecord, {**common, "mode": "other"}, "lorasent.json", "retrain it")
