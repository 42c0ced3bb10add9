"""What a file read for the reproduction's verdict claims to be, checked
(:func:`damage`): probabilities in [0, 1] whose rows sum to 1, each row's label its most
probable class, metrics that follow from the predictions beside them.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from lorasent.metrics import (
    NoRowIdsError,
    Predictions,
    PredictionsFileError,
    classification_metrics,
    read_predictions,
)
from lorasent.paths import (
    BASELINE_CALIBRATED_PREDICTIONS,
    BASELINE_CONFUSION,
    BASELINE_METRICS,
    BASELINE_PREDICTIONS,
    BASELINE_REFERENCES,
    EVAL_CONFUSION,
    EVAL_METRICS,
    EVAL_PREDICTIONS,
    EVAL_TEST_SETS,
)
from lorasent.review.diffs import is_number, leaves, predictions_files
from lorasent.review.markup import visible

# A predictions file writes each probability to 6 decimals (lorasent.metrics.predictions_csv):
# a row's sum may be off 1 by half a unit of the last place per class, beside the tolerance.
ROUNDING = 5e-7
# The keys of a metrics record that follow from the predictions file beside it
# (lorasent.metrics.classification_metrics), and how close a recomputed float must be: the
# same computation on the same labels gives the same float, a JSON round trip keeps it.
RECOMPUTED = ("accuracy", "macro_f1", "per_class", "confusion_matrix")
RECOMPUTED_RTOL = 1e-9


def predictions_damage(p: Predictions, tolerance: float) -> str | None:
    """Why a predictions file read back (:func:`lorasent.metrics.read_predictions`, which
    checks each probability is a number in [0, 1]) is not what it claims, in words that
    follow its name; None when it is. Each row's probabilities sum to 1 within
    ``tolerance`` (and the file's :data:`ROUNDING` per class), and its predicted label is
    its most probable class (within the same)."""
    allowed = tolerance + ROUNDING * len(p.labels)
    sums = p.probabilities.sum(axis=1)
    off = np.flatnonzero(np.abs(sums - 1.0) > allowed)
    if off.size:
        i = int(off[0])
        return (f"the probabilities of {off.size} of its {len(p.ids)} rows do not sum to 1 "
                f"(row {visible(p.ids[i])}: {sums[i]:.6g}; allowed ±{allowed:.2g}), so they are "
                "no probabilities")
    chosen = p.probabilities[np.arange(len(p.ids)), p.predicted]
    wrong = np.flatnonzero(chosen < p.probabilities.max(axis=1) - allowed)
    if wrong.size:
        i = int(wrong[0])
        top = int(np.argmax(p.probabilities[i]))
        said = visible(p.labels[p.predicted[i]])
        return (f"{wrong.size} of its {len(p.ids)} rows predict a label that is not their most "
                f"probable class (row {visible(p.ids[i])}: predicted {said} at {chosen[i]:.6g}, "
                f"{visible(p.labels[top])} at {p.probabilities[i, top]:.6g})")
    return None


def claims(name: str, data: Any) -> list[tuple[str, Any, str]]:
    """The records of the metrics file ``name`` (its parsed JSON ``data``) that follow from
    a predictions file: ``(where in the file, the record, the predictions file)``.

    - ``metrics/eval.json``: its top level from ``metrics/predictions.csv``; each
      ``test_sets.<set>`` from ``metrics/test_sets/<set>/predictions.csv``; each
      ``references.<ref>`` (and ``test_sets.<set>.references.<ref>``) from the
      reference's predictions (the zero-shot baselines' files, else
      ``metrics/references/<ref>/<test or set>.csv``);
    - ``metrics/baseline.json``: ``zero_shot``, ``zero_shot_calibrated`` and each
      ``references.<ref>`` likewise;
    - ``metrics/confusion.json``, ``metrics/baseline_confusion.json`` and
      ``metrics/test_sets/<set>/confusion.json``: the records of a confusion plot.
    """
    def reference(ref: str, set_name: str) -> str:
        if set_name == "test" and ref == "zero_shot":
            return BASELINE_PREDICTIONS.as_posix()
        if set_name == "test" and ref == "zero_shot_calibrated":
            return BASELINE_CALIBRATED_PREDICTIONS.as_posix()
        return f"{BASELINE_REFERENCES.as_posix()}/{ref}/{set_name}.csv"

    def references(at: str, record: Any, set_name: str) -> list[tuple[str, Any, str]]:
        refs = record.get("references") if isinstance(record, dict) else None
        return [(f"{at}references.{ref}", value, reference(str(ref), set_name))
                for ref, value in (refs.items() if isinstance(refs, dict) else ())]

    if name == EVAL_METRICS.as_posix() and isinstance(data, dict):
        found = [("", data, EVAL_PREDICTIONS.as_posix()), *references("", data, "test")]
        sets = data.get("test_sets")
        for set_name, record in (sets.items() if isinstance(sets, dict) else ()):
            found.append((f"test_sets.{set_name}", record,
                          f"{EVAL_TEST_SETS.as_posix()}/{set_name}/predictions.csv"))
            found += references(f"test_sets.{set_name}.", record, str(set_name))
        return found
    if name == BASELINE_METRICS.as_posix() and isinstance(data, dict):
        return [(key, data.get(key), reference(key, "test"))
                for key in ("zero_shot", "zero_shot_calibrated")] + references("", data, "test")
    if name == EVAL_CONFUSION.as_posix():
        return [("", data, EVAL_PREDICTIONS.as_posix())]
    if name == BASELINE_CONFUSION.as_posix():
        return [("", data, BASELINE_PREDICTIONS.as_posix())]
    folder = f"{EVAL_TEST_SETS.as_posix()}/"
    if name.startswith(folder) and name.endswith("/confusion.json"):
        return [("", data, name.removesuffix("confusion.json") + "predictions.csv")]
    return []


def claimed_files() -> tuple[str, ...]:
    """The metrics files :func:`claims` reads (test sets' confusion files by their end)."""
    return (EVAL_METRICS.as_posix(), BASELINE_METRICS.as_posix(), EVAL_CONFUSION.as_posix(),
            BASELINE_CONFUSION.as_posix())


def _is_claimed(name: str) -> bool:
    return name in claimed_files() or (name.startswith(f"{EVAL_TEST_SETS.as_posix()}/")
                                       and name.endswith("/confusion.json"))


def _shown(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else visible(str(value))


def record_damage(record: Any, p: Predictions, beside: str) -> str | None:
    """Why a metrics record (a dict of :func:`lorasent.metrics.classification_metrics`'s
    keys, or the list of a confusion plot's records) does not follow from the predictions
    ``p`` of the file ``beside``, in words that name the key; None when it does (or holds
    none of those keys)."""
    computed = classification_metrics(p.actual, p.predicted, p.labels)
    if isinstance(record, list):  # a confusion plot: {actual, predicted, count} per cell
        cells: dict[tuple[str, str], Any] = {}
        for row in record:
            if not isinstance(row, dict):
                return "a record that is not an object"
            cells[(str(row.get("actual")), str(row.get("predicted")))] = row.get("count")
        for (actual, predicted), count in cells.items():
            want = computed["confusion_matrix"].get(actual, {}).get(predicted)
            if want is None:
                return (f"the cell {visible(actual)} → {visible(predicted)} names a class {beside} "
                        "does not have")
            if count != want:
                return (f"the cell {visible(actual)} → {visible(predicted)} counts {_shown(count)} "
                        f"rows where {beside} beside it gives {want}")
        return None
    if not isinstance(record, dict):
        return None
    expected: dict[str, Any] = {}
    for key in RECOMPUTED:
        if key in record:
            expected.update({k: v for k, v in leaves(computed[key], key)})
    if "test_rows" in record:
        expected["test_rows"] = len(p.ids)
    if "labels" in record:
        expected["labels"] = p.labels
    # the rows and the classes first: a row missing or a class renamed is named as such,
    # not by the first metric it moves
    found = {key: record[key] for key in ("test_rows", "labels") if key in record}
    found.update({k: v for key in RECOMPUTED if key in record
                  for k, v in leaves(record[key], key)})
    for key, value in found.items():
        want = expected.get(key)
        same = key in expected and (
            math.isclose(float(value), float(want), rel_tol=RECOMPUTED_RTOL, abs_tol=1e-12)
            if is_number(value) and is_number(want) and want is not None else value == want)
        if not same:
            return (f"{key} {_shown(value)} does not follow from {beside} beside it"
                    + (f" ({_shown(want)})" if key in expected else " (no such class there)"))
    missing = sorted(set(expected) - set(found))
    if missing and any(k in record for k in RECOMPUTED):
        return f"{missing[0]} is missing, which {beside} beside it gives"
    return None


def damage(pairs: dict[str, tuple[bytes, bytes]], beside: dict[str, bytes], rev: str,
           tolerance: float) -> list[str]:
    """Each file read for the verdict that is not what it claims, one phrase each naming
    its side (``REV's`` or ``this run's``) and path: a predictions file that does not
    parse (:func:`lorasent.metrics.read_predictions`: a probability outside [0, 1] among
    others; a file of before row ids aside) or fails :func:`predictions_damage`, and a
    metrics record that does not follow from the predictions beside it
    (:func:`claims`, :func:`record_damage`). Read: the predictions files that differ, and
    each metrics file's records where the record's file or its predictions differ, on
    both sides (``beside``: files the same on both)."""
    sides = (f"{visible(rev)}'s", "this run's")

    def content(name: str, side: int) -> bytes | None:
        if name in pairs:
            return pairs[name][side] or None
        return beside.get(name)

    read: dict[tuple[str, int], Predictions | str | None] = {}

    def predictions(name: str, side: int) -> Predictions | str | None:
        if (name, side) not in read:
            data = content(name, side)
            try:
                read[(name, side)] = None if data is None else read_predictions(
                    data.decode("utf-8", errors="replace"), name)
            except NoRowIdsError:  # written before row ids: what it is, only older
                read[(name, side)] = None
            except PredictionsFileError as err:
                read[(name, side)] = str(err).removeprefix(f"{name}: ").removeprefix(name)
        return read[(name, side)]

    found: list[str] = []
    wanted = list(predictions_files(pairs))
    for name in sorted(set(pairs) | set(beside)):
        if not _is_claimed(name):
            continue
        for side in (0, 1):
            data = content(name, side)
            if data is None:
                continue
            try:
                parsed = json.loads(data)
            except ValueError:
                if name in pairs:
                    found.append(f"{sides[side]} {visible(name)} is not JSON")
                continue
            for at, record, source in claims(name, parsed):
                if name not in pairs and source not in pairs:
                    continue  # neither moved: compared byte for byte, equal
                if source not in wanted:
                    wanted.append(source)
                p = predictions(source, side)
                if not isinstance(p, Predictions):
                    continue  # absent, or damaged (said below)
                why = record_damage(record, p, visible(source))
                if why:
                    where = f"{visible(name)}" + (f" at {visible(at)}" if at else "")
                    found.append(f"{sides[side]} {where}: {why}")
    files = []
    for name in wanted:
        for side in (0, 1):
            p = predictions(name, side)
            why = p if isinstance(p, str) else (
                predictions_damage(p, tolerance) if p is not None else None)
            if why:
                files.append(f"{sides[side]} {visible(name)}: {why.lstrip(' :')}")
    return list(dict.fromkeys(files + found))
