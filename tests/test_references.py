"""The supervised references (lorasent.references, the baseline stage's ``references``):
exact predictions of TF-IDF + LR on a tiny fixed set, the bad training splits and texts,
their params, the paired verdict against them, the warning when the adapter ties one and
the compare report's table of them with their cost.
"""

import numpy as np
import pytest

from lorasent.baseline_params import (
    STRENGTH_MAX,
    STRENGTH_MIN,
    BaselineParams,
    EncoderFtParams,
    EncoderParams,
)
from lorasent.contracts import Cost, EvalMetrics, PairedVerdict, Reference
from lorasent.metrics import supervised_verdict, warnings_by_kind
from lorasent.params import ParamsError, parse_params
from lorasent.references import ReferenceNotFitted, check_fittable, fit_tfidf_lr
from lorasent.review.render import references_section
from lorasent.review.verdict import Side
from lorasent.stages.baseline import fit_references
from lorasent.stages.evaluate import _paired
from test_train_recipe import PARAMS

LABELS = ["negative", "neutral", "positive"]
TRAIN = [("I love this phone", 2), ("great service, thank you", 2), ("so happy with it", 2),
         ("the flight was delayed again", 0), ("worst day ever", 0),
         ("this is broken and useless", 0), ("Meeting moved to 3pm", 1),
         ("the store opens at 9", 1), ("the bus comes at seven", 1)]
VALIDATION = [("happy with the service", 2), ("broken again", 0), ("opens at 3pm", 1)]
TEST = ["I love it, great", "worst flight, broken", "the meeting opens at 9", "🙂🙂", "好评"]
NO_REFERENCE_ENCODER = BaselineParams(encoder=EncoderParams(enabled=False),
                                      encoder_ft=EncoderFtParams(enabled=False))


def _fit(train=TRAIN, validation=VALIDATION, class_weighting="none"):
    return fit_tfidf_lr(train_texts=[t for t, _ in train], y_train=[y for _, y in train],
                        val_texts=[t for t, _ in validation], y_val=[y for _, y in validation],
                        labels=LABELS, class_weighting=class_weighting,
                        c_grid=(0.25, 1.0, 4.0, 16.0), word_ngram_range=(1, 2),
                        char_ngram_range=(2, 5))


def test_tfidf_lr_predicts_the_tiny_set_and_chooses_c_on_validation():
    fitted = _fit()
    probs = fitted.predict(TEST)
    assert probs.shape == (5, 3) and np.allclose(probs.sum(1), 1)
    assert probs.argmax(1).tolist() == [2, 0, 1, 1, 1]
    # no n-gram seen: the intercepts alone, all but equal on these balanced rows
    assert np.allclose(probs[3:], 1 / 3, atol=0.01)
    record = fitted.record
    # every C of the grid scored on the 3 validation rows; ties go to the smaller C
    assert [g["C"] for g in record["C_grid"]] == [0.25, 1.0, 4.0, 16.0]
    best = max(g["accuracy"] for g in record["C_grid"])
    assert record["C"] == min(g["C"] for g in record["C_grid"] if g["accuracy"] == best)
    assert record["C_chosen_by"] == "accuracy on the 3 validation rows"
    assert record["cost"]["trainable_parameters"] == (record["features"] + 1) * 3
    assert record["cost"]["train_tokens"] == 37  # the word tokens of the 9 training texts
    # deterministic: a second fit gives the same probabilities, bit for bit
    assert np.array_equal(_fit().predict(TEST), probs)


def test_without_validation_rows_c_is_chosen_by_cross_validation():
    record = _fit(validation=[]).record
    assert record["C_chosen_by"] == ("mean accuracy of 3-fold stratified cross-validation "
                                     "on the training rows")


def test_balanced_class_weighting_is_the_adapters():
    assert _fit(class_weighting="balanced").record["class_weight"] == "balanced"
    assert _fit().record["class_weight"] is None


@pytest.mark.parametrize(("y", "message"), [
    ([0, 0, 0], "the training rows hold one class ('negative'); a classifier needs at least two"),
    ([0, 0, 1], "class 'neutral' has 1 training row; a reference needs at least 2 rows of "
                "each class it is trained on"),
])
def test_a_split_it_cannot_fit_is_said_in_one_line(y, message):
    with pytest.raises(ReferenceNotFitted) as err:
        check_fittable(y, LABELS)
    assert str(err.value) == message


