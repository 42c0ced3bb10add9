"""Sequence-classification mode: head, pad token, padding sides, label order, round trip.

Real models: the packaged Gemma 3 270M with a head, MiniLM-L6 (BERT) trained for two
steps, and a tiny random BERT saved without the pooler, which peft would not save.
"""

import json
import logging
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel

from conftest import LABELS, minilm_folder, train_in
from lorasent.contracts import AdapterRecord
from lorasent.metrics import probabilities
from lorasent.modeling import (
    HeadNotSavedError,
    load_base_model,
    load_tokenizer,
    load_trained_model,
    new_weights_note,
)
from lorasent.params import merge, parse_params
from lorasent.scoring import TextEncoder, score_texts
from lorasent.stages.fetch import fetch_model
from test_contracts import round_trip

TEXTS = ["I love this phone", "the flight was delayed again, third time this month",
         "ok", "Meeting moved to 3pm tomorrow", "worst customer service ever!!!"]


@pytest.fixture(scope="module")
def gemma_head(packaged_model_dir):
    model, tokenizer, _ = load_base_model(packaged_model_dir, device="cpu", precision="fp32",
                                          attn_implementation="sdpa", mode="seq_cls",
                                          labels=LABELS)
    return model, tokenizer


@pytest.mark.integration
def test_head_follows_the_params_label_order(gemma_head):
    model, tokenizer = gemma_head
    assert type(model).__name__ == "Gemma3TextForSequenceClassification"
    assert model.config.num_labels == 3
    assert model.config.id2label == {0: "positive", 1: "negative", 2: "neutral"}
    assert model.config.label2id == {"positive": 0, "negative": 1, "neutral": 2}
    assert model.newly_initialized == ["score.weight"]
    assert model.config.pad_token_id == tokenizer.pad_token_id == 0
    assert new_weights_note(model.newly_initialized) == (logging.INFO, GEMMA_HEAD_NOTE)


# What train logs after transformers' load report of the packaged Gemma with a head.
GEMMA_HEAD_NOTE = (
    "seq_cls: score.weight, MISSING in transformers' load report above, is the new "
    "classification head: initialised here and trained by this run (peft's modules_to_save, "
    "saved with the adapter), so MISSING is expected there")
BERT_HEAD = (
    "seq_cls: classifier.bias, classifier.weight, MISSING in transformers' load report above, "
    "are the new classification head: initialised here and trained by this run (peft's "
    "modules_to_save, saved with the adapter)")
NOT_THE_HEAD = (
    "and not the head: not in the base model's checkpoint, initialised at random, and trained "
    "here only because train.lora.modules_to_save lists its module; check that base.model is "
    "the model you meant")


def test_only_the_heads_missing_weights_are_explained_away():
    assert new_weights_note([]) is None
    assert new_weights_note(["classifier.bias", "classifier.weight"]) == (
        logging.INFO, f"{BERT_HEAD}, so MISSING is expected there")
    roberta = new_weights_note(["classifier.dense.weight", "classifier.out_proj.bias"])
    assert roberta is not None and roberta[0] == logging.INFO  # a head of several layers
    pooler = ["bert.pooler.dense.bias", "bert.pooler.dense.weight"]
    assert new_weights_note(["classifier.bias", "classifier.weight", *pooler]) == (
        logging.WARNING, f"{BERT_HEAD}; but {', '.join(pooler)} are MISSING too {NOT_THE_HEAD}")
    assert new_weights_note(["model.layers.0.mlp.down_proj.weight"]) == (
        logging.WARNING, f"seq_cls: model.layers.0.mlp.down_proj.weight is MISSING {NOT_THE_HEAD}")
    assert new_weights_note(["scores.weight"]) == (  # not `score`
        logging.WARNING, f"seq_cls: scores.weight is MISSING {NOT_THE_HEAD}")


@pytest.mark.integration
@pytest.mark.parametrize("side", ["left", "right"])
def test_batched_logits_equal_one_by_one_on_either_padding_side(gemma_head, side):
    model, tokenizer = gemma_head
    original = tokenizer.padding_side
    tokenizer.padding_side = side
    try:
        encoder = TextEncoder(tokenizer, 64, 3)
        seqs = [encoder.encode(t) for t in TEXTS]
        assert len({len(s) for s in seqs}) > 1  # the batch really is padded
        with torch.inference_mode():
            batched = encoder.score(model, seqs)
            single = torch.cat([encoder.score(model, [s]) for s in seqs])
    finally:
        tokenizer.padding_side = original
    assert batched.shape == (5, 3) and batched.dtype == torch.float32
    torch.testing.assert_close(batched, single, atol=1e-4, rtol=0)


