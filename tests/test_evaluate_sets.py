"""The evaluate stage's arithmetic per test set: which reference, the relative error
reduction against each, calibration and the label-issues file (no model: hand-built
scores with known answers)."""

import csv
import io
import itertools
import json
from typing import Any

import numpy as np
import pytest

from lorasent import contracts
from lorasent.calibration import apply_temperature, calibration_metrics, label_issues
from lorasent.contracts import TemperatureScaling
from lorasent.metrics import probabilities, supervised_verdict
from lorasent.reference_registry import BY_NAME, NAMES
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
    assert note == ("evaluate.reference auto: the strongest reference, zero_shot_calibrated "
                    "(0.5200; majority 0.4300, zero_shot 0.3683)")
    assert choose_reference("majority", {"majority": 0.4}, "why")[1] is None
    assert choose_reference("zero_shot", {"majority": 0.4, "zero_shot": None}, "why") == (
        "majority", "evaluate.reference: zero_shot was not measured (why); the relative "
        "error reduction is measured against the majority-class baseline instead")
    # a supervised reference: the strongest wins; one that is off says why when named
    accuracies = {"majority": 0.43, "zero_shot": 0.37, "zero_shot_calibrated": 0.41,
                  "tfidf_lr": 0.69, "encoder": None}
    assert choose_reference("auto", accuracies, None)[0] == "tfidf_lr"
    assert choose_reference("encoder", accuracies, None,
                            {"encoder": "baseline.encoder.enabled: false"}) == (
        "majority", "evaluate.reference: encoder was not fitted (baseline.encoder.enabled: "
        "false); the relative error reduction is measured against the majority-class "
        "baseline instead")


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


def supervised(predictions):
    """``scored()`` with the supervised references of ``predictions`` (name -> ids)."""
    s = scored()
    return ScoredSet(s.name, s.ids, s.y, s.scores,
                     {**s.references, **{name: np.asarray(p, dtype=np.int64)
                                         for name, p in predictions.items()}}, None)


@pytest.mark.parametrize("tied", [names for k in (2, 3)
                                  for names in itertools.combinations(NAMES, k)])
def test_a_tie_for_the_strongest_reference_is_said_not_one_named(tied):
    """Issue 70: references of the same accuracy (each right on rows 0-5, as the adapter,
    but wrong on different rows) tie; the record keeps the first as
    ``strongest_supervised``, and the verdict names none the strongest."""
    y = scored().y
    wrong = [(y + 1) % 3, (y + 2) % 3, (y + 1) % 3]
    rows = [np.where(np.arange(8) < 6, y, w) for w in wrong]  # each 0.75
    weaker = {name: np.zeros(8) for name in NAMES if name not in tied}  # majority: 0.375
    ties = dict(zip(tied, rows[:len(tied)], strict=True))
    metrics, _ = _set_metrics(supervised({**ties, **weaker}), labels=LABELS, wanted="auto",
                              scaling=None, majority_class="negative", issues_file="f.csv")
    refs = metrics["references"]
    assert metrics["strongest_supervised"] == tied[0]
    shorts = [BY_NAME[name].short for name in tied]
    each = "; ".join(supervised_verdict(name, refs[name]) for name in tied)
    said = (f"tied strongest: {', '.join(shorts[:-1])} and {shorts[-1]} (accuracy 0.7500 "
            f"each): {each}")
    assert metrics["verdict"] == said
    parsed = contracts.SetMetrics(**metrics)
    assert parsed.strongest_verdict() == said
    # the same rows, one reference right on one more row: no tie, that one is named
    better = {**ties, tied[-1]: np.where(np.arange(8) < 7, y, wrong[0])}
    alone, _ = _set_metrics(supervised({**better, **weaker}), labels=LABELS, wanted="auto",
                            scaling=None, majority_class="negative", issues_file="f.csv")
    assert alone["strongest_supervised"] == tied[-1]
    assert alone["verdict"] == supervised_verdict(tied[-1], alone["references"][tied[-1]])
    assert "tied" not in alone["verdict"]


