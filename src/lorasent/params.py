"""The params contract: ``params.yaml`` read once, validated, frozen.

Every knob lives in ``params.yaml`` (commented there). The CLI reads it once with
:func:`load_params` and hands each stage only its sections; stage code never opens
the file. An unknown or mistyped key, a wrong type or an inconsistent value fails
before any work starts with a :class:`ParamsError` naming the key's path, e.g.
``train.lora.rank: unknown key (known: r, lora_alpha, lora_dropout, target_modules)``.

The file is read as YAML 1.2 (:func:`read_yaml`), the dialect DVC reads it in, so that
lorasent and DVC see the same values: unquoted ``no``, ``yes``, ``on``, ``off``, ``y``
and ``n`` are strings (YAML 1.1 loaders such as PyYAML make booleans of them), ``1e-5``
is a float, ``8`` an int. A class name, alias or label word that still is not a string
(``labels: [0, 1]``) fails with the key's path and the advice to quote it.

``params.yaml`` is kept in the layout DVC writes back when ``dvc exp run -S key=value``
sets a value (ruamel.yaml's round trip: block lists, long text as a ``|-`` block), and
:func:`apply_preset` writes it the same way, so that each of them changes only the lines
of the keys it sets.
"""

from __future__ import annotations

import copy
import re
import unicodedata
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from lorasent.baseline_params import BaselineParams
from lorasent.characters import character_name, invisible_characters
from lorasent.errors import LorasentError
from lorasent.modes import MODES, ModeName
from lorasent.reference_registry import BY_NAME, NAMES
from lorasent.section import Section
from lorasent.tables import (
    check_separator,
    decomposed,
    disguised_as_latin,
    label_key,
    mixed_script,
    script_of,
    skeleton,
)

PositiveInt = Annotated[int, Field(gt=0)]
# The seeds numpy takes (``np.random.seed``: 0 to 2**32 - 1). ``split.seed`` seeds
# scikit-learn's split (``random_state``) and ``base.seed`` transformers' ``set_seed``,
# which pass them to numpy; torch would take more, numpy fails on anything outside.
SEED_RANGE = (0, 2**32 - 1)


def _check_seed(value: int, key: str, what: str) -> int:
    """``value`` if numpy takes it as a seed (:data:`SEED_RANGE`).

    Raises:
        ValueError: out of range, naming ``key``.
    """
    low, high = SEED_RANGE
    if not low <= value <= high:
        raise ValueError(
            f"{key}: {value} is out of range: a seed is an integer from {low} to {high} "
            f"(2**32 - 1, what numpy takes: {what} passes it to numpy); set one in that "
            "range")
    return value
PositiveFloat = Annotated[float, Field(gt=0)]
# A split size: a count of rows (int >= 0) or a fraction of the deduplicated rows.
SplitSize = Annotated[int, Field(ge=0)] | Annotated[float, Field(gt=0, lt=1)]


class ParamsError(LorasentError, ValueError):
    """A params file that cannot be used; the message names the file and key."""


# A class name every output carries as it is: a DVC metric key (per_class.<label>.f1, so
# no "."), a CSV column, a Markdown table cell and an HTML page (no markup), a file name.
LABEL_NAME = re.compile(r"[^\W_](?:[\w -]{0,48}[^\W_])?")
LABEL_RULE = ("1 to 50 letters, digits, spaces, '_' or '-', starting and ending with a letter "
              "or digit (no '.', which splits DVC's metric keys, and no markup); rename it and "
              "map the data's name to it in base.label_aliases")


SAME_LABEL = ("once compared as the data's labels are (Unicode NFKC, trimmed, case "
              "folded)")


