"""Loading the base model, its tokenizer and an adapter onto the chosen device.

Device and dtype come from :mod:`lorasent.environment` (``device: auto`` picks an AMD or
NVIDIA GPU alike, then Apple's MPS, then the CPU). ``train.mode``'s entry in
:data:`lorasent.modes.MODES` picks the model class: ``AutoModelForCausalLM``
(:func:`load_causal_lm`), or for a mode with a ``head`` (``seq_cls``)
``AutoModelForSequenceClassification`` (:func:`load_seq_cls`; Gemma 3 text models get
``Gemma3TextForSequenceClassification``, MiniLM ``BertForSequenceClassification``) with
``num_labels``, ``id2label`` and ``label2id`` in ``base.labels`` order, never sorted; and
the encoder (:func:`lorasent.scoring.make_encoder`) and what an adapter's input depends on.
A seq_cls model's new weights are checked before it trains (:func:`check_head_saved`: the
adapter must save every one) and explained in the log (:func:`new_weights_note`).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from lorasent.atomic import read_json, write_json
from lorasent.contracts import AdapterRecord, read
from lorasent.environment import PARAMS_DEVICE, require_environment, weights_dtype
from lorasent.errors import LorasentError
from lorasent.hashes import combined_sha256, sha256_file
from lorasent.modes import DEFAULT_MODE, MODES
from lorasent.params import BaseParams, PromptParams
from lorasent.paths import ADAPTER_RECORD, MANIFEST, cache_root
from lorasent.scoring import Encoder, make_encoder

log = logging.getLogger(__name__)
if TYPE_CHECKING:
    from peft import PeftModel


def load_tokenizer(model_dir: str | Path,
                   trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """The base model's tokenizer, with a pad token (Gemma has one; others use EOS)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(model_dir: str | Path, *, dtype: torch.dtype, attn_implementation: str,
                   device: torch.device, pad_token_id: int,
                   trust_remote_code: bool = False) -> torch.nn.Module:
    """The base causal LM from a local HF folder (safetensors only; the model's own
    Python code only with ``trust_remote_code``), in eval mode. Run
    :func:`lorasent.environment.require_environment` first."""
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype, attn_implementation=attn_implementation,
        use_safetensors=True, trust_remote_code=trust_remote_code)
    model.config.pad_token_id = pad_token_id
    # transformers wraps `to` in functools.wraps(Module.to): typeshed's _Wrapped then takes
    # the device for `self`.
    return model.to(device).eval()  # type: ignore[arg-type]


def load_seq_cls(model_dir: str | Path, *, labels: list[str], dtype: torch.dtype,
                 attn_implementation: str, device: torch.device, pad_token_id: int,
                 quiet: bool = False, trust_remote_code: bool = False) -> torch.nn.Module:
    """The base model with a fresh classification head of ``len(labels)`` outputs, in eval
    mode (safetensors only, no remote code).

    The pad token goes on the model config too: a decoder's head reads the last token
    that is not padding, found through ``config.pad_token_id``. The names of the weights
    the checkpoint lacks (the head, initialised at random) are kept in
    ``model.newly_initialized`` (list of str), for :func:`check_head_saved`;
    ``quiet`` silences transformers' report of them (an adapter will bring the head).
    """
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    if quiet:  # the head's "newly initialized" report, when an adapter brings the head
        hf_logging.set_verbosity_error()
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(
            model_dir, num_labels=len(labels), id2label=dict(enumerate(labels)),
            label2id={label: i for i, label in enumerate(labels)}, dtype=dtype,
            attn_implementation=attn_implementation, use_safetensors=True,
            trust_remote_code=trust_remote_code, output_loading_info=True)
    finally:
        hf_logging.set_verbosity(verbosity)
    model.config.pad_token_id = pad_token_id
    model.newly_initialized = sorted(info["missing_keys"])
    return model.to(device).eval()


class HeadNotSavedError(LorasentError):
    """A seq_cls model has new weights that the adapter would not save."""


