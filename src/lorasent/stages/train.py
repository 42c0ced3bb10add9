"""Stage 4, train: LoRA fine-tuning of the base model on the training split.

Usage: ``lorasent train [--params params.yaml]``

Generative mode (seed 000's way): each example is ``prompt(text) + label word``; the
loss is the cross-entropy of the label word's tokens only (see
:func:`lorasent.scoring.label_token_loss`); with ``train.share_prefix`` the tokens that
every example of a batch starts with (BOS, the instruction) run once per batch, the
rest of each example on their key/value cache. Sequence-classification mode (seed 002's
way): the text goes into a fresh classification head; peft's ``SEQ_CLS`` task trains
the head in full (``modules_to_save``) and saves it with the adapter, and
:func:`lorasent.modeling.check_head_saved` refuses a model whose other new weights would
not be saved. In both, the loss is optionally weighted per class
(``train.class_weighting: balanced``, seed 000's fix for a majority class that drags the
loss up).

peft's LoRA (``train.lora``) wraps the base model; transformers' ``Trainer`` runs the
loop (progress bar, schedule, accumulation, length-grouped batches, and with
``train.eval_strategy: epoch`` the validation accuracy after each epoch, keeping the
best epoch when ``train.load_best_model_at_end``); dvclive's callback logs the history
to ``metrics/train/``.

This module is the recipe: :func:`run_train` and its setup steps. The machinery it
sets up is :mod:`lorasent.training`'s: the Trainer subclass with its sampler and loss
guard (``training.trainer``), the callbacks that log the history
(``training.callbacks``), and the checkpoints (``training.checkpoints``).

With ``base.num_processes`` > 1 or ``train.accelerate_config`` the stage runs in several
processes (``lorasent.launch``): data parallel (or FSDP), each process taking
``per_device_train_batch_size`` examples a step, so the effective batch is that times
the processes times ``gradient_accumulation_steps`` (recorded in the provenance), and
Trainer's schedule counts the optimiser steps of that batch. Only the main process
writes.

After training, the validation split's rows (whatever ``train.eval_strategy``) are
scored by the trained model as the evaluate stage scores the test split (without the
training's autocast: in fp32 on a CPU whatever ``base.precision``), and one
temperature is fitted on them (temperature scaling, Guo et al. 2017:
:func:`lorasent.calibration.temperature_scaling`), which ``lorasent predict`` divides the
scores by.

Writes ``models/adapter/``: ``adapter_model.safetensors``, ``adapter_config.json``,
``lorasent.json`` (mode, labels and their ids, label words and token ids or the head,
prompt, max_length, base model source and hash, resolved params) and
``calibration.json`` (the temperature, the validation NLL, ECE and Brier score before
and after it, the validation risk-coverage: :class:`lorasent.contracts.TemperatureScaling`),
in one atomic write; ``metrics/validation.json``, the adapter's accuracy and macro-F1 on
the validation split with their 95% intervals, per-class scores and confusion matrix,
from the same scores (their argmax: :class:`lorasent.contracts.ValidationMetrics`,
:func:`validation_metrics`); and a provenance record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers import PrinterCallback, ProgressCallback, TrainingArguments, set_seed
from transformers.utils import logging as hf_logging

from lorasent.atomic import atomic_dir, read_json, read_jsonl, write_json
from lorasent.calibration import NO_VALIDATION_NOTE, temperature_scaling
from lorasent.contracts import (
    AdapterRecord,
    BaseModelRef,
    IntervalMethod,
    TemperatureScaling,
    ValidationMetrics,
    dump,
)
from lorasent.environment import compute_dtype, precision_line, resolve_dtype, writing
from lorasent.errors import LorasentError
from lorasent.frozen_weights import FrozenWeightsIn
from lorasent.hashes import sha256_file
from lorasent.launch import is_main, rank_and_world
from lorasent.metrics import ClassIds, classification_metrics
from lorasent.modeling import check_head_saved, load_model_and_prompt, new_weights_note
from lorasent.modes import MODES, Mode, ModeName
from lorasent.params import BaseParams, LoraParams, PromptParams, TrainParams
from lorasent.paths import (
    ADAPTER_DIR,
    ADAPTER_RECORD,
    BASE_MODEL_DIR,
    CALIBRATION_RECORD,
    CHECKPOINT_DIR,
    MANIFEST,
    PROVENANCE_DIR,
    SPLIT_DIR,
    TRAIN_LIVE_DIR,
    VALIDATION_METRICS,
)
from lorasent.provenance import provenance, write_provenance
from lorasent.scoring import Encoder, PromptEncoder, score_texts
from lorasent.statistics import interval_method, intervals
from lorasent.subsets import training_subset
from lorasent.training.callbacks import LogLastStep, live, step_aligned_dvclive, training_speed
from lorasent.training.checkpoints import Checkpoints, checkpoint_step, training_key
from lorasent.training.trainer import LorasentTrainer

log = logging.getLogger(__name__)
if TYPE_CHECKING:
    from peft import PeftModel

# metrics/validation.json's ``scores_are``: which scores its metrics are the argmax of.
VALIDATION_SCORES_ARE = (
    "the trained adapter's class scores on the validation split, as the evaluate stage "
    "scores the test split (base + adapter in eval mode, without the training's autocast: "
    "fp32 on a CPU), before temperature scaling, which changes no argmax: the scores "
    "calibration.json's temperature is fitted on")
# metrics/validation.json's ``note`` without validation rows, and with one.
NO_VALIDATION_METRICS_NOTE = ("no validation split (split.validation_size: 0): nothing to "
                              "choose on")
ONE_VALIDATION_ROW = ("no interval: 1 validation row, and a bootstrap over one row has no "
                      "spread; set split.validation_size above 1 for 95% intervals")


@dataclass(frozen=True)
class TrainResult:
    """What a run produced; ``model`` is the trained peft model in memory (eval mode),
    for callers that go on using it (it equals base + the saved adapter)."""

    steps: int
    final_loss: float | None
    trainable_parameters: int
    model: Any = None


def _sort_target_modules(config_path: Path) -> None:
    """peft keeps ``target_modules`` as a set, so its order in adapter_config.json changes
    from process to process (string hashing is salted); sort it so that the same training
    writes the same bytes, and DVC sees an unchanged adapter."""
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")


def _out_of_memory(train: TrainParams, device: torch.device, err: Exception) -> str:
    """What to do when a training batch does not fit on the device."""
    batch, accumulation = train.per_device_train_batch_size, train.gradient_accumulation_steps
    half = max(batch // 2, 1)
    return (f"train: out of {device.type} memory with train.per_device_train_batch_size "
            f"{batch}. Set per_device_train_batch_size: {half} and gradient_accumulation_steps: "
            f"{accumulation * batch // half} to keep the effective batch of "
            f"{batch * accumulation} examples, or train.auto_find_batch_size: true to let "
            f"the Trainer halve the batch until it fits ({str(err).splitlines()[0]})")


def mode_fields(mode: Mode, *, prompt: PromptParams, labels: list[str], encoder: Encoder,
                model: Any) -> dict[str, Any]:
    """The adapter record's fields that ``mode`` alone writes (its ``record_fields``,
    :data:`lorasent.modes.MODES`), each made from what the train stage has at hand.

    Args:
        encoder: the mode's encoder (label token ids: a :class:`PromptEncoder`'s).
        model: the peft model (``head``: the modules it saves in full).

    Raises:
        KeyError: a record field that no entry here makes.
    """
    def label_token_ids() -> list[list[int]]:
        assert isinstance(encoder, PromptEncoder), "only a PromptEncoder has label words"
        return [list(ids) for ids in encoder.label_ids]

    made: dict[str, Callable[[], Any]] = {
        "label_words": lambda: [prompt.label_words[label] for label in labels],
        "label_token_ids": label_token_ids,
        "template": lambda: prompt.template,
        "head": lambda: sorted(model.modules_to_save or ()),
    }
    return {name: made[name]() for name in mode.record_fields}


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
              live_dir: Path = TRAIN_LIVE_DIR, provenance_dir: Path = PROVENANCE_DIR,
              checkpoint_dir: Path = CHECKPOINT_DIR,
              validation_metrics_path: Path = VALIDATION_METRICS) -> TrainResult:
    """Train a LoRA adapter and write it with its record to ``adapter_dir``, and the
    adapter's metrics on the validation split to ``validation_metrics_path``.

    A recipe: setup steps, each given only its slice of the params, then the training,
    then the cleanup. The validation split is scored
    ``train.per_device_train_batch_size`` texts at a time: after each epoch with
    ``train.eval_strategy: epoch``, and, whatever that says, once after training, for
    the temperature written to ``calibration.json``
    (:func:`lorasent.calibration.temperature_scaling`; with no validation rows, a record
    without a temperature) and the metrics written to ``validation_metrics_path``
    (:func:`validation_metrics`, always written: with no validation rows, a record
    without metrics). That batch size is the one the Trainer's validation already
    uses and fits the device; the evaluate stage's ``evaluate.batch_size`` is not read,
    so that the train stage reads only its own params sections (dvc.yaml: ``base``,
    ``prompt``, ``train``).

    Every ``train.save_steps`` optimiser steps (and after each epoch with
    ``train.load_best_model_at_end``) Trainer saves a checkpoint in ``checkpoint_dir``;
    with ``train.resume: auto`` a run whose
    :func:`lorasent.training.checkpoints.training_key` matches a complete one goes on
    from the last, through Trainer's ``resume_from_checkpoint`` (adapter, optimiser,
    scheduler, RNG states, position in the data), and ends with the adapter an
    uninterrupted run writes. A damaged checkpoint is set aside, never resumed
    (:class:`lorasent.training.checkpoints.Checkpoints`). The folder is removed once the
    adapter is saved; a failed or killed run leaves it for the next.

    Random numbers, in the order they are drawn (the one list of it; the steps below
    keep this order, and tests/test_train_recipe.py pins the bytes it gives):

    1. ``set_seed(base.seed)`` (transformers): Python's ``random``, numpy's global
       generator and torch's (CPU and every CUDA device) start from the seed.
    2. The base model loads (:func:`lorasent.modeling.load_model_and_prompt`): nothing
       is drawn in generative mode (every weight comes from the checkpoint); in seq_cls
       mode the new head's weights are drawn from torch's generator.
    3. :func:`_setup_lora`: peft draws every LoRA ``A`` matrix from torch's generator
       (``B`` starts at zero), after the seq_cls head's weights. Nothing else draws
       between steps 1 and 4, so the adapter's initial values depend only on
       ``base.seed``, the model, the mode and the LoRA params.
    4. :func:`_setup_trainer`: Trainer's ``__init__`` calls ``set_seed(base.seed)``
       again (``TrainingArguments.seed``); the generators start over from the state of
       step 1, whatever steps 2 and 3 drew.
    5. Each epoch ``e``: :class:`lorasent.training.trainer.EpochSeededSampler` orders the
       batches with its own generator, seeded from ``SeedSequence([base.seed, e])``
       (``data_seed``), drawing nothing from the global ones; then torch's
       ``DataLoader``, making the epoch's iterator, draws one int64 from torch's
       generator (the workers' base seed, unused with ``dataloader_num_workers: 0``).
    6. Each forward pass in training: the dropout masks, from torch's generator,
       micro-batch after micro-batch: LoRA's (``train.lora.lora_dropout``) and the base
       model's own where its config has any (Gemma 3's are 0; MiniLM's are not).
       Validation (``model.eval()``) and checkpoint saves draw nothing.
    7. After training, once the adapter's weights and record are written:
       :func:`_save_adapter` scores the validation rows for the temperature, in eval
       mode (no dropout): nothing is drawn, and the adapter's bytes do not depend on it.

    Python's ``random`` and numpy's global generator are seeded (steps 1 and 4) but
    never drawn from. A resumed run restores the generators' states that its checkpoint
    saved (Trainer's ``_load_rng_state``) in the epoch it resumes in, before that
    epoch's first dropout mask, and draws on from there; a retry after running out of
    memory (``train.auto_find_batch_size``) is not seeded again.

    Raises:
        LorasentError: an empty training split or validation split that
            ``train.eval_strategy`` needs, a class with no training rows while
            ``train.fraction`` < 1 (:func:`lorasent.subsets.training_subset`), a prompt
            with no room for text.
        lorasent.modeling.HeadNotSavedError: seq_cls weights that the adapter would not
            save.
        NoSpaceLeft: a checkpoint, the loss history, the adapter, the validation metrics
            or the provenance record found its filesystem full
            (:func:`lorasent.environment.writing`).
    """
    started = time.perf_counter()
    labels = list(base.labels)
    # setup: the data, then the random steps 1 to 3, then what the run reads and writes
    data = _setup_data(split_dir=split_dir, eval_strategy=train.eval_strategy)
    # train.fraction's nested subset (its own generator: draws nothing from the global ones)
    data = dataclasses.replace(data, rows=training_subset(data.rows, train.fraction, base.seed,
                                                          labels))
    set_seed(base.seed)  # RNG step 1
    model, encoder, device = load_model_and_prompt(  # RNG step 2
        model_dir, base=base, prompt=prompt, mode=train.mode)
    encoder, shared_start = _setup_encoder(encoder=encoder, model=model,
                                           share_prefix=train.share_prefix,
                                           max_length=prompt.max_length)
    examples = _setup_examples(rows=data.rows, encoder=encoder, num_labels=len(labels),
                               class_weighting=train.class_weighting)
    model = _setup_lora(model=model, lora=train.lora, mode=train.mode)  # RNG step 3
    trainable, total = _parameter_counts(model)
    inputs = _input_hashes(model_dir=model_dir, data=data,
                           accelerate_config=train.accelerate_config)
    record = _adapter_record(labels=labels, source=base.model, prompt=prompt,
                             mode=train.mode, encoder=encoder, model=model,
                             model_sha256=inputs["model"], params_record=params_record)
    main = is_main()
    # the compute dtype: bf16 on a CPU is autocast over the fp32 weights model.dtype shows
    dtype = resolve_dtype(base.precision, device)
    if main:
        log.info(precision_line("train", precision=base.precision, dtype=dtype, device=device,
                                training=True))
    checkpoints, resume_from = _setup_checkpoints(
        checkpoint_dir=checkpoint_dir, base=base, prompt=prompt, train=train, inputs=inputs,
        setting={"device": device.type,
                 "dtype": str(model.dtype) if dtype == model.dtype
                 else f"{model.dtype} weights, {dtype} autocast",
                 "processes": rank_and_world()[1]})
    # train: the loss history goes to a temporary folder that replaces metrics/train only
    # when the adapter is saved, so a failed run leaves the last good history and
    # adapter. In a launched run (lorasent.launch) every process trains; only the main
    # one writes.
    with atomic_dir(live_dir) if main else contextlib.nullcontext() as live_tmp:
        try:
            args = _training_arguments(train=train, seed=base.seed, device=device,
                                       dtype=dtype, checkpoint_dir=checkpoint_dir)
            trainer = _setup_trainer(  # RNG step 4; steps 5 and 6 in trainer.train
                model=model, args=args, examples=examples, validation=data.validation,
                encoder=encoder, labels=labels, checkpoints=checkpoints, live_tmp=live_tmp,
                eval_batch_size=train.per_device_train_batch_size)
            try:
                with writing("the loss history", live_dir), _frozen_in_compute_dtype(
                        model, dtype, device):
                    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from
                                  else None)
            except torch.OutOfMemoryError as err:
                raise LorasentError(_out_of_memory(train, device, err)) from err
        finally:
            if main:  # Trainer makes the folder even when it saves nothing
                with contextlib.suppress(OSError):
                    checkpoint_dir.rmdir()
        _end_autocast(trainer, model)  # from here on it scores as evaluate's model does
        scaling, scores = _save_adapter(  # RNG step 7
            trainer=trainer, model=model, record=record, adapter_dir=adapter_dir, main=main,
            validation=data.calibration, encoder=encoder,
            batch_size=train.per_device_train_batch_size)
    # cleanup: the checkpoints go once the adapter is saved; the validation metrics and
    # the provenance record
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    final_loss = losses[-1] if losses else None
    if main:
        checkpoints.remove()
        with writing("the validation metrics", validation_metrics_path):
            write_json(validation_metrics_path, dump(validation_metrics(
                scores, [r["label_id"] for r in data.calibration], labels)))
        if data.calibration and "validation.jsonl" not in inputs:  # read for calibration only
            inputs = {**inputs, "validation.jsonl": sha256_file(data.validation_path)}
        _write_provenance(
            provenance_dir / "train.json", trainer=trainer, params_record=params_record,
            device=device, wall_time_s=time.perf_counter() - started, inputs=inputs,
            parameters=(trainable, total), resume_from=resume_from,
            shared_start=shared_start, train_rows=len(data.rows), final_loss=final_loss,
            batch_per_process=train.per_device_train_batch_size
            * train.gradient_accumulation_steps, temperature=scaling.temperature,
            compute=compute_dtype(dtype, device, training=True))
    return TrainResult(trainer.state.global_step, final_loss, trainable, model.eval())


@dataclass(frozen=True)
class TrainingData:
    """The splits a training reads: the training rows, the validation rows when
    ``train.eval_strategy`` scores them during training (else none), and the validation
    rows the temperature is fitted on after training (``calibration``: all of them,
    whatever ``train.eval_strategy``; none when the split has none)."""

    train_path: Path
    rows: list[dict[str, Any]]
    validation_path: Path
    validation: list[dict[str, Any]]
    calibration: list[dict[str, Any]]


def _setup_data(*, split_dir: Path, eval_strategy: str) -> TrainingData:
    """The training split, and the validation split: for the temperature (always, when
    it has rows) and for the Trainer's validation when ``eval_strategy`` (the slice
    ``train.eval_strategy``) scores it.

    Logs a warning, before any training, when the validation split has no rows: no
    temperature will be fitted.

    Raises:
        LorasentError: an empty training split, or an empty validation split that
            ``eval_strategy`` needs.
    """
    train_path = split_dir / "train.jsonl"
    rows = read_jsonl(train_path)
    if not rows:
        raise LorasentError(f"{train_path}: no training rows; check split.train_size")
    validation_path = split_dir / "validation.jsonl"
    calibration = read_jsonl(validation_path) if validation_path.is_file() else []
    if eval_strategy != "no" and not calibration:
        raise LorasentError(f"{validation_path}: no rows, but "
                            "train.eval_strategy needs them; check split.validation_size")
    if not calibration:  # said before training, not found later in calibration.json
        log.warning("train: %s; set split.validation_size (e.g. 200) and rerun split to "
                    "fit one", NO_VALIDATION_NOTE)
    validation = calibration if eval_strategy != "no" else []
    return TrainingData(train_path, rows, validation_path, validation, calibration)


def _setup_encoder(*, encoder: Encoder, model: torch.nn.Module, share_prefix: bool,
                   max_length: int) -> tuple[Encoder, int | None]:
    """The encoder as training uses it, and the length of the prompt start that every
    example shares (None: not shared).

    A generative encoder gets ``share_prefix`` (``train.share_prefix``), logged with the
    shared start's length; ``max_length`` (``prompt.max_length``) only says in the log
    whether batches can grow wider than the model's sliding window. A seq_cls encoder
    has no prompt and is returned as it is.
    """
    if not isinstance(encoder, PromptEncoder):
        return encoder, None
    encoder = dataclasses.replace(encoder, share_prefix=share_prefix)
    if not share_prefix:
        return encoder, None
    shared_start = encoder.template_start()
    window = getattr(model.config, "sliding_window", None)
    log.info("train.share_prefix: the %d tokens every prompt starts with (BOS and the "
             "instruction) run once per batch%s", shared_start,
             f", except in batches wider than the model's sliding window ({window} "
             "tokens)" if window is not None and max_length > window else "")
    return encoder, shared_start


def _setup_examples(*, rows: list[dict[str, Any]], encoder: Encoder, num_labels: int,
                    class_weighting: str) -> list[dict[str, Any]]:
    """The training examples: each row encoded (``encoder.training_example``), with its
    class's loss weight (``class_weighting``, the slice ``train.class_weighting``: see
    :func:`class_weights`) and its length in tokens (for the length-grouped batches)."""
    weights = class_weights(class_weighting, [r["label_id"] for r in rows], num_labels)
    examples = []
    for r in rows:
        example = encoder.training_example(r["text"], r["label_id"])
        examples.append({**example, "weight": float(weights[r["label_id"]]),
                         "length": len(example["input_ids"])})
    return examples


def _setup_lora(*, model: torch.nn.Module, lora: LoraParams, mode: ModeName) -> PeftModel:
    """``model`` in training mode wrapped by peft's LoRA (``lora``: the slice
    ``train.lora``; ``mode``: ``train.mode``, whose peft task type
    (:data:`lorasent.modes.MODES`) says whether a head is trained and saved in full);
    draws the LoRA ``A`` matrices (RNG step 3 of :func:`run_train`).

    Raises:
        lorasent.modeling.HeadNotSavedError: new weights (``model.newly_initialized``)
            that the adapter would not save (:func:`lorasent.modeling.check_head_saved`).
    """
    from peft import LoraConfig, get_peft_model

    newly_initialized = getattr(model, "newly_initialized", [])
    peft_model = get_peft_model(model.train(), LoraConfig(
        task_type=MODES[mode].peft_task_type, r=lora.r,
        # peft annotates lora_alpha int but scales by alpha / r, so the float params allow works
        lora_alpha=lora.lora_alpha,  # type: ignore[arg-type]
        lora_dropout=lora.lora_dropout,
        target_modules=list(lora.target_modules),
        modules_to_save=list(lora.modules_to_save) or None))
    check_head_saved(peft_model, newly_initialized)
    note = new_weights_note(newly_initialized)
    if note is not None and is_main():
        log.log(*note)
    return peft_model


def _parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """``(trainable, total)`` parameters of ``model``."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def _input_hashes(*, model_dir: Path, data: TrainingData,
                  accelerate_config: str | None) -> dict[str, str]:
    """SHA-256 of what the training reads: the base model (its manifest's), the splits
    it uses, and ``accelerate_config`` (``train.accelerate_config``) when set."""
    inputs = {"model": read_json(model_dir / MANIFEST)["sha256"],
              "train.jsonl": sha256_file(data.train_path)}
    if data.validation:
        inputs["validation.jsonl"] = sha256_file(data.validation_path)
    if accelerate_config:
        inputs["accelerate_config"] = sha256_file(accelerate_config)
    return inputs


