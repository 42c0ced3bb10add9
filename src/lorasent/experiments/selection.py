"""Choosing among candidate runs on the validation split, never on the test split: the one
rule ``lorasent sweep``, ``lorasent seeds`` and ``lorasent learning-curve`` (whose
terminal table is its sweep's) share.

Each run's ``metrics/validation.json`` (:class:`lorasent.contracts.ValidationMetrics`,
written by the train stage) holds the adapter's accuracy on the validation split. The run
of the highest validation accuracy is the choice (:func:`choose_on_validation`); its test
score is then an honest estimate of the choice, while the best of several test scores is
an optimistic one: picking it selects on the test split itself (the winner's curse of
model selection: Cawley & Talbot, "On over-fitting in model selection and subsequent
selection bias in performance evaluation", JMLR 11, 2010).
"""

from __future__ import annotations

from collections.abc import Sequence

from lorasent.contracts import ValidationMetrics
from lorasent.statistics import with_interval

CHOSEN = "← chosen on validation"  # the mark after the chosen row
# The result columns of every table of runs (sweep, seeds), as their rows pad them:
# validation accuracy (36), test accuracy (30), test macro-F1, each with its interval.
RESULT_COLUMNS = (f"{'validation accuracy [95% interval]':<36}"
                  f"{'test accuracy [95% interval]':<30}test macro-F1 [95% interval]")
TIE_RULE = "a tie goes to the earlier row"
NOTHING_TO_CHOOSE_ON = ("no validation split: nothing to choose on; the test scores are not "
                        "a choice")


def validation_accuracy(validation: ValidationMetrics | None) -> float | None:
    """The validation accuracy (a fraction in [0, 1]) to choose on; None for a run without
    ``metrics/validation.json`` (made before train wrote it, or damaged) or without a
    validation split (``split.validation_size: 0``: every metric None)."""
    return None if validation is None else validation.accuracy


def validation_text(validation: ValidationMetrics | None) -> str:
    """``value [low, high]`` of the validation accuracy (4 decimals, as the test column is
    written, :func:`lorasent.statistics.with_interval`); "—" without one."""
    if validation is None:
        return "—"
    return with_interval(validation.accuracy, validation.accuracy_ci95_low,
                         validation.accuracy_ci95_high)


def choose_on_validation(scores: Sequence[float | None]) -> int | None:
    """The index of the highest validation accuracy among ``scores`` (one per candidate,
    in the table's order; None: the candidate has none and cannot be chosen), the first
    of equal ones (:data:`TIE_RULE`: accuracies are counts over the same validation rows,
    so equal means equal, no tolerance); None when no candidate has one."""
    known = [(score, i) for i, score in enumerate(scores) if score is not None]
    if not known:
        return None
    best = max(score for score, _ in known)
    return next(i for score, i in known if score == best)


def chosen_row(scores: Sequence[float | None], tested: Sequence[bool]) -> int | None:
    """The row of a table to mark :data:`CHOSEN`: :func:`choose_on_validation` among the
    rows that show a test score (``tested``); None when fewer than two do (one run is no
    choice) or none of them has a validation accuracy (``scores``, table order)."""
    if sum(tested) < 2:
        return None
    return choose_on_validation([score if shown else None
                                 for score, shown in zip(scores, tested, strict=True)])


def choice_lines(scores: Sequence[float | None], tested: Sequence[bool]) -> list[str]:
    """The lines under a table of candidates' test scores: which row validation chose and
    that the best test score overstates the choice, or, where no candidate has a
    validation accuracy, :data:`NOTHING_TO_CHOOSE_ON`. Empty when fewer than two rows show
    a test score (one run is no choice).

    Args:
        scores: each row's validation accuracy (:func:`validation_accuracy`), table order.
        tested: whether each row shows a test score (a failed run shows none).
    """
    if sum(tested) < 2:
        return []
    if chosen_row(scores, tested) is None:
        return [NOTHING_TO_CHOOSE_ON]
    lines = [f"{CHOSEN}: the run of the highest validation accuracy ({TIE_RULE}); its "
             "test score is the estimate to report. Picking the best test score instead "
             "selects on the test split and overstates it (an optimistic estimate)."]
    missing = sum(1 for score, shown in zip(scores, tested, strict=True)
                  if shown and score is None)
    if missing:
        lines.append(f"{missing} run{'s' if missing > 1 else ''} with a test score but no "
                     "validation accuracy (no metrics/validation.json: made before train "
                     "wrote it, or damaged) cannot be chosen.")
    return lines
