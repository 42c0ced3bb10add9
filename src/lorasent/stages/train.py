"""Stage 4, train: LoRA fine-tuning of the base model on the training split.

Usage: ``lorasent train [--params params.yaml]``

Generative mode (seed 000's way): each example is ``prompt(text) + label word``; the
loss is the cross-entropy of the label word's tokens only (see
:func:`lorasent.scoring.label_token_loss`); with ``train.share_prefix`` the tokens that
every example of a batch starts with (BOS, the instruction) run once per batch, the
rest of each example on their key/value cache. Sequence-classification mode (seed 002's
way): the text goes into a fresh classification head; peft's ``SEQ_CLS`` task trains
the head in full (``modules_to_save``) and saves it with the adapter, and
:func:`check_head_saved` refuses a model whose other new weights would not be saved.
In both, the loss is optionally weighted per class (``train.class_weighting: balanced``,
seed 000's fix for a majority class that drags the loss up).

peft's LoRA (``train.lora``) wraps the base model; transformers' ``Trainer`` runs the
loop (progress bar, schedule, accumulation, length-grouped batches, and with
``train.eval_strategy: epoch`` the validation accuracy after each epoch, keeping the
best epoch when ``train.load_best_model_at_end``); dvclive's callback logs the history
to ``metrics/train/``.

With ``base.num_processes`` > 1 or ``train.accelerate_config`` the stage runs in several
processes (``lorasent.launch``): data parallel (or FSDP), each process taking
``per_device_train_batch_size`` examples a step, so the effective batch is that times
the processes times ``gradient_accumulation_steps`` (recorded in the provenance), and
Trainer's schedule counts the optimiser steps of that batch. Only the main process
writes.

After training, the validation split's rows (whatever ``train.eval_strategy``) are
scored by the trained model as the evaluate stage scores the test split, and one
temperature is fitted on them (temperature scaling, Guo et al. 2017:
:func:`temperature_scaling`), which ``lorasent predict`` divides the scores by.

Writes ``models/adapter/``: ``adapter_model.safetensors``, ``adapter_config.json``,
``lorasent.json`` (mode, labels and their ids, label words and token ids or the head,
prompt, max_length, base model source and hash, resolved params) and
``calibration.json`` (the temperature, the validation NLL, ECE and Brier score before
and after it, the validation risk-coverage: :class:`lorasent.contracts.TemperatureScaling`),
in one atomic write; and a provenance record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import inspect
import json
import logging
import os
import re
import shutil
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers import (
    PrinterCallback,
    ProgressCallback,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, IntervalStrategy
from transformers.utils import logging as hf_logging

from lorasent.atomic import atomic_dir, read_json, read_jsonl, write_json
from lorasent.calibration import (
    ECE_BINS,
    CalibrationError,
    apply_temperature,
    brier,
    coverage_at,
    ece,
    fit_temperature,
    nll,
)
from lorasent.contracts import (
    TEMPERATURE_MAX,
    TEMPERATURE_MIN,
    AdapterRecord,
    BaseModelRef,
    RiskCoveragePoint,
    TemperatureScaling,
    dump,
    temperature_out_of_range,
)
from lorasent.environment import compute_dtype, precision_line, resolve_dtype, writing
from lorasent.errors import LorasentError
from lorasent.hashes import sha256_file
from lorasent.launch import barrier, is_main, rank_and_world
from lorasent.metrics import classification_metrics, probabilities
from lorasent.modeling import load_model_and_prompt
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
)
from lorasent.provenance import provenance, write_provenance
from lorasent.scoring import Encoder, PromptEncoder, score_texts
from lorasent.subsets import training_subset

log = logging.getLogger(__name__)
if TYPE_CHECKING:
    from dvclive.live import Live
    from peft import PeftModel


@dataclass(frozen=True)
class TrainResult:
    """What a run produced; ``model`` is the trained peft model in memory (eval mode),
    for callers that go on using it (it equals base + the saved adapter)."""

    steps: int
    final_loss: float | None
    trainable_parameters: int
    model: Any = None


class LorasentTrainer(Trainer):
    """``Trainer`` with the encoder's loss, and validation by the project's own scoring.

    The loss (``encoder.loss``: label-word tokens or the head's logits) is a per-batch
    weighted mean, so the Trainer divides it by the gradient accumulation steps
    (``loss_is_scaled_for_ga = False``). ``evaluate`` scores the validation texts exactly
    as the evaluate stage scores the test split and reports ``eval_accuracy`` and
    ``eval_macro_f1``, which the Trainer's ``metric_for_best_model`` reads.
    """

    loss_is_scaled_for_ga = False

    def __init__(self, *args: Any, encoder: Encoder, validation: tuple[list[str], list[int]],
                 labels: list[str], eval_batch_size: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.encoder, self.validation = encoder, validation
        self.class_names, self.eval_batch_size = labels, eval_batch_size

    def compute_loss(self, model: torch.nn.Module, inputs: dict[str, torch.Tensor],
                     return_outputs: bool = False,
                     num_items_in_batch: torch.Tensor | int | None = None,
                     ) -> torch.Tensor | tuple[torch.Tensor, None]:
        loss = self.encoder.loss(model, inputs)
        if not torch.isfinite(loss):
            raise NonFiniteLossError(
                f"train: the loss is {loss.item()} at optimiser step "
                f"{self.state.global_step + 1} (learning rate {self._get_learning_rate():g}, "
                f"weights in {next(model.parameters()).dtype}); training stopped and the "
                "last good adapter and metrics are kept. Likely causes: fp16 with a Gemma "
                "model (its activations overflow fp16: set base.precision to bf16 or fp32), "
                "a learning rate too high (lower train.learning_rate), or no gradient "
                "clipping (train.max_grad_norm)")
        return (loss, None) if return_outputs else loss

    def _save_checkpoint(self, model: torch.nn.Module, trial: Any) -> None:
        """Trainer's checkpoint save; a write that finds no space names the checkpoint
        (:func:`lorasent.environment.writing`)."""
        step = self.state.global_step
        path = Path(self.args.output_dir or ".") / f"{PREFIX_CHECKPOINT_DIR}-{step}"
        with writing("a checkpoint", path, CHECKPOINT_SPACE_REMEDY):
            super()._save_checkpoint(model, trial)

    def _get_train_sampler(self, train_dataset: object = None) -> EpochSeededSampler:
        """Length-grouped batches (``group_by_length``), in an order that a resumed run
        draws again (:class:`EpochSeededSampler`, seeded with ``data_seed``, which
        defaults to ``seed`` as in Trainer)."""
        import datasets

        dataset = self.train_dataset if train_dataset is None else train_dataset
        assert isinstance(dataset, datasets.Dataset)  # run_train gives one
        seed = self.args.seed if self.args.data_seed is None else self.args.data_seed
        return EpochSeededSampler(
            self.args.train_batch_size * self.args.gradient_accumulation_steps,
            lengths=list(dataset[self.args.length_column_name]), seed=seed)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Trainer's closing record gives ``train_loss`` over the steps of this call only
        (after a resume, not the whole run); it gets :func:`mean_loss` of the history."""
        mean = mean_loss(self.state.log_history) if "train_loss" in logs else None
        super().log(logs if mean is None else {**logs, "train_loss": mean}, start_time)

    def evaluate(self, eval_dataset: object = None, ignore_keys: list[str] | None = None,
                 metric_key_prefix: str = "eval") -> dict[str, float]:
        texts, y = self.validation
        assert self.model is not None  # Trainer types it optional; run_train always gives one
        self.model.eval()
        scores = score_texts(self.model, self.encoder, texts, self.eval_batch_size,
                             desc="validation")
        self.model.train()
        found = classification_metrics(y, scores.argmax(1), self.class_names)
        metrics = {f"{metric_key_prefix}_accuracy": found["accuracy"],
                   f"{metric_key_prefix}_macro_f1": found["macro_f1"]}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control,
                                                         metrics)
        return metrics