def check_head_saved(model: PeftModel, newly_initialized: list[str]) -> None:
    """Refuse a peft model whose newly initialised weights would not be saved.

    ``AutoModelForSequenceClassification`` initialises the head at random. peft trains
    and saves the modules whose names end with an entry of ``modules_to_save`` (it adds
    ``classifier`` and ``score``); any other new weight (a BERT pooler the checkpoint
    lacks, a head with another name such as BART's ``classification_head``) would be
    random again in the next process, so the adapter could not reproduce the trained
    model.

    Raises:
        HeadNotSavedError: naming the weights and the param that fixes it.
    """
    from peft.utils import ModulesToSaveWrapper

    inner = model.get_base_model()
    lost = []
    for name in newly_initialized:
        parts = name.split(".")[:-1]
        prefixes = (".".join(parts[:i]) for i in range(1, len(parts) + 1))
        if not any(isinstance(inner.get_submodule(p), ModulesToSaveWrapper) for p in prefixes):
            lost.append(name)
    if lost:
        modules = sorted({name.rsplit(".", 1)[0] for name in lost})
        raise HeadNotSavedError(
            f"train.lora.modules_to_save: the weights {lost} are new (initialised at random "
            "when the head was added) but would be neither trained nor saved with the "
            "adapter, so a fresh process would load other values. Add "
            f"{modules} to train.lora.modules_to_save")


# The classification head that AutoModelForSequenceClassification adds, by the module
# names peft's SEQ_CLS task trains in full and saves with the adapter (the
# modules_to_save it adds itself: Gemma's `score`, BERT's `classifier`).
HEAD_MODULES = ("classifier", "score")


def is_head_weight(name: str) -> bool:
    """Whether the weight ``name`` (as transformers names it, e.g. ``score.weight``)
    belongs to a module named as in :data:`HEAD_MODULES`, or to one inside it."""
    return any(part in HEAD_MODULES for part in name.split(".")[:-1])


def new_weights_note(newly_initialized: list[str]) -> tuple[int, str] | None:
    """``(log level, line)`` on the weights transformers' load report lists as MISSING
    (``newly_initialized``: the missing keys of the seq_cls model), for after
    :func:`check_head_saved` has passed; None when there are none.

    The head's weights (:func:`is_head_weight`) are expected to be missing: the head is
    new, initialised here and trained by this run (peft's ``modules_to_save``). Any
    other missing weight is not explained away: the line is then a warning naming it.
    """
    if not newly_initialized:
        return None
    head = [name for name in newly_initialized if is_head_weight(name)]
    other = [name for name in newly_initialized if not is_head_weight(name)]
    about_head = (f"{', '.join(head)}, MISSING in transformers' load report above, "
                  f"{'is' if len(head) == 1 else 'are'} the new classification head: "
                  "initialised here and trained by this run (peft's modules_to_save, saved "
                  "with the adapter)")
    if not other:
        return logging.INFO, f"seq_cls: {about_head}, so MISSING is expected there"
    return logging.WARNING, (
        f"seq_cls: {about_head + '; but ' if head else ''}{', '.join(other)} "
        f"{'is' if len(other) == 1 else 'are'} MISSING{' too' if head else ''} and not the "
        "head: not in the base model's checkpoint, initialised at random, and trained here "
        "only because train.lora.modules_to_save lists its module; check that base.model is "
        "the model you meant")


def load_adapter(base: torch.nn.Module, adapter_dir: str | Path) -> torch.nn.Module:
    """Base model with the LoRA adapter from ``adapter_dir`` (safetensors), in eval mode.

    Raises:
        LorasentError: the folder has no ``adapter_model.safetensors`` (a pickled
            ``adapter_model.bin`` can run code when loaded, so it is never read).
    """
    from peft import PeftModel

    if not (Path(adapter_dir) / "adapter_model.safetensors").is_file():
        raise LorasentError(f"{adapter_dir}: no adapter_model.safetensors; only safetensors "
                            "adapters are loaded (pickled .bin files can run code)")

    return PeftModel.from_pretrained(base, str(adapter_dir)).eval()