def test_each_extra_sets_verdict_and_an_unfitted_reference_are_said_first(tmp_path):
    """Issue 70: the closing lines give every set's verdict against its strongest
    supervised reference, and say when the reference the params name was not fitted."""
    from lorasent.stages.evaluate import EvaluateResult

    y = scored().y
    fitted = {"tfidf_lr": np.where(np.arange(8) < 5, y, (y + 1) % 3)}
    notes = {"encoder": "baseline.encoder.enabled: false"}
    args: dict[str, Any] = {"labels": LABELS, "scaling": None, "majority_class": "negative",
            "issues_file": "f.csv"}
    s = supervised(fitted)
    s = ScoredSet(s.name, s.ids, s.y, s.scores, s.references, None, reference_notes=notes)
    main, _ = _set_metrics(s, wanted="encoder", **args)
    extra, _ = _set_metrics(s, wanted="encoder", **args)
    plain, _ = _set_metrics(scored(), wanted="encoder", **args)  # no supervised reference
    metrics = contracts.EvalMetrics(**main, mode="generative", test_sets={
        "set": contracts.TestSetMetrics(**extra, source="x.csv", data={}),
        "plain": contracts.TestSetMetrics(**plain, source="y.csv", data={})})
    fell_back = ("evaluate.reference: encoder was not fitted (baseline.encoder.enabled: "
                 "false); the relative error reduction is measured against the "
                 "majority-class baseline instead")
    verdict = supervised_verdict("tfidf_lr", main["references"]["tfidf_lr"])
    # a folder of its own: no machine record of a run here adds its seconds to the verdict
    written = tmp_path / "metrics" / "eval.json"
    summary = EvaluateResult(metrics, "encoder").summary(written).splitlines()
    assert main["reference"] == "majority" and main["reference_note"] == fell_back
    assert summary[:4] == [f"test split: the adapter: {verdict}", f"set: the adapter: {verdict}",
                           fell_back, "plain: evaluate.reference: encoder was not fitted (no "
                           "encoder reference); the relative error reduction is measured "
                           "against the majority-class baseline instead"]
    assert summary[4].startswith("test split: 8 rows")
    # asked for auto, or for the reference it got: nothing to say
    assert not [line for line in EvaluateResult(metrics).summary(written).splitlines()
                if "evaluate.reference" in line]


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


def test_a_one_row_set_gets_its_metrics_and_no_interval():
    # one row of class positive, predicted positive (probability 0.8); the majority class
    # (negative) is wrong on it, the zero-shot right, the calibrated zero-shot wrong
    scores = np.log(np.array([[0.1, 0.1, 0.8]])).astype(np.float32)
    s = ScoredSet("one", ["r0"], np.array([2]), scores, {
        "majority": np.zeros(1, dtype=np.int64), "zero_shot": np.array([2]),
        "zero_shot_calibrated": np.array([1])}, None, {})
    metrics, issues = _set_metrics(s, labels=LABELS, wanted="majority",
                                   scaling=TemperatureScaling.model_validate(TEMPERATURE),
                                   majority_class="negative", issues_file="f.csv")
    parsed = contracts.TestSetMetrics(**metrics, source="one.csv", data={})
    assert (parsed.accuracy, parsed.macro_f1, parsed.test_rows) == (1.0, 1 / 3, 1)
    assert (parsed.reference, parsed.reference_accuracy, parsed.relative_error_reduction) == (
        "majority", 0.0, 1.0)
    assert parsed.interval("accuracy") == (1.0, None, None)
    assert parsed.interval("macro_f1") == (1 / 3, None, None)
    assert parsed.interval("relative_error_reduction") == (1.0, None, None)
    assert parsed.references is not None
    zero_shot = parsed.references["zero_shot"]
    assert zero_shot is not None and zero_shot.relative_error_reduction is None
    assert (zero_shot.relative_error_reduction_ci95_low,
            zero_shot.relative_error_reduction_ci95_high) == (None, None)
    cal = parsed.calibration
    assert cal is not None and cal.nll == pytest.approx(-np.log(0.8))
    assert (cal.nll_ci95_low, cal.nll_ci95_high, cal.ece_ci95_low, cal.brier_ci95_high) == (
        None, None, None, None)
    assert cal.scaled is not None and (cal.scaled.nll_ci95_low, cal.scaled.ece_ci95_high) == (
        None, None)
    assert len(issues.indices) == 0
    assert parsed.warnings == [
        "no interval: 1 row in test set one, and a bootstrap over one row has no spread; "
        "add rows to it for 95% intervals"]


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


def test_no_temperature_is_said_in_one_line_in_eval_json_and_in_the_summary():
    from lorasent.calibration import NO_VALIDATION_NOTE
    from lorasent.stages.evaluate import EvaluateResult

    unfitted = TemperatureScaling.model_validate({
        **TEMPERATURE, "validation_rows": 0, "temperature": None, "note": NO_VALIDATION_NOTE})
    said = ("no temperature: no validation split (split.validation_size: 0): temperature "
            "scaling not fitted; predict uses the raw probabilities")
    main, _ = _set_metrics(scored(), labels=LABELS, wanted="auto", scaling=unfitted,
                           majority_class="negative", issues_file="f.csv")
    extra, _ = _set_metrics(scored(), labels=LABELS, wanted="auto", scaling=unfitted,
                            majority_class="negative", issues_file="g.csv")
    assert main["calibration"]["scaled"] is None and main["warnings"][-1] == said
    metrics = contracts.EvalMetrics(**main, mode="generative", test_sets={
        "set": contracts.TestSetMetrics(**extra, source="x.csv", data={})})
    summary = EvaluateResult(metrics).summary().splitlines()
    assert [line for line in summary if "temperature:" in line] == [f"WARNING: {said}"]
    fitted, _ = _set_metrics(scored(), labels=LABELS, wanted="auto",
                             scaling=TemperatureScaling.model_validate(TEMPERATURE),
                             majority_class="negative", issues_file="f.csv")
    assert not [w for w in fitted["warnings"] if "temperature" in w]


