"""The report and the pull request comment of issue 30, written from hand-built sides (no
git, no DVC): each side's calibration in the metrics table, Δ ECE, Δ NLL and Δ Brier in
the paired table, a section per extra test set, the flipped rows a test-label audit flags,
the reliability diagram and the risk-coverage curve; one line per test set in the
comment. The judgement itself: test_verdict_sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lorasent.calibration import reliability_bins, risk_coverage
from lorasent.contracts import EvalMetrics
from lorasent.review.collect import Comparison
from lorasent.review.pr_comment import comment_text
from lorasent.review.render import (
    RELIABILITY,
    RISK_COVERAGE,
    calibration_specs,
    interval_notes,
    write_report,
)
from lorasent.review.verdict import Side, delta_text, judge
from test_verdict_sets import LABELS, A, B


def _calibration(ece: float, temperature: float | None) -> dict[str, Any]:
    return {"ece_bins": 15, "nll": 0.5, "nll_ci95_low": 0.4, "nll_ci95_high": 0.6,
            "brier": 0.3, "brier_ci95_low": 0.25, "brier_ci95_high": 0.35,
            "ece": ece, "ece_ci95_low": ece - 0.05, "ece_ci95_high": ece + 0.05,
            "temperature": temperature, "temperature_note": None, "scaled": None}


def _metrics(accuracy: float, rows: int, calibration: dict[str, Any] | None,
             **more: Any) -> dict[str, Any]:
    """An eval.json object (or a test set's) of two balanced classes."""
    wrong = round((1 - accuracy) * rows / 2)
    return {"accuracy": accuracy, "accuracy_ci95_low": accuracy - 0.1,
            "accuracy_ci95_high": min(accuracy + 0.1, 1.0),
            "macro_f1": accuracy, "relative_error_reduction": (accuracy - 0.5) / 0.5,
            "per_class": {label: {"precision": accuracy, "recall": accuracy, "f1": accuracy,
                                  "support": rows // 2} for label in LABELS},
            "confusion_matrix": {"neg": {"neg": rows // 2 - wrong, "pos": wrong},
                                 "pos": {"neg": wrong, "pos": rows // 2 - wrong}},
            "labels": LABELS, "test_rows": rows, "baseline": BASELINE, "reference": "majority",
            "reference_accuracy": 0.5, "relative_error_reduction_note": None,
            **({"calibration": calibration} if calibration else {}), **more}


BASELINE = {"majority_class": "neg", "majority_accuracy": 0.5, "zero_shot_accuracy": 0.45,
            "zero_shot_macro_f1": 0.4, "zero_shot_calibrated_accuracy": 0.55,
            "zero_shot_calibrated_macro_f1": 0.5}


def _eval_json(accuracy: float, calibration: dict[str, Any] | None,
               sets: dict[str, dict[str, Any]]) -> EvalMetrics:
    return EvalMetrics.model_validate(_metrics(accuracy, 40, calibration, test_sets=sets))


ZH = {"source": "packaged:reviews-zh", "data": {}}
NEWS = {"source": "news.csv", "data": {}}
SIDES = (
    Side(A.rev, _eval_json(0.7, _calibration(0.2, 1.5), {
        "reviews-zh": _metrics(1.0, 30, _calibration(0.1, 1.5), **ZH),
        "news": _metrics(0.9, 20, None, **NEWS), "only-a": _metrics(1.0, 10, None, **NEWS)}),
         None, A.predictions, None, None, A.label_issues, A.test_sets),
    Side(B.rev, _eval_json(1.0, None, {"reviews-zh": _metrics(2 / 3, 30, None, **ZH),
                                       "news": _metrics(0.9, 20, None, **NEWS)}),
         None, B.predictions, None, None, B.label_issues, B.test_sets))
REVIEW = judge(*SIDES, LABELS)
COMPARISON = Comparison("main", "HEAD", {"main": "aaaaaaa", "HEAD": "bbbbbbb"}, {}, {}, {},
                        SIDES, REVIEW, {})


def _deltas(calibration: dict[str, Any] | None) -> list[str]:
    """The paired table's calibration rows, from ``calibration_deltas``'s numbers."""
    assert calibration is not None
    return [f"| {name} | {delta_text(calibration[key])} | "
            f"{delta_text(None, calibration[f'{key}_ci95_low'], calibration[f'{key}_ci95_high'])}"
            " |" for key, name in (("delta_ece", "Δ ECE"), ("delta_nll", "Δ NLL"),
                                   ("delta_brier", "Δ Brier score"))]


def _report(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = tmp_path / "repo"
    (repo / "data/split").mkdir(parents=True)
    (repo / "data/split/test.jsonl").write_text("".join(
        json.dumps({"id": f"r{i:02d}", "text": f"text {i}", "label": LABELS[i % 2]}) + "\n"
        for i in range(40)), encoding="utf-8")
    out = write_report(COMPARISON, tmp_path / "report", repo)
    return out, (out / "report.md").read_text(encoding="utf-8").splitlines()


def test_the_metrics_table_gives_each_sides_calibration(tmp_path):
    _, lines = _report(tmp_path)
    at = lines.index("## Metrics (test split)")
    assert lines[at + 2:at + 16] == [
        "| metric | A | B | Δ | A 95% interval | B 95% interval |",
        "|---|---|---|---|---|---|",
        "| accuracy | 0.7000 | 1.0000 | +0.3000 | [0.6000, 0.8000] | [0.9000, 1.0000] |",
        "| macro-F1 | 0.7000 | 1.0000 | +0.3000 | — | — |",
        "| relative error reduction | 0.4000 | 1.0000 | +0.6000 | — | — |",
        "| reference accuracy | 0.5000 | 0.5000 | +0.0000 | — | — |",
        "| majority-class baseline accuracy | 0.5000 | 0.5000 | +0.0000 | — | — |",
        "| zero-shot baseline accuracy | 0.4500 | 0.4500 | +0.0000 | — | — |",
        "| zero-shot baseline macro-F1 | 0.4000 | 0.4000 | +0.0000 | — | — |",
        "| calibrated zero-shot baseline accuracy | 0.5500 | 0.5500 | +0.0000 | — | — |",
        # B's eval.json has no calibration (as one written before issue 30)
        "| ECE (raw probabilities) | 0.2000 | — | — | [0.1500, 0.2500] | — |",
        "| NLL (raw probabilities) | 0.5000 | — | — | [0.4000, 0.6000] | — |",
        "| Brier score (raw probabilities) | 0.3000 | — | — | [0.2500, 0.3500] | — |",
        "| temperature (fitted on validation) | 1.5000 | — | — | — | — |"]
    assert lines[at + 16:at + 18] == ["", "## Is the difference real? (paired, same test rows)"]


def test_a_side_s_interval_note_follows_the_metrics_table_escaped():
    """Issue 62: an interval that leaves out its estimate says why in the report too."""
    note = {"calibration": {"interval_note": "the 95% interval of ECE lies above <it>"}}
    assert interval_notes((None, note)) == [
        "", "Note on B: the 95% interval of ECE lies above &lt;it&gt;."]
    assert interval_notes(({"calibration": {}}, None)) == []


def test_the_paired_table_has_the_calibration_deltas(tmp_path):
    _, lines = _report(tmp_path)
    at = lines.index("| Δ macro-F1 | +0.300 | [+0.171, +0.451] |")
    assert lines[at + 1:at + 4] == _deltas(REVIEW.calibration)
    # by hand (test_verdict_sets): ECE 0.2 -> 0.1, NLL and Brier of 0.9-sure rows
    assert [line.split(" | ")[1] for line in lines[at + 1:at + 4]] == [
        "−0.100", "−0.659", "−0.480"]


def test_each_extra_set_has_its_section(tmp_path):
    _, lines = _report(tmp_path)
    at = lines.index("## Test set reviews-zh")
    zh = REVIEW.sets["reviews-zh"]
    assert lines[at:at + 30] == [
        "## Test set reviews-zh", "",
        f"**{zh.verdict}**", "",
        "Source: packaged:reviews-zh.", "",
        "| metric | A | B | Δ | A 95% interval | B 95% interval |",
        "|---|---|---|---|---|---|",
        "| test rows | 30 | 30 | +0 | — | — |",
        "| accuracy | 1.0000 | 0.6667 | -0.3333 | [0.9000, 1.0000] | [0.5667, 0.7667] |",
        "| macro-F1 | 1.0000 | 0.6667 | -0.3333 | — | — |",
        "| relative error reduction | 1.0000 | 0.3333 | -0.6667 | — | — |",
        "| reference accuracy | 0.5000 | 0.5000 | +0.0000 | — | — |",
        "| ECE (raw probabilities) | 0.1000 | — | — | [0.0500, 0.1500] | — |",
        "| NLL (raw probabilities) | 0.5000 | — | — | [0.4000, 0.6000] | — |",
        "| Brier score (raw probabilities) | 0.3000 | — | — | [0.2500, 0.3500] | — |",
        "| temperature (fitted on validation) | 1.5000 | — | — | — | — |", "",
        "| B − A | value | paired bootstrap 95% interval |", "|---|---|---|",
        "| Δ accuracy | −0.333 | [−0.500, −0.167] |",
        "| Δ macro-F1 | −0.333 | [−0.514, −0.168] |",
        *_deltas(zh.calibration), "",
        "ECE, NLL and Brier score of the probabilities each predictions file holds (raw, "
        "before temperature scaling): lower is better.", "",
        "McNemar's exact test on the 30 rows: 0 right only in B, 10 right only in A, p = "
        "0.002.", ""]
    # by hand: B wrong on 10 of the 30 rows, every row 0.9 sure
    assert [line.split(" | ")[1] for line in _deltas(zh.calibration)] == [
        "+0.133", "+0.732", "+0.533"]
    assert "## Test set news" in lines and "## Test set only-a" not in lines
    # the per-set lines and the warning on the set only A has, at the top
    assert lines[4:7] == ["- test split (40 rows): better, Δ accuracy +0.300 [+0.150, +0.450]",
                          "- reviews-zh (30 rows): worse, Δ accuracy −0.333 [−0.500, −0.167]",
                          "- news (20 rows): no detectable difference, Δ accuracy +0.000 "
                          "[+0.000, +0.000]"]
    assert "- ⚠ test set only-a is only in A (main), so it has no paired verdict" in lines


def test_flipped_rows_an_audit_flags_are_marked(tmp_path):
    _, lines = _report(tmp_path)
    at = lines.index("B fixed (A wrong, B right): 12 rows, the 10 whose actual class's "
                     "probability moved most")
    assert lines[at + 2] == ("| text | actual | A (probability) | B (probability) | "
                             "test-label audit |")
    flagged = [line for line in lines[at + 4:at + 14] if "likely label error" in line]
    assert flagged == [
        "| text 0 | neg | pos (0.90) | neg (0.90) | ⚑ likely label error (flagged by A) |",
        "| text 1 | pos | neg (0.90) | pos (0.90) | ⚑ likely label error (flagged by A, B) |",
        "| text 5 | pos | neg (0.90) | pos (0.90) | ⚑ likely label error (flagged by B) |"]
    assert ("- Note: 3 of the 12 rows B fixed or broke are likely label errors (cleanlab, "
            "flagged on A's or B's test-label audit): 3 of the 12 B fixed, 0 of the 0 B "
            "broke; without them, B fixed 9 and broke 0. Flagged: r00, r01, r05.") in lines


def test_the_reliability_diagram_and_risk_coverage_curve_are_drawn(tmp_path):
    out, lines = _report(tmp_path)
    for title, name in ((RELIABILITY, "reliability-diagram-adapter-test-split.png"),
                        (RISK_COVERAGE, "risk-coverage-curve-adapter-test-split.png")):
        assert f"![{title}]({name})" in lines
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    reliability, curve = calibration_specs(SIDES)
    a, b = A.predictions, B.predictions
    assert a is not None and b is not None
    assert reliability["layer"][1]["data"]["values"] == [
        {"revision": name, **bin} for name, p in (("A (main)", a), ("B (HEAD)", b))
        for bin in reliability_bins(p.actual, p.probabilities) if bin["rows"]]
    # every row 0.9 sure: one bin each, A right on 28 of 40, B on all
    assert [(v["confidence"], v["accuracy"], v["rows"])
            for v in reliability["layer"][1]["data"]["values"]] == [(0.9, 0.7, 40),
                                                                     (0.9, 1.0, 40)]
    assert curve["data"]["values"] == [
        {"revision": name, **point} for name, p in (("A (main)", a), ("B (HEAD)", b))
        for point in risk_coverage(p.actual, p.probabilities)]
    assert calibration_specs((Side("x", None, None, None, "none", None),) * 2) == []


def test_the_comment_has_one_line_per_test_set():
    text = comment_text("c" * 40, "main", COMPARISON, None, None, None, "main-vs-head")
    lines = text.splitlines()
    assert lines[3:9] == [
        f"**{REVIEW.verdict}**", "",
        "- test split (40 rows): better, Δ accuracy +0.300 [+0.150, +0.450]",
        "- reviews-zh (30 rows): worse, Δ accuracy −0.333 [−0.500, −0.167]",
        "- news (20 rows): no detectable difference, Δ accuracy +0.000 [+0.000, +0.000]", ""]
    at = lines.index("| Δ macro-F1 | +0.300 | [+0.171, +0.451] |")
    assert lines[at + 1:at + 4] == _deltas(REVIEW.calibration)


@pytest.mark.parametrize("rows", [40, 10_000, 10_001, 30_000, 100_000, 10**6])
def test_a_set_of_fewer_resamples_says_how_many_wherever_its_intervals_are_printed(
        rows, tmp_path, monkeypatch):
    """Issue 70: above 10,000 rows a set's intervals draw fewer resamples
    (``resamples_for``), and every place that prints them says how many: the evaluate
    stage's line, ``lorasent metrics``' line of an extra set (under a header that names
    the test split's), the report's and the comment's notes under a metrics table, the
    paired table's interval column and the verdict's sentence; nothing where a set drew
    all 10,000."""
    from click.testing import CliRunner

    from lorasent.commands.project import metrics
    from lorasent.contracts import SetMetrics
    from lorasent.review import collect
    from lorasent.review.render import paired_table, resample_notes
    from lorasent.review.verdict import measured_text
    from lorasent.stages.evaluate import _headline
    from lorasent.statistics import PairedComparison, interval_method, resamples_for

    fewer = resamples_for(rows) < 10_000
    said = f"{resamples_for(rows):,} resamples"
    assert fewer == (rows > 10_000)
    big = _metrics(0.7, rows, None, intervals=interval_method(rows))
    assert (said in _headline(SetMetrics.model_validate(big))) == fewer
    notes = resample_notes([big, None])
    assert notes == (["", f"A's 95% intervals on this set: {said} (above 10,000 rows, "
                          "`lorasent.statistics.resamples_for`)."] if fewer else [])
    assert interval_notes((big, None))[:len(notes)] == notes
    paired = PairedComparison(
        rows=rows, accuracy=(0.6, 0.7), macro_f1=(0.6, 0.7), delta_accuracy=0.1,
        delta_accuracy_ci=(0.05, 0.15), delta_macro_f1=0.1, delta_macro_f1_ci=(0.05, 0.15),
        only_b_right=20, only_a_right=2, p_value=0.001, flips={})
    assert paired_table(paired)[0] == ("| B − A | value | paired bootstrap 95% interval"
                                       + (f" ({said})" if fewer else "") + " |")
    assert measured_text(paired).endswith(f"(paired intervals of {said})" if fewer
                                          else "macro-F1 +0.100 [+0.050, +0.150]")
    # lorasent metrics: each set's count where it is not the header's (the test split's)
    for split_rows in (600, 100_000):
        top = _metrics(0.7, split_rows, None, intervals=interval_method(split_rows),
                       test_sets={"big": {**big, **NEWS}})
        (tmp_path / "metrics").mkdir(exist_ok=True)
        (tmp_path / "metrics/eval.json").write_text(json.dumps(top), encoding="utf-8")
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(collect, "workspace_staleness", lambda: None)
        result = CliRunner().invoke(metrics, [])
        assert result.exit_code == 0, result.output
        line = next(line for line in result.output.splitlines() if line.startswith("test set"))
        other = resamples_for(rows) != resamples_for(split_rows)
        assert line == (f"test set big (news.csv): {rows} rows"
                        + (f"; [95% interval: {said}]" if other else ""))