def _adapter_record(*, labels: list[str], source: str, prompt: PromptParams,
                    mode: ModeName, encoder: Encoder,
                    model: PeftModel, model_sha256: str,
                    params_record: dict[str, Any]) -> AdapterRecord:
    """``lorasent.json``: the labels (``base.labels``), the base model (``base.model``
    and its hash), ``prompt.max_length``, the run's params, and the fields that ``mode``
    (``train.mode``) alone writes (:func:`mode_fields`)."""
    return AdapterRecord(
        mode=mode, labels=labels, label2id={label: i for i, label in enumerate(labels)},
        max_length=prompt.max_length,
        base_model=BaseModelRef(source=source, sha256=model_sha256),
        params=params_record, **mode_fields(MODES[mode], prompt=prompt, labels=labels,
                                            encoder=encoder, model=model))


def _setup_checkpoints(*, checkpoint_dir: Path, base: BaseParams, prompt: PromptParams,
                       train: TrainParams, inputs: dict[str, str], setting: dict[str, Any],
                       ) -> tuple[Checkpoints, Path | None]:
    """The run's :class:`lorasent.training.checkpoints.Checkpoints` and the checkpoint to
    resume from (None: start at step 0), after its ``prepare`` has cleared the others.

    Takes all three params sections: a checkpoint is resumed only by the same training
    (:func:`lorasent.training.checkpoints.training_key` over them, ``inputs`` and
    ``setting``); ``train.resume`` says whether to resume at all.
    """
    processes = setting["processes"]
    # The checkpoints' folder has a fixed name, so that the arguments dvclive records
    # (metrics/train/params.yaml) stay the same; the key is inside each checkpoint.
    checkpoints = Checkpoints(checkpoint_dir, processes=processes, key=training_key(
        base=base, prompt=prompt, train=train, inputs=inputs, setting=setting))
    resume_from = checkpoints.prepare(resume=train.resume == "auto")
    if resume_from and is_main():
        state = read_json(resume_from / "trainer_state.json")
        log.info("resuming from step %d of %d (%s); to start over, delete %s or "
                 "set train.resume: never", state["global_step"], state["max_steps"],
                 resume_from, checkpoint_dir)
    return checkpoints, resume_from