def test_the_stage_goes_on_when_a_reference_cannot_be_fitted():
    rows = [{"id": str(i), "text": t, "label_id": 0} for i, t in enumerate(["a b", "c d"])]
    found = fit_references(NO_REFERENCE_ENCODER, rows=rows, validation=[], sets={"test": rows},
                           labels=LABELS, class_weighting="none", seed=42)
    assert {name: (r.record, r.note) for name, r in found.items()} == {
        "tfidf_lr": (None, "not fitted: the training rows hold one class ('negative'); a "
                           "classifier needs at least two"),
        "encoder": (None, "baseline.encoder.enabled: false"),
        "encoder_ft": (None, "baseline.encoder_ft.enabled: false")}


def test_texts_without_word_characters_still_have_character_ngrams():
    train = [("🙂🙂 👍", 2), ("👍👍🙂", 2), ("😡😡", 0), ("💔😡", 0), ("http://a.b/c", 1),
             ("https://x.y/z", 1)]
    emoji_only = [(t, y) for t, y in train if y != 1]
    fitted = _fit(train=emoji_only, validation=[])
    assert fitted.record["method"].startswith("TF-IDF (char_wb 2-5-grams;")  # no word n-gram
    assert fitted.predict(["🙂👍", "😡"]).argmax(1).tolist() == [2, 0]
    mixed = [*train, ("好评，很好", 2), ("差评 太差", 0), ("一般般 ok", 1)]
    assert _fit(train=mixed, validation=[]).predict(["很好 👍"]).shape == (1, 3)


def test_references_are_written_per_set_and_score_the_test_rows():
    def rows(pairs):
        return [{"id": f"r{i}", "text": t, "label_id": y} for i, (t, y) in enumerate(pairs)]

    test = rows([(t, y) for t, y in zip(TEST[:3], [2, 0, 1], strict=True)])
    found = fit_references(NO_REFERENCE_ENCODER, rows=rows(TRAIN), validation=rows(VALIDATION),
                           sets={"test": test, "other": test[:2]}, labels=LABELS,
                           class_weighting="none", seed=42)["tfidf_lr"]
    assert found.record is not None and found.record["accuracy"] == 1.0
    assert found.record["test_sets"] == {"other": {"accuracy": 1.0, "macro_f1": 2 / 3}}
    assert found.record["train_rows"] == 9
    assert list(found.files) == ["test", "other"]
    assert found.files["test"].splitlines()[0] == (
        "id,actual,predicted,p_negative,p_neutral,p_positive")
    assert found.cost is not None and found.cost.fit_seconds > 0


@pytest.mark.parametrize(("change", "message"), [
    ({"tfidf_lr": {"C": []}}, "baseline.tfidf_lr.C"),
    ({"tfidf_lr": {"C": [-1.0]}}, "baseline.tfidf_lr.C.0"),
    ({"tfidf_lr": {"C": [float("nan")]}}, "baseline.tfidf_lr.C.0"),
    ({"tfidf_lr": {"C": [1.0, 1.0]}}, "baseline.tfidf_lr.C: [1.0, 1.0] repeats a value"),
    ({"tfidf_lr": {"word_ngram_range": [3, 1]}}, "baseline.tfidf_lr.word_ngram_range: [3, 1]"),
    ({"knn": {}}, "baseline.knn"),
    ({"encoder": {"C": [0.0]}}, "baseline.encoder.C.0"),
])
def test_reference_params_that_make_no_sense_are_refused_with_the_key(change, message):
    with pytest.raises(ParamsError) as err:
        parse_params({**PARAMS, "baseline": change})
    assert message in str(err.value)


# Issue 70, kind 3: strengths the fits cannot take (SGD's alpha = 1 / (C * rows) over- or
# underflows) were accepted, and the baseline stage ended in a traceback
OUT_OF_RANGE = [1e308, 1.7976931348623157e308, 1e7, 1e6 * (1 + 1e-15), 2 ** 64, 10 ** 30,
                1e-7, 1e-300, 5e-324, 0.0, -0.0, -1e308]


