"""``lorasent reproduce [REV]``: did this machine reproduce REV's run, and how closely?

Usage: ``lorasent reproduce`` (or ``make reproduce``) reruns HEAD's pipeline in a
temporary clone and judges what it wrote against what HEAD committed;
``--workspace`` judges the outputs a run already left here (``make run`` ends so);
``--no-train`` re-scores the committed adapter only (the evaluate stage).

PyTorch promises bitwise reproducibility only "on one specific platform and PyTorch
release" (https://pytorch.org/docs/stable/notes/randomness.html); another CPU family, a
GPU or bf16 rounds sums another way. So "reproduced" has tiers, judged in this order
(:data:`TIERS`; docs/reproducibility.md):

- **identical**: every output of the pipeline byte for byte (its provenance records
  aside: they describe the machine, shown side by side below the verdict);
- **equivalent**: the same inputs, the same predicted labels on every test row but rows
  whose top-two probability margin is under the tolerance (a tie either way), every
  probability within the tolerance (:data:`TOLERANCE`, ``--tolerance``), every metric
  within its own (:func:`metric_tolerance`), the adapter's weights judged by what they
  predict;
- **consistent**: the predictions differ (a retraining on other hardware), but on the
  same test rows the paired test (paired bootstrap of Δ accuracy and McNemar's exact
  test, ``lorasent.statistics.paired_comparison``) finds no detectable difference from
  REV, on every test set; for seed groups, ``--seed-groups`` judges REV's group against
  this machine's by Welch's t-test, as MLPerf judges a new platform's runs against
  reference runs over seeds;
- **different**: anything else, with the paired verdict and the files.

Before any tier, each file read for the verdict is checked as what it claims to be
(:func:`damage`): probabilities in [0, 1] whose rows sum to 1 within the tolerance, each
row's label its most probable class, metrics that follow from the predictions beside
them; a file that is not makes the verdict "different", its first line naming the file.

The verdict is one line first (naming each test set that moved); then each file that
differs, with its largest deviation;
then the two machines side by side (:data:`MACHINE_ROWS`). Exit status 0 for identical,
equivalent and consistent, 1 for different.

REV is run in a clone in the temp folder (``git clone``, ``git checkout --detach``, the
clone's DVC cache this repo's: nothing is written to the workspace; the cache gains the
objects the run makes). ``dvc repro --force --no-run-cache`` runs every stage (with
``--no-train``: ``dvc checkout`` of REV's outputs, ``dvc pull`` where the cache lacks
them and a remote is set, then the evaluate stage alone; without REV's adapter it
retrains, after saying how long that took here). Ctrl-C or SIGTERM stops DVC's process
group and removes the clone.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lorasent.addresses import redact
from lorasent.artifacts import machine_facts, machine_path, with_machine_facts
from lorasent.calibration import ECE_BINS
from lorasent.errors import LorasentError
from lorasent.metrics import (
    NoRowIdsError,
    Predictions,
    PredictionsFileError,
    classification_metrics,
    read_predictions,
)
from lorasent.paths import (
    ADAPTER_DIR,
    BASE_MODEL_DIR,
    BASELINE_CALIBRATED_PREDICTIONS,
    BASELINE_CONFUSION,
    BASELINE_METRICS,
    BASELINE_PREDICTIONS,
    BASELINE_REFERENCES,
    EVAL_CONFUSION,
    EVAL_METRICS,
    EVAL_PREDICTIONS,
    EVAL_TEST_SETS,
    PROVENANCE_DIR,
    RAW_DIR,
    SPLIT_DIR,
)
from lorasent.programs import environment, program
from lorasent.review.collect import check_revisions, read_at, read_lock, resolve_commits, run_dvc
from lorasent.review.markup import visible
from lorasent.review.verdict import delta_text, p_text, paired_verdict
from lorasent.statistics import PairedComparison, group_comparison, paired_comparison

Progress = Callable[[str], None]

TIERS = ("identical", "equivalent", "consistent", "different")
# The default tolerance of a probability (absolute; --tolerance), issue 50's: 25 times the
# largest deviation measured between two kernels of one CPU (ATEN_CPU_CAPABILITY capped:
# 4e-6 on the default run) or two batch sizes (2.7e-6), a quarter of what a retraining on
# another CPU family moved (4e-4) (docs/reproducibility.md).
TOLERANCE = 1e-4
# A metric computed from probabilities (NLL, Brier score, ECE, temperature, training
# loss) may move by this much relative to its size, or by the tolerance, whichever is
# more: a mean of logs moves by more than the probabilities it is made of.
METRIC_RTOL = 1e-3
# The inputs of the stages that score: when one differs, nothing after it is paired.
INPUTS = (RAW_DIR, BASE_MODEL_DIR, SPLIT_DIR)
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
# A provenance record describes the machine (MACHINE_ROWS), not a result.
DESCRIPTIONS = (PROVENANCE_DIR,)
SHOWN = 10  # rows listed by id at most


def metric_tolerance(value: float, tolerance: float) -> float:
    """How far a metric computed from probabilities may move: ``max(tolerance,
    METRIC_RTOL * |value|)``."""
    return max(tolerance, METRIC_RTOL * abs(value))


# ------------------------------------------------------------------ what differs


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


@dataclass
class Verdict:
    """The judgement of this machine's outputs against REV's."""

    tier: str
    rev: str
    commit: str
    line: str
    files: list[FileDiff] = field(default_factory=list)
    sets: list[SetResult] = field(default_factory=list)
    machines: list[tuple[str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.tier != "different"

    def text(self) -> str:
        """The verdict line, the files that differ, the machines side by side."""
        lines = [f"reproduce: {self.tier}: {self.line}", *self.notes]
        if self.files:
            lines.append(f"files that differ from {self.rev} ({len(self.files)}):")
            lines += [f"  {'  ' if d.within else '✗ '}{visible(d.path)}: {d.deviation}"
                      for d in self.files]
        if self.machines:
            width = max(len(name) for name, _, _ in self.machines)
            # REV's column as wide as its longest value (CPU flags run long), 2 spaces after
            column = max(28, *(len(a) + 2 for _, a, _ in self.machines))
            lines.append(f"  {'':{width}}  {self.rev[:24]:<{column}}this run")
            lines += [f"  {name:{width}}  {a:<{column}}{b}{'' if a == b else '   ≠'}"
                      for name, a, b in self.machines]
        return "\n".join(lines)


def outputs(lock: dict[str, Any]) -> dict[str, str]:
    """``{path: md5}`` of every output in a dvc.lock (a folder's md5 ends in ``.dir``)."""
    return {out["path"]: str(out.get("md5", "")) for stage in (lock.get("stages") or {}).values()
            for out in stage.get("outs") or []}


def _under(path: str, folders: Sequence[Path]) -> bool:
    return any(path == f.as_posix() or path.startswith(f"{f.as_posix()}/") for f in folders)


class Sides:
    """REV's and this checkout's files of one output path: REV's from git (an output git
    tracks) or from the DVC cache, these from disk."""

    def __init__(self, repo: Path, commit: str) -> None:
        self.repo, self.commit = repo, commit
        self._cache: Path | None | bool = False  # not asked yet

    def _git(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([program("git"), *args], cwd=self.repo, capture_output=True)

    def tracked(self, path: str) -> dict[str, bytes] | None:
        """REV's files under ``path`` (``{relative path: bytes}``) when git tracks them."""
        listed = self._git("ls-tree", "-r", "--name-only", self.commit, "--", path)
        names = listed.stdout.decode().splitlines() if listed.returncode == 0 else []
        return {name: self._git("show", f"{self.commit}:{name}").stdout
                for name in names} or None

    def cached(self, path: str, md5: str) -> dict[str, bytes] | None:
        """REV's files of a DVC-cached output from the cache (None: not there)."""
        if self._cache is False:
            found = run_dvc(self.repo, "cache", "dir", as_json=False,
                            command="reproduce").strip()
            self._cache = Path(found) if found else None
        cache = self._cache if isinstance(self._cache, Path) else None
        if cache is None or not md5:
            return None

        def blob(digest: str) -> Path:
            return cache / "files" / "md5" / digest[:2] / digest[2:]

        if not blob(md5).is_file():
            return None
        if not md5.endswith(".dir"):
            return {path: blob(md5).read_bytes()}
        found_files = {}
        for entry in json.loads(blob(md5).read_text(encoding="utf-8")):
            if not blob(entry["md5"]).is_file():
                return None
            found_files[f"{path}/{entry['relpath']}"] = blob(entry["md5"]).read_bytes()
        return found_files

    def here_files(self, path: str) -> dict[str, bytes]:
        root = self.repo / path
        if root.is_file():
            return {path: root.read_bytes()}
        return {p.relative_to(self.repo).as_posix(): p.read_bytes()
                for p in sorted(root.rglob("*")) if p.is_file()} if root.is_dir() else {}


def _leaves(value: Any, at: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{at}.{key}" if at else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{at}[{i}]")
    else:
        yield at, value


def _number(value: Any) -> bool:
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
    left, right = dict(_leaves(a)), dict(_leaves(b))
    if set(left) != set(right):
        keys = sorted(set(left) ^ set(right))
        return FileDiff(name, f"other keys: {', '.join(keys[:3])}", False)
    worst: tuple[float, str, float, float] | None = None  # (ratio, key, gap, allowed)
    within, texts = True, []
    for key, x in left.items():
        y = right[key]
        if x == y:
            continue
        if not (_number(x) and _number(y)):
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


def judge_set(name: str, old: Predictions, new: Predictions, tolerance: float) -> SetResult:
    """REV's predictions of one test set against these, row by row by id."""
    if sorted(old.ids) != sorted(new.ids) or old.labels != new.labels:
        return SetResult(name, len(old.ids), [], [], math.inf, None,
                         "other rows or classes than REV's: not paired")
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


def _predictions_sets(files: dict[str, tuple[bytes, bytes]]) -> list[str]:
    """The predictions files among ``files``: the test split's first (the verdict's own
    paired test), then the extra test sets' and the baselines'."""
    main = EVAL_PREDICTIONS.as_posix()
    others = sorted(p for p in files if p != main and p.endswith("predictions.csv"))
    return [p for p in [main, *others] if p in files]


# ------------------------------------------------------------------ what a file claims

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
            expected.update({k: v for k, v in _leaves(computed[key], key)})
    if "test_rows" in record:
        expected["test_rows"] = len(p.ids)
    if "labels" in record:
        expected["labels"] = p.labels
    found = {k: v for key in RECOMPUTED if key in record for k, v in _leaves(record[key], key)}
    for key in ("test_rows", "labels"):
        if key in record:
            found[key] = record[key]
    for key, value in found.items():
        want = expected.get(key)
        same = key in expected and (
            math.isclose(float(value), float(want), rel_tol=RECOMPUTED_RTOL, abs_tol=1e-12)
            if _number(value) and _number(want) and want is not None else value == want)
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
    wanted = list(_predictions_sets(pairs))
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


# ------------------------------------------------------------------ the machines

MACHINE_ROWS: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = (
    ("device", lambda r: r["device"].get("device")),
    ("CPU", lambda r: r["device"].get("cpu")),
    ("torch CPU capability", lambda r: r["device"].get("kernels", {}).get(
        "torch_cpu_capability")),
    ("numpy SIMD", lambda r: r["device"].get("kernels", {}).get("numpy_simd")),
    ("kernel CPU flags", lambda r: ",".join(r["device"]["kernels"]["cpu_flags"] or [])
     if r["device"].get("kernels", {}).get("cpu_flags") is not None else None),
    ("kernel variables", lambda r: " ".join(
        f"{k}={v}" for k, v in r["device"]["kernels"]["variables"].items()) or "none"
     if "kernels" in r["device"] else None),
    ("torch threads", lambda r: r["device"].get("torch_threads")),
    ("processes", lambda r: r.get("processes")),
    ("precision", lambda r: r.get("compute_dtype") or r["params"]["base"].get("precision")),
    ("torch", lambda r: r["packages"].get("torch")),
    ("numpy", lambda r: r["packages"].get("numpy")),
    ("python", lambda r: r.get("python")),
    ("venv or container", lambda r: None if "container" not in r["device"] else (
        "container" if r["device"]["container"].get("in_container") else "venv")),
)


def machine_rows(old: dict[str, Any] | None, new: dict[str, Any] | None
                 ) -> list[tuple[str, str, str]]:
    """:data:`MACHINE_ROWS` of two provenance records (``not recorded`` where absent)."""
    def value(record: dict[str, Any] | None, get: Callable[[dict[str, Any]], Any]) -> str:
        try:
            found = get(record) if record else None
        except (KeyError, TypeError, AttributeError):
            found = None
        return "not recorded" if found is None else visible(str(found))

    return [(name, value(old, get), value(new, get)) for name, get in MACHINE_ROWS]


# ------------------------------------------------------------------ the judgement


def judge(repo: Path, rev: str, commit: str, tolerance: float = TOLERANCE,
          record_stage: str = "evaluate") -> Verdict:
    """This checkout's outputs against what ``commit`` (named ``rev``) committed.

    An output git tracks is compared by its bytes, REV's blob against the file here; one
    DVC caches by dvc.lock's md5 (REV's against this checkout's), its files read from the
    DVC cache where it holds REV's copy.

    Args:
        repo: the checkout whose outputs (its dvc.lock and files) are judged.
        rev, commit: REV as the user named it, and its commit.
        tolerance: how far a probability may move (absolute).
        record_stage: whose provenance record describes the machines (evaluate: the stage
            that scores last).
    """
    old_outs = outputs(read_lock(repo, commit))
    new_outs = outputs(read_lock(repo, "workspace"))
    sides = Sides(repo, commit)
    pairs: dict[str, tuple[bytes, bytes]] = {}
    beside: dict[str, bytes] = {}  # files the same on both sides, read to check others by
    changed, missing = [], []
    for path in sorted(set(old_outs) | set(new_outs)):
        if _under(path, DESCRIPTIONS):
            continue
        tracked = sides.tracked(path)
        if tracked is None and old_outs.get(path) == new_outs.get(path):
            continue
        old = tracked if tracked is not None else sides.cached(path, old_outs.get(path, ""))
        new = sides.here_files(path)
        if old is None:
            changed.append(path)
            missing.append(path)
            continue
        differing = {name: (old.get(name, b""), new.get(name, b""))
                     for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)}
        beside.update({name: data for name, data in old.items() if new.get(name) == data})
        if differing or (tracked is None and old_outs.get(path) != new_outs.get(path)):
            changed.append(path)
        pairs.update(differing)
    return verdict_of(pairs, rev=rev, commit=commit, tolerance=tolerance, beside=beside,
                      inputs=[p for p in changed if _under(p, INPUTS)], missing=missing,
                      outputs=len([p for p in old_outs if not _under(p, DESCRIPTIONS)]),
                      machines=machine_rows(_record(repo, commit, record_stage),
                                            _record(repo, "workspace", record_stage)))


def verdict_of(pairs: dict[str, tuple[bytes, bytes]], *, rev: str, commit: str = "",
               tolerance: float = TOLERANCE, inputs: Sequence[str] = (),
               missing: Sequence[str] = (), outputs: int | None = None,
               machines: Sequence[tuple[str, str, str]] = (),
               beside: dict[str, bytes] | None = None) -> Verdict:
    """The tier of the files that differ (``{path: (REV's bytes, these bytes)}``; a side
    without the file has ``b""``), as the module says. First, each file read for it is
    checked as what it claims to be (:func:`damage`): one that is not makes the verdict
    "different", the first line naming each such file and why, before anything is judged
    on it.

    Args:
        beside: files the same on both sides (``{path: bytes}``), read to check a file
            that differs by: the predictions a metrics file's records follow from.
        inputs: outputs among :data:`INPUTS` that differ (nothing is paired after them).
        missing: outputs that differ but whose REV copy could not be read.
        outputs: how many outputs were compared, for the identical line.
        machines: :func:`machine_rows`.
    """
    where = f"{visible(rev)}" + (f" ({commit[:7]})" if commit else "")
    machines = list(machines)
    if not pairs and not missing:
        count = f" ({outputs} outputs" if outputs is not None else " ("
        return Verdict("identical", rev, commit,
                       f"every output of {where} byte for byte{count}; the provenance "
                       "records describe the machines, below)", machines=machines)
    sets = []
    for name in _predictions_sets(pairs):
        old_bytes, new_bytes = pairs[name]
        try:
            sets.append(judge_set(name, read_predictions(old_bytes.decode(), f"{rev}:{name}"),
                                  read_predictions(new_bytes.decode(), name), tolerance))
        except LorasentError as err:
            sets.append(SetResult(name, 0, [], [], math.inf, None, str(err)))
    damaged = damage(pairs, beside or {}, rev, tolerance)
    moved = any(s.flipped for s in sets)
    probs_within = all(s.within(tolerance) for s in sets)
    flags_moved = any(_flagged(old) != _flagged(new) for name, (old, new) in pairs.items()
                      if name.endswith("label_issues.csv"))
    thresholds = moved or flags_moved or any(s.on_edge for s in sets)
    files = [_file_diff(name, *pairs[name], tolerance, (moved, thresholds), probs_within,
                        sets) for name in pairs]
    files += [FileDiff(p, "differs; REV's copy is neither in git nor in the DVC cache "
                       "(dvc pull), so no deviation", _under(p, (ADAPTER_DIR,)))
              for p in missing]
    if damaged:
        ours = [d for d in damaged if d.startswith("this run's ")]
        advice = ([f"restore this run's (git checkout, dvc pull) or remake "
                   f"{'them' if len(ours) > 1 else 'it'} (dvc repro), then judge again"]
                  if ours else []) + (
            [f"{visible(rev)}'s are as committed: judge against a revision whose files are "
             "whole"] if len(ours) < len(damaged) else [])
        return Verdict("different", rev, commit,
                       f"damaged (not what {'they claim' if len(damaged) > 1 else 'it claims'}, "
                       f"so nothing is judged on {'them' if len(damaged) > 1 else 'it'}): "
                       + "; ".join(damaged + advice), files, sets, machines)
    if inputs:
        return Verdict("different", rev, commit,
                       f"its inputs differ from {visible(rev)}'s ({', '.join(inputs)}): the "
                       "same test rows cannot be assumed; rerun from the same data",
                       files, sets, machines)
    if all(d.within for d in files):
        flips = sum(len(s.near_ties) for s in sets)
        deviation = max((s.max_deviation for s in sets), default=0.0)
        ties = [visible(i) for s in sets for i in s.near_ties][:SHOWN]
        said = (f"the same predicted labels on every test row of {where}" if not flips else
                f"the same predicted labels as {where} but {flips} near-tie rows (top-two "
                f"margin under {tolerance:g}: {', '.join(ties)})")
        return Verdict("equivalent", rev, commit,
                       f"{said}; probabilities within {deviation:.2g} (tolerance "
                       f"{tolerance:g}); every metric within its tolerance; {len(files)} "
                       "files differ (below)", files, sets, machines)
    beyond = [d.path for d in files if not d.within]
    if not sets:
        return Verdict("different", rev, commit,
                       f"every predictions file is {where}'s, byte for byte, but "
                       + (f"{len(beyond)} files differ beyond their tolerances"
                          if len(beyond) != 1 else "1 file differs beyond its tolerance")
                       + f": {_listing(beyond)}", files, sets, machines)
    paired = [s for s in sets if s.paired is not None]
    if not paired:
        return Verdict("different", rev, commit,
                       "files differ beyond the tolerances and no test set could be paired "
                       f"with {visible(rev)}'s: "
                       + "; ".join(f"{set_name(s.name)}: {s.problem}" for s in sets),
                       files, sets, machines)
    significant = any(s.paired is None or s.paired.significant for s in sets)
    shifted = [s for s in sets if not s.within(tolerance)] or paired[:1]
    lead = next(s for s in [*shifted, *paired] if s.paired is not None)
    counted = [f"{len(s.flipped)} of {s.rows} predictions"
               + ("" if s.name == EVAL_PREDICTIONS.as_posix() else f" of {set_name(s.name)}")
               for s in shifted if s.paired is not None]
    unpaired = [f"{set_name(s.name)} not paired ({s.problem})" for s in shifted
                if s.paired is None]
    assert lead.paired is not None
    line = "; ".join([f"{' and '.join(counted)} differ from {where}", *unpaired]) + "; " + (
        f"{set_name(lead.name)}: " if len(shifted) > 1 else "") + _paired_said(lead.paired, rev)
    notes = [f"  {visible(s.name)}: {len(s.flipped)} of {s.rows} predictions differ; "
             + (_paired_said(s.paired, rev) if s.paired else f"not paired: {s.problem}")
             for s in sets if s is not lead]
    return Verdict("different" if significant else "consistent", rev, commit, line, files,
                   sets, machines, notes)


def set_name(name: str) -> str:
    """A predictions file as its test set: ``the test split``, ``test set reviews-zh``, or
    the file (a baseline's)."""
    if name == EVAL_PREDICTIONS.as_posix():
        return "the test split"
    folder = f"{EVAL_TEST_SETS.as_posix()}/"
    if name.startswith(folder) and name.endswith("/predictions.csv"):
        return f"test set {visible(name[len(folder):-len('/predictions.csv')])}"
    return visible(name)


def _paired_said(paired: PairedComparison, rev: str) -> str:
    """``lorasent compare``'s paired verdict, B this run and A REV, in the line's case (a
    sentence after the first starts upper-case)."""
    said = (paired_verdict(paired).replace("B is", "this run is")
            .replace("than A", f"than {visible(rev)}")
            .replace("A and B are right", f"This run and {visible(rev)} are right"))
    return said[0].lower() + said[1:]


def _flagged(audit: bytes) -> set[str]:
    """The ids a label audit (``label_issues.csv``) flags."""
    return {str(row.get("id")) for row in csv.DictReader(io.StringIO(audit.decode()))}


def _file_diff(name: str, old: bytes, new: bytes, tolerance: float,
               moved: tuple[bool, bool], probs_within: bool, sets: list[SetResult]
               ) -> FileDiff:
    """One differing file, judged by its kind; ``moved``: whether some predicted label,
    and whether some row on a threshold, moved."""
    if not old or not new:
        return FileDiff(name, "only in REV" if old else "only here", False)
    result = next((s for s in sets if s.name == name), None)
    if result is not None:
        if result.problem:
            return FileDiff(name, result.problem, False)
        said = (f"{len(result.flipped)} of {result.rows} predicted labels differ "
                f"({len(result.near_ties)} near a tie); probabilities up to "
                f"{result.max_deviation:.3g} apart")
        return FileDiff(name, said, result.within(tolerance))
    if name.endswith("label_issues.csv"):
        old_rows = {row.get("id"): row for row in csv.DictReader(io.StringIO(old.decode()))}
        new_rows = {row.get("id"): row for row in csv.DictReader(io.StringIO(new.decode()))}
        both = set(old_rows) & set(new_rows)
        moved_by = max((abs(float(old_rows[i].get("self_confidence") or 0)
                            - float(new_rows[i].get("self_confidence") or 0)) for i in both),
                       default=0.0)
        said = (f"{len(set(new_rows) - set(old_rows))} rows flagged only here, "
                f"{len(set(old_rows) - set(new_rows))} only in REV (of {len(old_rows)}); "
                f"self-confidence up to {moved_by:.3g} apart")
        # a flag is a threshold on the probabilities: with each of them within the
        # tolerance, a flag that differs sat on its threshold
        return FileDiff(name, said, probs_within)
    if name.endswith(".json"):
        return json_diff(name, old, new, tolerance, *moved)
    if name.endswith(".tsv"):
        return table_diff(name, old, new, tolerance)
    if name.endswith(".safetensors"):
        return weights_diff(name, old, new)
    return FileDiff(name, f"bytes differ ({len(old)} and {len(new)} bytes)", False)


def _record(repo: Path, rev: str, stage: str) -> dict[str, Any] | None:
    """The provenance record of ``stage`` at ``rev`` (its machine facts joined in here)."""
    path = (PROVENANCE_DIR / f"{stage}.json").as_posix()
    text = read_at(repo, rev, path)
    try:
        record = (None if not text else with_machine_facts(text, repo / machine_path(path))
                  if rev == "workspace" else json.loads(text))
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


# ------------------------------------------------------------------ the checks


def not_reps(repo: Path, commit: str) -> tuple[list[str], list[str]]:
    """``(code, other)``: the files, outputs of the pipeline aside, that differ from
    ``commit`` in ``repo`` (tracked changes and untracked files git does not ignore):
    those a stage reads (params files, its deps) and the rest."""
    lock = read_lock(repo, commit)
    outs = [Path(p) for p in outputs(lock)] + [Path("dvc.lock")]
    diff = subprocess.run([program("git"), "diff", "--name-only", commit, "--"], cwd=repo,
                          capture_output=True, text=True).stdout.splitlines()
    new = subprocess.run([program("git"), "ls-files", "--others", "--exclude-standard"],
                         cwd=repo, capture_output=True, text=True).stdout.splitlines()
    files = sorted(p for p in set(diff) | set(new) if not _under(p, outs))
    deps = {d["path"] for stage in (lock.get("stages") or {}).values()
            for d in stage.get("deps") or []}
    params = {f for stage in (lock.get("stages") or {}).values() for f in stage.get("params") or {}}
    reads = [Path(p) for p in deps | params | {"dvc.yaml"}]
    code = [p for p in files if _under(p, reads)]
    return code, [p for p in files if p not in code]


def _listing(paths: list[str], limit: int = 8) -> str:
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(visible(p) for p in paths[:limit]) + more


class NotAReproduction(LorasentError):
    """The workspace is not a run of REV's code and params (so: compare, not reproduce)."""


def check_workspace(repo: Path, rev: str, commit: str) -> list[str]:
    """Refuse a workspace that is not a run of REV as it stands, before any reading; the
    model stages that ran here (a machine record of this machine's), in pipeline order.

    Raises:
        NotAReproduction: params or code differ from REV's; files that are no output
            differ; ``dvc status`` finds stages out of date; or neither train nor
            evaluate ran here (no machine record: their outputs were pulled or checked
            out).
    """
    from lorasent.review.collect import workspace_staleness

    code, other = not_reps(repo, commit)
    if code:
        raise NotAReproduction(
            f"params or code differ from {visible(rev)}'s ({_listing(code)}): this is not a "
            f"reproduction of {visible(rev)}; `lorasent compare {visible(rev)} workspace` "
            "compares the two runs")
    if other:
        raise NotAReproduction(
            f"the workspace holds files that are not {visible(rev)}'s ({_listing(other)}); "
            "commit or stash them (git stash -u), or run `lorasent reproduce "
            f"{visible(rev)}` without --workspace, which reruns it in a clean clone")
    stale = workspace_staleness(repo)
    if stale:
        raise NotAReproduction(
            f"the outputs here are not those of a run of this code and params (stale: "
            f"{', '.join(stale.stages)}): run `dvc repro` (make run) first")
    ran = [stage for stage in ("baseline", "train", "evaluate")
           if (repo / PROVENANCE_DIR / f"{stage}.json").is_file() and machine_facts(
               (repo / PROVENANCE_DIR / f"{stage}.json").read_text(encoding="utf-8"),
               repo / machine_path(PROVENANCE_DIR / f"{stage}.json"))]
    if "evaluate" not in ran and "train" not in ran:
        raise NotAReproduction(
            f"{visible(rev)}'s outputs were not made here (no machine record of its train or "
            "evaluate stage: they were pulled or checked out, or the stages ran elsewhere): "
            "run the pipeline (make run), or `lorasent reproduce` without --workspace")
    return ran


# ------------------------------------------------------------------ rerunning REV


def _run(argv: list[str], cwd: Path, progress: Progress) -> None:
    """``argv`` in ``cwd``, its output passed on to standard error (standard output holds
    the verdict alone); in a session of its own, stopped with its children (SIGTERM,
    then SIGKILL) when this process is interrupted.

    Raises:
        LorasentError: a non-zero exit, naming the command.
    """
    from lorasent.processes import stop as _stop

    progress(redact(f"reproduce: $ {' '.join(argv)}"))
    sys.stderr.flush()
    proc = subprocess.Popen(argv, cwd=cwd, env=environment(), stdin=subprocess.DEVNULL,
                            stdout=sys.stderr, start_new_session=True)
    try:
        code = proc.wait()
    except BaseException:
        _stop(proc)
        raise
    if code:
        raise LorasentError(f"reproduce: `{' '.join(argv[:3])}` exited with {code} in the "
                            f"clone of REV (its output above)")


@contextlib.contextmanager
def _terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt here, so that the clone is removed either way."""
    from lorasent.processes import interrupt as _interrupt

    try:
        previous = signal.signal(signal.SIGTERM, _interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _estimate(repo: Path, stages: Sequence[str]) -> str:
    """How long ``stages`` took when they last ran here (their machine records)."""
    seconds = []
    for stage in stages:
        try:
            record = json.loads((repo / machine_path(PROVENANCE_DIR / f"{stage}.json"))
                                .read_text(encoding="utf-8"))
            seconds.append(float(record["wall_time_s"]))
        except (OSError, ValueError, KeyError, TypeError):
            return "no record of these stages on this machine to estimate from"
    total = sum(seconds)
    return f"about {int(total // 60)} min {int(total % 60)} s, as they last took here"


def reproduce(repo: Path, rev: str = "HEAD", *, workspace: bool = False, no_train: bool = False,
              tolerance: float = TOLERANCE, progress: Progress = print,
              connect_timeout: float | None = None) -> Verdict:
    """Judge REV's run reproduced here: the workspace's outputs (``workspace``), or a
    rerun in a temporary clone (every stage; with ``no_train`` the evaluate stage on REV's
    adapter, its outputs pulled from the default DVC remote, which gets
    ``connect_timeout`` seconds to answer: :func:`lorasent.repro.remote_problem`).

    Raises:
        LorasentError: REV unknown; the workspace is not a run of REV
            (:class:`NotAReproduction`); with ``no_train``, a default DVC remote that
            refuses this machine or does not answer; a step of the rerun failed.
    """
    if not (0 < tolerance < 1):
        raise LorasentError(f"reproduce: --tolerance must be in (0, 1); got {tolerance:g}")
    check_revisions(repo, {"REV": [rev]}, command="reproduce")
    commit = _full_commit(repo, rev)
    if workspace:
        ran = check_workspace(repo, rev, commit)
        if "evaluate" in ran:
            return judge(repo, rev, commit, tolerance)
        # train ran here and made the adapter dvc.lock records (REV's, in a fresh clone on
        # REV's kind of machine): DVC skipped evaluate
        verdict = judge(repo, rev, commit, tolerance, record_stage="train")
        verdict.notes.append(
            "  evaluate did not run here: DVC found its inputs (the adapter the train stage "
            "made here, the split) unchanged and kept the scores in metrics/ as they were; "
            "`dvc repro --force evaluate` scores them here")
        return verdict
    clone = Path(tempfile.mkdtemp(prefix="lorasent-reproduce-"))
    try:
        with _terminated_as_interrupt():
            return _rerun(repo, rev, commit, clone, no_train, tolerance, progress,
                          connect_timeout)
    finally:
        shutil.rmtree(clone, ignore_errors=True)


def _full_commit(repo: Path, rev: str) -> str:
    short = resolve_commits(repo, rev).get(rev, rev)
    done = subprocess.run([program("git"), "rev-parse", f"{short}^{{commit}}"], cwd=repo,
                          capture_output=True, text=True)
    return done.stdout.strip() or short


def _rerun(repo: Path, rev: str, commit: str, clone: Path, no_train: bool, tolerance: float,
           progress: Progress, connect_timeout: float | None = None) -> Verdict:
    cache = run_dvc(repo, "cache", "dir", as_json=False, command="reproduce").strip()
    _run([program("git"), "clone", "-q", "--no-checkout", str(repo.resolve()), str(clone)],
         clone.parent, progress)
    _run([program("git"), "checkout", "-q", "--detach", commit], clone, progress)
    local = repo / ".dvc" / "config.local"
    if local.is_file():  # a default remote set with --local
        shutil.copy2(local, clone / ".dvc" / "config.local")
    for argv in (["cache", "dir", "--local", cache],
                 # links, not copies, of REV's outputs (a 1 GiB base model): DVC keeps its
                 # cache read-only, and a stage replaces its outputs, never edits them
                 ["config", "--local", "cache.type", "reflink,hardlink,symlink,copy"]):
        _run([program("dvc"), *argv], clone, lambda _: None)
    stages = ["evaluate"]
    if no_train:
        have = _checkout(clone, progress, connect_timeout)
        lacking = [p for p in (ADAPTER_DIR.as_posix(), SPLIT_DIR.as_posix(),
                               BASE_MODEL_DIR.as_posix()) if p not in have]
        if lacking:
            stages = ["fetch", "split", "baseline", "train", "evaluate"]
            progress(f"reproduce: {visible(rev)}'s {', '.join(lacking)} are neither in the "
                     "DVC cache nor on a remote: the pipeline runs from the start, training "
                     f"included ({_estimate(repo, ['baseline', 'train', 'evaluate'])})")
            _run([program("dvc"), "repro", "--quiet", "--force", "--no-run-cache"], clone,
                 progress)
        else:
            progress(f"reproduce: re-scoring {visible(rev)}'s adapter "
                     f"({_estimate(repo, stages)})")
            _run([program("dvc"), "repro", "--quiet", "--force", "--no-run-cache",
                  "--single-item", "evaluate"], clone, progress)
    else:
        progress(f"reproduce: running {visible(rev)}'s pipeline from the start, training "
                 f"included ({_estimate(repo, ['baseline', 'train', 'evaluate'])})")
        _run([program("dvc"), "repro", "--quiet", "--force", "--no-run-cache"], clone,
             progress)
    return judge(clone, rev, commit, tolerance)


def _checkout(clone: Path, progress: Progress, connect_timeout: float | None = None
              ) -> set[str]:
    """Check REV's outputs out of the cache, pulling what it lacks where a default remote
    is set (asked first whether it lets this machine in and answers within
    ``connect_timeout`` seconds, ``lorasent.repro.remote_problem``, as ``make run`` asks),
    and hash them against REV's dvc.lock (``lorasent.repro.check_checked_out``, as ``make
    run`` does): the output paths that are there afterwards.

    Raises:
        LorasentError: the default remote refuses this machine or does not answer; a
            file the cache or the remote gave is not what dvc.lock records.
    """
    from lorasent.repro import check_checked_out, remote_problem

    remote = subprocess.run([program("dvc"), "remote", "default"], cwd=clone,
                            capture_output=True).returncode == 0
    if remote and (problem := remote_problem(clone, connect_timeout)):
        raise LorasentError(f"reproduce: {problem}; nothing was pulled or re-scored")
    for argv in (["checkout", "--quiet"], ["pull", "--quiet"]):
        if argv[0] == "pull" and not remote:
            break
        subprocess.run([program("dvc"), *argv], cwd=clone, env=environment(),
                       capture_output=True)
    damage = check_checked_out(["fetch", "split", "train"], remote, clone)
    if damage:
        raise LorasentError(damage.replace("run: ", "reproduce: ", 1)
                            .replace("removed here", "removed from the clone"))
    lock = read_lock(clone, "workspace")
    return {p for p, md5 in outputs(lock).items() if (clone / p).exists()
            and (not md5.endswith(".dir") or (clone / p).is_dir())}


def judge_groups(repo: Path, rev_group: str, here_group: str) -> Verdict:
    """REV's runs over seeds against this machine's, MLPerf's way: each group reported by
    its olympic mean (the mean less the highest and the lowest run, where there are at
    least 4) and judged by Welch's t-test (:func:`lorasent.statistics.group_comparison`)
    on their accuracies: consistent when it finds no detectable difference.

    Args:
        rev_group, here_group: experiments or revisions, as ``lorasent compare`` takes a
            group: comma-separated, or a pattern such as ``'ref-seed*'``.

    Raises:
        LorasentError: a group of fewer than 2 runs, or a run without metrics/eval.json.
    """
    from lorasent.review.collect import expand_group

    accuracies, damaged = [], []
    for spec in (rev_group, here_group):
        revs = expand_group(repo, spec, command="reproduce")
        check_revisions(repo, {"a seed group": revs}, command="reproduce")
        commits = resolve_commits(repo, *revs)
        values = []
        for rev in revs:
            text = read_at(repo, commits[rev], "metrics/eval.json")
            if not text:
                raise LorasentError(f"reproduce: {visible(rev)} has no metrics/eval.json")
            predictions = read_at(repo, commits[rev], EVAL_PREDICTIONS.as_posix())
            if predictions is not None:  # the accuracy judged follows from them
                pairs = {EVAL_METRICS.as_posix(): (text.encode(), text.encode()),
                         EVAL_PREDICTIONS.as_posix(): (predictions.encode(),
                                                       predictions.encode())}
                damaged += [d for d in damage(pairs, {}, rev, TOLERANCE)
                            if d.startswith(f"{visible(rev)}'s ")]  # one side is enough
            try:
                values.append(float(json.loads(text)["accuracy"]))
            except (ValueError, KeyError, TypeError):
                damaged.append(f"{visible(rev)}'s metrics/eval.json holds no accuracy")
        if len(values) < 2:
            raise LorasentError(f"reproduce: the group {visible(spec)} holds {len(values)} run; "
                                "a group over seeds needs at least 2 (lorasent seeds -n 3)")
        accuracies.append(values)
    if damaged:
        return Verdict("different", rev_group, "",
                       "damaged (not what it claims, so no accuracy of it is judged): "
                       + "; ".join(damaged) + "; remake those runs (dvc exp run) or judge "
                       "groups whose files are whole")
    test = group_comparison("accuracy", *accuracies)

    def olympic(values: Sequence[float]) -> float:
        kept = sorted(values)[1:-1] if len(values) >= 4 else list(values)
        return float(np.mean(kept))

    said = (f"accuracy over seeds: {visible(rev_group)} {test.spread(test.a)}, olympic mean "
            f"{olympic(test.a):.4f}; {visible(here_group)} {test.spread(test.b)}, olympic mean "
            f"{olympic(test.b):.4f}; Δ {delta_text(test.delta)}")
    if test.p_value is None:
        return Verdict("different", rev_group, "", f"{said}; neither group varies over its "
                       "seeds, so Welch's t-test is undefined")
    said += f", Welch's t-test {p_text(test.p_value)}"
    if test.significant:
        return Verdict("different", rev_group, "", f"{said}: the groups differ")
    return Verdict("consistent", rev_group, "", f"no detectable difference over seeds: {said}")
