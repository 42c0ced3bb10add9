"""The files other code reads back: the adapter record, the adapter's temperature
scaling, the evaluation's metrics and the validation split's.

- :class:`AdapterRecord`, ``models/adapter/lorasent.json``: written by the train stage
  (and by ``lorasent export`` beside the merged model, with ``exported_from``); read by
  ``lorasent.modeling`` (evaluate, predict, export, the device check load the adapter
  through it) and by ``lorasent.tools.predict``'s model card.
- :class:`TemperatureScaling`, ``models/adapter/calibration.json``: written by the train
  stage beside ``lorasent.json`` (copied by ``lorasent export``); read with
  :func:`read_temperature_scaling` by ``lorasent predict`` and the export's model card.
- :class:`EvalMetrics`, ``metrics/eval.json``: written by the evaluate stage; read by
  ``lorasent metrics``, the export's model card (``lorasent.tools.predict``), ``lorasent
  compare``, ``lorasent pr-comment`` and ``lorasent seeds`` (``lorasent.review``), and
  by DVC (``dvc metrics diff``, ``make exp-show``'s columns, the pull-request workflow).
- :class:`ValidationMetrics`, ``metrics/validation.json``: written by the train stage;
  read by DVC (``dvc metrics show``, ``dvc metrics diff``, ``dvc exp show``).

Writers build the model and serialise it with :func:`dump`, readers parse with
:func:`parse`: the bytes are those of ``lorasent.atomic.write_json`` of the same
dict (fields in the order declared here, floats as Python prints them, strict JSON).
Only what the reading code needs is imported here (pydantic), so that the review
commands, which run without torch, can read the files too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from lorasent.errors import LorasentError
from lorasent.modes import ModeName
from lorasent.paths import CALIBRATION_RECORD
from lorasent.reference_registry import NAMES, SUPERVISED

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


# --------------------------------------------------------------- models/adapter/calibration.json


class RiskCoveragePoint(_Contract):
    """One threshold of the validation risk-coverage curve, after temperature scaling: a
    row is kept when its top probability is at least ``min_confidence`` (``lorasent
    predict --min-confidence`` abstains on the others)."""

    min_confidence: float     # in [0, 1]
    coverage: float           # share of the validation rows kept, in [0, 1]
    accuracy: float | None    # accuracy on the kept rows; None when none is kept
    rows: int                 # validation rows kept


# The temperatures calibration.json may hold, the bounds included. Temperature scaling
# corrects a classifier that is over- or under-confident by a factor (Guo et al. 2017),
# so a T fitted on real validation rows is near 1; at 0.05 the scores are multiplied by
# 20 (the probabilities all but one-hot), at 20 divided by 20 (all but uniform). A T
# outside is a fit on degenerate rows (every row right by a wide margin drives T
# towards 0, every row wrong towards infinity) or a damaged file: 5e-324 makes every
# probability NaN. The train stage writes no temperature then (``note`` says why);
# readers refuse one.
TEMPERATURE_MIN = 0.05
TEMPERATURE_MAX = 20.0


def temperature_out_of_range(temperature: float) -> str | None:
    """Why :class:`TemperatureScaling` refuses ``temperature`` (outside
    [:data:`TEMPERATURE_MIN`, :data:`TEMPERATURE_MAX`], or not finite), in words to
    follow the value in a message; None when it takes it."""
    if TEMPERATURE_MIN <= temperature <= TEMPERATURE_MAX:
        return None
    return (f"outside [{TEMPERATURE_MIN:g}, {TEMPERATURE_MAX:g}], the range of a "
            f"temperature fitted on real validation rows (near 1)")


def _sane_temperature(temperature: float) -> float:
    why = temperature_out_of_range(temperature)
    if why is not None:
        raise PydanticCustomError("temperature_range", "{value} is {why}",
                                  {"value": repr(temperature), "why": why})
    return temperature


class TemperatureScaling(_Contract):
    """``calibration.json``: the adapter's temperature, fitted on the validation split.

    Written by ``lorasent.stages.train`` in the same atomic write as the adapter (every
    key, in this order); copied by ``lorasent export``; read with
    :func:`read_temperature_scaling`. Temperature scaling (Guo et al. 2017, "On
    Calibration of Modern Neural Networks") divides the class scores (label-word
    log-probabilities or head logits, (N, K)) by one ``temperature`` T, in
    [:data:`TEMPERATURE_MIN`, :data:`TEMPERATURE_MAX`], before the softmax: it changes no
    prediction, only how confident the probabilities are. Without validation rows, or
    when the fit gives a T outside that range, ``temperature`` is None, ``note`` says why
    and ``risk_coverage`` is empty; predict then uses the raw probabilities.
    """

    method: str                   # how T was fitted, with its sources
    fitted_on: Literal["validation"]
    validation_rows: int          # rows T was fitted on (0: none)
    # a JSON number (not true, not "1.5") in [TEMPERATURE_MIN, TEMPERATURE_MAX]: outside, it
    # gives every user of the adapter NaN, one-hot or uniform probabilities (refused when
    # read, before a model loads); None: not fitted (``note`` says why)
    temperature: Annotated[float, Field(strict=True, allow_inf_nan=False),
                           AfterValidator(_sane_temperature)] | None
    note: str | None              # None when fitted
    ece_bins: int                 # equal-width confidence bins of the ECE
    # on the validation rows: before (raw softmax) and after scaling; None when not fitted
    nll_before: float | None      # mean negative log-likelihood, nats
    nll_after: float | None
    ece_before: float | None      # expected calibration error, in [0, 1]
    ece_after: float | None
    brier_before: float | None    # multi-class Brier score, in [0, 2]
    brier_after: float | None
    risk_coverage: list[RiskCoveragePoint]   # after scaling, min_confidence ascending

    def point_at(self, min_confidence: float) -> RiskCoveragePoint | None:
        """The point of :attr:`risk_coverage` with the largest ``min_confidence`` at or
        below ``min_confidence`` (it keeps at least the rows that ``min_confidence``
        keeps); None when the curve is empty."""
        below = [p for p in self.risk_coverage if p.min_confidence <= min_confidence]
        return max(below, key=lambda p: p.min_confidence) if below else None


def read_temperature_scaling(adapter_dir: str | Path) -> TemperatureScaling | None:
    """The adapter's ``calibration.json`` (:class:`TemperatureScaling`); None for an
    adapter folder written before the train stage wrote it (or without one).

    Raises:
        LorasentError: a file that is not JSON or not such a record (one line naming
            the first wrong key).
    """
    path = Path(adapter_dir) / CALIBRATION_RECORD
    if not path.is_file():
        return None
    return read(TemperatureScaling, path, "retrain the adapter (dvc repro) to write it again, "
                "or delete it to use the raw probabilities")


# ------------------------------------------------------------------------ metrics/eval.json


class PerClass(_Contract):
    """One class's scores over the test rows (scikit-learn, ``zero_division=0``)."""

    precision: float  # in [0, 1]
    recall: float     # in [0, 1]
    f1: float         # in [0, 1]
    support: int      # test rows of this class


