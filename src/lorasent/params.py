"""The params contract: ``params.yaml`` read once, validated, frozen.

Every knob lives in ``params.yaml`` (commented there). The CLI reads it once with
:func:`load_params` and hands each stage only its sections; stage code never opens
the file. An unknown or mistyped key, a wrong type or an inconsistent value fails
before any work starts with a :class:`ParamsError` naming the key's path, e.g.
``train.lora.rank: unknown key (known: r, lora_alpha, lora_dropout, target_modules)``.

Values are coerced the way YAML users expect: ``1e-5`` (a string to YAML 1.1
loaders such as PyYAML) is a float, ``8`` is an int.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lorasent.errors import LorasentError

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
# A split size: a count of rows (int >= 0) or a fraction of the deduplicated rows.
SplitSize = Annotated[int, Field(ge=0)] | Annotated[float, Field(gt=0, lt=1)]


class ParamsError(LorasentError, ValueError):
    """A params file that cannot be used; the message names the file and key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BaseParams(_Section):
    """Shared by every stage: reproducibility, the model, the classes, the device."""

    seed: int
    model: str = Field(min_length=1)
    labels: tuple[str, ...] = Field(min_length=2)
    label_aliases: dict[str, str]
    device: Literal["auto", "cpu", "cuda", "rocm", "mps"]
    precision: Literal["auto", "bf16", "fp16", "fp32"]
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"]

    @model_validator(mode="after")
    def _labels_consistent(self) -> BaseParams:
        folded = [label.strip().casefold() for label in self.labels]
        if any(not f for f in folded):
            raise ValueError("base.labels: a label is empty")
        if len(set(folded)) != len(folded):
            raise ValueError(f"base.labels: labels repeat (ignoring case): {list(self.labels)}")
        bad = {alias: target for alias, target in self.label_aliases.items()
               if target not in self.labels}
        if bad:
            raise ValueError(
                f"base.label_aliases: {bad} map to labels that are not in base.labels "
                f"{list(self.labels)}")
        return self


class DataParams(_Section):
    """Where the corpus comes from (see ``lorasent.fetch`` for the sources)."""

    source: str = Field(min_length=1)
    text_column: str
    label_column: str
    encoding: str
    hf_split: str


class SplitParams(_Section):
    """Split sizes: an int is a row count, a float in (0, 1) a fraction of the rows."""

    train_size: SplitSize
    validation_size: SplitSize
    test_size: SplitSize


class PromptParams(_Section):
    """Generative mode: the prompt template, one label word per class, token budget."""

    template: str
    label_words: dict[str, str]
    max_length: PositiveInt

    @model_validator(mode="after")
    def _template_has_text(self) -> PromptParams:
        if self.template.count("{text}") != 1:
            raise ValueError("prompt.template: must contain {text} exactly once")
        empty = [label for label, word in self.label_words.items() if not word.strip()]
        if empty:
            raise ValueError(f"prompt.label_words: empty label word for {empty}")
        return self


class LoraParams(_Section):
    """peft ``LoraConfig`` fields (Hu et al. 2021, arXiv:2106.09685)."""

    r: PositiveInt
    lora_alpha: PositiveFloat
    lora_dropout: Annotated[float, Field(ge=0, lt=1)]
    target_modules: tuple[str, ...] = Field(min_length=1)


class TrainParams(_Section):
    """Trainer hyperparameters; names follow ``transformers.TrainingArguments``."""

    mode: Literal["generative"]
    lora: LoraParams
    learning_rate: PositiveFloat
    num_train_epochs: PositiveFloat
    max_steps: int
    per_device_train_batch_size: PositiveInt
    gradient_accumulation_steps: PositiveInt
    warmup_ratio: Annotated[float, Field(ge=0, lt=1)]
    lr_scheduler_type: Literal[
        "linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
        "constant_with_warmup", "inverse_sqrt"]
    weight_decay: Annotated[float, Field(ge=0)]
    max_grad_norm: PositiveFloat
    class_weighting: Literal["none", "balanced"]
    logging_steps: PositiveInt


class EvaluateParams(_Section):
    """Scoring batch size and the reference for the relative error reduction."""

    batch_size: PositiveInt
    reference: Literal["zero_shot", "majority"]


class Params(_Section):
    """All of ``params.yaml``; one field per section."""

    base: BaseParams
    data: DataParams
    split: SplitParams
    prompt: PromptParams
    train: TrainParams
    evaluate: EvaluateParams

    @model_validator(mode="after")
    def _cross_section(self) -> Params:
        words = self.prompt.label_words
        if set(words) != set(self.base.labels):
            missing = [label for label in self.base.labels if label not in words]
            extra = [label for label in words if label not in self.base.labels]
            raise ValueError(
                "prompt.label_words: needs exactly one word per label in base.labels; "
                f"missing {missing}, not a label {extra}")
        return self


def _format_error(path: Path, err: ValidationError) -> str:
    """One line per key: ``train.lora.rank: unknown key (known: ...)``."""
    by_key: dict[str, list[str]] = {}
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not _is_union_tag(str(p)))
        if e["type"] == "extra_forbidden":
            section = _section_for(e["loc"][:-1])
            known = ", ".join(section.model_fields) if section else ""
            msg = f"unknown key (known: {known})"
        elif e["type"] == "missing":
            msg = "missing key"
        elif e["type"] == "value_error":  # our validators name their keys themselves
            loc, msg = "", e["msg"].removeprefix("Value error, ")
        else:
            msg = f"{e['msg'][0].lower()}{e['msg'][1:]} (got {e.get('input')!r})"
        by_key.setdefault(loc, []).append(msg)
    lines = [f"  {loc}: {' or '.join(msgs)}" if loc else f"  {'; '.join(msgs)}"
             for loc, msgs in by_key.items()]
    return "\n".join([f"{path}: invalid params", *lines])


def _is_union_tag(part: str) -> bool:
    """pydantic names the members of a union in the error path (``constrained-int``)."""
    return part.startswith(("constrained-", "function-")) or part in ("int", "float", "str")


def _section_for(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] = Params
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not isinstance(field.annotation, type) or not issubclass(
                field.annotation, BaseModel):
            return None
        model = field.annotation
    return model


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``override`` onto ``base`` (dicts merge, everything else replaces)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_params(raw: dict[str, Any], source: str | Path = "params.yaml") -> Params:
    """Validate a params mapping. Raises :class:`ParamsError` naming every bad key."""
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: expected a mapping of sections, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as err:
        raise ParamsError(_format_error(Path(source), err)) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate a params file.

    Raises:
        ParamsError: the file is missing, is not YAML, or a key is unknown, missing or
            of the wrong type or value; the message names the file and the key path.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParamsError(
            f"{path}: not found. Run from a folder that holds params.yaml, or pass "
            "--params PATH") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ParamsError(f"{path}: not valid YAML: {err}") from None
    return parse_params(raw, path)
