"""``lorasent queue``: which unlabelled texts to label next (uncertainty sampling).

Usage::

    lorasent queue unlabelled.csv --budget 200 [--strategy margin|entropy] [--relabel]
        [--random-share 0.2] [--seed 0] [--out to_label.csv] [--force]

The pool is read as ``lorasent predict --input`` reads a file (:func:`lorasent.tools.
predict.open_inputs`: the same ``--text-column``, ``--separator`` and ``--encoding``
rules and errors) and cleaned before any model loads:

1. blank texts are dropped;
2. near-duplicates within the pool are dropped, the first copy kept, on the split
   stage's key (:func:`lorasent.stages.split.normalise_text`: NFKC, case folded,
   whitespace collapsed, every character with no visible glyph folded), as the split stage
   deduplicates;
3. a text whose key is that of a row of the training, validation or test split
   (``data/split/*.jsonl``) is dropped: it is labelled already.

The rest is scored as ``lorasent predict`` scores (:func:`lorasent.tools.predict.
stream_predictions`: the adapter's label scoring and its temperature from
``calibration.json``) and ranked by uncertainty (uncertainty sampling, Lewis & Gale
1994; the margin is Scheffer et al. 2001's, the entropy Settles 2009's survey, §3.1):

- ``margin``: the top calibrated probability minus the second; smallest first;
- ``entropy``: ``-sum p log p`` in nats; largest first.

Balance over predicted classes: the queue is filled round by round; each round takes
the most uncertain remaining text of each predicted class (classes in the order of
their texts' uncertainty within the round), so no class fills the queue while another
waits. A class that runs out of texts stops taking turns and the others fill the rest
of the budget: the queue is full whenever the pool holds ``--budget`` texts.

The hedge (:func:`hedged_order`): uncertainty sampling with transformers tends to pick
hard-to-learn outliers, and can then do worse than random picks (Gonsior et al. 2024;
margin sampling is the strong one for transformers, Schröder et al. 2022, and helps most
when the labels so far are imbalanced, Ein-Dor et al. 2020). So the most uncertain
:data:`SKIP_SHARE` of the pool is left out of the uncertain picks, and
``--random-share`` of the budget (:data:`RANDOM_SHARE` by default) is drawn at random
(``--seed``) from the rest of the pool, spread evenly along the ranks, its ``reason``
starting ``random:``.

``--relabel`` adds, after the queue, the training rows that confident learning
(:func:`lorasent.calibration.label_issues`, the audit the evaluate stage runs on the
test split) flags, scored by the same adapter: their given label is likely wrong.
These probabilities are in-sample (the adapter trained on the rows), so confident
learning flags fewer rows than it would with out-of-sample ones: the list is a floor,
not the full audit (Northcutt et al. 2021 use cross-validated probabilities).

Output (:data:`header`): a CSV with the pool's other columns first (as predict writes
them, renamed ``input_<name>`` where a name is taken), then ``text``, ``label`` (empty:
the labeller fills it in), ``predicted``, ``p_<class>`` per class, ``margin`` or
``entropy``, ``rank`` (1 = label first; the relabel rows follow the queue), the
``given_label`` (relabel rows only) and ``reason`` (why the row is here: ``uncertain:
...``, ``random: ...`` or ``label audit ...``). A text cell a
spreadsheet would run as a formula is written with a leading ``'``
(:func:`lorasent.tables.spreadsheet_cell`, OWASP's rule), and taken off again wherever
lorasent reads the file (:class:`lorasent.tables.Table` knows its header).

An ``--out`` that holds anything a person could have filled in (:func:`people_work`: a
label, a ``given_label`` the queue left empty, a row or column it did not write, an
encoding it does not write, such as a spreadsheet's UTF-16 re-save) is replaced only
with ``--force``, after a copy is kept as ``<out>.<n>.bak`` (:func:`check_labels_kept`),
and the line says where.
With ``--relabel``, an adapter that predicts one class for nearly every training row is
said to be degenerate (:func:`relabel_warnings`, the evaluate stage's warning).
"""

