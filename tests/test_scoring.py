"""Label scoring: exact, batched, multi-token, with a shared prompt start.

The mechanics run on the tiny random Gemma 3 (fast tier), whose tokenizer splits the
Chinese label words as Gemma 3 does; what is Gemma's own (its splits, its template
start) and one exactness check run on the real packaged Gemma 3 270M (integration).
"""

import copy

import numpy as np
import pytest
import torch

from lorasent.metrics import probabilities
from lorasent.scoring import (
    CONTENT_FREE_INPUTS,
    IGNORE_INDEX,
    CalibrationError,
    PromptEncoder,
    PromptError,
    collate_training,
    content_free_prior,
    contextual_calibration,
    label_token_ids,
    label_token_loss,
    score_batch,
    score_texts,
    shared_prefix,
    training_prefix,
)

ZH_TEMPLATE = "判断下面这段话的情绪类别，只能回答“消极/中性/积极”之一。\n文本：{text}\n情绪："
ZH_WORDS = ["消极", "中性", "积极"]
TEXTS = ["好", "这家店的服务态度太差了，等了很久没人理",
         "配置不错，价格还算公道，整体满意。" * 6, "今天下午三点开会"]


def brute_force(model, prompt_ids, label_ids):
    """Score by running prompt + each full label word, one sequence at a time."""
    row = []
    for ids in label_ids:
        seq = torch.tensor([list(prompt_ids) + list(ids)])
        with torch.inference_mode():
            logp = model(input_ids=seq).logits[0].float().log_softmax(-1)
        row.append(sum(logp[len(prompt_ids) - 1 + j, t].item() for j, t in enumerate(ids)))
    return row


@pytest.fixture(scope="module")
def zh(tiny_gemma):
    model, tokenizer = tiny_gemma
    return PromptEncoder.create(tokenizer, ZH_TEMPLATE, ZH_WORDS, max_length=96)


@pytest.mark.integration
def test_gemma_splits_chinese_label_words(gemma):
    _, tokenizer = gemma
    ids = label_token_ids(tokenizer, ZH_WORDS)
    assert [len(i) for i in ids] == [2, 2, 1]   # 消极 and 中性 are two tokens each


@pytest.mark.parametrize("lm", ["tiny_gemma",
                                pytest.param("gemma", marks=pytest.mark.integration)])
def test_multi_token_label_words_scored_on_all_tokens(lm, request):
    model, tokenizer = request.getfixturevalue(lm)
    zh = PromptEncoder.create(tokenizer, ZH_TEMPLATE, ZH_WORDS, max_length=96)
    assert [len(ids) for ids in zh.label_ids] == [2, 2, 1]
    prompts = [zh.encode(t) for t in TEXTS]
    with torch.inference_mode():
        scores = score_batch(model, prompts, zh.label_ids, tokenizer.pad_token_id)
    expected = [brute_force(model, p, zh.label_ids) for p in prompts]
    np.testing.assert_allclose(scores.numpy(), np.array(expected), atol=1e-4)


def test_label_words_sharing_their_first_token_are_told_apart(tiny_gemma):
    model, tokenizer = tiny_gemma
    enc = PromptEncoder.create(tokenizer, "新闻：{text}\n栏目：", ["时政", "时差"], max_length=64)
    assert enc.label_ids[0][0] == enc.label_ids[1][0]   # same first token 时
    prompt = enc.encode("国务院召开常务会议，部署下一阶段经济工作")
    with torch.inference_mode():
        scores = score_batch(model, [prompt], enc.label_ids, tokenizer.pad_token_id)[0]
    np.testing.assert_allclose(scores.numpy(), brute_force(model, prompt, enc.label_ids),
                               atol=1e-4)
    assert abs(scores[0] - scores[1]) > 0.1


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_batched_scores_equal_one_by_one(tiny_gemma, zh, padding_side):
    model, tokenizer = tiny_gemma
    tokenizer.padding_side = padding_side  # scoring pads on its own, whatever this says
    prompts = [zh.encode(t) for t in TEXTS]
    assert max(map(len, prompts)) - min(map(len, prompts)) > 30
    with torch.inference_mode():
        batched = score_batch(model, prompts, zh.label_ids, tokenizer.pad_token_id)
        single = torch.cat([score_batch(model, [p], zh.label_ids, tokenizer.pad_token_id)
                            for p in prompts])
    torch.testing.assert_close(batched, single, atol=1e-4, rtol=0)


