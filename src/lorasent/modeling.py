"""Loading the base model, its tokenizer and an adapter onto the chosen device.

ROCm builds of PyTorch expose AMD GPUs through ``torch.cuda``, so ``device: auto``
picks an AMD or NVIDIA GPU alike, then Apple's MPS, then the CPU.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from lorasent.errors import LorasentError
from lorasent.params import BaseParams, PromptParams
from lorasent.scoring import PromptEncoder

log = logging.getLogger(__name__)


class DeviceError(LorasentError, RuntimeError):
    """The device or precision asked for is not available on this machine."""

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def resolve_device(name: str) -> torch.device:
    """``auto`` -> ``cuda`` (CUDA or ROCm) if available, else ``mps``, else ``cpu``.

    Raises:
        DeviceError: a GPU device was asked for and torch sees none.
    """
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError(
            "base.device is 'cuda' but torch sees no GPU (torch "
            f"{torch.__version__}, hip={torch.version.hip}, cuda={torch.version.cuda}). "
            "On AMD, check that a ROCm build of torch is installed; or set base.device: auto")
    if name == "mps" and not torch.backends.mps.is_available():
        raise DeviceError("base.device is 'mps' but MPS is not available; set base.device: auto")
    return torch.device(name)


def resolve_dtype(precision: str, device: torch.device) -> torch.dtype:
    """``auto`` -> bf16 on a GPU that supports it (seed 000's choice), else fp32.

    fp16 is allowed but warned about: Gemma's activations overflow in fp16.
    """
    if precision == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if precision == "fp16":
        log.warning("precision fp16: Gemma models are known to overflow in fp16 "
                    "(NaN loss); prefer bf16 or fp32")
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise DeviceError(f"base.precision is bf16 but {torch.cuda.get_device_name()} does "
                           "not support it; set base.precision: auto or fp32")
    return _DTYPES[precision]


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
                    attn_implementation: str):
    """Tokenizer and base causal LM on the resolved device and dtype.

    Returns:
        ``(model, tokenizer, torch.device)``.
    """
    torch_device = resolve_device(device)
    dtype = resolve_dtype(precision, torch_device)
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
        attn_implementation=base.attn_implementation)
    encoder = PromptEncoder.create(tokenizer, prompt.template,
                                   [prompt.label_words[label] for label in base.labels],
                                   prompt.max_length)
    return model, encoder, device
