"""Stage 5, evaluate: the adapter on the test split, against the baselines.

Usage: ``lorasent evaluate [--params params.yaml]``

Loads the base model with the adapter, scores the test split exactly as the baseline
stage did, and writes ``metrics/eval.json``: ``accuracy``, ``macro_f1``,
``per_class.<label>.{precision,recall,f1,support}``, ``confusion_matrix``, the baselines
(``baseline.majority_accuracy``, ``baseline.zero_shot_accuracy``) and
``relative_error_reduction`` = (accuracy - ref) / (1 - ref) against the reference
chosen by ``evaluate.reference`` (``null`` with ``relative_error_reduction_note`` when
ref = 1). In ``seq_cls`` mode there is no zero-shot baseline, so the reference is the
majority class, and ``reference_note`` says so. The keys are the same in both modes, so
``dvc metrics diff`` compares a generative and a seq_cls adapter key by key. Also
``metrics/predictions.csv`` (DVC's confusion plot) and provenance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorasent.artifacts import (
    atomic_write_text,
    provenance,
    read_json,
    read_jsonl,
    sha256_file,
    write_json,
)
from lorasent.launch import is_main
from lorasent.metrics import classification_metrics, predictions_csv, relative_error_reduction
from lorasent.modeling import load_trained_model
from lorasent.params import BaseParams, EvaluateParams, PromptParams
from lorasent.paths import (
    ADAPTER_DIR,
    BASE_MODEL_DIR,
    BASELINE_METRICS,
    EVAL_METRICS,
    EVAL_PREDICTIONS,
    PROVENANCE_DIR,
    SPLIT_DIR,
)
from lorasent.scoring import score_texts


@dataclass(frozen=True)
class EvaluateResult:
    accuracy: float
    relative_error_reduction: float | None


def run_evaluate(*, base: BaseParams, prompt: PromptParams, evaluate: EvaluateParams,
                 params_record: dict[str, Any], mode: str = "generative",
                 model_dir: Path = BASE_MODEL_DIR,
                 adapter_dir: Path = ADAPTER_DIR, split_dir: Path = SPLIT_DIR,
                 baseline_path: Path = BASELINE_METRICS, metrics_path: Path = EVAL_METRICS,
                 predictions_path: Path = EVAL_PREDICTIONS,
                 provenance_dir: Path = PROVENANCE_DIR) -> EvaluateResult:
    """Score the test split with base + adapter and write the metrics."""
    started = time.perf_counter()
    labels = list(base.labels)
    test_path = split_dir / "test.jsonl"
    test = read_jsonl(test_path)
    y_test = [r["label_id"] for r in test]

    model, encoder, record, device = load_trained_model(
        adapter_dir, model_dir, device=base.device, precision=base.precision, labels=labels,
        prompt=prompt, mode=mode)
    scores = score_texts(model, encoder, [r["text"] for r in test], evaluate.batch_size,
                         desc="evaluate")
    metrics = classification_metrics(y_test, scores.argmax(1), labels)

    baseline = read_json(baseline_path)
    zero_shot = baseline.get("zero_shot")
    reference_name, reference_note = evaluate.reference, None
    if reference_name == "zero_shot" and zero_shot is None:
        reference_name = "majority"
        reference_note = baseline.get("zero_shot_note")
    reference = (zero_shot["accuracy"] if reference_name == "zero_shot"
                 else baseline["majority_accuracy"])
    rer, note = relative_error_reduction(metrics["accuracy"], reference)
    metrics.update({
        "labels": labels,
        "test_rows": len(test),
        "baseline": {"majority_class": baseline["majority_class"],
                     "majority_accuracy": baseline["majority_accuracy"],
                     "zero_shot_accuracy": zero_shot and zero_shot["accuracy"],
                     "zero_shot_macro_f1": zero_shot and zero_shot["macro_f1"]},
        "mode": record["mode"],
        "reference": reference_name,
        "reference_note": reference_note,
        "reference_accuracy": reference,
        "relative_error_reduction": rer,
        "relative_error_reduction_note": note,
    })
    if is_main():  # the other processes of a launched run only scored
        write_json(metrics_path, metrics)
        atomic_write_text(predictions_path, predictions_csv(y_test, scores, labels))
        write_json(provenance_dir / "evaluate.json", provenance(
            stage="evaluate", params=params_record, device=device,
            wall_time_s=time.perf_counter() - started,
            inputs={"model": record["base_model"]["sha256"],
                    "adapter": sha256_file(adapter_dir / "adapter_model.safetensors"),
                    "test.jsonl": sha256_file(test_path)},
            extra={"test_rows": len(test)}))
    return EvaluateResult(metrics["accuracy"], rer)
