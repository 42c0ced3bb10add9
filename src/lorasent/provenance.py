"""The provenance record of a stage's run: what defines its result (params, inputs'
hashes, package versions, device), tracked by git, and the machine facts of the run
(:data:`MACHINE_FACTS`), kept beside it in a git-ignored record.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorasent.atomic import atomic_write_text, json_text, write_json
from lorasent.errors import LorasentError
from lorasent.git import git_or_none
from lorasent.paths import PROVENANCE_DIR

if TYPE_CHECKING:
    import torch

# Packages whose versions go into every provenance record.
TRACKED_PACKAGES = (
    "lorasent", "torch", "transformers", "peft", "accelerate", "datasets", "tokenizers",
    "safetensors", "scikit-learn", "cleanlab", "numpy", "dvc", "dvclive",
)


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_state(cwd: str | Path = ".") -> dict[str, Any]:
    """The commit checked out in ``cwd`` and whether tracked files differ from it; each
    None where git cannot tell (no git, not a repository, no answer within 30 s)."""
    def git(*args: str) -> str | None:
        try:
            out = git_or_none(cwd, *args, timeout_s=30)
        except LorasentError:  # git is not installed
            return None
        return None if out is None else out.strip()

    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(dirty) if dirty is not None else None}


BUSY_LOAD_PER_CORE = 1.25  # a stage's own threads keep the load at about the core count


LOAD_WINDOWS_S = (60, 300, 900)  # the spans of os.getloadavg()'s three averages


def machine_load(wall_time_s: float) -> dict[str, Any]:
    """How busy the CPU was while a stage of ``wall_time_s`` seconds ran.

    ``os.getloadavg`` gives the average number of runnable processes over the last 1, 5
    and 15 minutes; the longest of those spans that fits inside the stage is the one
    read (``window_s``), so that work before the stage does not count. ``busy`` is true
    when that average exceeds 1.25 per core: a stage keeps the load at about the number
    of cores by itself (torch runs one thread per core), so more means other work
    competed for the CPU, and wall times taken then are not comparable.
    """
    cores = os.cpu_count() or 1
    averages = os.getloadavg()
    window = max([i for i, span in enumerate(LOAD_WINDOWS_S) if span <= wall_time_s] or [0])
    load = round(averages[window], 2)
    return {"load_average": load, "window_s": LOAD_WINDOWS_S[window], "cpu_cores": cores,
            "busy": load > BUSY_LOAD_PER_CORE * cores}


def provenance(*, stage: str, params: dict[str, Any], device: torch.device | str | None,
               wall_time_s: float, inputs: dict[str, str],
               extra: dict[str, Any] | None = None, status: str = "ok") -> dict[str, Any]:
    """The whole record of a stage's run, machine facts and all (:func:`write_provenance`
    splits it in two).

    Args:
        stage: the stage's name.
        params: the resolved params (all sections), as plain data.
        device: the torch device the stage ran on (None: resolve ``auto``).
        wall_time_s: the stage's wall time in seconds.
        inputs: ``{name: sha256}`` of the data and model the stage read.
        extra: stage-specific facts (e.g. trainable parameters).
        status: ``ok`` or ``failed``.

    ``processes`` is how many processes ran the stage (``lorasent.launch``); ``device``
    describes the main one's; ``machine_load`` is :func:`machine_load` at the end.
    """
    from lorasent.environment import environment_report
    from lorasent.launch import rank_and_world

    return {
        "stage": stage, "status": status, "wall_time_s": round(wall_time_s, 3),
        "processes": rank_and_world()[1], "machine_load": machine_load(wall_time_s),
        "git": git_state(), "inputs": inputs, "device": environment_report(device),
        "python": platform.python_version(), "platform": platform.platform(),
        "packages": package_versions(), "params": params, **(extra or {}),
    }


# The keys of a provenance record (a path of keys into it) that describe the machine and
# the moment of a run, not its result: they differ between two runs that give the same
# bytes, so they go to the git-ignored machine record (:func:`write_provenance`), not to
# the tracked one that git and dvc.lock hash. What defines the result stays tracked: the
# params, the inputs' hashes, the package versions, Python, the device type and build
# (torch, hip, cuda, bf16, attention, the CPU or GPU name and cores, what chooses the
# kernels), venv or container, the processes, the steps. A new key goes on the machine
# side when it can differ between two runs that give the same bytes (times, load, memory,
# host names, image, container or process ids, the commit a run started at): two
# machines of one kind differ in their total memory by a few pages, and an image built
# twice gets two ids (issue 50; tests/test_provenance.py changes every such fact).
MACHINE_FACTS: tuple[tuple[str, ...], ...] = (
    ("wall_time_s",), ("machine_load",), ("git",), ("platform",), ("training_speed",),
    ("reference_costs",),
    ("device", "memory_free_bytes"), ("device", "memory_total_bytes"),
    ("device", "visible_devices"), ("device", "container", "image_id"),
    ("device", "container", "image_revision"), ("device", "container", "base_digest"),
)
MACHINE_DIR_NAME = "machine"  # <provenance_dir>/machine/<stage>.json (git-ignored)


def split_record(record: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tracked, machine)``: ``record`` less the :data:`MACHINE_FACTS`, and those facts
    (nested as in ``record``; a key it lacks is left out)."""
    tracked = json.loads(json.dumps(record))
    machine: dict[str, Any] = {}
    for path in MACHINE_FACTS:
        *parents, key = path
        source: Any = tracked
        for parent in parents:
            source = source.get(parent) if isinstance(source, dict) else None
        if isinstance(source, dict) and key in source:
            target = machine
            for parent in parents:
                target = target.setdefault(parent, {})
            target[key] = source.pop(key)
    return tracked, machine