class EpochSeededSampler(LengthGroupedSampler):
    """transformers' length-grouped order, drawn for each epoch from its own generator.

    The stock sampler draws from torch's global generator when an epoch starts, so the
    order of the epoch a run resumes in would come from the resumed run's RNG, not from
    the interrupted one's. Here epoch ``e`` is always shuffled by a generator seeded with
    numpy's ``SeedSequence([seed, e])`` (well-mixed, so seed 43's first epoch is not seed
    42's second). Trainer calls ``set_epoch`` before each epoch, through accelerate's
    data loader in every process, so all processes draw the same order.
    """

    def __init__(self, batch_size: int, lengths: list[int], seed: int):
        super().__init__(batch_size, lengths=lengths)
        self.seed = seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        state = np.random.SeedSequence([self.seed, epoch]).generate_state(1, np.uint64)[0]
        self.generator = torch.Generator().manual_seed(int(state))


class NonFiniteLossError(LorasentError, FloatingPointError):
    """The training loss became NaN or infinite."""


class HeadNotSavedError(LorasentError):
    """A seq_cls model has new weights that the adapter would not save."""


def check_head_saved(model: PeftModel, newly_initialized: list[str]) -> None:
    """Refuse a peft model whose newly initialised weights would not be saved.

    ``AutoModelForSequenceClassification`` initialises the head at random. peft trains
    and saves the modules whose names end with an entry of ``modules_to_save`` (it adds
    ``classifier`` and ``score``); any other new weight (a BERT pooler the checkpoint
    lacks, a head with another name such as BART's ``classification_head``) would be
    random again in the next process, so the adapter could not reproduce the trained
    model.

    Raises:
        HeadNotSavedError: naming the weights and the param that fixes it.
    """
    from peft.utils import ModulesToSaveWrapper

    inner = model.get_base_model()
    lost = []
    for name in newly_initialized:
        parts = name.split(".")[:-1]
        prefixes = (".".join(parts[:i]) for i in range(1, len(parts) + 1))
        if not any(isinstance(inner.get_submodule(p), ModulesToSaveWrapper) for p in prefixes):
            lost.append(name)
    if lost:
        modules = sorted({name.rsplit(".", 1)[0] for name in lost})
        raise HeadNotSavedError(
            f"train.lora.modules_to_save: the weights {lost} are new (initialised at random "
            "when the head was added) but would be neither trained nor saved with the "
            "adapter, so a fresh process would load other values. Add "
            f"{modules} to train.lora.modules_to_save")


