"""transformers' ``Trainer`` as the train stage runs it (:class:`LorasentTrainer`): the
encoder's loss, stopped when it is NaN or infinite (:class:`NonFiniteLossError`), the
validation scored as the evaluate stage scores the test split, and batches in an order
that a resumed run draws again (:class:`EpochSeededSampler`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import Trainer
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from lorasent.environment import writing
from lorasent.errors import LorasentError
from lorasent.metrics import classification_metrics
from lorasent.scoring import Encoder, score_texts
from lorasent.training.callbacks import mean_loss
from lorasent.training.checkpoints import CHECKPOINT_SPACE_REMEDY


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
        (after a resume, not the whole run); it gets
        :func:`lorasent.training.callbacks.mean_loss` of the history."""
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