from __future__ import annotations

import codecs
import csv
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from lorasent.atomic import read_jsonl
from lorasent.errors import LorasentError
from lorasent.metrics import class_warnings
from lorasent.output_guard import aside_names
from lorasent.paths import SPLIT_DIR
from lorasent.stages.split import SPLITS, normalise_text
from lorasent.tables import PREDICT_SETTINGS, Table, TableError, written_for_people
from lorasent.tools.predict import CsvRows, Prediction, kept_names

STRATEGIES = ("margin", "entropy")
DEFAULT_OUT = "to_label.csv"
# The share of the budget drawn at random from the pool (--random-share): a hedge against
# the uncertain picks' outliers, so that a queue cannot do much worse than random picks.
# A choice of lorasent's (issue 52).
RANDOM_SHARE = 0.2
# The most uncertain share of the pool left out of the uncertain picks: the texts with
# the most extreme margins (or entropies) are more often hard-to-learn outliers than
# informative ones (Gonsior et al. 2024, "Comparing and Improving Active Learning
# Uncertainty Measures for Transformer Models by Discarding Outliers", Information
# Systems Frontiers: Uncertainty-Clipping leaves the most uncertain texts out). The 5% is
# a choice of lorasent's, not tuned here.
SKIP_SHARE = 0.05


class QueueError(LorasentError, ValueError):
    """A budget, pool, split folder or output the queue cannot use; the message names it
    and says what to do. Raised before any model loads; nothing is written."""


@dataclass(frozen=True)
class Pool:
    """The texts that may be queued, in file order, with what cleaning dropped.

    ``rows``: ``(text, {kept column: value})``; ``read``: texts read (blank ones
    included); ``dropped``: ``blank``, ``duplicate`` (of an earlier pool text) and
    ``in_splits`` (of a row of the training, validation or test split) counts.
    """

    rows: list[tuple[str, dict[str, Any]]]
    read: int
    dropped: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        d = self.dropped
        return (f"{len(self.rows)} of {self.read} texts read ({d.get('blank', 0)} blank, "
                f"{d.get('duplicate', 0)} duplicates within the file, "
                f"{d.get('in_splits', 0)} already in the training, validation or test data)")


def check_budget(budget: int) -> int:
    """``budget`` when it is at least 1.

    Raises:
        QueueError: below 1, in one line.
    """
    if budget < 1:
        raise QueueError(f"--budget {budget}: must be at least 1 (the number of texts to "
                         "queue for labelling), e.g. --budget 200")
    return budget


def split_keys(split_dir: str | Path = SPLIT_DIR) -> set[str]:
    """The normalised texts (:func:`normalise_text`) of the training, validation and test
    splits in ``split_dir``.

    Raises:
        QueueError: a split file is missing (the split stage has not run).
    """
    keys: set[str] = set()
    for name in SPLITS:
        path = Path(split_dir) / f"{name}.jsonl"
        if not path.is_file():
            raise QueueError(
                f"{path}: not found; the queue leaves out every text of the training, "
                f"validation and test splits, so it needs them: run `dvc repro split` (or "
                f"`make run`) first, or point --split-dir at the folder that holds them")
        keys.update(normalise_text(r["text"]) for r in read_jsonl(path))
    return keys


def clean_pool(rows: Iterable[tuple[Any, dict[str, Any]]], labelled: set[str]) -> Pool:
    """Rules 1-3 of the module: blank texts, near-duplicates within the pool (the first
    copy kept) and texts of ``labelled`` (normalised keys of the splits) dropped."""
    kept: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    dropped: Counter[str] = Counter()
    read = 0
    for text, columns in rows:
        read += 1
        text = "" if text is None else str(text)
        key = normalise_text(text)
        if not key:
            dropped["blank"] += 1
        elif key in labelled:
            dropped["in_splits"] += 1
        elif key in seen:
            dropped["duplicate"] += 1
        else:
            seen.add(key)
            kept.append((text, columns))
    return Pool(kept, read, {k: dropped.get(k, 0) for k in ("blank", "duplicate",
                                                                  "in_splits")})