def _unseen_characters(name: str, composed: bool = True) -> str | None:
    """Why a class name (or, ``composed`` False, an alias) does not show what it is, or
    None: it holds an invisible character (:func:`lorasent.characters.is_invisible`:
    default-ignorable or format, ``Cf``), or, ``composed``, a combining mark that
    Unicode NFC composes with the character before it (``e`` + U+0301 for ``é``): the
    same name would be written two ways.

    The sets: Unicode's Default_Ignorable_Code_Point property (DerivedCoreProperties.txt)
    and general category Cf; composition: Unicode Standard Annex #15 (NFC)."""
    found = invisible_characters(name)
    if found:
        where, ch = found[0]
        return (f"holds {character_name(ch)} at character {where}, an invisible character "
                "(Unicode default-ignorable or format) that would make two names look the "
                "same; remove it")
    mark = decomposed(name) if composed else None
    if mark is None:
        return None
    where, ch = mark
    whole = unicodedata.normalize("NFC", name[where - 2] + ch)
    return (f"is written decomposed: {character_name(ch)} at character {where} is a "
            f"combining mark on the {name[where - 2]!r} before it; write the label composed "
            f"(Unicode NFC: {unicodedata.normalize('NFC', name)!r}, with "
            f"{character_name(whole)}), here and in prompt.label_words")


def _one_label(labels: tuple[str, ...], aliases: dict[str, str]) -> str | None:
    """Two labels, two aliases of different labels, or an alias of another label than
    the label it equals, that are one name :data:`SAME_LABEL` (the split could not tell
    them apart): the message naming both, or None."""
    first: dict[str, str] = {}
    for label in labels:
        other = first.setdefault(label_key(label), label)
        if other != label:
            return (f"base.labels: {other!r} and {label!r} are one label {SAME_LABEL}; keep "
                    "one of them")
    targets: dict[str, tuple[str, str]] = {}
    for alias, target in aliases.items():
        key = label_key(alias)
        if key in first and first[key] != target:
            return (f"base.label_aliases: {alias!r} maps to {target!r} but is the label "
                    f"{first[key]!r} {SAME_LABEL}; remove the alias or map it to "
                    f"{first[key]!r}")
        other, other_target = targets.setdefault(key, (alias, target))
        if other_target != target:
            return (f"base.label_aliases: {other!r} and {alias!r} are one name {SAME_LABEL} "
                    f"but map to {other_target!r} and {target!r}; keep one of them")
    return None


def _look_alike(labels: tuple[str, ...], aliases: dict[str, str]) -> str | None:
    """Two labels, or an alias and a label it does not map to, that are different names
    but look alike (:func:`lorasent.tables.skeleton`: ``ОК`` in Cyrillic and ``OK``), or a
    label written wholly in letters of one script that look like Latin ones beside a
    label with letters of another script (:func:`lorasent.tables.disguised_as_latin`:
    Cyrillic ``рое`` beside ``negative`` reads as Latin, and the data's Latin ``poe`` is
    another label): the message naming both, or None. A label of its script's own
    letters (Russian ``позитив``, Chinese ``积极``) and a label set wholly in one script
    are taken."""
    seen: dict[str, str] = {}
    for label in labels:
        other = seen.setdefault(skeleton(label), label)
        if other != label:
            return (f"base.labels: {other!r} and {label!r} look alike ({_spelled(other)} and "
                    f"{_spelled(label)}); a reader could not tell them apart: rename one")
    for label in labels:
        script = disguised_as_latin(label)
        beside = next((o for o in labels if script and any(
            script_of(ch) not in (None, script) for ch in o)), None)
        if script and beside is not None:
            return (f"base.labels: label {label!r} is written wholly in {script.title()} "
                    f"letters that look like Latin ones (it reads as {skeleton(label)!r}; "
                    f"{_spelled(label)}) beside the label {beside!r}: write it in Latin "
                    f"letters, or every label in {script.title()}")
    mapped: dict[str, tuple[str, str]] = {}
    for alias, target in aliases.items():
        look = seen.get(skeleton(alias))
        if look is not None and look != target and label_key(alias) != label_key(look):
            return (f"base.label_aliases: {alias!r} ({_spelled(alias)}) maps to {target!r} "
                    f"but looks like the label {look!r}; remove the alias or map it to "
                    f"{look!r}")
        other, other_target = mapped.setdefault(skeleton(alias), (alias, target))
        if other_target != target and label_key(other) != label_key(alias):
            return (f"base.label_aliases: {alias!r} ({_spelled(alias)}) maps to {target!r} "
                    f"but looks like the alias {other!r} ({_spelled(other)}), which maps to "
                    f"{other_target!r}; a reader could not tell them apart: keep one")
    return None