@pytest.mark.parametrize("section", ["tfidf_lr", "encoder"])
def test_a_strength_the_fits_cannot_take_is_refused_in_one_line_naming_the_key(section):
    for c in OUT_OF_RANGE:
        with pytest.raises(ParamsError) as err:
            parse_params({**PARAMS, "baseline": {section: {"C": [1.0, c]}}})
        bound = "greater than or equal to 0.000001" if c < 1 else "less than or equal to 1000000"
        assert str(err.value).splitlines() == [
            "params.yaml: invalid params",
            f"  baseline.{section}.C.1: input should be {bound} (got {c!r})"]
    both = parse_params({**PARAMS, "baseline": {section: {"C": [STRENGTH_MIN, STRENGTH_MAX]}}})
    assert getattr(both.baseline, section).C == (1e-6, 1e6)


def test_the_strengths_at_the_bounds_fit():
    """The sparse fit (SGD, alpha = 1 / (C * rows)) at both bounds gives probabilities."""
    fitted = fit_tfidf_lr(train_texts=[t for t, _ in TRAIN], y_train=[y for _, y in TRAIN],
                          val_texts=[], y_val=[], labels=LABELS, class_weighting="none",
                          c_grid=(STRENGTH_MIN, STRENGTH_MAX), word_ngram_range=(1, 2),
                          char_ngram_range=(2, 5))
    assert np.isfinite(fitted.predict(TEST)).all()
    assert [g["C"] for g in fitted.record["C_grid"]] == [1e-6, 1e6]


def test_one_refused_item_of_a_list_is_one_line():
    """Issue 70, kind 6: pydantic's "tuple should have at least 1 item after validation,
    not 0" followed each refused item of a one-item list, as if the list were empty."""
    for change in ({"tfidf_lr": {"C": ["abc"]}}, {"tfidf_lr": {"C": [-1]}},
                   {"encoder": {"C": [float("inf")]}}):
        with pytest.raises(ParamsError) as err:
            parse_params({**PARAMS, "baseline": change})
        lines = str(err.value).splitlines()
        assert len(lines) == 2 and ".C.0: input should be " in lines[1], lines
    with pytest.raises(ParamsError) as err:  # an empty list is still too short
        parse_params({**PARAMS, "baseline": {"tfidf_lr": {"C": []}}})
    assert str(err.value).splitlines()[1:] == [
        "  baseline.tfidf_lr.C: tuple should have at least 1 item after validation, not 0 "
        "(got [])"]


def test_naming_a_reference_that_is_off_is_refused():
    with pytest.raises(ParamsError) as err:
        parse_params({**PARAMS, "evaluate": {**PARAMS["evaluate"], "reference": "encoder"},
                      "baseline": {"encoder": {"enabled": False}}})
    assert "evaluate.reference: 'encoder' names the encoder + LR reference" in str(err.value)


# 40 rows: the reference right on 20 of them
Y = np.array([0, 1, 2, 0] * 10)
REFERENCE = np.where(np.arange(40) % 2 == 0, Y, (Y + 1) % 3)


@pytest.mark.parametrize(("adapter", "verdict"), [
    (Y, "better"),                       # right on every row: 20 discordant rows, all its own
    ((Y + 1) % 3, "worse"),              # wrong on every row
    (np.where(np.arange(40) % 2 == 1, Y, (Y + 1) % 3), "no detectable difference"),  # 20 : 20
])
def test_the_paired_verdict_against_a_reference(adapter, verdict):
    found = _paired(Y, REFERENCE, adapter, LABELS)
    assert found["verdict"] == verdict
    assert found["delta_accuracy"] == pytest.approx(np.mean(adapter == Y) - 0.5)
    assert found["only_adapter_right"] + found["only_reference_right"] == (
        np.sum((adapter == Y) != (REFERENCE == Y)))


