"""Stage 5, evaluate: the adapter on the test split, against the baselines.

Usage: ``lorasent evaluate [--params params.yaml]``

Loads the base model with the adapter, scores the test split exactly as the baseline
stage did, and writes ``metrics/eval.json``: ``accuracy``, ``macro_f1``,
``per_class.<label>.{precision,recall,f1,support}``, ``confusion_matrix``, the baselines
(``baseline.majority_accuracy``, ``baseline.zero_shot_accuracy``) and
``relative_error_reduction`` = (accuracy - ref) / (1 - ref) against the reference
chosen by ``evaluate.reference`` (``null`` with ``relative_error_reduction_note`` when
ref = 1). A mode without a zero-shot baseline (``seq_cls``; :data:`lorasent.modes.MODES`)
has the majority class as its reference, and ``reference_note`` says why. The keys are
the same in both modes, so ``dvc metrics diff`` compares a generative and a seq_cls
adapter key by key.

Each of accuracy, macro-F1 and the relative error reduction has a 95% bootstrap interval
over the test rows (``accuracy_ci95_low`` / ``accuracy_ci95_high`` ...; the method in
``intervals``, see ``lorasent.statistics``). The relative error reduction's interval is
paired with the reference's own predictions on the same resampled rows: the zero-shot
predictions of ``metrics/baseline_predictions.csv`` (matched by row id), or the majority
class. ``warnings`` lists what a reviewer must not miss (``lorasent.metrics.run_warnings``).
Also ``metrics/predictions.csv`` (row ids, no texts), ``metrics/confusion.json`` (the
confusion matrix as the K x K records of DVC's confusion plot, zeros included; see
``lorasent.metrics.confusion_records``) and provenance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lorasent.artifacts import (
    atomic_write_text,
    provenance,
    read_json,
    read_jsonl,
    sha256_file,
    write_json,
)
from lorasent.contracts import EvalMetrics, dump
from lorasent.errors import LorasentError
from lorasent.launch import is_main
from lorasent.metrics import (
    classification_metrics,
    confusion_records,
    predictions_csv,
    read_predictions,
    relative_error_reduction,
    run_warnings,
)
from lorasent.modeling import load_trained_model
from lorasent.modes import DEFAULT_MODE
from lorasent.params import BaseParams, EvaluateParams, PromptParams
from lorasent.paths import (
    ADAPTER_DIR,
    BASE_MODEL_DIR,
    BASELINE_METRICS,
    BASELINE_PREDICTIONS,
    EVAL_CONFUSION,
    EVAL_METRICS,
    EVAL_PREDICTIONS,
    PROVENANCE_DIR,
    SPLIT_DIR,
)
from lorasent.scoring import score_texts
from lorasent.statistics import METHOD, intervals, with_interval


@dataclass(frozen=True)
class EvaluateResult:
    metrics: EvalMetrics  # what metrics/eval.json holds

    @property
    def warnings(self) -> list[str]:
        return self.metrics.warnings

    def summary(self, metrics_path: Path = EVAL_METRICS) -> str:
        """The stage's last line: headline with intervals, the reference, the file."""
        m = self.metrics

        def ci(key: str) -> str:
            return with_interval(*m.interval(key), missing="n/a")

        base = m.baseline
        line = (f"accuracy {ci('accuracy')}, macro-F1 {ci('macro_f1')} (95% intervals); "
                f"relative error reduction {ci('relative_error_reduction')} against the "
                f"{m.reference} baseline {m.reference_accuracy:.4f}; majority-class "
                f"baseline {base.majority_accuracy:.4f} (always `{base.majority_class}`)"
                f". Details: {metrics_path} (make metrics)")
        return "\n".join([line, *(f"WARNING: {w}" for w in self.warnings)])


