"""The review code split by job (issue 29, item 4): the verdict judged from data already
read, without git, DVC or a repo; and the review commands load no torch (the pull-request
workflow installs none). Through git and DVC: test_compare, test_pr_comment."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from conftest import committed
from lorasent.contracts import EvalMetrics
from lorasent.metrics import Predictions
from lorasent.review.markup import md_code, md_text
from lorasent.review.render import terminal_text
from lorasent.review.verdict import Side, Stale, delta_text, group_review, judge, p_text

LABELS = ["neg", "pos"]
IDS = [f"r{i:02d}" for i in range(40)]
ACTUAL = [i % 2 for i in range(40)]
# A gets the first 12 rows wrong, B none: 6 of each class fixed
MEASURED = ("accuracy +0.300 [+0.150, +0.450], McNemar p < 0.001; macro-F1 +0.300 "
            "[+0.171, +0.451]")


def _predictions(ids: list[str], actual: list[int], predicted: list[int]) -> Predictions:
    p = np.asarray(predicted)
    return Predictions(ids, np.asarray(actual), p, np.eye(2)[p] * 0.8 + 0.1, LABELS)


def _side(rev: str, predictions: Predictions | None = None, error: str | None = None) -> Side:
    return Side(rev, None, None, predictions, error, None)


A = _side("main", _predictions(IDS, ACTUAL, [1 - y if i < 12 else y
                                             for i, y in enumerate(ACTUAL)]))
B = _side("HEAD", _predictions(IDS, ACTUAL, ACTUAL))


def test_b_right_where_a_was_wrong_is_better_on_the_same_rows():
    review = judge(A, B, LABELS)
    assert review.verdict == f"B is better than A: {MEASURED}."
    assert (review.warnings, review.notes) == ([], [])
    assert review.paired is not None
    assert review.paired.flips == {"neg": {"fixed": 6, "broken": 0},
                                   "pos": {"fixed": 6, "broken": 0}}


def test_rows_are_paired_by_id_whatever_their_order():
    b = _side("HEAD", _predictions(IDS[::-1], ACTUAL[::-1], ACTUAL[::-1]))
    assert judge(A, b, LABELS).verdict == f"B is better than A: {MEASURED}."


def test_the_same_predictions_are_no_difference_on_exactly_the_same_rows():
    assert judge(A, _side("again", A.predictions), LABELS).verdict == (
        "No detectable difference: accuracy +0.000 [+0.000, +0.000], McNemar p = 1; macro-F1 "
        "+0.000 [+0.000, +0.000]. A and B are right on exactly the same rows.")


def test_other_rows_get_no_paired_test_and_say_which():
    b = _side("HEAD", _predictions(IDS[:30] + [f"s{i}" for i in range(10)], ACTUAL, ACTUAL))
    review = judge(A, b, LABELS)
    assert review.verdict == ("No paired test: A and B were scored on different test rows, so "
                              "only each side's own interval can be given (report.md's metrics "
                              "table).")
    assert review.warnings == [
        "A and B were scored on different test rows (10 rows only in A, 10 only in B; only in "
        "A: r30, r31, r32, r33, r34, … (5 more); only in B: s0, s1, s2, s3, s4, … (5 more)): "
        "other split params or data, so their metrics are not paired"]


def test_a_side_without_predictions_says_why():
    review = judge(A, _side("HEAD", error="HEAD has no metrics/predictions.csv"), LABELS)
    assert review.verdict == ("No paired test: HEAD has no metrics/predictions.csv. Each side's "
                              "own interval, where it has one, is in report.md's metrics table.")


def test_a_stale_side_is_said_first_and_the_numbers_are_not_a_result():
    stale = Stale(["evaluate"], ["params.yaml wrong"], "`dvc status`")
    assert judge(A, B, LABELS, {"B": stale}, notes=["a note"]).verdict == (
        "B (HEAD) is stale: `dvc status` says evaluate is out of date (changed: params.yaml "
        "wrong), so its metrics are not of its params; run dvc repro. Not a result until "
        f"then: the predictions on file give {MEASURED}.")


def test_differences_and_p_values_as_the_verdict_words_them():
    assert delta_text(-0.0123, -0.05, 0.02) == "−0.012 [−0.050, +0.020]"
    assert delta_text(0.1) == "+0.100"
    assert [p_text(0.0004), p_text(0.0312), p_text(1.0)] == ["p < 0.001", "p = 0.031", "p = 1"]


def test_two_groups_of_seeds_get_welchs_test_and_each_runs_warnings():
    evals_json = json.loads(committed("metrics/eval.json"))

    def run(rev: str, accuracy: float, macro_f1: float, zh: float = 0.5) -> Side:
        sets = {"reviews-zh": {**evals_json["test_sets"]["reviews-zh"], "accuracy": zh}}
        # a weak reference, so that each run's own warning holds its own number (the
        # committed run's is TF-IDF + LR, whose paired verdict these accuracies would move)
        evals = EvalMetrics.model_validate({
            **evals_json, "accuracy": accuracy, "macro_f1": macro_f1, "test_sets": sets,
            "reference": "zero_shot_calibrated", "reference_accuracy": 0.405,
            "strongest_supervised": None})
        return Side(rev, evals, None, None, None, None)

    review, tests = group_review([run("a-seed1", 0.70, 0.60), run("a-seed2", 0.72, 0.62)],
                                 [run("b-seed1", 0.80, 0.70), run("b-seed2", 0.82, 0.74)])
    assert review.verdict == (
        "B is better than A over seeds: accuracy 0.7100 ± 0.0141 (2 seeds) in A against "
        "0.8100 ± 0.0141 (2 seeds) in B, Δ +0.100, Welch's t-test p = 0.019. The test sets "
        "disagree: B is better on the test split but not detectably different on reviews-zh.")
    assert [(t.a, t.b, round(t.p_value or 0, 6)) for t in tests.values()] == [
        ((0.7, 0.72), (0.8, 0.82), 0.019419), ((0.6, 0.62), (0.7, 0.74), 0.069286),
        ((0.5, 0.5), (0.5, 0.5), 1.0)]
    assert list(tests) == ["accuracy", "macro_f1", "test_sets.reviews-zh.accuracy"]
    weak = ("the relative error reduction is measured against the zero_shot_calibrated baseline "
            "(0.405), which is itself below the majority-class baseline (0.428); against the "
            "majority class it is ")
    assert review.warnings == [
        f"A a-seed1: {weak}0.475", f"A a-seed2: {weak}0.510", f"B b-seed1: {weak}0.650",
        f"B b-seed2: {weak}0.685",
        "2 runs on a side give Welch's t-test little power: only large differences can show; "
        "3 to 5 seeds a side tell more"]


def test_two_groups_of_seeds_are_judged_on_every_test_set():
    """Issue 52: `make queue-trial`'s verdict over seeds, on the extra test sets too (the
    queue's one-seed trial was worse on reviews-zh alone)."""
    evals_json = json.loads(committed("metrics/eval.json"))

    def run(rev: str, accuracy: float, zh: float) -> Side:
        sets = {"reviews-zh": {**evals_json["test_sets"]["reviews-zh"], "accuracy": zh}}
        evals = EvalMetrics.model_validate({**evals_json, "accuracy": accuracy,
                                            "test_sets": sets})
        return Side(rev, evals, None, None, None, None)

    a = [run(f"r-seed{s}", acc, zh) for s, acc, zh in ((42, 0.70, 0.55), (43, 0.71, 0.54),
                                                       (44, 0.72, 0.545))]
    b = [run(f"q-seed{s}", acc, zh) for s, acc, zh in ((42, 0.71, 0.50), (43, 0.70, 0.49),
                                                       (44, 0.72, 0.51))]
    review, tests = group_review(a, b)
    assert tests["test_sets.reviews-zh.accuracy"].metric == "accuracy on reviews-zh"
    assert review.verdict.endswith(
        "The test sets disagree: B is not detectably different on the test split but worse "
        "on reviews-zh.")
    zh = tests["test_sets.reviews-zh.accuracy"]
    assert zh.p_value is not None and zh.significant and round(zh.delta, 6) == -0.045
    assert review.summary(notes=False).split("\n")[2:4] == [
        "- test split: no detectable difference over seeds, Δ accuracy +0.000, Welch's "
        "t-test p = 1",
        f"- reviews-zh: worse over seeds, Δ accuracy −0.045, Welch's t-test {p_text(zh.p_value)}"]
    # a set that one run lacks is not judged
    lacking = b[0].evals
    assert lacking is not None
    b[0] = Side("q-seed42", lacking.model_copy(update={"test_sets": {}}), None, None, None, None)
    review, tests = group_review(a, b)
    assert list(tests) == ["accuracy", "macro_f1"] and not review.group_sets