def _training_arguments(*, train: TrainParams, seed: int, device: torch.device,
                        dtype: torch.dtype, checkpoint_dir: Path) -> TrainingArguments:
    """Trainer's arguments: the optimisation params of ``train`` (learning rate and its
    schedule, epochs or steps, batch and accumulation, weight decay, clipping), when to
    log, validate and save, ``seed`` (``base.seed``, also the data order's seed), and
    the device and compute dtype (bf16 on a CPU: accelerate's autocast in bf16 over fp32
    weights and optimiser state)."""
    return TrainingArguments(
        output_dir=str(checkpoint_dir), seed=seed, data_seed=seed,
        learning_rate=train.learning_rate, num_train_epochs=train.num_train_epochs,
        max_steps=train.max_steps,
        per_device_train_batch_size=train.per_device_train_batch_size,
        gradient_accumulation_steps=train.gradient_accumulation_steps,
        warmup_steps=train.warmup_ratio, lr_scheduler_type=train.lr_scheduler_type,
        weight_decay=train.weight_decay, max_grad_norm=train.max_grad_norm,
        logging_steps=train.logging_steps, logging_first_step=True,
        eval_strategy=train.eval_strategy,
        save_strategy=("epoch" if train.load_best_model_at_end
                       else "steps" if train.save_steps else "no"),
        save_steps=train.save_steps, save_total_limit=2,
        load_best_model_at_end=train.load_best_model_at_end,
        metric_for_best_model="accuracy", greater_is_better=True,
        report_to="none", remove_unused_columns=False,
        auto_find_batch_size=train.auto_find_batch_size,
        dataloader_num_workers=0, train_sampling_strategy="group_by_length",
        length_column_name="length", use_cpu=device.type == "cpu",
        bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16)


