"""The frozen base weights held in the compute dtype while a CPU trains in bf16 or fp16.

``base.precision: bf16`` on a CPU trains under ``torch.autocast`` over the fp32 weights
(:func:`lorasent.environment.weights_dtype`). Autocast casts a weight to bf16 at every
matrix product that reads it, and caches the cast only for leaf tensors that require a
gradient (PyTorch's autocast docs, "CPU Ops that can autocast to bfloat16"), so each
frozen projection of the base model, and the vocabulary projection tied to the
embedding, is cast again at every forward and every backward: on Gemma 3 270M about
270M elements copied per product, a sixth of the bf16 step in the profile of
``make bench`` (docs/performance.md).

:class:`FrozenWeightsIn` makes those casts once: it holds a ``dtype`` copy of every
frozen ``torch.nn.Linear`` weight (and bias) of the model and swaps the copies in while
it is entered, the originals back when it leaves. Under autocast a product then reads
exactly the bf16 values it read before (autocast rounds fp32 to bf16 the same way,
``Tensor.to``), so the losses, gradients and trained adapter are those of plain
autocast, bit for bit; the trainable weights (LoRA's, a seq_cls head), the norms, the
embedding lookup and AdamW's state stay fp32. Scoring after training (the validation
split's temperature) runs on the fp32 originals again, without autocast (the train
stage takes accelerate's off the model first), as the evaluate stage does.
"""

from __future__ import annotations

from types import TracebackType

import torch


class FrozenWeightsIn:
    """A context manager: while entered, every frozen floating-point parameter of every
    ``torch.nn.Linear`` in ``model`` is a ``dtype`` copy, made once here (memory: those
    weights' elements x ``dtype``'s bytes, about 0.6 GB for Gemma 3 270M in bf16, its
    tied vocabulary projection included); leaving puts the originals back, ties
    included (the embedding never lets go of its fp32 weight).

    Enter it around training only, under ``torch.autocast`` in ``dtype``: outside
    autocast an fp32 input meets a ``dtype`` weight and torch raises ``RuntimeError``
    (the dtypes differ). Entering and leaving are pointer swaps, cheap per step.
    """

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self._swaps: list[tuple[torch.nn.Module, str, torch.nn.Parameter,
                                torch.nn.Parameter]] = []
        copies: dict[int, torch.nn.Parameter] = {}  # a weight shared by two Linears: one copy
        for module in model.modules():
            if not isinstance(module, torch.nn.Linear):
                continue
            for name, param in module.named_parameters(recurse=False):
                if param.requires_grad or not param.is_floating_point() or param.dtype == dtype:
                    continue
                low = copies.setdefault(id(param), torch.nn.Parameter(
                    param.detach().to(dtype), requires_grad=False))
                self._swaps.append((module, name, param, low))

    @property
    def swapped(self) -> int:
        """How many parameters the copies replace while entered."""
        return len(self._swaps)

    def __enter__(self) -> FrozenWeightsIn:
        for module, name, _, low in self._swaps:
            setattr(module, name, low)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        for module, name, original, _ in self._swaps:
            setattr(module, name, original)
