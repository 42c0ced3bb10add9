"""The ``encoder_ft`` reference: a small encoder fine-tuned in full, with a classification
head, on exactly the rows the adapter trains on.

The reference a practitioner fits before believing that a LoRA adapter on a language
model was worth it: the same small encoder as ``encoder`` (all-MiniLM-L6-v2 by default),
every weight trained (no frozen layer, no LoRA), as transformers' ``run_classification.py``
fine-tunes one (``AutoModelForSequenceClassification``, AdamW, a linear schedule with
warm-up). Its own hyperparameters are chosen on the validation split exactly as the
adapter's should be, so that it is not a straw man: issue 69 measured a 3-epoch schedule
detectably worse than a 5-epoch one on two seeds of three.

transformers' ``Trainer`` runs it directly, not the pipeline's ``seq_cls`` path: that path
is the train stage's recipe for the pipeline's own model (LoRA, prompts, checkpoints,
temperature, several processes), while a reference is fitted inside the baseline stage in
one process, on a separate model, with nothing to resume.

The choice (:func:`fit_finetuned_encoder`): for each learning rate of the grid, one run of
``epochs`` epochs of a linear schedule (so the rate decays over the same length whatever
epoch is kept), the validation split scored after each epoch; the (learning rate, epoch)
of the best validation accuracy is kept, ties broken by the fewer epochs, then the smaller
learning rate (less training, as ``C``'s ties take the stronger regularisation). Without a
validation split nothing can be chosen: the grid's first learning rate, every epoch, the
last epoch kept; the record says so.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from lorasent.references import (
    Cost,
    FitRows,
    Fitted,
    check_fittable,
    encoder_folder,
    loaded,
    measured,
)

METHOD = ("{model} fine-tuned in full with a classification head (transformers' "
          "AutoModelForSequenceClassification and Trainer: AdamW, linear schedule, "
          "{max_length} tokens at most)")


def fit_finetuned_encoder(*, train_texts: Sequence[str], y_train: Sequence[int],
                          val_texts: Sequence[str], y_val: Sequence[int],
                          labels: Sequence[str], class_weighting: str, model: str,
                          learning_rates: Sequence[float], epochs: int, batch_size: int,
                          max_length: int, weight_decay: float, warmup_ratio: float,
                          seed: int) -> Fitted:
    """``encoder_ft``: ``model`` (``packaged:minilm-l6`` or a local encoder folder)
    fine-tuned in full on the training rows, its learning rate and epoch chosen on the
    validation rows (the module's rule), on the CPU in float32.

    Texts are cut to ``max_length`` tokens (``[CLS]`` and ``[SEP]`` included; the record
    counts the training texts cut); ``batch_size`` texts per optimiser step, padded to the
    batch's longest, the batches drawn by transformers' length-grouped sampler (texts of
    like length together, seeded) and stepped by PyTorch's fused AdamW.
    ``class_weighting`` ``balanced`` weights the cross-entropy by scikit-learn's balanced
    weights (``rows / (classes x rows of the class)``), as the
    adapter's loss does. ``seed`` (``base.seed``) seeds the head's initialisation, the
    batches' order and dropout (``transformers.set_seed`` through ``Trainer``): a rerun on
    the same platform and thread count gives the same bytes.

    The returned ``predict(texts)`` gives float64 (N, K) softmax probabilities of the kept
    model. The record holds the method, the model and its hash, the grid's validation
    accuracy per learning rate and epoch, the choice and how it was made, the truncated
    texts, and the cost (every weight trainable; tokens over the whole grid).

    Raises:
        ReferenceNotFitted: too few rows per class (:func:`~lorasent.references.
            check_fittable`), or a model folder that is not an encoder or cannot load.
    """
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        PrinterCallback,
        Trainer,
        TrainerCallback,
        TrainingArguments,
        set_seed,
    )

    from lorasent.hashes import combined_sha256, sha256_tree

    check_fittable(y_train, labels)
    folder = encoder_folder(model, key="baseline.encoder_ft.model")
    num_labels = len(labels)
    cost = Cost()
    y = np.asarray(y_train, dtype=np.int64)
    yv = np.asarray(y_val, dtype=np.int64)
    if class_weighting == "balanced":
        counts = np.bincount(y, minlength=num_labels).astype(np.float64)
        present = counts > 0
        weights = np.zeros(num_labels)
        weights[present] = len(y) / (present.sum() * counts[present])
        loss_weight: torch.Tensor | None = torch.tensor(weights, dtype=torch.float32)
    else:
        loss_weight = None

    def compute_loss(outputs: Any, target: torch.Tensor, num_items_in_batch: Any = None
                     ) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(outputs.logits, target, weight=loss_weight)

    with measured(cost, "fit"):
        tokenizer = loaded(folder, AutoTokenizer.from_pretrained)
        encoded = tokenizer(list(train_texts), truncation=True, max_length=max_length)
        untruncated = tokenizer(list(train_texts), truncation=False, verbose=False)["input_ids"]
        truncated = sum(len(ids) > max_length for ids in untruncated)
        per_pass = sum(len(ids) for ids in encoded["input_ids"])
        train_set = [{"input_ids": ids, "attention_mask": mask, "labels": int(label)}
                     for ids, mask, label in zip(encoded["input_ids"],
                                                 encoded["attention_mask"], y, strict=True)]
        collator = DataCollatorWithPadding(tokenizer)

        def probabilities(network: Any, texts: Sequence[str]) -> np.ndarray:
            out = [np.zeros((0, num_labels), dtype=np.float64)]
            network.eval()
            with torch.inference_mode():
                for start in range(0, len(texts), 64):
                    batch = tokenizer(list(texts[start:start + 64]), padding=True,
                                      truncation=True, max_length=max_length,
                                      return_tensors="pt")
                    out.append(torch.softmax(network(**batch).logits.double(), -1).numpy())
            return np.concatenate(out)

        class KeepBest(TrainerCallback):
            """After each epoch: the validation accuracy, and the weights of the best."""

            def __init__(self, network: Any) -> None:
                self.network = network
                self.accuracies: list[float] = []
                self.best: tuple[float, dict[str, Any]] | None = None

            def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                if not len(yv):
                    return
                accuracy = float(np.mean(probabilities(self.network, val_texts).argmax(1)
                                         == yv))
                self.accuracies.append(accuracy)
                self.network.train()
                if self.best is None or accuracy > self.best[0]:  # ties: the earlier epoch
                    self.best = (accuracy, copy.deepcopy(self.network.state_dict()))

        grid = list(learning_rates) if len(yv) else list(learning_rates)[:1]
        runs: list[dict[str, Any]] = []
        kept: tuple[tuple[float, int, float], dict[str, Any]] | None = None
        network = None
        with tempfile.TemporaryDirectory(prefix="lorasent-encoder-ft-") as scratch:
            for rate in grid:
                arguments = TrainingArguments(
                    output_dir=scratch, learning_rate=rate, num_train_epochs=epochs,
                    per_device_train_batch_size=batch_size, weight_decay=weight_decay,
                    warmup_steps=warmup_ratio, lr_scheduler_type="linear", seed=seed,
                    # the same AdamW in one kernel (its step 0.12 s -> 0.01 s of 0.55 s on 2
                    # cores), and batches of texts of like length (a third less padding)
                    optim="adamw_torch_fused", train_sampling_strategy="group_by_length",
                    data_seed=seed, save_strategy="no", eval_strategy="no",
                    logging_strategy="no", report_to=[], disable_tqdm=True, use_cpu=True,
                    dataloader_num_workers=0)
                # the head's initialisation seeded here, the model passed in: a model_init
                # would be called again by train(), a second model the callback never sees
                set_seed(seed)
                keeper = KeepBest(loaded(folder, lambda f: AutoModelForSequenceClassification
                                         .from_pretrained(f, num_labels=num_labels)))
                trainer = Trainer(model=keeper.network, args=arguments, train_dataset=train_set,
                                  data_collator=collator, compute_loss_func=compute_loss,
                                  callbacks=[keeper])
                trainer.remove_callback(PrinterCallback)  # its closing dict: noise in the log
                trainer.train()
                runs.append({"learning_rate": float(rate),
                             "validation_accuracy_by_epoch": keeper.accuracies})
                if keeper.best is None:  # no validation rows: the last epoch
                    network = keeper.network
                    continue
                accuracy, state = keeper.best
                epoch = keeper.accuracies.index(accuracy) + 1
                # the best accuracy; ties: fewer epochs, then the smaller learning rate
                key = (accuracy, -epoch, -rate)
                if kept is None or key > kept[0]:
                    kept = (key, state)
                    network = keeper.network
        assert network is not None
        if kept is not None:
            network.load_state_dict(kept[1])
            (accuracy, neg_epoch, neg_rate) = kept[0]
            choice = {"learning_rate": -neg_rate, "epoch": -neg_epoch,
                      "validation_accuracy": accuracy,
                      "chosen_by": (f"accuracy on the {len(yv)} validation rows after each "
                                    "epoch; ties: the fewer epochs, then the smaller "
                                    "learning rate")}
        else:
            choice = {"learning_rate": float(grid[0]), "epoch": epochs,
                      "validation_accuracy": None,
                      "chosen_by": ("none: no validation split, so the grid's first "
                                    "learning rate and the last epoch (a fixed recipe)")}
    total = sum(p.numel() for p in network.parameters())
    record = {"method": METHOD.format(model=model, max_length=max_length),
              "model": model, "model_sha256": combined_sha256(sha256_tree(folder)),
              **choice, "epochs": epochs, "grid": runs,
              "class_weight": "balanced" if class_weighting == "balanced" else None,
              "truncated_train_texts": truncated,
              "cost": {"trainable_parameters": total, "total_parameters": total,
                       "train_tokens": per_pass * epochs * len(grid),
                       "train_tokens_are": "the encoder's tokens of the training texts, one "
                                           "pass per epoch, over every learning rate of "
                                           "the grid"}}
    kept_network = network
    return Fitted("encoder_ft", lambda texts: probabilities(kept_network, texts), record, cost)


def fit_encoder_ft_reference(rows: FitRows, params: Any, seed: int) -> Fitted:
    """The registry's fit of ``encoder_ft`` (:mod:`lorasent.reference_registry`):
    :func:`fit_finetuned_encoder` with ``baseline.encoder_ft``'s params, seeded by
    ``seed`` (``base.seed``)."""
    return fit_finetuned_encoder(**rows, model=params.model,
                                 learning_rates=params.learning_rate, epochs=params.epochs,
                                 batch_size=params.batch_size, max_length=params.max_length,
                                 weight_decay=params.weight_decay,
                                 warmup_ratio=params.warmup_ratio, seed=seed)
