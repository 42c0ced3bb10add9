"""Label normalisation, deduplication and the stratified split, on the shared cases."""

import json
import re
from collections import Counter

import pytest

from conftest import CASES
from lorasent.stages.fetch import fetch_dataset
from lorasent.stages.split import (
    SplitError,
    clean_rows,
    deduplicate,
    normalise_text,
    row_id,
    run_split,
    split_counts,
    stratified_split,
)

LABELS = ("negative", "neutral", "positive")
ALIASES = {"POS": "positive", "NEG": "negative", "积极": "positive", "中性": "neutral",
           "消极": "negative"}


def _raw(tmp_path, case, **read):
    raw = tmp_path / "raw"
    fetch_dataset(str(case), text_column=read.get("text_column", "text"),
                  label_column=read.get("label_column", "label"), encoding="utf-8",
                  hf_split="train", out_dir=raw)
    return raw


def _split(tmp_path, raw, sizes, labels=LABELS, aliases=ALIASES, seed=0):
    return run_split(labels=labels, aliases=aliases, sizes=sizes, seed=seed, raw_dir=raw,
                     out_dir=tmp_path / "split", report_path=tmp_path / "data.json")


def _jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_empty_texts_and_labels_are_dropped_and_counted(tmp_path):
    raw = _raw(tmp_path, CASES / "empty_and_missing.csv")
    rows = _jsonl(raw / "dataset.jsonl")
    kept, dropped, remapped = clean_rows(rows, LABELS, ALIASES)
    assert [r["text"] for r in kept] == ["Terrible customer service", "Okay I guess", "Loved it"]
    assert dropped == Counter(empty_text=2, empty_label=1)
    assert not remapped


def test_label_variants_land_in_the_configured_classes(tmp_path):
    raw = _raw(tmp_path, CASES / "label_variants.csv")
    kept, dropped, remapped = clean_rows(_jsonl(raw / "dataset.jsonl"), LABELS, ALIASES)
    assert [r["label"] for r in kept] == ["positive", "positive", "negative", "negative",
                                          "neutral", "positive", "neutral", "negative"]
    assert [r["label_id"] for r in kept] == [2, 2, 0, 0, 1, 2, 1, 0]
    assert not dropped
    assert remapped == Counter({("Positive ", "positive"): 1, ("POS", "positive"): 1,
                                (" negative", "negative"): 1, ("NEG", "negative"): 1,
                                ("Neutral", "neutral"): 1, ("积极 ", "positive"): 1,
                                ("中性", "neutral"): 1, ("消极", "negative"): 1})


def test_label_variants_report_shows_remaps(tmp_path):
    raw = _raw(tmp_path, CASES / "label_variants.csv")
    result = _split(tmp_path, raw, {"train": 5, "validation": 0, "test": 3})
    report = json.loads((tmp_path / "data.json").read_text(encoding="utf-8"))
    assert report == result.report
    assert report["rows_read"] == report["rows_kept"] == 8
    assert {"from": "POS", "to": "positive", "rows": 1} in report["label_remaps"]
    assert len(report["label_remaps"]) == 8
    assert report["class_counts"]["test"] == {"negative": 1, "neutral": 1, "positive": 1}


def test_unknown_label_names_label_and_row_and_writes_nothing(tmp_path):
    raw = _raw(tmp_path, CASES / "unknown_label.csv")
    with pytest.raises(SplitError) as err:
        _split(tmp_path, raw, {"train": 2, "validation": 0, "test": 2})
    message = str(err.value)
    assert "unknown label 'mixed' in row 4" in message
    assert "unknown_label.csv" in message
    assert "base.label_aliases" in message
    assert not (tmp_path / "split").exists()
    assert not (tmp_path / "data.json").exists()