def _setup_trainer(*, model: PeftModel, args: TrainingArguments,
                   examples: list[dict[str, Any]], validation: list[dict[str, Any]],
                   encoder: Encoder, labels: list[str], checkpoints: Checkpoints,
                   live_tmp: Path | None, eval_batch_size: int) -> LorasentTrainer:
    """The :class:`lorasent.training.trainer.LorasentTrainer` over ``examples``, scoring
    ``validation`` (when any) ``eval_batch_size`` texts at a time, with the callbacks:
    the last step logged, ``checkpoints``, dvclive writing to ``live_tmp`` (the main
    process's; None in the others), and plain log lines instead of a progress bar off a
    terminal. Its ``__init__`` seeds the generators again (RNG step 4 of
    :func:`run_train`)."""
    import datasets

    trainer = LorasentTrainer(
        model=model, args=args, train_dataset=datasets.Dataset.from_list(examples),
        # Trainer insists on an eval_dataset when it evaluates; evaluate() scores the
        # validation texts itself.
        eval_dataset=datasets.Dataset.from_list(examples[:1]) if validation else None,
        data_collator=encoder.collate,
        callbacks=[LogLastStep(), checkpoints,
                   *([step_aligned_dvclive(live(live_tmp))] if live_tmp is not None
                     else [])],
        encoder=encoder, labels=labels, eval_batch_size=eval_batch_size,
        validation=([r["text"] for r in validation], [r["label_id"] for r in validation]))
    if not hf_logging.is_progress_bar_enabled():
        # No terminal (lorasent.cli turns transformers' bars off): the log dicts as plain
        # lines, not a bar redrawn with carriage returns. Swapped here rather than
        # through TrainingArguments.disable_tqdm, which dvclive records in
        # metrics/train/params.yaml: a log file changes no output.
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(PrinterCallback)
    return trainer


