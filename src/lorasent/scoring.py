"""Label scoring: how a model classifies a text, in either mode.

Two encoders share one interface (``encode``, ``training_example``, ``collate``,
``loss``, ``score``), so that baseline, train, evaluate and predict never branch on the
mode: :class:`PromptEncoder` for the generative mode (below) and :class:`TextEncoder`
for the sequence-classification mode (a head on the model, PEFT ``SEQ_CLS``). Which
mode takes which (:data:`ENCODERS`, :func:`make_encoder`), and all else that differs
between the modes, is in the table of modes beside this module, :data:`lorasent.modes.MODES`.

Generative mode: a causal LM classifies a text by scoring label words.

A class's score is the summed log-probability of *all* tokens of its label word after
the prompt::

    score(c | x) = sum_j log p(w_c[j] | prompt(x), w_c[:j])

so label words that split into several tokens (Gemma splits 消极 and 中性 in two) and
label words that share their first token are told apart. The prediction is the argmax;
``softmax(scores)`` gives each class's probability. No text is generated and no string
is matched (seed 000's label-map bug came from that).

Cost: a batch of prompts is encoded once, whatever the number of classes. The tokens
that every prompt of the batch starts with (BOS and the template's instruction) go
through the model once, and their KV cache is repeated for each prompt (prefix
caching; causal attention makes it exact). One forward pass over the rest of the
prompts, left-padded, returns the log-probabilities of every label word's first token,
taken from the last position only (``logits_to_keep=1``), never from the full
vocabulary at every position. Only when some label words have more tokens, the
prompts' KV cache is repeated once per distinct continuation and a second, short pass
scores the remaining tokens.

Contextual calibration (Zhao et al. 2021, "Calibrate Before Use", ICML) corrects a
model's prior over the label words, for the calibrated zero-shot baseline:
:func:`content_free_prior` scores content-free inputs (``"N/A"``, ``""``, ``"[MASK]"``) in
place of the text, and :func:`contextual_calibration` divides each class's probability by
theirs.

Training uses the same encoding: the input is ``prompt + w_c[:-1]`` and the loss is the
cross-entropy of the label tokens only, with logits computed at those positions only.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from lorasent.errors import LorasentError
from lorasent.modes import Mode

IGNORE_INDEX = -100


class PromptError(LorasentError, ValueError):
    """Label words that cannot be scored apart, or a prompt with no room for text."""


def label_token_ids(tokenizer: PreTrainedTokenizerBase,
                    label_words: Sequence[str]) -> list[tuple[int, ...]]:
    """Token ids of each label word, as the tokenizer splits it after the prompt.

    Two words may share their first tokens (时政 / 时差): the tokens after those tell them
    apart. A word whose tokens are all the start of another's is refused: a class's score
    sums the log-probabilities of its word's tokens, so the longer word scores the
    shorter one's score plus terms below 0, and its class is never predicted (``' 1'``
    and ``' 10'``, ``▁ 1`` and ``▁ 1 0`` for Gemma).

    Raises:
        PromptError: a word encodes to no token, two words to the same tokens, or one
            word's tokens start another's (the message names both words, their tokens
            and ids, and how to tell them apart).
    """
    ids = [tuple(tokenizer(word, add_special_tokens=False)["input_ids"]) for word in label_words]
    for word, toks in zip(label_words, ids, strict=True):
        if not toks:
            raise PromptError(f"prompt.label_words: {word!r} encodes to no token")
    seen: dict[tuple[int, ...], str] = {}
    for word, toks in zip(label_words, ids, strict=True):
        if toks in seen:
            raise PromptError(f"prompt.label_words: {seen[toks]!r} and {word!r} encode to the "
                              f"same tokens {_tokens(tokenizer, toks)}; choose words that "
                              "differ")
        seen[toks] = word
    prefixes = [(short, long) for short, long in itertools.permutations(range(len(ids)), 2)
                if len(ids[short]) < len(ids[long])
                and ids[long][:len(ids[short])] == ids[short]]
    if prefixes:
        words = list(label_words)
        found = "; ".join(f"{words[s]!r} {_tokens(tokenizer, ids[s])} is the start of "
                          f"{words[t]!r} {_tokens(tokenizer, ids[t])}" for s, t in prefixes)
        never = " and ".join(dict.fromkeys(repr(words[t]) for _, t in prefixes))
        s, t = prefixes[0]
        raise PromptError(
            f"prompt.label_words: {found}, so {never} can never be predicted (a word's score "
            "sums the log-probabilities of its tokens, and each token after the shorter "
            "word's lowers it). Give each label word a distinct first token, or end every "
            f"label word with a delimiter such as a full stop or newline (e.g. "
            f"{words[s] + '.'!r} and {words[t] + '.'!r})")
    return ids


def _tokens(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int]) -> str:
    """``(tokens ['▁', '1'] ids [236743, 236770])``: a word's tokens, for a message."""
    return f"(tokens {tokenizer.convert_ids_to_tokens(list(ids))} ids {list(ids)})"