class BaselineSummary(_Contract):
    """``metrics/baseline.json``'s headline, copied into ``eval.json`` (for an extra test
    set, measured by evaluate on that set)."""

    majority_class: str        # the training split's most frequent class
    majority_accuracy: float   # always predicting it, on the test rows
    zero_shot_accuracy: float | None   # None in seq_cls mode: a fresh head has no answer
    zero_shot_macro_f1: float | None   # the same
    # the zero-shot baseline with contextual calibration (Zhao et al. 2021); absent
    # before issue 30, None in seq_cls mode
    zero_shot_calibrated_accuracy: float | None = None
    zero_shot_calibrated_macro_f1: float | None = None


class IntervalMethod(_Contract):
    """How the ``*_ci95_*`` bounds were drawn (``lorasent.statistics.METHOD``)."""

    method: str        # e.g. ``percentile bootstrap over test rows (scipy.stats.bootstrap)``
    confidence: float  # 0.95
    resamples: int     # bootstrap resamples
    seed: int          # the bootstrap's own seed (not ``base.seed``)


# The references trained on the adapter's own rows, in the order sentences try them
# (lorasent.reference_registry, the one place that lists them).
SUPERVISED_REFERENCES = NAMES
# Each reference baseline as sentences and tables name it.
REFERENCE_NAMES: dict[str, str] = {"majority": "majority-class", "zero_shot": "zero-shot",
                                   "zero_shot_calibrated": "calibrated zero-shot",
                                   **{r.name: r.short for r in SUPERVISED}}
if TYPE_CHECKING:
    ReferenceName = str
else:
    ReferenceName = Literal[tuple(REFERENCE_NAMES)]