def _merge(into: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    for key, value in facts.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def machine_path(provenance_path: str | Path) -> Path:
    """The machine record of the tracked record at ``provenance_path``:
    ``<its folder>/machine/<its name>``."""
    path = Path(provenance_path)
    return path.parent / MACHINE_DIR_NAME / path.name


def write_provenance(path: str | Path, record: dict[str, Any]) -> None:
    """Write :func:`provenance`'s ``record`` in two: at ``path`` what defines the result
    (tracked by git, an output in dvc.lock), at :func:`machine_path` the
    :data:`MACHINE_FACTS` (git-ignored, no DVC output), with ``record_sha256``, the SHA-256
    of the tracked file's bytes, so that a reader joins them only to that record
    (:func:`read_provenance`). A rerun that reproduces a result rewrites the tracked file
    byte for byte: ``git status`` stays clean and ``dvc.lock`` unchanged."""
    tracked, machine = split_record(record)
    text = json_text(tracked)
    atomic_write_text(path, text)
    machine_file = machine_path(path)
    machine_file.parent.mkdir(parents=True, exist_ok=True)
    write_json(machine_file, {"record_sha256": record_sha256(text), **machine})


def record_sha256(tracked_text: str) -> str:
    """The ``record_sha256`` a machine record holds of its tracked record: the SHA-256 of
    the tracked file's UTF-8 bytes, hex."""
    return hashlib.sha256(tracked_text.encode()).hexdigest()


def machine_facts(tracked_text: str, machine_file: str | Path) -> dict[str, Any]:
    """The machine facts of ``machine_file`` (:func:`write_provenance`) when they belong to
    the tracked record ``tracked_text`` (its SHA-256 matches), else ``{}``: a record made
    elsewhere, or a file that is absent or damaged."""
    try:
        machine = json.loads(Path(machine_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(machine, dict) or machine.pop("record_sha256", None) != record_sha256(
            tracked_text):
        return {}
    return machine


def read_machine_record(provenance_path: str | Path) -> dict[str, Any] | None:
    """The machine record of the tracked record at ``provenance_path``
    (:func:`machine_path`) as written, whichever tracked record it belongs to: its
    ``record_sha256`` (:func:`record_sha256` of the tracked record it was written with,
    perhaps not the one there now: :func:`machine_facts` joins only that one) and its
    facts; a failed run's record (:func:`record_failure`) instead holds ``"status":
    "failed"``, its ``error`` and its params. None: there is no such file.

    Raises:
        ValueError: a file that is not a JSON object (damaged), naming it.
    """
    path = machine_path(provenance_path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: {err}") from None
    try:
        machine = json.loads(text)
    except ValueError:
        machine = None
    if not isinstance(machine, dict):
        raise ValueError(f"{path}: not a JSON object")
    return machine


def with_machine_facts(tracked_text: str, machine_file: str | Path) -> dict[str, Any]:
    """The record ``tracked_text`` with its machine facts joined back in
    (:func:`machine_facts`); a record written before the split holds them itself."""
    return _merge(json.loads(tracked_text), machine_facts(tracked_text, machine_file))


def read_provenance(path: str | Path) -> dict[str, Any]:
    """The whole record at ``path``: the tracked file with its machine facts
    (:func:`with_machine_facts`)."""
    return with_machine_facts(Path(path).read_text(encoding="utf-8"), machine_path(path))


def record_failure(stage: str, params: dict[str, Any], error: BaseException,
                   wall_time_s: float, provenance_dir: str | Path = PROVENANCE_DIR) -> None:
    """Write a ``status: failed`` record naming the error at the machine record of
    ``<provenance_dir>/<stage>.json`` (:func:`machine_path`; git-ignored): the tracked
    record and the metrics of the last good run are not touched. Never raises: a failure
    to record is logged and the original error goes on."""
    import logging

    message = str(error) or "interrupted"
    try:
        path = machine_path(Path(provenance_dir) / f"{stage}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, provenance(
            stage=stage, params=params, device=None, wall_time_s=wall_time_s, inputs={},
            status="failed", extra={"error": f"{type(error).__name__}: {message}"}))
    except Exception as err:  # noqa: BLE001 - the stage's own error matters more
        logging.getLogger(__name__).warning("could not record the failure: %s", err)
