"""`lorasent compare` reads predictions files strictly (issue 27, item 7): each damaged
file is one error naming the file (revision and path), the line and the id; files whose
columns are in another order pair by column name; rows only on one side are listed; a
group pattern matching one run says so."""

from __future__ import annotations

import csv
import io
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import CASES
from lorasent.metrics import NoRowIdsError, Predictions, PredictionsFileError
from lorasent.review.collect import read_predictions_strict
from lorasent.review.compare import compare
from lorasent.review.verdict import in_order
from test_compare import commit_files, git_dvc, make_metrics_repo

SOURCE = "HEAD:metrics/predictions.csv"
BASE6 = (CASES / "compare_base6_A.csv").read_text(encoding="utf-8")
HEADER = "id,actual,predicted,p_negative,p_neutral,p_positive"


def _error(text: str) -> str:
    with pytest.raises(PredictionsFileError) as err:
        read_predictions_strict(text, SOURCE)
    return str(err.value)


# ----------------------------------------------------------------- the strict reader


def test_the_base_case_reads_whole():
    p = read_predictions_strict(BASE6, SOURCE)
    assert p.ids == ["1f3d6ff35622142d", "71b9af12c4018f15", "6052a68aa68a7433",
                     "3279af7feb782bf6", "5018de138c7fee9b", "3a5910fd20168015"]
    assert p.labels == ["negative", "neutral", "positive"]
    assert p.actual.tolist() == [0, 0, 0, 1, 1, 1]
    assert p.predicted.tolist() == [0, 1, 0, 1, 1, 1]
    assert p.probabilities[1].tolist() == [0.434286, 0.537759, 0.027955]


@pytest.mark.parametrize(("case", "message"), [
    ("compare_dup_id_A.csv", f"{SOURCE}: id 1f3d6ff35622142d is on line 2 and line 8; each "
                             "test row must be there once: rerun its stage (dvc repro)"),
    ("compare_dup_id_B.csv", f"{SOURCE}: id 1f3d6ff35622142d is on line 2 and line 8 (the two "
                             "rows differ); each test row must be there once: rerun its stage "
                             "(dvc repro)"),
    ("compare_truncated_row_B.csv", f"{SOURCE} line 7 (id 3a5910fd20168015): 5 fields, the "
                                    "header has 6: a cut-off or damaged row; rerun its stage "
                                    "(dvc repro)"),
])
def test_the_damaged_cases_are_one_error_each(case, message):
    assert _error((CASES / case).read_text(encoding="utf-8")) == message


def test_every_kind_of_damage_names_the_file_line_and_id():
    lines = BASE6.splitlines()
    assert _error(BASE6.replace("\n6052", "\n\n6052")) == (
        f"{SOURCE} line 4: blank line (after id 71b9af12c4018f15); a predictions file has one "
        "row per test row and no blank lines: rerun its stage (dvc repro)")
    assert _error(BASE6 + "\n").startswith(f"{SOURCE} line 8: blank line (after id "
                                           "3a5910fd20168015)")
    assert _error(BASE6.replace("neutral,neutral,0.291811", "neutral,,0.291811")) == (
        f"{SOURCE} line 5 (id 3279af7feb782bf6): empty 'predicted'; rerun its stage "
        "(dvc repro)")
    assert _error(BASE6.replace("3279af7feb782bf6,", ",")) == (
        f"{SOURCE} line 5 (id <empty>): empty 'id'; rerun its stage (dvc repro)")
    assert _error(lines[0] + "\n") == (
        f"{SOURCE}: no data rows, only the header {HEADER}; rerun its stage (dvc repro)")
    assert _error("") == (f"{SOURCE}: the file is empty (no header, no rows); rerun its stage "
                          "(dvc repro)")
    # one row is read (issue 51): the verdict says it is too few for a paired test
    assert read_predictions_strict("\n".join(lines[:2]) + "\n", SOURCE).ids == [
        "1f3d6ff35622142d"]
    assert _error(BASE6.replace("neutral,neutral,0.291811", "neutral,mixed,0.291811")) == (
        f"{SOURCE} line 5 (id 3279af7feb782bf6): predicted 'mixed' is not one of the classes "
        "of its p_ columns (negative, neutral, positive)")
    for bad in ("abc", "nan", "1.5", "-0.1"):
        assert _error(BASE6.replace("0.291811", bad)) == (
            f"{SOURCE} line 5 (id 3279af7feb782bf6): p_negative is {bad!r}, not a "
            "probability in [0, 1]")
    assert _error(BASE6.replace("p_positive", "p_neutral")) == (
        f"{SOURCE} line 1: column 'p_neutral' is named twice in the header "
        "id,actual,predicted,p_negative,p_neutral,p_neutral")
    assert _error(BASE6.replace("actual", "gold", 1)) == (
        f"{SOURCE} line 1: no column actual in the header "
        "id,gold,predicted,p_negative,p_neutral,p_positive; expected "
        "id,actual,predicted,p_<label>,... as evaluate writes it: rerun its stage (dvc repro)")


