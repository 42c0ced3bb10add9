"""``make bench``: the project's train step and label scoring against the seeds' ways.

Usage: ``python -m lorasent.tools.bench [--device cpu|cuda] [--out bench]``

Everything is measured in one run, on one model, the same examples and the same
machine, and each figure is reported as a ratio against its reference measured in the
same run, so the ratios hold on a noisy machine:

1. Training step (forward, loss, backward, AdamW step; median of ``--steps`` timed
   rounds after ``--warmup`` rounds, a round being one step of each way in turn), LoRA
   r 8 on all seven projections, batch 8:

   - ``project``: the train stage's way (``train.share_prefix: true``): the tokens that
     every example of the batch starts with run once, the rest of each example on
     their key/value cache, dynamic left padding, loss on the label word's tokens with
     logits only there (:func:`lorasent.scoring.label_token_loss`);
   - ``project_unshared``: the same with ``train.share_prefix: false``, every example
     whole;
   - ``seed002``: every example padded to 256 tokens, the causal-LM loss over the full
     vocabulary at every position (seed 002's ``padding="max_length"`` + ``labels``);
     ten times the project's step, so it runs in the last rounds only, one untimed and
     :data:`SLOW_WAYS` timed;
   - ``plain_trainer``: dynamic padding with the same full-vocabulary loss (what
     ``Trainer`` + ``DataCollatorForLanguageModeling`` do);
   - ``floor``: the bare forward and backward of the decoder with LoRA on the same
     batch, every example whole, no LM head and no loss: what no step that computes
     every example's every token can beat. Sharing the prefix computes fewer.

   - ``project_bf16`` and ``floor_bf16`` (a CPU with native bf16 only, ``lorasent
     doctor``'s ``cpu_bf16``): the same two under ``torch.autocast`` in bf16 with the
     frozen weights held in bf16 (:mod:`lorasent.frozen_weights`), what ``base.precision:
     bf16`` trains with on such a CPU; ``project_autocast_bf16``: the project's step
     under autocast alone, every frozen weight cast at every product (the stage's way
     before). The summary gives the bf16 step against fp32's and against both floors.

   After the timed rounds, one step each of ``project`` and ``project_bf16`` runs under
   ``torch.profiler`` (:mod:`lorasent.tools.bench_profile`): the top operators by their
   share of the step's self time, and the dense matrix products' share together.

   Then the long-template part: the project's two ways and the floor again, on prompts
   of :data:`LONG_TEMPLATE` (an instruction of 70 tokens), where the shared start is
   most of each example.

2. Evaluation: the project's label scoring (:func:`lorasent.scoring.score_texts`) against
   seed 000's way, one ``generate(max_new_tokens=1)`` per text and string matching with
   its fallback to the middle class (median of 3 interleaved rounds); both accuracies are
   reported.
3. Peak memory: RSS of the train and evaluate parts (each in its own process), or peak
   device memory on a GPU.
4. Pipeline overhead: wall time of a no-op ``dvc repro`` and of the rerun after changing
   ``evaluate.reference``, on a copy of the repo with tiny sizes.
5. Scale (:func:`bench_scale`): the review statistics on synthetic rows, each of
   :data:`SCALE_RUNS` (rows, classes) in its own process: 1k, 10k and 100k 3-class rows
   and 100k rows of 100 classes, evaluate's (three reference intervals, calibration of
   the raw and the scaled probabilities, the label audit) and those ``compare`` and
   ``pr-comment`` compute per test set (the paired comparison and the calibration
   deltas); time and peak RSS. ``--only-scale`` runs this part alone.
6. Reference (:func:`bench_reference`): the baseline stage's ``tfidf_lr`` (default
   params) fitted on :data:`SCALE_ROWS` training rows drawn from the packaged tweets,
   each size in its own process; fit and predict seconds and the peak RSS it added
   (issue 58: under a minute and 2 GB at 100k rows). ``--only-scale`` runs it too.

Writes ``<out>/results.json`` and ``<out>/results.md`` (the table the README quotes).

Every train and evaluation way also gets its model FLOPs per step (per tweet for
scoring), counted from the model's config: the matrix products of the forward,
of the backward through the frozen weights (their input gradient only), of LoRA's own,
of attention, and of the vocabulary projection where it runs (:mod:`lorasent.tools.flops`
gives the formulas). Its model FLOP utilisation (``mfu``) is that over the step's
seconds and the dense matrix-product rate of the dtype it computes in, measured in the
same process just before and just after the ways (fp32, and bf16 where the device has it
natively; the higher of the two measurements).

On the CPU the model is the packaged Gemma 3 270M with its real weights. With
``--device cuda`` (ROCm or CUDA) the models are Gemma 3 270M and Gemma 2B built from
their configs with random weights, in bf16: a lent GPU reaches no hub, and random
weights cost exactly what trained ones cost. There the ways compute in bf16, and the
project's utilisation against ``--peak-tflops``, where given, is reported too.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lorasent.git import run_git
from lorasent.output_guard import unwritable
from lorasent.paths import CHECKOUT
from lorasent.tools import finite_float
from lorasent.tools import flops as model_flops
from lorasent.tools.bench_profile import top_ops
from lorasent.tools.bench_report import markdown, summarise

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from lorasent.scoring import PromptEncoder

SCALE_ROWS = (1_000, 10_000, 100_000)
# The scale part's (rows, classes): the default's 3 classes at each size, and 100 classes
# at the largest (issue 61: the whole review under 10 s and 1 GiB added with both).
SCALE_RUNS = tuple((rows, 3) for rows in SCALE_ROWS) + ((SCALE_ROWS[-1], 100),)
# An instruction of 70 tokens in seed 000's style (the task, the only answers allowed,
# how to read hard cases), in English: the shared start grows with the instruction.
LONG_TEMPLATE = (
    "Read the tweet below and judge the sentiment its author expresses. You may answer "
    "with one word only: negative, neutral or positive. Sarcasm and complaints are "
    "negative; news, questions and plain statements of fact are neutral; thanks, praise "
    "and excitement are positive. If a tweet mixes feelings, answer with the one that "
    "prevails.\nTweet: {text}\nSentiment:")
LABELS = ["negative", "neutral", "positive"]
# google/gemma-2b's config.json (GemmaForCausalLM), for random-weight GPU runs.
GEMMA_2B_CONFIG: dict[str, Any] = {
    "model_type": "gemma", "architectures": ["GemmaForCausalLM"], "vocab_size": 256000,
    "hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18,
    "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "bos_token_id": 2, "eos_token_id": 1,
    "pad_token_id": 0, "tie_word_embeddings": True}


# --------------------------------------------------------------------------- helpers

def _examples(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` packaged tweets of the three classes, a fixed sample."""
    import random

    from lorasent.stages.fetch import read_source

    rows, _ = read_source("packaged:tweets-en", text_column="text", label_column="label",
                          encoding="utf-8", hf_split="train")
    rows = [r for r in rows if r["text"].strip() and r["label"] in LABELS]
    picked = random.Random(seed).sample(rows, n)
    return [{"text": r["text"], "label_id": LABELS.index(r["label"])} for r in picked]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# Ways whose step takes ten times the project's (seed 002's 256-token padding and full