def _spelled(name: str) -> str:
    """The characters of ``name`` that are not ASCII, as code points and names."""
    odd = [character_name(ch) for ch in dict.fromkeys(name) if not ch.isascii()]
    return ", ".join(odd) if odd else "all ASCII"


class BaseParams(Section):
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

    @field_validator("seed")
    @classmethod
    def _seed_in_range(cls, value: int) -> int:
        return _check_seed(value, "base.seed", "the training")

    @model_validator(mode="after")
    def _labels_consistent(self) -> BaseParams:
        folded = [label.strip().casefold() for label in self.labels]
        if any(not f for f in folded):
            raise ValueError("base.labels: a label is empty")
        for label in self.labels:
            unseen = _unseen_characters(label)
            if unseen:
                raise ValueError(f"base.labels: label {label[:60]!r} {unseen}")
            if not LABEL_NAME.fullmatch(label):
                raise ValueError(f"base.labels: label {label[:60]!r} breaks the rule for class "
                                 f"names: {LABEL_RULE}")
            mixed = mixed_script(label)
            if mixed:  # Latin `positive` with a Cyrillic `о` shows as `positive`
                raise ValueError(f"base.labels: label {label[:60]!r} {mixed}; write it in one "
                                 "script (lorasent.tables.mixed_script)")
        for alias in self.label_aliases:
            unseen = _unseen_characters(alias, composed=False)
            if unseen:
                raise ValueError(f"base.label_aliases: key {alias[:60]!r} {unseen}")
            mixed = mixed_script(alias)
            if mixed:
                raise ValueError(f"base.label_aliases: key {alias[:60]!r} {mixed}; write it in "
                                 "one script (lorasent.tables.mixed_script)")
        same = _one_label(self.labels, self.label_aliases) or _look_alike(
            self.labels, self.label_aliases)
        if same:
            raise ValueError(same)
        bad = {alias: target for alias, target in self.label_aliases.items()
               if target not in self.labels}
        if bad:
            raise ValueError(
                f"base.label_aliases: {bad} map to labels that are not in base.labels "
                f"{list(self.labels)}")
        return self


class DataParams(Section):
    """Where the corpus comes from (see ``lorasent.stages.fetch`` for the sources)."""

    source: str = Field(min_length=1)
    text_column: str
    label_column: str
    # ``auto``: detected from a .csv header; or the one character between columns. The
    # two characters ``\t`` (what ``-S data.separator='\t'`` sets) mean a tab.
    separator: str
    encoding: str
    hf_split: str

    @field_validator("separator")
    @classmethod
    def _one_character(cls, value: str) -> str:
        return check_separator(value, "data.separator")


class SplitParams(Section):
    """The split's seed and sizes: an int is a row count, a float in (0, 1) a fraction of
    the rows. ``seed`` draws the split and the extra test sets (``evaluate.test_sets``),
    apart from ``base.seed`` (the training's), so that runs over training seeds share
    their test rows and no seed's training rows hold another's test rows."""

    seed: int
    train_size: SplitSize
    validation_size: SplitSize
    test_size: SplitSize

    @field_validator("seed")
    @classmethod
    def _seed_in_range(cls, value: int) -> int:
        return _check_seed(value, "split.seed", "the split")


class PromptParams(Section):
    """The model's input: in generative mode the prompt template, one label word per
    class and the token budget; in seq_cls mode only ``max_length`` (the text alone).
    What each mode reads: its ``input_fields`` in :data:`lorasent.modes.MODES`."""

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


class LoraParams(Section):
    """peft ``LoraConfig`` fields (Hu et al. 2021, arXiv:2106.09685)."""

    r: PositiveInt
    lora_alpha: PositiveFloat
    lora_dropout: Annotated[float, Field(ge=0, lt=1)]
    target_modules: tuple[str, ...] = Field(min_length=1)
    # Modules trained in full and saved with the adapter. In seq_cls mode peft adds the
    # head (``classifier``, ``score``); name any other newly initialised module here.
    modules_to_save: tuple[str, ...]