def load_base_model(model_dir: str | Path, *, device: str, precision: str,
                    attn_implementation: str, model: str = "", mode: str = DEFAULT_MODE,
                    labels: list[str] | None = None, for_adapter: bool = False,
                    trust_remote_code: bool = False,
                    tokenizer: PreTrainedTokenizerBase | None = None,
                    resolved: tuple[torch.device, torch.dtype] | None = None,
                    ) -> tuple[torch.nn.Module, PreTrainedTokenizerBase, torch.device]:
    """Tokenizer and base model on the resolved device and dtype: the causal LM, or for a
    mode with a ``head`` (``seq_cls``, :data:`lorasent.modes.MODES`) the model with a
    fresh head for ``labels`` (``for_adapter``: an adapter will replace the head, so its
    random initialisation is not reported).

    The environment checks of :func:`lorasent.environment.require_environment` run first,
    unless ``resolved`` holds the ``(torch.device, torch.dtype)`` they already returned.
    ``tokenizer``: the one :func:`load_tokenizer` already gave (to check the label
    words before the weights load); loaded from ``model_dir`` when None.

    Returns:
        ``(model, tokenizer, torch.device)``.

    Raises:
        EnvironmentProblem: wrong torch build, missing flash-attn, bf16 without support.
    """
    torch_device, dtype = resolved or require_environment(
        device=device, precision=precision, attn_implementation=attn_implementation,
        model=model, model_dir=Path(model_dir))
    if tokenizer is None:
        tokenizer = load_tokenizer(model_dir, trust_remote_code)
    kwargs = dict(dtype=weights_dtype(dtype, torch_device),
                  attn_implementation=attn_implementation, device=torch_device,
                  pad_token_id=tokenizer.pad_token_id, trust_remote_code=trust_remote_code)
    if MODES[mode].head:
        loaded = load_seq_cls(model_dir, labels=list(labels or ()), quiet=for_adapter, **kwargs)
    else:
        loaded = load_causal_lm(model_dir, **kwargs)
    return loaded, tokenizer, torch_device


def load_model_and_prompt(model_dir: str | Path, *, base: BaseParams, prompt: PromptParams,
                          mode: str = DEFAULT_MODE,
                          ) -> tuple[torch.nn.Module, Encoder, torch.device]:
    """The base model as :func:`load_base_model` gives it, and the encoder that baseline,
    train and evaluate all share (label words in ``base.labels`` order).

    The environment checks (:func:`lorasent.environment.require_environment`) run
    first, before anything is read from ``model_dir``. A folder with a ``manifest.json``
    (fetched) is then checked file by file against it (:func:`check_base_files`). The
    encoder is made from the tokenizer before the weights
    load, so label words that cannot be told apart
    (:func:`lorasent.scoring.label_token_ids`) fail at once.

    Returns:
        ``(model, encoder, torch.device)``; the tokenizer is ``encoder.tokenizer``.

    Raises:
        BaseModelChangedError: a file changed, missing or added since fetch.
        PromptError: label words not told apart, or no room for the text.
        EnvironmentProblem: the environment checks failed.
    """
    resolved = require_environment(device=base.device, precision=base.precision,
                                   attn_implementation=base.attn_implementation,
                                   model=base.model, model_dir=Path(model_dir))
    if (Path(model_dir) / MANIFEST).is_file():
        check_base_files(model_dir)
    labels = list(base.labels)
    tokenizer = load_tokenizer(model_dir, base.trust_remote_code)
    encoder = make_encoder(MODES[mode], tokenizer, num_labels=len(labels),
                           max_length=prompt.max_length, template=prompt.template,
                           label_words=[prompt.label_words.get(label, "") for label in labels])
    model, _, device = load_base_model(
        model_dir, device=base.device, precision=base.precision,
        attn_implementation=base.attn_implementation, model=base.model, mode=mode,
        labels=labels, trust_remote_code=base.trust_remote_code, tokenizer=tokenizer,
        resolved=resolved)
    return model, encoder, device