def check_pool(pool: Pool, budget: int, source: str) -> None:
    """Refuse a pool with nothing to queue, or fewer texts than ``budget``.

    Raises:
        QueueError: naming ``source``, the pool's size and what was dropped.
    """
    if not pool.rows:
        what = ("every text is already in the training, validation or test data "
                "(compared normalised, as the split stage deduplicates)"
                if pool.dropped["in_splits"] else "it holds no text")
        raise QueueError(f"{source}: nothing to queue: {what}; {pool.summary()}. Give a "
                         "file of texts not labelled yet")
    if budget > len(pool.rows):
        raise QueueError(f"--budget {budget}: larger than the pool: {source} has "
                         f"{pool.summary()}; give --budget {len(pool.rows)} or less, or "
                         "more texts")


def uncertainty(probs: npt.ArrayLike, strategy: str) -> npt.NDArray[np.float64]:
    """Per row of (N, K) probabilities: the ``margin`` (top probability minus the
    second; 1.0 with one class) or the ``entropy`` (nats, ``-sum p log p``, 0 log 0 = 0).

    Raises:
        ValueError: an unknown strategy.
    """
    p = np.asarray(probs, dtype=np.float64)
    if strategy == "margin":
        if p.shape[1] < 2:
            return np.ones(len(p))
        top = -np.sort(-p, axis=1)
        return top[:, 0] - top[:, 1]
    if strategy == "entropy":
        with np.errstate(divide="ignore", invalid="ignore"):
            return -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=1)
    raise ValueError(f"unknown strategy {strategy!r}; one of {STRATEGIES}")


def balanced_order(predicted: Sequence[int], values: npt.ArrayLike, strategy: str,
                   budget: int) -> list[tuple[int, int]]:
    """The queue: ``(row, round)`` pairs, ``budget`` of them at most, label first first.

    Rows are ranked within their predicted class by uncertainty (``values`` of
    :func:`uncertainty`: margin ascending, entropy descending; ties in row order). Round
    ``r`` (from 1) takes each class's ``r``-th row, ordered among themselves by
    uncertainty; a class with no row left takes no more turns.
    """
    v = np.asarray(values, dtype=np.float64)
    sign = 1.0 if strategy == "margin" else -1.0
    by_class: dict[int, list[int]] = {}
    for row in sorted(range(len(predicted)), key=lambda i: (sign * v[i], i)):
        by_class.setdefault(int(predicted[row]), []).append(row)
    order: list[tuple[int, int]] = []
    depth = 0
    while len(order) < budget and any(depth < len(rows) for rows in by_class.values()):
        batch = sorted((rows[depth] for rows in by_class.values() if depth < len(rows)),
                       key=lambda i: (sign * v[i], i))
        order += [(row, depth + 1) for row in batch[:budget - len(order)]]
        depth += 1
    return order


def random_picks(budget: int, share: float) -> int:
    """How many of ``budget`` are drawn at random: ``share`` of it, rounded half up."""
    return math.floor(share * budget + 0.5)


def hedge_counts(pool: int, budget: int, random_share: float = RANDOM_SHARE,
                 skip_share: float = SKIP_SHARE) -> tuple[int, int]:
    """``(drawn, skipped)``: how many of the queue are drawn at random
    (:func:`random_picks`), and how many of the pool's most uncertain texts are left out of
    the uncertain picks: ``ceil(skip_share · pool)``, at most as many as the pool has
    beyond those picks."""
    drawn = min(random_picks(budget, random_share), pool)
    wanted = min(budget, pool) - drawn
    return drawn, max(0, min(math.ceil(skip_share * pool), pool - wanted))


def skipped(values: npt.ArrayLike, strategy: str, count: int) -> list[int]:
    """The ``count`` most uncertain rows (margin smallest, entropy largest; ties in row
    order)."""
    v = np.asarray(values, dtype=np.float64)
    sign = 1.0 if strategy == "margin" else -1.0
    return sorted(range(len(v)), key=lambda i: (sign * v[i], i))[:count]


