"""What differs between REV's outputs and this run's (``lorasent reproduce``): each
file compared by its kind (JSON leaf by leaf, a TSV cell by cell, safetensors weights),
and each test set's predictions row by row (:func:`judge_set`), against the tolerances
of the tiers (:data:`TOLERANCE`, :func:`metric_tolerance`; lorasent.review.tiers).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from lorasent.calibration import ECE_BINS
from lorasent.metrics import Predictions
from lorasent.paths import BASELINE_REFERENCES, EVAL_PREDICTIONS
from lorasent.review.markup import visible
from lorasent.statistics import PairedComparison, paired_comparison

# The default tolerance of a probability (absolute; --tolerance), issue 50's: 25 times the
# largest deviation measured between two kernels of one CPU (ATEN_CPU_CAPABILITY capped:
# 4e-6 on the default run) or two batch sizes (2.7e-6), a quarter of what a retraining on
# another CPU family moved (4e-4) (docs/reproducibility.md).
TOLERANCE = 1e-4
# A metric computed from probabilities (NLL, Brier score, ECE, temperature, training
# loss) may move by this much relative to its size, or by the tolerance, whichever is
# more: a mean of logs moves by more than the probabilities it is made of.
METRIC_RTOL = 1e-3
# Keys (any part of a JSON path) of values that follow from the predicted labels alone:
# equal where no label differs, else judged through the predictions.
LABEL_KEYS = ("accuracy", "f1", "precision", "recall", "support", "confusion",
              "relative_error_reduction", "count", "rows", "predicted", "actual", "majority")
# Keys (any part of a JSON path) and files of values that follow from thresholds on the
# probabilities (the ECE's confidence bins, the label audit's flags): within their
# tolerance, unless a row sits on a threshold (its confidence within the tolerance of a
# bin's edge, a flag that differs), where the predictions judge them.
THRESHOLD_KEYS = ("ece", "label_issues")
THRESHOLD_FILES = ("reliability.json",)


def metric_tolerance(value: float, tolerance: float) -> float:
    """How far a metric computed from probabilities may move: ``max(tolerance,
    METRIC_RTOL * |value|)``."""
    return max(tolerance, METRIC_RTOL * abs(value))


@dataclass
class FileDiff:
    """One output file that differs from REV's: its largest deviation in words, and
    whether that deviation is within the tiers' tolerances (``within``)."""

    path: str
    deviation: str
    within: bool


@dataclass
class SetResult:
    """One test set's predictions, REV's against these."""

    name: str
    rows: int
    flipped: list[str]       # ids whose predicted label differs
    near_ties: list[str]     # of those, the ones whose top-two margin is under the tolerance
    max_deviation: float     # largest |Δ probability|
    paired: PairedComparison | None
    problem: str | None = None  # why the rows could not be paired
    on_edge: int = 0  # rows whose confidence is within the tolerance of an ECE bin's edge

    def within(self, tolerance: float) -> bool:
        return (self.problem is None and len(self.flipped) == len(self.near_ties)
                and self.max_deviation <= tolerance)


