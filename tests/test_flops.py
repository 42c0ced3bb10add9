"""The bench's model FLOP count (lorasent.tools.flops) against torch's own FLOP counter on
a tiny Gemma 3, and the arithmetic of the matrix-product rate and the utilisation."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from lorasent.scoring import PromptEncoder, label_token_loss, score_texts
from lorasent.tools import flops
from lorasent.tools.flops import Pass, Shape

TEMPLATE = ("Classify the sentiment of the tweet as negative, neutral or positive.\n"
            "Tweet: {text}\nSentiment:")
ENGLISH, CHINESE = [" negative", " neutral", " positive"], ["消极", "中性", "积极"]
TEXTS = ["I love this phone", "worst day ever", "the train is late", "so happy with it",
         "Meeting moved to 3pm", "this is broken and useless. I love the new update"]
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def one_thread() -> Any:
    """One torch thread while this module's tiny products run (a second one only waits
    on them), the count restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny(one_thread) -> tuple[Any, Any, Shape]:
    """``(peft model, tokenizer, shape)``: the bench's tiny Gemma 3 layout (hidden 32, 2
    layers, vocabulary 1024) with LoRA r 8 on all seven projections, eager attention
    (FlopCounterMode sees its products as ``bmm``; it has no formula for the CPU's SDPA
    kernel)."""
    from peft import LoraConfig, get_peft_model
    from transformers import Gemma3ForCausalLM

    from tiny_gemma import tiny_config, tiny_tokenizer

    config = tiny_config(1024)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = get_peft_model(Gemma3ForCausalLM(config), LoraConfig(
        task_type="CAUSAL_LM", r=8, lora_alpha=16, lora_dropout=0.1,
        target_modules=PROJECTIONS))
    return model, tiny_tokenizer(), Shape.of(config)


def counted(run: Any) -> int:
    """The FLOPs torch's FlopCounterMode counts while ``run()`` runs."""
    counter = FlopCounterMode(display=False)
    with counter:
        run()
    return int(counter.get_total_flops())


def encoder(tokenizer: Any, words: list[str]) -> PromptEncoder:
    return PromptEncoder.create(tokenizer, TEMPLATE, words, 128)


def test_a_train_step_forward_and_backward_on_a_padded_batch(tiny):
    model, _, shape = tiny
    model.train()
    ids = torch.randint(4, 1024, (3, 7))
    mask = torch.ones_like(ids)
    mask[0, :2] = mask[1, :1] = 0
    batch = {"input_ids": ids, "attention_mask": mask}
    labels = {**batch, "labels": ids.masked_fill(mask == 0, -100)}
    full = flops.step_flops(shape, flops.full_loss_passes(batch), 8)
    assert counted(lambda: model(**labels, use_cache=False).loss.backward()) == full
    assert full == 5_327_616
    decoder = model.get_base_model().model
    floor = flops.step_flops(shape, flops.full_loss_passes(batch, head=False), 8)
    assert full - floor == 4 * 3 * 7 * 32 * 1024  # the head's forward and input gradient
    assert counted(lambda: decoder(**batch, use_cache=False).last_hidden_state.mean()
                   .backward()) == floor


@pytest.mark.parametrize("share_prefix", [True, False])
def test_the_project_ways_label_word_loss(tiny, share_prefix):
    """On two-token label words (Chinese ones: the head at two positions of some rows)."""
    model, tokenizer, shape = tiny
    model.train()
    enc = encoder(tokenizer, CHINESE)
    batch = enc.collate([{**enc.training_example(text, k % 3), "weight": 1.0}
                         for k, text in enumerate(TEXTS)])
    passes = flops.label_loss_passes(batch, share_prefix, 512)
    assert [p.backward for p in passes] == (["cache", "full"] if share_prefix else ["full"])
    assert counted(lambda: label_token_loss(model, batch, share_prefix=share_prefix)
                   .backward()) == flops.step_flops(shape, passes, 8)


@pytest.mark.parametrize("words", [ENGLISH, CHINESE])
def test_scoring_is_forward_only(tiny, words):
    """score_texts in batches of 4 (the shared start once per batch; two-token Chinese
    label words add the continuation pass), and seed 000's generate of one token; with
    the LoRA adapter (the bench scores the base model: rank 0)."""
    model, tokenizer, shape = tiny
    model.eval()
    enc = encoder(tokenizer, words)
    prompts = [enc.encode(text) for text in TEXTS]
    passes = flops.scoring_passes(prompts, enc.label_ids, 4, 512)
    assert len(passes) == (6 if len(enc.label_ids[0]) > 1 else 4)
    assert counted(lambda: score_texts(model, enc, TEXTS, 4)) == flops.step_flops(shape, passes,
                                                                                8)

    @torch.inference_mode()
    def generate() -> None:
        for ids in prompts[:3]:
            model.generate(input_ids=torch.tensor([ids]), max_new_tokens=1, do_sample=False,
                           pad_token_id=0)

    if len(enc.label_ids[0]) == 1:  # the same for any label words
        assert counted(generate) == flops.step_flops(shape, flops.generate_passes(prompts[:3]), 8)


