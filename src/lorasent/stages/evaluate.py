"""Stage 5, evaluate: the adapter on the test split and on each extra test set, against
the baselines.

Usage: ``lorasent evaluate [--params params.yaml]``

Loads the base model with the adapter, scores the test split exactly as the baseline
stage did, and writes ``metrics/eval.json`` (:class:`lorasent.contracts.EvalMetrics`):

- ``accuracy``, ``macro_f1``, ``per_class.<label>.{precision,recall,f1,support}``,
  ``confusion_matrix``, each headline with its 95% bootstrap interval over the test rows
  (``accuracy_ci95_low`` / ``accuracy_ci95_high`` ...; the method in ``intervals``, see
  ``lorasent.statistics``);
- the baselines (``baseline.majority_accuracy``, ``baseline.zero_shot_accuracy``,
  ``baseline.zero_shot_calibrated_accuracy``) and, in ``references``, the relative error
  reduction (accuracy - ref) / (1 - ref) against each of the three, its interval paired
  with that reference's own predictions on the same resampled rows (``null`` with a
  note when ref = 1). ``relative_error_reduction`` is the one against ``reference``,
  chosen by ``evaluate.reference``: ``auto`` takes the strongest reference on the set (the
  highest accuracy of the majority class, the zero-shot baselines and the supervised
  references; ties: the cheaper), and ``reference_note`` says which, against which others;
- ``calibration``: NLL, Brier score and ECE (15 bins) of the raw probabilities with
  intervals, and the same after the temperature fitted on the validation split by the
  train stage (``models/adapter/calibration.json``; ``lorasent.calibration``);
- ``label_issues``: the test rows whose given label is likely wrong, found from the
  adapter's out-of-sample probabilities (cleanlab's ``find_label_issues``), ranked in
  ``metrics/label_issues.csv``;
- ``test_sets.<name>``: the same for each extra test set of ``evaluate.test_sets``
  (read and checked by :mod:`lorasent.stages.test_sets`), with its data report. Its
  zero-shot baselines are measured here, on the base model with the adapter switched
  off, with the content-free prior the baseline stage measured;
- ``warnings``: what a reviewer must not miss (``lorasent.metrics.run_warnings``).

The keys are the same in both modes, so ``dvc metrics diff`` compares a generative and a
seq_cls adapter key by key. Also ``metrics/predictions.csv`` (row ids, no texts, raw
probabilities), ``metrics/confusion.json`` (the K x K records of DVC's confusion plot;
``lorasent.metrics.confusion_records``), ``metrics/reliability.json`` (the reliability
diagram's bins, raw and scaled, for ``dvc plots``), ``metrics/test_sets/`` (each extra
set's predictions, confusion records and label issues) and provenance.
"""

from __future__ import annotations

import csv
import functools
import io
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lorasent.atomic import (
    atomic_dir,
    atomic_write_text,
    json_text,
    read_json,
    read_jsonl,
    write_in_turn,
)
from lorasent.calibration import (
    LabelIssues,
    apply_temperature,
    calibration_metrics,
    label_issues,
    reliability_bins,
)
from lorasent.calibration import (
    interval_method as calibration_intervals,
)
from lorasent.contracts import (
    REFERENCE_NAMES,
    SUPERVISED_REFERENCES,
    EvalMetrics,
    SetMetrics,
    TemperatureScaling,
    TestSetMetrics,
    dump,
    read_temperature_scaling,
)
from lorasent.environment import compute_dtype, precision_line, resolve_dtype
from lorasent.errors import LorasentError
from lorasent.hashes import sha256_file
from lorasent.launch import is_main
from lorasent.metrics import (
    classification_metrics,
    confusion_records,
    predictions_csv,
    probabilities,
    read_predictions,
    relative_error_reduction,
    run_warnings,
    strongest_verdict,
    tied_strongest,
)
from lorasent.modeling import load_trained_model
from lorasent.modes import DEFAULT_MODE
from lorasent.params import BaseParams, EvaluateParams, PromptParams
from lorasent.paths import (
    ADAPTER_DIR,
    BASE_MODEL_DIR,
    BASELINE_CALIBRATED_PREDICTIONS,
    BASELINE_METRICS,
    BASELINE_PREDICTIONS,
    BASELINE_REFERENCES,
    EVAL_CONFUSION,
    EVAL_LABEL_ISSUES,
    EVAL_METRICS,
    EVAL_PREDICTIONS,
    EVAL_RELIABILITY,
    EVAL_TEST_SETS,
    PROVENANCE_DIR,
    SPLIT_DIR,
)
from lorasent.provenance import provenance, write_provenance
from lorasent.references import seconds_here
from lorasent.scoring import Encoder, contextual_calibration, score_texts
from lorasent.stages.test_sets import TestSet, load_test_sets
from lorasent.statistics import (
    interval_method,
    intervals,
    paired_comparison,
    reduction_interval,
    resamples_said,
    with_interval,
)
from lorasent.subsets import training_subset
from lorasent.tables import spreadsheet_row

