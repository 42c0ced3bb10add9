"""Damaged checkpoints are set aside, not resumed; a full disk is one line; doctor's space.

A checkpoint whose files are cut short, corrupt or missing is named in the log, moved to
``checkpoints/damaged-<name>`` and training goes on from the last good one (or from step
0), ending with the adapter of an uninterrupted run. A write that finds no space names
the filesystem, what was written and where. A full disk needs root to mount, so the
writers raise, in its place, what they raise on a full tmpfs (torch 2.13's writer,
safetensors 0.8; torch builds on older libstdc++ say ``basic_ios::clear``), and Python's
own writes go to ``/dev/full``, which fails every write with ENOSPC (never the
libraries': safetensors writes through a renamed temporary file, which would replace it).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import zipfile
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from conftest import REPO, train_in
from lorasent import environment
from lorasent.cli import main
from lorasent.command_errors import user_errors
from lorasent.environment import NoSpaceLeft, filesystem
from lorasent.training.checkpoints import Checkpoints

Usage = namedtuple("Usage", "total used free")


class Stopped(Exception):
    """Stands for a kill right after a checkpoint was saved."""


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, minilm_dir, split_dir, repo_params_raw):
    """``(params, whole, stopped)``: an uninterrupted 6-step run's files, and a run
    stopped after its checkpoints at steps 2 and 4 (a folder to copy)."""
    from conftest import LABELS
    from lorasent.params import merge, parse_params

    preset = {"base": {"model": "packaged:minilm-l6", "labels": LABELS},
              "prompt": {"max_length": 32},
              "train": {"mode": "seq_cls", "max_steps": 6, "per_device_train_batch_size": 2,
                        "learning_rate": 1e-3, "logging_steps": 1, "save_steps": 2,
                        "lora": {"target_modules": ["query", "value"]}}}
    params = parse_params(merge(repo_params_raw, preset))
    root = tmp_path_factory.mktemp("runs")
    train_in(root / "whole", params, minilm_dir, split_dir)
    real = Checkpoints.on_save

    def stop_at_step_4(self, args, state, control, **kwargs):
        real(self, args, state, control, **kwargs)
        if state.global_step == 4:
            raise Stopped

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Checkpoints, "on_save", stop_at_step_4)
        with pytest.raises(Stopped):
            train_in(root / "stopped", params, minilm_dir, split_dir)
    assert sorted(p.name for p in (root / "stopped/checkpoints").iterdir()) == [
        "checkpoint-2", "checkpoint-4"]
    return params, _files(root / "whole"), root / "stopped"


def _cut_short(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _flip_first_byte_of(path: Path, member: str) -> None:
    """Corrupt one byte of ``member``'s data inside the zip ``path`` (its CRC-32 no
    longer matches); the archive's structure stays whole."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        offset = archive.getinfo(member).header_offset
    name_length, extra_length = struct.unpack("<HH", data[offset + 26:offset + 30])
    data[offset + 30 + name_length + extra_length] ^= 0xFF
    path.write_bytes(bytes(data))


# file damaged in checkpoint-4, how, and the reason the log gives
DAMAGE = {
    "optimizer cut short": (
        "optimizer.pt", _cut_short,
        "optimizer.pt is cut short or corrupt (BadZipFile: File is not a zip file)"),
    "adapter cut short": (
        "adapter_model.safetensors", _cut_short,
        "adapter_model.safetensors is cut short or corrupt (SafetensorError: Error while "
        "deserializing header: incomplete metadata, file not fully covered)"),
    "trainer state {}": (
        "trainer_state.json", lambda p: p.write_text("{}"),
        "trainer_state.json does not give global_step 4 and max_steps (it holds {})"),
    "trainer state not JSON": (
        "trainer_state.json", lambda p: p.write_text('{"global_step": 4, "max'),
        "trainer_state.json is cut short or corrupt (JSONDecodeError: Unterminated string "
        "starting at: line 1 column 20 (char 19))"),
    "scheduler cut short": (
        "scheduler.pt", _cut_short,
        "scheduler.pt is cut short or corrupt (BadZipFile: File is not a zip file)"),
    "rng state corrupt": (
        "rng_state.pth", lambda p: _flip_first_byte_of(p, "rng_state/data.pkl"),
        "rng_state.pth is corrupt (its member rng_state/data.pkl fails its CRC-32 check)"),
    "optimizer missing": ("optimizer.pt", Path.unlink, "optimizer.pt missing"),
}


