"""Files written whole or not at all: atomic writes, strict JSON and JSON Lines.

Every output is written under a temporary name next to its target and renamed into
place only when complete, so an interrupted stage never leaves a file that DVC or a
user would take as done.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from lorasent.errors import LorasentError


def json_text(obj: Any) -> str:
    """``obj`` as the text of a JSON file lorasent writes: strict JSON (``NaN`` and
    ``Infinity`` raise ``ValueError``), indented by 2, UTF-8 characters as they are."""
    return json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: str | Path, obj: Any) -> None:
    """Write :func:`json_text` of ``obj`` atomically."""
    atomic_write_text(path, json_text(obj))


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
    fd, tmp, lock = _temporary(path, folder=False)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        os.close(lock)  # held until the rename: never taken for a killed run's leftover


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove the temporary siblings (``.<name>.*.tmp``) of ``path`` that a killed run
    (SIGKILL, power loss) left behind; returns what was removed. A finished or failed
    run removes its own, so these are never taken for outputs, but they would clutter
    ``git status``.

    A temporary that a running writer still holds (:func:`atomic_open` and
    :func:`atomic_dir` keep an exclusive ``flock`` on theirs until the rename, and the
    kernel drops it when that process dies) is left alone: two runs writing the same
    output at once (two ``lorasent predict --output out.csv``) each finish, the last
    rename wins, instead of one deleting the other's file half-way.
    """
    path = Path(path)
    stale = []
    for p in sorted(path.parent.glob(f".{glob.escape(path.name)}.*.tmp")):
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:  # renamed into place meanwhile, or not ours to read
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a running writer's
            os.close(fd)
            continue
        try:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            stale.append(p)
        finally:
            os.close(fd)
    return stale


def being_written(path: str | Path) -> bool:
    """Whether a running process is writing ``path`` now: a temporary sibling of it
    (``.<name>.*.tmp``) whose exclusive ``flock`` is held (:func:`atomic_open`,
    :func:`atomic_dir`; a killed run's leftover holds none)."""
    path = Path(path)
    for p in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
    return False


@contextlib.contextmanager
def marked_as_written(path: str | Path) -> Iterator[None]:
    """Mark ``path`` as being written (:func:`being_written`) for the whole block: an
    empty temporary sibling (``.<name>.*.tmp``) whose ``flock`` is held, removed at the
    block's end (a killed run's leftover holds no lock: :func:`remove_stale_temporaries`
    removes it). For a command that replaces ``path`` only at its end (the train stage's
    adapter), so that readers know from its start."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    fd, tmp, lock = _temporary(path, folder=False)
    os.close(fd)
    try:
        yield
    finally:
        Path(tmp).unlink(missing_ok=True)
        os.close(lock)


def _temporary(path: Path, *, folder: bool) -> tuple[int, str, int]:
    """A new temporary file or folder beside ``path`` (``.<name>.*.tmp``), with an
    exclusive ``flock`` held on it: ``(file descriptor or -1, its path, lock
    descriptor)``. The caller closes the lock descriptor once it has renamed or removed
    the temporary. One that another run's :func:`remove_stale_temporaries` removed
    between its creation and the lock is made again."""
    while True:
        if folder:
            fd, tmp = -1, tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp",
                                           dir=path.parent)
        else:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                       dir=path.parent)
        try:
            lock = os.open(tmp, os.O_RDONLY)
        except FileNotFoundError:
            if fd >= 0:
                os.close(fd)
            continue
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if os.path.samestat(os.fstat(lock), os.stat(tmp)):
                return fd, tmp, lock
        except FileNotFoundError:
            pass
        os.close(lock)
        if fd >= 0:
            os.close(fd)


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


def write_in_turn(writes: Sequence[tuple[str | Path, Callable[[], object]]], *,
                  command: str) -> None:
    """Run ``writes`` (``(path, write)``, each write atomic: its file or folder is whole,
    the old or the new) in their order; a stage's outputs, replaced one after another.

    Raises:
        LorasentError: a write failed after earlier ones had replaced their paths: one
            line with the error and exactly which paths were replaced (the others are as
            they were), and how to restore them. A failure of the first write is raised
            as it is: nothing was replaced.
    """
    done: list[str] = []
    for path, write in writes:
        try:
            write()
        except Exception as err:
            if not done:
                raise
            from lorasent.environment import out_of_space_message

            said = out_of_space_message(err) or f"{type(err).__name__}: {err}"
            raise LorasentError(
                f"{said}; {command} had already replaced {', '.join(done)} (the rest, from "
                f"{path} on, are as they were): `git checkout -- {' '.join(done)}` restores "
                f"them, or rerun {command}") from err
        done.append(str(path))


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
    _, name, lock = _temporary(path, folder=True)
    tmp = Path(name)
    try:
        yield tmp
        usual_modes(tmp)
        if path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        os.close(lock)
