"""The ``encoder_ft`` reference (lorasent.finetuned_encoder) on a tiny random BERT built
here: exact predictions and bytes per seed, the choice of learning rate and epoch on the
validation split and its ties, the fixed recipe without one, the folders and splits it
refuses in one line (and the stage going on without it), hard texts and truncation, and
the registry of references that names it.
"""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lorasent import contracts, params
from lorasent.baseline_params import BaselineParams, EncoderFtParams, EncoderParams
from lorasent.finetuned_encoder import fit_finetuned_encoder
from lorasent.reference_registry import SUPERVISED
from lorasent.references import ReferenceNotFitted
from lorasent.stages.baseline import fit_references
from tiny_gemma import tiny_config

LABELS = ["negative", "neutral", "positive"]
TRAIN = [("good great happy", 2), ("happy good day", 2), ("great great good", 2),
         ("so happy great", 2), ("bad awful sad", 0), ("sad bad day", 0),
         ("awful awful bad", 0), ("so sad awful", 0), ("blue red green", 1),
         ("green blue day", 1), ("red red blue", 1), ("so green red", 1)]
VALIDATION = [("good happy", 2), ("bad sad", 0), ("red blue", 1)]
TEST = ["good great", "awful sad", "green red", "happy", "bad", "blue"]
HARD = ["🙂🙂", "😡😡😡", "👍", "http://a.b/c", "https://b.c/good", "好评", "差评", "中文好",
        "good 🙂 好", "bad😡差", "so 中文 red", ""]
WORDS = sorted({w for t, _ in TRAIN for w in t.split()})
# single characters (and their WordPiece continuations) so that no text is all [UNK]
CHARS = [*"abcdefghijklmnopqrstuvwxyz0123456789:/.,!?", *"好评差中文", "🙂", "😡", "👍"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *CHARS, *("##" + c for c in CHARS),
         *WORDS]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random BERT of 1 layer, 16 wide, with a WordPiece tokenizer of :data:`VOCAB`
    (every word of the fixture texts one token), saved as a masked language model; no
    dropout and a wider initialisation than BERT's, so that 12 rows teach it."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    folder = tmp_path_factory.mktemp("tiny-bert")
    BertTokenizer(vocab={w: i for i, w in enumerate(VOCAB)}).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        initializer_range=0.2)
    BertForMaskedLM(config).save_pretrained(folder)
    return folder


def _fit(model: Path | str, train: list[tuple[str, int]] = TRAIN,
         validation: list[tuple[str, int]] = VALIDATION, **changes: Any):
    kwargs: dict[str, Any] = {"class_weighting": "none", "learning_rates": (2e-2,), "epochs": 2,
                              "batch_size": 2, "max_length": 16, "weight_decay": 0.0,
                              "warmup_ratio": 0.0, "seed": 0, **changes}
    return fit_finetuned_encoder(train_texts=[t for t, _ in train],
                                 y_train=[y for _, y in train],
                                 val_texts=[t for t, _ in validation],
                                 y_val=[y for _, y in validation], labels=LABELS,
                                 model=str(model), **kwargs)


def test_a_seed_gives_the_same_bytes_and_the_tiny_set_is_learned(tiny_bert):
    first, again = (_fit(tiny_bert, epochs=12) for _ in range(2))
    probs = first.predict(TEST)
    assert probs.dtype == np.float64 and probs.shape == (6, 3)
    assert np.array_equal(again.predict(TEST), probs)
    assert again.record == first.record
    assert probs.argmax(1).tolist() == [2, 0, 1, 2, 0, 1]
    record = first.record
    assert record["model"] == str(tiny_bert) and record["epochs"] == 12
    assert record["class_weight"] is None and record["truncated_train_texts"] == 0
    # every weight trained; the tokens of the 12 texts ([CLS] and [SEP] each), 12 passes
    cost = record["cost"]
    assert cost["trainable_parameters"] == cost["total_parameters"]
    assert cost["train_tokens"] == (sum(len(t.split()) + 2 for t, _ in TRAIN)) * 12


def _chosen(grid: list[dict[str, Any]]) -> tuple[float, int, float]:
    """The module's rule recomputed: the best accuracy, then the fewer epochs, then the
    smaller learning rate."""
    scored = [(accuracy, epoch, run["learning_rate"]) for run in grid
              for epoch, accuracy in enumerate(run["validation_accuracy_by_epoch"], 1)]
    best = max(a for a, _, _ in scored)
    epoch, rate = min((e, r) for a, e, r in scored if a == best)
    return rate, epoch, best