def hedged_order(predicted: Sequence[int], values: npt.ArrayLike, strategy: str, budget: int,
                 random_share: float = RANDOM_SHARE, seed: int = 0,
                 skip_share: float = SKIP_SHARE) -> list[tuple[int, int | None]]:
    """The queue with its hedge: ``(row, round)`` pairs, ``budget`` of them at most, label
    first first; round None for a random pick.

    ``budget - random_picks(budget, random_share)`` rows are :func:`balanced_order`'s, the
    :func:`skipped` rows (:func:`hedge_counts`) left out; the :func:`random_picks` are drawn
    (``random.Random(seed).sample``) from every row not picked so far, the skipped ones
    among them. The two are merged evenly: the ``i``-th of ``k`` picks of a kind sits at
    ``(i + 1/2) / k`` along the queue (an uncertain pick first at a tie), so that a
    labeller who stops early has labelled the same share of random picks.
    """
    v = np.asarray(values, dtype=np.float64)
    drawn_n, skip = hedge_counts(len(v), budget, random_share, skip_share)
    wanted = min(budget, len(v)) - drawn_n
    left_out = set(skipped(v, strategy, skip))
    kept = [i for i in range(len(v)) if i not in left_out]
    uncertain: list[tuple[int, int | None]] = [
        (kept[row], round_) for row, round_ in balanced_order(
            [predicted[i] for i in kept], v[kept], strategy, wanted)]
    taken = {row for row, _ in uncertain}
    rest = [i for i in range(len(v)) if i not in taken]
    drawn: list[tuple[int, int | None]] = [
        (row, None) for row in random.Random(seed).sample(rest, min(drawn_n, len(rest)))]
    placed = [((i + 0.5) / len(picks), kind, pick) for kind, picks in enumerate((uncertain, drawn))
              for i, pick in enumerate(picks)]
    return [pick for _, _, pick in sorted(placed, key=lambda x: (x[0], x[1]))]


def header(labels: Sequence[str], strategy: str) -> list[str]:
    """The queue's own columns, after the pool's kept ones."""
    return ["text", "label", "predicted", *(f"p_{label}" for label in labels), strategy,
            "rank", "given_label", "reason"]


def _top_two(probs: dict[str, float]) -> str:
    ranked = sorted(probs.items(), key=lambda kv: -kv[1])[:2]
    return " and ".join(f"{label} {p:.3f}" for label, p in ranked)


def queue_reason(p: Prediction, value: float, strategy: str, round_: int) -> str:
    """Why a pool text is queued: its uncertainty and its class's round."""
    assert p.probabilities is not None
    what = (f"margin {value:.4f} between {_top_two(p.probabilities)}" if strategy == "margin"
            else f"entropy {value:.4f} nats (top: {_top_two(p.probabilities)})")
    return f"uncertain: {what}; round {round_} of predicted class {p.label}"


def random_reason(p: Prediction, value: float, strategy: str, share: float, seed: int) -> str:
    """Why a pool text is queued at random: the hedge, and its uncertainty for the record."""
    assert p.probabilities is not None
    what = (f"margin {value:.4f} between {_top_two(p.probabilities)}" if strategy == "margin"
            else f"entropy {value:.4f} nats (top: {_top_two(p.probabilities)})")
    return (f"random: drawn at random from the pool (--random-share {share:g}, --seed "
            f"{seed}), a hedge against the uncertain picks' outliers; {what}; predicted "
            f"class {p.label}")


def relabel_reason(given: str, p_given: float, predicted: str, p_predicted: float) -> str:
    """Why a training row is queued again by the label audit."""
    return (f"label audit (confident learning) on the training split: given {given} has "
            f"probability {p_given:.3f}, the adapter says {predicted} {p_predicted:.3f}")


@dataclass(frozen=True)
class QueueRow:
    """One row of the output: a prediction, its uncertainty value, rank, given label
    (relabel rows) and reason."""

    prediction: Prediction
    value: float
    rank: int
    reason: str
    given_label: str = ""