def _frozen_in_compute_dtype(model: torch.nn.Module, dtype: torch.dtype,
                             device: torch.device) -> contextlib.AbstractContextManager[object]:
    """While training on a CPU under autocast in bf16 or fp16, one process: the frozen
    weights held in that dtype (:class:`lorasent.frozen_weights.FrozenWeightsIn`, the same
    numbers, no cast per product). A launched run keeps them fp32: FSDP flattens the
    weights of a unit into one tensor of one dtype."""
    if device.type != "cpu" or dtype == torch.float32 or rank_and_world()[1] > 1:
        return contextlib.nullcontext()
    return FrozenWeightsIn(model, dtype)


def _end_autocast(trainer: LorasentTrainer, model: PeftModel) -> None:
    """Take the training's mixed precision off ``model`` (in place), so that it scores
    as the evaluate stage's model, base + the saved adapter, does.

    With ``bf16``/``fp16`` the Trainer's accelerator wrapped ``model.forward`` in
    ``torch.autocast`` (``Accelerator.prepare_model``), and the wrapper outlives the
    training; evaluate and predict score without autocast, on the weights as loaded
    (fp32 on a CPU: :func:`lorasent.environment.compute_dtype`). Left on, the
    validation scores the temperature is fitted on were bf16 products, and
    ``calibration.json`` described scores that evaluate and predict never produce.
    ``Accelerator.unwrap_model(keep_fp32_wrapper=False)`` restores the original
    forward (a no-op for an fp32 training); ``model`` is the peft model itself, never a
    DDP or FSDP wrapper, so a launched run's ``trainer.model`` keeps its wrapper and
    scores through it. The frozen weights are fp32 again already: the
    :class:`lorasent.frozen_weights.FrozenWeightsIn` copies are left with the training.
    """
    trainer.accelerator.unwrap_model(model, keep_fp32_wrapper=False)