# vocabulary loss: 24 s a step on 2 cores) take part in only the last rounds: one
# untimed, then this many timed. Their ratio to the project's is large enough for two,
# and seven rounds of them were a quarter of the bench's ten minutes.
SLOW_WAYS = {"seed002": 2}


def _interleaved(ways: dict[str, Any], rounds: int, device: torch.device,
                 warmup: int = 0, slow: dict[str, int] | None = None
                 ) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Run ``warmup + rounds`` rounds, each calling every way once in turn, so that drift
    and warm-up effects of a noisy machine fall on every way alike. A way of ``slow``
    (``{name: timed rounds}``, fewer than ``rounds``) runs in the last ``timed + 1``
    rounds only, the first of them untimed.

    Returns:
        per way, the seconds of each round after the warm-up ones (the device
        synchronised before and after each call), and per way its last return value.
    """
    times: dict[str, list[float]] = {name: [] for name in ways}
    last: dict[str, Any] = {}
    total = warmup + rounds
    timed_from = {name: max(warmup, total - (slow or {}).get(name, rounds)) for name in ways}
    # every way from the first round, a slow one from the untimed round before its timed ones
    runs_from = {name: 0 if t == warmup else t - 1 for name, t in timed_from.items()}
    for round_ in range(total):
        for name, fn in ways.items():
            if round_ < runs_from[name]:
                continue
            _sync(device)
            start = time.perf_counter()
            last[name] = fn()
            _sync(device)
            if round_ >= timed_from[name]:
                times[name].append(time.perf_counter() - start)
    return times, last


def _peak_memory(device: torch.device) -> dict[str, int]:
    import resource

    out = {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if device.type == "cuda":
        out["peak_device_bytes"] = torch.cuda.max_memory_allocated(device)
    return out


def _load(model_name: str, device: torch.device, template: str | None = None,
          ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, PromptEncoder]:
    """``(model, tokenizer, encoder)``: real packaged Gemma on the CPU; random weights
    from the config on a GPU (see the module docstring). The encoder uses params.yaml's
    prompt, or ``template`` instead of its template."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from lorasent.modeling import load_tokenizer
    from lorasent.params import load_params
    from lorasent.scoring import PromptEncoder
    from lorasent.stages.fetch import packaged_gemma

    folder = packaged_gemma()
    tokenizer = load_tokenizer(folder)
    if device.type == "cpu" and model_name == "gemma-3-270m":
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                     attn_implementation="sdpa")
    else:
        config = (AutoConfig.from_pretrained(folder) if model_name != "gemma-2b"
                  else AutoConfig.for_model(**GEMMA_2B_CONFIG))
        if model_name == "tiny":  # for the tests: Gemma 3's layout, a few thousand weights
            config.update({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                           "num_attention_heads": 2, "num_key_value_heads": 1,
                           "head_dim": 16, "vocab_size": 1024,
                           "layer_types": ["full_attention"] * 2})
        config._attn_implementation = "sdpa"
        torch.manual_seed(0)
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.config.pad_token_id = tokenizer.pad_token_id
    prompt = load_params(CHECKOUT / "params.yaml").prompt
    encoder = PromptEncoder.create(tokenizer, template or prompt.template,
                                   [prompt.label_words[label] for label in LABELS],
                                   prompt.max_length)
    vocab = model.config.vocab_size
    if vocab < len(tokenizer):  # Gemma 2B (or the tests' tiny model) with Gemma 3's tokenizer
        model.get_input_embeddings().register_forward_pre_hook(
            lambda module, args: (args[0] % vocab, *args[1:]))
        encoder = dataclasses.replace(encoder, label_ids=tuple(
            tuple(i % vocab for i in ids) for ids in encoder.label_ids))
    # transformers wraps `to` in functools.wraps(Module.to): typeshed's _Wrapped then takes
    # the device for `self`.
    return model.to(device), tokenizer, encoder  # type: ignore[arg-type]


