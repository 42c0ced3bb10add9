"""`lorasent seeds` without a repo: how it follows DVC's queue (end to end: test_experiments)."""

import json
import warnings
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from scipy import stats

from conftest import committed
from lorasent.contracts import EvalMetrics, PairedVerdict, Reference, parse
from lorasent.errors import LorasentError
from lorasent.experiments import seeds
from lorasent.review.verdict import delta_text, p_text
from lorasent.statistics import ALPHA, GroupComparison, constant_comparison

HEADER = "Task     Name        Created    Status"


def _queue(*rows: str, workers: int) -> str:
    return "\n".join([HEADER, *rows, "", f"Worker status: {workers} active, 0 idle"])


def _follow(monkeypatch, screens, restarts=None):
    """wait_for over a scripted sequence of `dvc queue status` screens."""
    shown = iter(screens)
    monkeypatch.setattr(seeds, "run_dvc", lambda repo, *args, as_json=True, **_: next(shown))
    monkeypatch.setattr(seeds, "POLL_S", 0)
    lines: list[str] = []
    restart = None if restarts is None else (lambda: restarts.append(1))
    found = seeds.wait_for(Path("."), ["a-seed42", "a-seed43"], progress=lines.append,
                           restart=restart)
    return found, lines


def test_waits_until_every_run_is_done_and_says_each_change(monkeypatch):
    found, lines = _follow(monkeypatch, [
        _queue("1 a-seed42 07:26 PM Running", "2 a-seed43 07:26 PM Queued", workers=1),
        _queue("1 a-seed42 07:26 PM Success", "2 a-seed43 07:26 PM Running", workers=1),
        _queue("1 a-seed42 07:26 PM Success", "2 a-seed43 07:26 PM Failed", workers=1)])
    assert found == {"a-seed42": "Success", "a-seed43": "Failed"}
    assert [line.split(" (")[0] for line in lines] == [
        "seeds: a-seed42 Running", "seeds: a-seed43 Queued", "seeds: a-seed42 Success",
        "seeds: a-seed43 Running", "seeds: a-seed43 Failed"]


def test_a_queue_left_without_a_worker_gets_one_again(monkeypatch):
    """A worker that stops with runs still queued (it took an earlier `dvc queue stop`):
    three looks without a worker start one again."""
    stuck = _queue("1 a-seed42 07:26 PM Success", "2 a-seed43 07:26 PM Queued", workers=0)
    restarts: list[int] = []
    found, lines = _follow(monkeypatch, [stuck] * 3 + [
        _queue("1 a-seed42 07:26 PM Success", "2 a-seed43 07:26 PM Success", workers=1)],
        restarts)
    assert restarts == [1] and found["a-seed43"] == "Success"
    assert "seeds: no queue worker runs while a-seed43 wait; starting one again" in lines


def test_without_a_restart_a_stuck_queue_is_an_error(monkeypatch):
    stuck = _queue("1 a-seed42 07:26 PM Success", "2 a-seed43 07:26 PM Queued", workers=0)
    with pytest.raises(LorasentError, match="a-seed43 queued but no queue worker runs; "
                                            "`dvc queue start` runs them"):
        _follow(monkeypatch, [stuck] * 3)


