"""Files the stages write: atomic, strict JSON, hashed, with a provenance record.

Every output is written under a temporary name next to its target and renamed into
place only when complete, so an interrupted stage never leaves a file that DVC or a
user would take as done.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from lorasent.paths import PROVENANCE_DIR

if TYPE_CHECKING:
    import torch

# Packages whose versions go into every provenance record.
TRACKED_PACKAGES = (
    "lorasent", "torch", "transformers", "peft", "accelerate", "datasets", "tokenizers",
    "safetensors", "scikit-learn", "numpy", "dvc", "dvclive",
)


def write_json(path: str | Path, obj: Any) -> None:
    """Write strict JSON (``NaN``/``Infinity`` raise ``ValueError``) atomically."""
    text = json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    atomic_write_text(path, text)


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename."""
    with atomic_open(path) as fh:
        fh.write(text)


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[TextIO]:
    """A UTF-8 text handle on a temporary file that becomes ``path`` when the block
    succeeds; on an exception it is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove the temporary siblings (``.<name>.*.tmp``) of ``path`` that a killed run
    (SIGKILL, power loss) left behind; returns what was removed. A finished or failed
    run removes its own, so these are never taken for outputs, but they would clutter
    ``git status``."""
    path = Path(path)
    stale = sorted(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))
    for p in stale:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return stale


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it; set back at once
    os.umask(mask)
    return mask


def usual_modes(folder: str | Path) -> None:
    """Give ``folder`` and everything below it the mode a plain ``open``/``mkdir`` would:
    ``0o777 & ~umask`` for folders (and files with their owner's execute bit),
    ``0o666 & ~umask`` for other files, so that another user or a non-root serving
    container reads them as it reads the rest. Symbolic links are left alone."""
    mask = _umask()
    os.chmod(folder, 0o777 & ~mask)
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                os.chmod(p, 0o777 & ~mask)
        for name in files:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                executable = os.stat(p).st_mode & 0o100
                os.chmod(p, (0o777 if executable else 0o666) & ~mask)


def jsonl_text(rows: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in rows)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder that replaces ``path`` when the block succeeds.

    Before the rename, every file and folder inside gets the usual mode
    (:func:`usual_modes`), whatever wrote it: libraries that write through
    ``tempfile.mkstemp`` (safetensors, transformers) leave 0600 files. On an exception
    the temporary folder is removed and ``path`` is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        usual_modes(tmp)
        if path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks of ``chunk_bytes`` bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def sha256_tree(folder: str | Path) -> dict[str, str]:
    """``{relative path: sha256}`` for every file below ``folder``, sorted by path."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): sha256_file(p)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def combined_sha256(hashes: dict[str, str]) -> str:
    """One SHA-256 over ``name  hash`` lines, the format of ``sha256sum``."""
    lines = "".join(f"{h}  {name}\n" for name, h in sorted(hashes.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_state(cwd: str | Path = ".") -> dict[str, Any]:
    """The commit checked out in ``cwd`` and whether tracked files differ from it."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                                  timeout=30, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

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
    """The record written beside a stage's metrics.

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


def record_failure(stage: str, params: dict[str, Any], error: BaseException,
                   wall_time_s: float, provenance_dir: str | Path = PROVENANCE_DIR) -> None:
    """Replace ``<provenance_dir>/<stage>.json`` with a ``status: failed`` record naming
    the error. Metrics are not touched. Never raises: a failure to record is logged and
    the original error goes on."""
    import logging

    message = str(error) or "interrupted"
    try:
        write_json(Path(provenance_dir) / f"{stage}.json", provenance(
            stage=stage, params=params, device=None, wall_time_s=wall_time_s, inputs={},
            status="failed", extra={"error": f"{type(error).__name__}: {message}"}))
    except Exception as err:  # noqa: BLE001 - the stage's own error matters more
        logging.getLogger(__name__).warning("could not record the failure: %s", err)
