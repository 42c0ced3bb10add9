"""``baseline``: the params of the supervised references (``lorasent.references``), one
section per entry of ``lorasent.reference_registry.SUPERVISED``, named as it."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from lorasent.section import Section

# An inverse regularisation strength of scikit-learn's LogisticRegression, within
# [STRENGTH_MIN, STRENGTH_MAX]: six decades either side of scikit-learn's default 1, past
# the ends of LogisticRegressionCV's default grid (1e-4 to 1e4), where the fitted model
# no longer changes (every weight near 0: the class prior; or no regularisation left).
# The fits take far more (measured, scikit-learn 1.9, on 2 to 10^6 rows): lbfgs any
# C > 0; the sparse fit's SGDClassifier, alpha = 1 / (C * rows), fails below about
# C = 1e-22 on 2 rows ("Floating-point under-/overflow") and where C * rows nears 1e308
# (alpha 0: "alpha must be > 0"), both tracebacks in the baseline stage before.
STRENGTH_MIN, STRENGTH_MAX = 1e-6, 1e6
Strength = Annotated[float, Field(ge=STRENGTH_MIN, le=STRENGTH_MAX, allow_inf_nan=False)]
# A grid of them, tried in turn: one to ten distinct values.
StrengthGrid = Annotated[tuple[Strength, ...], Field(min_length=1, max_length=10)]
NgramRange = tuple[Annotated[int, Field(ge=1, le=10)], Annotated[int, Field(ge=1, le=10)]]


def _grid_and_range(section: str, grid: tuple[float, ...],
                    ranges: dict[str, tuple[int, int]]) -> None:
    if len(set(grid)) != len(grid):
        raise ValueError(f"baseline.{section}.C: {list(grid)} repeats a value; give each "
                         "strength once")
    for key, (low, high) in ranges.items():
        if low > high:
            raise ValueError(f"baseline.{section}.{key}: [{low}, {high}] is not a range "
                             "(low > high); give [low, high], e.g. [1, 2]")


class TfidfLrParams(Section):
    """``baseline.tfidf_lr``: word and character n-gram TF-IDF + logistic regression
    (``lorasent.references.fit_tfidf_lr``); always on."""

    C: StrengthGrid = (0.25, 1.0, 4.0, 16.0)
    word_ngram_range: NgramRange = (1, 2)
    char_ngram_range: NgramRange = (2, 5)

    @model_validator(mode="after")
    def _consistent(self) -> TfidfLrParams:
        _grid_and_range("tfidf_lr", self.C, {"word_ngram_range": self.word_ngram_range,
                                             "char_ngram_range": self.char_ngram_range})
        return self


class EncoderParams(Section):
    """``baseline.encoder``: a frozen encoder's mean-pooled embeddings + logistic
    regression (``lorasent.references.fit_encoder_lr``)."""

    enabled: bool = False  # params.yaml's comment gives its measured cost
    model: str = Field(default="packaged:minilm-l6", min_length=1)
    C: StrengthGrid = (0.25, 1.0, 4.0, 16.0)
    batch_size: Annotated[int, Field(gt=0)] = 64
    max_length: Annotated[int, Field(ge=8, le=512)] = 128

    @model_validator(mode="after")
    def _consistent(self) -> EncoderParams:
        _grid_and_range("encoder", self.C, {})
        return self


# A learning rate of a fine-tune: finite, in (0, 1); a grid of them, one to five values.
LearningRate = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
LearningRateGrid = Annotated[tuple[LearningRate, ...], Field(min_length=1, max_length=5)]


class EncoderFtParams(Section):
    """``baseline.encoder_ft``: a small encoder fine-tuned in full with a classification
    head (``lorasent.finetuned_encoder``), its learning rate and epoch chosen on the
    validation split."""

    enabled: bool = False  # params.yaml turns it on; a params file without it leaves it off
    model: str = Field(default="packaged:minilm-l6", min_length=1)
    learning_rate: LearningRateGrid = (1e-4,)
    epochs: Annotated[int, Field(ge=1, le=50)] = 5
    batch_size: Annotated[int, Field(ge=1, le=4096)] = 16
    max_length: Annotated[int, Field(ge=8, le=512)] = 128
    weight_decay: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.01
    warmup_ratio: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.1

    @model_validator(mode="after")
    def _consistent(self) -> EncoderFtParams:
        if len(set(self.learning_rate)) != len(self.learning_rate):
            raise ValueError(f"baseline.encoder_ft.learning_rate: {list(self.learning_rate)} "
                             "repeats a value; give each learning rate once")
        return self


class BaselineParams(Section):
    """The supervised references of the baseline stage, trained on the rows the adapter
    trains on (``lorasent.references``), one field per entry of
    ``lorasent.reference_registry.SUPERVISED``, named as it; the majority class and
    zero-shot baselines need no params."""

    tfidf_lr: TfidfLrParams = TfidfLrParams()
    encoder: EncoderParams = EncoderParams()
    encoder_ft: EncoderFtParams = EncoderFtParams()