def test_a_tie_with_the_strongest_reference_is_a_warning():
    paired = _paired(Y, REFERENCE, np.where(np.arange(40) % 2 == 1, Y, (Y + 1) % 3), LABELS)
    reference = {"accuracy": 0.5, "paired": paired, "cost": {"train_rows": 1600}}
    sentence = supervised_verdict("tfidf_lr", reference, seconds=2.6)
    low, high = (f"{paired[f'delta_accuracy_ci95_{end}']:+.3f}".replace("-", "−")
                 for end in ("low", "high"))
    assert sentence == ("no detectable difference from TF-IDF + logistic regression trained on "
                        f"the same 1,600 rows in 3 s: Δ accuracy +0.000 [{low}, {high}], "
                        "McNemar p = 1")
    found = warnings_by_kind({"accuracy": 0.5, "strongest_supervised": "tfidf_lr",
                              "references": {"tfidf_lr": reference}})
    assert found["not_better:tfidf_lr"] == (
        "the adapter is not detectably better than a smaller classifier trained on the same "
        "rows: " + supervised_verdict("tfidf_lr", reference))
    better = {**reference, "paired": _paired(Y, REFERENCE, Y, LABELS)}
    assert "not_better:tfidf_lr" not in warnings_by_kind(
        {"accuracy": 1.0, "strongest_supervised": "tfidf_lr", "references": {"tfidf_lr": better}})


def test_the_compare_report_sets_each_reference_beside_the_adapter_with_its_cost():
    paired = PairedVerdict(**_paired(Y, REFERENCE, Y, LABELS))
    cost = Cost(trainable_parameters=1_200, total_parameters=1_200, train_rows=9,
                train_tokens=40)
    tfidf = Reference(accuracy=0.5, accuracy_ci95_low=0.35, accuracy_ci95_high=0.65,
                      relative_error_reduction=1.0, relative_error_reduction_ci95_low=1.0,
                      relative_error_reduction_ci95_high=1.0,
                      relative_error_reduction_note=None, paired=paired, cost=cost)

    def side(references):
        evals = EvalMetrics.model_construct(
            accuracy=1.0, accuracy_ci95_low=1.0, accuracy_ci95_high=1.0, macro_f1=1.0,
            labels=LABELS, test_rows=40, reference="tfidf_lr", reference_accuracy=0.5,
            references=references, cost=Cost(trainable_parameters=10, total_parameters=100,
                                             train_rows=9, train_tokens=None))
        return Side("x", evals, None, None, None, None)

    low, high = (f"{getattr(paired, f'delta_accuracy_ci95_{end}'):+.3f}" for end in ("low", "high"))
    assert references_section((side({}), side({"tfidf_lr": tfidf}))) == [
        "", "## References trained on the same rows, and what each cost (test split)", "",
        "| classifier | A accuracy | B accuracy | A's adapter minus it | B's adapter minus it "
        "| A's cost | B's cost |", "|---|---|---|---|---|---|---|",
        f"| TF-IDF + LR | — | 0.500 [0.350, 0.650] | — | +0.500 [{low}, {high}], McNemar "
        f"p < 0.001: better | — | 1,200 of 1,200 parameters, 40 training tokens |",
        "| LoRA adapter | 1.000 [1.000, 1.000] | 1.000 [1.000, 1.000] | — | — | 10 of 100 "
        "parameters | 10 of 100 parameters |"]
    # a revision before the supervised references: no section
    assert references_section((side({}), side(None))) == []


@pytest.mark.parametrize("accuracy", [0.0, 0.1725, 0.5, 0.5199])
def test_a_strongest_supervised_reference_below_the_majority_class_is_said(accuracy):
    """An extra set on which every supervised reference is below the majority class (an
    English encoder on Chinese reviews): a verdict against the strongest says little."""
    reference = {"accuracy": accuracy, "paired": {"verdict": "better"}}
    found = warnings_by_kind({"accuracy": 0.7, "baseline": {"majority_accuracy": 0.52},
                              "strongest_supervised": "encoder_ft",
                              "references": {"encoder_ft": reference}})
    assert found == {f"weak_supervised:encoder_ft:{accuracy:.3f}": (
        f"the strongest reference trained on the same rows, a fine-tuned encoder, scores "
        f"{accuracy:.3f} here, below the majority-class baseline (0.520): the adapter's "
        "verdict against it says little about these rows")}
    at_majority = {**reference, "accuracy": 0.52}
    assert warnings_by_kind({"accuracy": 0.7, "baseline": {"majority_accuracy": 0.52},
                             "strongest_supervised": "encoder_ft",
                             "references": {"encoder_ft": at_majority}}) == {}
