"""Extra labelled test sets, read for the evaluate stage beside the split's test split.

Usage: no command of its own; ``lorasent evaluate`` reads the sets of
``evaluate.test_sets`` in ``params.yaml`` (name -> source) with :func:`load_test_sets`.

A set's data contract is the split stage's (:mod:`lorasent.stages.split`), so that a row
means the same in every set:

1. The source is read as ``data.source`` is (:func:`lorasent.stages.fetch.read_source`,
   with the set's own ``text_column``, ``label_column``, ``separator``, ``encoding`` and
   ``hf_split``): ``packaged:...``, ``hf:<dataset id or local dataset folder>`` or a
   CSV/TSV/JSONL/Parquet file.
2. Empty texts and empty labels are dropped and counted; labels are mapped onto
   ``base.labels`` through ``base.label_aliases``; an unknown label stops with the split
   stage's error, naming ``evaluate.test_sets.<name>`` and its source.
3. Duplicates (on the normalised text) are dropped and counted, and a text whose copies
   disagree on the label is dropped entirely.
4. ``size`` rows are drawn, stratified by class with scikit-learn's
   ``train_test_split(random_state=split.seed)`` as the split stage draws its test split;
   ``size: 0`` (or the number of rows left) keeps every row.

A class of ``base.labels`` that the set lacks is fine (its support is 0). A text that is
also in the split's training or test split is kept and counted (``overlap_with_train``,
``overlap_with_test``), not dropped: the set is scored as it is, and the report says how
much of it the model has trained on. The loader only reads: it writes nothing.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lorasent.atomic import read_jsonl
from lorasent.errors import LorasentError
from lorasent.params import TestSetParams
from lorasent.paths import SPLIT_DIR
from lorasent.stages.fetch import read_source
from lorasent.stages.split import SplitError, clean_rows, deduplicate, normalise_text, row_id

# The reasons a row is dropped, in the order of metrics/data.json's "dropped".
DROP_REASONS = ("empty_text", "empty_label", "duplicate", "conflicting_label")
# The reading keys that read_source's messages name as data.<key>: a set names its own.
_DATA_KEY = re.compile(r"\bdata\.(source|text_column|label_column|separator|encoding|hf_split)\b")


class TestSetError(LorasentError, ValueError):
    """An extra test set that cannot be read or drawn as configured; the message names
    ``evaluate.test_sets.<name>`` and says what to change."""

    __test__: ClassVar[bool] = False  # an error, not a pytest class


@dataclass(frozen=True)
class TestSet:
    """One extra test set, cleaned and drawn.

    Attributes:
        name: its key in ``evaluate.test_sets``.
        rows: ``{"id", "text", "label", "label_id"}`` per row, as ``data/split/test.jsonl``
            holds them (``id``: :func:`lorasent.stages.split.row_id` of the text;
            ``label_id``: the label's index in ``base.labels``), in the order of the
            draw (scikit-learn's, as the split stage writes its test split), or in the
            source's order when every row is kept.
        report: ``{"source", "origin" (files and SHA-256, or the hub dataset, as
            read_source gives them), "rows_read", "rows_kept" (after cleaning and
            deduplication, before the draw), "dropped" ({reason: rows}, the reasons of
            metrics/data.json), "sampled" (rows drawn, or None when every row is kept),
            "class_counts" ({label: rows} of ``rows``, every label of base.labels),
            "overlap_with_train", "overlap_with_test" (rows of ``rows`` whose normalised
            text is in the split's train / test split), "label_remaps" ([{"from", "to",
            "rows"}])}``.
    """

    __test__: ClassVar[bool] = False  # a result, not a pytest class

    name: str
    rows: list[dict[str, Any]]
    report: dict[str, Any]


def load_test_sets(test_sets: Mapping[str, TestSetParams], *, labels: Sequence[str],
                   aliases: Mapping[str, str], seed: int,
                   split_dir: Path = SPLIT_DIR) -> list[TestSet]:
    """Every set of ``evaluate.test_sets``, in the params' order (see :func:`load_test_set`).

    All are read and checked before any is returned: the first bad set raises, and the
    stage scores nothing. The split's train and test texts are read once.

    Raises:
        TestSetError: as :func:`load_test_set`.
        FileNotFoundError: ``split_dir`` lacks ``train.jsonl`` or ``test.jsonl`` (run the
            split stage first).
    """
    if not test_sets:
        return []
    keys = _split_keys(split_dir)
    return [_load(name, spec, labels=labels, aliases=aliases, seed=seed, split_keys=keys)
            for name, spec in test_sets.items()]


def load_test_set(name: str, spec: TestSetParams, *, labels: Sequence[str],
                  aliases: Mapping[str, str], seed: int,
                  split_dir: Path = SPLIT_DIR) -> TestSet:
    """The set ``evaluate.test_sets.<name>``: read, cleaned, deduplicated and drawn under
    the rules of the module docstring.

    Args:
        name: the set's key in ``evaluate.test_sets``, for the messages and the result.
        spec: its params (source, size and the reading keys).
        labels: ``base.labels``; a label's index is its ``label_id``.
        aliases: ``base.label_aliases``.
        seed: ``split.seed``, the draw's ``random_state``.
        split_dir: the split stage's output folder, whose ``train.jsonl`` and
            ``test.jsonl`` the overlap counts compare with.

    Raises:
        TestSetError: the source is unknown or missing (the message gives its absolute
            path) or breaks the table rules; a label is neither in ``labels`` nor in
            ``aliases`` (naming it and its rows); ``size`` asks for more rows than remain
            after cleaning (naming how many do); no row remains (one row is scored, its
            metrics without intervals: ``lorasent.stages.evaluate``).
        FileNotFoundError: ``split_dir`` lacks ``train.jsonl`` or ``test.jsonl``.
    """
    return _load(name, spec, labels=labels, aliases=aliases, seed=seed,
                 split_keys=_split_keys(split_dir))


def _load(name: str, spec: TestSetParams, *, labels: Sequence[str],
          aliases: Mapping[str, str], seed: int,
          split_keys: Mapping[str, set[str]]) -> TestSet:
    key = f"evaluate.test_sets.{name}"
    raw, origin = _read(key, spec)
    try:
        cleaned, dropped, remapped = clean_rows(raw, labels, aliases, f"{key} ({spec.source})")
    except SplitError as err:
        raise TestSetError(str(err)) from None
    unique, duplicates = deduplicate(cleaned)
    dropped.update(duplicates)
    drawn = _draw(unique, spec.size, seed, key, spec.source)
    if not drawn:  # no metric of 0 rows (1 row gets its metrics, without intervals)
        raise TestSetError(
            f"{key} ({spec.source}): 0 rows after cleaning (empty texts or labels dropped); "
            "a test set needs at least 1 row: add rows, or remove the set from "
            "evaluate.test_sets")
    texts = [normalise_text(r["text"]) for r in drawn]
    report = {
        "source": spec.source,
        "origin": origin,
        "rows_read": len(raw),
        "rows_kept": len(unique),
        "dropped": {reason: dropped.get(reason, 0) for reason in DROP_REASONS},
        "sampled": len(drawn) if len(drawn) < len(unique) else None,
        "class_counts": {label: sum(r["label"] == label for r in drawn) for label in labels},
        "overlap_with_train": sum(t in split_keys["train"] for t in texts),
        "overlap_with_test": sum(t in split_keys["test"] for t in texts),
        "label_remaps": [{"from": raw_label, "to": label, "rows": n}
                         for (raw_label, label), n in sorted(remapped.items())],
    }
    rows = [{"id": row_id(r["text"]), "text": r["text"], "label": r["label"],
             "label_id": r["label_id"]} for r in drawn]
    return TestSet(name, rows, report)


def check_test_sets(test_sets: Mapping[str, TestSetParams], *, labels: Sequence[str],
                    aliases: Mapping[str, str], seed: int) -> list[str]:
    """What is wrong with each set of ``evaluate.test_sets`` that can be read here without
    the network (``hf:`` sets are left to evaluate), one line per bad set: a missing or
    unreadable source, an unknown label, a size larger than the set, no row left
    (the checks of :func:`load_test_set`, without the split's overlap counts). Empty when
    all are fine; for ``lorasent doctor``, before any stage runs."""
    problems = []
    for name, spec in test_sets.items():
        if spec.source.startswith("hf:"):
            continue
        try:
            _load(name, spec, labels=labels, aliases=aliases, seed=seed,
                  split_keys={"train": set(), "test": set()})
        except TestSetError as err:
            problems.append(str(err))
    return problems


def _read(key: str, spec: TestSetParams) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """read_source's rows and origin; its errors name the set's keys instead of data's.

    The messages are rewritten rather than read_source given the key to name: the fetch
    stage's module is one of its DVC deps, and a change there would rerun fetch.
    """
    try:
        return read_source(spec.source, text_column=spec.text_column,
                           label_column=spec.label_column, encoding=spec.encoding,
                           hf_split=spec.hf_split, separator=spec.separator)
    except LorasentError as err:
        message = _DATA_KEY.sub(lambda m: f"{key}.{m[1]}", str(err))
        if not message.startswith(key):
            message = f"{key} ({spec.source}): {message}"
        raise TestSetError(message) from None


def _draw(rows: list[dict[str, Any]], size: int, seed: int, key: str,
          source: str) -> list[dict[str, Any]]:
    """``size`` of ``rows`` drawn by scikit-learn's ``train_test_split`` (``test_size=size,
    random_state=seed``, the drawn part being its second), stratified by ``label_id``;
    all ``rows`` when ``size`` is 0 or their number.

    A class with a single row cannot be a stratum of its own (scikit-learn needs two):
    such rows are drawn with the largest class's. When the draw or what it leaves has
    fewer rows than there are strata, no stratification can hold and the draw is a
    plain random one.

    Raises:
        TestSetError: ``size`` is larger than the number of rows.
    """
    from sklearn.model_selection import train_test_split

    if size > len(rows):
        raise TestSetError(
            f"{key}.size: {size} rows asked for, but {source} has {len(rows)} after dropping "
            f"empty rows and duplicates; set size to at most {len(rows)} (0: all of them)")
    if size in (0, len(rows)):
        return list(rows)
    counts = Counter(r["label_id"] for r in rows)
    largest = max(sorted(counts), key=lambda c: counts[c])
    strata = [r["label_id"] if counts[r["label_id"]] > 1 else largest for r in rows]
    n_strata = len(set(strata))
    stratify = strata if min(size, len(rows) - size) >= n_strata else None
    _, drawn = train_test_split(rows, test_size=size, stratify=stratify, random_state=seed)
    return list(drawn)


def _split_keys(split_dir: Path) -> dict[str, set[str]]:
    """The normalised texts of the split's train and test splits."""
    return {name: {normalise_text(r["text"]) for r in read_jsonl(split_dir / f"{name}.jsonl")}
            for name in ("train", "test")}
