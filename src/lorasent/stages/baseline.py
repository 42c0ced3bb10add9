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

- ``references``: the supervised references (``lorasent.references``), trained on exactly
  the rows the adapter trains on (``train.fraction``'s subset drawn with ``base.seed``,
  weighted by ``train.class_weighting``), each an entry of
  ``lorasent.reference_registry``, their hyperparameters chosen on the validation split:
  ``tfidf_lr`` (always), ``encoder`` (``baseline.encoder.enabled``) and ``encoder_ft``
  (``baseline.encoder_ft.enabled``, seeded by ``base.seed``). Each holds its ``method``,
  its choice (``C``, or the learning rate and epoch) and the grid's scores, the
  machine-independent ``cost`` (trainable and total parameters, training tokens), and on
  the test split the keys of
  ``zero_shot``, plus ``test_sets.<name>`` (accuracy, macro-F1) for each extra set.
  ``null`` for a reference that is off or cannot be fitted (one class, a class of one
  row), with ``reference_notes.<name>`` saying why; the stage goes on with the others.
  Their predictions are written to ``metrics/references/<reference>/<set>.csv``
  (``test`` and each extra set's name), their seconds and peak memory to the machine
  record (``reference_costs``).

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

import dataclasses
import importlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

# the modules of the registry's fit functions (resolved by name in fit_references),
# imported here so that the stage's DVC deps hold their code: lorasent.references below
import lorasent.finetuned_encoder  # noqa: F401
from lorasent.atomic import atomic_dir, atomic_write_text, read_json, read_jsonl, write_json
from lorasent.baseline_params import BaselineParams
from lorasent.environment import compute_dtype, precision_line, resolve_dtype
from lorasent.hashes import sha256_file
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
    BASELINE_REFERENCES,
    MANIFEST,
    PROVENANCE_DIR,
    SPLIT_DIR,
)
from lorasent.provenance import provenance, write_provenance
from lorasent.reference_registry import SUPERVISED
from lorasent.references import Cost, FitRows, ReferenceNotFitted, measured
from lorasent.scoring import (
    CALIBRATION_METHOD,
    CONTENT_FREE_INPUTS,
    content_free_prior,
    contextual_calibration,
    score_texts,
)
from lorasent.statistics import interval_method, intervals
from lorasent.subsets import training_subset

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BaselineResult:
    majority_accuracy: float
    zero_shot_accuracy: float | None
    zero_shot_calibrated_accuracy: float | None = None
    references: dict[str, float | None] | None = None  # name -> test accuracy (None: none)
    reference_seconds: dict[str, float] | None = None  # name -> fit + predict seconds


