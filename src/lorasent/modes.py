"""The modes of ``train.mode``: what differs between them, in one table.

A mode is how a model classifies a text. ``generative``: a causal LM scores each class's
label word after a prompt (:class:`lorasent.scoring.PromptEncoder`; seed 000's way).
``seq_cls``: a classification head of K outputs on the model reads the text alone
(:class:`lorasent.scoring.TextEncoder`, PEFT ``SEQ_CLS``; seed 002's way).

:data:`MODES` holds, per mode, every value the stages and tools need that depends on the
mode: the peft task type, how the base model is loaded, its encoder, what the input
depends on, the fields of ``lorasent.json`` it writes, whether there is a zero-shot
baseline (and why not) and the exported model's card. The code looks its mode up here
and never compares ``train.mode`` with a mode's name (tests/test_modes.py checks both),
so that a third mode is one entry here (its name in :data:`ModeName` too) and its tests,
with, if it scores texts another way, its encoder in :mod:`lorasent.scoring`.

Plain values only, no torch: params.py and contracts.py (read by the review commands,
which run without torch) take the mode names from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# The values of ``train.mode`` and of the records' ``mode``: the keys of MODES.
ModeName = Literal["generative", "seq_cls"]


@dataclass(frozen=True)
class Mode:
    """What one mode is made of.

    Attributes:
        name: the ``train.mode`` value.
        peft_task_type: ``LoraConfig.task_type`` (peft's ``TaskType``) of the train stage.
        head: the base model is loaded with a new classification head of K outputs,
            initialised at random (``AutoModelForSequenceClassification``, labels in
            ``base.labels`` order; :func:`lorasent.modeling.load_seq_cls`), trained and
            saved with the adapter; else as a causal LM
            (:func:`lorasent.modeling.load_causal_lm`).
        encoder: the class of :mod:`lorasent.scoring` (:data:`lorasent.scoring.ENCODERS`)
            that turns texts into the model's input and scores the classes.
        input_fields: the fields of the adapter's record (``lorasent.json``) that the
            model's input depends on: params.yaml's prompt must give the same ones for an
            adapter to be scored with it, and ``label_words`` here needs one label word
            per class in ``prompt.label_words``.
        record_fields: the record's fields that this mode alone writes (the others are
            left out of ``lorasent.json``).
        no_zero_shot: None when the untrained model answers and the baseline stage scores
            it zero-shot; else why it cannot, in a few words, for a table's cell.
        no_zero_shot_note: the same in full: ``metrics/baseline.json``'s
            ``zero_shot_note``, and ``metrics/eval.json``'s ``reference_note`` when
            ``evaluate.reference: zero_shot`` falls back to the majority class.
        model_card: the exported model's README (``lorasent export``), a
            :meth:`str.format` template (:func:`lorasent.tools.predict.export_readme` gives
            the keys).
    """

    name: ModeName
    peft_task_type: str
    head: bool
    encoder: str
    input_fields: tuple[str, ...]
    record_fields: tuple[str, ...]
    no_zero_shot: str | None
    no_zero_shot_note: str | None
    model_card: str

    @property
    def zero_shot(self) -> bool:
        """Whether the baseline stage scores the untrained model zero-shot."""
        return self.no_zero_shot is None


GENERATIVE_CARD = """# {labels_str} classifier: LoRA merged into its base model

Exported by `lorasent export` from `{adapter}`: the LoRA adapter folded into the base
model `{base}` (SHA-256 {base_sha}), saved as safetensors with its tokenizer. It loads with
plain transformers, no peft and no lorasent.

{evaluation}

{calibration}

How it classifies: the text goes into the prompt below; each class's score is the summed
log-probability of all tokens of its label word after the prompt; the prediction is the
highest score, the probabilities the softmax of the scores divided by the temperature
(`lorasent.json` holds the template, the label words in class-id order and their token
ids).

Prompt template:

    {template}

Label words: {words}

```python
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

path = "."  # this folder: run the snippet from inside it, or set path to the folder
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path).eval()
template = {template}
labels = {labels}
label_words = {label_words}
temperature = {temperature}  # calibration.json's; 1.0: the raw softmax


@torch.inference_mode()
def classify(text):
    prompt = tok(template.replace("{{text}}", text))["input_ids"]
    scores = []
    for word in label_words:
        ids = tok(word, add_special_tokens=False)["input_ids"]
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].float()
        logp = logits.log_softmax(-1)
        scores.append(sum(logp[len(prompt) - 1 + j, t].item() for j, t in enumerate(ids)))
    probs = (torch.tensor(scores) / temperature).softmax(-1).tolist()
    return labels[max(range(len(labels)), key=scores.__getitem__)], dict(zip(labels, probs))


print(classify("I love this phone"))
```

(Texts longer than {max_length} tokens with the prompt should be cut from the end of the
text, never the template, as lorasent does.)
"""

SEQ_CLS_CARD = """# {labels_str} classifier: LoRA merged into its base model

Exported by `lorasent export` from `{adapter}`: the LoRA adapter folded into the base
model `{base}` (SHA-256 {base_sha}) with its trained classification head, saved as
safetensors with its tokenizer. It loads with plain transformers, no peft and no
lorasent; `config.json` holds `id2label` in lorasent's class order.

{evaluation}

{calibration}

How it classifies: the text alone (at most {max_length} tokens, cut from its end) goes
into the sequence-classification head; the prediction is the largest logit, the
probabilities the softmax of the logits divided by the temperature.

```python
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

path = "."  # this folder: run the snippet from inside it, or set path to the folder
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForSequenceClassification.from_pretrained(path).eval()
temperature = {temperature}  # calibration.json's; 1.0: the raw softmax


@torch.inference_mode()
def classify(text):
    inputs = tok(text, truncation=True, max_length={max_length}, return_tensors="pt")
    probs = (model(**inputs).logits[0].float() / temperature).softmax(-1)
    labels = [model.config.id2label[i] for i in range(len(probs))]
    return labels[int(probs.argmax())], dict(zip(labels, probs.tolist()))


print(classify("I love this phone"))
```
"""

MODES: dict[str, Mode] = {mode.name: mode for mode in (
    Mode(name="generative", peft_task_type="CAUSAL_LM", head=False, encoder="PromptEncoder",
         input_fields=("template", "label_words", "max_length"),
         record_fields=("label_words", "label_token_ids", "template"),
         no_zero_shot=None, no_zero_shot_note=None, model_card=GENERATIVE_CARD),
    Mode(name="seq_cls", peft_task_type="SEQ_CLS", head=True, encoder="TextEncoder",
         input_fields=("max_length",), record_fields=("head",),
         no_zero_shot="a fresh head has no zero-shot answer",
         no_zero_shot_note=("train.mode is seq_cls: the classification head is initialised "
                            "at random, so the untrained model has no zero-shot answer; the "
                            "majority class is the reference"),
         model_card=SEQ_CLS_CARD),
)}

# The mode of a call that names none (the stages' functions called from tests and tools):
# params.yaml's default.
DEFAULT_MODE: ModeName = "generative"


def no_zero_shot_cell(name: str | None) -> str:
    """``none (seq_cls: a fresh head has no zero-shot answer)``: what a table shows for
    the zero-shot baseline of a run of mode ``name`` that has none; ``none`` alone for a
    mode that has one (its scores were not found) or an unknown mode."""
    mode = MODES.get(name or "")
    if mode is None or mode.no_zero_shot is None:
        return "none"
    return f"none ({mode.name}: {mode.no_zero_shot})"
