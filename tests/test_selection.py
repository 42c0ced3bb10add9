"""Choosing on the validation split (lorasent.experiments.selection, issue 69): the rule,
its tie, and the tables of `lorasent sweep` and `lorasent seeds` that mark the choice and
warn that the best test score overstates it. Inputs built by hand, no DVC."""

import json
import random
from pathlib import Path

import pytest

from conftest import committed
from lorasent.contracts import EvalMetrics, ValidationMetrics, parse
from lorasent.experiments.grid import RunSpec
from lorasent.experiments.seeds import SeedRun, SeedsResult
from lorasent.experiments.selection import (
    CHOSEN,
    NOTHING_TO_CHOOSE_ON,
    choice_lines,
    choose_on_validation,
    chosen_row,
    validation_text,
)
from lorasent.experiments.sweep import SweepResult, SweepRun
from lorasent.experiments.task import RunResult
from lorasent.paths import VALIDATION_METRICS
from lorasent.review.collect import WORKSPACE, read_validation
from lorasent.review.verdict import Side

WARNING = ("selects on the test split and overstates it (an optimistic estimate)")


def _validation(accuracy: float | None, rows: int = 200) -> ValidationMetrics:
    """A validation.json of this accuracy, its interval ±0.05 (None: no validation split)."""
    known = accuracy is not None
    return ValidationMetrics(
        accuracy=accuracy, accuracy_ci95_low=None if accuracy is None else accuracy - 0.05,
        accuracy_ci95_high=None if accuracy is None else accuracy + 0.05, macro_f1=accuracy,
        macro_f1_ci95_low=None, macro_f1_ci95_high=None, per_class=None,
        confusion_matrix=None, labels=["negative", "neutral", "positive"],
        validation_rows=rows if known else 0, intervals=None, scores_are=None,
        note=None if known else "no validation split (split.validation_size: 0)")


def _evals(accuracy: float) -> EvalMetrics:
    found = parse(EvalMetrics, json.loads(committed("metrics/eval.json")),
                  "metrics/eval.json", "")
    return found.model_copy(update={
        "accuracy": accuracy, "accuracy_ci95_low": accuracy - 0.02,
        "accuracy_ci95_high": accuracy + 0.02, "macro_f1": accuracy - 0.05,
        "macro_f1_ci95_low": accuracy - 0.07, "macro_f1_ci95_high": accuracy - 0.03,
        "warnings": []})


# ------------------------------------------------------------------ the rule

def test_the_choice_is_the_highest_validation_accuracy_the_first_of_a_tie():
    rng = random.Random(0)
    for size in range(1, 30):
        scores: list[float | None] = [rng.choice([None, *(k / 8 for k in range(9))])
                                      for _ in range(size)]
        known = [s for s in scores if s is not None]
        found = choose_on_validation(scores)
        if not known:
            assert found is None
            continue
        assert found == scores.index(max(known))  # the first of equal ones
    assert choose_on_validation([0.5, 0.9, 0.9, 0.1]) == 1
    assert choose_on_validation([None, 0.0]) == 1  # 0 is a score, None is not
    assert choose_on_validation([]) is None


def test_a_row_is_marked_only_among_two_or_more_test_scores():
    assert chosen_row([0.9], [True]) is None  # one run: no choice
    assert chosen_row([0.9, 0.8], [False, True]) is None  # one test score shown
    assert chosen_row([0.9, 0.8, 0.7], [False, True, True]) == 1  # a failed run is no candidate
    assert chosen_row([None, None], [True, True]) is None
    assert choice_lines([0.9], [True]) == []
    assert choice_lines([None, None, None], [True, True, False]) == [NOTHING_TO_CHOOSE_ON]
    assert NOTHING_TO_CHOOSE_ON == ("no validation split: nothing to choose on; the test "
                                    "scores are not a choice")
    [line] = choice_lines([0.8, 0.9], [True, True])
    assert line.startswith(f"{CHOSEN}: the run of the highest validation accuracy (a tie goes "
                           "to the earlier row)") and WARNING in line
    assert choice_lines([0.8, None, None], [True, True, True])[1].startswith(
        "2 runs with a test score but no validation accuracy")


def test_the_validation_column_is_written_as_the_test_column():
    assert validation_text(_validation(0.8)) == "0.8000 [0.7500, 0.8500]"
    assert validation_text(_validation(None)) == "—"
    assert validation_text(None) == "—"


# ------------------------------------------------------------------ the tables