def _checkpoint_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    """lorasent.stages.train's messages, less the seq_cls head's note (MiniLM's head is new)
    and the line of the dtype it computes in (tests/test_precision.py's)."""
    return [r.getMessage() for r in caplog.records
            if r.name == "lorasent.stages.train"
            and not r.getMessage().startswith(("seq_cls: ", "train: computing in "))]


@pytest.mark.integration
@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_checkpoint_is_set_aside_and_the_older_good_one_resumed(
        case, runs, tmp_path, caplog, minilm_dir, split_dir):
    params, whole, stopped = runs
    name, spoil, reason = DAMAGE[case]
    shutil.copytree(stopped, tmp_path, dirs_exist_ok=True)
    folder = tmp_path / "checkpoints"
    spoil(folder / "checkpoint-4" / name)
    damaged = _files(folder / "checkpoint-4")
    with caplog.at_level(logging.INFO, logger="lorasent.stages.train"):
        result = train_in(tmp_path, params, minilm_dir, split_dir)
    assert _checkpoint_messages(caplog)[:2] == [
        f"set aside {folder}/checkpoint-4 as {folder}/damaged-checkpoint-4 (damaged: "
        f"{reason}); it is never resumed and kept for inspection: delete it when done",
        f"resuming from step 2 of 6 ({folder}/checkpoint-2); to start over, delete "
        f"{folder} or set train.resume: never"]
    assert (f"kept the damaged checkpoints damaged-checkpoint-4 in {folder} for "
            "inspection; delete them when done") in caplog.text
    assert result.steps == 6
    # nothing of the damaged checkpoint is lost; the good ones are gone
    assert [p.name for p in folder.iterdir()] == ["damaged-checkpoint-4"]
    assert _files(folder / "damaged-checkpoint-4") == damaged
    got = _files(tmp_path)
    for file in ("adapter/adapter_model.safetensors", "adapter/adapter_config.json",
                 "adapter/lorasent.json"):
        assert got[file] == whole[file], file
    assert json.loads(got["provenance/train.json"])["resumed_from_step"] == 2


@pytest.mark.integration
def test_when_every_checkpoint_is_damaged_training_starts_at_step_0(
        runs, tmp_path, caplog, minilm_dir, split_dir):
    params, whole, stopped = runs
    shutil.copytree(stopped, tmp_path, dirs_exist_ok=True)
    folder = tmp_path / "checkpoints"
    (folder / "checkpoint-2" / "trainer_state.json").write_text("{}")
    _cut_short(folder / "checkpoint-4" / "optimizer.pt")
    (folder / "damaged-checkpoint-4").mkdir()  # set aside by an earlier run: kept too
    with caplog.at_level(logging.INFO, logger="lorasent.stages.train"):
        train_in(tmp_path, params, minilm_dir, split_dir)
    assert _checkpoint_messages(caplog)[:3] == [
        f"set aside {folder}/checkpoint-2 as {folder}/damaged-checkpoint-2 (damaged: "
        "trainer_state.json does not give global_step 2 and max_steps (it holds {})); it is "
        "never resumed and kept for inspection: delete it when done",
        f"set aside {folder}/checkpoint-4 as {folder}/damaged-checkpoint-4-2 (damaged: "
        "optimizer.pt is cut short or corrupt (BadZipFile: File is not a zip file)); it is "
        "never resumed and kept for inspection: delete it when done",
        f"no checkpoint in {folder} can be resumed: training starts at step 0"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "damaged-checkpoint-2", "damaged-checkpoint-4", "damaged-checkpoint-4-2"]
    got = _files(tmp_path)
    assert got["adapter/adapter_model.safetensors"] == whole["adapter/adapter_model.safetensors"]
    assert json.loads(got["provenance/train.json"])["resumed_from_step"] is None


# ------------------------------------------------------------------- a full disk