# The classification head that AutoModelForSequenceClassification adds, by the module
# names peft's SEQ_CLS task trains in full and saves with the adapter (the
# modules_to_save it adds itself: Gemma's `score`, BERT's `classifier`).
HEAD_MODULES = ("classifier", "score")


def is_head_weight(name: str) -> bool:
    """Whether the weight ``name`` (as transformers names it, e.g. ``score.weight``)
    belongs to a module named as in :data:`HEAD_MODULES`, or to one inside it."""
    return any(part in HEAD_MODULES for part in name.split(".")[:-1])


def new_weights_note(newly_initialized: list[str]) -> tuple[int, str] | None:
    """``(log level, line)`` on the weights transformers' load report lists as MISSING
    (``newly_initialized``: the missing keys of the seq_cls model), for after
    :func:`check_head_saved` has passed; None when there are none.

    The head's weights (:func:`is_head_weight`) are expected to be missing: the head is
    new, initialised here and trained by this run (peft's ``modules_to_save``). Any
    other missing weight is not explained away: the line is then a warning naming it.
    """
    if not newly_initialized:
        return None
    head = [name for name in newly_initialized if is_head_weight(name)]
    other = [name for name in newly_initialized if not is_head_weight(name)]
    about_head = (f"{', '.join(head)}, MISSING in transformers' load report above, "
                  f"{'is' if len(head) == 1 else 'are'} the new classification head: "
                  "initialised here and trained by this run (peft's modules_to_save, saved "
                  "with the adapter)")
    if not other:
        return logging.INFO, f"seq_cls: {about_head}, so MISSING is expected there"
    return logging.WARNING, (
        f"seq_cls: {about_head + '; but ' if head else ''}{', '.join(other)} "
        f"{'is' if len(other) == 1 else 'are'} MISSING{' too' if head else ''} and not the "
        "head: not in the base model's checkpoint, initialised at random, and trained here "
        "only because train.lora.modules_to_save lists its module; check that base.model is "
        "the model you meant")


def _live(folder: Path) -> Live:
    """dvclive's ``Live`` writing the history to ``folder``.

    Under ``dvc exp run`` dvclive would ``git add`` its folder when training ends. Here
    that folder is a temporary one, renamed into place on success, so the add would
    leave its deleted files staged in the user's index (``git status``: ``AD``), where a
    later ``git commit`` would record them. The train stage's output already holds the
    history and DVC commits it with the experiment, so dvclive is not told that an
    experiment is running (it reads that from ``DVC_EXP_BASELINE_REV``, only when the
    ``Live`` is made).
    """
    from dvclive.live import Live

    hidden = os.environ.pop("DVC_EXP_BASELINE_REV", None)
    try:
        return Live(dir=str(folder), dvcyaml=False, save_dvc_exp=False, report=None)
    finally:
        if hidden is not None:
            os.environ["DVC_EXP_BASELINE_REV"] = hidden


class LogLastStep(TrainerCallback):
    """Logs the loss at the last optimiser step, and at every checkpoint's step, too.

    Trainer's ``DefaultFlowCallback`` logs at step 1 (``logging_first_step``) and every
    ``logging_steps``. When ``max_steps`` is not a multiple of ``logging_steps``, the last
    steps' loss was never logged, and the run's final loss was an earlier one: with 3 steps
    and ``logging_steps`` 10, step 1's, the same for every LoRA rank ``r``, because LoRA's
    B starts at zero. A resumed run's first record averages the steps since its
    checkpoint, so a checkpoint's step is always logged (``DefaultFlowCallback``, called
    first, has already set ``should_save``): the history then resumes exactly as it would
    have gone on. Every process takes it, since logging averages the loss across them.
    """

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> TrainerControl:
        if args.logging_strategy == IntervalStrategy.STEPS and (
                state.global_step >= state.max_steps or control.should_save):
            control.should_log = True
        return control

    def on_epoch_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: Any) -> TrainerControl:
        if control.should_save:
            control.should_log = True
        return control


# Trainer's log keys of the machine's speed (``train_runtime``, ``eval_samples_per_second``,
# ...): they differ between two runs that give the same weights, so they go to the machine
# record (:func:`training_speed`), not to the history git and dvc.lock hash.
MACHINE_SPEED = re.compile(r"_(runtime|per_second)$")


def training_speed(log_history: list[dict[str, Any]]) -> dict[str, float]:
    """Trainer's speed figures of a run (:data:`MACHINE_SPEED` keys of its log history,
    the last of each: ``train_runtime`` in seconds, ``train_samples_per_second``, ...)."""
    return {key: value for record in log_history for key, value in record.items()
            if MACHINE_SPEED.search(key)}


