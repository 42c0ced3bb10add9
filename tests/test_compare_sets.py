"""`lorasent compare` of revisions that committed issue 30's files, on a throwaway git + DVC
repo (test_compare's): eval.json with calibration and test sets, each set's predictions,
the test-label audits. Both sides of issue 30: a verdict per set and the sentence when
they disagree, the calibration rows, the reliability and risk-coverage PNGs, the flagged
flips; against a revision of before it: the new parts left out or "—"; a damaged audit:
one error naming revision, path and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lorasent.metrics import Predictions, predictions_csv
from lorasent.review.collect import LabelIssuesFileError
from lorasent.review.compare import compare
from lorasent.review.verdict import LabelIssue
from test_compare import commit_files, make_metrics_repo
from test_render_sets import SIDES
from test_verdict_sets import LABELS, B


def _csv(p: Predictions | None) -> str:
    assert p is not None
    return predictions_csv(p.ids, p.actual.tolist(), np.log(p.probabilities), LABELS)


def _audit(issues: dict[str, LabelIssue] | None) -> str:
    return "rank,id,actual,suggested,self_confidence\n" + "".join(
        f"{i.rank},{i.id},{i.actual},{i.suggested},{i.self_confidence:.6f}\n"
        for i in (issues or {}).values())


def _files(side: int) -> dict[str, str]:
    """The metrics files test_render_sets' side A (0) or B (1) commits."""
    s = SIDES[side]
    assert s.evals is not None
    evals: dict[str, Any] = s.evals.model_dump(mode="json", exclude_unset=True)
    files = {"metrics/eval.json": json.dumps(evals, indent=2) + "\n",
             "metrics/predictions.csv": _csv(s.predictions),
             "metrics/label_issues.csv": _audit(s.label_issues)}
    for name, test_set in s.test_sets.items():
        files[f"metrics/test_sets/{name}/predictions.csv"] = _csv(test_set.predictions)
    return files


@pytest.fixture(scope="module")
def sets_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """main (tag v1: eval.json of before issue 30), sets-a and sets-b on top of it."""
    root = make_metrics_repo(tmp_path_factory.mktemp("sets"))
    commit_files(root, "sets-a", _files(0))
    commit_files(root, "sets-b", _files(1))
    bad = _audit(B.label_issues).replace("\n2,", "\n3,")
    commit_files(root, "bad-audit", {**_files(1), "metrics/label_issues.csv": bad})
    commit_files(root, "one-row-a", _one_row_set(_files(0)))
    commit_files(root, "one-row", _one_row_set(_files(1)))
    return root


def _one_row_set(files: dict[str, str]) -> dict[str, str]:
    """``files`` with a set ``tiny`` of one row, scored as evaluate scores it."""
    from test_verdict_sets import _one_row_eval_json, predictions

    evals = json.loads(files["metrics/eval.json"])
    evals["test_sets"]["tiny"] = _one_row_eval_json()["test_sets"]["tiny"]
    return {**files, "metrics/eval.json": json.dumps(evals, indent=2) + "\n",
            "metrics/test_sets/tiny/predictions.csv": _csv(predictions("t", 1, range(0)))}


@pytest.mark.slow
def test_two_revisions_of_issue_30_get_a_verdict_per_set(sets_repo, tmp_path):
    out = compare("sets-a", "sets-b", tmp_path / "r", repo=sets_repo)
    verdict = (out / "verdict.md").read_text(encoding="utf-8").splitlines()
    assert verdict[0].endswith("The test sets disagree: B is better on the test split, worse "
                               "on reviews-zh and not detectably different on news.**")
    assert verdict[2:5] == [
        "- test split (40 rows): better, Δ accuracy +0.300 [+0.150, +0.450]",
        "- reviews-zh (30 rows): worse, Δ accuracy −0.333 [−0.500, −0.167]",
        "- news (20 rows): no detectable difference, Δ accuracy +0.000 [+0.000, +0.000]"]
    assert verdict[6:] == [
        "- ⚠ test set only-a is only in A (sets-a), so it has no paired verdict",
        "- Note: 3 of the 12 rows B fixed or broke are likely label errors (cleanlab, flagged "
        "on A's or B's test-label audit): 3 of the 12 B fixed, 0 of the 0 B broke; without "
        "them, B fixed 9 and broke 0. Flagged: r00, r01, r05."]
    report = (out / "report.md").read_text(encoding="utf-8").splitlines()
    assert "| Δ ECE | −0.100 | [−0.250, +0.025] |" in report
    assert "| ECE (raw probabilities) | 0.2000 | — | — | [0.1500, 0.2500] | — |" in report
    assert [line for line in report if line.startswith("## Test set")] == [
        "## Test set reviews-zh", "## Test set news"]
    for png in ("reliability-diagram-adapter-test-split.png",
                "risk-coverage-curve-adapter-test-split.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_a_revision_of_before_issue_30_leaves_its_parts_out(sets_repo, tmp_path):
    out = compare("v1", "sets-b", tmp_path / "r", repo=sets_repo)
    verdict = (out / "verdict.md").read_text(encoding="utf-8")
    # v1 is right on every row, as B: no flips to audit, no set to pair
    assert verdict.startswith("**No detectable difference: accuracy +0.000 [+0.000, +0.000]")
    assert "The test sets disagree" not in verdict and "test split (" not in verdict
    assert verdict.splitlines()[2:] == [
        "- ⚠ test set reviews-zh is only in B (sets-b), so it has no paired verdict",
        "- ⚠ test set news is only in B (sets-b), so it has no paired verdict"]
    report = (out / "report.md").read_text(encoding="utf-8").splitlines()
    assert not any(line.startswith("| ECE") for line in report)  # neither has it: left out
    # v1's 0.8-sure rows against B's 0.9-sure rows, all right: calibration from the files
    assert "| Δ Brier score | −0.060 | [−0.060, −0.060] |" in report
    assert not any(line.startswith("## Test set") for line in report)


@pytest.mark.slow
def test_a_damaged_audit_is_one_error_and_no_report(sets_repo, tmp_path):
    with pytest.raises(LabelIssuesFileError) as err:
        compare("sets-a", "bad-audit", tmp_path / "r", repo=sets_repo)
    assert str(err.value) == (
        "bad-audit:metrics/label_issues.csv line 3 (id r05): rank '3' where 2 was due (rows "
        "are ranked 1, 2, ... in order); rerun its stage (dvc repro)")
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_one_row_set_is_said_too_small_and_the_comparison_goes_on(sets_repo, tmp_path):
    """Issue 51: every compare of such a run failed, naming split.test_size."""
    out = compare("one-row-a", "one-row", tmp_path / "both", repo=sets_repo)
    verdict = (out / "verdict.md").read_text(encoding="utf-8").splitlines()
    assert "- tiny: no paired test (1 row, too few for one)" in verdict
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Test set tiny\n\n**No paired test: test set tiny has 1 row, too few for one" \
        in report
    out = compare("v1", "one-row", tmp_path / "without", repo=sets_repo)  # v1: no sets
    assert "- ⚠ test set tiny is only in B (one-row), so it has no paired verdict" in \
        (out / "verdict.md").read_text(encoding="utf-8").splitlines()