def run_baseline(*, base: BaseParams, prompt: PromptParams, batch_size: int,
                 params_record: dict[str, Any], mode: str = DEFAULT_MODE,
                 model_dir: Path = BASE_MODEL_DIR,
                 split_dir: Path = SPLIT_DIR, metrics_path: Path = BASELINE_METRICS,
                 predictions_path: Path = BASELINE_PREDICTIONS,
                 calibrated_predictions_path: Path = BASELINE_CALIBRATED_PREDICTIONS,
                 confusion_path: Path = BASELINE_CONFUSION,
                 provenance_dir: Path = PROVENANCE_DIR,
                 references: BaselineParams | None = None, fraction: float = 1.0,
                 train_seed: int = 42, class_weighting: str = "none",
                 test_sets: Sequence[Any] = (),
                 references_dir: Path | None = None) -> BaselineResult:
    """Majority-class, zero-shot and calibrated zero-shot baselines on the test split.

    Args:
        base, prompt: the params sections; ``batch_size`` is ``evaluate.batch_size``
            (prompts scored per forward pass); ``mode`` is ``train.mode``.
        params_record: all resolved params, for the provenance record.
        calibrated_predictions_path: the calibrated zero-shot predictions (the majority
            class in seq_cls mode), row by row beside ``predictions_path``'s.
        confusion_path: the confusion matrix of the predictions file (zero-shot, or the
            majority class in seq_cls mode) as K x K plot records.
        references: ``baseline``, the supervised references' params; ``fraction``,
            ``train_seed`` and ``class_weighting`` (``train.fraction``, ``base.seed``,
            ``train.class_weighting``) pick and weight the rows they train on, as train
            does; ``test_sets``: the extra test sets they also score
            (:func:`lorasent.stages.test_sets.load_test_sets`), their predictions
            written under ``references_dir`` (default: ``references/`` beside
            ``metrics_path``, as :data:`lorasent.paths.BASELINE_REFERENCES` is).
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
    # the references first, before the LM takes its memory: their peak is their own
    validation_path = split_dir / "validation.jsonl"
    supervised = fit_references(
        references or BaselineParams(), rows=training_subset(train, fraction, train_seed, labels),
        validation=read_jsonl(validation_path) if validation_path.is_file() else [],
        sets={"test": test, **{s.name: s.rows for s in test_sets}}, labels=labels,
        class_weighting=class_weighting, seed=train_seed)
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
        matrix = report["zero_shot"]["confusion_matrix"]
        source = f"{metrics_path}:zero_shot.confusion_matrix"
    report["references"] = {name: found.record for name, found in supervised.items()}
    report["reference_notes"] = {name: found.note for name, found in supervised.items()
                                 if found.note}
    report["intervals"] = interval_method(len(y_test))

    if is_main():  # the other processes of a launched run only scored
        write_json(metrics_path, report)
        atomic_write_text(predictions_path, predictions_csv(
            [r["id"] for r in test], y_test, scores, labels))
        atomic_write_text(calibrated_predictions_path, predictions_csv(
            [r["id"] for r in test], y_test, calibrated, labels))
        write_json(confusion_path, confusion_records(matrix, labels, source))
        with atomic_dir(references_dir or metrics_path.with_name(BASELINE_REFERENCES.name)
                        ) as tmp:
            for name, found in supervised.items():
                for set_name, text in found.files.items():
                    (tmp / name).mkdir(exist_ok=True)
                    (tmp / name / f"{set_name}.csv").write_text(text, encoding="utf-8")
        write_provenance(provenance_dir / "baseline.json", provenance(
            stage="baseline", params=params_record, device=device,
            wall_time_s=time.perf_counter() - started,
            inputs={"model": read_json(model_dir / MANIFEST)["sha256"],
                    "test.jsonl": sha256_file(split_dir / "test.jsonl")},
            extra={"test_rows": len(test), "compute_dtype": computed,
                   "reference_costs": {name: dataclasses.asdict(found.cost)
                                       for name, found in supervised.items() if found.cost}}))
    return BaselineResult(
        majority_acc, (report["zero_shot"] or {}).get("accuracy"),
        (report["zero_shot_calibrated"] or {}).get("accuracy"),
        {name: (found.record or {}).get("accuracy") for name, found in supervised.items()},
        {name: found.cost.fit_seconds + found.cost.predict_seconds
         for name, found in supervised.items() if found.cost})


@dataclass(frozen=True)
class SupervisedResult:
    """One supervised reference as the stage keeps it: ``record`` for baseline.json (None:
    off or not fitted, ``note`` says why), the text of each set's predictions file, and
    what it cost here (None when it did not run)."""

    record: dict[str, Any] | None
    note: str | None = None
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    cost: Cost | None = None


def fit_references(params: BaselineParams, *, rows: Sequence[dict[str, Any]],
                   validation: Sequence[dict[str, Any]],
                   sets: dict[str, Sequence[dict[str, Any]]], labels: list[str],
                   class_weighting: str, seed: int) -> dict[str, SupervisedResult]:
    """Fit each supervised reference on ``rows`` (``{"text", "label_id", ...}``), its
    ``C`` chosen on ``validation``, and score every set of ``sets`` (``test`` first):
    ``{name: SupervisedResult}`` in :data:`lorasent.reference_registry.SUPERVISED` order,
    each fitted by its entry's function with its ``baseline.<name>`` params and ``seed``
    (``base.seed``). A reference that cannot be fitted
    (:class:`lorasent.references.ReferenceNotFitted`) is logged in one line and kept as a
    note."""
    texts, y = [r["text"] for r in rows], [r["label_id"] for r in rows]
    common = FitRows(train_texts=texts, y_train=y, val_texts=[r["text"] for r in validation],
                     y_val=[r["label_id"] for r in validation], labels=labels,
                     class_weighting=class_weighting)
    out: dict[str, SupervisedResult] = {}
    for reference in SUPERVISED:
        name = reference.name
        group = getattr(params, name)
        if reference.optional and not group.enabled:
            out[name] = SupervisedResult(None, f"baseline.{name}.enabled: false")
            continue
        module, function = reference.fit.split(":")
        try:
            fitted = getattr(importlib.import_module(module), function)(common, group, seed)
        except ReferenceNotFitted as err:
            log.warning("baseline: reference %s not fitted: %s", name, err)
            out[name] = SupervisedResult(None, f"not fitted: {err}")
            continue
        record, files = dict(fitted.record), {}
        summaries: dict[str, Any] = {}
        for set_name, set_rows in sets.items():
            with measured(fitted.cost, "predict"):
                probs = fitted.predict([r["text"] for r in set_rows])
            y_set = [r["label_id"] for r in set_rows]
            predicted = probs.argmax(1)
            with np.errstate(divide="ignore"):
                files[set_name] = predictions_csv([r["id"] for r in set_rows], y_set,
                                                  np.log(probs), labels)
            found = classification_metrics(y_set, predicted, labels)
            if set_name == "test":
                summaries = {**found, **intervals(y_set, predicted, len(labels))}
            else:
                summaries.setdefault("test_sets", {})[set_name] = {
                    "accuracy": found["accuracy"], "macro_f1": found["macro_f1"]}
        test_sets = summaries.pop("test_sets", {})
        record = {"method": record.pop("method"), **summaries, **record,
                  "train_rows": len(rows), "test_sets": test_sets}
        out[name] = SupervisedResult(record, None, files, fitted.cost)
    return out