log = logging.getLogger(__name__)

REFERENCES = tuple(REFERENCE_NAMES)  # the three without training, then the supervised ones
_INTERVAL_KEYS = [f"{name}_ci95_{end}" for name in
                  ("accuracy", "macro_f1", "relative_error_reduction") for end in ("low", "high")]
# A set of one row: its metrics, and this warning in place of the intervals (a bootstrap
# over one row draws it every time: a spread of 0, which is no interval).
ONE_ROW = ("no interval: 1 row in test set {name}, and a bootstrap over one row has no "
           "spread; add rows to it for 95% intervals")
NO_SCALING = ("the adapter has no calibration.json (trained before temperature scaling "
              "existed): retrain it to fit a temperature")


@dataclass(frozen=True)
class EvaluateResult:
    metrics: EvalMetrics  # what metrics/eval.json holds
    reference: str = "auto"  # ``evaluate.reference``, the reference the params asked for

    @property
    def warnings(self) -> list[str]:
        return self.metrics.warnings

    def summary(self, metrics_path: Path = EVAL_METRICS) -> str:
        """The stage's last lines: the adapter's verdict against the strongest supervised
        reference on the test split and on each extra test set, the reference the params
        named when it was missing and the majority class was taken instead, the headline
        with intervals and the reference, one line per extra test set, the file, then the
        warnings."""
        m = self.metrics
        seconds = seconds_here(metrics_path.parent / PROVENANCE_DIR.name)
        named = {"test split": m, **m.test_sets}
        # first: what a reviewer asks first, on every set whose record holds one
        lines = [f"{name}: the adapter: {verdict}" for name, s in named.items()
                 if (verdict := s.strongest_verdict(seconds))]
        fell_back = {name: s.reference_note for name, s in named.items()
                     if self.reference not in ("auto", s.reference) and s.reference_note}
        main_note = fell_back.pop("test split", None)
        lines += [main_note] if main_note else []
        lines += [f"{name}: {note}" for name, note in fell_back.items() if note != main_note]
        lines.append(f"test split: {_headline(m)}")
        lines += [f"{name}: {_headline(s)}" for name, s in m.test_sets.items()]
        lines.append(f"Details: {metrics_path} (make metrics)")
        lines += [f"WARNING: {w}" for w in m.warnings]
        lines += [f"WARNING ({name}): {w}" for name, s in m.test_sets.items() for w in s.warnings
                  if w not in m.warnings]  # the adapter's own (no temperature): said once
        return "\n".join(lines)


