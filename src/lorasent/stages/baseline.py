"""Stage 3, baseline: what the test split scores before any fine-tuning.

Usage: ``lorasent baseline [--params params.yaml]``

Writes ``metrics/baseline.json``:
- ``majority_class`` / ``majority_accuracy``: always predicting the most frequent class
  of the *training* split (seed 000: 0.55 majority versus 0.594 zero-shot shows why
  this number must be known);
- ``zero_shot``: accuracy, macro-F1, per-class scores and confusion matrix of the
  untouched base model, with exactly the prompt and label scoring evaluate uses, and the
  95% bootstrap intervals of accuracy and macro-F1 (``accuracy_ci95_low`` ...; the
  method in ``intervals``, see ``lorasent.statistics``). A mode without a zero-shot
  answer (``seq_cls``: a freshly initialised head answers at random; its
  ``no_zero_shot_note`` in :data:`lorasent.modes.MODES`) has none, so it is ``null``
  with ``zero_shot_note`` saying why, and evaluate measures the relative error
  reduction against the majority class;
- ``zero_shot_calibrated``: the same zero-shot scores after contextual calibration (Zhao
  et al. 2021, "Calibrate Before Use", ICML; ``lorasent.scoring.contextual_calibration``):
  the same keys as ``zero_shot`` (accuracy, macro_f1, per_class, confusion_matrix, the
  ``*_ci95_*`` intervals), plus ``content_free_inputs`` (the texts put in the prompt in
  place of a test text: ``"N/A"``, ``""``, ``"[MASK]"``), ``content_free_prior`` (p_cf,
  ``{label: probability}``, summing to 1: the model's prior over the label words) and
  ``method`` (one sentence). A fair zero-shot reference: a model whose prior is skewed
  (Gemma 3 270M never says " neutral") can score below the majority class uncalibrated.
  ``null`` with ``zero_shot_calibrated_note`` (``zero_shot_note``'s text) where
  ``zero_shot`` is ``null``.

Also writes the baseline's predictions (``metrics/baseline_predictions.csv``: zero-shot,
or the majority class in seq_cls mode), the calibrated ones beside them
(``metrics/baseline_calibrated_predictions.csv``, the same test ids in the same order,
probabilities the softmax of the calibrated log-scores; in seq_cls mode the majority
class too, the same bytes as the other file, so that both modes write the same outputs),
the confusion matrix of the uncalibrated predictions as the records of DVC's plot
(``metrics/baseline_confusion.json``: K x K cells, zeros included; see
``lorasent.metrics.confusion_records``) and a provenance record.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lorasent.artifacts import (
    atomic_write_text,
    provenance,
    read_json,
    read_jsonl,
    sha256_file,
    write_json,
    write_provenance,
)
from lorasent.environment import compute_dtype, precision_line, resolve_dtype
from lorasent.launch import is_main
from lorasent.metrics import (
    classification_metrics,
    confusion_records,
    majority_baseline,
    predictions_csv,
)
from lorasent.modeling import load_model_and_prompt
from lorasent.modes import DEFAULT_MODE, MODES
from lorasent.params import BaseParams, PromptParams
from lorasent.paths import (
    BASE_MODEL_DIR,
    BASELINE_CALIBRATED_PREDICTIONS,
    BASELINE_CONFUSION,
    BASELINE_METRICS,
    BASELINE_PREDICTIONS,
    MANIFEST,
    PROVENANCE_DIR,
    SPLIT_DIR,
)
from lorasent.scoring import (
    CALIBRATION_METHOD,
    CONTENT_FREE_INPUTS,
    content_free_prior,
    contextual_calibration,
    score_texts,
)
from lorasent.statistics import METHOD, intervals

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BaselineResult:
    majority_accuracy: float
    zero_shot_accuracy: float | None
    zero_shot_calibrated_accuracy: float | None = None


def run_baseline(*, base: BaseParams, prompt: PromptParams, batch_size: int,
                 params_record: dict[str, Any], mode: str = DEFAULT_MODE,
                 model_dir: Path = BASE_MODEL_DIR,
                 split_dir: Path = SPLIT_DIR, metrics_path: Path = BASELINE_METRICS,
                 predictions_path: Path = BASELINE_PREDICTIONS,
                 calibrated_predictions_path: Path = BASELINE_CALIBRATED_PREDICTIONS,
                 confusion_path: Path = BASELINE_CONFUSION,
                 provenance_dir: Path = PROVENANCE_DIR) -> BaselineResult:
    """Majority-class, zero-shot and calibrated zero-shot baselines on the test split.

    Args:
        base, prompt: the params sections; ``batch_size`` is ``evaluate.batch_size``
            (prompts scored per forward pass); ``mode`` is ``train.mode``.
        params_record: all resolved params, for the provenance record.
        calibrated_predictions_path: the calibrated zero-shot predictions (the majority
            class in seq_cls mode), row by row beside ``predictions_path``'s.
        confusion_path: the confusion matrix of the predictions file (zero-shot, or the
            majority class in seq_cls mode) as K x K plot records.
    """
    started = time.perf_counter()
    labels = list(base.labels)
    train = read_jsonl(split_dir / "train.jsonl")
    test = read_jsonl(split_dir / "test.jsonl")
    y_test = [r["label_id"] for r in test]
    majority, majority_acc = majority_baseline([r["label_id"] for r in train], y_test,
                                               len(labels))

    report: dict[str, Any] = {"majority_class": labels[majority],
                              "majority_accuracy": majority_acc}
    if not MODES[mode].zero_shot:
        device = torch.device("cpu")  # no model is loaded
        computed = None
        scores = np.full((len(test), len(labels)), -np.inf, dtype=np.float32)
        scores[:, majority] = 0.0  # the majority class with probability 1
        calibrated = scores
        report.update(zero_shot=None, zero_shot_note=MODES[mode].no_zero_shot_note,
                      zero_shot_calibrated=None,
                      zero_shot_calibrated_note=MODES[mode].no_zero_shot_note)
        matrix = classification_metrics(y_test, scores.argmax(1), labels)["confusion_matrix"]
        source = f"the majority-class predictions of {predictions_path}"
    else:
        model, encoder, device = load_model_and_prompt(model_dir, base=base, prompt=prompt,
                                                       mode=mode)
        dtype = resolve_dtype(base.precision, device)
        computed = compute_dtype(dtype, device, training=False)
        if is_main():
            log.info(precision_line("baseline", precision=base.precision, dtype=dtype,
                                    device=device, training=False))
        scores = score_texts(model, encoder, [r["text"] for r in test], batch_size,
                             desc="zero-shot")
        predicted = scores.argmax(1)
        report["zero_shot"] = {**classification_metrics(y_test, predicted, labels),
                               **intervals(y_test, predicted, len(labels))}
        prior = content_free_prior(model, encoder, CONTENT_FREE_INPUTS)
        calibrated = contextual_calibration(scores, prior)
        calibrated_pred = calibrated.argmax(1)
        report["zero_shot_calibrated"] = {
            **classification_metrics(y_test, calibrated_pred, labels),
            **intervals(y_test, calibrated_pred, len(labels)),
            "content_free_inputs": list(CONTENT_FREE_INPUTS),
            "content_free_prior": dict(zip(labels, map(float, prior), strict=True)),
            "method": CALIBRATION_METHOD}
        report["intervals"] = METHOD
        matrix = report["zero_shot"]["confusion_matrix"]
        source = f"{metrics_path}:zero_shot.confusion_matrix"

    if is_main():  # the other processes of a launched run only scored
        write_json(metrics_path, report)
        atomic_write_text(predictions_path, predictions_csv(
            [r["id"] for r in test], y_test, scores, labels))
        atomic_write_text(calibrated_predictions_path, predictions_csv(
            [r["id"] for r in test], y_test, calibrated, labels))
        write_json(confusion_path, confusion_records(matrix, labels, source))
        write_provenance(provenance_dir / "baseline.json", provenance(
            stage="baseline", params=params_record, device=device,
            wall_time_s=time.perf_counter() - started,
            inputs={"model": read_json(model_dir / MANIFEST)["sha256"],
                    "test.jsonl": sha256_file(split_dir / "test.jsonl")},
            extra={"test_rows": len(test), "compute_dtype": computed}))
    return BaselineResult(majority_acc, (report["zero_shot"] or {}).get("accuracy"),
                          (report["zero_shot_calibrated"] or {}).get("accuracy"))