class PairedVerdict(_Contract):
    """The adapter against one reference on the same N rows (``lorasent.statistics.
    paired_comparison``, B the adapter, A the reference): Δ = adapter − reference."""

    delta_accuracy: float
    delta_accuracy_ci95_low: float    # paired percentile bootstrap, 95%
    delta_accuracy_ci95_high: float
    delta_macro_f1: float
    delta_macro_f1_ci95_low: float
    delta_macro_f1_ci95_high: float
    only_adapter_right: int           # McNemar's discordant rows
    only_reference_right: int
    mcnemar_p: float                  # McNemar's exact two-sided p-value
    # better / worse: the interval of Δ accuracy excludes 0 and McNemar's p < 0.05
    verdict: Literal["better", "worse", "no detectable difference"]


class Cost(_Contract):
    """What a classifier cost to train, machine-independent (the seconds and memory are
    in the machine records: ``metrics/provenance/machine/``)."""

    trainable_parameters: int
    total_parameters: int
    train_rows: int
    train_tokens: int | None      # tokens processed in training (``train_tokens_are``)
    train_tokens_are: str | None = None


class Reference(_Contract):
    """One reference on the same rows as the adapter: its own scores, the relative error
    reduction against it and the paired verdict. Fields with a default are absent from
    files written before issue 58 (which held the first five alone)."""

    accuracy: float                                  # the reference's accuracy
    relative_error_reduction: float | None           # None: the reference makes no errors
    relative_error_reduction_ci95_low: float | None  # paired bootstrap over the rows
    relative_error_reduction_ci95_high: float | None
    relative_error_reduction_note: str | None        # why the reduction is None
    accuracy_ci95_low: float | None = None           # the reference's own intervals
    accuracy_ci95_high: float | None = None
    macro_f1: float | None = None
    macro_f1_ci95_low: float | None = None
    macro_f1_ci95_high: float | None = None
    per_class: dict[str, PerClass] | None = None
    paired: PairedVerdict | None = None              # None on a set of one row
    method: str | None = None                        # a supervised reference's method
    cost: Cost | None = None                         # a supervised reference's cost


class CalibrationScores(_Contract):
    """How far the adapter's class probabilities can be trusted, on N rows
    (``lorasent.calibration``): lower is better for all three."""

    nll: float                    # mean negative log-likelihood of the gold class (nats)
    nll_ci95_low: float | None
    nll_ci95_high: float | None
    brier: float                  # multiclass Brier score (Brier 1950), in [0, 2]
    brier_ci95_low: float | None
    brier_ci95_high: float | None
    ece: float                    # expected calibration error (Guo et al. 2017), in [0, 1]
    ece_ci95_low: float | None
    ece_ci95_high: float | None
    # why an interval leaves out its estimate (``lorasent.calibration.interval_note``);
    # absent where each interval holds its estimate, and before issue 62
    interval_note: str | None = None


class Calibration(CalibrationScores):
    """The scores of the raw probabilities (softmax of the label scores, as the
    predictions file holds them) and, when the adapter has a temperature fitted on the
    validation split (``models/adapter/calibration.json``), of the scaled ones."""

    ece_bins: int                          # equal-width confidence bins of the ECE (15)
    temperature: float | None              # None: not fitted (``temperature_note`` says why)
    temperature_note: str | None
    scaled: CalibrationScores | None       # after temperature scaling; None without one
    # how the *_ci95_* bounds were drawn (``lorasent.calibration.INTERVAL_METHOD``); absent
    # before issue 42, when they were ``intervals.method``'s row bootstrap
    interval_method: str | None = None


class LabelIssuesSummary(_Contract):
    """The test-label audit: rows whose given label is likely wrong (cleanlab)."""

    rows: int       # flagged rows
    share: float    # rows / test rows
    method: str     # the method and library version, one sentence
    file: str       # the ranked rows: rank, id, actual, suggested, self_confidence