def run_evaluate(*, base: BaseParams, prompt: PromptParams, evaluate: EvaluateParams,
                 params_record: dict[str, Any], mode: str = DEFAULT_MODE,
                 model_dir: Path = BASE_MODEL_DIR,
                 adapter_dir: Path = ADAPTER_DIR, split_dir: Path = SPLIT_DIR,
                 baseline_path: Path = BASELINE_METRICS,
                 baseline_predictions_path: Path = BASELINE_PREDICTIONS,
                 metrics_path: Path = EVAL_METRICS,
                 predictions_path: Path = EVAL_PREDICTIONS,
                 confusion_path: Path = EVAL_CONFUSION,
                 provenance_dir: Path = PROVENANCE_DIR) -> EvaluateResult:
    """Score the test split with base + adapter and write the metrics.

    ``confusion_path`` gets ``confusion_matrix`` as K x K plot records
    (:func:`lorasent.metrics.confusion_records`)."""
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
    y_pred = scores.argmax(1)
    metrics = classification_metrics(y_test, y_pred, labels)
    baseline = read_json(baseline_path)
    zero_shot = baseline.get("zero_shot")
    reference_name, reference_note = evaluate.reference, None
    if reference_name == "zero_shot" and zero_shot is None:
        reference_name = "majority"
        reference_note = baseline.get("zero_shot_note")
    reference = (zero_shot["accuracy"] if reference_name == "zero_shot"
                 else baseline["majority_accuracy"])
    rer, note = relative_error_reduction(metrics["accuracy"], reference)
    if reference_name == "zero_shot":
        reference_pred = _reference_predictions(
            baseline_predictions_path, [r["id"] for r in test], labels)
    else:
        reference_pred = np.full(len(test), labels.index(baseline["majority_class"]))
    bounds = intervals(y_test, y_pred, len(labels), reference_pred)
    metrics.update({
        "labels": labels,
        "test_rows": len(test),
        "baseline": {"majority_class": baseline["majority_class"],
                     "majority_accuracy": baseline["majority_accuracy"],
                     "zero_shot_accuracy": zero_shot and zero_shot["accuracy"],
                     "zero_shot_macro_f1": zero_shot and zero_shot["macro_f1"]},
        "mode": record.mode,
        "reference": reference_name,
        "reference_note": reference_note,
        "reference_accuracy": reference,
        "relative_error_reduction": rer,
        "relative_error_reduction_note": note,
        "intervals": METHOD,
    })
    # each headline value first, followed by its interval: the order in which
    # `dvc metrics show` and `dvc exp show` print the columns
    ordered: dict[str, Any] = {}
    for name in ("accuracy", "macro_f1", "relative_error_reduction"):
        ordered[name] = metrics.pop(name)
        ordered.update({f"{name}_ci95_{end}": bounds[f"{name}_ci95_{end}"]
                        for end in ("low", "high")})
    metrics = {**ordered, **metrics}
    result = EvalMetrics(**metrics, warnings=run_warnings(metrics))
    if is_main():  # the other processes of a launched run only scored
        write_json(metrics_path, dump(result))
        atomic_write_text(predictions_path, predictions_csv(
            [r["id"] for r in test], y_test, scores, labels))
        write_json(confusion_path, confusion_records(
            result.confusion_matrix, labels, f"{metrics_path}:confusion_matrix"))
        write_json(provenance_dir / "evaluate.json", provenance(
            stage="evaluate", params=params_record, device=device,
            wall_time_s=time.perf_counter() - started,
            inputs={"model": record.base_model.sha256,
                    "adapter": sha256_file(adapter_dir / "adapter_model.safetensors"),
                    "test.jsonl": sha256_file(test_path)},
            extra={"test_rows": len(test)}))
    return EvaluateResult(result)


def _reference_predictions(path: Path, ids: list[str], labels: list[str]) -> np.ndarray:
    """The zero-shot predicted class ids of ``path``, in the order of ``ids``.

    Raises:
        LorasentError: the file was scored on other rows (or other labels) than the
            test split: the baseline stage must be rerun.
    """
    baseline = read_predictions(path.read_text(encoding="utf-8"), str(path))
    by_id = dict(zip(baseline.ids, baseline.predicted.tolist(), strict=True))
    missing = [i for i in ids if i not in by_id]
    if missing or baseline.labels != labels:
        raise LorasentError(f"{path} was scored on other test rows or labels than "
                            f"data/split/test.jsonl ({len(missing)} of {len(ids)} rows "
                            "missing); rerun the baseline stage (dvc repro)")
    return np.asarray([by_id[i] for i in ids], dtype=np.int64)