# ------------------------------------------------- the stage in-process, on the tiny Gemma

EXTRA_CSV = ("text,label\n"
             "I love this phone,POS\n"          # an alias, and a training row: overlap
             "what a lovely morning,positive\n"
             "the battery died at noon,neg\n"
             "THE BATTERY DIED AT NOON,neg\n"   # a duplicate, dropped
             "  ,negative\n"                    # an empty text, dropped
             "bus comes at seven,neutral\n")


@pytest.fixture(scope="module")
def evaluated(tiny_base, tmp_path_factory):
    """baseline, train and evaluate of the tiny Gemma, with one extra test set (a CSV)."""
    from conftest import train_in
    from lorasent.atomic import atomic_write_text, jsonl_text
    from lorasent.params import parse_params
    from lorasent.stages.baseline import run_baseline
    from lorasent.stages.evaluate import run_evaluate
    from lorasent.stages.split import row_id
    from lorasent.stages.test_sets import load_test_sets
    from test_train_recipe import PARAMS, ROWS

    root = tmp_path_factory.mktemp("evaluate")
    split = root / "split"
    rows = [{"id": row_id(t), "text": t, "label": LABELS[i], "label_id": i} for t, i in ROWS]
    # validation: the eight rows, on which the tiny model's temperature fit is not degenerate
    for name, part in (("train", rows[:6]), ("validation", rows), ("test", rows)):
        atomic_write_text(split / f"{name}.jsonl", jsonl_text(part))
    (root / "extra.csv").write_text(EXTRA_CSV, encoding="utf-8")
    params = parse_params({
        **PARAMS, "base": {**PARAMS["base"], "label_aliases": {"pos": "positive",
                                                                "neg": "negative"}},
        "train": {**PARAMS["train"], "max_steps": 2, "eval_strategy": "no", "save_steps": 0},
        "evaluate": {"batch_size": 4, "reference": "auto", "test_sets": {
            "extra": {"source": str(root / "extra.csv"), "size": 0}}}})
    record = params.model_dump(mode="json")
    metrics = root / "metrics"
    run_baseline(base=params.base, prompt=params.prompt, batch_size=4, params_record=record,
                 model_dir=tiny_base, split_dir=split, metrics_path=metrics / "baseline.json",
                 predictions_path=metrics / "baseline_predictions.csv",
                 calibrated_predictions_path=metrics / "baseline_calibrated_predictions.csv",
                 confusion_path=metrics / "baseline_confusion.json",
                 provenance_dir=root / "provenance", references=params.baseline,
                 references_dir=metrics / "references",
                 test_sets=load_test_sets(params.evaluate.test_sets, labels=LABELS,
                                          aliases=params.base.label_aliases,
                                          seed=params.split.seed, split_dir=split))
    train_in(root, params, tiny_base, split)
    result = run_evaluate(base=params.base, prompt=params.prompt, evaluate=params.evaluate,
                          split_seed=params.split.seed,
                          params_record=record, model_dir=tiny_base,
                          adapter_dir=root / "adapter", split_dir=split,
                          baseline_path=metrics / "baseline.json",
                          baseline_predictions_path=metrics / "baseline_predictions.csv",
                          metrics_path=metrics / "eval.json",
                          predictions_path=metrics / "predictions.csv",
                          confusion_path=metrics / "confusion.json",
                          provenance_dir=root / "provenance",
                          references_dir=metrics / "references")
    return root, result