def _sweep(runs: list[tuple[str, float | None, ValidationMetrics | None]]) -> SweepResult:
    out = []
    for name, test, validation in runs:
        seed = int(name.rsplit("seed", 1)[1])
        spec = RunSpec(name, name.rsplit("-seed", 1)[0], seed, (f"base.seed={seed}",))
        result = RunResult(name, "succeeded" if test is not None else "failed", "n", {},
                           f"/tmp/{name}.log", 0.0, 1.0, "" if test is not None else "boom")
        side = (None if test is None else
                Side(name, _evals(test), None, None, None, None, validation=validation))
        out.append(SweepRun(spec, result, side))
    return SweepResult(out)


def _seeds(runs: list[tuple[str, float | None, ValidationMetrics | None]]) -> SeedsResult:
    return SeedsResult([SeedRun(name, int(name.rsplit("seed", 1)[1]),
                                "Success" if test is not None else "Failed",
                                None if test is None else _evals(test), validation)
                        for name, test, validation in runs])


def _table(summary: str, names: list[str]) -> dict[str, str]:
    return {line.split()[0]: line for line in summary.splitlines()
            if line.split() and line.split()[0] in names}


@pytest.mark.parametrize("build", [_sweep, _seeds])
def test_the_row_chosen_is_the_validation_argmax_not_the_best_test_score(build):
    runs = [("g-a-seed1", 0.90, _validation(0.70)),  # the best test score
            ("g-b-seed2", 0.80, _validation(0.75)),  # the best validation accuracy
            ("g-c-seed3", 0.85, _validation(0.75)),  # tied on validation, later: not chosen
            ("g-d-seed4", None, _validation(0.95))]  # failed: no test score, no candidate
    summary = build(runs).summary()
    rows = _table(summary, [name for name, _, _ in runs])
    assert [name for name, row in rows.items() if CHOSEN in row] == ["g-b-seed2"]
    # validation, test accuracy, test macro-F1, each value [low, high], then the mark
    assert rows["g-b-seed2"].split()[-13:] == [
        "0.7500", "[0.7000,", "0.8000]", "0.8000", "[0.7800,", "0.8200]", "0.7500",
        "[0.7300,", "0.7700]", *CHOSEN.split()]
    assert summary.splitlines()[0].split()[-12:] == [
        "validation", "accuracy", "[95%", "interval]", "test", "accuracy", "[95%",
        "interval]", "test", "macro-F1", "[95%", "interval]"]
    assert sum(WARNING in line for line in summary.splitlines()) == 1
    assert NOTHING_TO_CHOOSE_ON not in summary


@pytest.mark.parametrize("build", [_sweep, _seeds])
@pytest.mark.parametrize("size", [2, 3, 5])
def test_no_validation_anywhere_says_so_and_marks_nothing(build, size):
    for validation in (None, _validation(None)):  # runs before the file, or no split
        runs = [(f"g-seed{i}", 0.7 + i / 100, validation) for i in range(size)]
        summary = build(runs).summary()
        assert CHOSEN not in summary and WARNING not in summary
        assert summary.splitlines().count(NOTHING_TO_CHOOSE_ON) == 1


@pytest.mark.parametrize("build", [_sweep, _seeds])
def test_a_single_test_score_gets_neither_mark_nor_warning(build):
    for runs in ([("g-seed1", 0.8, _validation(0.7))],
                 [("g-seed1", 0.8, _validation(0.7)), ("g-seed2", None, _validation(0.9))]):
        summary = build(runs).summary()
        assert CHOSEN not in summary and WARNING not in summary
        assert NOTHING_TO_CHOOSE_ON not in summary


@pytest.mark.parametrize("build", [_sweep, _seeds])
def test_the_warning_stands_under_every_table_of_several_test_scores(build):
    rng = random.Random(1)
    for size in range(2, 12):
        runs = [(f"g-seed{i}", rng.randint(0, 100) / 100,
                 rng.choice([None, _validation(rng.randint(0, 100) / 100)]))
                for i in range(size)]
        runs[rng.randrange(size)] = (f"g-seed{size}", 0.5, _validation(0.5))  # one at least
        summary = build(runs).summary()
        assert sum(WARNING in line for line in summary.splitlines()) == 1
        assert summary.count(CHOSEN) == 2  # the row and the line that explains it


# ------------------------------------------------------------------ reading it

def test_validation_json_is_read_and_none_where_absent_or_damaged(tmp_path: Path):
    assert read_validation(tmp_path, WORKSPACE) is None
    path = tmp_path / VALIDATION_METRICS
    path.parent.mkdir(parents=True)
    expected = _validation(0.8)
    path.write_text(expected.model_dump_json(), encoding="utf-8")
    assert read_validation(tmp_path, WORKSPACE) == expected
    for damaged in ("{", "[]", json.dumps({"accuracy": 0.8}), "not json"):
        path.write_text(damaged, encoding="utf-8")
        assert read_validation(tmp_path, WORKSPACE) is None
