"""An adapter is refused with another base model, other labels, prompt or mode."""

import json
from typing import Any

import pytest

from lorasent.contracts import AdapterRecord
from lorasent.modeling import AdapterMismatchError, check_adapter
from lorasent.params import PromptParams

LABELS = ["negative", "neutral", "positive"]
FIELDS: dict[str, Any] = {
    "mode": "generative", "labels": LABELS, "label2id": {"negative": 0, "neutral": 1,
                                                         "positive": 2},
    "template": "Tweet: {text}\nSentiment:", "label_words": [" negative", " neutral", " positive"],
    "max_length": 128, "base_model": {"source": "packaged:gemma-3-270m", "sha256": "a" * 64},
    "params": {}}
RECORD = AdapterRecord(**FIELDS)


@pytest.fixture
def base_dir(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"sha256": "a" * 64}))
    return tmp_path


def prompt(**changes):
    fields = {"template": RECORD.template, "max_length": 128,
              "label_words": dict(zip(LABELS, FIELDS["label_words"], strict=True))}
    return PromptParams(**{**fields, **changes})


def test_matching_adapter_passes(base_dir):
    check_adapter(RECORD, model_dir=base_dir, adapter_dir="a", labels=LABELS, prompt=prompt())


def test_other_base_model_is_refused(base_dir):
    (base_dir / "manifest.json").write_text(json.dumps({"sha256": "b" * 64}))
    with pytest.raises(AdapterMismatchError, match=f"but {base_dir} has " + "b" * 64):
        check_adapter(RECORD, model_dir=base_dir, adapter_dir="a")


def test_base_model_without_manifest_is_refused(tmp_path):
    with pytest.raises(AdapterMismatchError, match="no manifest.json"):
        check_adapter(RECORD, model_dir=tmp_path, adapter_dir="a")


def test_other_label_order_is_refused(base_dir):
    with pytest.raises(AdapterMismatchError, match="trained for labels"):
        check_adapter(RECORD, model_dir=base_dir, adapter_dir="a",
                      labels=["neutral", "negative", "positive"])


def test_other_prompt_is_refused(base_dir):
    with pytest.raises(AdapterMismatchError, match="another prompt"):
        check_adapter(RECORD, model_dir=base_dir, adapter_dir="a", prompt=prompt(max_length=64))


def test_other_mode_is_refused(base_dir):
    with pytest.raises(AdapterMismatchError, match="trained in train.mode 'generative' but "
                                                   "params.yaml says 'seq_cls'"):
        check_adapter(RECORD, model_dir=base_dir, adapter_dir="a", mode="seq_cls")


def test_seq_cls_adapter_depends_on_max_length_only(base_dir):
    record = AdapterRecord(mode="seq_cls", labels=LABELS, label2id=FIELDS["label2id"],
                           max_length=128, base_model=RECORD.base_model, params={})
    check_adapter(record, model_dir=base_dir, adapter_dir="a", labels=LABELS, mode="seq_cls",
                  prompt=prompt(template="Other: {text}", label_words={"negative": " bad"}))
    with pytest.raises(AdapterMismatchError, match="another prompt"):
        check_adapter(record, model_dir=base_dir, adapter_dir="a", prompt=prompt(max_length=64))