def test_shared_prefix_leaves_each_prompt_its_last_token():
    assert shared_prefix([[2, 7, 8, 9], [2, 7, 8, 5, 6], [2, 7, 3]]) == 2
    assert shared_prefix([[2, 7, 8], [2, 7, 8, 9]]) == 2
    assert shared_prefix([[2, 7, 8], [2, 7, 8]]) == 2
    assert shared_prefix([[2], [2, 7]]) == 0
    assert shared_prefix([[5, 7], [2, 7]]) == 0


def _counting_calls(model):
    calls = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True)
    return calls, hook


def test_shared_prompt_start_runs_once_and_scores_as_without(tiny_gemma, zh, monkeypatch):
    """Prefix caching: the template's start goes through the model once (batch 1), and the
    scores, multi-token label words included, are those of full prompts in one batch."""
    model, tokenizer = tiny_gemma
    prompts = [zh.encode(t) for t in TEXTS]
    n = shared_prefix(prompts)
    # BOS and the template before {text} (25 tokens of Gemma 3's)
    assert n == len(tokenizer(ZH_TEMPLATE.split("{text}")[0])["input_ids"])
    calls, hook = _counting_calls(model)
    try:
        with torch.inference_mode():
            shared = score_batch(model, prompts, zh.label_ids, tokenizer.pad_token_id)
            monkeypatch.setattr("lorasent.scoring.shared_prefix", lambda prompts: 0)
            whole = score_batch(model, prompts, zh.label_ids, tokenizer.pad_token_id)
    finally:
        hook.remove()
    width = max(map(len, prompts))
    assert calls == [(1, n), (4, width - n), (4 * 2, 1), (4, width), (4 * 2, 1)]
    torch.testing.assert_close(shared, whole, atol=1e-4, rtol=0)
    assert shared.argmax(1).tolist() == whole.argmax(1).tolist()


def test_no_shared_start_when_prompts_could_outgrow_the_sliding_window(tiny_gemma, zh,
                                                                         monkeypatch):
    model, tokenizer = tiny_gemma
    prompts = [zh.encode(t) for t in TEXTS]
    monkeypatch.setattr(model.config, "sliding_window", max(map(len, prompts)) + 1)
    calls, hook = _counting_calls(model)
    try:
        with torch.inference_mode():
            score_batch(model, prompts, zh.label_ids, tokenizer.pad_token_id)
    finally:
        hook.remove()
    assert calls == [(4, max(map(len, prompts))), (4 * 2, 1)]


def test_score_texts_keeps_input_order(tiny_gemma, zh):
    model, tokenizer = tiny_gemma
    scores = score_texts(model, zh, TEXTS, batch_size=3)
    assert scores.shape == (4, 3) and scores.dtype == np.float32
    with torch.inference_mode():
        single = torch.cat([score_batch(model, [zh.encode(t)], zh.label_ids,
                                        tokenizer.pad_token_id) for t in TEXTS])
    np.testing.assert_allclose(scores, single.numpy(), atol=1e-4)


def test_truncation_cuts_only_the_text(tiny_gemma, zh):
    _, tokenizer = tiny_gemma
    ids = zh.encode("很" * 10_000)
    assert len(ids) <= zh.prompt_budget == 96 - 2
    tail = tokenizer("\n情绪：", add_special_tokens=False)["input_ids"]
    assert ids[-len(tail):] == tail                 # the answer slot survives
    assert ids[0] == tokenizer.bos_token_id
    example = zh.training_example("很" * 10_000, label_id=0)
    assert len(example["input_ids"]) + 1 <= 96      # prompt + whole label word fit
    assert example["labels"] == list(zh.label_ids[0])


