"""Stage 4, train: LoRA fine-tuning of the base model on the training split.

Usage: ``lorasent train [--params params.yaml]``

Generative mode (seed 000's way): each example is ``prompt(text) + label word``; the
loss is the cross-entropy of the label word's tokens only (see
:func:`lorasent.scoring.label_token_loss`), optionally weighted per class
(``train.class_weighting: balanced``, seed 000's fix for a majority class that drags the
loss up). peft's LoRA (``train.lora``) wraps the base model; transformers' ``Trainer``
runs the loop (progress bar, schedule, accumulation, length-grouped batches), and
dvclive's callback logs the loss history to ``metrics/train/``.

Writes ``models/adapter/``: ``adapter_model.safetensors``, ``adapter_config.json`` and
``lorasent.json`` (mode, labels and their ids, label words and token ids, prompt,
max_length, base model source and hash, resolved params); and a provenance record.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import Trainer, TrainingArguments, set_seed

from lorasent.artifacts import (
    atomic_dir,
    provenance,
    read_json,
    read_jsonl,
    sha256_file,
    write_json,
)
from lorasent.errors import LorasentError
from lorasent.modeling import load_model_and_prompt
from lorasent.params import BaseParams, PromptParams, TrainParams
from lorasent.paths import (
    ADAPTER_DIR,
    ADAPTER_RECORD,
    BASE_MODEL_DIR,
    MANIFEST,
    PROVENANCE_DIR,
    SPLIT_DIR,
    TRAIN_LIVE_DIR,
)
from lorasent.scoring import collate_training, label_token_loss


@dataclass(frozen=True)
class TrainResult:
    steps: int
    final_loss: float | None
    trainable_parameters: int


class LabelWordTrainer(Trainer):
    """``Trainer`` whose loss is :func:`lorasent.scoring.label_token_loss`.

    The loss is a per-batch weighted mean, so the Trainer divides it by the gradient
    accumulation steps (``loss_is_scaled_for_ga = False``).
    """

    loss_is_scaled_for_ga = False

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = label_token_loss(model, inputs)
        return (loss, None) if return_outputs else loss


def _step_aligned_dvclive(live):
    """transformers' dvclive callback, logging at the optimiser step.

    The stock callback counts log events (0, 1, 2, ...); a loss curve's x axis should be
    the optimiser step, so each event is logged at ``state.global_step``.
    """
    from transformers.integrations import DVCLiveCallback

    class StepAlignedDVCLiveCallback(DVCLiveCallback):
        def on_log(self, args, state, control, **kwargs):
            live.step = state.global_step
            super().on_log(args, state, control, **kwargs)

    return StepAlignedDVCLiveCallback(live=live)


def _sort_target_modules(config_path: Path) -> None:
    """peft keeps ``target_modules`` as a set, so its order in adapter_config.json changes
    from process to process (string hashing is salted); sort it so that the same training
    writes the same bytes, and DVC sees an unchanged adapter."""
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")


def class_weights(scheme: str, label_ids: list[int], num_labels: int) -> np.ndarray:
    """Per-class loss weights, float64 (K,).

    ``none``: all 1. ``balanced``: ``n / (k * count_c)`` over the k classes present,
    scikit-learn's ``compute_class_weight("balanced")`` (King & Zeng 2001); absent
    classes get 1.
    """
    weights = np.ones(num_labels)
    if scheme == "balanced":
        from sklearn.utils.class_weight import compute_class_weight

        present = np.unique(label_ids)
        weights[present] = compute_class_weight("balanced", classes=present, y=label_ids)
    return weights


def run_train(*, base: BaseParams, prompt: PromptParams, train: TrainParams,
              params_record: dict[str, Any], model_dir: Path = BASE_MODEL_DIR,
              split_dir: Path = SPLIT_DIR, adapter_dir: Path = ADAPTER_DIR,
              live_dir: Path = TRAIN_LIVE_DIR,
              provenance_dir: Path = PROVENANCE_DIR) -> TrainResult:
    """Train a LoRA adapter and write it with its record to ``adapter_dir``.

    Raises:
        LorasentError: an empty training split, a prompt with no room for text.
    """
    import datasets
    from dvclive import Live
    from peft import LoraConfig, get_peft_model

    started = time.perf_counter()
    labels = list(base.labels)
    train_path = split_dir / "train.jsonl"
    rows = read_jsonl(train_path)
    if not rows:
        raise LorasentError(f"{train_path}: no training rows; check split.train_size")

    set_seed(base.seed)
    model, encoder, device = load_model_and_prompt(model_dir, base=base, prompt=prompt)
    weights = class_weights(train.class_weighting, [r["label_id"] for r in rows], len(labels))
    examples = []
    for r in rows:
        example = encoder.training_example(r["text"], r["label_id"])
        examples.append({**example, "weight": float(weights[r["label_id"]]),
                         "length": len(example["input_ids"])})

    model = get_peft_model(model.train(), LoraConfig(
        task_type="CAUSAL_LM", r=train.lora.r, lora_alpha=train.lora.lora_alpha,
        lora_dropout=train.lora.lora_dropout, target_modules=list(train.lora.target_modules)))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())

    base_manifest = read_json(model_dir / MANIFEST)
    record = {
        "mode": train.mode,
        "labels": labels,
        "label2id": {label: i for i, label in enumerate(labels)},
        "label_words": [prompt.label_words[label] for label in labels],
        "label_token_ids": [list(ids) for ids in encoder.label_ids],
        "template": prompt.template,
        "max_length": prompt.max_length,
        "base_model": {"source": base.model, "sha256": base_manifest["sha256"]},
        "params": params_record,
    }
    # Trainer wants an output_dir; nothing is saved there (save_strategy="no"). A fixed
    # name keeps the arguments that dvclive records (metrics/train/params.yaml) stable.
    # The loss history goes to a temporary folder that replaces metrics/train only when
    # the adapter is saved: a failed run leaves the last good history and adapter.
    work = adapter_dir.parent / ".trainer"
    with atomic_dir(live_dir) as live_tmp:
        try:
            args = TrainingArguments(
                output_dir=str(work), seed=base.seed, data_seed=base.seed,
                learning_rate=train.learning_rate, num_train_epochs=train.num_train_epochs,
                max_steps=train.max_steps,
                per_device_train_batch_size=train.per_device_train_batch_size,
                gradient_accumulation_steps=train.gradient_accumulation_steps,
                warmup_steps=train.warmup_ratio, lr_scheduler_type=train.lr_scheduler_type,
                weight_decay=train.weight_decay, max_grad_norm=train.max_grad_norm,
                logging_steps=train.logging_steps, logging_first_step=True,
                save_strategy="no", report_to="none", remove_unused_columns=False,
                dataloader_num_workers=0, train_sampling_strategy="group_by_length",
                length_column_name="length", use_cpu=device.type == "cpu",
                bf16=model.dtype == torch.bfloat16, fp16=model.dtype == torch.float16)
            live = Live(dir=str(live_tmp), dvcyaml=False, save_dvc_exp=False, report=None)
            trainer = LabelWordTrainer(
                model=model, args=args, train_dataset=datasets.Dataset.from_list(examples),
                data_collator=partial(collate_training, pad_id=encoder.tokenizer.pad_token_id),
                callbacks=[_step_aligned_dvclive(live)])
            trainer.train()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        with atomic_dir(adapter_dir) as tmp:
            model.save_pretrained(tmp, safe_serialization=True)
            _sort_target_modules(tmp / "adapter_config.json")
            write_json(tmp / ADAPTER_RECORD, record)

    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    final_loss = losses[-1] if losses else None
    write_json(provenance_dir / "train.json", provenance(
        stage="train", params=params_record, device=device,
        wall_time_s=time.perf_counter() - started,
        inputs={"model": base_manifest["sha256"], "train.jsonl": sha256_file(train_path)},
        extra={"trainable_parameters": trainable, "total_parameters": total,
               "steps": trainer.state.global_step, "train_rows": len(rows),
               "effective_batch_size": train.per_device_train_batch_size
               * train.gradient_accumulation_steps * trainer.args.world_size,
               "final_loss": final_loss}))
    return TrainResult(trainer.state.global_step, final_loss, trainable)
