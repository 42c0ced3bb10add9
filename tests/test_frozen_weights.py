"""The frozen weights held in bf16 while a CPU trains under bf16 autocast
(lorasent.frozen_weights): the same losses and gradients as plain autocast, bit for bit,
and the fp32 originals back afterwards, the tied embedding included."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from lorasent.frozen_weights import FrozenWeightsIn
from tiny_gemma import tiny_config

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _lora_model() -> Any:  # a PeftModel: its config and base model as attributes
    torch.manual_seed(0)
    config = tiny_config(vocab_size=96)
    config.tie_word_embeddings = True
    base = AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                            attn_implementation="sdpa")
    model = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=8,
                                            lora_dropout=0.0, target_modules=PROJECTIONS))
    for name, param in model.named_parameters():  # LoRA's B starts at zero: move it
        if "lora_B" in name:
            torch.nn.init.normal_(param)
    return model


def _loss_and_grads(model: torch.nn.Module, ids: torch.Tensor
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                           if p.grad is not None}


def test_training_in_bf16_gives_plain_autocast_s_loss_and_gradients_bit_for_bit():
    model = _lora_model()
    ids = torch.randint(0, 96, (3, 11), generator=torch.Generator().manual_seed(1))
    loss, grads = _loss_and_grads(model, ids)
    frozen = FrozenWeightsIn(model, torch.bfloat16)
    layers = model.config.num_hidden_layers
    assert frozen.swapped == len(PROJECTIONS) * layers + 1  # and the vocabulary projection
    with frozen:
        assert model.get_base_model().lm_head.weight.dtype == torch.bfloat16
        held_loss, held_grads = _loss_and_grads(model, ids)
    assert torch.equal(held_loss, loss)
    assert held_grads.keys() == grads.keys() and len(grads) == 2 * len(PROJECTIONS) * layers
    assert all(torch.equal(held_grads[n], grads[n]) for n in grads)


def test_leaving_puts_the_fp32_originals_and_the_tie_back_even_after_an_error():
    model = _lora_model()
    base = model.get_base_model()
    before = {n: p for n, p in model.named_parameters()}
    with pytest.raises(RuntimeError, match="boom"), FrozenWeightsIn(model, torch.bfloat16):
        raise RuntimeError("boom")
    assert {n: p for n, p in model.named_parameters()} == before
    assert base.lm_head.weight is base.model.embed_tokens.weight
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_trainable_and_already_bf16_weights_are_left_alone():
    model = _lora_model()
    model.get_base_model().model.layers[0].mlp.down_proj.base_layer.to(torch.bfloat16)
    frozen = FrozenWeightsIn(model, torch.bfloat16)
    assert frozen.swapped == len(PROJECTIONS) * model.config.num_hidden_layers
    with frozen:
        lora = [p for n, p in model.named_parameters() if "lora_" in n]
        assert lora and {p.dtype for p in lora} == {torch.float32}