def test_the_docstrings_closed_forms():
    d, f, n_layers, h, g, c, v, r = 640, 2048, 18, 4, 1, 256, 262144, 8
    shape = Shape(d, f, n_layers, h, g, c, v)
    w = 2 * d * c * (h + g) + 3 * d * f
    w0 = d * c * (h + 2 * g)
    lora_in, lora_out = 5 * d + h * c + f, c * (h + 2 * g) + 2 * d + 2 * f
    rows, q, k, head = 8, 41, 59, 8
    t = rows * q
    forward = 2 * t * n_layers * (w + r * (lora_in + lora_out)) \
        + 4 * n_layers * h * c * rows * q * k + 2 * head * d * v
    backward = 2 * t * (n_layers * w - w0) + t * (4 * n_layers * r * (lora_in + lora_out)
                                                 - 6 * d * r) \
        + 8 * n_layers * h * c * rows * q * k + 2 * head * d * v
    assert flops.pass_flops(shape, Pass(rows, q, k, head), r) == forward
    assert flops.pass_flops(shape, Pass(rows, q, k, head, "full"), r) == forward + backward
    assert n_layers * w == 100_270_080  # Gemma 3 270M's weights outside its embedding


def test_flop_counter_modes_sdpa_formulas_against_this_count():
    """FlopCounterMode's SDPA forward is this count's attention; its backward counts QKᵀ
    once more (the scores the GPU kernels recompute), which MFU leaves out."""
    rows, h, g, q, k, c = 3, 4, 1, 5, 9, 16
    shape = Shape(hidden=1, intermediate=1, layers=1, heads=h, kv_heads=g, head_dim=c, vocab=1)
    frozen = flops.pass_flops(shape, Pass(rows, q, 0, 0))  # the projections alone
    forward = flops.pass_flops(shape, Pass(rows, q, k, 0)) - frozen
    query, key, grad = (rows, h, q, c), (rows, g, k, c), (rows, h, q, c)
    assert sdpa_flop_count(query, key, key) == forward == 4 * rows * h * q * k * c
    backward = flops.pass_flops(shape, Pass(rows, q, k, 0, "full")) - forward \
        - flops.pass_flops(shape, Pass(rows, q, 0, 0, "full"))
    assert backward == 2 * forward
    assert sdpa_backward_flop_count(grad, query, key, key) == backward + forward // 2


def test_the_rate_and_the_utilisation_arithmetic(monkeypatch):
    rate = flops.matmul_rate(torch.device("cpu"), "fp32", n=32, seconds=0.0, round_s=0.0)
    assert rate > 0
    assert flops.limit(torch.device("cpu"), {"fp32": 2e11, "bf16": 7e11},
                       {"fp32": 1.9e11, "bf16": 7.5e11}) == {
        "n": 2048, "before": {"fp32": 2e11, "bf16": 7e11},
        "after": {"fp32": 1.9e11, "bf16": 7.5e11}, "flop_per_s": {"fp32": 2e11, "bf16": 7.5e11}}
    assert flops.utilisation(3 * 10**11, 2.0, "fp32", {"fp32": 2e11}) == {
        "model_flops_per_s": 1.5e11, "compute_dtype": "fp32", "mfu": 0.75}
    assert flops.utilisation(10**9, 1.0, "bf16", {"fp32": 2e11})["mfu"] is None
    assert [flops.compute_dtype(way, dtype) for way, dtype in [
        ("project", torch.float32), ("project_bf16", torch.float32),
        ("project", torch.bfloat16)]] == ["fp32", "bf16", "bf16"]
    monkeypatch.setattr("lorasent.environment.cpu_bf16_flags", lambda: [])
    monkeypatch.setattr(flops, "matmul_rate", lambda device, name: {"fp32": 1.0}[name])
    assert flops.matmul_rates(torch.device("cpu")) == {"fp32": 1.0}


def test_a_variant_of_a_way_has_its_passes_and_a_new_way_none():
    counts = {"project": [Pass(1, 2, 2, 0)], "project_unshared": [Pass(8, 3, 3, 8)]}
    assert flops.passes_of("project_bf16", counts) == counts["project"]
    assert flops.passes_of("project_unshared_bf16", counts) == counts["project_unshared"]
    with pytest.raises(KeyError, match="bench way 'floor_bf16': no FLOP count; its passes go "
                                       "into the bench's counts "
                                       r"\(there: project, project_unshared\)"):
        flops.passes_of("floor_bf16", counts)