def leaves(value: Any, at: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, f"{at}.{key}" if at else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from leaves(item, f"{at}[{i}]")
    else:
        yield at, value


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _label_key(key: str) -> bool:
    return any(word in key.lower() for word in LABEL_KEYS)


def json_diff(name: str, old: bytes, new: bytes, tolerance: float, labels_moved: bool,
              thresholds_moved: bool = False) -> FileDiff:
    """A JSON output: its numbers compared leaf by leaf. A value that follows from
    thresholds on the probabilities (:data:`THRESHOLD_KEYS`, :data:`THRESHOLD_FILES`) is
    within :func:`metric_tolerance` unless a row sat on a threshold
    (``thresholds_moved``); one that follows from the labels (:data:`LABEL_KEYS`) must
    be equal unless some predicted label moved (``labels_moved``); any other number
    within :func:`metric_tolerance`. Where rows moved, the predictions judge them. A text
    leaf that differs is said, and judged with the numbers it quotes."""
    try:
        a, b = json.loads(old), json.loads(new)
    except ValueError:
        return FileDiff(name, "not JSON on one side", False)
    left, right = dict(leaves(a)), dict(leaves(b))
    if set(left) != set(right):
        keys = sorted(set(left) ^ set(right))
        return FileDiff(name, f"other keys: {', '.join(keys[:3])}", False)
    worst: tuple[float, str, float, float] | None = None  # (ratio, key, gap, allowed)
    within, texts = True, []
    for key, x in left.items():
        y = right[key]
        if x == y:
            continue
        if not (is_number(x) and is_number(y)):
            texts.append(key)
            continue
        gap = abs(float(x) - float(y))
        threshold = name.endswith(THRESHOLD_FILES) or any(
            word in key.lower() for word in THRESHOLD_KEYS)
        if threshold:
            allowed = math.inf if thresholds_moved else metric_tolerance(float(x), tolerance)
        else:
            allowed = math.inf if _label_key(key) and labels_moved else (
                0.0 if _label_key(key) else metric_tolerance(float(x), tolerance))
        within &= gap <= allowed
        ratio = gap / allowed if allowed else math.inf
        if worst is None or ratio > worst[0] or (ratio == worst[0] and gap > worst[2]):
            worst = (ratio, key, gap, allowed)
    if worst is not None:
        _, key, gap, allowed = worst
        said = (f"largest deviation {gap:.3g} at {key}" + (
            " (follows from rows that moved)" if math.isinf(allowed)
            else f" (allowed {allowed:.3g})"))
    else:
        said = f"text differs at {', '.join(texts[:3])}"
    return FileDiff(name, said, within)


def table_diff(name: str, old: bytes, new: bytes, tolerance: float) -> FileDiff:
    """A TSV of numbers (dvclive's training history): cell by cell, within
    :func:`metric_tolerance`."""
    rows_a = list(csv.reader(io.StringIO(old.decode()), delimiter="\t"))
    rows_b = list(csv.reader(io.StringIO(new.decode()), delimiter="\t"))
    if len(rows_a) != len(rows_b) or any(len(r) != len(s) for r, s in zip(rows_a, rows_b,
                                                                          strict=True)):
        return FileDiff(name, f"{len(rows_a)} against {len(rows_b)} lines", False)
    worst, within = 0.0, True
    for row_a, row_b in zip(rows_a, rows_b, strict=True):
        for x, y in zip(row_a, row_b, strict=True):
            if x == y:
                continue
            try:
                gap = abs(float(x) - float(y))
            except ValueError:
                return FileDiff(name, f"text differs: {x[:20]!r} against {y[:20]!r}", False)
            worst = max(worst, gap)
            within &= gap <= metric_tolerance(float(x), tolerance)
    return FileDiff(name, f"largest deviation {worst:.3g}", within)


def weights_diff(name: str, old: bytes, new: bytes) -> FileDiff:
    """Safetensors weights (the adapter): their largest |Δ|, judged by what they predict."""
    from safetensors.numpy import load

    a, b = load(old), load(new)
    if set(a) != set(b) or any(a[k].shape != b[k].shape for k in a):
        return FileDiff(name, "other tensors or shapes", False)
    worst = max((float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))))
                 for k in a if a[k].size), default=0.0)
    return FileDiff(name, f"weights up to {worst:.3g} apart (judged by their predictions)",
                    True)


def margins(probabilities: np.ndarray) -> np.ndarray:
    """The top-two probability margin of each row: float (N,)."""
    top = np.sort(probabilities, axis=1)
    return top[:, -1] - top[:, -2]


SHOWN_UNPAIRED = 5  # rows or classes named, at most, when the two sides cannot be paired


def _some(values: list[str]) -> str:
    more = f", ... ({len(values) - SHOWN_UNPAIRED} more)" if len(values) > SHOWN_UNPAIRED else ""
    return ", ".join(map(visible, values[:SHOWN_UNPAIRED])) + more