@pytest.mark.parametrize("rates", [(2e-2, 5e-3), (5e-3, 2e-2)])
def test_the_learning_rate_and_epoch_are_chosen_on_validation(tiny_bert, rates):
    fitted = _fit(tiny_bert, learning_rates=rates, epochs=3, batch_size=4)
    record = fitted.record
    assert [run["learning_rate"] for run in record["grid"]] == list(rates)
    assert all(len(run["validation_accuracy_by_epoch"]) == 3 for run in record["grid"])
    assert all(a in (0, 1 / 3, 2 / 3, 1) for run in record["grid"]
               for a in run["validation_accuracy_by_epoch"])
    rate, epoch, accuracy = _chosen(record["grid"])
    assert (record["learning_rate"], record["epoch"], record["validation_accuracy"]) == (
        rate, epoch, accuracy)
    assert record["chosen_by"] == ("accuracy on the 3 validation rows after each epoch; ties: "
                                   "the fewer epochs, then the smaller learning rate")
    # the kept weights are the chosen epoch's, not the last one's
    predicted = fitted.predict([t for t, _ in VALIDATION]).argmax(1)
    assert np.mean(predicted == [y for _, y in VALIDATION]) == accuracy
    assert record["cost"]["train_tokens"] == sum(len(t.split()) + 2 for t, _ in TRAIN) * 3 * 2


@pytest.mark.parametrize("validation", [VALIDATION, VALIDATION[:1]])
def test_a_tie_keeps_the_fewer_epochs_then_the_smaller_rate(tiny_bert, validation):
    # rates too small to move a weight: every epoch of both rates scores the same
    record = _fit(tiny_bert, validation=validation, learning_rates=(2e-12, 1e-12),
                  epochs=3).record
    accuracies = {a for run in record["grid"] for a in run["validation_accuracy_by_epoch"]}
    assert len(accuracies) == 1
    assert (record["learning_rate"], record["epoch"]) == (1e-12, 1)


def test_without_validation_the_first_rate_and_the_last_epoch(tiny_bert):
    fitted = _fit(tiny_bert, validation=[], learning_rates=(5e-3, 2e-2), epochs=2)
    record = fitted.record
    assert record["chosen_by"].startswith("none: no validation split")
    assert (record["learning_rate"], record["epoch"], record["validation_accuracy"]) == (
        5e-3, 2, None)
    assert record["grid"] == [{"learning_rate": 5e-3, "validation_accuracy_by_epoch": []}]
    # one rate run: one grid's worth of tokens
    assert record["cost"]["train_tokens"] == sum(len(t.split()) + 2 for t, _ in TRAIN) * 2
    # another seed: another head and batch order, another fit
    other = _fit(tiny_bert, validation=[], learning_rates=(5e-3, 2e-2), epochs=2, seed=1)
    assert not np.array_equal(other.predict(TEST), fitted.predict(TEST))


def _one_line(model: Path | str, train: list[tuple[str, int]] = TRAIN) -> str:
    with pytest.raises(ReferenceNotFitted) as err:
        _fit(model, train=train)
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize(("labels", "message"), [
    ([0] * 4, "the training rows hold one class ('negative'); a classifier needs at least two"),
    ([1] * 4, "the training rows hold one class ('neutral'); a classifier needs at least two"),
    ([0, 0, 2], "class 'positive' has 1 training row; a reference needs at least 2 rows of "
                "each class it is trained on"),
    ([0, 1, 1, 2, 2], "class 'negative' has 1 training row; a reference needs at least 2 rows "
                      "of each class it is trained on"),
])
def test_a_split_it_cannot_fit_is_one_line(tiny_bert, labels, message):
    train = [(f"good {i}", y) for i, y in enumerate(labels)]
    assert _one_line(tiny_bert, train) == message


def _folder(tmp_path: Path, tiny_bert: Path, *names: str) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    for name in names:
        shutil.copy(tiny_bert / name, folder / name)
    return folder


def test_a_decoder_folder_is_not_an_encoder(tmp_path):
    folder = tmp_path / "gemma"
    tiny_config(64).save_pretrained(folder)
    assert _one_line(folder) == (
        f"baseline.encoder_ft.model: {str(folder)!r} is a 'gemma3_text' model, not an encoder "
        "(BERT, RoBERTa, DeBERTa, ...); give an encoder's folder or packaged:minilm-l6")


