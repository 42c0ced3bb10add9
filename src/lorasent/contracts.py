"""The two files other code reads back: the adapter record and the evaluation's metrics.

- :class:`AdapterRecord`, ``models/adapter/lorasent.json``: written by the train stage
  (and by ``lorasent export`` beside the merged model, with ``exported_from``); read by
  ``lorasent.modeling`` (evaluate, predict, export, the device check load the adapter
  through it) and by ``lorasent.tools.predict``'s model card.
- :class:`EvalMetrics`, ``metrics/eval.json``: written by the evaluate stage; read by
  ``lorasent metrics``, the export's model card (``lorasent.tools.predict``), ``lorasent
  compare``, ``lorasent pr-comment`` and ``lorasent seeds`` (``lorasent.review``), and
  by DVC (``dvc metrics diff``, ``make exp-show``'s columns, the pull-request workflow).

Writers build the model and serialise it with :func:`dump`, readers parse with
:func:`parse`: the bytes are those of ``lorasent.artifacts.write_json`` of the same
dict (fields in the order declared here, floats as Python prints them, strict JSON).
Only what the reading code needs is imported here (pydantic), so that the review
commands, which run without torch, can read the files too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from lorasent.errors import LorasentError
from lorasent.modes import ModeName

M = TypeVar("M", bound=BaseModel)


class _Contract(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ------------------------------------------------------------------ models/adapter/lorasent.json


class BaseModelRef(_Contract):
    """The base model an adapter was trained on."""

    source: str   # ``base.model`` as params.yaml gave it, e.g. ``packaged:gemma-3-270m``
    sha256: str   # the base model's manifest hash (64 hex digits), checked before loading


class AdapterRecord(_Contract):
    """``lorasent.json``: what scoring needs beside the adapter's weights.

    Written by ``lorasent.stages.train`` (fields in this order; of the fields that depend on
    the mode, only those of its ``record_fields`` in :data:`lorasent.modes.MODES`: the
    generative fields or ``head``, never both) and by ``lorasent.tools.predict.export_merged``
    (``exported_from`` added); read by ``lorasent.modeling.read_adapter_record``.
    """

    mode: ModeName                           # ``train.mode``
    labels: list[str]                        # the classes, id ``i`` is ``labels[i]``
    label2id: dict[str, int]                 # ``{label: id}``, the same order
    max_length: int                          # ``prompt.max_length``, in tokens
    base_model: BaseModelRef
    params: dict[str, Any]                   # the resolved params of the run (params.yaml)
    # generative mode only: the answer each class is scored by, its token ids (one list
    # per class, in the base model's vocabulary), and the prompt with ``{text}``
    label_words: list[str] | None = None
    label_token_ids: list[list[int]] | None = None
    template: str | None = None
    # seq_cls mode only: the modules saved in full with the adapter (the new head)
    head: list[str] | None = None
    exported_from: str | None = None         # ``lorasent export``: the adapter folder merged


# ------------------------------------------------------------------------ metrics/eval.json


class PerClass(_Contract):
    """One class's scores over the test rows (scikit-learn, ``zero_division=0``)."""

    precision: float  # in [0, 1]
    recall: float     # in [0, 1]
    f1: float         # in [0, 1]
    support: int      # test rows of this class


class BaselineSummary(_Contract):
    """``metrics/baseline.json``'s headline, copied into ``eval.json``."""

    majority_class: str        # the training split's most frequent class
    majority_accuracy: float   # always predicting it, on the test rows
    zero_shot_accuracy: float | None   # None in seq_cls mode: a fresh head has no answer
    zero_shot_macro_f1: float | None   # the same
    # the zero-shot baseline with its label scores calibrated (issue 30; absent before)
    zero_shot_calibrated_accuracy: float | None = None
    zero_shot_calibrated_macro_f1: float | None = None


class IntervalMethod(_Contract):
    """How the ``*_ci95_*`` bounds were drawn (``lorasent.statistics.METHOD``)."""

    method: str        # e.g. ``percentile bootstrap over test rows (scipy.stats.bootstrap)``
    confidence: float  # 0.95
    resamples: int     # bootstrap resamples
    seed: int          # the bootstrap's own seed (not ``base.seed``)