def test_decoder_without_pad_token_gets_eos_on_tokenizer_and_config(tmp_path, tiny_gemma_dir):
    for p in tiny_gemma_dir.iterdir():
        if not p.name.startswith("tokenizer"):
            (tmp_path / p.name).symlink_to(p)
    original = AutoTokenizer.from_pretrained(tiny_gemma_dir)
    original.pad_token = None
    original.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path).pad_token is None

    model, tokenizer, _ = load_base_model(tmp_path, device="cpu", precision="fp32",
                                          attn_implementation="sdpa", mode="seq_cls",
                                          labels=LABELS)
    assert tokenizer.pad_token == tokenizer.eos_token
    assert isinstance(model, PreTrainedModel)
    assert model.config.pad_token_id == tokenizer.eos_token_id == 1
    encoder = TextEncoder(tokenizer, 64, 3)
    seqs = [encoder.encode(t) for t in TEXTS]
    with torch.inference_mode():
        torch.testing.assert_close(encoder.score(model, seqs),
                                   torch.cat([encoder.score(model, [s]) for s in seqs]),
                                   atol=1e-4, rtol=0)


def test_text_is_cut_to_max_length_keeping_the_special_tokens():
    tokenizer = load_tokenizer(minilm_folder())
    encoder = TextEncoder(tokenizer, 16, 3)
    ids = encoder.encode("word " * 100)
    assert len(ids) == 16
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id


# ---------------------------------------------------------------- training round trip

FRESH = textwrap.dedent("""
    import json, sys
    from lorasent.modeling import load_trained_model
    from lorasent.scoring import score_texts
    adapter, base, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    model, encoder, record, _ = load_trained_model(adapter, base, device="cpu")
    print(json.dumps(score_texts(model, encoder, texts, 2).tolist()))
""")


def _fresh_process_scores(adapter_dir, model_dir):
    done = subprocess.run([sys.executable, "-c", FRESH, str(adapter_dir), str(model_dir),
                           json.dumps(TEXTS)], capture_output=True, text=True, check=True)
    return np.array(json.loads(done.stdout.splitlines()[-1]), dtype=np.float32)


@pytest.mark.integration
def test_minilm_round_trip_gives_identical_logits_in_a_fresh_process(
        tmp_path, minilm_params, minilm_dir, split_dir, caplog):
    params = minilm_params()
    caplog.set_level(logging.INFO, logger="lorasent.stages.train")
    result = train_in(tmp_path, params, minilm_dir, split_dir)
    assert result.steps == 2
    notes = [r for r in caplog.records if r.getMessage().startswith("seq_cls: ")]
    assert [(r.levelno, r.getMessage()) for r in notes] == [
        (logging.INFO, f"{BERT_HEAD}, so MISSING is expected there")]
    encoder = TextEncoder(load_tokenizer(minilm_dir), 32, 3)
    in_memory = score_texts(result.model, encoder, TEXTS, 2)
    fresh = _fresh_process_scores(tmp_path / "adapter", minilm_dir)
    np.testing.assert_array_equal(fresh, in_memory)
    # the head really was trained and saved: not the random init of a fresh process
    with safe_open(tmp_path / "adapter" / "adapter_model.safetensors", "pt") as f:
        assert any("classifier" in k for k in f.keys())
    record = json.loads((tmp_path / "adapter" / "lorasent.json").read_text())
    assert record["mode"] == "seq_cls" and record["head"] == ["classifier", "score"]
    assert record["label2id"] == {"positive": 0, "negative": 1, "neutral": 2}
    text = (tmp_path / "adapter" / "lorasent.json").read_text(encoding="utf-8")
    assert round_trip(text, AdapterRecord) == text  # the contract's own bytes
    assert list(record) == ["mode", "labels", "label2id", "max_length", "base_model", "params",
                            "head"]

    # export: the merged model loads with plain transformers and predicts the same
    from lorasent.tools.predict import export_merged

    model, enc, rec, _ = load_trained_model(tmp_path / "adapter", minilm_dir, device="cpu")
    export_merged(model, enc, rec, tmp_path / "adapter", tmp_path / "exported")
    merged = AutoModelForSequenceClassification.from_pretrained(tmp_path / "exported").eval()
    assert merged.config.id2label == dict(enumerate(LABELS))
    got = score_texts(merged, TextEncoder(load_tokenizer(tmp_path / "exported"), 32, 3),
                      TEXTS, 2)
    np.testing.assert_allclose(probabilities(got), probabilities(in_memory), atol=1e-5)
    text = (tmp_path / "exported" / "lorasent.json").read_text(encoding="utf-8")
    assert round_trip(text, AdapterRecord) == text
    assert json.loads(text) == {**record, "exported_from": str(tmp_path / "adapter")}
    readme = (tmp_path / "exported" / "README.md").read_text(encoding="utf-8")
    snippet = readme.split("```python\n")[1].split("```")[0]
    done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True,
                          check=True, cwd=tmp_path / "exported")  # the card reads "."
    expected = LABELS[int(np.argmax(in_memory[0]))]  # TEXTS[0] is the snippet's example
    assert done.stdout.startswith(f"('{expected}',")