NO_TORCH = """
import sys
import lorasent.review
import lorasent.review.collect, lorasent.review.compare, lorasent.review.pr_comment
import lorasent.review.render, lorasent.review.verdict
import lorasent.experiments.learning_curve, lorasent.experiments.seeds, lorasent.experiments.sweep
from lorasent.cli import main
for command in ("compare", "pr-comment", "seeds", "metrics"):
    try:
        main([command, "--help"], prog_name="lorasent", standalone_mode=False)
    except SystemExit as exit:
        assert exit.code == 0, command
print(sorted({"torch", "transformers", "peft", "accelerate"} & set(sys.modules)))
"""


def test_the_review_code_and_its_commands_load_no_torch():
    done = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True,
                          check=True)
    assert done.stdout.splitlines()[-1] == "[]"
    assert "Usage: lorasent compare [OPTIONS] A B" in done.stdout


# What a data file or a pull request controls, in a verdict as verdict.md holds it
HOSTILE_MD = ("**B is better than A.**\n\n"
              f"- ⚠ Flagged: {md_text('e781ef3eb5b6')}, {md_text('@octocat')}, "
              f"{md_text('a*b_c|d')}, {md_text(chr(27) + '[31mred')}, "
              f"{md_text('#12 <b>x</b> &amp;')}, {md_text('two' + chr(10) + 'lines')}, "
              f"{md_code('neg')}, {md_code('a|b')}\n")