class AdapterMismatchError(LorasentError):
    """The adapter was trained on another base model, or for other labels."""


class BaseModelChangedError(AdapterMismatchError):
    """The base model folder's files are not those its ``manifest.json`` lists (and so
    not those the adapter was trained on): edited, removed or added after fetch."""


HASH_CACHE = "file-hashes.json"  # never inside models/base, a DVC output
# A hash is kept only for a file whose ctime is older than this (ns) when it is read:
# some file systems keep coarse timestamps (a kernel tick, FAT's 2 s), so a second write
# within the same tick leaves the stat unchanged (git's "racily clean" entries).
RACY_NS = 2_000_000_000


def hash_cache_path() -> Path:
    """Where :func:`model_file_hashes` keeps hashes: ``file-hashes.json`` in
    :func:`lorasent.paths.cache_root`, outside the model folder (a DVC output)."""
    return cache_root() / HASH_CACHE


def model_file_hashes(model_dir: str | Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file below ``model_dir`` but its
    ``manifest.json``, as :func:`lorasent.hashes.sha256_tree` gives them.

    A file's hash is kept in :func:`hash_cache_path` (outside the model folder) under
    its resolved path, with its size, mtime, ctime (in ns), inode and device; it is
    reused while all of them are unchanged (ctime moves on any write, even one that
    puts mtime back), else the bytes are hashed again; a file changed less than
    :data:`RACY_NS` before it is read is not kept. The packaged Gemma 3 270M (1.1 GB,
    fp32) took 0.8 to 1.4 s to hash on 2 cores (file in the page cache), a reuse under
    1 ms. An unreadable or unwritable cache file only costs the hashing.
    """
    folder = Path(model_dir)
    cache_path = hash_cache_path()
    try:
        cache = read_json(cache_path)
    except (OSError, ValueError):
        cache = {}
    if not isinstance(cache, dict):
        cache = {}
    hashes: dict[str, str] = {}
    seen: set[str] = set()
    fresh: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if name == MANIFEST or not path.is_file():
            continue
        now = time.time_ns()
        st = path.stat()  # before hashing: a write while it is read changes the next stat
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
        key = str(path.resolve())
        seen.add(key)
        entry = cache.get(key)
        if (isinstance(entry, dict) and entry.get("stat") == stamp
                and isinstance(entry.get("sha256"), str)):
            digest = entry["sha256"]
        else:
            digest = sha256_file(path)
        hashes[name] = digest
        if now - st.st_ctime_ns >= RACY_NS:
            fresh[key] = {"stat": stamp, "sha256": digest}
    kept = {key: entry for key, entry in cache.items()
            if key not in seen and Path(key).is_file()}
    if {**kept, **fresh} != cache:
        try:
            write_json(cache_path, {**kept, **fresh})
        except OSError as err:
            log.debug("could not keep the model files' hashes in %s: %s", cache_path, err)
    return hashes


def check_base_files(model_dir: str | Path, *, adapter_dir: str | Path | None = None) -> None:
    """Refuse a base model folder whose files are not those its ``manifest.json`` lists.

    The manifest (written by ``lorasent fetch``) holds the SHA-256 of every file of the
    model (config, weights, tokenizer) and one over them, the hash the adapter's record
    holds (checked by :func:`check_adapter`). Here each file's bytes are hashed again
    (:func:`model_file_hashes`) and compared with the manifest's list, so a folder
    edited after fetch (``config.json`` changed, a file removed or added) is refused
    even though its manifest still matches the record. ``adapter_dir``: the adapter to
    be loaded on it (predict, export, evaluate), named in the message; None for the
    stages that load the base alone (baseline, train).

    Raises:
        BaseModelChangedError: naming the changed, missing and unlisted files, or a
            manifest whose list does not add up to its own hash, and how to restore
            the fetched files or retrain on a changed model.
    """
    model_dir = Path(model_dir)
    manifest_path = model_dir / MANIFEST
    fix = (f"run `dvc checkout {model_dir}` to restore the fetched files, or, to use a "
           "changed model, copy it to a folder of its own, set base.model to that folder "
           "and run `dvc repro`")
    if adapter_dir is not None:
        fix = (f"{adapter_dir} was trained on the fetched files: run `dvc checkout "
               f"{model_dir}` to restore them, or, to use a changed model, copy it to a "
               "folder of its own, set base.model to that folder and run `dvc repro` to "
               "retrain")
    manifest = _read_manifest(manifest_path)
    listed = manifest.get("files")
    if not isinstance(listed, dict) or not listed:
        raise BaseModelChangedError(f"{manifest_path}: lists no files (key 'files'), so "
                                    f"{model_dir} cannot be checked; {fix}")
    found = model_file_hashes(model_dir)
    parts = [f"{what}: {', '.join(names)}" for what, names in (
        ("changed", sorted(n for n in listed.keys() & found.keys() if listed[n] != found[n])),
        ("missing", sorted(listed.keys() - found.keys())),
        ("not in the manifest", sorted(found.keys() - listed.keys()))) if names]
    if parts:
        raise BaseModelChangedError(
            f"{model_dir}: its files are not those {manifest_path} lists ({'; '.join(parts)}; "
            f"compared by SHA-256), so it is not the model it was fetched as; {fix}")
    if combined_sha256(listed) != manifest.get("sha256"):
        raise BaseModelChangedError(
            f"{manifest_path}: its file list does not add up to its sha256 (the manifest was "
            f"edited); {fix}")


def read_adapter_record(adapter_dir: str | Path) -> AdapterRecord:
    """The adapter's ``lorasent.json`` (:class:`lorasent.contracts.AdapterRecord`): mode,
    labels, prompt, label words, max_length, base model source and hash, resolved params.

    Raises:
        LorasentError: the folder holds no record (not an adapter lorasent trained), or
            one that is not JSON or not such a record (one line naming the first wrong
            key).
    """
    path = Path(adapter_dir) / ADAPTER_RECORD
    if not path.is_file():
        raise LorasentError(f"{path}: not found; {adapter_dir} is not an adapter trained by "
                            "lorasent (run `dvc repro`, or point --adapter at models/adapter)")
    return read(AdapterRecord, path, "retrain it (dvc repro), or point --adapter at an "
                "adapter lorasent trained")


def check_adapter(record: AdapterRecord, *, model_dir: str | Path, adapter_dir: str | Path,
                  labels: list[str] | None = None, prompt: PromptParams | None = None,
                  mode: str | None = None) -> None:
    """Refuse an adapter whose base model hash (or label order, prompt or mode) differs.

    Raises:
        AdapterMismatchError: naming what differs and how to fix it.
    """
    expected = record.base_model.sha256
    manifest = Path(model_dir) / MANIFEST
    found = _read_manifest(manifest).get("sha256") if manifest.is_file() else None
    if found != expected:
        raise AdapterMismatchError(
            f"{adapter_dir}: trained on base model {record.base_model.source} with "
            f"sha256 {expected}, but {model_dir} has "
            f"{found or 'no manifest.json (not fetched by lorasent)'}. Point --base at the "
            "model it was trained on (`lorasent fetch` materialises it), or retrain")
    if labels is not None and record.labels != labels:
        raise AdapterMismatchError(
            f"{adapter_dir}: trained for labels {record.labels} but base.labels is "
            f"{labels}; run `dvc repro` to retrain")
    if mode is not None and record.mode != mode:
        raise AdapterMismatchError(
            f"{adapter_dir}: trained in train.mode {record.mode!r} but params.yaml says "
            f"{mode!r}; run `dvc repro` to retrain")
    if prompt is not None and _prompt_of(record) != _prompt_of(record.model_copy(update={
            "template": prompt.template, "max_length": prompt.max_length,
            "label_words": [prompt.label_words.get(label) for label in record.labels]})):
        raise AdapterMismatchError(
            f"{adapter_dir}: trained with another prompt (template, label words or max_length) "
            "than params.yaml's; run `dvc repro` to retrain")


def _read_manifest(path: Path) -> dict[str, Any]:
    """A model folder's ``manifest.json`` as an object.

    Raises:
        BaseModelChangedError: not valid JSON, or not an object.
    """
    try:
        manifest = read_json(path)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BaseModelChangedError(
            f"{path}: not valid JSON ({err}); run `dvc checkout {path.parent}` to restore "
            "the fetched model, or `lorasent fetch` to fetch it again") from None
    if not isinstance(manifest, dict):
        raise BaseModelChangedError(f"{path}: not a JSON object; run `dvc checkout "
                                    f"{path.parent}` to restore the fetched model")
    return manifest


def _prompt_of(record: AdapterRecord) -> tuple[object, ...]:
    """What the adapter's input depends on: its mode's ``input_fields``
    (:data:`lorasent.modes.MODES`; seq_cls reads max_length only)."""
    return tuple(getattr(record, name) for name in MODES[record.mode].input_fields)


def load_trained_model(adapter_dir: str | Path, model_dir: str | Path, *,
                       device: str | None = None, precision: str | None = None,
                       labels: list[str] | None = None, prompt: PromptParams | None = None,
                       mode: str | None = None, device_option: str | None = None,
                       ) -> tuple[torch.nn.Module, Encoder, AdapterRecord, torch.device]:
    """Base model + adapter (and its saved head in a mode with a ``head``, seq_cls), with
    the encoder the adapter was trained with.

    Device and precision default to those recorded at training time.
    ``device_option``: the command-line option that sets ``device`` (predict's
    ``--device``), which a device error then names and tells the user to change,
    whether the device came from it or from the adapter's record; None: ``base.device``.

    Returns:
        ``(model, encoder, record, torch.device)``.

    The base model is checked by its manifest's hash against the record
    (:func:`check_adapter`), then the environment (:func:`require_environment`), then
    the base model by its files' bytes against the manifest
    (:func:`check_base_files`), and the label words by the tokenizer, all before the
    weights load.

    Raises:
        AdapterMismatchError: another base model (by hash), other labels, prompt or mode.
        BaseModelChangedError: a base model file changed, missing or added since fetch.
        PromptError: the record's label words cannot be told apart.
        EnvironmentProblem: the environment checks failed.
    """
    record = read_adapter_record(adapter_dir)
    check_adapter(record, model_dir=model_dir, adapter_dir=adapter_dir, labels=labels,
                  prompt=prompt, mode=mode)
    trained = record.params["base"]
    source = PARAMS_DEVICE if device_option is None else (
        device_option if device else "base.device recorded with the adapter",
        f"pass {device_option} auto (or cpu)")
    device, precision = device or trained["device"], precision or trained["precision"]
    resolved = require_environment(device=device, precision=precision,
                                   attn_implementation=trained["attn_implementation"],
                                   model=record.base_model.source,
                                   model_dir=Path(model_dir), device_source=source)
    check_base_files(model_dir, adapter_dir=adapter_dir)
    trust_remote_code = trained.get("trust_remote_code", False)
    tokenizer = load_tokenizer(model_dir, trust_remote_code)
    encoder = make_encoder(MODES[record.mode], tokenizer, num_labels=len(record.labels),
                           max_length=record.max_length, template=record.template or "",
                           label_words=record.label_words)
    model, _, torch_device = load_base_model(
        model_dir, device=device, precision=precision,
        attn_implementation=trained["attn_implementation"], model=record.base_model.source,
        mode=record.mode, labels=record.labels, for_adapter=True,
        trust_remote_code=trust_remote_code, tokenizer=tokenizer, resolved=resolved)
    return load_adapter(model, adapter_dir), encoder, record, torch_device
