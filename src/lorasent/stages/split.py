"""Stage 2, split: clean labels, drop bad rows and duplicates, split by class.

Usage: ``lorasent split [--params params.yaml]``

Reads ``data/raw/dataset.jsonl``; writes ``data/split/{train,validation,test}.jsonl``
(``{"id", "text", "label", "label_id"}`` per line: ``id`` the row's stable id, see
:func:`row_id`; ``label_id`` the label's index in ``base.labels``) and the data report
``metrics/data.json``.

The rules, in order:
1. A row whose text is empty or only spaces is dropped (``empty_text``); a row whose
   label is empty is dropped (``empty_label``).
2. Each label is mapped onto ``base.labels``: compared after Unicode NFKC, trimming
   and case folding, directly or through ``base.label_aliases``. Any other label stops
   the stage with an error naming it and its rows (and the invisible character it
   holds, if any); nothing is written.
3. Duplicates are found on the normalised text (NFKC, case folded, whitespace
   collapsed, default-ignorable characters such as U+200B dropped: :func:`normalise_text`)
   *before* splitting, so no text can land in two splits. Copies that agree on the label
   keep the first row (``duplicate`` counts the others); a text whose copies disagree is
   dropped entirely (``conflicting_label``), since no rule can tell which label is right.
4. A stratified split (scikit-learn ``train_test_split``) by ``split.seed`` (not
   ``base.seed``, the training's: runs over training seeds share one split): the test
   split first, then validation from the rest, then the training rows. Sizes are row
   counts (int) or fractions (float) of the deduplicated rows.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorasent.atomic import atomic_dir, jsonl_text, read_json, read_jsonl, write_json
from lorasent.characters import character_name, folded, invisible_characters
from lorasent.errors import LorasentError
from lorasent.paths import DATA_REPORT, DATASET_FILE, MANIFEST, RAW_DIR, SPLIT_DIR
from lorasent.tables import label_key, mixed_script

SPLITS = ("train", "validation", "test")


class SplitError(LorasentError, ValueError):
    """Data that cannot be split as configured; the message says what to change."""


@dataclass(frozen=True)
class SplitResult:
    splits: dict[str, list[dict[str, Any]]]
    report: dict[str, Any]


def normalise_text(text: str) -> str:
    """The key duplicates are found on: NFKC, case folded, whitespace collapsed, and every
    character with no visible glyph folded (:func:`lorasent.characters.folded`: the
    default-ignorable and format characters, NUL and the other C0 controls, a zero-width
    space, a soft hyphen, a byte-order mark dropped; U+2800 BRAILLE PATTERN BLANK, U+1D159
    and the Unicode spaces a space), before NFKC (so that the characters they separated
    compose) and after it (NFKC maps U+FFA0 to U+3164, both ignorable)."""
    nfkc = unicodedata.normalize("NFKC", folded(text))
    return re.sub(r"\s+", " ", folded(nfkc)).strip().casefold()


def row_id(text: str) -> str:
    """A test row's stable id: the first 16 hex digits of the SHA-256 of its normalised text.

    The predictions files carry it instead of the text, so two revisions' predictions are
    paired row by row while the texts stay out of git. Deduplication makes it unique
    within a split (64 bits: a collision needs billions of rows).
    """
    return hashlib.sha256(normalise_text(text).encode("utf-8")).hexdigest()[:16]


def label_lookup(labels: Sequence[str], aliases: Mapping[str, str]) -> dict[str, str]:
    """Map from a normalised raw label to its configured label (labels win over aliases)."""
    lookup = {label_key(alias): target for alias, target in aliases.items()}
    lookup.update({label_key(label): label for label in labels})
    return lookup


def clean_rows(rows: Sequence[Mapping[str, Any]], labels: Sequence[str],
               aliases: Mapping[str, str], source: str = "the dataset",
               ) -> tuple[list[dict[str, Any]], Counter[str], Counter[tuple[str, str]]]:
    """Rules 1 and 2: drop empty rows, map labels onto ``labels``.

    Returns:
        kept rows ``{"row", "text", "label", "label_id"}``, drop counts by reason, and
        counts of remapped labels keyed ``(raw label, configured label)``.

    Raises:
        SplitError: labels outside ``labels`` and ``aliases``, naming each and its rows.
    """
    lookup = label_lookup(labels, aliases)
    ids = {label: i for i, label in enumerate(labels)}
    kept: list[dict[str, Any]] = []
    dropped: Counter[str] = Counter()
    remapped: Counter[tuple[str, str]] = Counter()
    unknown: dict[str, list[int]] = {}
    for r in rows:
        text, raw = str(r["text"]), str(r["label"])
        if not text.strip():
            dropped["empty_text"] += 1
            continue
        if not raw.strip():
            dropped["empty_label"] += 1
            continue
        label = lookup.get(label_key(raw))
        if label is None:
            unknown.setdefault(raw, []).append(r["row"])
            continue
        if raw != label:
            remapped[(raw, label)] += 1
        kept.append({"row": r["row"], "text": text.strip(), "label": label,
                     "label_id": ids[label]})
    if unknown:
        listed = "; ".join(
            f"{raw!r}{_invisible_note(raw)} in row{'s' if len(rws) > 1 else ''} "
            f"{', '.join(map(str, rws[:10]))}"
            + (f" and {len(rws) - 10} more" if len(rws) > 10 else "")
            for raw, rws in unknown.items())
        raise SplitError(
            f"{source}: unknown label{'s' if len(unknown) > 1 else ''} {listed} (rows count "
            f"data rows from 1). Configured labels: {list(labels)}. Add the label to "
            "base.labels, map it in base.label_aliases (e.g. mixed: neutral), or remove "
            "those rows. Nothing was written.")
    return kept, dropped, remapped


def _invisible_note(label: str) -> str:
    """`` (holds U+200B ZERO WIDTH SPACE at character 4, an invisible character)`` for a
    data label holding one (:func:`lorasent.characters.invisible_characters`: the first),
    else ``""``: no configured label holds one, so the label is unknown for that."""
    found = invisible_characters(label)
    if not found:
        mixed = mixed_script(label)
        return f" ({mixed}: fix it in the data)" if mixed else ""
    where, ch = found[0]
    more = f" and {len(found) - 1} more" if len(found) > 1 else ""
    return (f" (holds {character_name(ch)} at character {where}{more}, an invisible "
            "character: remove it from the data)")


def deduplicate(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Rule 3: one row per normalised text; texts with conflicting labels dropped."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(normalise_text(r["text"]), []).append(r)
    kept: list[dict[str, Any]] = []
    dropped: Counter[str] = Counter()
    for copies in groups.values():
        if len({c["label_id"] for c in copies}) > 1:
            dropped["conflicting_label"] += len(copies)
        else:
            kept.append(copies[0])
            dropped["duplicate"] += len(copies) - 1
    kept.sort(key=lambda r: r["row"])
    return kept, dropped


def split_counts(n: int, sizes: Mapping[str, int | float]) -> dict[str, int]:
    """Row counts per split from counts or fractions of ``n`` rows (fractions round down).

    Raises:
        SplitError: the test split is empty, or the sizes add up to more than ``n``.
    """
    counts = {name: int(size * n) if isinstance(size, float) else int(size)
              for name, size in sizes.items()}
    if counts["test"] < 1:
        raise SplitError(f"split.test_size: {sizes['test']} gives no test rows out of {n}")
    if counts["train"] < 1:
        raise SplitError(f"split.train_size: {sizes['train']} gives no training rows out of {n}")
    if sum(counts.values()) > n:
        raise SplitError(
            f"split sizes ask for {counts} = {sum(counts.values())} rows but only {n} remain "
            "after dropping empty rows and duplicates; lower split.train_size, "
            "split.validation_size or split.test_size")
    return counts


def train_sizes(rest: Sequence[dict[str, Any]]) -> tuple[int, int] | None:
    """The training split sizes below ``len(rest)`` that :func:`stratified_split` can draw
    from ``rest`` (the rows the test and validation splits left), as ``(low, high)``,
    both included; None when there is none (then only all of ``rest`` works).

    The training rows are a stratified cut of ``rest`` (scikit-learn's
    ``StratifiedShuffleSplit``, through ``train_test_split``), which needs every class
    of ``rest`` to have at least 2 rows and each side of the cut at least one row per
    class: ``classes <= size <= len(rest) - classes``.
    """
    per_class = Counter(r["label_id"] for r in rest)
    classes = len(per_class)
    if not per_class or min(per_class.values()) < 2 or classes > len(rest) - classes:
        return None
    return classes, len(rest) - classes


def check_train_size(size: int, rest: Sequence[dict[str, Any]], labels: Sequence[str]) -> None:
    """Refuse a training split of ``size`` rows, fewer than ``rest`` holds, that cannot be
    cut from ``rest`` stratified (:func:`train_sizes`), saying why and the sizes that
    work: ``len(rest)`` (all of them) and the range of :func:`train_sizes`, each of which
    :func:`stratified_split` draws.

    Raises:
        SplitError: one line naming ``split.train_size``, the rows and classes left,
            and the sizes to set.
    """
    fits = train_sizes(rest)
    if fits is not None and fits[0] <= size <= fits[1]:
        return
    n = len(rest)
    per_class = Counter(r["label_id"] for r in rest)
    classes, spare = len(per_class), n - size
    single = [labels[k] for k, count in sorted(per_class.items()) if count < 2]
    if single:
        why = (f"class{'es' if len(single) > 1 else ''} {', '.join(map(repr, single))} "
               f"{'have' if len(single) > 1 else 'has'} only 1 of them, too few to split "
               "stratified")
    elif spare < classes:
        why = f"too few to leave out stratified (one per class, {classes})"
    else:
        why = f"and {size} training rows are too few to draw stratified (one per class, {classes})"
    between = ("" if fits is None else f" or {fits[0]}" if fits[0] == fits[1]
               else f" or from {fits[0]} to {fits[1]}")
    raise SplitError(
        f"split.train_size {size} leaves {spare} of the {n} rows the test and validation "
        f"splits left unused, {why}; set split.train_size to {n} (all of them){between}")


def stratified_split(rows: Sequence[dict[str, Any]], counts: Mapping[str, int], seed: int,
                     labels: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Rule 4: test, then validation, then train, each stratified by ``label_id`` and
    drawn from all the rows the earlier cuts left.

    Raises:
        SplitError: a class too small to stratify, naming the class counts.
    """
    from sklearn.model_selection import train_test_split

    def cut(pool: list[dict[str, Any]], take: int, rest: int | None, what: str
            ) -> list[list[dict[str, Any]]]:
        y = [r["label_id"] for r in pool]
        try:
            return train_test_split(pool, test_size=take, train_size=rest, stratify=y,
                                    random_state=seed)
        except ValueError as err:
            per_class = {labels[k]: v for k, v in sorted(Counter(y).items())}
            raise SplitError(
                f"cannot draw a stratified {what} split of {take} rows from {len(pool)} rows "
                f"with classes {per_class}: {err}. Every class needs at least 2 rows and "
                "the split at least one row per class; add data, merge the small class "
                "through base.label_aliases, or change the split sizes") from None

    # Each cut takes its rows from everything left, so the test split depends only on
    # the seed and test_size (and validation on those and validation_size): experiments
    # with other train sizes are scored on the same test rows.
    rest, test = cut(list(rows), counts["test"], None, "test")
    validation: list[dict[str, Any]] = []
    if counts["validation"]:
        rest, validation = cut(rest, counts["validation"], None, "validation")
    spare = len(rest) - counts["train"]
    if spare > 0:
        check_train_size(counts["train"], rest, labels)
        train, _ = cut(rest, spare, counts["train"], "train")
    else:
        train = rest
    return {"train": train, "validation": validation, "test": test}