@dataclass(frozen=True)
class PromptEncoder:
    """Turns a text into prompt token ids within the token budget.

    Attributes:
        tokenizer: the base model's tokenizer (adds BOS for Gemma).
        template: the prompt with ``{text}`` where the text goes.
        label_ids: token ids of each class's label word, in class-id order.
        max_length: most tokens of prompt plus label word, in tokens.
        share_prefix: the training loss runs the tokens that a batch's examples share
            once (``train.share_prefix``; see :func:`label_token_loss`).
    """

    tokenizer: PreTrainedTokenizerBase
    template: str
    label_ids: tuple[tuple[int, ...], ...]
    max_length: int
    share_prefix: bool = False

    @classmethod
    def create(cls, tokenizer: PreTrainedTokenizerBase, template: str,
               label_words: Sequence[str], max_length: int) -> PromptEncoder:
        """Raises PromptError: label words not told apart, or no room left for text."""
        encoder = cls(tokenizer, template, tuple(label_token_ids(tokenizer, label_words)),
                      max_length)
        empty = len(encoder._render(""))
        if empty + 1 > encoder.prompt_budget:
            raise PromptError(
                f"prompt.max_length is {max_length} tokens but the template alone takes "
                f"{empty} and the longest label word {encoder.longest_label}; raise "
                "prompt.max_length")
        return encoder

    @classmethod
    def build(cls, tokenizer: PreTrainedTokenizerBase, *, num_labels: int, max_length: int,
              template: str, label_words: Sequence[str]) -> PromptEncoder:
        """:func:`make_encoder`'s constructor: :meth:`create` (``num_labels`` is
        ``len(label_words)``)."""
        return cls.create(tokenizer, template, label_words, max_length)

    @property
    def longest_label(self) -> int:
        return max(len(ids) for ids in self.label_ids)

    @property
    def prompt_budget(self) -> int:
        """Most prompt tokens, leaving room for the longest label word."""
        return self.max_length - self.longest_label

    def _render(self, text: str) -> list[int]:
        return self.tokenizer(self.template.replace("{text}", text))["input_ids"]

    def encode(self, text: str) -> list[int]:
        """Prompt token ids (with BOS) for ``text``; only the text is ever truncated.

        Tokens are cut from the end of the text until the prompt fits
        :attr:`prompt_budget`; the template (and so the answer slot) stays whole.
        """
        ids = self._render(text)
        if len(ids) <= self.prompt_budget:
            return ids
        text_ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        keep = max(len(text_ids) - (len(ids) - self.prompt_budget), 0)
        while True:
            kept = self.tokenizer.decode(text_ids[:keep])
            assert isinstance(kept, str)  # one sequence decodes to one string, a batch to a list
            ids = self._render(kept)
            if len(ids) <= self.prompt_budget or keep == 0:
                return ids
            keep = max(keep - max(len(ids) - self.prompt_budget, 1), 0)

    def training_example(self, text: str, label_id: int) -> dict[str, list[int]]:
        """``input_ids`` = prompt + label word minus its last token; ``labels`` = the word."""
        word = list(self.label_ids[label_id])
        return {"input_ids": self.encode(text) + word[:-1], "labels": word}

    def template_start(self) -> int:
        """Tokens that prompts start with whatever their text (BOS and the template up to
        ``{text}``): those that the prompts of two words share. A word can take the
        template's last characters into its first token (Gemma joins the space after
        ``Tweet:`` to the word); a batch's prompts may share more (texts starting alike)."""
        return shared_prefix([self.encode("a"), self.encode("b")])

    @property
    def num_labels(self) -> int:
        return len(self.label_ids)

    def score(self, model: torch.nn.Module, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """(B, K) float32 summed label-word log-probabilities; see :func:`score_batch`."""
        return score_batch(model, prompts, self.label_ids, self.tokenizer.pad_token_id)

    def collate(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        return collate_training(features, self.tokenizer.pad_token_id)

    def loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return label_token_loss(model, batch, share_prefix=self.share_prefix)


@dataclass(frozen=True)
class TextEncoder:
    """Sequence-classification mode: the text alone, no prompt, into a classification head.

    The head (``AutoModelForSequenceClassification``) reads the last real token of a
    decoder such as Gemma, or the ``[CLS]`` token of an encoder such as MiniLM. Batches
    are padded on the tokenizer's ``padding_side`` with position ids that count real
    tokens only, so a text's logits do not depend on its batch (tested both sides).

    Attributes:
        tokenizer: the base model's tokenizer (adds BOS, or [CLS] ... [SEP]).
        max_length: most tokens per text, special tokens included; longer texts are cut
            from their end (``truncation=True``).
        num_labels: K, the head's outputs.
    """

    tokenizer: PreTrainedTokenizerBase
    max_length: int
    num_labels: int

    @classmethod
    def build(cls, tokenizer: PreTrainedTokenizerBase, *, num_labels: int, max_length: int,
              template: str, label_words: Sequence[str]) -> TextEncoder:
        """:func:`make_encoder`'s constructor; the text alone, so no template or words."""
        return cls(tokenizer, max_length, num_labels)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, at most ``max_length``."""
        return self.tokenizer(text, truncation=True, max_length=self.max_length)["input_ids"]

    def training_example(self, text: str, label_id: int) -> dict[str, Any]:
        return {"input_ids": self.encode(text), "labels": label_id}

    def _pad(self, seqs: Sequence[Sequence[int]], device: torch.device | str = "cpu"
             ) -> dict[str, torch.Tensor]:
        return pad_batch(seqs, self.tokenizer.pad_token_id, device,
                        side=self.tokenizer.padding_side)

    def score(self, model: torch.nn.Module, seqs: Sequence[Sequence[int]]) -> torch.Tensor:
        """(B, K) float32 class logits of the head; softmax gives the probabilities."""
        return model(**self._pad(seqs, _device_of(model))).logits.float()

    def collate(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Padded inputs, (B,) int64 class ids ``labels`` and (B,) float32 ``weight``."""
        batch = self._pad([f["input_ids"] for f in features])
        batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.long)
        batch["weight"] = torch.tensor([float(f.get("weight", 1.0)) for f in features])
        return batch

    @staticmethod
    def loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Weighted cross-entropy of the head's logits: ``sum(w * nll) / sum(w)``."""
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits.float()
        nll = torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="none")
        weight = batch["weight"].to(nll.dtype)
        return (nll * weight).sum() / weight.sum()