def _headline(m: Any) -> str:
    def ci(key: str) -> str:
        return with_interval(*m.interval(key), missing="n/a")

    base = m.baseline
    scaled = m.calibration.scaled if m.calibration else None
    ece = (f"; ECE {m.calibration.ece:.4f}" + (f" ({scaled.ece:.4f} after temperature "
           f"scaling)" if scaled else "")) if m.calibration else ""
    fewer = resamples_said(m.intervals.resamples if m.intervals else None)
    return (f"{m.test_rows} rows, accuracy {ci('accuracy')}, macro-F1 {ci('macro_f1')} "
            f"(95% intervals{f', {fewer}' if fewer else ''}); relative error reduction "
            f"{ci('relative_error_reduction')} "
            f"against the {REFERENCE_NAMES[m.reference]} baseline {m.reference_accuracy:.4f}"
            f"; majority-class baseline {base.majority_accuracy:.4f} (always "
            f"`{base.majority_class}`){ece}")


@dataclass(frozen=True)
class ScoredSet:
    """One labelled test set scored by the adapter, with its references' predictions."""

    name: str                       # ``test`` (the split's) or the params' set name
    ids: list[str]                  # row ids, N
    y: np.ndarray                   # (N,) int64 gold class ids
    scores: np.ndarray              # (N, K) float32 label scores of base + adapter
    references: dict[str, np.ndarray | None]  # reference -> (N,) int64 predicted ids
    reference_note: str | None      # why a reference is missing (the mode's note)
    report: Mapping[str, Any] | None = None  # an extra set's data report
    # why a supervised reference is missing (off, not fitted): baseline.json's notes
    reference_notes: Mapping[str, str] | None = None