def _save_adapter(*, trainer: LorasentTrainer, model: PeftModel, record: AdapterRecord,
                  adapter_dir: Path, main: bool, validation: list[dict[str, Any]],
                  encoder: Encoder, batch_size: int) -> tuple[TemperatureScaling, np.ndarray]:
    """Write the trained adapter to ``adapter_dir`` (replacing it whole, in one atomic
    write): its weights, ``adapter_config.json`` (``target_modules`` sorted), ``record``,
    then ``calibration.json``, the temperature fitted on the ``validation`` rows'
    scores (:func:`_score_validation`, ``batch_size`` texts at a time,
    :func:`lorasent.calibration.temperature_scaling`). Returns that record and the
    scores, float (N, K) (N = 0 without validation rows).

    Every process takes part in gathering the weights (FSDP gathers the shards) and in
    scoring the validation rows; only the ``main`` one writes. The validation rows are
    scored after the weights are written, in eval mode (RNG step 7 of
    :func:`run_train`: nothing is drawn), so the adapter's bytes are those of a
    training without them.
    """
    state_dict = trainer.accelerator.get_state_dict(trainer.model)
    with contextlib.ExitStack() as stack:
        tmp = None
        if main:
            stack.enter_context(writing("the adapter", adapter_dir))
            tmp = stack.enter_context(atomic_dir(adapter_dir))
            model.save_pretrained(str(tmp), state_dict=state_dict, safe_serialization=True)
            _sort_target_modules(tmp / "adapter_config.json")
            write_json(tmp / ADAPTER_RECORD, dump(record))
        assert trainer.model is not None  # Trainer types it optional; run_train gives one
        scores = _score_validation(model=trainer.model, encoder=encoder, rows=validation,
                                   batch_size=batch_size)
        scaling = temperature_scaling(scores, [r["label_id"] for r in validation])
        if tmp is not None:
            write_json(tmp / CALIBRATION_RECORD, dump(scaling))
    return scaling, scores