def test_a_quoted_newline_keeps_the_line_numbers_of_the_file():
    text = BASE6.replace("71b9af12c4018f15", '"71b9\naf12"')
    assert _error(text.replace("neutral,neutral,0.291811", "neutral,,0.291811")) == (
        f"{SOURCE} line 6 (id 3279af7feb782bf6): empty 'predicted'; rerun its stage "
        "(dvc repro)")


def test_a_file_without_ids_is_older_not_damaged():
    with pytest.raises(NoRowIdsError, match=r"^old.csv: no `id` column"):
        read_predictions_strict("index,actual,predicted,p_a\n0,a,a,1.0\n", "old.csv")


def _reordered(text: str, columns: list[str]) -> str:
    rows = list(csv.DictReader(io.StringIO(text)))
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


REORDERED = ["p_positive", "actual", "id", "p_negative", "predicted", "p_neutral"]


def test_columns_in_another_order_pair_by_name():
    a = read_predictions_strict(BASE6, "A")
    b = read_predictions_strict(_reordered(BASE6, REORDERED), "B")
    assert b.labels == ["positive", "negative", "neutral"]
    back = in_order(b, a.labels)
    assert back.labels == a.labels and back.ids == a.ids
    assert back.actual.tolist() == a.actual.tolist()
    assert back.predicted.tolist() == a.predicted.tolist()
    np.testing.assert_array_equal(back.probabilities, a.probabilities)
    p = Predictions(["x", "y"], np.array([0, 1]), np.array([1, 1]),
                    np.array([[0.1, 0.9], [0.3, 0.7]]), ["b", "a"])
    q = in_order(p, ["a", "b"])
    assert (q.actual.tolist(), q.predicted.tolist(), q.probabilities.tolist()) == (
        [1, 0], [0, 0], [[0.9, 0.1], [0.7, 0.3]])


# ------------------------------------------------------------ through `lorasent compare`


