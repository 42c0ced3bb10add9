"""The metrics contract: what every evaluation reports, in strict JSON.

Per-class scores come from scikit-learn (``precision_recall_fscore_support`` with
``zero_division=0``), always over every configured class in the configured order, so
a class absent from the test set or never predicted still has its row, and the
confusion matrix is always K x K.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

from lorasent.errors import LorasentError
from lorasent.reference_registry import BY_NAME, NAMES
from lorasent.tables import spreadsheet_row, spreadsheet_text

# Class ids as callers hold them: a list read from a split, or an array such as
# ``scores.argmax(1)``. Functions taking them convert once, with ``np.asarray``.
ClassIds = Sequence[int] | npt.NDArray[np.integer]


def classification_metrics(y_true: ClassIds, y_pred: ClassIds,
                           labels: Sequence[str]) -> dict[str, Any]:
    """Accuracy, macro-F1, per-class scores and the confusion matrix.

    Args:
        y_true: gold class ids, ints in ``[0, K)``, length N.
        y_pred: predicted class ids, same length.
        labels: the K class names; id ``i`` is ``labels[i]``.

    Returns:
        ``accuracy``, ``macro_f1`` (unweighted mean of the K per-class F1, absent classes
        counting 0), ``per_class.<label>.{precision, recall, f1, support}`` and
        ``confusion_matrix.<actual>.<predicted>`` (counts), all in label order.

    Raises:
        ValueError: empty input, unequal lengths, or an id outside ``[0, K)``.
    """
    true = np.asarray(y_true, dtype=np.int64)
    pred = np.asarray(y_pred, dtype=np.int64)
    k = len(labels)
    if true.size == 0 or true.shape != pred.shape:
        raise ValueError(f"need equal, non-empty y_true and y_pred; got {true.shape} and "
                         f"{pred.shape}")
    for name, found in (("y_true", true), ("y_pred", pred)):
        if found.min() < 0 or found.max() >= k:
            raise ValueError(f"{name} holds ids outside [0, {k}): {sorted(set(found.tolist()))}")
    ids = list(range(k))
    precision, recall, f1, support = precision_recall_fscore_support(
        true, pred, labels=ids, zero_division=0)
    cm = confusion_matrix(true, pred, labels=ids)
    return {
        "accuracy": float(accuracy_score(true, pred)),
        "macro_f1": float(np.mean(f1)),
        "per_class": {
            label: {"precision": float(precision[i]), "recall": float(recall[i]),
                    "f1": float(f1[i]), "support": int(support[i])}
            for i, label in enumerate(labels)
        },
        "confusion_matrix": {
            actual: {predicted: int(cm[i, j]) for j, predicted in enumerate(labels)}
            for i, actual in enumerate(labels)
        },
    }


def confusion_records(matrix: Mapping[str, Mapping[str, int]], labels: Sequence[str],
                      source: str = "confusion_matrix") -> list[dict[str, Any]]:
    """A confusion matrix as the records of a DVC plot: one per cell, zeros included.

    What ``metrics/confusion.json`` and ``metrics/baseline_confusion.json`` hold, drawn by
    the template ``.dvc/plots/confusion_counts.json`` (actual on the rows, predicted on
    the columns, every cell with its count, as ``lorasent compare`` draws it). The
    template orders the classes as the records first name them, so the order here is
    the plot's.

    Args:
        matrix: ``confusion_matrix`` of :func:`classification_metrics`:
            ``matrix[actual][predicted]`` is the number of test rows (an int >= 0).
        labels: the K class names in the params' order (``base.labels``).
        source: where ``matrix`` comes from, e.g. ``metrics/eval.json:confusion_matrix``,
            named in errors.

    Returns:
        K * K dicts ``{"actual": str, "predicted": str, "count": int}``, actual-major,
        both in the order of ``labels``.

    Raises:
        ValueError: a row or a cell of ``labels`` missing from ``matrix``, or a count that
            is not an int >= 0 (one line naming ``source.<actual>.<predicted>``).
    """
    records = []
    for actual in labels:
        row = matrix.get(actual)
        if not isinstance(row, Mapping):
            raise ValueError(f"{source}.{actual}: no row for class {actual!r} (classes "
                             f"{', '.join(labels)})")
        for predicted in labels:
            count = row.get(predicted)
            if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 0:
                raise ValueError(f"{source}.{actual}.{predicted}: {count!r} is not a count "
                                 "of rows (an int >= 0)")
            records.append({"actual": actual, "predicted": predicted, "count": int(count)})
    return records


def relative_error_reduction(accuracy: float, reference: float) -> tuple[float | None, str | None]:
    """``(accuracy - reference) / (1 - reference)``: the share of the reference's errors removed.

    The measure used by seed 000 (0.594 -> 0.734 is a 34.5 % error reduction). It is
    undefined when the reference makes no errors; then the value is ``None`` with a reason,
    never NaN or infinity.

    Returns:
        ``(value, None)``, or ``(None, reason)`` when ``reference == 1``.
    """
    if reference >= 1.0:
        return None, f"reference accuracy is {reference}: it makes no errors to reduce"
    return (accuracy - reference) / (1.0 - reference), None


def majority_baseline(train_labels: Sequence[int], test_labels: Sequence[int],
                      num_labels: int) -> tuple[int, float]:
    """The majority class of the training split and its accuracy on the test split.

    Ties go to the class listed first in the params.

    Returns:
        ``(class id, accuracy)``.
    """
    counts = np.bincount(np.asarray(train_labels, dtype=np.int64), minlength=num_labels)
    majority = int(np.argmax(counts))
    test = np.asarray(test_labels, dtype=np.int64)
    return majority, float(np.mean(test == majority)) if test.size else 0.0


def probabilities(scores: np.ndarray) -> np.ndarray:
    """Softmax over classes of (N, K) label scores (log-probabilities); float64 (N, K)."""
    z = np.asarray(scores, dtype=np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def predictions_csv(ids: Sequence[str], y_true: Sequence[int], scores: np.ndarray,
                    labels: Sequence[str]) -> str:
    """One row per test example: ``id, actual, predicted`` and each class's probability.

    ``id`` is the split's row id (:func:`lorasent.stages.split.row_id`), never the text, so two
    revisions' files pair row by row and a private text never reaches git. DVC's
    confusion plots draw :func:`confusion_records` instead, which keep every cell. A cell
    a spreadsheet would run as a formula is neutralised
    (:func:`lorasent.tables.spreadsheet_cell`; :func:`read_predictions` reverses it).
    """
    probs = probabilities(scores)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(spreadsheet_row(["id", "actual", "predicted",
                                     *(f"p_{label}" for label in labels)]))
    for row_id, gold, row in zip(ids, y_true, probs, strict=True):
        writer.writerow(spreadsheet_row([row_id, labels[gold], labels[int(np.argmax(row))],
                                         *(f"{p:.6f}" for p in row)]))
    return out.getvalue()


@dataclass(frozen=True)
class Predictions:
    """A predictions file read back: N rows, class ids in the order of ``labels``."""

    ids: list[str]
    actual: np.ndarray       # (N,) int64
    predicted: np.ndarray    # (N,) int64
    probabilities: np.ndarray  # (N, K) float64, columns in ``labels`` order
    labels: list[str]


class PredictionsFileError(LorasentError):
    """A predictions file that cannot be paired row by row as it stands: the message names
    the file (revision and path), the line and the row id."""


class NoRowIdsError(PredictionsFileError):
    """A predictions file written before test rows had ids: compared unpaired."""


PREDICTION_COLUMNS = ("id", "actual", "predicted")


def read_predictions(text: str, source: str) -> Predictions:
    """A predictions file (``metrics/predictions.csv``, as :func:`predictions_csv` writes
    it), checked row by row: the one reader of evaluate, compare and the device check.

    Columns are found by name, so any column order pairs; the classes are the
    ``p_<label>`` columns in the file's order. Read with the ``csv`` module; the line
    numbers in errors are the file's (the header is line 1).

    Args:
        text: the file's content.
        source: the file as the user names it, e.g. ``HEAD:metrics/predictions.csv``.

    Raises:
        NoRowIdsError: no ``id`` column (a file from before test rows had ids).
        PredictionsFileError: an empty file; a header without data rows; a column named
            twice or one of ``id``, ``actual``, ``predicted`` or ``p_<label>`` missing; a
            blank line; a row with another field count than the header (a cut-off
            row); an empty cell; a label that is no ``p_<label>`` column; a probability
            that is not a number in [0, 1]; an id on two lines (both named).
    """
    reader = csv.reader(io.StringIO(text))
    header = csv_header(reader, source, PredictionsFileError)
    if "id" not in header:
        raise NoRowIdsError(f"{source}: no `id` column (written before test rows had ids); "
                            "rerun its stage (dvc repro) to pair its rows")
    labels = [name.removeprefix("p_") for name in header if name.startswith("p_")]
    missing = [name for name in PREDICTION_COLUMNS if name not in header]
    if missing or not labels:
        raise PredictionsFileError(
            f"{source} line 1: no column {', '.join(missing or ['p_<label>'])} in the header "
            f"{','.join(header)}; expected id,actual,predicted,p_<label>,... as evaluate "
            "writes it: rerun its stage (dvc repro)")
    col = {name: i for i, name in enumerate(header)}
    index = {label: k for k, label in enumerate(labels)}
    ids: list[str] = []
    actual: list[int] = []
    predicted: list[int] = []
    probs: list[list[float]] = []
    for where, row_id, row in csv_rows(reader, header, source, PredictionsFileError,
                                       "a predictions file has one row per test row"):
        for name, out in (("actual", actual), ("predicted", predicted)):
            if row[col[name]] not in index:
                raise PredictionsFileError(f"{where}: {name} {row[col[name]]!r} is not one of "
                                           f"the classes of its p_ columns ({', '.join(labels)})")
            out.append(index[row[col[name]]])
        probs.append([probability(row[col[f"p_{label}"]], f"p_{label}", where,
                                  PredictionsFileError) for label in labels])
        ids.append(row_id)
    if not ids:
        raise PredictionsFileError(f"{source}: no data rows, only the header "
                                   f"{','.join(header)}; rerun its stage (dvc repro)")
    return Predictions(ids, np.asarray(actual, dtype=np.int64),
                       np.asarray(predicted, dtype=np.int64),
                       np.asarray(probs, dtype=np.float64), labels)


def csv_header(reader: Iterator[list[str]], source: str,
               error: type[LorasentError]) -> list[str]:
    """The header of a metrics CSV file (``reader``: a ``csv.reader`` at its start), each
    name as written (:func:`lorasent.tables.spreadsheet_text`).

    Raises:
        error: an empty file, or a column named twice (naming ``source`` and line 1).
    """
    header = next(reader, None)
    header = header and [spreadsheet_text(name) for name in header]
    if not header:
        raise error(f"{source}: the file is empty (no header, no rows); rerun its stage "
                    "(dvc repro)")
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise error(f"{source} line 1: column {', '.join(map(repr, twice))} is named twice in "
                    f"the header {','.join(header)}")
    return header


def csv_rows(reader: Any, header: list[str], source: str, error: type[LorasentError],
             rule: str) -> Iterator[tuple[str, str, list[str]]]:
    """The rows after :func:`csv_header` of a metrics CSV file whose rows carry an ``id``
    column: ``(where, id, cells)``, ``where`` naming ``source``, the row's first line
    (a quoted newline spans lines) and its id, for the caller's own checks; each cell as
    written (:func:`lorasent.tables.spreadsheet_text` reverses the writer's
    :func:`lorasent.tables.spreadsheet_cell`).

    Args:
        reader: the ``csv.reader`` :func:`csv_header` read the header of.
        rule: the file's rule a blank line breaks, e.g. ``a predictions file has one row
            per test row``.

    Raises:
        error: a blank line; a row with another field count than the header (cut off);
            an empty cell; an id on two lines (both named).
    """
    col = header.index("id")
    seen: dict[str, tuple[int, list[str]]] = {}
    last = None  # the previous row's id
    end = 1  # the line the previous row ended on
    for cells in reader:
        row = [spreadsheet_text(cell) for cell in cells]
        line = end + 1  # a row may span lines (a quoted newline); errors name its first
        end = reader.line_num
        if not row:
            raise error(f"{source} line {line}: blank line (after id "
                        f"{last or '<none: header>'}); {rule} and no blank lines: rerun its "
                        "stage (dvc repro)")
        row_id = row[col] if col < len(row) else ""
        where = f"{source} line {line} (id {row_id or '<empty>'})"
        if len(row) != len(header):
            raise error(f"{where}: {len(row)} fields, the header has {len(header)}: a cut-off "
                        "or damaged row; rerun its stage (dvc repro)")
        empty = [name for name, cell in zip(header, row, strict=True) if not cell.strip()]
        if empty:
            raise error(f"{where}: empty {', '.join(map(repr, empty))}; rerun its stage "
                        "(dvc repro)")
        if row_id in seen:
            first, copy = seen[row_id]
            differ = " (the two rows differ)" if copy != row else ""
            raise error(f"{source}: id {row_id} is on line {first} and line {line}{differ}; "
                        "each test row must be there once: rerun its stage (dvc repro)")
        seen[row_id] = (line, row)
        last = row_id
        yield where, row_id, row


def probability(cell: str, column: str, where: str, error: type[LorasentError]) -> float:
    """``cell`` as a probability.

    Raises:
        error: not a number in [0, 1] (NaN neither), naming ``where`` and ``column``.
    """
    try:
        value = float(cell)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # NaN too
        raise error(f"{where}: {column} is {cell!r}, not a probability in [0, 1]")
    return value


COLLAPSE_SHARE = 0.9  # one class predicted for at least this share of the rows ...
COLLAPSE_EXCESS = 0.1  # ... and for this much more than its share of the actual rows


# The warning's opening when the adapter is not detectably better than the strongest
# supervised reference; compare and the pull-request comment put it first.
NOT_BETTER = ("the adapter is not detectably better than a smaller classifier trained on the "
              "same rows: ")


def supervised_verdict(name: str, reference: Mapping[str, Any],
                       seconds: float | None = None) -> str:
    """The one sentence a reviewer reads first: the adapter against the supervised
    reference ``name`` (``eval.json``'s ``references.<name>``, with ``paired`` and
    ``cost``) on the same rows, e.g. ``no detectable difference from TF-IDF + logistic
    regression trained on the same 1,600 rows in 3 s: Δ accuracy +0.017 [−0.022,
    +0.055], McNemar p = 0.44``. ``seconds``: the reference's fit and predict wall time
    on this machine (its machine record), said where known; the tracked record has
    none, so that a rerun writes the same bytes.
    """
    from lorasent.statistics import with_interval

    paired, cost = reference["paired"], reference.get("cost") or {}
    rows = cost.get("train_rows")
    what = (f"{BY_NAME[name].described if name in BY_NAME else name} trained on the same "
            + (f"{rows:,} rows" if rows else "rows"))
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    if not paired:  # one test row: nothing to pair
        return f"no paired verdict against {what}{took}: one test row"
    delta = with_interval(paired["delta_accuracy"], paired["delta_accuracy_ci95_low"],
                          paired["delta_accuracy_ci95_high"], digits=3, signed=True,
                          minus="−")
    facts = f"Δ accuracy {delta}, McNemar p = {paired['mcnemar_p']:.2g}"
    verdict = paired["verdict"]
    if verdict == "better":
        return f"better than {what}{took}: {facts}"
    if verdict == "worse":
        return f"worse than {what}{took}: {facts}"
    return f"no detectable difference from {what}{took}: {facts}"


def tied_strongest(name: str, accuracies: Mapping[str, float | None]) -> list[str]:
    """The supervised references (registry order) whose accuracy on the set equals that
    of ``name``, the strongest: ``[name]`` alone when none ties with it. ``accuracies``:
    ``{reference: accuracy}``, None or absent where a reference has none. Accuracies are
    compared exactly: on the same rows, a tie is the same count of correct rows."""
    best = accuracies.get(name)
    tied = [other for other in NAMES if other != name and best is not None
            and accuracies.get(other) == best]
    return [n for n in NAMES if n == name or n in tied] if tied else [name]


def strongest_verdict(names: Sequence[str], references: Mapping[str, Mapping[str, Any]],
                      seconds: Mapping[str, float] | None = None) -> str:
    """:func:`supervised_verdict` against the strongest supervised reference, ``names``
    (:func:`tied_strongest`). Two or more tie on accuracy: none is named the strongest;
    the sentence says they tie, with their accuracy, then the verdict against each, e.g.
    ``tied strongest: TF-IDF + LR and encoder + LR (accuracy 0.7000 each): no detectable
    difference from ...; better than ...``. ``seconds``: ``{reference: wall seconds}``."""
    said = [supervised_verdict(n, references[n], (seconds or {}).get(n)) for n in names]
    if len(names) < 2:
        return said[0]
    which = [BY_NAME[n].short if n in BY_NAME else n for n in names]
    return (f"tied strongest: {', '.join(which[:-1])} and {which[-1]} (accuracy "
            f"{references[names[0]]['accuracy']:.4f} each): " + "; ".join(said))


def run_warnings(metrics: Mapping[str, Any]) -> list[str]:
    """What a reviewer must not miss in one run's ``metrics/eval.json``, as sentences:
    the values of :func:`warnings_by_kind`, in its order."""
    return list(warnings_by_kind(metrics).values())


def class_warnings(matrix: Mapping[str, Mapping[str, int]], rows_name: str = "test rows"
                   ) -> dict[str, str]:
    """The kinds of :func:`warnings_by_kind` that a confusion matrix (``{actual: {predicted:
    rows}}``) tells, in its order: ``never_predicted:<classes>`` and ``collapsed:<class>``
    (a degenerate classifier: one class for nearly every row). ``rows_name`` names the
    rows in the first (``test rows``; the queue's ``--relabel``: ``training rows``)."""
    found: dict[str, str] = {}
    labels = list(matrix)
    rows = sum(sum(row.values()) for row in matrix.values())
    if rows:
        predicted = {label: sum(row.get(label, 0) for row in matrix.values()) for label in labels}
        actual = {label: sum(matrix[label].values()) for label in labels}
        never = [label for label in labels if predicted[label] == 0 and actual[label] > 0]
        if never:
            found[f"never_predicted:{','.join(never)}"] = ("never predicted: " + ", ".join(
                f"`{label}` ({actual[label]} of {rows} {rows_name} are {label})"
                for label in never))
        top = max(labels, key=lambda label: predicted[label])
        share, true_share = predicted[top] / rows, actual[top] / rows
        if share >= COLLAPSE_SHARE and share - true_share >= COLLAPSE_EXCESS:
            found[f"collapsed:{top}"] = (
                f"`{top}` is predicted for {predicted[top]} of {rows} rows ({share:.0%}), "
                f"though {true_share:.0%} of them are {top}")
    return found


def warnings_by_kind(metrics: Mapping[str, Any]) -> dict[str, str]:
    """What a reviewer must not miss in one run's ``metrics/eval.json``: ``{kind:
    sentence}``, at most one sentence of each kind, in this order:

    - ``below_majority``: accuracy below the majority-class baseline;
    - ``never_predicted:<classes>``: these classes never predicted;
    - ``collapsed:<class>``: that class predicted for nearly all rows (at least 90% of
      them, and 10 points more than its share of the actual rows);
    - ``weak_reference:<reference>:<its accuracy>``: a relative error reduction against
      a reference that is itself below the majority-class baseline (it flatters the
      adapter);
    - ``not_better:<reference>``: the adapter not detectably better than the strongest
      supervised reference (``strongest_supervised``), a classifier that cost a small
      fraction of its training (:func:`supervised_verdict`);
    - ``weak_supervised:<reference>:<its accuracy>``: that strongest supervised reference
      itself below the majority-class baseline (an extra test set of another language or
      other classes than its training rows), so that a verdict against it says little;
    - ``no_temperature``: no temperature fitted (``calibration.temperature`` null, e.g.
      ``split.validation_size: 0``): the probabilities are the raw softmax, and the
      scores after temperature scaling are missing.

    Two runs with the same kind share the same fact (the same classes, the same
    reference), so that ``lorasent compare`` says it once, as true of both.
    Tolerates files of older revisions that lack some keys (then that check is skipped).
    """
    found: dict[str, str] = {}
    baseline = metrics.get("baseline") or {}
    acc, majority = metrics.get("accuracy"), baseline.get("majority_accuracy")
    if acc is not None and majority is not None and acc < majority:
        found["below_majority"] = (
            f"accuracy {acc:.3f} is below the majority-class baseline {majority:.3f} (always "
            f"`{baseline.get('majority_class')}`): the adapter does worse than predicting one "
            "class")
    found.update(class_warnings(metrics.get("confusion_matrix") or {}))
    reference, ref_acc = metrics.get("reference"), metrics.get("reference_accuracy")
    if reference != "majority" and ref_acc is not None and majority is not None \
            and ref_acc < majority:
        against = relative_error_reduction(acc, majority)[0] if acc is not None else None
        found[f"weak_reference:{reference}:{ref_acc:.3f}"] = (
            f"the relative error reduction is measured against the {reference} baseline "
            f"({ref_acc:.3f}), which is itself below the majority-class baseline "
            f"({majority:.3f})" + (f"; against the majority class it is {against:.3f}"
                                   if against is not None else ""))
    strongest = metrics.get("strongest_supervised")
    cheap = (metrics.get("references") or {}).get(strongest) if strongest else None
    paired = cheap.get("paired") if cheap else None
    if isinstance(strongest, str) and cheap and paired and paired["verdict"] != "better":
        found[f"not_better:{strongest}"] = NOT_BETTER + supervised_verdict(strongest, cheap)
    if isinstance(strongest, str) and cheap and cheap.get("accuracy") is not None \
            and majority is not None and cheap["accuracy"] < majority:
        described = BY_NAME[strongest].described if strongest in BY_NAME else strongest
        found[f"weak_supervised:{strongest}:{cheap['accuracy']:.3f}"] = (
            f"the strongest reference trained on the same rows, {described}, scores "
            f"{cheap['accuracy']:.3f} here, below the majority-class baseline "
            f"({majority:.3f}): the adapter's verdict against it says little about these "
            "rows")
    calibration = metrics.get("calibration")
    if isinstance(calibration, Mapping) and calibration.get("temperature") is None:
        found["no_temperature"] = f"no temperature: {calibration.get('temperature_note')}"
    return found
