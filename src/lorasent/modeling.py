"""Loading the base model, its tokenizer and an adapter onto the chosen device.

Device and dtype come from :mod:`lorasent.environment` (``device: auto`` picks an AMD or
NVIDIA GPU alike, then Apple's MPS, then the CPU).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from lorasent.environment import require_environment
from lorasent.params import BaseParams, PromptParams
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
    """The base causal LM from a local HF folder (safetensors only), in eval mode.

    Raises:
        ImportError: ``attn_implementation: flash_attention_2`` without flash-attn
            (transformers' message; use ``sdpa``).
    """
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