Encoder = PromptEncoder | TextEncoder
# The encoders by class name, as a mode names its own (``lorasent.modes.Mode.encoder``).
ENCODERS: dict[str, type[PromptEncoder] | type[TextEncoder]] = {
    cls.__name__: cls for cls in (PromptEncoder, TextEncoder)}


def make_encoder(mode: Mode, tokenizer: PreTrainedTokenizerBase, *, num_labels: int,
                 max_length: int, template: str = "",
                 label_words: Sequence[str] | None = None) -> Encoder:
    """The encoder of ``mode`` (its ``encoder``, from :data:`ENCODERS`): a
    :class:`PromptEncoder` (template and label words in class-id order) or a
    :class:`TextEncoder` (the text alone, into a head of ``num_labels`` outputs).

    Raises:
        PromptError: label words not told apart, or no room for the text.
    """
    return ENCODERS[mode.encoder].build(tokenizer, num_labels=num_labels,
                                        max_length=max_length, template=template,
                                        label_words=label_words or [])


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int,
             device: torch.device | str = "cpu", side: str = "left") -> dict[str, torch.Tensor]:
    """Pad token sequences into a batch, on the left unless ``side="right"``.

    Returns:
        ``input_ids`` and ``attention_mask`` (int64, shape (B, T)), and ``position_ids``
        (int64, (B, T)) counting real tokens only, so a padded row gets the same
        positions (and logits) as the unpadded sequence, whichever side is padded.
    """
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            cols = slice(width - len(s), width) if side == "left" else slice(0, len(s))
            input_ids[i, cols] = torch.as_tensor(s, dtype=torch.long)
            mask[i, cols] = 1
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": input_ids.to(device), "attention_mask": mask.to(device),
            "position_ids": position_ids.to(device)}


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def shared_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Number of leading tokens that all ``prompts`` share, short of each one's last
    token (whose logits are scored)."""
    shortest = min(len(p) for p in prompts)
    n = 0
    while n < shortest - 1 and all(p[n] == prompts[0][n] for p in prompts):
        n += 1
    return n


def score_batch(model: torch.nn.Module, prompts: Sequence[Sequence[int]],
                label_ids: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Summed log-probability of each label word after each prompt.

    The prompts' shared leading tokens (:func:`shared_prefix`) are run once and their KV
    cache repeated B times; the rest of each prompt follows, left-padded, so the padding
    sits between the shared part and the rest, masked, with positions counting real
    tokens only. Not done for a model with sliding-window attention (Gemma 3) when a
    prompt plus label word could be longer than the window, because the window counts
    padding too.

    Args:
        model: a causal LM (or a peft model around one) accepting ``logits_to_keep``.
        prompts: B prompt token-id sequences (any lengths).
        label_ids: K label words as token ids.
        pad_id: the tokenizer's pad token id.

    Returns:
        float32 tensor of shape (B, K) on the model's device.
    """
    device = _device_of(model)
    multi = sorted({tuple(ids[:-1]) for ids in label_ids if len(ids) > 1})
    window = getattr(model.config, "sliding_window", None)
    longest = max(len(p) for p in prompts) + max(len(ids) for ids in label_ids)
    shared = shared_prefix(prompts) if window is None or longest <= window else 0
    cache = None
    if shared:
        cache = model(input_ids=torch.as_tensor([prompts[0][:shared]], device=device),
                      use_cache=True, logits_to_keep=1).cache
        cache.batch_repeat_interleave(len(prompts))
    batch = pad_batch([p[shared:] for p in prompts], pad_id, device)
    batch["attention_mask"] = torch.cat([torch.ones((len(prompts), shared), dtype=torch.long,
                                                    device=device), batch["attention_mask"]], -1)
    batch["position_ids"] += shared
    out = model(**batch, cache=cache, use_cache=bool(multi), logits_to_keep=1)
    first = out.logits[:, -1].float().log_softmax(-1)
    scores = first[:, [ids[0] for ids in label_ids]].clone()
    if not multi:
        return scores

    # Continue every prompt with each distinct label prefix w[:-1], in one pass over the
    # prompts' cache repeated U times (row b * U + u holds prompt b, prefix u).
    n_prompts, n_prefix, width = len(prompts), len(multi), max(len(p) for p in multi)
    cache = out.cache
    cache.batch_repeat_interleave(n_prefix)
    cont = torch.full((n_prefix, width), pad_id, dtype=torch.long)
    cont_mask = torch.zeros((n_prefix, width), dtype=torch.long)
    for u, prefix in enumerate(multi):
        cont[u, :len(prefix)] = torch.as_tensor(prefix)
        cont_mask[u, :len(prefix)] = 1
    cont = cont.repeat(n_prompts, 1).to(device)
    cont_mask = cont_mask.repeat(n_prompts, 1).to(device)
    lengths = batch["attention_mask"].sum(-1).repeat_interleave(n_prefix)
    out2 = model(input_ids=cont,
                 attention_mask=torch.cat(
                     [batch["attention_mask"].repeat_interleave(n_prefix, 0), cont_mask], -1),
                 position_ids=lengths[:, None] + torch.arange(width, device=device),
                 cache=cache, use_cache=False)
    logp = out2.logits.float().log_softmax(-1).view(n_prompts, n_prefix, width, -1)
    for k, ids in enumerate(label_ids):
        if len(ids) > 1:
            u = multi.index(tuple(ids[:-1]))
            rest = torch.as_tensor(ids[1:], device=device)
            steps = torch.arange(len(ids) - 1, device=device)
            scores[:, k] += logp[:, u, steps, rest].sum(-1)
    return scores


