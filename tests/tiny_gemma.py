"""A tiny random Gemma 3 model folder for the fast tier: no GGUF, no hub, under a second.

Gemma 3's architecture (``Gemma3ForCausalLM``: grouped-query attention, sliding-window
and full layers, tied embeddings, Gemma's special token ids pad 0, eos 1, bos 2, unk 3)
at about 31,000 weights, with a byte-level BPE tokenizer of 392 tokens
trained here on the prompts and texts of the tests. Its scores mean nothing; what the
fast tier checks on it is mechanics: exact label scoring, batching, padding, the shared
prompt start in scoring and training, the loss and its LoRA gradients.

The same bytes every time: the tokenizer's training is deterministic and the weights
come from ``torch.manual_seed(0)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import Gemma3TextConfig, PreTrainedTokenizerFast

# Gemma's ids for its special tokens (google/gemma-3-270m's config.json).
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>"]
VOCAB = 384  # BPE's tokens; the added Chinese ones come on top
# What the tokenizer is trained on: the repo's English template and label words, the
# tests' Chinese template, label words and texts, a few tweets.
CORPUS = [
    "Classify the sentiment of the tweet as negative, neutral or positive.",
    "Tweet: {text}\nSentiment: negative neutral positive",
    "判断下面这段话的情绪类别，只能回答“”之一。\n文本：{text}\n情绪：新闻：{text}\n栏目：",
    "好 这家店的服务态度太差了，等了很久没人理 国务院召开常务会议，部署下一阶段经济工作",
    "配置不错，价格还算公道，整体满意。今天下午三点开会",
    "I love this phone. great service, thank you. the flight was delayed again.",
    "worst day ever. Meeting moved to 3pm. the store opens at 9. so happy with it.",
    "this is broken and useless. I love the new update, works great. the train is late",
]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with Gemma's special tokens that adds BOS, as Gemma's
    does; every text encodes (unknown characters fall back to bytes), and the tests'
    Chinese label words split as Gemma 3 splits them."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    # Gemma's splits of the tests' label words: 消极 and 中性 two tokens each, 积极 one;
    # 时政 and 时差 share their first token
    tokenizer.add_tokens(["消", "极", "中", "性", "积极", "时", "政", "差"])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<bos>",
                                   eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
                                   padding_side="left")


def tiny_config(vocab_size: int) -> Gemma3TextConfig:
    """Gemma 3 270M's layout (a sliding-window layer, then a full one) made tiny."""
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=512,
        layer_types=["sliding_attention", "full_attention"], max_position_embeddings=1024,
        pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True)


def make_tiny_gemma(folder: Path) -> Path:
    """``folder`` holding a random tiny ``Gemma3ForCausalLM`` (safetensors, fp32) and its
    tokenizer, as a base model folder that :func:`lorasent.modeling.load_base_model` and
    ``lorasent fetch`` read like any local model."""
    import torch
    from transformers import Gemma3ForCausalLM

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(tiny_config(len(tokenizer)))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