def _disk_full(monkeypatch) -> None:
    """Every filesystem reports 0 bytes free, as a full one does after a failed write."""
    monkeypatch.setattr("shutil.disk_usage",
                        lambda path: Usage(total=2**30, used=2**30, free=0))


def _no_space(path: Path, what: str, remedy: str) -> str:
    fs = filesystem(path)
    device = f"{fs['device']}, " if fs["device"] else ""
    return (f"no space left on {fs['mount']} ({device}0.0 GiB free) while writing "
            f"{what} ({path}); free space there or {remedy}")


# what torch.save raises on a full tmpfs (it names no errno: the free space tells)
TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"
TORCH_FULL_OLDER = ("[enforce fail at inline_container.cc:595] . PytorchStreamWriter failed "
                    "writing file data/0: file write failed, basic_ios::clear: iostream error")
CHECKPOINT_REMEDY = ("make checkpoints/ a link to a folder on a larger disk, or set "
                     "train.save_steps: 0 to save no checkpoints")
SPACE_REMEDY = ("move the project to a larger disk (`lorasent doctor` shows the free space "
                "where checkpoints, models and the DVC cache go)")


@pytest.mark.integration
def test_a_checkpoint_that_finds_the_disk_full_names_it(
        runs, tmp_path, monkeypatch, minilm_dir, split_dir):
    params, _, _ = runs
    real_save = torch.save

    def save(obj, f, *args, **kwargs):  # the optimiser's state meets a full disk
        if str(f).endswith("optimizer.pt"):
            raise RuntimeError(TORCH_FULL)
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    _disk_full(monkeypatch)
    with pytest.raises(NoSpaceLeft) as caught:
        train_in(tmp_path, params, minilm_dir, split_dir)
    assert str(caught.value) == _no_space(tmp_path / "checkpoints/checkpoint-2",
                                          "a checkpoint", CHECKPOINT_REMEDY)
    assert str(caught.value.__cause__) == TORCH_FULL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"]


@pytest.mark.integration
def test_the_adapter_that_finds_the_disk_full_names_it_and_leaves_nothing(
        runs, tmp_path, monkeypatch, minilm_dir, split_dir):
    import peft.peft_model
    from safetensors import SafetensorError

    params, _, _ = runs
    params = params.model_copy(update={"train": params.train.model_copy(
        update={"save_steps": 0})})  # the checkpoints would meet the full disk first

    def full(*args, **kwargs):
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(peft.peft_model, "safe_save_file", full)
    _disk_full(monkeypatch)
    with pytest.raises(NoSpaceLeft) as caught:
        train_in(tmp_path, params, minilm_dir, split_dir)
    assert str(caught.value) == _no_space(tmp_path / "adapter", "the adapter", SPACE_REMEDY)
    assert list(tmp_path.iterdir()) == []


def _command(raise_it):
    import click

    @click.command(name="train")
    @user_errors
    def train() -> None:
        raise_it()

    return train


def _write_to_full_device() -> None:
    """A write's raw OSError (ENOSPC, no file name); never creates /dev/full (O_CREAT)."""
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)


def _raise(err: Exception) -> None:
    raise err


def _enospc_naming_its_file() -> None:
    raise OSError(28, "No space left on device", "out/x.json")