def run_evaluate(*, base: BaseParams, prompt: PromptParams, evaluate: EvaluateParams,
                 split_seed: int, params_record: dict[str, Any], mode: str = DEFAULT_MODE,
                 model_dir: Path = BASE_MODEL_DIR,
                 adapter_dir: Path = ADAPTER_DIR, split_dir: Path = SPLIT_DIR,
                 baseline_path: Path = BASELINE_METRICS,
                 baseline_predictions_path: Path = BASELINE_PREDICTIONS,
                 metrics_path: Path = EVAL_METRICS,
                 predictions_path: Path = EVAL_PREDICTIONS,
                 confusion_path: Path = EVAL_CONFUSION,
                 provenance_dir: Path = PROVENANCE_DIR,
                 references_dir: Path | None = None, fraction: float = 1.0,
                 train_seed: int = 42) -> EvaluateResult:
    """Score the test split and every extra test set with base + adapter; write the
    metrics.

    The calibrated zero-shot predictions are read beside ``baseline_predictions_path``;
    the label issues, the reliability records and the extra sets' folder are written
    beside ``metrics_path`` (the names of :mod:`lorasent.paths`).

    ``split_seed`` (``split.seed``) draws the extra sets' rows, as it drew the split.
    The supervised references' predictions are read from ``references_dir`` (the
    baseline stage's; default: ``references/`` beside ``baseline_path``), and the
    adapter's cost from train's provenance record in ``provenance_dir``, its training
    tokens counted on the rows ``fraction`` and
    ``train_seed`` (``train.fraction``, ``base.seed``) pick, as train picked them.
    Every extra set is read and checked (:func:`lorasent.stages.test_sets.load_test_sets`)
    before the model loads, and nothing is written before everything is scored.

    Raises:
        LorasentError: an extra set that breaks the data contract (its message names
            ``evaluate.test_sets.<name>``), or baseline files scored on other rows.
    """
    started = time.perf_counter()
    baseline_calibrated_path = baseline_predictions_path.with_name(
        BASELINE_CALIBRATED_PREDICTIONS.name)
    label_issues_path, reliability_path, test_sets_dir = (
        metrics_path.with_name(path.name)
        for path in (EVAL_LABEL_ISSUES, EVAL_RELIABILITY, EVAL_TEST_SETS))
    labels = list(base.labels)
    test_path = split_dir / "test.jsonl"
    test = read_jsonl(test_path)
    extra = load_test_sets(evaluate.test_sets, labels=labels, aliases=base.label_aliases,
                           seed=split_seed, split_dir=split_dir)
    baseline = read_json(baseline_path)
    majority = labels.index(baseline["majority_class"])

    model, encoder, record, device = load_trained_model(
        adapter_dir, model_dir, device=base.device, precision=base.precision, labels=labels,
        prompt=prompt, mode=mode)
    dtype = resolve_dtype(base.precision, device)
    if is_main():
        log.info(precision_line("evaluate", precision=base.precision, dtype=dtype,
                                device=device, training=False))
    scaling = read_temperature_scaling(adapter_dir)
    ids = [r["id"] for r in test]
    references_dir = references_dir or baseline_path.with_name(BASELINE_REFERENCES.name)
    supervised = {name: references_dir / name for name in SUPERVISED_REFERENCES
                  if (baseline.get("references") or {}).get(name)}
    notes = baseline.get("reference_notes") or {}
    sets = [ScoredSet(
        "test", ids, np.asarray([r["label_id"] for r in test], dtype=np.int64),
        score_texts(model, encoder, [r["text"] for r in test], evaluate.batch_size,
                    desc="evaluate"),
        {"majority": np.full(len(test), majority, dtype=np.int64),
         "zero_shot": _reference_predictions(baseline_predictions_path, ids, labels)
         if baseline.get("zero_shot") else None,
         "zero_shot_calibrated": _reference_predictions(baseline_calibrated_path, ids, labels)
         if baseline.get("zero_shot_calibrated") else None,
         **_supervised_predictions(supervised, "test", ids, labels)},
        baseline.get("zero_shot_note"), reference_notes=notes)]
    sets += [_score_extra(s, model, encoder, baseline, labels, majority, evaluate.batch_size,
                          supervised) for s in extra]
    costs = {name: {**baseline["references"][name]["cost"],
                    "train_rows": baseline["references"][name]["train_rows"]}
             for name in supervised}
    costs["adapter"] = _adapter_cost(provenance_dir / "train.json", encoder,
                                     training_subset(read_jsonl(split_dir / "train.jsonl"),
                                                     fraction, train_seed, labels))
    methods = {name: baseline["references"][name]["method"] for name in supervised}

    summaries = [_set_metrics(s, labels=labels, wanted=evaluate.reference, scaling=scaling,
                              majority_class=baseline["majority_class"], costs=costs,
                              methods=methods,
                              issues_file=str(label_issues_path if s.name == "test" else
                                              test_sets_dir / s.name / "label_issues.csv"))
                 for s in sets]
    (main, main_issues), others = summaries[0], summaries[1:]
    main["cost"] = costs["adapter"]
    test_sets = {s.name: TestSetMetrics(**metrics, source=s.report["source"], data=s.report)
                 for s, (metrics, _) in zip(extra, others, strict=True)}
    result = EvalMetrics(**main, mode=record.mode, test_sets=test_sets)
    if is_main():  # the other processes of a launched run only scored
        files = _set_files(sets[0], main_issues, result, labels, str(metrics_path))
        set_files = {s.name: _set_files(s, issues, test_sets[s.name], labels,
                                        f"{metrics_path}:test_sets.{s.name}")
                     for s, (_, issues) in zip(sets[1:], others, strict=True)}
        texts = {predictions_path: files["predictions.csv"],
                 confusion_path: files["confusion.json"],
                 label_issues_path: files["label_issues.csv"],
                 reliability_path: json_text(_reliability_records(sets[0], scaling)),
                 metrics_path: json_text(dump(result))}
        record_path = provenance_dir / "evaluate.json"
        stage_record = provenance(
            stage="evaluate", params=params_record, device=device,
            wall_time_s=time.perf_counter() - started,
            inputs={"model": record.base_model.sha256,
                    "adapter": sha256_file(adapter_dir / "adapter_model.safetensors"),
                    "test.jsonl": sha256_file(test_path),
                    **{f"test_sets.{s.name}": s.report["origin"] for s in extra}},
            extra={"test_rows": len(test),
                   **{f"test_sets.{s.name}.rows": len(s.rows) for s in extra},
                   "compute_dtype": compute_dtype(dtype, device, training=False)})
        # every text made before the first write; each write atomic, and a failure
        # half-way says which outputs were replaced
        write_in_turn([(test_sets_dir, lambda: _write_sets(test_sets_dir, set_files)),
                       *((path, functools.partial(atomic_write_text, path, text))
                         for path, text in texts.items()),
                       (record_path, lambda: write_provenance(record_path, stage_record))],
                      command="evaluate")
    return EvaluateResult(result, evaluate.reference)


