"""Loading the base model, its tokenizer and an adapter onto the chosen device.

Device and dtype come from :mod:`lorasent.environment` (``device: auto`` picks an AMD or
NVIDIA GPU alike, then Apple's MPS, then the CPU).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from lorasent.artifacts import read_json
from lorasent.environment import require_environment
from lorasent.errors import LorasentError
from lorasent.params import BaseParams, PromptParams
from lorasent.paths import ADAPTER_RECORD, MANIFEST
from lorasent.scoring import PromptEncoder

log = logging.getLogger(__name__)


def load_tokenizer(model_dir: str | Path) -> PreTrainedTokenizerBase:
    """The base model's tokenizer, with a pad token (Gemma has one; others use EOS)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(model_dir: str | Path, *, dtype: torch.dtype, attn_implementation: str,
                   device: torch.device, pad_token_id: int) -> torch.nn.Module:
    """The base causal LM from a local HF folder (safetensors only, no remote code), in
    eval mode. Run :func:`lorasent.environment.require_environment` first."""
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype, attn_implementation=attn_implementation,
        use_safetensors=True, trust_remote_code=False)
    model.config.pad_token_id = pad_token_id
    return model.to(device).eval()


def load_adapter(base: torch.nn.Module, adapter_dir: str | Path) -> torch.nn.Module:
    """Base model with the LoRA adapter from ``adapter_dir`` (safetensors), in eval mode."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base, str(adapter_dir)).eval()


def load_base_model(model_dir: str | Path, *, device: str, precision: str,
                    attn_implementation: str, model: str = ""):
    """Tokenizer and base causal LM on the resolved device and dtype.

    The environment checks of :func:`lorasent.environment.require_environment` run first.

    Returns:
        ``(model, tokenizer, torch.device)``.

    Raises:
        EnvironmentProblem: wrong torch build, missing flash-attn, bf16 without support.
    """
    torch_device, dtype = require_environment(
        device=device, precision=precision, attn_implementation=attn_implementation,
        model=model, model_dir=Path(model_dir))
    tokenizer = load_tokenizer(model_dir)
    model = load_causal_lm(model_dir, dtype=dtype, attn_implementation=attn_implementation,
                           device=torch_device, pad_token_id=tokenizer.pad_token_id)
    return model, tokenizer, torch_device


def load_model_and_prompt(model_dir: str | Path, *, base: BaseParams, prompt: PromptParams):
    """The base model as :func:`load_base_model` gives it, and the prompt encoder that
    baseline, train and evaluate all share (label words in ``base.labels`` order).

    Returns:
        ``(model, PromptEncoder, torch.device)``; the tokenizer is ``encoder.tokenizer``.
    """
    model, tokenizer, device = load_base_model(
        model_dir, device=base.device, precision=base.precision,
        attn_implementation=base.attn_implementation, model=base.model)
    encoder = PromptEncoder.create(tokenizer, prompt.template,
                                   [prompt.label_words[label] for label in base.labels],
                                   prompt.max_length)
    return model, encoder, device


class AdapterMismatchError(LorasentError):
    """The adapter was trained on another base model, or for other labels."""


def read_adapter_record(adapter_dir: str | Path) -> dict:
    """The adapter's ``lorasent.json``: mode, labels, prompt, label words, max_length,
    base model source and hash, resolved params.

    Raises:
        LorasentError: the folder holds no record (not an adapter lorasent trained).
    """
    path = Path(adapter_dir) / ADAPTER_RECORD
    if not path.is_file():
        raise LorasentError(f"{path}: not found; {adapter_dir} is not an adapter trained by "
                            "lorasent (run `dvc repro`, or point --adapter at models/adapter)")
    return read_json(path)


def check_adapter(record: dict, *, model_dir: str | Path, adapter_dir: str | Path,
                  labels: list[str] | None = None, prompt: PromptParams | None = None) -> None:
    """Refuse an adapter whose base model hash (or label order, or prompt) differs.

    Raises:
        AdapterMismatchError: naming what differs and how to fix it.
    """
    expected = record["base_model"]["sha256"]
    manifest = Path(model_dir) / MANIFEST
    found = read_json(manifest)["sha256"] if manifest.is_file() else None
    if found != expected:
        raise AdapterMismatchError(
            f"{adapter_dir}: trained on base model {record['base_model']['source']} with "
            f"sha256 {expected}, but {model_dir} has "
            f"{found or 'no manifest.json (not fetched by lorasent)'}. Point --base at the "
            "model it was trained on (`lorasent fetch` materialises it), or retrain")
    if labels is not None and record["labels"] != labels:
        raise AdapterMismatchError(
            f"{adapter_dir}: trained for labels {record['labels']} but base.labels is "
            f"{labels}; run `dvc repro` to retrain")
    if prompt is not None and (record["template"], record["label_words"], record["max_length"]) != (
            prompt.template, [prompt.label_words[label] for label in record["labels"]],
            prompt.max_length):
        raise AdapterMismatchError(
            f"{adapter_dir}: trained with another prompt (template, label words or max_length) "
            "than params.yaml's; run `dvc repro` to retrain")


def load_trained_model(adapter_dir: str | Path, model_dir: str | Path, *,
                       device: str | None = None, precision: str | None = None,
                       labels: list[str] | None = None, prompt: PromptParams | None = None):
    """Base model + adapter, with the prompt encoder the adapter was trained with.

    Device and precision default to those recorded at training time.

    Returns:
        ``(model, PromptEncoder, record, torch.device)``.

    Raises:
        AdapterMismatchError: another base model (by hash), other labels or prompt.
        EnvironmentProblem: the environment checks failed.
    """
    record = read_adapter_record(adapter_dir)
    check_adapter(record, model_dir=model_dir, adapter_dir=adapter_dir, labels=labels,
                  prompt=prompt)
    trained = record["params"]["base"]
    model, tokenizer, torch_device = load_base_model(
        model_dir, device=device or trained["device"],
        precision=precision or trained["precision"],
        attn_implementation=trained["attn_implementation"], model=record["base_model"]["source"])
    encoder = PromptEncoder.create(tokenizer, record["template"], record["label_words"],
                                   record["max_length"])
    return load_adapter(model, adapter_dir), encoder, record, torch_device