def test_an_unknown_model_type_and_no_config_are_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-model"}))
    assert _one_line(tmp_path).startswith(
        f"baseline.encoder_ft.model: the config of {str(tmp_path)!r} cannot be read: ")
    (tmp_path / "config.json").unlink()
    assert _one_line(tmp_path) == (f"baseline.encoder_ft.model: {str(tmp_path)!r} is not "
                                   "packaged:minilm-l6 nor a folder with a config.json")
    assert _one_line("minilm").startswith("baseline.encoder_ft.model: 'minilm' is not ")


@pytest.mark.parametrize("missing", ["tokenizer", "weights"])
def test_a_folder_without_a_tokenizer_or_weights_is_one_line(tmp_path, tiny_bert, missing):
    names = [p.name for p in tiny_bert.iterdir()
             if (p.suffix != ".safetensors" if missing == "weights"
                 else p.name == "config.json")]
    folder = _folder(tmp_path, tiny_bert, *names)
    assert _one_line(folder).startswith(f"the model folder {folder} cannot be loaded: ")


def test_the_stage_goes_on_without_an_encoder_ft_it_cannot_fit(tmp_path):
    folder = tmp_path / "gemma"
    tiny_config(64).save_pretrained(folder)
    rows = [{"id": str(i), "text": t, "label_id": y} for i, (t, y) in enumerate(TRAIN)]
    chosen = BaselineParams(encoder=EncoderParams(enabled=False),
                            encoder_ft=EncoderFtParams(enabled=True, model=str(folder)))
    found = fit_references(chosen, rows=rows, validation=[], sets={"test": rows},
                           labels=LABELS, class_weighting="none", seed=42)
    assert list(found) == ["tfidf_lr", "encoder", "encoder_ft"]
    assert found["tfidf_lr"].record is not None and found["tfidf_lr"].note is None
    assert found["encoder"].note == "baseline.encoder.enabled: false"
    assert (found["encoder_ft"].record, found["encoder_ft"].note) == (None, (
        f"not fitted: baseline.encoder_ft.model: {str(folder)!r} is a 'gemma3_text' model, "
        "not an encoder (BERT, RoBERTa, DeBERTa, ...); give an encoder's folder or "
        "packaged:minilm-l6"))


def test_hard_texts_train_and_predict_and_long_ones_are_counted(tiny_bert):
    # n words of one class: n + 2 tokens ([CLS], [SEP]), cut past max_length 8 from n = 7
    long = [(" ".join([word] * n), y) for word, y in (("good", 2), ("bad", 0), ("red", 1))
            for n in range(1, 13)]
    train = long + [(t, i % 3) for i, t in enumerate(HARD)]
    fitted = _fit(tiny_bert, train=train, validation=[(t, 0) for t in HARD[:3]],
                  max_length=8, epochs=1, batch_size=8)
    # the hard texts are at most 8 tokens: "https://b.c/good" is h ##t ##t ##p ##s : / / b . c
    # / good, 13 + 2 tokens; "http://a.b/c" 12 + 2: both cut too
    assert fitted.record["truncated_train_texts"] == 3 * 6 + 2
    probs = fitted.predict([*HARD, " ".join(["good"] * 40)])
    assert probs.dtype == np.float64 and probs.shape == (len(HARD) + 1, 3)
    assert np.allclose(probs.sum(1), 1) and np.all(probs >= 0)


def test_balanced_class_weighting_runs_and_is_recorded(tiny_bert):
    train = TRAIN[:4] + TRAIN[4:6] + TRAIN[8:10]  # 4 positive, 2 negative, 2 neutral
    fitted = _fit(tiny_bert, train=train, class_weighting="balanced", epochs=1)
    assert fitted.record["class_weight"] == "balanced"
    assert fitted.predict(TEST).shape == (6, 3)
    unweighted = _fit(tiny_bert, train=train, epochs=1)
    assert not np.array_equal(unweighted.predict(TEST), fitted.predict(TEST))


@pytest.mark.parametrize("entry", SUPERVISED, ids=lambda e: e.name)
def test_each_registry_entry_is_wired_everywhere(entry):
    module, function = entry.fit.split(":")
    assert callable(getattr(importlib.import_module(module), function))
    assert entry.name in BaselineParams.model_fields
    assert entry.name in contracts.REFERENCE_NAMES
    assert contracts.REFERENCE_NAMES[entry.name] == entry.short
    assert entry.name in params.REFERENCE_CHOICES
    group = BaselineParams.model_fields[entry.name].annotation
    assert ("enabled" in group.model_fields) == entry.optional  # type: ignore[union-attr]


def test_the_registry_names_each_reference_once():
    names = [entry.name for entry in SUPERVISED]
    assert len(set(names)) == len(names)
    assert list(BaselineParams.model_fields) == names
    assert contracts.SUPERVISED_REFERENCES == tuple(names)