@torch.inference_mode()
def score_texts(model: torch.nn.Module, encoder: Encoder, texts: Sequence[str],
                batch_size: int, desc: str = "scoring") -> np.ndarray:
    """Class scores for many texts, batched by similar length, in input order.

    In a run of several processes (``lorasent.launch``) every process forms the same
    length-sorted batches, scores every P-th of them (P processes) and the scores are
    gathered, so each text is scored in the batch a single process would put it in.

    Returns:
        float32 array of shape (N, K), on every process: summed label-word
        log-probabilities (generative) or head logits (seq_cls); in both, argmax is the
        prediction and softmax gives the probabilities.
    """
    from lorasent.launch import gather, rank_and_world

    rank, world = rank_and_world()
    inputs = [encoder.encode(t) for t in texts]
    order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i]))
    batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    mine = []
    for idx in tqdm(batches[rank::world], desc=desc, unit="batch",
                    disable=None if rank == 0 else True):  # None: only on a terminal
        mine.append((idx, encoder.score(model, [inputs[i] for i in idx]).cpu().numpy()))
    scores = np.zeros((len(inputs), encoder.num_labels), dtype=np.float32)
    for part in gather(mine):
        for idx, batch_scores in part:
            scores[idx] = batch_scores
    return scores


# Zhao et al. 2021, "Calibrate Before Use: Improving Few-Shot Performance of Language
# Models" (ICML), section 4: inputs that say nothing, put in the prompt in place of the text.
CONTENT_FREE_INPUTS = ("N/A", "", "[MASK]")
CALIBRATION_METHOD = (
    "contextual calibration (Zhao et al. 2021, 'Calibrate Before Use: Improving Few-Shot "
    "Performance of Language Models', ICML): each class's zero-shot probability divided by "
    "its mean probability over the content-free inputs put in the prompt in place of the "
    "text (W = diag(p_cf)^-1, b = 0), prediction the argmax")