def rank_pool(predictions: Sequence[Prediction], labels: Sequence[str], strategy: str,
              budget: int, random_share: float = 0.0, seed: int = 0,
              skip_share: float = 0.0) -> list[QueueRow]:
    """The queued pool rows, ranked from 1 (:func:`hedged_order` of ``predictions``; with
    no random share and nothing skipped, :func:`balanced_order`'s)."""
    probs = np.array([[p.probabilities[label] for label in labels] for p in predictions
                      if p.probabilities is not None])
    values = uncertainty(probs, strategy)
    predicted = [labels.index(p.label) for p in predictions if p.label is not None]
    order = hedged_order(predicted, values, strategy, budget, random_share, seed, skip_share)
    return [QueueRow(predictions[row], float(values[row]), rank,
                     queue_reason(predictions[row], float(values[row]), strategy, round_)
                     if round_ is not None else
                     random_reason(predictions[row], float(values[row]), strategy,
                                   random_share, seed))
            for rank, (row, round_) in enumerate(order, start=1)]


def relabel_rows(predictions: Sequence[Prediction], given: Sequence[str],
                 labels: Sequence[str], strategy: str, first_rank: int,
                 issues: Callable[[npt.NDArray[np.int64], np.ndarray], npt.NDArray[np.int64]]
                 ) -> list[QueueRow]:
    """The training rows ``issues(label ids, probabilities)`` flags (row numbers, ranked:
    :func:`lorasent.calibration.label_issues`' ``indices``), ranked from
    ``first_rank``."""
    probs = np.array([[p.probabilities[label] for label in labels] for p in predictions
                      if p.probabilities is not None])
    ids = np.array([labels.index(g) for g in given], dtype=np.int64)
    values = uncertainty(probs, strategy)
    rows = []
    for rank, i in enumerate(issues(ids, probs), start=first_rank):
        p = predictions[int(i)]
        assert p.probabilities is not None and p.label is not None
        rows.append(QueueRow(p, float(values[i]), rank, relabel_reason(
            given[i], p.probabilities[given[i]], p.label, p.probabilities[p.label]),
            given_label=given[i]))
    return rows


def write_queue(rows: Iterable[QueueRow], labels: Sequence[str], strategy: str,
                columns: Sequence[str], out: TextIO) -> None:
    """The CSV of the module's docstring, through predict's :class:`CsvRows` (texts with
    line breaks, quotes or separators read back as one field; a cell a spreadsheet would
    run as a formula neutralised with a leading ``'``)."""
    own = header(labels, strategy)
    writer = CsvRows(out)
    writer.writerow([*kept_names(columns, own), *own])
    for r in rows:
        p = r.prediction
        assert p.probabilities is not None
        writer.writerow([*(p.columns.get(c, "") for c in columns), p.text, "", p.label,
                         *(f"{p.probabilities[label]:.6f}" for label in labels),
                         f"{r.value:.6f}", r.rank, r.given_label, r.reason])