def test_short_text_is_not_truncated(zh):
    text = "今天下午三点开会"
    assert zh.tokenizer.decode(zh.encode(text), skip_special_tokens=True) == \
        ZH_TEMPLATE.replace("{text}", text)


def test_label_words_that_encode_the_same_are_refused(tiny_gemma):
    _, tokenizer = tiny_gemma
    with pytest.raises(PromptError, match="encode to the same tokens"):
        label_token_ids(tokenizer, [" good", " good"])


def test_template_too_long_for_max_length_is_refused(tiny_gemma):
    _, tokenizer = tiny_gemma
    with pytest.raises(PromptError, match="raise prompt.max_length"):
        PromptEncoder.create(tokenizer, ZH_TEMPLATE, ZH_WORDS, max_length=20)


def test_contextual_calibration_divides_each_probability_by_the_prior():
    # two rows of probabilities, given as log-scores shifted by a constant per row (the
    # scores need not be normalised: log_softmax comes first)
    probs = np.array([[0.5, 0.3, 0.2], [0.2, 0.2, 0.6]])
    scores = np.log(probs) + np.array([[3.0], [-1.0]])
    prior = np.array([0.5, 0.25, 0.25])
    calibrated = contextual_calibration(scores.astype(np.float32), prior)
    assert calibrated.shape == (2, 3) and calibrated.dtype == np.float64
    # p / p_cf by hand: 0.5/0.5, 0.3/0.25, 0.2/0.25 and 0.2/0.5, 0.2/0.25, 0.6/0.25
    np.testing.assert_allclose(calibrated, np.log([[1.0, 1.2, 0.8], [0.4, 0.8, 2.4]]),
                               rtol=0, atol=1e-7)   # float32 scores: 1e-7 of rounding
    assert calibrated.argmax(1).tolist() == [1, 2]  # row 0 flips from class 0 to 1
    np.testing.assert_allclose(probabilities(calibrated),
                               [[1 / 3, 0.4, 0.8 / 3], [0.4 / 3.6, 0.8 / 3.6, 2.4 / 3.6]],
                               rtol=0, atol=1e-7)


def test_calibration_undoes_a_skewed_prior():
    """A model that favours class 1 whatever the text (its content-free prior is 0.7 on
    class 1) predicts class 1 for all four rows; divided by the prior, only the row whose
    class-1 probability is above 0.7 stays class 1."""
    probs = np.array([[0.4, 0.5, 0.1], [0.1, 0.6, 0.3], [0.3, 0.5, 0.2], [0.05, 0.9, 0.05]])
    prior = np.array([0.2, 0.7, 0.1])
    gold = [0, 2, 2, 1]
    assert np.log(probs).argmax(1).tolist() == [1, 1, 1, 1]
    # quotients: [2, 5/7, 1], [1/2, 6/7, 3], [3/2, 5/7, 2], [1/4, 9/7, 1/2]
    assert contextual_calibration(np.log(probs), prior).argmax(1).tolist() == gold
    # a uniform prior changes nothing
    assert contextual_calibration(np.log(probs), np.full(3, 1 / 3)).argmax(1).tolist() == \
        [1, 1, 1, 1]


def test_calibration_refuses_a_prior_that_does_not_fit():
    scores = np.zeros((2, 3))
    with pytest.raises(CalibrationError, match=r"scores of shape \(2, 3\) need a prior of "
                                               r"shape \(3,\), got \(2,\)"):
        contextual_calibration(scores, np.array([0.5, 0.5]))
    with pytest.raises(CalibrationError, match="every class needs a prior probability above"):
        contextual_calibration(scores, np.array([0.5, 0.5, 0.0]))