def _decode(tokenizer: PreTrainedTokenizerBase, ids: list[int] | torch.Tensor,
            skip_special_tokens: bool = False) -> str:
    text = tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    assert isinstance(text, str)  # one sequence decodes to one string, a batch to a list
    return text


def _vocab_safe(ids: torch.Tensor, model: PreTrainedModel) -> torch.Tensor:
    """Token ids of the Gemma 3 tokenizer folded into the model's vocabulary: the same
    cost, whatever the ids (see :func:`_load`)."""
    return ids % model.config.vocab_size


def _autocast_bf16(loss_fn: Callable[[], torch.Tensor],
                   frozen: Callable[[], contextlib.AbstractContextManager[object]] | None = None,
                   ) -> Callable[[], torch.Tensor]:
    """``loss_fn`` under ``torch.autocast("cpu", torch.bfloat16)``: the forward in bf16
    where autocast casts (matrix products), the trainable weights, their gradients and
    AdamW's state fp32, as the train stage does with ``base.precision: bf16`` on a CPU
    (accelerate's autocast). With ``frozen``, the model's frozen weights held in bf16
    meanwhile (the :class:`lorasent.frozen_weights.FrozenWeightsIn` it gives, one for all
    the ways), as the stage trains in one process; without, autocast casts them at every
    product."""
    def run() -> torch.Tensor:
        with frozen() if frozen else contextlib.nullcontext(), torch.autocast(
                "cpu", dtype=torch.bfloat16):
            return loss_fn()
    return run


# ------------------------------------------------------------------------------ parts