def test_the_terminal_gets_plain_text_with_control_characters_made_harmless():
    """Issue 51: compare printed GitHub's escapes ("Flagged: e781ef&#8203;3eb5b6...")."""
    assert "&#8203;" in HOSTILE_MD and "\\*" in HOSTILE_MD  # the file keeps its escaping
    assert terminal_text(HOSTILE_MD) == (
        "B is better than A.\n\n"
        "- ⚠ Flagged: e781ef3eb5b6, @octocat, a*b_c|d, ‹U+001B›[31mred, #12 <b>x</b> &amp;, "
        "two‹U+000A›lines, `neg`, a|b\n")


def test_compare_prints_the_verdict_as_plain_text(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import lorasent.review.compare
    from lorasent.cli import main

    def written(rev_a: str, rev_b: str, out: Path) -> Path:
        out.mkdir(parents=True)
        (out / "verdict.md").write_text(HOSTILE_MD, encoding="utf-8")
        return out

    monkeypatch.setattr(lorasent.review.compare, "compare", written)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["compare", "v1", "v2", "--out", "r"])
    assert result.exit_code == 0, result.output
    assert result.stdout == terminal_text(HOSTILE_MD).strip() + (
        "\nwrote r/report.md and r/report.html\n")
    assert (tmp_path / "r" / "verdict.md").read_text(encoding="utf-8") == HOSTILE_MD