class CalibrationError(LorasentError, ValueError):
    """A content-free prior that cannot calibrate the scores it is given."""


@torch.inference_mode()
def content_free_prior(model: torch.nn.Module, encoder: Encoder,
                       inputs: Sequence[str] = CONTENT_FREE_INPUTS) -> np.ndarray:
    """The model's prior over the classes: p_cf of contextual calibration.

    Each content-free input (default :data:`CONTENT_FREE_INPUTS`: ``"N/A"``, ``""`` and
    ``"[MASK]"``, Zhao et al. 2021, section 4) goes through ``encoder.encode`` in place of
    a text (the empty one gives the template with nothing where ``{text}`` was) and is
    scored alone, a batch of one, by ``encoder.score``, as :func:`score_texts` scores a
    text; p_cf is the mean over the inputs of the softmax of their scores, renormalised
    to sum to 1. Every process of a launched run computes it whole (no gathering).

    Returns:
        float64 array of shape (K,), positive, summing to 1, in class-id order.

    Raises:
        CalibrationError: ``inputs`` is empty.
    """
    if not inputs:
        raise CalibrationError("content_free_prior: no content-free inputs given; pass at "
                               f"least one, e.g. {CONTENT_FREE_INPUTS}")
    probs = [_softmax(encoder.score(model, [encoder.encode(text)]).cpu().numpy()[0])
             for text in inputs]
    prior = np.mean(probs, axis=0)
    return prior / prior.sum()