def _write_sets(folder: Path, set_files: Mapping[str, Mapping[str, str]]) -> None:
    """``metrics/test_sets/``, replaced as a whole: ``sets.json`` and one folder of files
    per set (:func:`_set_files`)."""
    with atomic_dir(folder) as tmp:
        (tmp / "sets.json").write_text(json_text({"sets": list(set_files)}), encoding="utf-8")
        for name, texts in set_files.items():
            (tmp / name).mkdir()
            for file, text in texts.items():
                (tmp / name / file).write_text(text, encoding="utf-8")


def _score_extra(test_set: TestSet, model: Any, encoder: Encoder, baseline: Mapping[str, Any],
                 labels: list[str], majority: int, batch_size: int,
                 supervised: Mapping[str, Path]) -> ScoredSet:
    """An extra set scored by base + adapter, and by the base model alone (the adapter
    switched off: peft's ``disable_adapter``) for its zero-shot baselines, uncalibrated
    and with the content-free prior of ``metrics/baseline.json``."""
    texts = [r["text"] for r in test_set.rows]
    n = len(texts)
    scores = score_texts(model, encoder, texts, batch_size, desc=f"evaluate {test_set.name}")
    references: dict[str, np.ndarray | None] = {
        "majority": np.full(n, majority, dtype=np.int64),
        "zero_shot": None, "zero_shot_calibrated": None}
    if baseline.get("zero_shot"):
        with model.disable_adapter():
            zero_shot = score_texts(model, encoder, texts, batch_size,
                                    desc=f"zero-shot {test_set.name}")
        references["zero_shot"] = zero_shot.argmax(1)
        calibrated = baseline.get("zero_shot_calibrated")
        if calibrated:
            prior = np.asarray([calibrated["content_free_prior"][label] for label in labels],
                               dtype=np.float64)
            references["zero_shot_calibrated"] = contextual_calibration(
                zero_shot, prior).argmax(1)
    ids = [r["id"] for r in test_set.rows]
    references.update(_supervised_predictions(supervised, test_set.name, ids, labels))
    return ScoredSet(test_set.name, ids,
                     np.asarray([r["label_id"] for r in test_set.rows], dtype=np.int64),
                     scores, references, baseline.get("zero_shot_note"), test_set.report,
                     baseline.get("reference_notes") or {})


def _supervised_predictions(folders: Mapping[str, Path], set_name: str, ids: list[str],
                            labels: list[str]) -> dict[str, np.ndarray | None]:
    """Each supervised reference's predicted ids on the set ``set_name`` (``test`` or an
    extra set), from ``<its folder>/<set_name>.csv``; None for a reference the baseline
    stage did not fit."""
    return {name: (_reference_predictions(folders[name] / f"{set_name}.csv", ids, labels)
                   if name in folders else None) for name in SUPERVISED_REFERENCES}