def bench_train(model_name: str, device: torch.device, batch_size: int, warmup: int,
                steps: int, template: str | None = None) -> dict[str, Any]:
    """Median seconds per training step of each way; tokens and examples per second.

    With ``template`` (the long-template part) only the project's ways and the floor
    run, on prompts of that template instead of params.yaml's.
    """
    from peft import LoraConfig, get_peft_model

    from lorasent.environment import bf16_supported, cpu_bf16_flags
    from lorasent.scoring import label_token_loss, training_prefix

    base_model, tokenizer, encoder = _load(model_name, device, template)
    examples = _examples(batch_size)
    lora = LoraConfig(
        task_type="CAUSAL_LM", r=8, lora_alpha=16, lora_dropout=0.1,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj"])
    model = get_peft_model(base_model, lora)
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)

    project = encoder.collate([{**encoder.training_example(e["text"], e["label_id"]),
                                "weight": 1.0} for e in examples])
    project = {k: v.to(device) for k, v in project.items()}
    real_tokens = int(project["attention_mask"].sum()) + batch_size  # + the label token
    full_texts = [_decode(tokenizer, encoder.encode(e["text"]), skip_special_tokens=True)
                  + _decode(encoder.tokenizer, list(encoder.label_ids[e["label_id"]]))
                  for e in examples]

    def lm_batch(**padding: Any) -> dict[str, torch.Tensor]:
        enc = tokenizer(full_texts, return_tensors="pt", truncation=True, **padding)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        return {"input_ids": enc["input_ids"].to(device),
                "attention_mask": enc["attention_mask"].to(device),
                "labels": torch.where(labels >= 0, _vocab_safe(labels, base_model),
                                      labels).to(device)}

    seed002 = lm_batch(padding="max_length", max_length=256)
    plain = lm_batch(padding=True)
    floor = {"input_ids": project["input_ids"], "attention_mask": project["attention_mask"],
             "position_ids": project["position_ids"]}
    decoder = model.get_base_model().model
    assert isinstance(decoder, torch.nn.Module)  # the transformer under the LM head

    memory: dict[str, dict[str, int]] = {}

    def step(name: str, loss_fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            loss = loss_fn()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            memory.setdefault(name, _peak_memory(device))
        return run

    losses = {
        "project": lambda: label_token_loss(model, project, share_prefix=True),
        "project_unshared": lambda: label_token_loss(model, project),
        "seed002": lambda: model(**seed002, use_cache=False).loss,
        "plain_trainer": lambda: model(**plain, use_cache=False).loss,
        "floor": lambda: decoder(**floor, use_cache=False).last_hidden_state.float().mean(),
    }
    shared = training_prefix(project)
    width = project["input_ids"].shape[1]
    tokens = {"project": real_tokens, "project_unshared": real_tokens, "floor": real_tokens,
              "seed002": int(seed002["attention_mask"].sum()),
              "plain_trainer": int(plain["attention_mask"].sum())}
    # positions the model computes: the shared start once, then each example's rest
    padded = {"project": shared + batch_size * (width - shared),
              "project_unshared": project["input_ids"].numel(),
              "floor": project["input_ids"].numel(),
              "seed002": seed002["input_ids"].numel(), "plain_trainer": plain["input_ids"].numel()}
    window = getattr(base_model.config, "sliding_window", None)
    counts = {"project": model_flops.label_loss_passes(project, True, window),
              "project_unshared": model_flops.label_loss_passes(project),
              "seed002": model_flops.full_loss_passes(seed002),
              "plain_trainer": model_flops.full_loss_passes(plain),
              "floor": model_flops.full_loss_passes(floor, head=False)}
    if template:
        losses = {name: losses[name] for name in ("project", "project_unshared", "floor")}
    elif device.type == "cpu" and bf16_supported(device):
        # base.precision bf16 on a CPU with native bf16: autocast, the frozen weights held
        # in bf16 (the train stage's way), and the project's step under autocast alone
        from lorasent.frozen_weights import FrozenWeightsIn

        # the bf16 copies made once, at the first bf16 step (after the project's peak RSS)
        held = functools.cache(lambda: FrozenWeightsIn(model, torch.bfloat16))
        for name, way, frozen in (("project", "project_bf16", held),
                                  ("floor", "floor_bf16", held),
                                  ("project", "project_autocast_bf16", None)):
            losses[way] = _autocast_bf16(losses[name], frozen)
            tokens[way], padded[way] = tokens[name], padded[name]
    counts = {name: model_flops.passes_of(name, counts) for name in losses}
    # The project goes first, so the peak memory after its first step is its own.
    rates_before = model_flops.matmul_rates(device)
    times, _ = _interleaved({name: step(name, fn) for name, fn in losses.items()}, steps,
                            device, warmup, SLOW_WAYS)
    matmul = model_flops.limit(device, rates_before, model_flops.matmul_rates(device))
    # where the time goes, one profiled step each of the project's fp32 and bf16 ways
    profile = ({name: top_ops(step(name, losses[name])) for name in ("project", "project_bf16")
                if name in losses} if device.type == "cpu" and not template else {})
    shape = model_flops.Shape.of(base_model.config)
    results = {}
    for name, spent in times.items():
        seconds = statistics.median(spent)
        flops = model_flops.step_flops(shape, counts[name], lora.r)
        results[name] = {"seconds_per_step": seconds, "timed_steps": len(spent),
                         "examples_per_s": batch_size / seconds,
                         "useful_tokens_per_s": tokens[name] / seconds,
                         "tokens_in_batch": padded[name], **memory[name],
                         "model_flops_per_step": flops,
                         **model_flops.utilisation(flops, seconds, model_flops.compute_dtype(
                             name, base_model.dtype), matmul["flop_per_s"])}
    return {"model": model_name, "batch_size": batch_size, "steps": steps, "warmup": warmup,
            "shared_prefix_tokens": shared, "width": width, "matmul": matmul,
            "ways": results, "profile": profile,
            "bf16_flags": cpu_bf16_flags() if device.type == "cpu" else []}


def bench_eval(model_name: str, device: torch.device, n: int, batch_size: int,
               rounds: int = 3) -> dict[str, Any]:
    """Examples/s (median of ``rounds`` interleaved rounds, after one warm-up pass of the
    project's way) and accuracy of label scoring and of seed 000's generate-and-match."""
    from transformers import GenerationMixin

    from lorasent.scoring import score_texts

    model, tokenizer, encoder = _load(model_name, device)
    model.eval()
    assert isinstance(model, GenerationMixin)  # a causal LM: seed 000's way generates
    examples = _examples(n, seed=1)
    texts, gold = [e["text"] for e in examples], [e["label_id"] for e in examples]
    words = [_decode(tokenizer, list(ids)).strip().lower() for ids in encoder.label_ids]

    def project() -> list[int]:
        return score_texts(model, encoder, texts, batch_size, desc="bench").argmax(1).tolist()

    @torch.inference_mode()
    def seed000() -> list[int]:
        preds = []
        for text in texts:
            ids = torch.tensor([encoder.encode(text)], device=device)
            out = model.generate(input_ids=ids, max_new_tokens=1,
                                 do_sample=False, pad_token_id=tokenizer.pad_token_id)
            answer = _decode(tokenizer, out[0, -1:], skip_special_tokens=True).strip().lower()
            # seed 000: exact label, then "contains", else the middle class
            match = [k for k, w in enumerate(words) if answer == w or (answer and w in answer)]
            preds.append(match[0] if match else LABELS.index("neutral"))
        return preds

    prompts = [encoder.encode(text) for text in texts]
    counts = {"project": model_flops.scoring_passes(
                  prompts, encoder.label_ids, batch_size,
                  getattr(model.config, "sliding_window", None)),
              "seed000": model_flops.generate_passes(prompts)}
    shape = model_flops.Shape.of(model.config)
    project()  # warm-up of the batched path
    rates_before = model_flops.matmul_rates(device)
    times, preds = _interleaved({"project": project, "seed000": seed000}, rounds, device)
    matmul = model_flops.limit(device, rates_before, model_flops.matmul_rates(device))
    out = {}
    for name, spent in times.items():
        seconds = statistics.median(spent)
        flops = model_flops.step_flops(shape, counts[name])
        out[name] = {"seconds": seconds, "examples_per_s": n / seconds,
                     "accuracy": sum(p == g for p, g in zip(preds[name], gold,
                                                            strict=True)) / n,
                     "model_flops_per_example": flops / n,
                     **model_flops.utilisation(flops, seconds, model_flops.compute_dtype(
                         name, model.dtype), matmul["flop_per_s"])}
    return {"model": model_name, "examples": n, "batch_size": batch_size, "rounds": rounds,
            "matmul": matmul, "ways": out, **_peak_memory(device)}


def bench_scale(rows: int, num_labels: int = 3) -> dict[str, Any]:
    """The review statistics on ``rows`` synthetic rows of ``num_labels`` classes.

    Gold ids uniform; two sides' scores N(0, 1) with 1.5 added to the gold class's (about
    70% right), softmax probabilities; the references: the majority class, and two
    predictions right about 40% of the time. Each step is timed once (seconds,
    ``time.perf_counter``); ``peak_rss_bytes`` is this process's peak resident memory,
    ``added_rss_bytes`` the peak less the resident memory before the first step (torch
    and the libraries already imported).
    """
    import resource

    import numpy as np

    from lorasent.calibration import (
        apply_temperature,
        calibration_deltas,
        calibration_metrics,
        label_issues,
    )
    from lorasent.statistics import intervals, paired_comparison, reduction_interval

    rng = np.random.default_rng(0)
    y = rng.integers(0, num_labels, rows)
    scores = []
    for _ in range(2):
        z = rng.normal(size=(rows, num_labels))
        z[np.arange(rows), y] += 1.5
        scores.append(z)
    probs = [apply_temperature(z, 1.0) for z in scores]
    pred_a, pred_b = (p.argmax(axis=1) for p in probs)
    references = [np.zeros(rows, dtype=np.int64)] + [
        np.where(rng.random(rows) < 0.4, y, rng.integers(0, num_labels, rows))
        for _ in range(2)]
    labels = [f"class{i}" for i in range(num_labels)]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    steps: dict[str, Callable[[], object]] = {
        "evaluate_intervals": lambda: [intervals(y, pred_a, num_labels)] + [
            reduction_interval(y, pred_a, ref) for ref in references],
        "evaluate_calibration": lambda: [calibration_metrics(y, probs[0]),
                                         calibration_metrics(y, apply_temperature(
                                             scores[0], 1.3))],
        "evaluate_label_issues": lambda: label_issues(y, probs[0]),
        "compare_paired": lambda: paired_comparison(y, pred_a, pred_b, labels),
        "compare_calibration_deltas": lambda: calibration_deltas(y, probs[0], probs[1]),
    }
    seconds = {}
    for name, step in steps.items():
        started = time.perf_counter()
        step()
        seconds[name] = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"rows": rows, "classes": num_labels, "seconds": seconds,
            "evaluate_s": sum(v for k, v in seconds.items() if k.startswith("evaluate")),
            "compare_s": sum(v for k, v in seconds.items() if k.startswith("compare")),
            "peak_rss_bytes": peak, "added_rss_bytes": peak - before}