@pytest.mark.parametrize(("raise_it", "where", "what"), [
    (_write_to_full_device, None, "a file under the current folder"),
    (_enospc_naming_its_file, "out/x.json", "a file"),
    (lambda: _raise(RuntimeError(TORCH_FULL)), None, "a file under the current folder"),
    (lambda: _raise(RuntimeError(TORCH_FULL_OLDER)), None, "a file under the current folder"),
])
def test_a_full_disk_anywhere_is_one_line_naming_the_filesystem(
        raise_it, where, what, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _disk_full(monkeypatch)
    result = CliRunner().invoke(_command(raise_it), [])
    assert result.exit_code == 1
    path = Path(where) if where else tmp_path
    assert result.output == (
        f"lorasent train: error: {_no_space(path, what, SPACE_REMEDY)}\n")


def test_other_errors_keep_their_traceback(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def bug():
        raise RuntimeError("unexpected pos: a bug, not a full disk")  # space is left

    result = CliRunner().invoke(_command(bug), [])
    assert result.exit_code == 1 and isinstance(result.exception, RuntimeError)


# ------------------------------------------------------------------ doctor's space

def _project(root: Path, base_bytes: int) -> None:
    root.mkdir()
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    (root / "models/base").mkdir(parents=True)
    (root / "models/base/model.safetensors").write_bytes(b"\0" * base_bytes)


@pytest.mark.slow
def test_doctor_reports_the_free_space_where_a_run_writes_and_warns_when_short(
        tmp_path, monkeypatch):
    from dvc.repo import Repo

    root = tmp_path / "project"
    _project(root, 3000)
    Repo.init(str(root), no_scm=True).close()
    cache = tmp_path / "elsewhere-cache"
    with Repo(str(root)) as repo, repo.config.edit() as config:
        config["cache"]["dir"] = str(cache)
    # checkpoints/ and the cache do not exist yet: their nearest existing folder is asked
    asked = {root: 2999, root / "models": 5000, tmp_path: 2000}
    monkeypatch.setattr("shutil.disk_usage",
                        lambda path: Usage(total=10**6, used=0, free=asked[Path(path)]))
    monkeypatch.setattr("os.path.ismount", lambda path: Path(path) in {
        root, root / "models", tmp_path, Path("/")})
    monkeypatch.chdir(root)
    data = json.loads(CliRunner().invoke(main, ["doctor", "--json"]).output)
    assert data["disk"] == {
        "needed_bytes": 3000, "needed_from": "models/base",
        "places": {
            "checkpoints": {"path": "checkpoints", "mount": str(root), "device": None,
                            "free_bytes": 2999, "total_bytes": 10**6},
            "models": {"path": "models", "mount": str(root / "models"), "device": None,
                       "free_bytes": 5000, "total_bytes": 10**6},
            "dvc_cache": {"path": str(cache), "mount": str(tmp_path), "device": None,
                          "free_bytes": 2000, "total_bytes": 10**6}}}
    remedy = ("free space there, or move the DVC cache (`dvc cache dir PATH`) or "
              "checkpoints/ (a link) to a larger disk")
    assert [f for f in data["findings"] if f["level"] == "warn"] == [
        {"level": "warn", "message": f"0.0 GiB free on {root} (holding checkpoints); a run "
         f"wants about 0.0 GiB there (the size of models/base): {remedy}"},
        {"level": "warn", "message": f"0.0 GiB free on {tmp_path} (holding dvc_cache); a "
         f"run wants about 0.0 GiB there (the size of models/base): {remedy}"}]
    text = CliRunner().invoke(main, ["doctor"]).output
    assert ("\nfree space (a run wants about 0.0 GiB on each; the size of models/base):\n"
            f"   checkpoints: 0.0 GiB free of 0.0 GiB on {root}: checkpoints\n"
            f"        models: 0.0 GiB free of 0.0 GiB on {root / 'models'}: models\n"
            f"     dvc_cache: 0.0 GiB free of 0.0 GiB on {tmp_path}: {cache}\n") in text
    assert f"  WARN: 0.0 GiB free on {root} (holding checkpoints)" in text


def test_doctor_asks_for_a_fixed_gib_before_the_base_model_is_fetched(tmp_path, monkeypatch):
    root = tmp_path / "project"
    _project(root, 0)
    shutil.rmtree(root / "models")
    monkeypatch.setattr("shutil.disk_usage",
                        lambda path: Usage(total=2**40, used=0, free=2**29))
    monkeypatch.chdir(root)
    data = json.loads(CliRunner().invoke(main, ["doctor", "--json"]).output)
    assert data["disk"]["needed_bytes"] == environment.FALLBACK_NEEDED_BYTES == 2**30
    assert data["disk"]["needed_from"] == "fallback"
    assert data["disk"]["places"]["dvc_cache"] is None  # not a DVC repo
    fs = filesystem(root)
    assert data["findings"] == [{"level": "warn", "message": (
        f"0.5 GiB free on {fs['mount']} (holding checkpoints, models); a run wants about "
        "1.0 GiB there (models/base is not fetched yet): free space there, or move the DVC "
        "cache (`dvc cache dir PATH`) or checkpoints/ (a link) to a larger disk")}]
