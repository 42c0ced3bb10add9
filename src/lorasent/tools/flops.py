"""Model FLOPs per step counted from a decoder's config, and the machine's own matrix-product
rate measured in the same process: the model FLOP utilisation (MFU) that ``make bench``
reports for each way (:mod:`lorasent.tools.bench`).

**What is counted: matrix products only**, two FLOPs per multiply-add (an (m, k) by (k, n)
product is 2·m·k·n), as MFU counts them (Kaplan et al. 2020, "Scaling Laws for Neural
Language Models", section 2.1: C ≈ 6N per token for training, 2N forward, 4N backward;
Chowdhery et al. 2022, "PaLM", appendix B: the same plus 12·L·H·Q·T per token for
attention, H heads of dimension Q over T keys, the score and value products counted
dense over the whole key length, causal masking or not):
element-wise work (norms, activations, softmax, rotary embeddings, dropout, the
optimizer) is left out, and so is any product a kernel recomputes (activation
checkpointing, flash attention's backward): what the model needs, not what the hardware
did.

Notation (from the model's config): hidden size d, intermediate size f, layers L, query
heads h, key/value heads g, head dimension c, vocabulary V; LoRA rank r on all seven
projections of every layer: q (d → h·c), k and v (d → g·c), o (h·c → d), gate and up
(d → f), down (f → d). Per layer

- Σ in·out = W = 2·d·c·(h + g) + 3·d·f, the frozen weights;
- Σ in = I = 5·d + h·c + f and Σ out = O = c·(h + 2·g) + 2·d + 2·f, LoRA's A (in × r)
  and B (r × out) products.

A pass (one call of the model) runs R rows of Q query positions each (T = R·Q tokens)
against K key positions (K = Q, or Q plus the rows' cached shared start), and projects H
positions onto the vocabulary (the LM head, tied to the frozen embedding); padding
positions count, as the products run over them:

- forward: ``2·T·L·(W + r·(I + O))`` (every frozen linear and LoRA's A and B)
  ``+ 4·L·h·c·R·Q·K`` (QKᵀ and AV per query head, each 2·Q·K·c; grouped key/value heads
  broadcast to the query heads cost the same) ``+ 2·H·d·V`` (the vocabulary projection);
- backward of a training pass: the frozen weights get no weight gradient, only the input
  gradient, another ``2·T·(L·W − W₀)``, where W₀ = d·c·(h + 2·g): layer 0's q, k and v
  read the frozen embeddings, whose gradient nothing needs; LoRA gets both gradients of
  A and B, ``T·(4·L·r·(I + O) − 6·d·r)`` (not the input gradient of layer 0's q, k and v
  A's); attention ``8·L·h·c·R·Q·K`` (the gradients of Q, K and V: four products, twice
  the forward); the head's input gradient ``2·H·d·V``;
- the shared start of a training batch (``train.share_prefix``, one row) is a
  cache pass: only its keys and values reach the loss, through the rest's attention, so
  its backward leaves out the last layer's q, o, gate, up and down (frozen and LoRA) and
  that layer's attention; its forward and the rest's are counted whole.

The bench's ways (:mod:`lorasent.tools.bench`): the project's label-word loss
(:func:`lorasent.scoring.label_token_loss`) has H = the batch's label tokens, one pass of
B rows of the padded width, or with its shared start S a cache pass (1 row, Q = K = S,
H = 0) and the rest (B rows, Q = width − S, K = width); seed 002's and the plain
Trainer's full causal-LM loss have H = every position; the floor has H = 0. Scoring
(:func:`lorasent.scoring.score_texts`) is forward only, per batch as ``score_batch`` runs
it: the shared start (1 row, H = 1), the rest (H = 1 per row), a continuation pass for
label words of several tokens; seed 000's ``generate(max_new_tokens=1)`` is one forward
of each prompt alone (H = 1).

Checked in tests/test_flops.py against ``torch.utils.flop_counter.FlopCounterMode``,
exactly, on a tiny Gemma 3 with eager attention (whose products are plain ``bmm``).
FlopCounterMode counts SDPA differently: it has no formula for the CPU's flash kernel
(``_scaled_dot_product_flash_attention_for_cpu``), so attention counts 0 there, and its
formula for the GPU kernels' backward counts five products, the recomputed QKᵀ
included, where this count has four (tested).

MFU = model FLOPs per step / seconds per step / the matrix-product rate of the dtype
the way computes in (:func:`matmul_rate`: dense n × n products, fp32 and, where the
device computes bf16 natively, bf16), measured in the same process as the way.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

# Backward of a pass: "full" (a training pass whose outputs reach the loss), "cache" (a
# training pass whose keys and values only reach it), "none" (forward only).
Backward = Literal["full", "cache", "none"]


@dataclass(frozen=True)
class Shape:
    """The sizes of a decoder that its FLOPs depend on (see the module docstring)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def of(cls, config: Any) -> Shape:
        """From a transformers config (``head_dim`` where it has one, else hidden /
        heads; ``num_key_value_heads`` where it has one, else the heads)."""
        heads = config.num_attention_heads
        return cls(hidden=config.hidden_size, intermediate=config.intermediate_size,
                   layers=config.num_hidden_layers, heads=heads,
                   kv_heads=getattr(config, "num_key_value_heads", None) or heads,
                   head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
                   vocab=config.vocab_size)

    def projections(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each of a layer's seven projections."""
        d, f, q, kv = self.hidden, self.intermediate, self.heads * self.head_dim, \
            self.kv_heads * self.head_dim
        return {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
                "gate_proj": (d, f), "up_proj": (d, f), "down_proj": (f, d)}


@dataclass(frozen=True)
class Pass:
    """One call of the model: ``rows`` rows of ``queries`` positions each, attending to
    ``keys`` positions, ``head`` positions projected onto the vocabulary."""

    rows: int
    queries: int
    keys: int
    head: int
    backward: Backward = "none"


# A layer's projections whose input is the residual stream before that layer's attention
# (layer 0's read the frozen embeddings); those a cache pass's keys and values need.
_READ_EMBEDDINGS = ("q_proj", "k_proj", "v_proj")
_CACHE = ("k_proj", "v_proj")


def pass_flops(shape: Shape, p: Pass, lora_rank: int = 0) -> int:
    """Matrix-product FLOPs of one pass, forward and (per ``p.backward``) backward, with
    LoRA of rank ``lora_rank`` on all seven projections of every layer (0: none)."""
    tokens = p.rows * p.queries
    attention = 2 * 2 * p.rows * p.queries * p.keys * shape.heads * shape.head_dim
    r = lora_rank
    total = 2 * p.head * shape.hidden * shape.vocab  # the vocabulary projection
    for layer in range(shape.layers):
        last = layer == shape.layers - 1
        total += attention
        for name, (n_in, n_out) in shape.projections().items():
            total += 2 * tokens * (n_in * n_out + r * (n_in + n_out))  # forward
            if p.backward == "none" or p.backward == "cache" and last and name not in _CACHE:
                continue
            input_grad = not (layer == 0 and name in _READ_EMBEDDINGS)
            # the frozen weight's input gradient; LoRA's A and B weights', B's input's,
            # A's input's
            total += 2 * tokens * (n_in * n_out * input_grad + r * (n_in + 2 * n_out)
                                   + r * n_in * input_grad)
        if p.backward == "full" or p.backward == "cache" and not last:
            total += 2 * attention
    if p.backward == "full":
        total += 2 * p.head * shape.hidden * shape.vocab
    return total


def step_flops(shape: Shape, passes: Sequence[Pass], lora_rank: int = 0) -> int:
    """The FLOPs of ``passes``, summed (:func:`pass_flops`)."""
    return sum(pass_flops(shape, p, lora_rank) for p in passes)


# ---------------------------------------------------------------- the bench's ways

def label_loss_passes(batch: dict[str, torch.Tensor], share_prefix: bool = False,
                      window: int | None = None) -> list[Pass]:
    """The passes of :func:`lorasent.scoring.label_token_loss` on ``batch`` (its
    ``input_ids``, ``attention_mask`` (B, W) and ``labels`` (B, L)), ``share_prefix`` as
    there (``window``: the model's ``config.sliding_window``, or None)."""
    from lorasent.scoring import IGNORE_INDEX, training_prefix

    shared = training_prefix(batch, window) if share_prefix else 0
    rows, width = batch["input_ids"].shape
    head = int((batch["labels"] != IGNORE_INDEX).sum())
    if not shared:
        return [Pass(rows, width, width, head, "full")]
    return [Pass(1, shared, shared, 0, "cache"),
            Pass(rows, width - shared, width, head, "full")]


def full_loss_passes(batch: dict[str, torch.Tensor], head: bool = True) -> list[Pass]:
    """One training pass over every position of ``batch`` (``input_ids`` (B, T)): the
    vocabulary at every position (a causal-LM loss), or none (``head=False``, the floor)."""
    rows, width = batch["input_ids"].shape
    return [Pass(rows, width, width, rows * width if head else 0, "full")]


def scoring_passes(prompts: Sequence[Sequence[int]], label_ids: Sequence[Sequence[int]],
                   batch_size: int, window: int | None = None) -> list[Pass]:
    """The passes of :func:`lorasent.scoring.score_texts` over ``prompts`` (token ids, as
    ``encoder.encode`` gives them) in batches of ``batch_size`` longest first, each batch
    as :func:`lorasent.scoring.score_batch` runs it (``window``: the model's
    ``config.sliding_window``, or None)."""
    from lorasent.scoring import shared_prefix

    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    multi = sorted({tuple(ids[:-1]) for ids in label_ids if len(ids) > 1})
    passes = []
    for start in range(0, len(order), batch_size):
        batch = [prompts[i] for i in order[start:start + batch_size]]
        longest = max(len(p) for p in batch) + max(len(ids) for ids in label_ids)
        shared = shared_prefix(batch) if window is None or longest <= window else 0
        rest = max(len(p) for p in batch) - shared
        if shared:
            passes.append(Pass(1, shared, shared, 1))
        passes.append(Pass(len(batch), rest, shared + rest, len(batch)))
        if multi:
            width = max(len(m) for m in multi)
            rows = len(batch) * len(multi)
            passes.append(Pass(rows, width, shared + rest + width, rows * width))
    return passes


def passes_of(way: str, counts: dict[str, list[Pass]]) -> list[Pass]:
    """The passes of bench way ``way``: those of the longest name in ``counts`` that
    ``way`` starts with, so a variant of a way (``project_bf16``: the same batch under
    autocast) computes what it does.

    Raises:
        KeyError: no name in ``counts`` starts ``way`` (a new way with passes of its own:
            add them to ``counts``).
    """
    names = [name for name in counts if way.startswith(name)]
    if not names:
        raise KeyError(f"bench way {way!r}: no FLOP count; its passes go into the bench's "
                       f"counts (there: {', '.join(counts)})")
    return counts[max(names, key=len)]


def generate_passes(prompts: Sequence[Sequence[int]]) -> list[Pass]:
    """``generate(max_new_tokens=1)`` of each prompt alone: one forward, the vocabulary at
    its last position."""
    return [Pass(1, len(p), len(p), 1) for p in prompts]


# ------------------------------------------------------------------ the machine's rate

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def matmul_rate(device: torch.device, dtype: str = "fp32", n: int | None = None,
                seconds: float = 1.0, round_s: float = 0.1) -> float:
    """The dense matrix-product rate of ``device`` in ``dtype`` (``"fp32"`` or
    ``"bf16"``), in FLOP/s (2·n³ per n × n product): ``torch.mm`` of two random n × n
    matrices (n of :func:`matmul_size` unless given) three times to warm up, then rounds
    of enough products for ``round_s`` seconds each, for ``seconds`` and at least 3
    rounds; the median round's rate. This process's threads, as the ways it is measured
    beside use them.

    Raises:
        KeyError: ``dtype`` is not a key of :data:`DTYPES`.
    """
    n = n or matmul_size(device)
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=generator).to(device, DTYPES[dtype]) for _ in "ab")
    out = torch.empty_like(a)
    for _ in range(3):
        torch.mm(a, b, out=out)
    _sync(device)
    started = time.perf_counter()
    torch.mm(a, b, out=out)
    _sync(device)
    per_round = max(1, math.ceil(round_s / max(time.perf_counter() - started, 1e-9)))
    rates: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(rates) < 3 or time.perf_counter() < deadline:
        started = time.perf_counter()
        for _ in range(per_round):
            torch.mm(a, b, out=out)
        _sync(device)
        rates.append(2 * n**3 * per_round / (time.perf_counter() - started))
    return statistics.median(rates)