@pytest.fixture(scope="module")
def cases_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one-stage repo of test_compare, with tags whose predictions are the cases, and
    experiments solo-a1, solo-b1, grp-1, grp-2 (refs as `dvc exp run` leaves them)."""
    root = make_metrics_repo(tmp_path_factory.mktemp("cases"))
    predictions = "metrics/predictions.csv"
    v1 = (root / predictions).read_text(encoding="utf-8")
    for tag, text in {
        "base6": BASE6,
        "dup-a": (CASES / "compare_dup_id_A.csv").read_text(encoding="utf-8"),
        "dup-b": (CASES / "compare_dup_id_B.csv").read_text(encoding="utf-8"),
        "truncated": (CASES / "compare_truncated_row_B.csv").read_text(encoding="utf-8"),
        "reordered": _reordered(BASE6, REORDERED),
        "fewer": "".join(v1.splitlines(keepends=True)[:-3]),
    }.items():
        commit_files(root, tag, {predictions: text})
    head = git_dvc(root, "git", "rev-parse", "HEAD")
    for name, tag in (("solo-a1", "base6"), ("solo-b1", "reordered"), ("grp-1", "v1"),
                      ("grp-2", "fewer")):
        git_dvc(root, "git", "update-ref", f"refs/exps/{head[:2]}/{head[2:]}/{name}", tag)
    return root


def _verdict(out: Path) -> str:
    return (out / "verdict.md").read_text(encoding="utf-8")


SAME_ROWS = ("No detectable difference: accuracy +0.000 [+0.000, +0.000], McNemar p = 1; "
             "macro-F1 +0.000 [+0.000, +0.000]. A and B are right on exactly the same rows.")


@pytest.mark.slow
def test_a_file_with_its_columns_in_another_order_is_paired(cases_repo, tmp_path):
    out = compare("base6", "reordered", tmp_path / "r", repo=cases_repo)
    # the case files hold 6 rows beside an eval.json of 40: compare says they are not of one run
    assert _verdict(out) == f"**{SAME_ROWS}**\n\n" + "".join(
        f"- ⚠ {side}: its eval.json (accuracy 1.000 over 40 test rows) and predictions.csv "
        "(0.833 over 6) are not of one run; rerun evaluate there (dvc repro) and commit both\n"
        for side in ("A (base6)", "B (reordered)"))


@pytest.mark.parametrize(("a", "b", "message"), [
    ("dup-a", "dup-b", "dup-a:metrics/predictions.csv: id 1f3d6ff35622142d is on line 2 and "
                       "line 8; each test row must be there once: rerun its stage (dvc repro)"),
    ("base6", "dup-b", "dup-b:metrics/predictions.csv: id 1f3d6ff35622142d is on line 2 and "
                       "line 8 (the two rows differ); each test row must be there once: rerun "
                       "its stage (dvc repro)"),
    ("base6", "truncated", "truncated:metrics/predictions.csv line 7 (id 3a5910fd20168015): 5 "
                           "fields, the header has 6: a cut-off or damaged row; rerun its "
                           "stage (dvc repro)"),
])
@pytest.mark.slow
def test_a_damaged_side_is_one_line_and_nothing_is_written(cases_repo, monkeypatch, a, b,
                                                            message):
    from lorasent.commands.review import compare as compare_command

    monkeypatch.chdir(cases_repo)
    result = CliRunner().invoke(compare_command, [a, b])
    assert result.exit_code == 1
    assert result.output == f"lorasent compare: error: {message}\n"
    assert not (cases_repo / "reports").exists()


@pytest.mark.slow
def test_rows_only_on_one_side_are_counted_and_named(cases_repo, tmp_path):
    out = compare("v1", "fewer", tmp_path / "r", repo=cases_repo)
    assert _verdict(out) == (
        "**No paired test: A and B were scored on different test rows, so only each side's "
        "own interval can be given (report.md's metrics table).**\n\n"
        "- ⚠ A and B were scored on different test rows (3 rows only in A, 0 only in B; only "
        "in A: r37, r38, r39): other split params or data, so their metrics are not paired\n"
        "- ⚠ B (fewer): its eval.json (accuracy 1.000 over 40 test rows) and predictions.csv "
        "(1.000 over 37) are not of one run; rerun evaluate there (dvc repro) and commit both\n")


@pytest.mark.slow
def test_a_pattern_matching_one_run_a_side_is_a_plain_pair_and_says_so(cases_repo, tmp_path):
    out = compare("solo-a*", "solo-b*", tmp_path / "r", repo=cases_repo)
    assert _verdict(out) == (
        f"**{SAME_ROWS}**\n\n"
        "- ⚠ A: 'solo-a\\*' matches one run, solo-a1, so A and B are compared as a plain pair, "
        "row by row; a comparison over seeds needs at least 2 runs on each side\n"
        "- ⚠ B: 'solo-b\\*' matches one run, solo-b1, so A and B are compared as a plain pair, "
        "row by row; a comparison over seeds needs at least 2 runs on each side\n" + "".join(
            f"- ⚠ {side}: its eval.json (accuracy 1.000 over 40 test rows) and predictions.csv "
            "(0.833 over 6) are not of one run; rerun evaluate there (dvc repro) and commit "
            "both\n" for side in ("A (solo-a1)", "B (solo-b1)")))
    assert (out / "report.md").read_text(encoding="utf-8").startswith(
        "# lorasent: solo-a1 vs solo-b1\n")


@pytest.mark.slow
def test_a_group_against_a_pattern_matching_one_run(cases_repo, tmp_path):
    from lorasent.errors import LorasentError

    with pytest.raises(LorasentError) as err:
        compare("grp-*", "solo-b*", tmp_path / "r", repo=cases_repo)
    assert str(err.value) == (
        "compare: side B is one revision (solo-b1, the only run 'solo-b*' matches) and the "
        "other a group; a comparison over seeds needs at least 2 runs on each side: run "
        "`make seeds` (lorasent seeds) for that side too, then name both groups, e.g. "
        "'base-seed*' 'other-seed*'")
    with pytest.raises(LorasentError) as err:
        compare("nope-*", "v1", tmp_path / "r", repo=cases_repo)
    assert str(err.value) == (
        "compare: no experiment name matches 'nope-*'; experiments: grp-1, grp-2, solo-a1, "
        "solo-b1 (`dvc exp list --all-commits --name-only`)")
    assert not (tmp_path / "r").exists()


def test_the_cases_are_committed_as_given(cases_repo):
    shown = subprocess.run(["git", "show", "dup-b:metrics/predictions.csv"], cwd=cases_repo,
                           capture_output=True, text=True, check=True).stdout
    assert shown == (CASES / "compare_dup_id_B.csv").read_text(encoding="utf-8")