def _step_aligned_dvclive(live: Live) -> TrainerCallback:
    """transformers' dvclive callback, logging at the optimiser step, and the whole run
    when it resumes from a checkpoint. Speed figures (:data:`MACHINE_SPEED`) are left out.

    The stock callback counts log events (0, 1, 2, ...); a loss curve's x axis should be
    the optimiser step, so each event is logged at its ``step``. A resumed run's history
    starts with the records its checkpoint holds (``state.log_history``), so that
    ``metrics/train`` is the one an uninterrupted run writes.
    """
    from transformers.integrations.integration_utils import DVCLiveCallback

    class StepAlignedDVCLiveCallback(DVCLiveCallback):
        def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                           control: TrainerControl, model: torch.nn.Module | None = None,
                           **kwargs: Any) -> None:
            super().on_train_begin(  # type: ignore[no-untyped-call]  # transformers leaves it unannotated
                args, state, control, model=model, **kwargs)
            for record in state.log_history:  # empty unless resumed
                self._log_at(int(record["step"]), args, state, control,
                             {k: v for k, v in record.items() if k != "step"})

        def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                   model: torch.nn.Module | None = None, logs: dict[str, float] | None = None,
                   **kwargs: Any) -> None:
            self._log_at(state.global_step, args, state, control, logs)

        def _log_at(self, step: int, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, logs: dict[str, float] | None) -> None:
            live.step = step
            kept = {k: v for k, v in (logs or {}).items() if not MACHINE_SPEED.search(k)}
            super().on_log(  # type: ignore[no-untyped-call]  # transformers leaves it unannotated
                args, state, control, logs=kept)

    return StepAlignedDVCLiveCallback(live=live)


def mean_loss(log_history: list[dict[str, Any]]) -> float | None:
    """The mean training loss per optimiser step over a run's loss records: each record's
    ``loss`` (the mean since the previous record) weighted by its steps. With the last
    step logged (:class:`LogLastStep`) it is Trainer's ``train_loss`` of an uninterrupted
    run, up to float rounding; unlike that, it also covers the steps before a resume."""
    total, last = 0.0, 0
    for record in log_history:
        if "loss" in record:
            total += record["loss"] * (record["step"] - last)
            last = record["step"]
    return total / last if last else None


# The modules whose code the adapter depends on: the train stage's deps in dvc.yaml (its
# import closure, checked by tests/test_dvc_deps.py).
TRAIN_CODE = ("stages.train", "atomic", "calibration", "characters", "command_errors",
              "commands.stages", "contracts", "dvc_project", "environment", "errors",
              "experiment_params", "hashes", "launch", "metrics", "modeling", "modes", "params",
              "paths", "provenance", "scoring", "statistics", "subsets", "tables")
CHECKPOINT_RECORD = "lorasent-checkpoint.json"


