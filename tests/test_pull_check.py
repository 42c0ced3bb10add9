"""What `make run` (lorasent.run_pipeline) pulls or checks out is checked against dvc.lock before
anything uses it: a project made by hand in DVC 3's formats (dvc.lock, a folder's file
list in the cache), no subprocess. End to end, on a remote whose copy of the adapter
changed by one byte: tests/test_remote.py."""

import hashlib
import json
import logging
from pathlib import Path

import pytest

from lorasent.run_pipeline import (
    UNWRITABLE,
    PullWarnings,
    check_checked_out,
    damage_message,
    damaged_outputs,
    remove_damaged,
)

ADAPTER = {"adapter_config.json": b'{"r": 8}\n', "adapter_model.safetensors": bytes(range(256))}
SPLIT = b"text,label\nhello,positive\n"


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _project(root: Path) -> Path:
    """A project whose train stage made models/adapter/ (a folder: its file list in the
    cache, as DVC 3 writes it) and whose split stage made data/split.csv; returns the
    cache's objects folder (``files/md5``)."""
    for name, data in ADAPTER.items():
        (root / "models/adapter").mkdir(parents=True, exist_ok=True)
        (root / "models/adapter" / name).write_bytes(data)
    (root / "data").mkdir()
    (root / "data/split.csv").write_bytes(SPLIT)
    listing = json.dumps(sorted(({"md5": _md5(data), "relpath": name}
                                 for name, data in ADAPTER.items()),
                                key=lambda e: e["relpath"]), sort_keys=True).encode()
    dir_md5 = _md5(listing) + ".dir"
    objects = root / ".dvc/cache/files/md5"
    (objects / dir_md5[:2]).mkdir(parents=True)
    (objects / dir_md5[:2] / dir_md5[2:]).write_bytes(listing)
    (root / "dvc.lock").write_text(
        "schema: '2.0'\nstages:\n"
        f"  split:\n    cmd: x\n    outs:\n    - path: data/split.csv\n      hash: md5\n"
        f"      md5: {_md5(SPLIT)}\n      size: {len(SPLIT)}\n"
        f"  train:\n    cmd: y\n    outs:\n    - path: models/adapter\n      hash: md5\n"
        f"      md5: {dir_md5}\n      nfiles: 2\n", encoding="utf-8")
    return objects


def test_files_as_dvc_lock_records_them_are_not_damaged(tmp_path):
    objects = _project(tmp_path)
    assert damaged_outputs(tmp_path, ["split", "train"], objects) == []


def test_one_byte_changed_in_a_folders_file_is_named_with_both_md5s(tmp_path):
    objects = _project(tmp_path)
    weights = tmp_path / "models/adapter/adapter_model.safetensors"
    changed = bytearray(weights.read_bytes())
    changed[100] ^= 1
    weights.write_bytes(bytes(changed))
    (tmp_path / "data/split.csv").write_bytes(SPLIT.replace(b"positive", b"negative"))
    found = damaged_outputs(tmp_path, ["train", "split"], objects)
    assert [(d.path, d.stage, d.expected, d.found, d.listing) for d in found] == [
        ("models/adapter/adapter_model.safetensors", "train",
         _md5(ADAPTER["adapter_model.safetensors"]), _md5(bytes(changed)), False),
        ("data/split.csv", "split", _md5(SPLIT),
         _md5(SPLIT.replace(b"positive", b"negative")), False)]
    expected = _md5(ADAPTER["adapter_model.safetensors"])
    assert found[0].object == f"files/md5/{expected[:2]}/{expected[2:]}"
    # only the stages asked about; a file that is not here is left to DVC
    assert damaged_outputs(tmp_path, ["split"], objects) == found[1:]
    weights.unlink()
    assert damaged_outputs(tmp_path, ["train"], objects) == []


def test_a_damaged_file_list_is_named_as_the_folders(tmp_path):
    objects = _project(tmp_path)
    listing = next(objects.glob("*/*.dir"))
    listing.write_bytes(listing.read_bytes().replace(b"adapter_config", b"adapter_conf1g"))
    [found] = damaged_outputs(tmp_path, ["train"], objects)
    assert (found.path, found.listing) == ("models/adapter", True)
    assert found.found == _md5(listing.read_bytes()) + ".dir"