def test_content_free_prior_is_the_mean_softmax_of_the_content_free_prompts(tiny_gemma, zh):
    model, tokenizer = tiny_gemma
    assert CONTENT_FREE_INPUTS == ("N/A", "", "[MASK]")
    # the empty input is the template with nothing where the text goes
    assert zh.encode("") == tokenizer(ZH_TEMPLATE.replace("{text}", ""))["input_ids"]
    prior = content_free_prior(model, zh)
    assert prior.shape == (3,) and prior.dtype == np.float64
    assert prior.sum() == pytest.approx(1.0, abs=1e-12)
    # each prompt scored alone, as a text
    one_by_one = [probabilities(score_texts(model, zh, [text], batch_size=1))[0]
                  for text in ("N/A", "", "[MASK]")]
    np.testing.assert_allclose(prior, np.mean(one_by_one, axis=0), rtol=0, atol=1e-6)
    # and by running each prompt with each whole label word (multi-token words included)
    brute = [probabilities(np.array([brute_force(model, zh.encode(text), zh.label_ids)]))[0]
             for text in CONTENT_FREE_INPUTS]
    np.testing.assert_allclose(prior, np.mean(brute, axis=0), rtol=0, atol=1e-5)
    # other inputs: their own mean
    np.testing.assert_allclose(content_free_prior(model, zh, ["N/A"]), one_by_one[0],
                               rtol=0, atol=1e-6)


def test_content_free_prior_needs_an_input(tiny_gemma, zh):
    model, _ = tiny_gemma
    with pytest.raises(CalibrationError, match="no content-free inputs given"):
        content_free_prior(model, zh, [])


def test_collate_right_aligns_label_tokens():
    batch = collate_training([{"input_ids": [5, 6, 7], "labels": [8], "weight": 2.0},
                              {"input_ids": [5, 6, 7, 9, 10], "labels": [11, 12]}], pad_id=0)
    assert batch["input_ids"].tolist() == [[0, 0, 5, 6, 7], [5, 6, 7, 9, 10]]
    assert batch["attention_mask"].tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert batch["position_ids"].tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    assert batch["labels"].tolist() == [[IGNORE_INDEX, 8], [11, 12]]
    assert batch["weight"].tolist() == [2.0, 1.0]


def test_label_token_loss_is_weighted_cross_entropy_of_label_tokens(tiny_gemma, zh):
    model, tokenizer = tiny_gemma
    features = [{**zh.training_example(t, k), "weight": w}
                for t, k, w in zip(TEXTS[:3], [0, 2, 1], [1.0, 3.0, 0.5], strict=True)]
    batch = collate_training(features, tokenizer.pad_token_id)
    with torch.inference_mode():
        loss = label_token_loss(model, batch)
        num = den = 0.0
        for f in features:
            seq = torch.tensor([f["input_ids"]])
            logp = model(input_ids=seq).logits[0].float().log_softmax(-1)
            n = len(f["labels"])
            for j, t in enumerate(f["labels"]):
                num += -logp[len(f["input_ids"]) - n + j, t].item() * f["weight"]
                den += f["weight"]
    assert loss.item() == pytest.approx(num / den, abs=1e-4)


def test_training_loss_puts_only_label_tokens_through_the_lm_head(tiny_gemma, zh):
    """With autograd on (training), the LM head gets one contiguous (N, hidden) matrix of
    the N supervised positions, not a strided (B, L, hidden) view (which autograd
    multiplies by the vocabulary once per example), and the loss is the inference one."""
    model, tokenizer = tiny_gemma
    features = [zh.training_example(t, k) for t, k in zip(TEXTS[:3], [0, 2, 1], strict=True)]
    batch = collate_training(features, tokenizer.pad_token_id)
    seen = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda module, args, out: seen.append((tuple(args[0].shape), args[0].is_contiguous())))
    try:
        loss = label_token_loss(model, batch)
        loss.backward()
        with torch.inference_mode():
            expected = label_token_loss(model, batch)
    finally:
        hook.remove()
        model.zero_grad(set_to_none=True)
    n_label_tokens = sum(len(f["labels"]) for f in features)
    assert [len(ids) for ids in zh.label_ids] == [2, 2, 1]
    assert n_label_tokens == 5
    assert seen == [((5, model.config.hidden_size), True)] * 2
    assert loss.item() == pytest.approx(expected.item(), abs=1e-5)