class TrainParams(Section):
    """Trainer hyperparameters; names follow ``transformers.TrainingArguments``."""

    mode: ModeName  # a key of lorasent.modes.MODES
    # the share of each class of the training split trained on: a nested stratified
    # subset (lorasent.subsets.training_subset); 1.0: all of it
    fraction: Annotated[float, Field(gt=0, le=1)] = 1.0
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
    share_prefix: bool
    logging_steps: PositiveInt
    save_steps: Annotated[int, Field(ge=0)]
    resume: Literal["auto", "never"]
    eval_strategy: Literal["no", "epoch"]
    load_best_model_at_end: bool
    auto_find_batch_size: bool
    accelerate_config: str | None


class TestSetParams(Section):
    """One extra labelled test set of ``evaluate.test_sets``: read as ``data`` is (the
    same sources and reading keys, with ``data``'s committed values as defaults), cleaned
    as the split stage cleans (``lorasent.stages.test_sets``), then ``size`` rows drawn."""

    __test__: ClassVar[bool] = False  # a params type, not a pytest class

    source: str = Field(min_length=1)
    # rows drawn (stratified by class, split.seed) after cleaning; 0: every row
    size: Annotated[int, Field(ge=0)]
    text_column: str = "text"
    label_column: str = "label"
    separator: str = "auto"  # checked, with the set's name, by EvaluateParams
    encoding: str = "utf-8"
    hf_split: str = "train"


# A test set's name: it names the set in the metrics and the folder
# metrics/test_sets/<name>/, so it must be a file name on every OS: at most 64 characters
# (a path stays well under Windows' 260), and none of Windows' device names (CON, NUL,
# COM1, ...: "Naming Files, Paths, and Namespaces", Microsoft's Win32 documentation).
TEST_SET_NAME = re.compile(r"[a-z0-9_-]{1,64}")
WINDOWS_DEVICE_NAME = re.compile(r"(con|prn|aux|nul|com[0-9]|lpt[0-9])")


# evaluate.reference's choices: auto, the references without training, then the
# supervised ones of the registry (one place: lorasent.reference_registry)
REFERENCE_CHOICES = ("auto", "zero_shot", "zero_shot_calibrated", "majority", *NAMES)
if TYPE_CHECKING:
    ReferenceChoice = str
else:
    ReferenceChoice = Literal[REFERENCE_CHOICES]


class EvaluateParams(Section):
    """Scoring batch size, the reference for the relative error reduction and the extra
    labelled test sets scored beside the split's test split (name -> source)."""

    batch_size: PositiveInt
    # auto: the calibrated zero-shot baseline when it beats the uncalibrated one, else
    # the zero-shot one (the majority class in a mode without a zero-shot answer)
    reference: ReferenceChoice
    test_sets: dict[str, TestSetParams]

    @field_validator("test_sets", mode="before")
    @classmethod
    def _test_set_names(cls, value: Any) -> Any:
        """Names: lowercase letters, digits, ``-`` and ``_``, not ``test`` (the split's
        own test set); each set's separator checked as ``data.separator`` is."""
        if value is None:
            raise ValueError("evaluate.test_sets: empty (null); write `test_sets: {}` for "
                             "no extra test sets, or give one as name: {source: ..., size: ...}")
        if not isinstance(value, dict):
            return value  # pydantic names the type
        checked = {}
        for name, spec in value.items():
            if not isinstance(name, str):
                raise ValueError(_not_a_string("evaluate.test_sets", "key", name))
            if len(name) > 64 and TEST_SET_NAME.fullmatch(name[:64]):
                raise ValueError(
                    f"evaluate.test_sets: {name[:20]!r}... is {len(name)} characters; it "
                    "names a folder of metrics/test_sets/, so give it at most 64")
            if not TEST_SET_NAME.fullmatch(name):
                raise ValueError(
                    f"evaluate.test_sets: {name!r} is not a test set name; use lowercase "
                    "letters, digits, '-' and '_' (e.g. reviews-zh)")
            if WINDOWS_DEVICE_NAME.fullmatch(name):
                raise ValueError(
                    f"evaluate.test_sets: {name!r} is a device name on Windows, where no "
                    f"folder can have it; give the set another name (e.g. {name}-set)")
            if name == "test":
                raise ValueError(
                    "evaluate.test_sets: 'test' names the split's own test split; give the "
                    "extra set another name (e.g. test-2)")
            if isinstance(spec, dict) and isinstance(spec.get("separator"), str):
                spec = {**spec, "separator": check_separator(
                    spec["separator"], f"evaluate.test_sets.{name}.separator")}
            checked[name] = spec
        return checked