def test_the_message_names_the_file_the_stage_the_remote_and_what_to_do(tmp_path):
    objects = _project(tmp_path)
    for name in ADAPTER:
        (tmp_path / "models/adapter" / name).write_bytes(b"x")
    found = damaged_outputs(tmp_path, ["train"], objects)
    a, b = (_md5(ADAPTER[name]) for name in ("adapter_config.json", "adapter_model.safetensors"))
    assert damage_message(found, ("store", "/srv/dvc-store")) == (
        "run: models/adapter/adapter_config.json as pulled from DVC remote 'store' "
        f"(/srv/dvc-store) is damaged: its md5 is {_md5(b'x')}, dvc.lock records {a} (stage "
        "train) (and 1 more file: models/adapter/adapter_model.safetensors); removed here so "
        f"that nothing uses it. Delete files/md5/{a[:2]}/{a[2:]} on the remote and in the "
        "DVC cache, then `dvc push` from a clone with a good copy, or rerun the stage here: "
        "dvc repro --force train")
    assert b in {d.expected for d in found}
    assert damage_message(found[1:], None).startswith(
        "run: models/adapter/adapter_model.safetensors as pulled from the DVC cache is "
        "damaged: ")
    remove_damaged(tmp_path, found)
    assert list((tmp_path / "models/adapter").iterdir()) == []
    assert (tmp_path / "data/split.csv").read_bytes() == SPLIT  # not damaged: kept


def test_make_runs_watch_notes_each_stage_dvc_pulled_or_checked_out():
    class Stage:
        addressing = "train"

        def __str__(self) -> str:
            return "stage: 'train'"

    watch = PullWarnings()
    logger, level = logging.getLogger("dvc.stage"), logging.getLogger("dvc").level
    logger.addHandler(watch)
    logging.getLogger("dvc").setLevel(logging.INFO)  # as DVC's command line sets it
    try:
        logger.info("Pulling data for %s", Stage())
        logging.getLogger("dvc.stage.cache").info(
            "Stage '%s' is cached - skipping run, checking out outputs", "evaluate")
        logger.info("Running stage '%s':", "baseline")
    finally:
        logger.removeHandler(watch)
        logging.getLogger("dvc").setLevel(level)
    assert list(watch.checked_out) == ["train", "evaluate"]


def test_a_damaged_checkout_stops_the_run_and_is_removed(tmp_path, monkeypatch):
    """check_checked_out on a DVC project (its .dvc/config as `dvc init --no-scm` and
    `dvc remote add --default` write it) with a default remote: the line names it."""
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc/config").write_text(
        "[core]\n    no_scm = True\n    remote = store\n"
        "['remote \"store\"']\n    url = /srv/dvc-store\n", encoding="utf-8")
    _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert check_checked_out(["train", "split"], pull=True) is None
    assert check_checked_out([], pull=True) is None
    (tmp_path / "data/split.csv").write_bytes(b"changed")
    said = check_checked_out(["train", "split"], pull=True)
    assert said is not None and said.startswith(
        "run: data/split.csv as pulled from DVC remote 'store' (/srv/dvc-store) is damaged: "
        f"its md5 is {_md5(b'changed')}, dvc.lock records {_md5(SPLIT)} (stage split); "
        "removed here so that nothing uses it.")
    assert not (tmp_path / "data/split.csv").exists()


@pytest.mark.parametrize("stages", [["nonesuch"], ["split", "nonesuch"]])
def test_a_stage_dvc_lock_lacks_is_nothing_to_check(tmp_path, stages):
    objects = _project(tmp_path)
    assert damaged_outputs(tmp_path, stages, objects) == []


# Before `dvc repro --pull`, make run asks the default remote whether it lets this machine
# in (lorasent.run_pipeline.remote_problem); over SSH and S3, refused: tests/test_cloud_remotes.py.

def _dvc_project(root: Path, remote: str | None) -> Path:
    (root / ".dvc").mkdir(parents=True)
    config = "[core]\n    no_scm = True\n"
    if remote is not None:
        config += f"    remote = store\n['remote \"store\"']\n    url = {remote}\n"
    (root / ".dvc/config").write_text(config, encoding="utf-8")
    return root