class EvalMetrics(_Contract):
    """``metrics/eval.json``, written by ``lorasent.stages.evaluate``; every key in this order.

    Accuracy, macro-F1 and the relative error reduction are fractions in [0, 1] (the
    relative error reduction may be negative), each followed by its 95% interval's
    bounds (``None`` when undefined: some resample's reference makes no errors). Fields
    with a default are absent from files written before they existed (the first
    ``eval.json`` had no intervals, ``mode``, ``reference_note``, ``intervals`` or
    ``warnings``); :mod:`lorasent.review` reads such revisions too. The evaluate stage
    always writes every field.
    """

    accuracy: float
    accuracy_ci95_low: float | None = None
    accuracy_ci95_high: float | None = None
    macro_f1: float
    macro_f1_ci95_low: float | None = None
    macro_f1_ci95_high: float | None = None
    # (accuracy - reference_accuracy) / (1 - reference_accuracy); None when the
    # reference makes no errors (then ``relative_error_reduction_note`` says so)
    relative_error_reduction: float | None
    relative_error_reduction_ci95_low: float | None = None
    relative_error_reduction_ci95_high: float | None = None
    per_class: dict[str, PerClass]                 # {label: scores}, in label order
    confusion_matrix: dict[str, dict[str, int]]    # [actual][predicted] = test rows, K x K
    labels: list[str]                              # ``base.labels``
    test_rows: int
    baseline: BaselineSummary
    mode: ModeName | None = None  # the adapter's ``train.mode``
    reference: Literal["zero_shot", "zero_shot_calibrated", "majority"]  # of the reduction
    reference_note: str | None = None  # why the reference is not ``evaluate.reference``
    reference_accuracy: float
    relative_error_reduction_note: str | None      # why the reduction is None
    intervals: IntervalMethod | None = None
    warnings: list[str] = []  # ``lorasent.metrics.run_warnings``: what a reviewer must see
    # Issue 30 (absent from files written before it; read as plain JSON objects): the
    # relative error reduction against each reference (``{majority | zero_shot |
    # zero_shot_calibrated: {accuracy, relative_error_reduction + ci} | None}``); the
    # calibration of the probabilities (``ece_bins``, ``nll``, ``brier``, ``ece`` each
    # with its ci, ``temperature``, ``temperature_note``, ``scaled``); cleanlab's audit
    # of the test labels (``rows``, ``share``, ``method``, ``file``); the extra test
    # sets by name, each with these metrics of its own.
    references: dict[str, dict[str, Any] | None] | None = None
    calibration: dict[str, Any] | None = None
    label_issues: dict[str, Any] | None = None
    test_sets: dict[str, dict[str, Any]] = {}

    def interval(self, name: str) -> tuple[float | None, float | None, float | None]:
        """``(value, low, high)`` of ``accuracy``, ``macro_f1`` or
        ``relative_error_reduction``.

        Raises:
            KeyError: another name.
        """
        if name not in ("accuracy", "macro_f1", "relative_error_reduction"):
            raise KeyError(f"{name}: no interval (accuracy, macro_f1, relative_error_reduction)")
        return (getattr(self, name), getattr(self, f"{name}_ci95_low"),
                getattr(self, f"{name}_ci95_high"))


# ------------------------------------------------------------------------- reading, writing


def dump(model: BaseModel) -> dict[str, Any]:
    """The JSON object of ``model`` as its file holds it, fields in declared order: for
    ``lorasent.artifacts.write_json``. A field left unset is left out (the record's
    fields of the other mode); one set to None is written as null."""
    return model.model_dump(mode="json", exclude_unset=True)


def parse(model: type[M], data: Any, source: str, fix: str) -> M:
    """``data`` (a parsed JSON value) as ``model``.

    Args:
        source: the file as the user names it (``HEAD:metrics/eval.json``).
        fix: what to do about a bad file, the end of the message.

    Raises:
        LorasentError: ``data`` is not such a file: one line naming ``source``, the
            first wrong key and ``fix``.
    """
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the top level"
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        raise LorasentError(f"{source}: not the {model.__name__} lorasent writes: {where}: "
                            f"{first['msg'].lower()}{more}; {fix}") from None


def read(model: type[M], path: str | Path, fix: str) -> M:
    """The file ``path`` (UTF-8 JSON) as ``model``.

    Raises:
        FileNotFoundError: no such file.
        LorasentError: not UTF-8 JSON, or not such a file (:func:`parse`); one line
            naming ``path`` and ending with ``fix``.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise LorasentError(f"{path}: not valid JSON ({err}); {fix}") from None
    return parse(model, data, str(path), fix)