def _score_validation(*, model: torch.nn.Module, encoder: Encoder,
                      rows: list[dict[str, Any]], batch_size: int) -> np.ndarray:
    """The class scores, float (N, K), of ``rows`` (the validation split), scored by
    ``model`` in eval mode ``batch_size`` texts at a time, as the evaluate stage scores
    the test split (:func:`lorasent.scoring.score_texts`, with the training's autocast
    taken off by :func:`_end_autocast`); every process of a launched run takes part. The
    model is left in eval mode; no rows give a (0, K) array and score nothing."""
    if not rows:
        return np.zeros((0, encoder.num_labels))
    model.eval()
    return score_texts(model, encoder, [r["text"] for r in rows], batch_size,
                       desc="calibration")


def validation_metrics(scores: np.ndarray, y: ClassIds, labels: list[str]
                       ) -> ValidationMetrics:
    """``metrics/validation.json`` for the validation rows' class ``scores``, float
    (N, K), and true class ids ``y`` (N ints in ``[0, K)``), K = ``len(labels)``: the
    argmax's accuracy, macro-F1, per-class scores and confusion matrix
    (:func:`lorasent.metrics.classification_metrics`) with the 95% bootstrap intervals
    of accuracy and macro-F1 (:func:`lorasent.statistics.intervals`, the method
    :func:`lorasent.statistics.interval_method` over validation rows), as the evaluate
    stage measures a test set. With N = 1 the bounds are None, as evaluate leaves a
    one-row set's, and so is ``intervals`` (``note``: :data:`ONE_VALIDATION_ROW`); with N = 0
    every metric is None (``note``: :data:`NO_VALIDATION_METRICS_NOTE`).

    Raises:
        ValueError: ``scores`` and ``y`` of different lengths, or a class id outside
            ``[0, K)`` (:func:`lorasent.metrics.classification_metrics`).
    """
    rows = len(y)
    bounds = ("accuracy_ci95_low", "accuracy_ci95_high", "macro_f1_ci95_low",
              "macro_f1_ci95_high")
    if rows == 0:
        return ValidationMetrics(
            accuracy=None, macro_f1=None, per_class=None, confusion_matrix=None,
            **dict.fromkeys(bounds), labels=labels, validation_rows=0, intervals=None,
            scores_are=None, note=NO_VALIDATION_METRICS_NOTE)
    predicted = np.asarray(scores).argmax(1)
    found = classification_metrics(y, predicted, labels)
    spread = (intervals(y, predicted, len(labels)) if rows > 1 else dict.fromkeys(bounds))
    return ValidationMetrics(
        **found, **spread, labels=labels, validation_rows=rows,
        intervals=IntervalMethod.model_validate(interval_method(rows, over="validation rows"))
        if rows > 1 else None,
        scores_are=VALIDATION_SCORES_ARE, note=None if rows > 1 else ONE_VALIDATION_ROW)