def test_training_prefix_stops_before_every_supervised_position():
    def prefix(*examples, window=None):
        return training_prefix(collate_training(
            [{"input_ids": ids, "labels": labels} for ids, labels in examples], pad_id=0),
            window)

    assert prefix(([2, 7, 8, 9], [5]), ([2, 7, 8, 3, 4], [6])) == 3
    # the same text twice: up to the position that predicts the label word's first token
    assert prefix(([2, 7, 8, 9], [9, 5]), ([2, 7, 8, 9], [9, 6])) == 2
    assert prefix(([2, 7, 8], [5]), ([2, 4, 8], [5])) == 1      # BOS alone
    assert prefix(([5, 7], [5]), ([2, 7], [5])) == 0
    assert prefix(([2, 7, 8, 9], [5]),) == 0                    # one example: nothing to share
    # a sliding window narrower than the batch (5 columns) could lose the shared start
    assert prefix(([2, 7, 8, 9], [5]), ([2, 7, 8, 3, 4], [6]), window=4) == 0
    assert prefix(([2, 7, 8, 9], [5]), ([2, 7, 8, 3, 4], [6]), window=5) == 3


@pytest.mark.integration
def test_template_start_is_bos_and_the_instruction(gemma, params):
    _, tokenizer = gemma
    zh = PromptEncoder.create(tokenizer, ZH_TEMPLATE, ZH_WORDS, max_length=96)
    assert zh.template_start() == 25
    prompt = params.prompt
    default = PromptEncoder.create(tokenizer, prompt.template,
                                   [prompt.label_words[label] for label in params.base.labels],
                                   prompt.max_length)
    assert default.template_start() == 18    # up to "Tweet:"; the space joins the text


