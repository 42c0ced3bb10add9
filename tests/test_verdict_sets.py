"""The review of issue 30, judged from data already read (no git, no DVC): a verdict per
extra test set and one sentence when the sets disagree; Δ ECE, Δ NLL and Δ Brier of the
paired rows; the flipped rows a test-label audit flags; the audit file read strictly.
Through git and DVC: test_compare_sets; the report's and the comment's lines:
test_render_sets."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from lorasent.calibration import calibration_deltas
from lorasent.metrics import Predictions
from lorasent.review.collect import LabelIssuesFileError, read_label_issues
from lorasent.review.verdict import (
    LabelIssue,
    Side,
    disagreement,
    judge,
    outcome,
    paired_verdict,
    set_lines,
)
from lorasent.statistics import paired_comparison

LABELS = ["neg", "pos"]


def predictions(prefix: str, rows: int, wrong: range, sure: float = 0.9) -> Predictions:
    """``rows`` rows ``<prefix>00...``, actual ``i % 2``, those in ``wrong`` predicted
    wrongly; the predicted class has probability ``sure``."""
    actual = np.asarray([i % 2 for i in range(rows)])
    predicted = np.asarray([1 - y if i in wrong else y for i, y in enumerate(actual)])
    return Predictions([f"{prefix}{i:02d}" for i in range(rows)], actual, predicted,
                       np.eye(2)[predicted] * (2 * sure - 1) + (1 - sure), LABELS)


def audit(*ids: str) -> dict[str, LabelIssue]:
    return {row_id: LabelIssue(rank, row_id, "neg", "pos", 0.1)
            for rank, row_id in enumerate(ids, 1)}


def side(rev: str, main: Predictions, sets: dict[str, Predictions],
         flagged: dict[str, LabelIssue] | None = None) -> Side:
    return Side(rev, None, None, main, None, None, flagged,
                {name: Side(rev, None, None, p, None, None) for name, p in sets.items()})


# The test split: A gets its first 12 rows wrong, B none (as tests/test_review.py).
# reviews-zh: A none wrong, B its first 10. news: both the same 2 rows. only-a: A alone.
MAIN_A, MAIN_B = predictions("r", 40, range(12)), predictions("r", 40, range(0))
A = side("main", MAIN_A,
         {"reviews-zh": predictions("z", 30, range(0)), "news": predictions("n", 20, range(2)),
          "only-a": predictions("o", 10, range(0))},
         audit("r00", "r01", "r20"))
B = side("HEAD", MAIN_B,
         {"reviews-zh": predictions("z", 30, range(10)), "news": predictions("n", 20, range(2))},
         audit("r01", "r05"))
MEASURED = ("accuracy +0.300 [+0.150, +0.450], McNemar p < 0.001; macro-F1 +0.300 "
            "[+0.171, +0.451]")


def test_each_set_both_sides_have_gets_its_own_paired_verdict():
    review = judge(A, B, LABELS)
    assert list(review.sets) == ["reviews-zh", "news"]
    assert review.sets["reviews-zh"].verdict == (
        "B is worse than A: accuracy −0.333 [−0.500, −0.167], McNemar p = 0.002; macro-F1 "
        "−0.333 [−0.514, −0.168].")
    assert review.sets["news"].verdict == (
        "No detectable difference: accuracy +0.000 [+0.000, +0.000], McNemar p = 1; macro-F1 "
        "+0.000 [+0.000, +0.000]. A and B are right on exactly the same rows.")
    for name, judged in review.sets.items():  # the same machinery as the test split
        a, b = A.test_sets[name].predictions, B.test_sets[name].predictions
        assert a is not None and b is not None
        assert judged.verdict == paired_verdict(paired_comparison(
            a.actual, a.predicted, b.predicted, LABELS))
    assert review.warnings == ["test set only-a is only in A (main), so it has no paired "
                               "verdict"]


def test_sets_that_disagree_are_one_sentence_with_the_verdict():
    review = judge(A, B, LABELS)
    assert review.verdict == (
        f"B is better than A: {MEASURED}. The test sets disagree: B is better on the test "
        "split, worse on reviews-zh and not detectably different on news.")
    assert review.summary().splitlines()[:5] == [
        f"**{review.verdict}**", "",
        "- test split (40 rows): better, Δ accuracy +0.300 [+0.150, +0.450]",
        "- reviews-zh (30 rows): worse, Δ accuracy −0.333 [−0.500, −0.167]",
        "- news (20 rows): no detectable difference, Δ accuracy +0.000 [+0.000, +0.000]"]
    assert disagreement({"the test split": "better", "reviews-zh": "worse"}) == (
        "The test sets disagree: B is better on the test split but worse on reviews-zh.")
    assert disagreement({"the test split": "better", "a": "no paired test", "b": "better"}) == ""
    assert disagreement({"the test split": "not settled", "a": "no detectable difference",
                         "b": "no detectable difference"}) == (
        "The test sets disagree: B is not settled on the test split but not detectably "
        "different on a and b.")


def test_sets_that_agree_and_revisions_without_sets_add_nothing():
    plain = judge(side("main", MAIN_A, {}), side("HEAD", MAIN_B, {}), LABELS)
    assert plain.verdict == f"B is better than A: {MEASURED}."
    assert plain.sets == {} and "test split" not in plain.summary()
    better = {"x": predictions("x", 40, range(12))}
    agree = judge(side("main", MAIN_A, better),
                  side("HEAD", MAIN_B, {"x": predictions("x", 40, range(0))}), LABELS)
    assert agree.verdict == f"B is better than A: {MEASURED}."
    # a set whose predictions one side lacks: no paired test, and why
    lacking = Side("HEAD", None, None, MAIN_B, None, None, None,
                   {"x": Side("HEAD", None, None, None,
                              "HEAD has no metrics/test_sets/x/predictions.csv", None)})
    review = judge(side("main", MAIN_A, better), lacking, LABELS)
    assert review.sets["x"].verdict.startswith(
        "No paired test: HEAD has no metrics/test_sets/x/predictions.csv.")
    assert set_lines(review)[1] == "- x: no paired test"
    assert outcome(None) == "no paired test"


TINY_SAID = ("No paired test: test set tiny has 1 row, too few for one (a bootstrap over one "
             "row draws it every time: no spread, no interval); give it more rows (its "
             "source, `evaluate.test_sets.tiny.source`, or its `evaluate.test_sets.tiny.size`: "
             "0 keeps every row) and rerun evaluate (dvc repro).")


def test_a_set_of_one_row_is_said_too_small_and_the_rest_goes_on():
    """Issue 51: a one-row set, scored by evaluate ("no interval: 1 row"), made every later
    compare fail, against a revision without it too, naming the wrong key
    (split.test_size)."""
    tiny = {"tiny": predictions("t", 1, range(0))}
    review = judge(side("main", MAIN_A, tiny), side("HEAD", MAIN_B, tiny), LABELS)
    assert review.verdict == f"B is better than A: {MEASURED}."  # the test split's
    assert review.sets["tiny"].verdict == TINY_SAID
    assert set_lines(review) == [
        "- test split (40 rows): better, Δ accuracy +0.300 [+0.150, +0.450]",
        "- tiny: no paired test (1 row, too few for one)"]
    assert "- tiny: no paired test (1 row, too few for one)" in review.summary()
    # against a revision without the set: named as only in A, and nothing more
    without = judge(side("main", MAIN_A, tiny), side("HEAD", MAIN_B, {}), LABELS)
    assert without.verdict == f"B is better than A: {MEASURED}."
    assert without.warnings == ["test set tiny is only in A (main), so it has no paired "
                                "verdict"]
    # a test split of one row: its own key
    one = predictions("r", 1, range(0))
    assert judge(side("main", one, {}), side("HEAD", one, {}), LABELS).verdict == (
        "No paired test: the test split has 1 row, too few for one (a bootstrap over one row "
        "draws it every time: no spread, no interval); set split.test_size to more rows and "
        "rerun (dvc repro).")


def test_a_workspace_holding_a_one_row_set_is_read(tmp_path):
    """The reading half: a side whose eval.json has a one-row set is read, its predictions
    kept, where it used to be one error."""
    from lorasent.metrics import predictions_csv
    from lorasent.review.collect import read_side

    files = {"metrics/predictions.csv": MAIN_A,
             "metrics/test_sets/tiny/predictions.csv": predictions("t", 1, range(0))}
    for path, p in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(predictions_csv(p.ids, p.actual.tolist(),
                                                     np.log(p.probabilities), LABELS),
                                     encoding="utf-8")
    evals = _one_row_eval_json()
    (tmp_path / "metrics/eval.json").write_text(json.dumps(evals), encoding="utf-8")
    found = read_side(tmp_path, "workspace", {})
    tiny = found.test_sets["tiny"].predictions
    assert tiny is not None and tiny.ids == ["t00"]
    review = judge(found, side("HEAD", MAIN_B, {}), LABELS)
    assert review.verdict == f"B is better than A: {MEASURED}."


def _one_row_eval_json() -> dict[str, Any]:
    """eval.json of the test split (A's 40 rows) with the set tiny of one row, as evaluate
    scores it: metrics without intervals and the one-row warning."""
    from test_render_sets import _metrics

    tiny = {**_metrics(1.0, 1, None), "source": "tiny.csv", "data": {},
            "accuracy_ci95_low": None, "accuracy_ci95_high": None,
            "warnings": ["no interval: 1 row in test set tiny, and a bootstrap over one row "
                         "has no spread; add rows to it for 95% intervals"]}
    return {**_metrics(0.7, 40, None), "test_sets": {"tiny": tiny}}


def test_the_calibration_deltas_are_those_of_the_paired_rows():
    review = judge(A, B, LABELS)
    a, b = A.predictions, B.predictions
    assert a is not None and b is not None
    assert review.calibration == calibration_deltas(a.actual, a.probabilities, b.probabilities)
    # by hand: every row's top probability is 0.9; A is right on 28 of 40 rows, B on all
    assert review.calibration is not None
    assert review.calibration["delta_ece"] == pytest.approx(abs(1.0 - 0.9) - abs(0.7 - 0.9))
    assert review.calibration["delta_nll"] == pytest.approx(12 / 40 * np.log(0.1 / 0.9))
    assert review.calibration["delta_brier"] == pytest.approx(0.02 - (28 * 0.02 + 12 * 1.62) / 40)
    zh = review.sets["reviews-zh"]
    za, zb = (s.test_sets["reviews-zh"].predictions for s in (A, B))
    assert za is not None and zb is not None
    assert zh.calibration == calibration_deltas(za.actual, za.probabilities, zb.probabilities)


def test_the_flipped_rows_an_audit_flags_are_counted_in_the_notes():
    review = judge(A, B, LABELS)
    # B fixed r00..r11; A flags r00, r01 (and r20, not flipped), B flags r01 and r05
    assert review.flagged == {"r00": "A", "r01": "A, B", "r05": "B"}
    assert review.notes == [
        "3 of the 12 rows B fixed or broke are likely label errors (cleanlab, flagged on A's "
        "or B's test-label audit): 3 of the 12 B fixed, 0 of the 0 B broke; without them, B "
        "fixed 9 and broke 0. Flagged: r00, r01, r05."]
    only_b = judge(side("main", MAIN_A, {}), side("HEAD", MAIN_B, {}, audit("r07")),
                   LABELS)
    assert only_b.notes == [
        "1 of the 12 rows B fixed or broke is a likely label error (cleanlab, flagged on B's "
        "test-label audit): 1 of the 12 B fixed, 0 of the 0 B broke; without them, B fixed 11 "
        "and broke 0. A has no audit (written before it existed). An audit flags the rows its "
        "own adapter gets wrong, so B's flags fall on rows B broke. Flagged: r07."]
    clean = judge(side("main", MAIN_A, {}, audit()), side("HEAD", MAIN_B, {}),
                  LABELS)
    assert clean.notes == [
        "0 of the 12 rows B fixed or broke are likely label errors (cleanlab, flagged on A's "
        "test-label audit). B has no audit (written before it existed). An audit flags the "
        "rows its own adapter gets wrong, so A's flags fall on rows B fixed."]
    # no audit on either side (a revision of before issue 30): nothing said
    assert judge(side("main", MAIN_A, {}), side("HEAD", MAIN_B, {}),
                 LABELS).notes == []


# ------------------------------------------------------- metrics/label_issues.csv, strictly

SOURCE = "HEAD:metrics/label_issues.csv"
AUDIT = ("rank,id,actual,suggested,self_confidence\n"
         "1,r05,pos,neg,0.031250\n"
         "2,r01,neg,pos,0.250000\n")


def _error(text: str) -> str:
    with pytest.raises(LabelIssuesFileError) as err:
        read_label_issues(text, SOURCE)
    return str(err.value)


def test_an_audit_reads_in_rank_order_and_a_header_alone_flags_nothing():
    assert read_label_issues(AUDIT, SOURCE) == {
        "r05": LabelIssue(1, "r05", "pos", "neg", 0.03125),
        "r01": LabelIssue(2, "r01", "neg", "pos", 0.25)}
    reordered = "id,self_confidence,rank,suggested,actual\nr05,0.03125,1,neg,pos\n"
    assert read_label_issues(reordered, SOURCE) == {
        "r05": LabelIssue(1, "r05", "pos", "neg", 0.03125)}
    assert read_label_issues(AUDIT.splitlines()[0] + "\n", SOURCE) == {}


def test_a_damaged_audit_is_one_error_naming_the_file_and_line():
    header = "rank,id,actual,suggested,self_confidence"
    assert _error("") == (f"{SOURCE}: the file is empty (no header, no rows); rerun its stage "
                          "(dvc repro)")
    assert _error(AUDIT.replace("suggested", "guess")) == (
        f"{SOURCE} line 1: no column suggested in the header "
        "rank,id,actual,guess,self_confidence; expected "
        f"{header} as evaluate writes it: rerun its stage (dvc repro)")
    assert _error(AUDIT.replace("\n2,", "\n\n2,")) == (
        f"{SOURCE} line 3: blank line (after id r05); a test-label audit has one row per "
        "flagged test row and no blank lines: rerun its stage (dvc repro)")
    assert _error(AUDIT.replace(",0.250000", "")) == (
        f"{SOURCE} line 3 (id r01): 4 fields, the header has 5: a cut-off or damaged row; "
        "rerun its stage (dvc repro)")
    assert _error(AUDIT.replace("r01,neg", "r01,")) == (
        f"{SOURCE} line 3 (id r01): empty 'actual'; rerun its stage (dvc repro)")
    assert _error(AUDIT.replace("r01", "r05")) == (
        f"{SOURCE}: id r05 is on line 2 and line 3 (the two rows differ); each test row must "
        "be there once: rerun its stage (dvc repro)")
    assert _error(AUDIT.replace("\n2,", "\n3,")) == (
        f"{SOURCE} line 3 (id r01): rank '3' where 2 was due (rows are ranked 1, 2, ... in "
        "order); rerun its stage (dvc repro)")
    assert _error(AUDIT.replace("0.250000", "1.5")) == (
        f"{SOURCE} line 3 (id r01): self_confidence is '1.5', not a probability in [0, 1]")


def test_other_references_are_said_before_the_relative_error_reductions_delta():
    from conftest import committed
    from lorasent.contracts import EvalMetrics
    from lorasent.review.verdict import side_warnings

    b = EvalMetrics.model_validate_json(committed("metrics/eval.json"))
    a = b.model_copy(update={"reference": "zero_shot", "relative_error_reduction": 0.5514})
    assert b.reference == "encoder_ft" and b.references is not None  # issue 69's default
    same = b.references["zero_shot"]
    assert same is not None and same.relative_error_reduction is not None
    warnings, _ = side_warnings(Side("A", a, None, None, None, None),
                                Side("B", b, None, None, None, None))
    assert warnings[0] == (
        "A and B measure the relative error reduction against other references (A: zero_shot, "
        "B: encoder_ft), so its Δ compares two baselines; against A's reference B's "
        f"is {same.relative_error_reduction:.3f} (A: 0.551)")
    assert side_warnings(Side("A", b, None, None, None, None),
                         Side("B", b, None, None, None, None))[0] == []


def test_a_side_whose_eval_json_disagrees_with_its_predictions_is_said():
    from conftest import committed
    from lorasent.contracts import EvalMetrics
    from lorasent.review.verdict import side_warnings

    evals = EvalMetrics.model_validate_json(committed("metrics/eval.json"))
    n = evals.test_rows
    right = round(evals.accuracy * n)
    actual = np.zeros(n, dtype=np.int64)
    predicted = np.where(np.arange(n) < right, 0, 1).astype(np.int64)

    def side(rev: str, hits: np.ndarray) -> Side:
        p = Predictions([f"r{i}" for i in range(n)], actual, hits, np.zeros((n, 3)),
                        list(evals.labels))
        return Side(rev, evals, None, p, None, None)

    warnings, _ = side_warnings(side("a1", predicted), side("b1", predicted))
    assert warnings == []
    wrong = predicted.copy()
    wrong[0] = 1  # one row fewer right than eval.json says
    warnings, _ = side_warnings(side("a1", predicted), side("b1", wrong))
    assert warnings == [
        f"B (b1): its eval.json (accuracy {evals.accuracy:.3f} over {n} test rows) and "
        f"predictions.csv ({(right - 1) / n:.3f} over {n}) are not of one run; rerun "
        "evaluate there (dvc repro) and commit both"]