def test_the_stage_writes_each_sets_metrics_and_files(evaluated):
    from lorasent.contracts import EvalMetrics, read, read_temperature_scaling
    from lorasent.metrics import classification_metrics, read_predictions
    from lorasent.references import seconds_here

    root, result = evaluated
    m = read(EvalMetrics, root / "metrics" / "eval.json", "rerun")
    assert m == result.metrics
    extra = m.test_sets["extra"]
    assert extra.test_rows == 4 and extra.source == str(root / "extra.csv")
    assert (extra.data["dropped"]["duplicate"], extra.data["dropped"]["empty_text"]) == (1, 1)
    assert (extra.data["overlap_with_train"], extra.data["overlap_with_test"]) == (1, 1)
    assert extra.warnings[-1].startswith("1 of the 4 rows of test set extra are also in the "
                                         "training split")
    folder = root / "metrics" / "test_sets"
    assert json.loads((folder / "sets.json").read_text()) == {"sets": ["extra"]}
    predictions = read_predictions((folder / "extra" / "predictions.csv").read_text(), "p")
    recomputed = classification_metrics(predictions.actual, predictions.predicted, LABELS)
    assert (extra.accuracy, extra.confusion_matrix) == (recomputed["accuracy"],
                                                        recomputed["confusion_matrix"])
    issues = (folder / "extra" / "label_issues.csv").read_text().splitlines()
    assert extra.label_issues is not None and len(issues) == 1 + extra.label_issues.rows
    # the split's test set: the temperature the train stage fitted, scaled scores beside
    scaling = read_temperature_scaling(root / "adapter")
    assert scaling is not None and m.calibration is not None
    assert m.calibration.temperature == scaling.temperature is not None
    assert m.calibration.scaled is not None
    records = json.loads((root / "metrics" / "reliability.json").read_text())
    assert {r["probabilities"] for r in records} == {"raw", "temperature"}
    assert sum(r["rows"] for r in records if r["probabilities"] == "raw") == m.test_rows
    refs = m.references
    assert refs is not None and set(refs) == {"majority", "zero_shot", "zero_shot_calibrated",
                                              "tfidf_lr", "encoder", "encoder_ft"}
    assert m.reference_accuracy == refs[m.reference].accuracy  # type: ignore[union-attr]
    summary = result.summary(root / "metrics" / "eval.json").splitlines()
    # the verdicts first, each set's (issue 70), then the headlines
    assert [line.split(":")[0] for line in summary[:5]] == ["test split", "extra",
                                                            "test split", "extra", "Details"]
    seconds = seconds_here(root / "metrics" / "provenance")
    assert summary[0] == f"test split: the adapter: {m.strongest_verdict(seconds)}"
    assert summary[1] == f"extra: the adapter: {extra.strongest_verdict(seconds)}"
    assert extra.verdict is not None and extra.verdict.split(":")[0] in summary[1]


@pytest.mark.parametrize("n", [2, 48, 300])
def test_the_adapter_s_intervals_do_not_move_when_a_reference_is_added_removed_or_ties(n):
    """Issue 70: the adapter's accuracy and macro-F1 intervals are its own, whichever
    reference the headline takes: the same predictions with the references removed, one
    added (a supervised one that becomes the headline's), or tied with another give the
    same bounds; only the relative error reduction's follow the reference."""
    rng = np.random.default_rng(n)
    y = rng.integers(0, 3, n)
    predicted = np.where(rng.random(n) < 0.6, y, rng.integers(0, 3, n))
    scores = np.log(np.full((n, 3), 0.1) + 0.7 * np.eye(3)[predicted]).astype(np.float32)
    zero_shot = np.where(rng.random(n) < 0.3, y, rng.integers(0, 3, n))
    strong = np.where(rng.random(n) < 0.8, y, rng.integers(0, 3, n))
    variants = {
        "majority alone": {"majority": np.zeros(n, dtype=np.int64)},
        "zero-shot": {"majority": np.zeros(n, dtype=np.int64), "zero_shot": zero_shot},
        "a stronger one added": {"majority": np.zeros(n, dtype=np.int64),
                                 "zero_shot": zero_shot, "tfidf_lr": strong},
        "two tied": {"majority": np.zeros(n, dtype=np.int64), "zero_shot": strong,
                     "tfidf_lr": strong[::-1].copy()},
        "the adapter itself": {"majority": np.zeros(n, dtype=np.int64),
                               "zero_shot_calibrated": predicted.copy()}}
    keys = [f"{name}_ci95_{end}" for name in ("accuracy", "macro_f1") for end in ("low", "high")]
    found = {}
    for variant, references in variants.items():
        s = ScoredSet("set", [f"r{i}" for i in range(n)], y, scores,
                      {"zero_shot": None, "zero_shot_calibrated": None, **references}, None, {})
        metrics, _ = _set_metrics(s, labels=LABELS, wanted="auto", scaling=None,
                                  majority_class="negative", issues_file="f.csv")
        found[variant] = {key: metrics[key] for key in keys}
        chosen = metrics["references"][metrics["reference"]]
        assert [metrics[f"relative_error_reduction_ci95_{end}"] for end in ("low", "high")] == [
            chosen[f"relative_error_reduction_ci95_{end}"] for end in ("low", "high")]
    assert all(bounds == found["majority alone"] for bounds in found.values()), found
    assert all(value is not None for value in found["majority alone"].values())
