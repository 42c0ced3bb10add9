"""The Trainer callbacks that log the train stage's loss history, and its summaries.

:class:`LogLastStep` logs the last step and every checkpoint's; :func:`step_aligned_dvclive`
writes the history with dvclive (:func:`live`) at the optimiser step, the machine's speed
left out (:data:`MACHINE_SPEED`, :func:`training_speed`); :func:`mean_loss` averages a
history's loss over its steps.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import IntervalStrategy

if TYPE_CHECKING:
    from dvclive.live import Live


def live(folder: Path) -> Live:
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


def step_aligned_dvclive(live: Live) -> TrainerCallback:
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