def _adapter_cost(train_record: Path, encoder: Encoder,
                  rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The adapter's machine-independent cost (:class:`lorasent.contracts.Cost`): the
    parameters and rows of train's provenance record, and the tokens processed in
    training: each training example's tokens (``encoder.training_example``: the prompt
    and the label word in generative mode, the text in seq_cls) over one pass, times
    the passes (steps x effective batch / rows)."""
    record = read_json(train_record)
    train_rows = int(record["train_rows"])
    per_pass = sum(len(encoder.training_example(r["text"], r["label_id"])["input_ids"])
                   for r in rows)
    passes = record["steps"] * record["effective_batch_size"] / max(train_rows, 1)
    return {"trainable_parameters": record["trainable_parameters"],
            "total_parameters": record["total_parameters"], "train_rows": train_rows,
            "train_tokens": round(per_pass * passes),
            "train_tokens_are": "the training examples' tokens, one pass times the passes "
                                "(steps x effective batch / rows)"}


def choose_reference(wanted: str, accuracies: Mapping[str, float | None],
                     missing_note: str | None,
                     notes: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """The reference of the relative error reduction, and a note when it is not the one
    ``evaluate.reference`` names.

    Args:
        wanted: ``evaluate.reference``: ``auto`` or one of :data:`REFERENCES`.
        accuracies: each reference's accuracy on the set, None where there is none.
        missing_note: why the zero-shot references are missing (the mode's note).
        notes: why a supervised reference is missing (off, not fitted).

    Returns:
        ``(name, note)``. ``auto``: the strongest reference, the one of the highest
        accuracy on the set (ties: the first of :data:`REFERENCES`, the cheaper), so that
        the headline's reduction is measured against the best a user could have had
        without the adapter; the note says which, against which others. A named
        reference that is missing (off, not fitted, or a zero-shot one in a mode without
        it): the majority class, and the note says so in one line, with why (the stage's
        closing lines print it).
    """
    found = {name: acc for name, acc in accuracies.items() if acc is not None}
    if wanted == "auto":
        best = max(found, key=lambda name: (found[name], -REFERENCES.index(name)))
        others = ", ".join(f"{name} {acc:.4f}" for name, acc in found.items() if name != best)
        return best, (f"evaluate.reference auto: the strongest reference, {best} "
                      f"({found[best]:.4f}; {others or 'no other'})")
    if wanted not in found:
        why = (notes or {}).get(wanted) or missing_note or f"no {wanted} reference"
        missing = "fitted" if wanted in SUPERVISED_REFERENCES else "measured"
        return "majority", (f"evaluate.reference: {wanted} was not {missing} ({why}); the "
                            "relative error reduction is measured against the "
                            f"{REFERENCE_NAMES['majority']} baseline instead")
    return wanted, None


def _set_metrics(s: ScoredSet, *, labels: list[str], wanted: str,
                 scaling: TemperatureScaling | None, majority_class: str,
                 issues_file: str, costs: Mapping[str, Mapping[str, Any]] | None = None,
                 methods: Mapping[str, str] | None = None
                 ) -> tuple[dict[str, Any], LabelIssues]:
    """The :class:`~lorasent.contracts.SetMetrics` fields of one scored set (as a dict, in
    the contract's order) and its label issues."""
    k = len(labels)
    y, predicted = s.y, s.scores.argmax(1)
    metrics = classification_metrics(y, predicted, labels)
    accuracies = {name: (None if pred is None else float(np.mean(pred == y)))
                  for name, pred in s.references.items()}
    macro_f1s = {name: (None if pred is None else
                        classification_metrics(y, pred, labels)["macro_f1"])
                 for name, pred in s.references.items()}
    reference, reference_note = choose_reference(wanted, accuracies, s.reference_note,
                                                 s.reference_notes)
    references: dict[str, dict[str, Any] | None] = {}
    # the adapter's own: the same whichever references the set has (issue 70)
    bounds = intervals(y, predicted, k) if len(y) > 1 else dict.fromkeys(_INTERVAL_KEYS)
    for name in REFERENCES:
        pred = s.references.get(name)
        if pred is None:
            references[name] = None
            continue
        rer, note = relative_error_reduction(metrics["accuracy"], accuracies[name] or 0.0)
        reduction = (reduction_interval(y, predicted, pred) if len(y) > 1 else (None, None))
        own = classification_metrics(y, pred, labels)
        own_bounds = (intervals(y, pred, k) if len(y) > 1 else dict.fromkeys(_INTERVAL_KEYS))
        references[name] = {"accuracy": accuracies[name], "relative_error_reduction": rer,
                            **{f"relative_error_reduction_ci95_{end}": bound
                               for end, bound in zip(("low", "high"), reduction, strict=True)},
                            "relative_error_reduction_note": note,
                            **{f"accuracy_ci95_{end}": own_bounds[f"accuracy_ci95_{end}"]
                               for end in ("low", "high")},
                            "macro_f1": own["macro_f1"],
                            **{f"macro_f1_ci95_{end}": own_bounds[f"macro_f1_ci95_{end}"]
                               for end in ("low", "high")},
                            "per_class": own["per_class"],
                            "paired": _paired(y, pred, predicted, labels) if len(y) > 1
                            else None,
                            "method": (methods or {}).get(name),
                            "cost": (costs or {}).get(name)}
    chosen = references[reference] or {}
    fitted = [name for name in SUPERVISED_REFERENCES if references.get(name)]
    # ties: the first in registry order is recorded, and the verdict says they tie
    strongest = max(fitted, key=lambda name: (accuracies[name] or 0.0, -fitted.index(name)),
                    default=None)
    probs = probabilities(s.scores)
    issues = label_issues(y, probs)
    temperature = scaling.temperature if scaling else None
    scaled = None if temperature is None else {
        key: value for key, value in _calibration(
            y, apply_temperature(s.scores, temperature)).items() if key != "ece_bins"}
    calibration = {**_calibration(y, probs), "temperature": temperature,
                   "temperature_note": scaling.note if scaling else NO_SCALING,
                   "scaled": scaled, "interval_method": calibration_intervals(len(y))}
    out: dict[str, Any] = {}
    for name in ("accuracy", "macro_f1"):
        out[name] = metrics[name]
        out.update({f"{name}_ci95_{end}": bounds[f"{name}_ci95_{end}"]
                    for end in ("low", "high")})
    out["relative_error_reduction"] = chosen["relative_error_reduction"]
    out.update({f"relative_error_reduction_ci95_{end}":
                chosen[f"relative_error_reduction_ci95_{end}"] for end in ("low", "high")})
    out.update({
        "per_class": metrics["per_class"],
        "confusion_matrix": metrics["confusion_matrix"],
        "labels": labels,
        "test_rows": len(y),
        "baseline": {"majority_class": majority_class,
                     "majority_accuracy": accuracies["majority"],
                     "zero_shot_accuracy": accuracies["zero_shot"],
                     "zero_shot_macro_f1": macro_f1s["zero_shot"],
                     "zero_shot_calibrated_accuracy": accuracies["zero_shot_calibrated"],
                     "zero_shot_calibrated_macro_f1": macro_f1s["zero_shot_calibrated"]},
        "reference": reference,
        "reference_note": reference_note,
        "reference_accuracy": chosen["accuracy"],
        "relative_error_reduction_note": chosen["relative_error_reduction_note"],
        "references": references,
        "reference_notes": dict(s.reference_notes or {}),
        "strongest_supervised": strongest,
        "verdict": strongest_verdict(tied_strongest(strongest, accuracies),
                                     {n: r for n, r in references.items() if r})
        if strongest else None,
        "calibration": calibration,
        "label_issues": {"rows": len(issues.indices), "share": len(issues.indices) / len(y),
                         "method": issues.method, "file": issues_file},
        "intervals": interval_method(len(y)),
    })
    out["warnings"] = run_warnings(out) + _overlap_warnings(s) + (
        [] if len(y) > 1 else [ONE_ROW.format(name=s.name)])
    return out, issues


def _calibration(y: np.ndarray, probs: np.ndarray) -> dict[str, Any]:
    """:func:`lorasent.calibration.calibration_metrics`, its bounds None on one row: a
    bootstrap over one row draws that row every time, a spread of 0 that is no interval."""
    found = calibration_metrics(y, probs)
    return found if len(y) > 1 else {
        key: None if "_ci95_" in key else value for key, value in found.items()}


def _paired(y: np.ndarray, reference: np.ndarray, adapter: np.ndarray,
            labels: list[str]) -> dict[str, Any]:
    """The :class:`~lorasent.contracts.PairedVerdict` of the adapter against a reference
    (:func:`lorasent.statistics.paired_comparison`, the adapter as B)."""
    found = paired_comparison(y, reference, adapter, labels)
    verdict = ("no detectable difference" if not found.significant
               else "better" if found.delta_accuracy > 0 else "worse")
    return {"delta_accuracy": found.delta_accuracy,
            "delta_accuracy_ci95_low": found.delta_accuracy_ci[0],
            "delta_accuracy_ci95_high": found.delta_accuracy_ci[1],
            "delta_macro_f1": found.delta_macro_f1,
            "delta_macro_f1_ci95_low": found.delta_macro_f1_ci[0],
            "delta_macro_f1_ci95_high": found.delta_macro_f1_ci[1],
            "only_adapter_right": found.only_b_right,
            "only_reference_right": found.only_a_right,
            "mcnemar_p": found.p_value, "verdict": verdict}


def _overlap_warnings(s: ScoredSet) -> list[str]:
    """An extra set that shares texts with the training split: a warning (the rows are
    kept, so its accuracy is partly measured on training rows)."""
    shared = (s.report or {}).get("overlap_with_train") or 0
    if not shared:
        return []
    return [f"{shared} of the {len(s.y)} rows of test set {s.name} are also in the training "
            "split (same normalised text): its accuracy is partly measured on rows the "
            "adapter trained on"]


def _set_files(s: ScoredSet, issues: LabelIssues, metrics: SetMetrics, labels: list[str],
               source: str) -> dict[str, str]:
    """The texts of one set's predictions, confusion records and label issues files."""
    return {
        "predictions.csv": predictions_csv(s.ids, s.y.tolist(), s.scores, labels),
        "confusion.json": json_text(confusion_records(
            metrics.confusion_matrix, labels, f"{source}:confusion_matrix")),
        "label_issues.csv": label_issues_csv(s.ids, s.y, issues, labels),
    }


def label_issues_csv(ids: Sequence[str], y: np.ndarray, issues: LabelIssues,
                     labels: Sequence[str]) -> str:
    """The flagged rows ranked, most likely mislabelled first: ``rank, id, actual,
    suggested, self_confidence`` (the adapter's probability of the given label, 6
    decimals); the header alone when no row is flagged. A cell a spreadsheet would run as
    a formula is neutralised (:func:`lorasent.tables.spreadsheet_cell`;
    :func:`lorasent.review.collect.read_label_issues` reverses it)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["rank", "id", "actual", "suggested", "self_confidence"])
    for rank, (row, confidence, suggested) in enumerate(zip(
            issues.indices, issues.self_confidence, issues.suggested, strict=True), start=1):
        writer.writerow(spreadsheet_row([rank, ids[row], labels[y[row]], labels[suggested],
                                         f"{confidence:.6f}"]))
    return out.getvalue()


def _reliability_records(s: ScoredSet, scaling: TemperatureScaling | None
                         ) -> list[dict[str, Any]]:
    """The reliability diagram's non-empty bins (Guo et al. 2017, figure 1), raw and
    after temperature scaling, as the records of a DVC plot."""
    versions = {"raw": probabilities(s.scores)}
    if scaling and scaling.temperature is not None:
        versions["temperature"] = apply_temperature(s.scores, scaling.temperature)
    return [{"probabilities": name, "bin": b["bin"], "confidence": b["confidence"],
             "accuracy": b["accuracy"], "rows": b["rows"]}
            for name, probs in versions.items() for b in reliability_bins(s.y, probs)
            if b["rows"]]


def _reference_predictions(path: Path, ids: list[str], labels: list[str]) -> np.ndarray:
    """The predicted class ids of a baseline predictions file ``path``, in the order of
    ``ids``.

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