def _write_provenance(path: Path, *, trainer: LorasentTrainer, params_record: dict[str, Any],
                      device: torch.device, wall_time_s: float, inputs: dict[str, str],
                      parameters: tuple[int, int], resume_from: Path | None,
                      shared_start: int | None, train_rows: int, final_loss: float | None,
                      batch_per_process: int, temperature: float | None,
                      compute: str) -> None:
    """The train stage's provenance record (:func:`lorasent.provenance.provenance`) at
    ``path``, with the training's facts: ``parameters`` (trainable, total), the steps
    (``trainer``'s state) and the one resumed from, the shared prompt start, the rows,
    the effective batch (``batch_per_process``: examples per device times accumulation
    steps, times the processes), the final loss, the best validation epoch and the
    ``temperature`` fitted on the validation split (None: not fitted) and the dtype the
    training computed in (``compute_dtype``: ``compute``,
    :func:`lorasent.environment.compute_dtype`); Trainer's speed figures
    (:func:`lorasent.training.callbacks.training_speed`) go to the machine record."""
    trainable, total = parameters
    extra = {"trainable_parameters": trainable, "total_parameters": total,
             "steps": trainer.state.global_step,
             "resumed_from_step": checkpoint_step(resume_from),
             "shared_start_tokens": shared_start, "train_rows": train_rows,
             "effective_batch_size": batch_per_process * trainer.args.world_size,
             "final_loss": final_loss, "best_validation_accuracy": trainer.state.best_metric,
             "best_checkpoint_step": checkpoint_step(trainer.state.best_model_checkpoint),
             "temperature": temperature, "compute_dtype": compute,
             "training_speed": training_speed(trainer.state.log_history)}
    with writing("the provenance record", path):
        write_provenance(path, provenance(stage="train", params=params_record, device=device,
                                          wall_time_s=wall_time_s, inputs=inputs, extra=extra))