def _softmax(row: np.ndarray) -> np.ndarray:
    """Softmax of one (K,) row of scores, in float64."""
    z = np.exp(np.asarray(row, dtype=np.float64) - np.max(row))
    return z / z.sum()


def contextual_calibration(scores: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """Calibrated log-scores: ``log_softmax(scores) - log(prior)``, row by row.

    Zhao et al. 2021 ("Calibrate Before Use", ICML), section 4, with W = diag(p_cf)^-1
    and b = 0: each class's probability divided by its content-free prior. The argmax of
    a row is the calibrated prediction, its softmax the calibrated probabilities (the
    quotients renormalised).

    Args:
        scores: (N, K) class scores of :func:`score_texts` (any float dtype).
        prior: (K,) p_cf of :func:`content_free_prior`, every entry above 0.

    Returns:
        float64 array of shape (N, K).

    Raises:
        CalibrationError: ``prior`` does not have K entries, or has one that is not a
            positive finite number.
    """
    z = np.asarray(scores, dtype=np.float64)
    p = np.asarray(prior, dtype=np.float64)
    if z.ndim != 2 or p.shape != (z.shape[1],):
        raise CalibrationError(f"contextual_calibration: scores of shape {z.shape} need a "
                               f"prior of shape ({z.shape[-1]},), got {p.shape}")
    if not np.all(np.isfinite(p) & (p > 0)):
        raise CalibrationError(f"contextual_calibration: the prior {p.tolist()} has an entry "
                               "that is not a positive number; every class needs a prior "
                               "probability above 0")
    shifted = z - z.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return log_probs - np.log(p)


def collate_training(features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    """Batch training examples: left-padded inputs, (B, L) label targets, (B,) weights.

    ``labels[i]`` holds example i's label-word ids right-aligned, ``IGNORE_INDEX``
    elsewhere, so that it lines up with the last L positions of the left-padded input.
    """
    batch = pad_batch([f["input_ids"] for f in features], pad_id)
    width = max(len(f["labels"]) for f in features)
    labels = torch.full((len(features), width), IGNORE_INDEX, dtype=torch.long)
    for i, f in enumerate(features):
        labels[i, width - len(f["labels"]):] = torch.as_tensor(f["labels"])
    batch["labels"] = labels
    batch["weight"] = torch.tensor([float(f.get("weight", 1.0)) for f in features])
    return batch


def training_prefix(batch: dict[str, torch.Tensor], window: int | None = None) -> int:
    """Number of leading tokens that every example of a left-padded training batch shares
    (BOS and the template's instruction), short of each one's supervised positions.

    0 for a batch of one example, and when ``window`` (a sliding-window model's, Gemma
    3's) is smaller than the batch's width: the shared layout puts the padding between
    the shared tokens and the rest, and the window counts padding too, so a token could
    lose sight of the shared start.

    Args:
        batch: ``input_ids``, ``attention_mask`` (int64, (B, T), left-padded) and
            ``labels`` (int64, (B, L), right-aligned) of :func:`collate_training`.
        window: the model's ``config.sliding_window``, in tokens, or None.
    """
    ids, mask = batch["input_ids"], batch["attention_mask"]
    width = ids.shape[1]
    if len(ids) < 2 or window is not None and width > window:
        return 0
    lengths = mask.sum(-1)
    # Row i's real tokens moved to the start; a position may be shared when it lies
    # before every row's supervised ones (the logits of those come from the rest).
    columns = torch.arange(width, device=ids.device)
    starts = (width - lengths)[:, None]
    aligned = ids.gather(1, (columns + starts).clamp(max=width - 1))
    limit = int((lengths - (batch["labels"] != IGNORE_INDEX).sum(-1)).min())
    same = (aligned == aligned[:1]).all(0)[:max(limit, 0)]
    return int(same.cumprod(0).sum())


def label_token_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor],
                     share_prefix: bool = False) -> torch.Tensor:
    """Weighted cross-entropy of the label-word tokens only.

    Logits are computed only at the N supervised positions of the last L (L = longest
    label word in the batch), never over the full vocabulary at every position. The
    positions go to the model as a boolean ``logits_to_keep`` mask (transformers'
    ``slice_logits_to_keep``), which gathers the hidden states into one contiguous
    (N, hidden) matrix, so the LM head is one matrix product. An integer
    ``logits_to_keep=L`` leaves a strided view that autograd multiplies against the whole
    vocabulary once per example (a batched product): 13% of a step on 2 CPU cores.

    With ``share_prefix``, the S tokens that every example starts with
    (:func:`training_prefix`: BOS and the template's instruction) go through the model
    once, as a batch of 1 with autograd on; their key/value cache is repeated for the B
    examples and the rest of each example runs on top of it, left-padded after the
    shared part, with positions counting real tokens only (as :func:`score_batch` does).
    Causal attention makes this the same computation: the shared tokens' gradients are
    the sum of the B examples'. What differs is only that a dropout mask (LoRA's
    ``lora_dropout``) on the shared tokens is drawn once for the batch rather than per
    example. With no shared tokens beyond what fits (S = 0) it is the plain path.

    Each token's loss is weighted by its example's ``weight`` (class weighting); the
    result is ``sum(w * nll) / sum(w)`` over the batch's label tokens.

    Returns:
        scalar float32 tensor.
    """
    labels, weight = batch["labels"], batch["weight"]
    supervised = labels != IGNORE_INDEX
    ids, mask, positions = batch["input_ids"], batch["attention_mask"], batch["position_ids"]
    shared = 0
    if share_prefix:
        from accelerate.utils import extract_model_from_parallel

        # Trainer hands over the model wrapped for data parallelism in a launched run
        config = extract_model_from_parallel(model).config
        shared = training_prefix(batch, getattr(config, "sliding_window", None))
    cache = None
    if shared:
        width = ids.shape[1]
        start = width - int(mask[0].sum())
        prefix = ids[:1, start:start + shared]
        cache = model(input_ids=prefix, position_ids=positions[:1, start:start + shared],
                      use_cache=True, logits_to_keep=torch.zeros_like(prefix, dtype=torch.bool)
                      ).cache
        cache.batch_repeat_interleave(len(ids))
        # Drop each row's first S real tokens: column j of the rest is column j of the
        # row while in its padding, column j + S after.
        columns = torch.arange(width - shared, device=ids.device)
        index = columns + shared * (columns >= (width - mask.sum(-1))[:, None])
        ids, mask, positions = (t.gather(1, index) for t in (ids, mask, positions))
        # the shared tokens' columns, S of them however narrow the rest is
        mask = torch.cat([mask.new_ones((len(ids), shared)), mask], -1)
    keep = torch.zeros_like(ids, dtype=torch.bool)
    keep[:, -labels.shape[1]:] = supervised
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                logits_to_keep=keep, cache=cache, use_cache=False)
    logp = out.logits.float().log_softmax(-1)  # (N, vocab), supervised tokens in row order
    nll = -logp.gather(-1, labels[supervised].unsqueeze(-1)).squeeze(-1)
    w = weight.to(logp.dtype).unsqueeze(-1).expand_as(labels)[supervised]
    return (nll * w).sum() / w.sum()
