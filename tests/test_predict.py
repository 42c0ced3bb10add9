"""Using a trained adapter: predict equals evaluate, export equals base + adapter."""

import csv
import json
import os
import re
import sys
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from lorasent.cli import main
from lorasent.contracts import AdapterRecord, EvalMetrics
from lorasent.metrics import probabilities
from lorasent.modeling import AdapterMismatchError, load_trained_model
from lorasent.params import merge, parse_params
from lorasent.scoring import PromptEncoder, score_texts
from lorasent.stages.baseline import run_baseline
from lorasent.stages.evaluate import run_evaluate
from lorasent.stages.fetch import fetch_dataset, fetch_model
from lorasent.stages.split import run_split
from lorasent.stages.train import run_train
from lorasent.tables import TableError
from lorasent.tools.predict import open_inputs, predict
from test_contracts import round_trip
from test_outputs import check_table_on_terminal, run_in_terminal

pytestmark = pytest.mark.integration

TINY = {"split": {"train_size": 12, "validation_size": 0, "test_size": 12},
        "train": {"max_steps": 1, "per_device_train_batch_size": 4, "logging_steps": 1},
        "evaluate": {"batch_size": 12, "test_sets": {}}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, packaged_model_dir, repo_params_raw):
    """A tiny run of the five stages, in-process, in a temporary folder."""
    root = tmp_path_factory.mktemp("trained")
    params = parse_params(merge(repo_params_raw, TINY))
    record = params.model_dump(mode="json")
    paths = {"model_dir": root / "base", "split_dir": root / "split",
             "provenance_dir": root / "provenance"}
    fetch_model(str(packaged_model_dir), paths["model_dir"])
    fetch_dataset(params.data.source, text_column="text", label_column="label",
                  encoding="utf-8", hf_split="train", out_dir=root / "raw")
    run_split(labels=params.base.labels, aliases=params.base.label_aliases,
              sizes={"train": 12, "validation": 0, "test": 12}, seed=params.split.seed,
              raw_dir=root / "raw", out_dir=paths["split_dir"], report_path=root / "data.json")
    run_baseline(base=params.base, prompt=params.prompt, batch_size=12, params_record=record,
                 metrics_path=root / "baseline.json",
                 predictions_path=root / "baseline_predictions.csv",
                 calibrated_predictions_path=root / "baseline_calibrated_predictions.csv",
                 confusion_path=root / "baseline_confusion.json", **paths)
    run_train(base=params.base, prompt=params.prompt, train=params.train, params_record=record,
              adapter_dir=root / "adapter", live_dir=root / "train",
              checkpoint_dir=root / "checkpoints",
              validation_metrics_path=root / "validation.json", **paths)
    run_evaluate(base=params.base, prompt=params.prompt, evaluate=params.evaluate,
                 split_seed=params.split.seed,
                 params_record=record, adapter_dir=root / "adapter",
                 baseline_path=root / "baseline.json",
                 baseline_predictions_path=root / "baseline_predictions.csv",
                 metrics_path=root / "eval.json",
                 predictions_path=root / "predictions.csv",
                 confusion_path=root / "confusion.json", **paths)
    return root


@pytest.fixture(scope="module")
def loaded(trained):
    return load_trained_model(trained / "adapter", trained / "base")