def written_by_queue(path: str | Path) -> bool:
    """Whether the file at ``path`` starts with a header :func:`write_queue` writes (its
    own columns last: ``text``, ``label``, ``predicted``, ``p_<class>``..., ``margin`` or
    ``entropy``, ``rank``, ``given_label``, ``reason``: :func:`lorasent.tables.
    written_for_people`). Only the first line is read (at most 1 MiB); an unreadable file
    is not the queue's."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            first = fh.readline(1 << 20)
    except (OSError, UnicodeDecodeError):
        return False
    return written_for_people(next(csv.reader([first.rstrip("\r\n")]), [])) == "queue"


def labelled_rows(path: str | Path) -> int | None:
    """How many rows of the CSV at ``path`` hold a label (a ``label`` cell that is not
    blank): 0 for no file, an empty one or one without a ``label`` column; None when it
    cannot be read as a UTF-8 table, so that nobody can tell.

    Read as :class:`lorasent.tables.Table` reads a CSV, so a file a spreadsheet saved
    (CRLF line ends, a byte-order mark, ``;`` between columns) counts.
    """
    path = Path(path)
    if not path.is_file() or not path.stat().st_size:
        return 0
    try:
        with Table(path, required={}, encoding="utf-8", settings=PREDICT_SETTINGS) as t:
            if "label" not in t.columns:
                return 0
            return sum(bool(str(row.get("label", "")).strip()) for _, row in t.rows())
    except (TableError, UnicodeDecodeError):
        return None


# The byte-order marks of the encodings a spreadsheet may save a CSV in other than UTF-8
# ("Unicode text" is UTF-16 LE with its mark); the queue writes UTF-8 without one.
_OTHER_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
               (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


@dataclass(frozen=True)
class Work:
    """What a person may have put into an ``--out`` file (:func:`people_work`):
    ``what``, the refusal's clause; ``short``, the kept-aside line's."""

    what: str
    short: str


def people_work(path: str | Path) -> Work | None:
    """What in the file at ``path`` a person could have filled in, or None: no file, an
    empty one, or the queue's own CSV (:func:`written_by_queue`'s header, in UTF-8) with
    nothing in a cell the queue leaves empty. Counted as a person's work:

    - an encoding the queue did not write (it writes UTF-8): a UTF-16 or UTF-32
      byte-order mark, NUL bytes, or bytes that are not UTF-8 (a spreadsheet's re-save
      in "Unicode text" or a Windows code page);
    - a header that is not the queue's: a column renamed (``label`` to ``my label``),
      added after the pool's columns or removed;
    - a value in a cell the queue leaves empty: ``label`` (every row), ``given_label``
      (every row but the label audit's, whose reason starts ``label audit``);
    - a row the queue did not write: its ``rank`` is not a whole number from 1, or its
      ``reason`` is empty (typed in below the queue);
    - a file that cannot be read as a CSV, so that nobody can tell.
    """
    path = Path(path)
    if not path.is_file() or not path.stat().st_size:
        return None
    with open(path, "rb") as fh:
        head = fh.read(1 << 16)
    for bom, name in _OTHER_BOMS:
        if head.startswith(bom):
            return Work(f"is in {name} (it starts with {name}'s byte-order mark), not the "
                        "UTF-8 the queue writes: it was saved again, by hand or by a "
                        "spreadsheet, and may hold labels", f"in {name}")
    if b"\0" in head:
        return Work("holds NUL bytes, which the queue never writes (UTF-16 without a "
                    "byte-order mark?): it was saved again and may hold labels",
                    "with NUL bytes")
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        return Work(f"is not UTF-8, the encoding the queue writes (byte {err.start + 1} "
                    "cannot be decoded): it was saved again in another encoding and may "
                    "hold labels", "not in UTF-8")
    columns: list[str] | None = None
    try:
        with Table(path, required={}, encoding="utf-8", settings=PREDICT_SETTINGS) as t:
            columns = list(t.columns)
            rows = [row for _, row in t.rows()]
    except TableError:
        if columns is not None and written_for_people(columns) != "queue":
            return _not_the_queues(columns)
        return Work("cannot be read as a CSV, so whether its label column is filled in "
                    "cannot be told", "unreadable as a CSV")
    if written_for_people(columns) != "queue":
        return _not_the_queues(columns)
    said, short = [], []
    labelled = sum(bool(str(r.get("label", "")).strip()) for r in rows)
    if labelled:
        said.append(f"holds {_rows(labelled, 'labelled row')} (its label column is filled "
                    "in)")
        short.append(_rows(labelled, "labelled row"))
    given = sum(bool(str(r.get("given_label", "")).strip())
                and not str(r.get("reason", "")).startswith("label audit") for r in rows)
    if given:
        said.append(f"holds {_rows(given, 'row')} with a given_label the queue leaves empty "
                    "(filled in by hand)")
        short.append(_rows(given, "filled-in given_label"))
    added = sum(not re.fullmatch(r"[1-9]\d*", str(r.get("rank", "")).strip())
                or not str(r.get("reason", "")).strip() for r in rows)
    if added:
        said.append(f"holds {_rows(added, 'row')} the queue did not write (no rank or no "
                    "reason: added by hand)")
        short.append(_rows(added, "added row"))
    return Work(" and ".join(said), ", ".join(short)) if said else None


def _not_the_queues(columns: list[str]) -> Work:
    shown = ", ".join(columns[:12]) + (", ..." if len(columns) > 12 else "")
    return Work(f"has a header the queue does not write (its columns: {shown}): another "
                "file, or the queue's with a column renamed, added or removed, and it may "
                "hold someone's work", "a header not the queue's")


def _rows(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def aside_name(path: str | Path) -> Path:
    """Where :func:`lorasent.output_guard.keep_aside` would keep ``path`` now."""
    return next(p for p in aside_names(Path(path)) if not p.exists())


def check_labels_kept(path: str | Path, force: bool) -> Work | None:
    """What a person may have put into the file at ``path`` (:func:`people_work`) when
    writing the queue there must first keep it aside: with ``force``; None when there is
    nothing to keep. Checked before any model loads, and again just before the file is
    written.

    Raises:
        QueueError: such a file without ``force``: one line naming it, what it holds and
            the way out.
    """
    work = people_work(path)
    if work is None:
        return None
    if not force:
        raise QueueError(f"--out {path}: {work.what}; the queue would replace it. Give "
                         f"another --out, or pass --force to replace it (the old file is "
                         f"then kept as {aside_name(path)}). Nothing was written")
    return work


def kept_note(path: str | Path, aside: Path, work: Work) -> str:
    """One line for standard error: where the file ``--force`` replaced went."""
    return f"kept the old {path} ({work.short}) as {aside}"


def relabel_warnings(predictions: Sequence[Prediction], given: Sequence[str],
                     labels: Sequence[str]) -> list[str]:
    """The evaluate stage's warnings of a degenerate adapter
    (:func:`lorasent.metrics.class_warnings`: one class predicted for nearly every row,
    classes never predicted) on the training rows ``--relabel`` scored, one line each:
    the rows the label audit then flags are the adapter's failure, not label errors."""
    matrix = {actual: dict.fromkeys(labels, 0) for actual in labels}
    for p, actual in zip(predictions, given, strict=True):
        if p.label is not None:
            matrix[actual][p.label] += 1
    found = class_warnings(matrix, "training rows")
    if not any(kind.startswith("collapsed:") for kind in found):
        return []
    return [f"warning: --relabel on the training split: {sentence}; the adapter is "
            "degenerate (one class for nearly every row), so the rows the label audit flags "
            "are its failures more than label errors: retrain it before relabelling (the "
            "evaluate stage warns of the same in metrics/eval.json)" for sentence in
            found.values()]


def hedge_note(pool: int, budget: int, random_share: float, seed: int, strategy: str) -> str:
    """One line for standard error: the hedge (:func:`hedge_counts`) in numbers."""
    drawn, skip = hedge_counts(pool, budget, random_share)
    extreme = "smallest margins" if strategy == "margin" else "largest entropies"
    return (f"hedge: {drawn} of the {budget} drawn at random (--random-share "
            f"{random_share:g}, --seed {seed}); the {skip} texts of the pool with the "
            f"{extreme} ({SKIP_SHARE:.0%}) left out of the uncertain picks as likely outliers "
            "(docs/active-learning.md)")


def pool_note(pool: Pool, source: str) -> str:
    """One line for standard error: how many texts the pool kept of those read."""
    return f"pool: {source}: {pool.summary()}"


def done_note(queued: Sequence[QueueRow], relabelled: Sequence[QueueRow] | None, out: str,
              labels: Sequence[str]) -> str:
    """One line for standard error at the end: what was written, per predicted class."""
    per_class = Counter(r.prediction.label for r in queued)
    spread = ", ".join(f"{label} {per_class.get(label, 0)}" for label in labels)
    extra = ("" if relabelled is None else
             f", and {len(relabelled)} training row{'s' if len(relabelled) != 1 else ''} "
             "the label audit flags")
    return f"wrote {out}: {len(queued)} texts to label (predicted {spread}){extra}"