class Params(Section):
    """All of ``params.yaml``; one field per section."""

    base: BaseParams
    data: DataParams
    split: SplitParams
    prompt: PromptParams
    train: TrainParams
    evaluate: EvaluateParams
    # absent from params files written before issue 58: the defaults
    baseline: BaselineParams = BaselineParams()

    @model_validator(mode="after")
    def _cross_section(self) -> Params:
        train = self.train
        if train.eval_strategy != "no" and self.split.validation_size == 0:
            raise ValueError(
                f"train.eval_strategy: {train.eval_strategy!r} scores the validation split, "
                "but split.validation_size is 0; set it (e.g. 0.1) or eval_strategy: 'no'")
        named = BY_NAME.get(self.evaluate.reference)
        if named and named.optional and not getattr(self.baseline, named.name).enabled:
            raise ValueError(f"evaluate.reference: {named.name!r} names the {named.short} "
                             f"reference, which baseline.{named.name}.enabled: false turns "
                             "off; turn it on or name another reference")
        if train.load_best_model_at_end and train.eval_strategy == "no":
            raise ValueError("train.load_best_model_at_end: needs train.eval_strategy: epoch")
        words = self.prompt.label_words
        if ("label_words" in MODES[train.mode].input_fields
                and set(words) != set(self.base.labels)):
            missing = [label for label in self.base.labels if label not in words]
            extra = [label for label in words if label not in self.base.labels]
            raise ValueError(
                "prompt.label_words: needs exactly one word per label in base.labels; "
                f"missing {missing}, not a label {extra}")
        return self


def _format_error(path: Path, err: ValidationError) -> str:
    """One line per key: ``train.lora.rank: unknown key (known: ...)``."""
    by_key: dict[str, list[str]] = {}
    errors = err.errors()
    for e in errors:
        if e["type"] == "too_short" and any(
                o["loc"][:len(e["loc"])] == e["loc"] and len(o["loc"]) > len(e["loc"])
                for o in errors):
            continue  # counted "after validation", without the items refused above
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
    """The section at ``loc`` (``("evaluate", "test_sets", "reviews-zh")``: a value of a
    mapping of sections is its value type), or None where ``loc`` is no section."""
    model: type[BaseModel] = Params
    parts = iter(loc)
    for part in parts:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if get_origin(annotation) is dict:  # name -> section: the next part is a name
            annotation = get_args(annotation)[1]
            if next(parts, None) is None:
                return None
        if not isinstance(annotation, type) or not issubclass(annotation, BaseModel):
            return None
        model = annotation
    return model