def matmul_rates(device: torch.device) -> dict[str, float]:
    """:func:`matmul_rate` in fp32, and in bf16 where ``device`` computes it natively
    (:func:`lorasent.environment.bf16_supported`), in FLOP/s by dtype name. On a GPU the
    device's peak memory statistics are reset after it, so that its matrices count in no
    way's peak memory."""
    from lorasent.environment import bf16_supported

    names = ["fp32", "bf16"] if bf16_supported(device) else ["fp32"]
    rates = {name: matmul_rate(device, name) for name in names}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    return rates


def limit(device: torch.device, before: dict[str, float],
          after: dict[str, float]) -> dict[str, Any]:
    """A part's record of the rates (FLOP/s by dtype) measured on ``device`` before and
    after its ways: ``{"n": the products' size, "before": ..., "after": ...,
    "flop_per_s": the higher of the two}``, the limit its MFU figures are against."""
    return {"n": matmul_size(device), "before": before, "after": after,
            "flop_per_s": {k: max(before[k], after[k]) for k in before}}


def matmul_size(device: torch.device) -> int:
    """n of :func:`matmul_rate`'s n × n products on ``device``: 2048 on a CPU, 8192 on a
    GPU (which smaller products do not keep busy)."""
    return 8192 if device.type == "cuda" else 2048


def compute_dtype(way: str, weights: torch.dtype) -> str:
    """The dtype a bench way's products run in: bf16 for a way named ``*_bf16``
    (autocast) or a model whose weights are bf16 (the GPU's), else fp32."""
    return "bf16" if way.endswith("_bf16") or weights == torch.bfloat16 else "fp32"


def utilisation(flops: int, seconds: float, dtype: str,
                rates: dict[str, float]) -> dict[str, Any]:
    """A way's figures for ``flops`` done in ``seconds`` in ``dtype``:
    ``model_flops_per_s``, ``compute_dtype`` and ``mfu``, the fraction of the measured
    rate of that dtype (None where none was measured)."""
    rate = rates.get(dtype)
    return {"model_flops_per_s": flops / seconds, "compute_dtype": dtype,
            "mfu": flops / seconds / rate if rate else None}