def test_a_dvc_failure_while_following_the_queue_is_said_as_seeds_own_line(monkeypatch):
    """Issue 62, kind 8: its lines started with `compare:`, the shared helper's default."""
    import subprocess

    failed = subprocess.CompletedProcess([], 1, stdout="", stderr="ERROR: no queue here")
    calls: list[tuple[object, ...]] = []

    def run(*args: object, **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return failed

    monkeypatch.setattr("lorasent.review.collect.subprocess.run", run)
    monkeypatch.setattr(seeds, "POLL_S", 0)
    with pytest.raises(LorasentError) as err:
        seeds.wait_for(Path("."), ["a-seed42"], progress=lambda line: None)
    assert str(err.value) == (f"seeds: `dvc queue status` failed in {Path('.').resolve()}: "
                              "ERROR: no queue here")
    assert len(calls) == seeds.STATUS_TRIES  # a failed look is taken again before it is one


def test_a_look_that_fails_while_a_worker_writes_is_taken_again(monkeypatch):
    """CI, stop 67: `dvc queue status` read a worker's JSON file half written and failed
    with "Expecting value: line 1 column 1 (char 0)"; the next look found the runs."""
    import subprocess

    race = subprocess.CompletedProcess([], 255, stdout="", stderr=(
        "ERROR: unexpected error - Expecting value: line 1 column 1 (char 0)"))
    done = subprocess.CompletedProcess([], 0, stderr="", stdout=_queue(
        "1 a-seed42 07:26 PM Success", "2 a-seed43 07:26 PM Success", workers=0))
    shown = iter([race, race, done])
    monkeypatch.setattr("lorasent.review.collect.subprocess.run", lambda *a, **k: next(shown))
    monkeypatch.setattr(seeds, "POLL_S", 0)
    assert seeds.wait_for(Path("."), ["a-seed42", "a-seed43"]) == {
        "a-seed42": "Success", "a-seed43": "Success"}


# ------------------------------------------------------ the adapter against each reference

Verdict = Literal["better", "worse", "no detectable difference"]

def _reference(accuracy: float, verdict: Verdict = "no detectable difference",
               delta: float = 0.01, p: float = 0.4) -> Reference:
    return Reference(accuracy=accuracy, relative_error_reduction=None,
                     relative_error_reduction_ci95_low=None,
                     relative_error_reduction_ci95_high=None,
                     relative_error_reduction_note=None,
                     paired=PairedVerdict(
                         delta_accuracy=delta, delta_accuracy_ci95_low=delta - 0.03,
                         delta_accuracy_ci95_high=delta + 0.03, delta_macro_f1=0.0,
                         delta_macro_f1_ci95_low=0.0, delta_macro_f1_ci95_high=0.0,
                         only_adapter_right=3, only_reference_right=2, mcnemar_p=p,
                         verdict=verdict))


def _evals(accuracy: float, references: dict[str, Reference | None],
           notes: dict[str, str] | None = None) -> EvalMetrics:
    """The committed eval.json with this adapter accuracy and these supervised
    references (its majority-class reference kept: not a supervised one, never listed)."""
    found = parse(EvalMetrics, json.loads(committed("metrics/eval.json")),
                  "metrics/eval.json", "")
    assert found.references is not None
    return found.model_copy(update={
        "accuracy": accuracy, "reference_notes": notes or {},
        "references": {"majority": found.references["majority"], **references}})


def _runs(adapter: list[float], **references: list[float | None]
          ) -> list[tuple[int, EvalMetrics]]:
    """One run per seed 42, 43, ...: the adapter's accuracy and each reference's (None:
    not fitted in that run, ``reference_notes`` saying it is off)."""
    return [(42 + i, _evals(acc, {name: None if values[i] is None
                                  else _reference(values[i])  # type: ignore[arg-type]
                                  for name, values in references.items()},
                            {name: f"baseline.{name}.enabled is false"
                             for name, values in references.items() if values[i] is None}))
            for i, acc in enumerate(adapter)]


@pytest.mark.parametrize(("adapter", "encoder_ft", "word"), [
    ([0.80, 0.81, 0.82], [0.70, 0.72, 0.71], "better"),
    ([0.60, 0.61, 0.62, 0.63], [0.70, 0.72, 0.71, 0.70], "worse"),
    ([0.70, 0.74, 0.69], [0.71, 0.70, 0.73], "no detectable difference"),
    ([0.70, 0.70, 0.76, 0.69, 0.72], [0.71, 0.70, 0.70, 0.73, 0.70],
     "no detectable difference"),
])
def test_a_seeded_reference_is_a_group_judged_by_welchs_t_test(adapter, encoder_ft, word):
    found = seeds.references_over_seeds(_runs(adapter, encoder_ft=encoder_ft))
    [result] = found.compared
    expected = float(stats.ttest_ind(adapter, encoder_ft, equal_var=False).pvalue)
    assert result.test is not None and result.test.p_value == expected
    assert (expected < ALPHA) == (word != "no detectable difference")
    assert result.outcome == word
    assert result.seeds == tuple(range(42, 42 + len(adapter)))
    said = ({"better": "the adapter is better", "worse": "the adapter is worse"}.get(word, word)
            + f" (Welch's t-test {p_text(expected)})")
    head = (f"fine-tuned encoder, refitted with each seed: accuracy "
            f"{GroupComparison.spread(encoder_ft)} against the adapter's "
            f"{GroupComparison.spread(adapter)}, "
            f"Δ {delta_text(float(np.mean(adapter) - np.mean(encoder_ft)))}: {said}")
    assert found.lines[2] == head
    assert found.lines[1] == (f"Against the strongest reference, fine-tuned encoder (mean "
                              f"accuracy {np.mean(encoder_ft):.4f} over {len(adapter)} "
                              f"seeds): {said}.")
    assert found.lines[3:3 + len(adapter)] == [
        f"  seed {42 + i}: Δ accuracy +0.010 [−0.020, +0.040], McNemar p = 0.4: "
        "no detectable difference" for i in range(len(adapter))]
    # the others of the registry, fitted in no run, say so with no reason to give
    assert found.lines[-2:] == ["TF-IDF + LR: not fitted in any run (eval.json gives no "
                                "reason)", "encoder + LR: not fitted in any run (eval.json "
                                "gives no reason)"]


@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("constant", [0.5, 0.68, 0.7, 0.9])
def test_a_reference_that_does_not_move_with_the_seed_is_one_value(n, constant):
    """The same fit every seed: the one-sample t-test of the adapter's accuracies against
    it, which is Welch's t-test with a side that does not vary."""
    adapter = [0.7 + 0.013 * ((i * 7) % 5) for i in range(n)]
    found = seeds.references_over_seeds(_runs(adapter, tfidf_lr=[constant] * n))
    [result] = found.compared
    expected = float(stats.ttest_1samp(adapter, constant).pvalue)
    assert result.test is not None and result.test.p_value == expected
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ttest_ind warns of precision loss on equal values
        welch = stats.ttest_ind(adapter, [constant] * n, equal_var=False).pvalue
    assert expected == pytest.approx(welch, rel=1e-9)
    assert result.constant and result.test_name == "one-sample t-test"
    assert found.lines[2].startswith(
        f"TF-IDF + LR, the same fit for every seed: accuracy {constant:.4f} against the "
        f"adapter's {GroupComparison.spread(adapter)}, Δ ")
    assert found.lines[2].endswith(f"(one-sample t-test {p_text(expected)})")


def test_a_constant_comparison_where_neither_side_varies():
    assert constant_comparison("accuracy", 0.7, [0.7, 0.7]).p_value == 1.0
    assert constant_comparison("accuracy", 0.7, [0.8, 0.8]).p_value is None
    found = seeds.references_over_seeds(_runs([0.8, 0.8], tfidf_lr=[0.7, 0.7]))
    assert found.lines[1].endswith("cannot be tested (neither side varies over the seeds).")
    with pytest.raises(ValueError, match="at least 2 runs"):
        constant_comparison("accuracy", 0.7, [0.8])


def test_a_reference_null_in_some_runs_is_compared_over_the_others():
    found = seeds.references_over_seeds(_runs(
        [0.80, 0.81, 0.83, 0.79], encoder=[0.70, None, 0.72, 0.71], encoder_ft=[None] * 4))
    [result] = found.compared
    assert result.seeds == (42, 44, 45) and result.adapter == (0.80, 0.83, 0.79)
    assert result.missing == {43: "baseline.encoder.enabled is false"}
    assert result.test is not None and result.test.p_value == float(stats.ttest_ind(
        [0.80, 0.83, 0.79], [0.70, 0.72, 0.71], equal_var=False).pvalue)
    assert "  seed 43: not fitted (baseline.encoder.enabled is false)" in found.lines
    assert [line for line in found.lines if "not fitted in any run" in line] == [
        "TF-IDF + LR: not fitted in any run (eval.json gives no reason)",
        "fine-tuned encoder: not fitted in any run (baseline.encoder_ft.enabled is false)"]
    # fitted in one run only: its paired verdict, no group test
    one = seeds.references_over_seeds(_runs([0.8, 0.81], encoder=[None, 0.7]))
    assert one.compared[0].test is None
    assert one.lines[1].endswith("no group test (fitted in 1 run only).")


def test_no_reference_fitted_in_any_run():
    found = seeds.references_over_seeds(_runs([0.8, 0.81]))
    assert found.compared == [] and found.strongest == []
    assert found.lines[1] == "No supervised reference was fitted in any run."


@pytest.mark.parametrize("word", ["better", "worse"])
@pytest.mark.parametrize("which", [[0], [1], [0, 2]])
def test_one_seeds_paired_verdict_is_not_the_groups(word, which):
    runs = _runs([0.70, 0.74, 0.69], encoder_ft=[0.71, 0.70, 0.73])
    for i in which:
        seed, evals = runs[i]
        assert evals.references is not None
        refs = {**evals.references, "encoder_ft": _reference(
            evals.references["encoder_ft"].accuracy, word, p=0.01)}
        runs[i] = (seed, evals.model_copy(update={"references": refs}))
    found = seeds.references_over_seeds(runs)
    test = found.compared[0].test
    assert test is not None and test.p_value is not None
    p = test.p_value
    said = (f"seed {42 + which[0]}'s paired verdict says" if len(which) == 1
            else "the paired verdicts of seeds 42, 44 say")
    assert found.lines[-3] == (f"  One seed's \"{word}\" is not the group's verdict: {said} "
                               f"{word}, on that seed's test rows; over the seeds there is no "
                               f"detectable difference (Welch's t-test {p_text(p)} ≥ 0.05).")
    # a group that finds the difference too says no such sentence
    agreed = seeds.references_over_seeds(_runs([0.80, 0.81, 0.82], encoder_ft=[0.7] * 3))
    assert not any("is not the group's verdict" in line for line in agreed.lines)


def test_a_tie_for_the_strongest_reference_names_both():
    """0.1 + 0.2 + 0.3 and 0.3 + 0.2 + 0.1 differ in the last bit: still a tie."""
    found = seeds.references_over_seeds(_runs(
        [0.80, 0.81, 0.82], tfidf_lr=[0.15] * 3, encoder=[0.3, 0.2, 0.1],
        encoder_ft=[0.1, 0.2, 0.3]))
    assert [r.entry.name for r in found.strongest] == ["encoder", "encoder_ft"]
    assert found.lines[1].startswith(
        "The strongest references tie, encoder + LR and fine-tuned encoder (mean accuracy "
        "0.2000 over the seeds): against encoder + LR the adapter is better (Welch's t-test ")
    assert "; against fine-tuned encoder the adapter is better (Welch's" in found.lines[1]
    untied = seeds.references_over_seeds(_runs([0.8, 0.81], encoder=[0.3, 0.2],
                                               encoder_ft=[0.3, 0.21]))
    assert [r.entry.name for r in untied.strongest] == ["encoder_ft"]


def test_the_summary_ends_with_the_references_over_the_seeds():
    runs = _runs([0.80, 0.81, 0.82], encoder_ft=[0.70, 0.72, 0.71])
    result = seeds.SeedsResult([seeds.SeedRun(f"d-seed{s}", s, "Success", e)
                                for s, e in runs])
    lines = result.summary().splitlines()
    start = lines.index("Compare with another group: lorasent compare 'd-seed*' "
                        "'<other>-seed*'") + 1
    assert lines[start:] == seeds.references_over_seeds(runs).lines
    one = seeds.SeedsResult([seeds.SeedRun("d-seed42", 42, "Success", runs[0][1]),
                             seeds.SeedRun("d-seed43", 43, "Failed", None)])
    assert "over the seeds" not in one.summary()  # one run: no group


def test_an_unseeded_reference_whose_accuracy_moves_is_a_group_said_why():
    """train.fraction < 1 draws every reference's rows with the seed."""
    found = seeds.references_over_seeds(_runs([0.80, 0.81, 0.83], tfidf_lr=[0.68, 0.70, 0.69]))
    [result] = found.compared
    assert not result.constant and result.test is not None
    assert result.test.p_value == float(stats.ttest_ind(
        [0.80, 0.81, 0.83], [0.68, 0.70, 0.69], equal_var=False).pvalue)
    assert found.lines[2].startswith(
        "TF-IDF + LR, not seeded, but its accuracy moves over the seeds (train.fraction < 1 "
        "draws the training rows with base.seed): accuracy 0.6900 ± 0.0100 (3 seeds) ")