def run_split(*, labels: Sequence[str], aliases: Mapping[str, str],
              sizes: Mapping[str, int | float], seed: int, raw_dir: Path = RAW_DIR,
              out_dir: Path = SPLIT_DIR, report_path: Path = DATA_REPORT) -> SplitResult:
    """Clean, deduplicate and split the fetched rows; write the splits and the data report.

    Everything is checked before anything is written: on error no output changes.

    Raises:
        SplitError: unknown labels, impossible sizes, a class too small to stratify.
    """
    raw_rows = read_jsonl(raw_dir / DATASET_FILE)
    source = read_json(raw_dir / MANIFEST)["source"]
    cleaned, dropped, remapped = clean_rows(raw_rows, labels, aliases, source)
    unique, dup_dropped = deduplicate(cleaned)
    dropped.update(dup_dropped)
    splits = stratified_split(unique, split_counts(len(unique), sizes), seed, labels)
    keys = {name: {normalise_text(r["text"]) for r in rows} for name, rows in splits.items()}
    overlap = {f"{a}_{b}": len(keys[a] & keys[b])
               for a, b in (("train", "test"), ("train", "validation"), ("validation", "test"))}
    if any(overlap.values()):  # deduplication makes this impossible; guard the invariant
        raise SplitError(f"splits share texts {overlap}; this is a bug in lorasent")
    report = {
        "rows_read": len(raw_rows),
        "rows_kept": len(unique),
        "dropped": {reason: dropped.get(reason, 0) for reason in
                    ("empty_text", "empty_label", "duplicate", "conflicting_label")},
        "split_rows": {name: len(rows) for name, rows in splits.items()},
        "class_counts": {name: {label: sum(r["label"] == label for r in rows) for label in labels}
                         for name, rows in splits.items()},
        "overlap": overlap,
        "label_remaps": [{"from": raw, "to": label, "rows": n}
                         for (raw, label), n in sorted(remapped.items())],
    }
    with atomic_dir(out_dir) as tmp:
        for name, rows in splits.items():
            (tmp / f"{name}.jsonl").write_text(jsonl_text(
                {"id": row_id(r["text"]), "text": r["text"], "label": r["label"],
                 "label_id": r["label_id"]} for r in rows),
                encoding="utf-8")
        write_json(report_path, report)
    return SplitResult(splits, report)