def test_a_remote_that_answers_is_no_problem_even_empty(tmp_path):
    from lorasent.run_pipeline import remote_problem

    assert remote_problem(_dvc_project(tmp_path / "none", None)) is None
    (tmp_path / "store").mkdir()
    assert remote_problem(_dvc_project(tmp_path / "folder", str(tmp_path / "store"))) is None
    assert remote_problem(_dvc_project(tmp_path / "new", str(tmp_path / "not-yet"))) is None


def test_a_default_remote_that_is_not_defined_is_named(tmp_path):
    from lorasent.run_pipeline import remote_problem

    root = _dvc_project(tmp_path, None)
    (root / ".dvc/config").write_text("[core]\n    no_scm = True\n    remote = gone\n")
    assert remote_problem(root) == (
        "the default DVC remote 'gone' (core.remote) is not defined: dvc remote add gone "
        "<url>, or dvc remote default <another remote>")


def test_a_remote_whose_plugin_is_missing_names_what_to_install(tmp_path):
    from lorasent.run_pipeline import remote_problem

    said = remote_problem(_dvc_project(tmp_path, "gs://bucket/store"))
    assert said == ("DVC remote 'store' (gs://bucket/store) cannot be used here: gs is "
                    "supported, but requires 'dvc-gs' to be installed; pip install dvc-gs "
                    "(docs/sharing.md#cloud-remotes)")


# A remote's URL as every line shows it (lorasent.addresses.redact): tests/test_addresses.py.


@pytest.mark.parametrize(("writable", "free", "why"), [
    (False, 10**9, "is read-only for this user"),
    (False, 0, "is read-only for this user"),
    (True, 0, "is on a full disk (0 bytes free)"),
    (True, 1, None),
])
def test_a_local_remote_this_user_cannot_write_is_named_in_one_line(
        tmp_path, monkeypatch, writable, free, why):
    """Issue 70: a read-only or full local remote gave DVC's own error per object on push.
    As root, chmod does not stop a write, so os.access and shutil.disk_usage answer as such
    a folder would; the line names the remote (redacted) and what to do."""
    import os
    import shutil
    from collections import namedtuple

    from lorasent import run_pipeline

    store = tmp_path / "store"
    store.mkdir()
    asked: list[str] = []

    def access(path, mode):
        asked.append(str(path))
        return writable

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - free, free))
    assert run_pipeline.folder_unwritable(store) == why
    assert run_pipeline.folder_unwritable(tmp_path / "not-yet") is None  # DVC makes it
    root = _dvc_project(tmp_path / "project", str(store))
    said = run_pipeline.remote_unwritable(root)
    assert asked[-1] == str(store)
    if why is None:
        assert said is None
        return
    assert said == (
        f"run: DVC remote 'store' ({store}) {why}: make run pulls from it, but `dvc push` "
        "there fails; free space there or make it writable for this user (or `dvc remote "
        "default <a remote you may write>`) before pushing this run")
    with_password = _dvc_project(tmp_path / "other", "ssh://user:secret@host/store")
    assert run_pipeline.remote_unwritable(with_password) is None  # not a folder here


@pytest.mark.parametrize("code", sorted(UNWRITABLE))
def test_dvcs_per_object_errors_of_a_full_or_read_only_folder_are_one_line(code):
    """However many objects fail alike, one line: the count, the folder's error, where;
    a failure of another kind is DVC's to print, record by record."""
    import os

    from lorasent.run_pipeline import TRANSFER_FAILED, TRANSFER_LOGGERS, TransferErrors

    watch = TransferErrors()
    for n in range(19):
        err = OSError(code, os.strerror(code), f"/mnt/store/files/md5/{n:02d}/x")
        record = logging.LogRecord(TRANSFER_LOGGERS[n % 3], logging.ERROR, "f", 1,
                                   TRANSFER_FAILED, (f"md5: {n}",), (OSError, err, None))
        assert watch.filter(record) is False
    other = logging.LogRecord(TRANSFER_LOGGERS[0], logging.ERROR, "f", 1, TRANSFER_FAILED,
                              ("md5: x",), (OSError, FileNotFoundError(2, "gone"), None))
    assert watch.filter(other) is True
    assert watch.line() == (
        f"run: DVC could not write 19 object(s): {UNWRITABLE[code]} (/mnt/store/files/md5/00/x: "
        f"{os.strerror(code)}); free space there or make it writable for this user, then run "
        "make run again")
    assert TransferErrors().line() is None