def bench_reference(rows: int) -> dict[str, Any]:
    """``tfidf_lr`` with the default ``baseline.tfidf_lr`` params, fitted on ``rows``
    training rows and 2,000 validation rows (its C grid is chosen on them), then scoring
    600 rows: the packaged tweets shuffled (seed 0) and repeated where ``rows`` exceeds
    them. Seconds are wall seconds and ``added_rss_bytes`` the peak resident memory the
    fit and predict added, as the stage measures them (:func:`lorasent.references.measured`).
    """
    import random

    from lorasent.baseline_params import TfidfLrParams
    from lorasent.references import fit_tfidf_lr, measured
    from lorasent.stages.fetch import read_source

    corpus, _ = read_source("packaged:tweets-en", text_column="text", label_column="label",
                            encoding="utf-8", hf_split="train")
    random.Random(0).shuffle(corpus)
    labels = sorted({r["label"] for r in corpus})
    held_out, pool = corpus[:2_600], corpus[2_600:]
    train = [pool[i % len(pool)] for i in range(rows)]
    params = TfidfLrParams()
    fitted = fit_tfidf_lr(
        train_texts=[r["text"] for r in train],
        y_train=[labels.index(r["label"]) for r in train],
        val_texts=[r["text"] for r in held_out[:2_000]],
        y_val=[labels.index(r["label"]) for r in held_out[:2_000]], labels=labels,
        class_weighting="balanced", c_grid=params.C,
        word_ngram_range=params.word_ngram_range, char_ngram_range=params.char_ngram_range)
    with measured(fitted.cost, "predict"):
        fitted.predict([r["text"] for r in held_out[2_000:]])
    return {"rows": rows, "fit_s": fitted.cost.fit_seconds,
            "predict_600_s": fitted.cost.predict_seconds, "features": fitted.record["features"],
            "C": fitted.record.get("C"), "added_rss_bytes": fitted.cost.peak_added_bytes}