def test_failed_split_keeps_previous_outputs(tmp_path):
    good = _raw(tmp_path / "good", CASES / "label_variants.csv")
    _split(tmp_path, good, {"train": 5, "validation": 0, "test": 3})
    before = {p.name: p.read_bytes() for p in (tmp_path / "split").iterdir()}
    bad = _raw(tmp_path / "bad", CASES / "unknown_label.csv")
    with pytest.raises(SplitError):
        _split(tmp_path, bad, {"train": 2, "validation": 0, "test": 2})
    assert {p.name: p.read_bytes() for p in (tmp_path / "split").iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_duplicates_are_removed_before_splitting(tmp_path):
    raw = _raw(tmp_path, CASES / "duplicates_leak.csv")
    result = _split(tmp_path, raw, {"train": 12, "validation": 0, "test": 6})
    report = result.report
    assert report["rows_read"] == 42
    assert report["rows_kept"] == 18
    assert report["dropped"] == {"empty_text": 0, "empty_label": 0, "duplicate": 16,
                                 "conflicting_label": 8}
    assert report["overlap"] == {"train_test": 0, "train_validation": 0, "validation_test": 0}
    texts = {name: [normalise_text(r["text"]) for r in _jsonl(tmp_path / "split" /
                                                                f"{name}.jsonl")]
             for name in ("train", "test")}
    assert not set(texts["train"]) & set(texts["test"])
    everything = texts["train"] + texts["test"]
    assert len(everything) == len(set(everything)) == 18
    assert "exactly what i needed" not in everything       # conflicting copies dropped
    assert "the manual is in english" not in everything
    assert "the charger stopped working" in everything      # agreeing copies kept once


def test_chinese_label_ids_follow_params_order(tmp_path):
    labels = ("消极", "中性", "积极")
    raw = _raw(tmp_path, CASES / "zh_labels.jsonl")
    _split(tmp_path, raw, {"train": 3, "validation": 0, "test": 3}, labels=labels, aliases={})
    for name in ("train", "test"):
        rows = _jsonl(tmp_path / "split" / f"{name}.jsonl")
        assert sorted(r["label_id"] for r in rows) == [0, 1, 2]
        assert all(labels.index(r["label"]) == r["label_id"] for r in rows)


def test_dedup_rule():
    rows = [{"row": 1, "text": "A  b", "label_id": 0}, {"row": 2, "text": "a b ", "label_id": 0},
            {"row": 3, "text": "c", "label_id": 1}, {"row": 4, "text": "C", "label_id": 2}]
    kept, dropped = deduplicate(rows)
    assert [r["row"] for r in kept] == [1]
    assert dropped == Counter(duplicate=1, conflicting_label=2)


def test_normalise_text():
    assert normalise_text("  Ｈello\tWORLD \n") == "hello world"


@pytest.mark.parametrize("invisible", ["\u200b", "\u00ad", "\ufeff", "\u2060", "\u180e",
                                       "\ufe0f", "\U000e0041", "\u3164"])
def test_invisible_characters_make_no_new_text(invisible):
    """Issue 51: a default-ignorable character added to a text leaves its key, its id and
    its deduplication as they were."""
    text = f"I{invisible} lo{invisible}ve it{invisible}"
    assert normalise_text(text) == normalise_text("I love it") == "i love it"
    assert row_id(text) == row_id("I love it")
    kept, dropped = deduplicate([{"row": 1, "text": "I love it", "label_id": 0},
                                 {"row": 2, "text": text, "label_id": 0}])
    assert [r["row"] for r in kept] == [1] and dropped == Counter(duplicate=1)


@pytest.mark.parametrize(("text", "same_as"), [
    ("I\u2800love\u2800it", "I love it"), ("I love it\u2800", "I love it"),
    ("I\U0001d159love it", "I love it"), ("I lo\0ve it", "I love it"),
    ("I lo\x01ve\x7f it", "I love it"), ("I love\ufff9 it", "I love it"),
    ("I\u3000love\u2028it", "I love it"), ("\0\u2800I love it\u200b", "I love it"),
    ("I lo\ud800ve it", "I love it"),
])
def test_every_character_with_no_visible_glyph_is_folded_in_the_key(text, same_as):
    """Issue 62: U+2800 BRAILLE PATTERN BLANK, U+1D159 or NUL inside a text gave it a key
    of its own (a blank glyph shows as a gap: a space; a zero-width one as nothing)."""
    assert normalise_text(text) == normalise_text(same_as) == "i love it"
    assert row_id(text) == row_id(same_as)
    kept, dropped = deduplicate([{"row": 1, "text": same_as, "label_id": 0},
                                 {"row": 2, "text": text, "label_id": 0}])
    assert [r["row"] for r in kept] == [1] and dropped == Counter(duplicate=1)


def test_the_c1_controls_of_mojibake_are_kept_in_the_key():
    """``â\\x80\\x99`` is ``’`` read as Latin-1: a character the original shows."""
    assert normalise_text("itâ\x80\x99s") == "itâ\x80\x99s" != normalise_text("itâs")


def test_ignorables_between_a_letter_and_its_mark_are_dropped_before_nfkc():
    assert normalise_text("cafe\u200b\u0301") == normalise_text("café") == "café"


def test_a_data_label_with_an_invisible_character_is_named():
    rows = [{"row": 1, "text": "a", "label": "positive"},
            {"row": 2, "text": "b", "label": "positive\u200b"}]
    with pytest.raises(SplitError) as err:
        clean_rows(rows, LABELS, {}, "data.csv")
    assert str(err.value).startswith(
        "data.csv: unknown label 'positive\\u200b' (holds U+200B ZERO WIDTH SPACE at "
        "character 9, an invisible character: remove it from the data) in row 2 (rows count "
        "data rows from 1).")


def test_a_data_label_of_mixed_scripts_is_named_with_its_look_alike():
    rows = [{"row": 1, "text": "a", "label": "p\u043esitive"}]
    with pytest.raises(SplitError) as err:
        clean_rows(rows, LABELS, {}, "data.csv")
    assert str(err.value).startswith(
        "data.csv: unknown label 'p\u043esitive' (mixes scripts: U+043E CYRILLIC SMALL LETTER O "
        "at character 2 is Cyrillic in a Latin name, a look-alike of the Latin 'o': fix it in "
        "the data) in row 1 (rows count data rows from 1).")


def test_a_decomposed_data_label_is_its_composed_label():
    kept, _, remapped = clean_rows([{"row": 1, "text": "a", "label": "cafe\u0301"}],
                                   ["café", "thé"], {})
    assert kept[0]["label"] == "café" and remapped == Counter({("cafe\u0301", "café"): 1})


def test_row_id_is_a_short_hash_of_the_normalised_text():
    assert row_id("  Ｈello\tWORLD \n") == row_id("hello world") == "b94d27b9934d3e08"


def test_every_split_row_carries_its_id(tmp_path):
    raw = _raw(tmp_path, CASES / "label_variants.csv")
    _split(tmp_path, raw, {"train": 0.5, "validation": 0, "test": 0.5})
    for name in ("train", "test"):
        rows = _jsonl(tmp_path / "split" / f"{name}.jsonl")
        assert rows and [list(r) for r in rows] == [["id", "text", "label", "label_id"]] * len(rows)
        assert [r["id"] for r in rows] == [row_id(r["text"]) for r in rows]


def test_split_counts_from_fractions_and_counts():
    assert split_counts(100, {"train": 0.8, "validation": 0, "test": 0.2}) == {
        "train": 80, "validation": 0, "test": 20}
    assert split_counts(5000, {"train": 4500, "validation": 0, "test": 500})["train"] == 4500
    with pytest.raises(SplitError, match="only 10 remain"):
        split_counts(10, {"train": 8, "validation": 0, "test": 5})
    with pytest.raises(SplitError, match="split.test_size"):
        split_counts(10, {"train": 8, "validation": 0, "test": 0.01})


def _synthetic(tmp_path, n_per_class=(60, 30, 10)):
    path = tmp_path / "synthetic.csv"
    lines = ["text,label"]
    for label, n in zip(LABELS, n_per_class, strict=True):
        lines += [f"{label} example number {i},{label}" for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return _raw(tmp_path, path)


def test_split_is_stratified_deterministic_and_has_validation(tmp_path):
    raw = _synthetic(tmp_path)
    sizes = {"train": 50, "validation": 20, "test": 20}
    first = _split(tmp_path, raw, sizes, seed=7)
    assert first.report["split_rows"] == {"train": 50, "validation": 20, "test": 20}
    assert first.report["class_counts"]["test"] == {"negative": 12, "neutral": 6, "positive": 2}
    assert first.report["class_counts"]["validation"] == {"negative": 12, "neutral": 6,
                                                          "positive": 2}
    files = {p.name: p.read_bytes() for p in (tmp_path / "split").iterdir()}
    _split(tmp_path, raw, sizes, seed=7)
    assert {p.name: p.read_bytes() for p in (tmp_path / "split").iterdir()} == files
    _split(tmp_path, raw, sizes, seed=8)
    assert (tmp_path / "split" / "test.jsonl").read_bytes() != files["test.jsonl"]


def test_class_too_small_to_stratify_names_the_counts(tmp_path):
    raw = _synthetic(tmp_path, (10, 10, 1))
    with pytest.raises(SplitError) as err:
        _split(tmp_path, raw, {"train": 10, "validation": 0, "test": 6})
    assert "'positive': 1" in str(err.value)
    assert not (tmp_path / "split").exists()


def test_a_split_that_leaves_one_spare_row_says_which_train_sizes_work(tmp_path):
    raw = _synthetic(tmp_path)  # 100 rows, 3 classes
    with pytest.raises(SplitError) as err:
        _split(tmp_path, raw, {"train": 59, "validation": 20, "test": 20})
    assert str(err.value) == (
        "split.train_size 59 leaves 1 of the 60 rows the test and validation splits left "
        "unused, too few to leave out stratified (one per class, 3); set split.train_size to "
        "60 (all of them) or from 3 to 57")
    assert not (tmp_path / "split").exists()
    for train in (60, 57, 3):
        assert _split(tmp_path, raw, {"train": train, "validation": 20, "test": 20}
                      ).report["split_rows"]["train"] == train


def _suggested(message: str) -> list[int]:
    """Every split.train_size the message suggests: N, and each size of "from A to B"."""
    found = re.search(r"set split\.train_size to (\d+) \(all of them\)"
                      r"(?: or (?:from (\d+) to (\d+)|(\d+)))?$", message)
    assert found, message
    whole, low, high, one = found.groups()
    sizes = [int(whole)]
    if one:
        sizes.append(int(one))
    if low:
        sizes += range(int(low), int(high) + 1)
    return sizes


def test_a_split_too_small_for_its_classes_suggests_only_the_size_that_works(tmp_path):
    """Issue 51: 5 rows left for 3 classes suggested split.train_size 2, which then failed
    with "cannot draw a stratified train split of 3 rows from 5 rows"."""
    raw = _synthetic(tmp_path, (5, 5, 4))   # 14 rows; the test split takes 9, 5 are left
    with pytest.raises(SplitError) as err:
        _split(tmp_path, raw, {"train": 3, "validation": 0, "test": 9})
    assert str(err.value) == (
        "split.train_size 3 leaves 2 of the 5 rows the test and validation splits left "
        "unused, class 'positive' has only 1 of them, too few to split stratified; set "
        "split.train_size to 5 (all of them)")
    for size in (2, 1):
        with pytest.raises(SplitError) as err:
            _split(tmp_path, raw, {"train": size, "validation": 0, "test": 9})
        assert str(err.value).endswith("set split.train_size to 5 (all of them)")
    assert _split(tmp_path, raw, {"train": 5, "validation": 0, "test": 9}
                  ).report["split_rows"] == {"train": 5, "validation": 0, "test": 9}


def test_too_few_training_rows_for_the_classes_suggest_the_sizes_that_work(tmp_path):
    raw = _synthetic(tmp_path, (6, 6, 6))   # the test split leaves 2 rows of each class
    with pytest.raises(SplitError) as err:
        _split(tmp_path, raw, {"train": 2, "validation": 0, "test": 12})
    assert str(err.value) == (
        "split.train_size 2 leaves 4 of the 6 rows the test and validation splits left "
        "unused, and 2 training rows are too few to draw stratified (one per class, 3); set "
        "split.train_size to 6 (all of them) or 3")
    for size in (6, 3):
        assert _split(tmp_path, raw, {"train": size, "validation": 0, "test": 12}
                      ).report["split_rows"]["train"] == size


def test_every_suggested_train_size_splits(tmp_path):
    """Every size any such message suggests, on small data sets of 3 classes, for every
    test and train size that fails, then draws the split (stratified_split itself)."""
    checked = 0
    for per_class in ((6, 3, 3), (4, 3, 2)):
        rows = [{"row": len(per_class) * i + k, "text": f"{k} {i}", "label": LABELS[k],
                 "label_id": k} for k, n in enumerate(per_class) for i in range(n)]
        for test in range(len(per_class), len(rows) - 1):
            for train in range(1, len(rows) - test + 1):
                counts = {"train": train, "validation": 0, "test": test}
                try:
                    stratified_split(rows, counts, 0, LABELS)
                    continue
                except SplitError as err:
                    if "split.train_size" not in str(err):
                        continue   # the test cut itself fails: no size suggested
                    sizes = _suggested(str(err))
                for size in sizes:
                    split = stratified_split(rows, {**counts, "train": size}, 0, LABELS)
                    assert len(split["train"]) == size
                    checked += 1
    assert checked > 20


def test_test_split_does_not_depend_on_the_train_size(tmp_path):
    raw = _synthetic(tmp_path)
    _split(tmp_path, raw, {"train": 30, "validation": 10, "test": 20}, seed=3)
    test, validation = (tmp_path / "split" / "test.jsonl").read_bytes(), (
        tmp_path / "split" / "validation.jsonl").read_bytes()
    small = {r["text"] for r in _jsonl(tmp_path / "split" / "train.jsonl")}
    _split(tmp_path, raw, {"train": 60, "validation": 10, "test": 20}, seed=3)
    assert (tmp_path / "split" / "test.jsonl").read_bytes() == test
    assert (tmp_path / "split" / "validation.jsonl").read_bytes() == validation
    large = {r["text"] for r in _jsonl(tmp_path / "split" / "train.jsonl")}
    assert len(large) == 60 and len(small) == 30