@pytest.mark.integration
def test_validation_each_epoch_keeps_the_best(tmp_path, minilm_params, minilm_dir,
                                              split_dir):
    params = parse_params(merge(minilm_params().model_dump(mode="json"), {
        "split": {"validation_size": 4},
        "train": {"max_steps": -1, "num_train_epochs": 2, "eval_strategy": "epoch",
                  "load_best_model_at_end": True}}))
    result = train_in(tmp_path, params, minilm_dir, split_dir)
    provenance = json.loads((tmp_path / "provenance" / "train.json").read_text())
    accuracies = (tmp_path / "live" / "plots" / "metrics" / "eval" / "accuracy.tsv")
    rows = [line.split("\t") for line in accuracies.read_text().splitlines()[1:]]
    assert [int(step) for step, _ in rows] == [2, 4]  # after each epoch of 2 steps
    best = max(float(acc) for _, acc in rows)
    assert provenance["best_validation_accuracy"] == pytest.approx(best)
    assert provenance["best_checkpoint_step"] in (2, 4)
    assert result.steps == 4
    assert not (tmp_path / "checkpoints").exists()  # the epochs' checkpoints are removed


@pytest.fixture(scope="module")
def poolerless_bert_dir(tmp_path_factory):
    """A tiny random BERT saved without its pooler (as some exported encoders are): the
    sequence-classification model adds a random ``pooler.dense`` that peft does not save."""
    from transformers import BertConfig, BertModel

    src = tmp_path_factory.mktemp("bert-src")
    tokenizer = load_tokenizer(minilm_folder())
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64)
    BertModel(config, add_pooling_layer=False).save_pretrained(src)
    tokenizer.save_pretrained(src)
    out = tmp_path_factory.mktemp("bert") / "base"
    fetch_model(str(src), out)
    shutil.rmtree(src)
    return out


@pytest.mark.integration
def test_a_head_that_would_not_be_saved_is_caught(tmp_path, minilm_params,
                                                  poolerless_bert_dir, split_dir, caplog):
    params = minilm_params()
    with pytest.raises(HeadNotSavedError,
                       match=r"\['bert.pooler.dense'\] to train.lora.modules_to_save"):
        train_in(tmp_path, params, poolerless_bert_dir, split_dir)
    assert not (tmp_path / "adapter").exists()

    params = minilm_params(lora={"target_modules": ["query", "value"],
                                            "modules_to_save": ["bert.pooler.dense"]})
    caplog.set_level(logging.INFO, logger="lorasent.stages.train")
    result = train_in(tmp_path, params, poolerless_bert_dir, split_dir)
    # saved now, but not the head: a warning, not "expected"
    notes = [r for r in caplog.records if r.getMessage().startswith("seq_cls: ")]
    assert [(r.levelno, r.getMessage()) for r in notes] == [(logging.WARNING, (
        f"{BERT_HEAD}; but bert.pooler.dense.bias, bert.pooler.dense.weight are MISSING too "
        f"{NOT_THE_HEAD}"))]
    encoder = TextEncoder(load_tokenizer(poolerless_bert_dir), 32, 3)
    np.testing.assert_array_equal(
        _fresh_process_scores(tmp_path / "adapter", poolerless_bert_dir),
        score_texts(result.model, encoder, TEXTS, 2))
