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

import copy
import io
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

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
    trust_remote_code: bool
    num_processes: PositiveInt

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
    """The model's input: in generative mode the prompt template, one label word per
    class and the token budget; in seq_cls mode only ``max_length`` (the text alone)."""

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
    # Modules trained in full and saved with the adapter. In seq_cls mode peft adds the
    # head (``classifier``, ``score``); name any other newly initialised module here.
    modules_to_save: tuple[str, ...]


class TrainParams(_Section):
    """Trainer hyperparameters; names follow ``transformers.TrainingArguments``."""

    mode: Literal["generative", "seq_cls"]
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
    eval_strategy: Literal["no", "epoch"]
    load_best_model_at_end: bool
    auto_find_batch_size: bool
    accelerate_config: str | None

    @field_validator("eval_strategy", mode="before")
    @classmethod
    def _yaml11_no(cls, value: Any) -> Any:
        """PyYAML reads an unquoted ``no`` as False (YAML 1.1); it means "no" here."""
        return "no" if value is False else value


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
        train = self.train
        if train.eval_strategy != "no" and self.split.validation_size == 0:
            raise ValueError(
                f"train.eval_strategy: {train.eval_strategy!r} scores the validation split, "
                "but split.validation_size is 0; set it (e.g. 0.1) or eval_strategy: 'no'")
        if train.load_best_model_at_end and train.eval_strategy == "no":
            raise ValueError("train.load_best_model_at_end: needs train.eval_strategy: epoch")
        words = self.prompt.label_words
        if train.mode == "generative" and set(words) != set(self.base.labels):
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


# Mappings keyed by the user's labels: a preset that sets them replaces them whole, so
# that a 2-class preset does not inherit the default's third label word.
VALUE_MAPS = frozenset({("base", "label_aliases"), ("prompt", "label_words")})


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with ``override`` merged in: sections merge key by key;
    values, lists and the label-keyed maps of :data:`VALUE_MAPS` are replaced whole.
    Comment-keeping mappings (ruamel.yaml's) keep their comments."""
    out = copy.deepcopy(base)
    _merge_into(out, override, ())
    return out


def _merge_into(base: dict[str, Any], override: dict[str, Any], path: tuple[str, ...]) -> None:
    for key, value in override.items():
        here = (*path, str(key))
        if isinstance(value, dict) and isinstance(base.get(key), dict) and here not in VALUE_MAPS:
            _merge_into(base[key], value, here)
        else:
            base[key] = value


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


def apply_preset(preset_path: str | Path, params_path: str | Path = "params.yaml") -> Params:
    """Merge a preset (a partial params file, see ``configs/``) into ``params_path``.

    The merge follows :func:`merge`; comments of ``params_path`` are kept (ruamel.yaml
    round trip). The result is validated before ``params_path`` is replaced, so a bad
    preset leaves it untouched. DVC then sees the changed params like any other edit.

    Raises:
        ParamsError: either file is missing or not YAML, or the merged params are
            invalid; the message names the preset and the key path.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    from lorasent.artifacts import atomic_write_text

    preset_path, params_path = Path(preset_path), Path(params_path)
    rt = YAML()
    rt.width = 4096  # keep long lines (the templates) as they are
    rt.preserve_quotes = True
    loaded = []
    for path in (params_path, preset_path):
        try:
            loaded.append(rt.load(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise ParamsError(f"{path}: not found") from None
        except YAMLError as err:
            raise ParamsError(f"{path}: not valid YAML: {err}") from None
    current, preset = loaded
    if not isinstance(preset, dict):
        raise ParamsError(f"{preset_path}: expected a mapping of params sections")
    merged = merge(current, preset)
    params = parse_params(_plain(merged), preset_path)
    out = io.StringIO()
    rt.dump(merged, out)
    atomic_write_text(params_path, out.getvalue())
    return params


def _plain(value: Any) -> Any:
    """ruamel's comment-keeping containers as plain dicts and lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
