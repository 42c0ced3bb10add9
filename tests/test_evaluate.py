"""Evaluate refuses an adapter that does not belong to this base model or these labels."""

import pytest

from lorasent.evaluate import AdapterMismatchError, check_adapter

RECORD = {"labels": ["negative", "neutral", "positive"],
          "base_model": {"source": "packaged:gemma-3-270m", "sha256": "a" * 64}}


def test_matching_adapter_passes(tmp_path):
    check_adapter(RECORD, labels=RECORD["labels"], model_sha256="a" * 64, adapter_dir=tmp_path)


def test_other_base_model_is_refused(tmp_path):
    with pytest.raises(AdapterMismatchError, match="but the base model here has " + "b" * 64):
        check_adapter(RECORD, labels=RECORD["labels"], model_sha256="b" * 64,
                      adapter_dir=tmp_path)


def test_other_label_order_is_refused(tmp_path):
    with pytest.raises(AdapterMismatchError, match="trained for labels"):
        check_adapter(RECORD, labels=["neutral", "negative", "positive"],
                      model_sha256="a" * 64, adapter_dir=tmp_path)