def _evaluate_predictions(root):
    with open(root / "predictions.csv", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_predict_equals_evaluate_on_the_test_split(trained, loaded):
    model, encoder, record, _ = loaded
    texts = [json.loads(line)["text"] for line in
             (trained / "split" / "test.jsonl").read_text(encoding="utf-8").splitlines()]
    got = predict(model, encoder, record.labels, texts, batch_size=8)
    expected = _evaluate_predictions(trained)
    assert [p.label for p in got] == [row["predicted"] for row in expected]
    for p, row in zip(got, expected, strict=True):
        assert p.probabilities is not None
        for label in record.labels:
            assert p.probabilities[label] == pytest.approx(float(row[f"p_{label}"]), abs=1e-5)


def test_predict_cli_writes_jsonl_in_input_order(trained, tmp_path, monkeypatch):
    monkeypatch.chdir(trained)
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(main, ["predict", "--adapter", "adapter", "--base", "base",
                                       "--input", "split/test.jsonl", "--output", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    expected = _evaluate_predictions(trained)
    assert [r["label"] for r in rows] == [row["predicted"] for row in expected]
    assert all(abs(sum(r["probabilities"].values()) - 1) < 1e-6 for r in rows)
    # The input's other keys come first; its own `label` is renamed beside the predicted.
    assert list(rows[0])[:3] == ["id", "input_label", "label_id"]
    assert [(r["id"], r["input_label"]) for r in rows] == [(row["id"], row["actual"])
                                                          for row in expected]
    assert isinstance(rows[0]["label_id"], int)  # JSON values keep their type


def test_predict_cli_csv_keeps_named_columns(trained, tmp_path, monkeypatch):
    monkeypatch.chdir(trained)
    source = tmp_path / "in.csv"
    source.write_text("id;text;note\na1;What a great day!;x\na2;;y\n", encoding="utf-8")
    out = tmp_path / "out.csv"
    result = CliRunner().invoke(main, ["predict", "--adapter", "adapter", "--base", "base",
                                       "--input", str(source), "--keep", "id", "--keep",
                                       "note", "--output", str(out)])
    assert result.exit_code == 0, result.output
    with open(out, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["id", "input_note", "text", "label", "p_negative", "p_neutral",
                             "p_positive", "note"]
    assert [(r["id"], r["input_note"], r["text"]) for r in rows] == [
        ("a1", "x", "What a great day!"), ("a2", "y", "")]
    assert (rows[1]["label"], rows[1]["note"]) == ("", "empty text")


def test_predict_cli_prints_a_table(trained, monkeypatch):
    monkeypatch.chdir(trained)
    result = CliRunner().invoke(main, ["predict", "--adapter", "adapter", "--base", "base",
                                       "What a great day!", "", "awful service, never again"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].split() == ["label", "negative", "neutral", "positive", "text"]
    assert lines[2].startswith("-") and lines[2].endswith("''  (empty text)")
    assert re.match(r"(negative|neutral|positive)\s+0\.\d{6}", lines[1])


@pytest.mark.slow
def test_predict_table_in_a_terminal_has_no_progress_bar_in_it(tiny_run):
    """stdout and stderr on one pseudo-terminal, as a user runs it: the bars (stderr)
    never draw into the table's rows, and none follows it."""
    texts = ["What a great day!", "", "awful service, never again"]
    status, lines = run_in_terminal(
        [sys.executable, "-m", "lorasent.cli", "predict", "--adapter", "models/adapter",
         "--base", "models/base", *texts], tiny_run)
    assert status == 0, lines
    check_table_on_terminal(lines, texts)


def test_empty_and_very_long_texts_get_defined_results(loaded):
    model, encoder, record, _ = loaded
    empty, blank, long = predict(model, encoder, record.labels, ["", "   ", "bad " * 2500],
                                 batch_size=8)
    assert (empty.label, empty.probabilities, empty.note) == (None, None, "empty text")
    assert blank.label is None
    assert long.label in record.labels and len(long.text) == 10_000
    assert long.probabilities is not None
    assert sum(long.probabilities.values()) == pytest.approx(1.0)


def _texts(path, **kw):
    with open_inputs(str(path), **kw) as inputs:
        return [text for text, _ in inputs.rows]


def test_non_utf8_input_names_file_and_line(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_bytes("fine\nalso fine\ncaf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(TableError, match=r"texts.txt: line 3 is not valid utf-8"):
        _texts(path)


def test_input_formats(tmp_path):
    (tmp_path / "a.csv").write_text('\ufefftext,id\n"one, with comma",1\n"two\nlines",2\n',
                                    encoding="utf-8")
    assert _texts(tmp_path / "a.csv") == ["one, with comma", "two\nlines"]
    (tmp_path / "b.jsonl").write_text('{"text": "x"}\n\n{"text": null}\n', encoding="utf-8")
    assert _texts(tmp_path / "b.jsonl") == ["x", ""]
    (tmp_path / "c.txt").write_text("first\n\nthird\n", encoding="utf-8")
    assert _texts(tmp_path / "c.txt") == ["first", "", "third"]
    with pytest.raises(TableError, match="no column 'review'"):
        _texts(tmp_path / "a.csv", text_column="review")


def test_other_base_model_is_refused(trained, tmp_path):
    fake = tmp_path / "other-base"
    fake.mkdir()
    (fake / "manifest.json").write_text(json.dumps({"sha256": "0" * 64}))
    with pytest.raises(AdapterMismatchError, match="Point --base at the model"):
        load_trained_model(trained / "adapter", fake)


def test_export_loads_with_plain_transformers_and_predicts_the_same(trained, loaded, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, encoder, record, _ = loaded
    texts = ["I love it", "the flight was delayed again", "Meeting at 3pm", "meh"]
    expected = probabilities(score_texts(model, encoder, texts, 8))

    out = tmp_path / "exported"
    result = CliRunner().invoke(main, ["export", "--adapter", str(trained / "adapter"),
                                       "--base", str(trained / "base"), "--out", str(out),
                                       "--metrics", str(trained / "eval.json")])
    assert result.exit_code == 0, result.output
    assert "with the evaluation of" in result.output
    # every file readable as the rest: the weights too (libraries write them 0600)
    mask = os.umask(0)
    os.umask(mask)
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in out.iterdir()} == {
        p.name: oct(0o666 & ~mask) for p in out.iterdir()}
    # the model card gives this adapter's metrics, from its eval.json
    evals = json.loads((trained / "eval.json").read_text(encoding="utf-8"))
    card = (out / "README.md").read_text(encoding="utf-8")
    assert (f"| **this model** | **{evals['accuracy']:.3f}** [{evals['accuracy_ci95_low']:.3f}, "
            f"{evals['accuracy_ci95_high']:.3f}] | **{evals['macro_f1']:.3f}**") in card
    assert f"on {evals['test_rows']} held-out test rows" in card
    assert {"model.safetensors", "config.json", "tokenizer.json", "lorasent.json",
            "README.md"} <= {p.name for p in out.iterdir()}
    # the written records and metrics are the contracts' own bytes (issue 29, item 2)
    for path, model in ((trained / "adapter" / "lorasent.json", AdapterRecord),
                        (out / "lorasent.json", AdapterRecord),
                        (trained / "eval.json", EvalMetrics)):
        text = path.read_text(encoding="utf-8")
        assert round_trip(text, model) == text, path
    exported = json.loads((out / "lorasent.json").read_text(encoding="utf-8"))
    assert exported == {**json.loads((trained / "adapter" / "lorasent.json").read_text(
        encoding="utf-8")), "exported_from": str(trained / "adapter")}
    assert list(exported)[:6] == ["mode", "labels", "label2id", "max_length", "base_model",
                                  "params"]
    assert list(exported)[6:] == ["label_words", "label_token_ids", "template", "exported_from"]
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    saved = json.loads((out / "lorasent.json").read_text(encoding="utf-8"))
    enc = PromptEncoder.create(tokenizer, saved["template"], saved["label_words"],
                               saved["max_length"])
    got = probabilities(score_texts(merged, enc, texts, 8))
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert merged.config.id2label == dict(enumerate(record.labels))

    # The README's snippet, run as written from inside the folder after the folder was
    # moved, gives the same labels.
    moved = tmp_path / "moved" / "model"
    moved.parent.mkdir()
    out.rename(moved)
    found = re.search(r"```python\n(.*?)```", (moved / "README.md").read_text(), re.S)
    assert found is not None
    snippet = found.group(1)
    assert str(out) not in snippet
    namespace: dict[str, Any] = {}
    cwd = os.getcwd()
    os.chdir(moved)
    try:
        exec(snippet.replace('print(classify("I love this phone"))', ""), namespace)
    finally:
        os.chdir(cwd)
    for text, row in zip(texts, expected, strict=True):
        label, probs = namespace["classify"](text)
        assert label == record.labels[int(np.argmax(row))]
        assert list(probs.values()) == pytest.approx(list(row), abs=1e-4)