# Mappings keyed by the user's labels or names: a preset that sets them replaces them
# whole, so that a 2-class preset does not inherit the default's third label word, and a
# preset's test sets (``{}``: none) are all the sets it scores.
VALUE_MAPS = frozenset({("base", "label_aliases"), ("prompt", "label_words"),
                        ("evaluate", "test_sets")})


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with ``override`` merged in: sections merge key by key;
    values, lists and the maps of :data:`VALUE_MAPS` (label-keyed, and the test sets) are
    replaced whole, except that a value equal to the current one (of the same kind) keeps
    the current one's spelling (``2.0e-4`` stays so). Comment-keeping mappings
    (ruamel.yaml's) keep their comments."""
    out = copy.deepcopy(base)
    _merge_into(out, override, ())
    return out


def _merge_into(base: dict[str, Any], override: dict[str, Any], path: tuple[str, ...]) -> None:
    for key, value in override.items():
        here = (*path, str(key))
        if isinstance(value, dict) and isinstance(base.get(key), dict) and here not in VALUE_MAPS:
            _merge_into(base[key], value, here)
        elif key in base and _same_scalar(base[key], value):
            continue
        else:
            base[key] = value


def _same_scalar(old: Any, new: Any) -> bool:
    """Equal and of the same kind: 1 is not True nor 1.0."""
    kinds = (bool, int, float, str, type(None))
    return (not isinstance(new, dict | list) and old == new
            and [isinstance(old, k) for k in kinds] == [isinstance(new, k) for k in kinds])


def read_yaml(text: str, source: str | Path) -> Any:
    """``text`` read as YAML 1.2, with plain Python values (ruamel.yaml's safe loader).

    YAML 1.2 because DVC reads params files so (ruamel.yaml, ``YAML(typ="safe")``): the
    value lorasent validates is the value DVC tracks, shows and sets with ``-S``. Unquoted
    ``no``, ``yes``, ``on``, ``off``, ``y`` and ``n`` are strings, ``1e-5`` and ``2.0e-4``
    are floats, ``null`` or an empty value is None; a key given twice is an error.

    Raises:
        ParamsError: ``text`` is not valid YAML; the message names ``source`` and the line.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        return YAML(typ="safe", pure=True).load(text)
    except YAMLError as err:
        # ruamel's advice on duplicate keys is for its API, not for the file's author
        message = str(err).split("\n\nTo suppress this check")[0]
        raise ParamsError(f"{source}: not valid YAML: {message}") from None


# The user's class names: the items of base.labels, the keys and values of the two
# label-keyed maps. YAML reads some unquoted names as numbers, booleans or dates.
def _labels_not_strings(raw: dict[str, Any]) -> list[str]:
    base, prompt = _section(raw, "base"), _section(raw, "prompt")
    problems = []
    if isinstance(base.get("labels"), list | tuple):
        problems += [_not_a_string("base.labels", "label", v) for v in base["labels"]]
    for path, mapping in (("base.label_aliases", base.get("label_aliases")),
                          ("prompt.label_words", prompt.get("label_words"))):
        if isinstance(mapping, dict):
            for key, value in mapping.items():
                problems += [_not_a_string(path, "key", key),
                             _not_a_string(f"{path}.{key}", "value", value)]
    return [p for p in problems if p]


def _unreadable_strings(value: Any, path: str = "") -> list[str]:
    """``<key>: holds U+0000 at character 3, which no output can show; remove it`` for
    each string in ``value`` (a params mapping, walked) holding a NUL or a lone surrogate
    (YAML's ``"\\0"``, ``"\\ud800"``): a CSV, a log or a UTF-8 file cannot hold them."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _unreadable_strings(v, f"{path}{k}.")]
    if isinstance(value, list | tuple):
        return [p for i, v in enumerate(value) for p in _unreadable_strings(v, f"{path}{i}.")]
    bad = next((i for i, ch in enumerate(value) if ch == "\0" or "\ud800" <= ch <= "\udfff"),
               None) if isinstance(value, str) else None
    return [] if bad is None else [
        f"{path.rstrip('.')}: holds U+{ord(value[bad]):04X} at character {bad + 1}, which no "
        "output can show; remove it"]


def _section(raw: dict[str, Any], name: str) -> dict[str, Any]:
    """``raw[name]`` if it is a mapping, else empty (validation names what is wrong)."""
    value = raw.get(name)
    return value if isinstance(value, dict) else {}


def _not_a_string(path: str, what: str, value: Any) -> str | None:
    """``base.label_aliases: key 1 is read as a number (int), not a string; quote it: "1"``,
    or None for a string."""
    if isinstance(value, str):
        return None
    if value is None:
        return f"{path}: {'the' if what == 'value' else 'a'} {what} is empty (null), not a string"
    if isinstance(value, bool):
        shown, kind = str(value).lower(), "a boolean"
    elif isinstance(value, int | float):
        shown, kind = repr(value), "a number"
    elif isinstance(value, date):
        shown, kind = value.isoformat(), "a date"
    else:
        kind = "a list" if isinstance(value, list) else "a mapping"
        return f"{path}: {what} {value!r} is read as {kind}, not a string"
    return (f"{path}: {what} {shown} is read as {kind} ({type(value).__name__}), not a "
            f'string; quote it: "{shown}"')


def parse_params(raw: dict[str, Any], source: str | Path = "params.yaml") -> Params:
    """Validate a params mapping (as :func:`read_yaml` gives it).

    Raises:
        ParamsError: ``raw`` is not a mapping; a class name, alias or label word is not
            a string (the message says to quote it); a string holds a NUL or a lone
            surrogate; a class name breaks :data:`LABEL_RULE`; a key is unknown, missing, or of
            the wrong type or value. The message names ``source`` and every bad key.
    """
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: expected a mapping of sections, got {type(raw).__name__}")
    problems = _labels_not_strings(raw) + _unreadable_strings(raw)
    if problems:
        raise ParamsError("\n".join([f"{source}: invalid params", *(f"  {p}" for p in problems)]))
    try:
        return Params.model_validate(raw)
    except ValidationError as err:
        raise ParamsError(_format_error(Path(source), err)) from None


def read_params_text(path: Path, missing: str = "not found") -> str:
    """The text of the params file (or preset) at ``path``, read as UTF-8.

    Raises:
        ParamsError: there is no file at ``path``: ``<path>: <missing>``.
    """
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParamsError(f"{path}: {missing}") from None


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate a params file, as YAML 1.2 (:func:`read_yaml`), like DVC.

    Raises:
        ParamsError: the file is missing, is not YAML, or a key is unknown, missing or
            of the wrong type or value, or a class name is not a string; the message
            names the file and the key path.
    """
    path = Path(path)
    text = read_params_text(path, "not found. Run from a folder that holds params.yaml, or "
                                  "pass --params PATH")
    return parse_params(read_yaml(text, path), path)


def apply_preset(preset_path: str | Path, params_path: str | Path = "params.yaml") -> Params:
    """Merge a preset (a partial params file, see ``configs/``) into ``params_path``.

    The preset is read as YAML 1.2 (:func:`read_yaml`) and merged and written as
    :func:`update_params` does: comments kept, in the layout DVC writes, validated before
    ``params_path`` is replaced, so a bad preset leaves it untouched. DVC then sees the
    changed params like any other edit.

    Raises:
        ParamsError: either file is missing or not YAML, or the merged params are
            invalid; the message names the preset and the key path.
    """
    preset_path = Path(preset_path)
    preset = read_yaml(read_params_text(preset_path), preset_path)
    if not isinstance(preset, dict):
        raise ParamsError(f"{preset_path}: expected a mapping of params sections")
    return update_params(preset, params_path, source=preset_path)


def update_params(changes: dict[str, Any], params_path: str | Path = "params.yaml", *,
                  source: str | Path | None = None) -> Params:
    """Merge ``changes`` (plain values) into ``params_path`` as :func:`merge` does.

    The file is rewritten the way ``dvc exp run -S`` rewrites it (DVC's own ruamel.yaml
    round trip: comments kept, lists in block style), so that a later ``-S`` changes
    only the lines of its key; a string with line breaks is written as a literal block
    (``|-``), which that round trip keeps. The merged params are read back as YAML 1.2
    and validated before ``params_path`` is replaced (atomically), so invalid changes
    leave it untouched.

    Raises:
        ParamsError: ``params_path`` is missing or not a YAML mapping, or the merged
            params are invalid; the message names ``source`` (by default
            ``params_path``) and the key path.
    """
    from dvc.utils.serialize import dumps_yaml, parse_yaml_for_update

    from lorasent.atomic import atomic_write_text

    params_path = Path(params_path)
    text = read_params_text(params_path)
    if not isinstance(read_yaml(text, params_path) or {}, dict):  # names a YAML error's line
        raise ParamsError(f"{params_path}: expected a mapping of params sections")
    merged = merge(parse_yaml_for_update(text, params_path), _with_blocks(changes))
    out = dumps_yaml(merged)
    params = parse_params(read_yaml(out, params_path), source or params_path)
    atomic_write_text(params_path, out)
    return params


def _with_blocks(value: Any) -> Any:
    """``value`` with each multi-line string that YAML can hold as a literal block marked
    as one (ruamel.yaml's LiteralScalarString); others stay as they are."""
    from dvc.utils.serialize import dumps_yaml
    from ruamel.yaml.scalarstring import LiteralScalarString

    if isinstance(value, dict):
        return {k: _with_blocks(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_blocks(v) for v in value]
    if isinstance(value, str) and "\n" in value and all(
            c == "\n" or c.isprintable() for c in value):
        block = LiteralScalarString(value)
        # the emitter falls back to a quoted string where a block cannot hold the text
        if dumps_yaml({"k": block}).startswith("k: |"):
            return block
    return value