def _git(folder: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """The standard output of ``git <args>`` run in ``folder``
    (:func:`lorasent.git.run_git`; ``env``: its environment, None this process's).

    Raises:
        subprocess.CalledProcessError: git exited with an error (its command ``git <args>``).
        LorasentError: git is not installed.
    """
    done = run_git(folder, *args, env=env)
    if done.returncode:
        raise subprocess.CalledProcessError(done.returncode, ["git", *args], done.stdout,
                                            done.stderr)
    return str(done.stdout)


def copy_tracked(repo: Path, dest: Path) -> None:
    """Copy the git-tracked files of ``repo`` into ``dest`` (an existing folder), without
    the committed run (``metrics/``, ``dvc.lock``), so that ``dvc repro`` there runs every
    stage afresh."""
    listed = _git(repo, "ls-files", "-z")
    for name in filter(None, listed.split("\0")):
        if (repo / name).is_file() and not name.startswith(("metrics/", "dvc.lock")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / name, dest / name)


TINY_ROWS = 24  # rows of each split and extra test set in the pipeline part


def bench_pipeline(repo: Path) -> dict[str, Any]:
    """Seconds of a no-op ``dvc repro`` and of the rerun after an evaluate-only change, on
    a copy of the repo with tiny sizes (the real pipeline, 24 rows, 3 steps, each extra
    test set of ``evaluate.test_sets`` 24 rows too: at its 400 the evaluate rerun was
    two minutes of scoring, not of the pipeline)."""
    from lorasent.params import read_params_text, read_yaml, update_params

    # the test sets are replaced whole by a merge (params.VALUE_MAPS): each as it is, made tiny
    extra = read_yaml(read_params_text(repo / "params.yaml"), "params.yaml")["evaluate"][
        "test_sets"]
    tiny = {"split": {"train_size": TINY_ROWS, "validation_size": 0, "test_size": TINY_ROWS},
            "train": {"max_steps": 3, "per_device_train_batch_size": 4},
            "evaluate": {"batch_size": 8, "test_sets": {
                name: {**spec, "size": TINY_ROWS} for name, spec in extra.items()}}}
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    with tempfile.TemporaryDirectory(prefix="lorasent-bench-") as tmp:
        root = Path(tmp)
        copy_tracked(repo, root)
        params = root / "params.yaml"

        def run(*argv: str) -> float:
            start = time.perf_counter()
            subprocess.run(argv, cwd=root, env=env, check=True, capture_output=True)
            return time.perf_counter() - start

        update_params(tiny, params)
        _git(root, "init", "-q", env=env)
        _git(root, "add", "-A", env=env)
        _git(root, "-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit",
             "-q", "-m", "bench", env=env)
        first = run("dvc", "repro")
        noop = run("dvc", "repro")
        update_params({"evaluate": {"reference": "majority"}}, params)
        evaluate_only = run("dvc", "repro")
    return {"first_tiny_run_s": first, "noop_repro_s": noop,
            "evaluate_param_rerun_s": evaluate_only}


# ------------------------------------------------------------------------------- main

def no_gpu_message(flag: str = "--device cuda") -> str:
    """What to say when ``flag`` asks for a GPU that torch does not see (also used by
    ``lorasent.tools.device_check``)."""
    return (f"{flag}: torch {torch.__version__} sees no GPU (CUDA {torch.version.cuda}, "
            f"HIP {torch.version.hip}). Install a CUDA or ROCm build of torch on a machine "
            "with a GPU (docs/rocm.md, \"AMD GPUs (ROCm)\"); `lorasent doctor` shows what "
            "torch sees.")


def _part(name: str, args: argparse.Namespace, rows: int | None = None,
          classes: int | None = None) -> dict[str, Any]:
    """Run one part in a fresh process, so that its peak memory is its own."""
    cmd = [sys.executable, "-m", "lorasent.tools.bench", "--part", name, "--device", args.device,
           "--model", args.model or "gemma-3-270m", "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--eval-examples", str(args.eval_examples)]
    if rows is not None:
        cmd += ["--scale-rows", str(rows)]
    if classes is not None:
        cmd += ["--scale-classes", str(classes)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bench part {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _machine(device: torch.device, load_before: float) -> dict[str, Any]:
    from lorasent.environment import cpu_model

    out = {"cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__,
           "torch_threads": torch.get_num_threads(), "device": str(device),
           "hip": torch.version.hip, "cuda": torch.version.cuda,
           "load_average_1min_before": load_before}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m lorasent.tools.bench", description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="cuda also means a ROCm GPU")
    parser.add_argument("--model", default=None,
                        help="gemma-3-270m or gemma-2b (default: 270M on the CPU, both on a GPU)")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per way")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--eval-examples", type=int, default=96,
                        help="packaged tweets scored by each evaluation way")
    parser.add_argument("--no-pipeline", action="store_true", help="skip the dvc part")
    parser.add_argument("--peak-tflops", type=finite_float, default=None,
                        help="the GPU's peak bf16 TFLOP/s, for the model FLOP utilisation "
                             "against it besides the measured rate's")
    parser.add_argument("--out", type=Path, default=Path("bench"),
                        help="folder for results.json and results.md (default: bench, "
                             "the committed results)")
    parser.add_argument("--only-scale", action="store_true",
                        help="run only the scale part (review statistics on 1k-100k rows)")
    parser.add_argument("--part", choices=["train", "train_long_template", "eval", "scale",
                                           "reference"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--scale-rows", type=int, default=SCALE_ROWS[0], help=argparse.SUPPRESS)
    parser.add_argument("--scale-classes", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(no_gpu_message())
    problem = None if args.part else unwritable(args.out / "results.json")
    if problem is not None:  # before minutes of measuring, not after
        parser.error(f"--out {args.out}: {problem}; give a folder you can write to")

    if args.part in ("scale", "reference"):
        print(json.dumps(bench_scale(args.scale_rows, args.scale_classes)
                         if args.part == "scale" else bench_reference(args.scale_rows)))
        return
    if args.part:  # a child process: one part, JSON on the last line of stdout
        model = args.model or "gemma-3-270m"
        result = (bench_eval(model, device, args.eval_examples, 16) if args.part == "eval"
                  else bench_train(model, device, 8, args.warmup, args.steps,
                                   LONG_TEMPLATE if args.part == "train_long_template" else None))
        print(json.dumps(result))
        return

    models = [args.model] if args.model else (
        ["gemma-3-270m", "gemma-2b"] if device.type == "cuda" else ["gemma-3-270m"])
    load_before = os.getloadavg()[0]  # before the bench loads the machine itself
    started = time.perf_counter()
    results: dict[str, Any] = {"train": {}, "train_long_template": {}, "eval": {}}
    for model in [] if args.only_scale else models:
        args.model = model
        print(f"bench: training step, {model} ...", flush=True)
        results["train"][model] = _part("train", args)
        print(f"bench: training step, {model}, long template ...", flush=True)
        results["train_long_template"][model] = _part("train_long_template", args)
        print(f"bench: evaluation, {model} ...", flush=True)
        results["eval"][model] = _part("eval", args)
    results["scale"] = []
    for rows, classes in SCALE_RUNS:
        print(f"bench: review statistics, {rows:,} rows of {classes} classes ...", flush=True)
        results["scale"].append(_part("scale", args, rows, classes))
    results["reference"] = []
    for rows in SCALE_ROWS:
        print(f"bench: tfidf_lr reference, {rows:,} training rows ...", flush=True)
        results["reference"].append(_part("reference", args, rows))
    if not (args.no_pipeline or args.only_scale):
        print("bench: pipeline overhead ...", flush=True)
        results["pipeline"] = bench_pipeline(CHECKOUT)
    report = {"machine": _machine(device, load_before), "results": results,
              "summary": summarise(results, device, args.peak_tflops),
              "wall_time_s": time.perf_counter() - started}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n", "utf-8")
    table = markdown(report)
    (args.out / "results.md").write_text(table, "utf-8")
    print(table)
    print(f"bench: {report['wall_time_s']:.0f} s; wrote {args.out}/results.json and results.md")


if __name__ == "__main__":
    main()