class SetMetrics(_Contract):
    """The metrics of one labelled test set: the split's own test split (the top of
    ``eval.json``) or an extra set (``test_sets.<name>``).

    Accuracy, macro-F1 and the relative error reduction are fractions in [0, 1] (the
    relative error reduction may be negative), each followed by its 95% interval's
    bounds (``None`` when undefined: some resample's reference makes no errors). Fields
    with a default are absent from files written before they existed (the first
    ``eval.json`` had no intervals, ``mode``, ``reference_note``, ``intervals`` or
    ``warnings``; none before issue 30 had ``references``, ``calibration``,
    ``label_issues`` or ``test_sets``); :mod:`lorasent.review` reads such revisions too.
    The evaluate stage always writes every field.
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
    reference: ReferenceName                       # the baseline of the error reduction
    reference_note: str | None = None  # why the reference is not ``evaluate.reference``
    reference_accuracy: float
    relative_error_reduction_note: str | None      # why the reduction is None
    # the relative error reduction against each reference (None: the mode has none, the
    # reference is off or could not be fitted: ``reference_notes`` says why)
    references: dict[ReferenceName, Reference | None] | None = None
    reference_notes: dict[str, str] | None = None
    # the strongest supervised reference (highest accuracy on these rows; a tie: the
    # first in registry order) and the adapter's paired verdict against it, as one
    # sentence (``lorasent.metrics.strongest_verdict``: a tie is said, with the verdict
    # against each); None when no supervised reference was fitted
    strongest_supervised: ReferenceName | None = None
    verdict: str | None = None
    cost: Cost | None = None   # the adapter's (top level only: the split's test split)
    calibration: Calibration | None = None
    label_issues: LabelIssuesSummary | None = None
    intervals: IntervalMethod | None = None
    warnings: list[str] = []  # ``lorasent.metrics.run_warnings``: what a reviewer must see

    def strongest_verdict(self, seconds: Mapping[str, float] | None = None) -> str | None:
        """:func:`lorasent.metrics.strongest_verdict` against ``strongest_supervised``
        and the references that tie with it on accuracy, with their fit and predict time
        from ``seconds`` (``{reference: seconds}``, this machine's record); None when no
        supervised reference was fitted."""
        from lorasent.metrics import strongest_verdict, tied_strongest

        name = self.strongest_supervised
        refs = {n: dump(r) for n, r in (self.references or {}).items() if r is not None}
        if name is None or name not in refs:
            return None
        tied = tied_strongest(name, {n: r["accuracy"] for n, r in refs.items()})
        return strongest_verdict(tied, refs, seconds)

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


class TestSetMetrics(SetMetrics):
    """``eval.json``'s ``test_sets.<name>``: an extra test set (``evaluate.test_sets``)."""

    source: str               # the set's ``source``, as the params give it
    data: dict[str, Any]      # its data report (``lorasent.stages.test_sets.TestSet.report``)


class EvalMetrics(SetMetrics):
    """``metrics/eval.json``, written by ``lorasent.stages.evaluate``; every key in this
    order: the split's test split (:class:`SetMetrics`), then each extra test set."""

    test_sets: dict[str, TestSetMetrics] = {}   # ``evaluate.test_sets``, in params order


# ------------------------------------------------------------------ metrics/validation.json


class ValidationMetrics(_Contract):
    """``metrics/validation.json``: the trained adapter on the validation split, the
    numbers to choose a recipe on without reading the test split.

    Written by ``lorasent.stages.train`` on every run (every key, in this order), from the
    scores the temperature of ``calibration.json`` is fitted on, before scaling (it
    changes no argmax). Accuracy and macro-F1 are fractions in [0, 1], each followed by
    its 95% bootstrap interval's bounds (``lorasent.statistics.intervals``, the method in
    ``intervals``). With one validation row the bounds and ``intervals`` are None (a
    bootstrap over one row has no spread) and ``note`` says so; with none
    (``split.validation_size: 0``) every metric and ``scores_are`` are None too.
    """

    accuracy: float | None
    accuracy_ci95_low: float | None
    accuracy_ci95_high: float | None
    macro_f1: float | None
    macro_f1_ci95_low: float | None
    macro_f1_ci95_high: float | None
    per_class: dict[str, PerClass] | None               # {label: scores}, in label order
    confusion_matrix: dict[str, dict[str, int]] | None  # [actual][predicted] = rows, K x K
    labels: list[str]                                   # ``base.labels``
    validation_rows: int
    intervals: IntervalMethod | None
    scores_are: str | None   # which scores were measured (None: none were)
    note: str | None         # why metrics or intervals are None; None when all are given


# ------------------------------------------------------------------------- reading, writing


def dump(model: BaseModel) -> dict[str, Any]:
    """The JSON object of ``model`` as its file holds it, fields in declared order: for
    ``lorasent.atomic.write_json``. A field left unset is left out (the record's
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