def unpaired(old: Predictions, new: Predictions) -> str | None:
    """Why REV's predictions ``old`` and these ``new`` cannot be paired row by row: the
    classes only one side has (a class renamed is one of each), or the same classes in
    another order, and the row ids only one side has, named (at most
    :data:`SHOWN_UNPAIRED` of each); None when they hold the same rows and classes."""
    said = []
    if old.labels != new.labels:
        gone = [label for label in old.labels if label not in new.labels]
        added = [label for label in new.labels if label not in old.labels]
        said.append(f"REV's class{'es' * (len(gone) != 1)} {_some(gone)} not here, "
                    f"{_some(added)} instead" if gone and added else
                    f"REV's class{'es' * (len(gone) != 1)} {_some(gone)} not here" if gone else
                    f"class{'es' * (len(added) != 1)} {_some(added)} that REV's lacks"
                    if added else f"the classes in another order ({_some(list(new.labels))}; "
                    f"REV's {_some(list(old.labels))})")
    here, there = set(new.ids), set(old.ids)
    missing = [i for i in old.ids if i not in here]
    extra = [i for i in new.ids if i not in there]
    if missing:
        said.append(f"{len(missing)} of REV's {len(old.ids)} rows not here: {_some(missing)}")
    if extra:
        said.append(f"{len(extra)} row{'s' * (len(extra) != 1)} REV's lacks: {_some(extra)}")
    if not said and sorted(old.ids) != sorted(new.ids):
        said.append("a row id given another number of times than in REV's")
    return "; ".join(said) if said else None


def judge_set(name: str, old: Predictions, new: Predictions, tolerance: float) -> SetResult:
    """REV's predictions of one test set against these, row by row by id; not paired
    (:func:`unpaired`, its words the problem) when their rows or classes differ."""
    if (why := unpaired(old, new)) is not None:
        return SetResult(name, len(old.ids), [], [], math.inf, None, f"{why}: not paired")
    at = {row_id: i for i, row_id in enumerate(new.ids)}
    order = [at[row_id] for row_id in old.ids]
    predicted, probs = new.predicted[order], new.probabilities[order]
    if (new.actual[order] != old.actual).any():
        return SetResult(name, len(old.ids), [], [], math.inf, None,
                         "the same rows carry other gold labels: not paired")
    flipped = np.flatnonzero(predicted != old.predicted)
    tie = np.minimum(margins(old.probabilities), margins(probs)) < tolerance
    edges = np.linspace(0.0, 1.0, ECE_BINS + 1)
    on_edge = sum(int(np.sum(np.min(np.abs(p.max(axis=1)[:, None] - edges), axis=1)
                             < tolerance)) for p in (old.probabilities, probs))
    return SetResult(
        name, len(old.ids), [old.ids[i] for i in flipped],
        [old.ids[i] for i in flipped if tie[i]],
        float(np.max(np.abs(probs - old.probabilities))),
        paired_comparison(old.actual, old.predicted, predicted, old.labels), on_edge=on_edge)


def is_predictions_file(path: str) -> bool:
    """Whether an output is a predictions file (``lorasent.metrics.predictions_csv``'s
    format): ``*predictions.csv`` (evaluate's, the extra test sets', the baselines'), or a
    supervised reference's ``metrics/references/<reference>/<test set>.csv``."""
    return path.endswith("predictions.csv") or (
        path.startswith(f"{BASELINE_REFERENCES.as_posix()}/") and path.endswith(".csv"))


def predictions_files(files: dict[str, tuple[bytes, bytes]]) -> list[str]:
    """The predictions files among ``files`` (:func:`is_predictions_file`): the test
    split's first (the verdict's own paired test), then the extra test sets', the
    baselines' and the references'."""
    main = EVAL_PREDICTIONS.as_posix()
    others = sorted(p for p in files if p != main and is_predictions_file(p))
    return [p for p in [main, *others] if p in files]