def training_key(*, base: BaseParams, prompt: PromptParams, train: TrainParams,
                 inputs: dict[str, str], setting: dict[str, Any]) -> str:
    """SHA-256 (64 hex digits) of everything a training's steps depend on; a checkpoint
    is resumed only by a run with the same key.

    It covers the train stage's params (``base``, ``prompt`` and ``train``, as dvc.yaml
    lists them) less ``train.save_steps`` and ``train.resume``, which change when
    checkpoints are written and read, not what is trained; ``inputs``, the SHA-256 of the
    splits, the base model and an accelerate config; the code of :data:`TRAIN_CODE`; the
    versions of torch, transformers, peft and accelerate; and ``setting``: device, dtype
    and processes, which change the numbers and the RNG states a checkpoint holds.
    """
    record = {
        "params": {"base": base.model_dump(mode="json"), "prompt": prompt.model_dump(mode="json"),
                   "train": train.model_dump(mode="json", exclude={"save_steps", "resume"})},
        "inputs": inputs,
        "code": {name: sha256_file(inspect.getfile(importlib.import_module(f"lorasent.{name}")))
                 for name in TRAIN_CODE},
        "packages": {name: metadata.version(name)
                     for name in ("torch", "transformers", "peft", "accelerate")},
        "setting": setting,
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


class Checkpoints(TrainerCallback):
    """One training's checkpoints: Trainer's ``checkpoint-<step>`` folders in ``folder``.

    Trainer writes each (adapter, optimiser, scheduler, every process's RNG state, then
    ``trainer_state.json``) and keeps the last two (``save_total_limit``); this callback
    then adds :data:`CHECKPOINT_RECORD`, ``{"key": training_key, "step": N}``. A folder
    without it (killed while saving) or with another key is removed. One with the
    record whose files are missing or damaged (cut short, corrupt: :func:`damage`) was
    complete once, so it is set aside as ``damaged-checkpoint-<step>`` in ``folder``,
    kept for inspection and never resumed; training goes on from the last good one.
    """

    def __init__(self, folder: Path, key: str, processes: int):
        self.folder, self.key, self.processes = folder, key, processes

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> None:
        if state.is_world_process_zero:
            path = self.folder / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            with writing("a checkpoint", path, CHECKPOINT_SPACE_REMEDY):
                write_json(path / CHECKPOINT_RECORD, {"key": self.key, "step": state.global_step})

    def found(self) -> list[Path]:
        """The checkpoint folders, by step."""
        steps = {}
        for path in self.folder.glob(f"{PREFIX_CHECKPOINT_DIR}-*"):
            step = path.name.rsplit("-", 1)[1]
            if step.isdigit() and path.is_dir():
                steps[int(step)] = path
        return [steps[step] for step in sorted(steps)]

    def why_not(self, path: Path) -> str | None:
        """Why the checkpoint at ``path`` cannot be resumed; None when it can. A reason
        starting with :data:`DAMAGED` means its files are damaged (:func:`damage`)."""
        try:
            record = read_json(path / CHECKPOINT_RECORD)
        except (OSError, ValueError):
            return "incomplete: the run was stopped while saving it"
        if not isinstance(record, dict) or record.get("key") != self.key:
            return "from another training: its params, data, base model or code differ"
        with contextlib.suppress(OSError, ValueError, AttributeError):  # else damage() says
            state = read_json(path / "trainer_state.json")
            if 0 < state.get("max_steps", 0) <= state.get("global_step", 0):
                return LAST_STEP
        rng = (["rng_state.pth"] if self.processes == 1
               else [f"rng_state_{i}.pth" for i in range(self.processes)])
        problem = damage(path, rng)
        return None if problem is None else DAMAGED + problem

    def set_aside(self, path: Path) -> Path:
        """Move the checkpoint at ``path`` to ``damaged-<name>`` (``-2``, ``-3``, ... when
        taken) in the same folder, where Trainer neither resumes nor rotates it.

        Raises:
            LorasentError: it could not be moved, saying to delete it.
        """
        target, n = self.folder / f"damaged-{path.name}", 1
        while target.exists():
            n += 1
            target = self.folder / f"damaged-{path.name}-{n}"
        try:
            path.rename(target)
        except OSError as err:
            raise LorasentError(
                f"{path}: damaged and could not be set aside as {target} ({err}); delete "
                "it and run again") from err
        return target

    def prepare(self, resume: bool) -> Path | None:
        """The checkpoint to resume from, or None. The main process first removes every
        checkpoint that cannot be resumed (all of them when not ``resume``) and sets the
        damaged ones aside (:meth:`set_aside`), logging each with why, and logs when
        none is left to resume; the others wait for it."""
        verdicts: dict[Path, str | None] = {}
        if is_main():
            dropped = False
            for path in self.found():
                why = verdicts[path] = self.why_not(path) if resume else "train.resume is never"
                if why and why.startswith(DAMAGED):
                    log.warning("set aside %s as %s (%s); it is never resumed and kept for "
                                "inspection: delete it when done", path, self.set_aside(path),
                                why)
                elif why:
                    shutil.rmtree(path, ignore_errors=True)
                    log.info("removed %s (%s)", path, why)
                dropped = dropped or why is not None
            if resume and dropped and all(verdicts.values()):
                log.warning("no checkpoint in %s can be resumed: training starts at step 0",
                            self.folder)
        barrier()
        usable = [path for path in self.found() if resume and (
            verdicts[path] if path in verdicts else self.why_not(path)) is None]
        return usable[-1] if usable else None

    def remove(self) -> None:
        """Remove the checkpoints: the adapter is saved. Damaged ones set aside stay
        (logged), else the folder goes too."""
        for path in self.found():
            shutil.rmtree(path, ignore_errors=True)
        kept = sorted(p.name for p in self.folder.glob(f"damaged-{PREFIX_CHECKPOINT_DIR}-*"))
        if kept:
            log.warning("kept the damaged checkpoints %s in %s for inspection; delete them "
                        "when done", ", ".join(kept), self.folder)
        else:
            shutil.rmtree(self.folder, ignore_errors=True)


DAMAGED = "damaged: "
# Why the checkpoint of a training's last step is not resumed: Trainer (transformers 5)
# would train one step more from it when that step ends no epoch (it resumes the epoch
# and checks max_steps only after a step), so the checkpoint before it is resumed.
LAST_STEP = ("the training's last step: resumed from it, transformers would train one "
             "step more; the checkpoint before it is resumed instead")
# What a checkpoint must hold besides its RNG states: Trainer resumes without a missing
# optimiser or scheduler state, silently starting them afresh.
_ADAPTER_WEIGHTS = "adapter_model.safetensors"
_SCHEDULER = "scheduler.pt"
_OPTIMIZERS = ("optimizer.pt", "optimizer.bin")  # FSDP: optimizer.bin or optimizer_0/
CHECKPOINT_SPACE_REMEDY = ("make checkpoints/ a link to a folder on a larger disk, or set "
                           "train.save_steps: 0 to save no checkpoints")


def damage(path: Path, rng: list[str]) -> str | None:
    """What is wrong with the files of the checkpoint folder ``path`` (which holds a
    record, so Trainer finished writing it), or None. Checked without loading a tensor:

    - present: ``trainer_state.json``, ``adapter_model.safetensors``, ``scheduler.pt``,
      an optimiser state (``optimizer.pt``, or FSDP's ``optimizer.bin`` or
      ``optimizer*/`` folder) and the ``rng`` files;
    - ``trainer_state.json``: a JSON object whose ``global_step`` is the folder's step
      and whose ``max_steps`` is an integer;
    - every ``*.json``: JSON; every ``*.safetensors``: its header parses and covers the
      file (``safetensors.safe_open``); every ``*.pt``, ``*.pth``, ``*.bin`` (torch's
      zip format): a zip whose members all match their CRC-32 (``zipfile.testzip``).
    """
    from safetensors import SafetensorError, safe_open

    names = {p.name for p in path.iterdir()}
    optimizer = [n for n in names if n in _OPTIMIZERS or (
        n.startswith("optimizer") and (path / n).is_dir())]
    missing = [n for n in ("trainer_state.json", _ADAPTER_WEIGHTS, _SCHEDULER, *rng)
               if n not in names] + ([] if optimizer else ["optimizer.pt"])
    if missing:
        return f"{', '.join(missing)} missing"
    for name in sorted(names):
        file = path / name
        if not file.is_file():
            continue
        try:
            if name.endswith(".json"):
                data = json.loads(file.read_text(encoding="utf-8"))
                if name == "trainer_state.json":
                    step = int(path.name.rsplit("-", 1)[1])
                    if not isinstance(data, dict) or data.get("global_step") != step or (
                            not isinstance(data.get("max_steps"), int)):
                        return (f"{name} does not give global_step {step} and max_steps "
                                f"(it holds {_head(data)})")
            elif name.endswith(".safetensors"):
                with safe_open(str(file), framework="pt") as weights:
                    weights.keys()
            elif name.endswith((".pt", ".pth", ".bin")):
                with zipfile.ZipFile(file) as archive:
                    bad = archive.testzip()
                if bad is not None:
                    return f"{name} is corrupt (its member {bad} fails its CRC-32 check)"
        except (OSError, ValueError, zipfile.BadZipFile, SafetensorError) as err:
            return f"{name} is cut short or corrupt ({type(err).__name__}: {err})"
    return None


def _head(data: Any, chars: int = 60) -> str:
    """``data`` as compact JSON, cut to ``chars`` characters."""
    text = json.dumps(data, separators=(",", ":"))
    return text if len(text) <= chars else text[:chars] + "..."


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


def _checkpoint_step(path: str | Path | None) -> int | None:
    """The step of Trainer's ``.../checkpoint-<step>`` folder, or None."""
    return int(str(path).rsplit("-", 1)[1]) if path else None


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
              checkpoint_dir: Path = CHECKPOINT_DIR) -> TrainResult:
    """Train a LoRA adapter and write it with its record to ``adapter_dir``.

    A recipe: setup steps, each given only its slice of the params, then the training,
    then the cleanup. The validation split is scored
    ``train.per_device_train_batch_size`` texts at a time: after each epoch with
    ``train.eval_strategy: epoch``, and, whatever that says, once after training, for
    the temperature written to ``calibration.json`` (:func:`temperature_scaling`; with
    no validation rows, a record without a temperature). That batch size is the one the
    Trainer's validation already uses and fits the device; the evaluate stage's
    ``evaluate.batch_size`` is not read, so that the train stage reads only its own
    params sections (dvc.yaml: ``base``, ``prompt``, ``train``).

    Every ``train.save_steps`` optimiser steps (and after each epoch with
    ``train.load_best_model_at_end``) Trainer saves a checkpoint in ``checkpoint_dir``;
    with ``train.resume: auto`` a run whose :func:`training_key` matches a complete one
    goes on from the last, through Trainer's ``resume_from_checkpoint`` (adapter,
    optimiser, scheduler, RNG states, position in the data), and ends with the adapter
    an uninterrupted run writes. A damaged checkpoint is set aside, never resumed
    (:class:`Checkpoints`). The folder is removed once the adapter is saved; a failed
    or killed run leaves it for the next.

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
    5. Each epoch ``e``: :class:`EpochSeededSampler` orders the batches with its own
       generator, seeded from ``SeedSequence([base.seed, e])`` (``data_seed``), drawing
       nothing from the global ones; then torch's ``DataLoader``, making the epoch's
       iterator, draws one int64 from torch's generator (the workers' base seed, unused
       with ``dataloader_num_workers: 0``).
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
        HeadNotSavedError: seq_cls weights that the adapter would not save.
        NoSpaceLeft: a checkpoint, the loss history, the adapter or the provenance
            record found its filesystem full (:func:`lorasent.environment.writing`).
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
                with writing("the loss history", live_dir):
                    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from
                                  else None)
            except torch.OutOfMemoryError as err:
                raise LorasentError(_out_of_memory(train, device, err)) from err
        finally:
            if main:  # Trainer makes the folder even when it saves nothing
                with contextlib.suppress(OSError):
                    checkpoint_dir.rmdir()
        scaling = _save_adapter(  # RNG step 7
            trainer=trainer, model=model, record=record, adapter_dir=adapter_dir, main=main,
            validation=data.calibration, encoder=encoder,
            batch_size=train.per_device_train_batch_size)
    # cleanup: the checkpoints go once the adapter is saved; the provenance record
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    final_loss = losses[-1] if losses else None
    if main:
        checkpoints.remove()
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
        HeadNotSavedError: new weights (``model.newly_initialized``) that the adapter
            would not save (:func:`check_head_saved`).
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
    """The run's :class:`Checkpoints` and the checkpoint to resume from (None: start at
    step 0), after :meth:`Checkpoints.prepare` has cleared the others.

    Takes all three params sections: a checkpoint is resumed only by the same training
    (:func:`training_key` over them, ``inputs`` and ``setting``); ``train.resume``
    says whether to resume at all.
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
    """The :class:`LorasentTrainer` over ``examples``, scoring ``validation`` (when any)
    ``eval_batch_size`` texts at a time, with the callbacks: the last step logged,
    ``checkpoints``, dvclive writing to ``live_tmp`` (the main process's; None in the
    others), and plain log lines instead of a progress bar off a terminal. Its
    ``__init__`` seeds the generators again (RNG step 4 of :func:`run_train`)."""
    import datasets

    trainer = LorasentTrainer(
        model=model, args=args, train_dataset=datasets.Dataset.from_list(examples),
        # Trainer insists on an eval_dataset when it evaluates; evaluate() scores the
        # validation texts itself.
        eval_dataset=datasets.Dataset.from_list(examples[:1]) if validation else None,
        data_collator=encoder.collate,
        callbacks=[LogLastStep(), checkpoints,
                   *([_step_aligned_dvclive(_live(live_tmp))] if live_tmp is not None
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


def _save_adapter(*, trainer: LorasentTrainer, model: PeftModel, record: AdapterRecord,
                  adapter_dir: Path, main: bool, validation: list[dict[str, Any]],
                  encoder: Encoder, batch_size: int) -> TemperatureScaling:
    """Write the trained adapter to ``adapter_dir`` (replacing it whole, in one atomic
    write): its weights, ``adapter_config.json`` (``target_modules`` sorted), ``record``,
    then ``calibration.json``, the temperature fitted on the ``validation`` rows
    (:func:`_fit_on_validation`, ``batch_size`` texts at a time), which is returned.

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
        scaling = _fit_on_validation(model=trainer.model, encoder=encoder, rows=validation,
                                     batch_size=batch_size)
        if tmp is not None:
            write_json(tmp / CALIBRATION_RECORD, dump(scaling))
    return scaling


# Temperature scaling as the train stage fits it (calibration.json's ``method``).
TEMPERATURE_METHOD = (
    "temperature scaling (Guo et al. 2017, On Calibration of Modern Neural Networks): the "
    "class scores are divided by one temperature T > 0 before the softmax, T chosen to "
    "minimise the negative log-likelihood of the validation rows (lorasent.calibration."
    "fit_temperature), as scikit-learn's CalibratedClassifierCV(method='temperature') fits it")
# calibration.json's ``note`` when the validation split has no rows.
NO_VALIDATION_NOTE = ("no validation split (split.validation_size: 0): temperature scaling "
                      "not fitted; predict uses the raw probabilities")
# calibration.json's ``note`` when the validation rows cannot be fitted (the reason follows).
NOT_FITTED_NOTE = "temperature scaling not fitted ({}); predict uses the raw probabilities"
# calibration.json's ``note`` when the fitted T is outside the range calibration.json
# takes (lorasent.contracts.TEMPERATURE_MIN, TEMPERATURE_MAX): T, then the range. Short:
# `lorasent metrics` shows it on one line; the train log adds DEGENERATE_WHY.
DEGENERATE_NOTE = ("fitted T = {:.4g} is outside [{:g}, {:g}] (degenerate validation rows): "
                   "not kept; predict uses the raw probabilities")
DEGENERATE_WHY = ("every validation row right, or every one wrong, by a wide margin drives "
                  "the fit to scikit-learn's bounds; a larger validation split gives a usable T")
# The thresholds of calibration.json's risk-coverage: 0.00, 0.05, ..., 0.95.
CONFIDENCE_GRID = tuple(round(0.05 * k, 2) for k in range(20))


def temperature_scaling(scores: np.ndarray, y: Sequence[int]) -> TemperatureScaling:
    """``calibration.json`` for the validation rows' class scores: the temperature T
    (:func:`lorasent.calibration.fit_temperature`), the NLL, ECE
    (:data:`lorasent.calibration.ECE_BINS` bins) and Brier score of the raw softmax and
    of ``softmax(scores / T)``, and the scaled probabilities' risk-coverage at each
    threshold of :data:`CONFIDENCE_GRID` (:func:`lorasent.calibration.coverage_at`: a
    row is kept when its top probability is at least the threshold).

    Args:
        scores: float (N, K), label-word log-probabilities or head logits
            (:func:`lorasent.scoring.score_texts`).
        y: the N true class ids.

    Returns:
        The record. Not fitted, ``temperature`` None and no risk-coverage: with N = 0
        (``note``: :data:`NO_VALIDATION_NOTE`), or rows T cannot be fitted on (fewer
        than 2, or of one class: :data:`NOT_FITTED_NOTE` with the reason; the raw
        softmax's metrics are given), or rows whose fitted T is outside
        [:data:`lorasent.contracts.TEMPERATURE_MIN`,
        :data:`lorasent.contracts.TEMPERATURE_MAX`] (``note``: :data:`DEGENERATE_NOTE`,
        the raw softmax's metrics given: such a T would make every later prediction all
        but one-hot or uniform).
    """
    n = len(y)
    if n == 0:
        return _not_fitted(0, NO_VALIDATION_NOTE)
    labels = np.asarray(y, dtype=np.int64)
    before = probabilities(scores)
    raw = {"nll_before": nll(labels, before), "ece_before": ece(labels, before, bins=ECE_BINS),
           "brier_before": brier(labels, before)}
    try:
        temperature = fit_temperature(scores, labels)
    except CalibrationError as err:
        log.warning("train: %s", NOT_FITTED_NOTE.format(err))
        return _not_fitted(n, NOT_FITTED_NOTE.format(err)).model_copy(update=raw)
    if temperature_out_of_range(temperature) is not None:
        note = DEGENERATE_NOTE.format(temperature, TEMPERATURE_MIN, TEMPERATURE_MAX)
        log.warning("train: %s: %s", note, DEGENERATE_WHY)
        return _not_fitted(n, note).model_copy(update=raw)
    after = apply_temperature(scores, temperature)
    points = []
    for threshold in CONFIDENCE_GRID:
        coverage, accuracy = coverage_at(labels, after, threshold)
        points.append(RiskCoveragePoint(min_confidence=threshold, coverage=coverage,
                                        accuracy=accuracy, rows=round(coverage * n)))
    return TemperatureScaling(
        method=TEMPERATURE_METHOD, fitted_on="validation", validation_rows=n,
        temperature=temperature, note=None, ece_bins=ECE_BINS,
        nll_before=nll(labels, before), nll_after=nll(labels, after),
        ece_before=ece(labels, before, bins=ECE_BINS),
        ece_after=ece(labels, after, bins=ECE_BINS),
        brier_before=brier(labels, before), brier_after=brier(labels, after),
        risk_coverage=points)


def _not_fitted(rows: int, note: str) -> TemperatureScaling:
    """``calibration.json`` without a temperature: ``note`` says why, the metrics are
    None, the risk-coverage empty."""
    return TemperatureScaling(
        method=TEMPERATURE_METHOD, fitted_on="validation", validation_rows=rows,
        temperature=None, note=note, ece_bins=ECE_BINS, nll_before=None, nll_after=None,
        ece_before=None, ece_after=None, brier_before=None, brier_after=None,
        risk_coverage=[])


def _fit_on_validation(*, model: torch.nn.Module, encoder: Encoder,
                       rows: list[dict[str, Any]], batch_size: int) -> TemperatureScaling:
    """:func:`temperature_scaling` of ``rows`` (the validation split), scored by ``model``
    in eval mode ``batch_size`` texts at a time, as the evaluate stage scores the test
    split (:func:`lorasent.scoring.score_texts`); every process of a launched run
    takes part. The model is left in eval mode."""
    if not rows:
        return temperature_scaling(np.zeros((0, encoder.num_labels)), [])
    model.eval()
    scores = score_texts(model, encoder, [r["text"] for r in rows], batch_size,
                         desc="calibration")
    return temperature_scaling(scores, [r["label_id"] for r in rows])


def _write_provenance(path: Path, *, trainer: LorasentTrainer, params_record: dict[str, Any],
                      device: torch.device, wall_time_s: float, inputs: dict[str, str],
                      parameters: tuple[int, int], resume_from: Path | None,
                      shared_start: int | None, train_rows: int, final_loss: float | None,
                      batch_per_process: int, temperature: float | None,
                      compute: str) -> None:
    """The train stage's provenance record (:func:`lorasent.artifacts.provenance`) at
    ``path``, with the training's facts: ``parameters`` (trainable, total), the steps
    (``trainer``'s state) and the one resumed from, the shared prompt start, the rows,
    the effective batch (``batch_per_process``: examples per device times accumulation
    steps, times the processes), the final loss, the best validation epoch and the
    ``temperature`` fitted on the validation split (None: not fitted) and the dtype the
    training computed in (``compute_dtype``: ``compute``,
    :func:`lorasent.environment.compute_dtype`); Trainer's speed figures
    (:func:`training_speed`) go to the machine record."""
    trainable, total = parameters
    extra = {"trainable_parameters": trainable, "total_parameters": total,
             "steps": trainer.state.global_step,
             "resumed_from_step": _checkpoint_step(resume_from),
             "shared_start_tokens": shared_start, "train_rows": train_rows,
             "effective_batch_size": batch_per_process * trainer.args.world_size,
             "final_loss": final_loss, "best_validation_accuracy": trainer.state.best_metric,
             "best_checkpoint_step": _checkpoint_step(trainer.state.best_model_checkpoint),
             "temperature": temperature, "compute_dtype": compute,
             "training_speed": training_speed(trainer.state.log_history)}
    with writing("the provenance record", path):
        write_provenance(path, provenance(stage="train", params=params_record, device=device,
                                          wall_time_s=wall_time_s, inputs=inputs, extra=extra))