@pytest.fixture(scope="module")
def lora_gemma(tiny_gemma):
    """A float64 copy of the tiny Gemma with LoRA (dropout 0) on all seven projections, B drawn
    at random rather than zero, so that every LoRA weight gets a gradient. float64, so
    that a comparison within 1e-5 tests the computation, not float32's summation order
    (which alone moves gradients of size 3 by about 1e-5)."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(copy.deepcopy(tiny_gemma[0]).double(), LoraConfig(
        task_type="CAUSAL_LM", r=8, lora_alpha=16, lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj"]))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.copy_(torch.randn(weight.shape, generator=generator,
                                         dtype=weight.dtype) * 0.02)
    return model.train()


def _loss_and_lora_grads(model, batch, share_prefix):
    model.zero_grad(set_to_none=True)
    loss = label_token_loss(model, batch, share_prefix=share_prefix)
    loss.backward()
    grads = {name: w.grad.clone() for name, w in model.named_parameters() if w.requires_grad}
    model.zero_grad(set_to_none=True)
    return loss.item(), grads


@pytest.mark.parametrize(("template", "shared"), [(ZH_TEMPLATE, 52), ("{text}\n情绪：", 1)],
                         ids=["instruction", "bos-only"])
def test_shared_prefix_training_equals_the_unshared_loss_and_lora_gradients(
        tiny_gemma, lora_gemma, template, shared):
    """With dropout 0 the shared start is the same computation: the loss and every LoRA
    gradient equal the plain path's, with two-token Chinese label words in the batch,
    and when the examples share BOS alone. With the instruction, the shared start (52
    tokens) is longer than the rest of every example, where the attention mask once
    covered too few of the shared tokens' columns (found on the tiny Gemma: the loss
    was 0.01 off)."""
    _, tokenizer = tiny_gemma
    encoder = PromptEncoder.create(tokenizer, template, ZH_WORDS, max_length=96)
    features = [{**encoder.training_example(t, k), "weight": w}
                for t, k, w in zip(TEXTS, [0, 1, 2, 0], [1.0, 2.0, 0.5, 1.0], strict=True)]
    batch = collate_training(features, tokenizer.pad_token_id)
    assert training_prefix(batch) == shared
    base = lora_gemma.get_base_model()
    calls, hook = _counting_calls(base)
    try:
        loss, grads = _loss_and_lora_grads(lora_gemma, batch, share_prefix=True)
        plain_loss, plain_grads = _loss_and_lora_grads(lora_gemma, batch, share_prefix=False)
    finally:
        hook.remove()
    width = batch["input_ids"].shape[1]
    assert calls == [(1, shared), (4, width - shared), (4, width)]
    assert loss == pytest.approx(plain_loss, abs=1e-5)
    layers = lora_gemma.config.num_hidden_layers
    assert len(grads) == layers * 7 * 2 and grads.keys() == plain_grads.keys()
    for name, grad in grads.items():
        assert grad.abs().max() > 0, name
        torch.testing.assert_close(grad, plain_grads[name], atol=1e-5, rtol=0, msg=name)


def test_no_shared_training_prefix_when_the_batch_outgrows_the_sliding_window(
        tiny_gemma, lora_gemma, zh, monkeypatch):
    _, tokenizer = tiny_gemma
    batch = collate_training([zh.training_example(t, k) for t, k in zip(TEXTS, [0, 1, 2, 0],
                                                                         strict=True)],
                             tokenizer.pad_token_id)
    width = batch["input_ids"].shape[1]
    monkeypatch.setattr(lora_gemma.config, "sliding_window", width - 1)
    base = lora_gemma.get_base_model()
    calls, hook = _counting_calls(base)
    try:
        with torch.inference_mode():
            label_token_loss(lora_gemma, batch, share_prefix=True)
    finally:
        hook.remove()
    assert calls == [(4, width)]


# How far a probability may move between batchings of the same rows: lorasent reproduce's
# default tolerance (issue 50). Measured on the packaged Gemma 3 270M in fp32 on the CPU:
# docs/reproducibility.md, "Batch sizes".
@pytest.mark.parametrize("lm", ["tiny_gemma",
                                pytest.param("gemma", marks=pytest.mark.integration)])
def test_batch_size_and_order_do_not_change_labels_or_probabilities(lm, request):
    """Batch invariance: 32 tweets of the packaged corpus (34 to 193 characters)
    scored at batch sizes 1, 8 and 32 and, at 8, in a shuffled order give the same labels
    and probabilities within reproduce's tolerance: batches differ in their padding and
    their shared prompt start, and a padded row must not see its padding."""
    from lorasent.review.diffs import TOLERANCE
    from lorasent.stages.fetch import read_source

    model, tokenizer = request.getfixturevalue(lm)
    encoder = PromptEncoder.create(
        tokenizer, "Classify the sentiment of the tweet as negative, neutral or positive.\n"
        "Tweet: {text}\nSentiment:", [" negative", " neutral", " positive"], max_length=128)
    rows, _ = read_source("packaged:tweets-en", text_column="text", label_column="label",
                          encoding="utf-8", hf_split="train")
    texts = [r["text"] for r in rows[:32]]
    one = probabilities(score_texts(model, encoder, texts, batch_size=1))
    runs: dict[int | str, np.ndarray] = {
        size: probabilities(score_texts(model, encoder, texts, batch_size=size))
        for size in (8, 32)}
    order = np.random.default_rng(0).permutation(len(texts))
    shuffled = probabilities(score_texts(model, encoder, [texts[i] for i in order], 8))
    runs["shuffled"] = shuffled[np.argsort(order)]
    for name, probs in runs.items():
        assert (probs.argmax(axis=1) == one.argmax(axis=1)).all(), name
        assert np.abs(probs - one).max() <= TOLERANCE, (name, np.abs(probs - one).max())
