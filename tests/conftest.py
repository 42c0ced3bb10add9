"""Shared fixtures: the repo's params, the bad-input cases, the packaged Gemma."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from lorasent.params import Params, parse_params

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "data" / "cases"


@pytest.fixture(scope="session")
def repo_params_raw() -> dict:
    """params.yaml of the repo, as a plain dict (copy it before changing it)."""
    return yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def params_raw(repo_params_raw) -> dict:
    return copy.deepcopy(repo_params_raw)


@pytest.fixture
def params(params_raw) -> Params:
    return parse_params(params_raw)


@pytest.fixture(scope="session")
def packaged_model_dir() -> Path:
    """The packaged Gemma 3 270M as a safetensors folder (converted once, then cached)."""
    from lorasent.fetch import _packaged_gemma

    return _packaged_gemma()


@pytest.fixture(scope="session")
def gemma(packaged_model_dir):
    """``(model, tokenizer)``: the real packaged Gemma 3 270M, fp32, on the CPU."""
    import torch

    from lorasent.modeling import load_base_model

    model, tokenizer, _ = load_base_model(packaged_model_dir, device="cpu", precision="fp32",
                                          attn_implementation="sdpa")
    torch.manual_seed(0)
    return model, tokenizer
