"""Files the stages write: atomic, strict JSON, hashed, with a provenance record.

Every output is written under a temporary name next to its target and renamed into
place only when complete, so an interrupted stage never leaves a file that DVC or a
user would take as done.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import itertools
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from lorasent.errors import LorasentError
from lorasent.paths import PROVENANCE_DIR

if TYPE_CHECKING:
    import torch

# Packages whose versions go into every provenance record.
TRACKED_PACKAGES = (
    "lorasent", "torch", "transformers", "peft", "accelerate", "datasets", "tokenizers",
    "safetensors", "scikit-learn", "cleanlab", "numpy", "dvc", "dvclive",
)


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


# ------------------------------------------------------------------ output folders

OUTPUT_MARKER = ".lorasent-output"  # left in every folder a command replaces as a whole
LISTED_FILES = 10_000  # files counted in a folder about to be replaced, at most


class OutputPathError(LorasentError):
    """An output folder or file whose replacement would destroy what is there: the
    current folder, the repository or a folder holding it, git- or DVC-tracked paths, a
    folder the command did not write, the input itself. The message names the path,
    the option, and whether ``--force`` overrides it."""


WRITTEN = "files: "  # the marker's line listing the files the command wrote, as JSON


def marker_text(command: str, files: Iterable[str] | None = None) -> str:
    """The content of the :data:`OUTPUT_MARKER` that ``lorasent <command>`` leaves; with
    ``files`` (paths relative to the folder, ``/``-separated), a last line
    :data:`WRITTEN` and their sorted JSON list: the files the command wrote, the only
    ones :func:`check_output_folder` lets it remove (a marker without the line is of a
    lorasent before issue 51)."""
    text = (f"lorasent {command}\nThis folder was written by `lorasent {command}`, which "
            "replaces it as a whole when run again with the same folder.\n")
    if files is None:
        return text
    return (text + "It replaces only the files listed here; any other file is not its own "
            "and is never removed with a file git tracks.\n"
            f"{WRITTEN}{json.dumps(sorted(files), ensure_ascii=False)}\n")


def written_files(marker: Path) -> set[str] | None:
    """The files a :data:`OUTPUT_MARKER` lists as written (:func:`marker_text`), the
    marker itself among them; None for a marker without the list (or not readable as
    one)."""
    for line in marker.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith(WRITTEN):
            try:
                files = json.loads(line[len(WRITTEN):])
            except json.JSONDecodeError:
                return None
            if isinstance(files, list) and all(isinstance(f, str) for f in files):
                return {*files, OUTPUT_MARKER}
            return None
    return None


@contextlib.contextmanager
def output_dir(path: str | Path, *, command: str) -> Iterator[Path]:
    """:func:`atomic_dir` for a folder a user named (``--out``): the temporary folder
    holds the :data:`OUTPUT_MARKER` of ``command`` from the start, so that the same
    command replaces its own output again without ``--force``
    (:func:`check_output_folder`); once the block succeeds, the marker lists every file
    the block wrote (:func:`marker_text`), so that no other file is ever taken for the
    command's own."""
    with atomic_dir(path) as tmp:
        (tmp / OUTPUT_MARKER).write_text(marker_text(command), encoding="utf-8")
        yield tmp
        files = [(Path(root) / name).relative_to(tmp).as_posix()
                 for root, _, names in os.walk(tmp) for name in names]
        (tmp / OUTPUT_MARKER).write_text(
            marker_text(command, [f for f in files if f != OUTPUT_MARKER]), encoding="utf-8")


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _repo_roots(*starts: Path) -> list[Path]:
    """The folders holding ``.git`` or ``.dvc`` among ``starts`` and their parents
    (resolved), innermost first."""
    roots: list[Path] = []
    for start in starts:
        for folder in (start, *start.parents):
            if ((folder / ".git").exists() or (folder / ".dvc").is_dir()) and \
                    folder not in roots:
                roots.append(folder)
    return roots


def _metadata_folder(full: Path, roots: Iterable[Path]) -> Path | None:
    """The ``.git`` or ``.dvc`` folder of one of the repository ``roots`` that ``full``
    (resolved) is or lies in: git's and DVC's own data (objects, cache, config), which
    no output may go into, new or not."""
    return next((meta for root in roots for meta in (root / ".git", root / ".dvc")
                 if _within(full, meta)), None)


def _git(root: Path, *args: str) -> list[str]:
    """``git -C root <args>``'s NUL-separated output; empty when git is missing or
    ``root`` is no git work tree (then nothing there is git-tracked)."""
    git = shutil.which("git")
    if git is None:
        return []
    try:
        done = subprocess.run([git, "-C", str(root), *args], capture_output=True,
                              timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    return [p for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


def _yaml(path: Path) -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        return YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, YAMLError):
        return None  # DVC cannot read it either: it tracks nothing through it


def _out_paths(entries: Any) -> Iterator[str]:
    """The paths of a ``outs``/``metrics``/``plots`` list of dvc.yaml, dvc.lock or a
    ``.dvc`` file: strings, ``{path: {options}}`` or ``{path: ..., md5: ...}``."""
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, str):
            yield entry
        elif isinstance(entry, dict):
            if isinstance(entry.get("path"), str):
                yield entry["path"]
            elif len(entry) == 1 and isinstance(next(iter(entry)), str):
                yield next(iter(entry))


def dvc_outputs(root: Path) -> dict[Path, str]:
    """``{resolved output path: where it is declared}`` of the DVC project at ``root``:
    the ``outs``, ``metrics`` and ``plots`` of each stage of ``dvc.yaml`` and ``dvc.lock``
    (relative to the stage's ``wdir``), and the ``outs`` of every git-tracked ``.dvc``
    file. A file that is not valid YAML declares nothing (DVC fails on it too)."""
    found: dict[Path, str] = {}
    for name in ("dvc.yaml", "dvc.lock"):
        data = _yaml(root / name) if (root / name).is_file() else None
        stages = data.get("stages") if isinstance(data, dict) else None
        for stage, spec in (stages.items() if isinstance(stages, dict) else ()):
            if not isinstance(spec, dict):
                continue
            wdir = root / str(spec.get("wdir", "."))
            for key in ("outs", "metrics", "plots"):
                for out in _out_paths(spec.get(key)):
                    found.setdefault((wdir / out).resolve(), f"{name}, stage {stage}")
    for name in _git(root, "ls-files", "-z", "--", "*.dvc"):
        data = _yaml(root / name)
        for out in _out_paths(data.get("outs") if isinstance(data, dict) else None):
            found.setdefault(((root / name).parent / out).resolve(), name)
    return found


# The params whose value may name a local file or folder a stage reads: the stage, and the
# folder of the repo (a dep of that stage in dvc.yaml) where such files go. Each must be
# among that stage's deps, so that `dvc status` sees an edit (:func:`require_deps`).
# train.accelerate_config sets how train runs (FSDP, mixed precision, processes), which
# can change the weights. Not checked: base.model, a local model folder of gigabytes
# outside the repo as a rule: fetch hashes every file of it into models/base's manifest
# (sha256), and a `dvc status` that hashed it too would read gigabytes; an edit of it
# is seen when fetch reruns (the manifest's hash changes, and every stage after it).
FILE_PARAMS = {"data.source": ("fetch", "data/sources"),
               "evaluate.test_sets.<name>.source": ("evaluate", "data/sources"),
               "train.accelerate_config": ("train", "configs/accelerate")}
NOT_FILES = ("packaged:", "hf:")  # the source kinds of lorasent.stages.fetch that are not files


def stage_deps(root: Path, stage: str) -> list[Path] | None:
    """The resolved paths of ``stage``'s ``deps`` in ``root``'s dvc.yaml (relative to its
    ``wdir``); None without a dvc.yaml that has that stage (a stage run outside a DVC
    pipeline)."""
    data = _yaml(root / "dvc.yaml") if (root / "dvc.yaml").is_file() else None
    stages = data.get("stages") if isinstance(data, dict) else None
    spec = stages.get(stage) if isinstance(stages, dict) else None
    if not isinstance(spec, dict):
        return None
    wdir = root / str(spec.get("wdir", "."))
    return [(wdir / dep).resolve() for dep in _out_paths(spec.get("deps"))]


def require_deps(stage: str, files: dict[str, str], root: Path = Path(".")) -> None:
    """Check that each local file of ``files`` (``{param key: value}``; ``packaged:`` and
    ``hf:`` sources are not files; a file that is not there is left to the stage that
    reads it, whose error names it) is among ``stage``'s deps in ``root``'s dvc.yaml, itself
    or a folder holding it. Nothing to check without a dvc.yaml that has the stage.

    Raises:
        LorasentError: the first file that is not a dep, in one line: the key, the file,
            and the two ways out; for a path that is a dep as written but reaches outside
            the deps through a symbolic link (the file or a folder above it), the link,
            its target and how to put the file in its place.
    """
    deps = stage_deps(root, stage)
    if deps is None:
        return
    for key, value in files.items():
        path = (root / value).resolve()
        if value.startswith(NOT_FILES) or not path.exists():  # the reading stage says so
            continue
        if not any(_within(path, dep) for dep in deps):
            param = re.sub(r"^evaluate\.test_sets\.[^.]+\.", "evaluate.test_sets.<name>.", key)
            folder = FILE_PARAMS.get(param, (stage, "data/sources"))[1]
            readers = " and ".join(dict.fromkeys(s for s, f in FILE_PARAMS.values() if f == folder))
            link = _link_on_the_way(root, value, deps, stage)
            if link is not None:  # the path as written is a dep; a link on it leads out
                raise LorasentError(f"{key}: {value} {link}")
            raise LorasentError(
                f"{key}: {value} is not among the deps of the {stage} stage in dvc.yaml, so "
                f"`dvc status` would not see an edit of it and its metrics would go stale "
                f"silently; move it into {folder}/ (a dep of {readers}) and "
                f"set {key}: {folder}/{Path(value).name}, or add it to {stage}'s deps")


def _link_on_the_way(root: Path, value: str, deps: Sequence[Path], stage: str) -> str | None:
    """Where the path ``value`` (relative to ``root``) is among ``deps`` as written but a
    symbolic link on it (the file, or a folder above it) leads out of them: the words
    that follow ``value`` in the refusal, naming the link, its target and what to do;
    None otherwise."""
    top = root.resolve()
    written = Path(os.path.abspath(top / value))
    if not _within(written, top) or not any(_within(written, dep) for dep in deps):
        return None
    for part in [*reversed(written.parents), written]:
        if _within(part, top) and part != top and part.is_symlink():
            shown, target = part.relative_to(top).as_posix(), part.resolve()
            break
    else:
        return None
    link, to = shlex.quote(shown), shlex.quote(str(target))
    copy = (f"rm {link} && cp -r {to} {link}" if target.is_dir()
            else f"cp --remove-destination {to} {link}")
    if _within(target, top):
        inner = target.relative_to(top).as_posix()
        return (f"is read through the symbolic link {shown} -> {inner}, and {inner} is not "
                f"among the deps of the {stage} stage in dvc.yaml, so `dvc status` need not see "
                f"an edit of it; put the file itself in place of the link (rm {link} && mv "
                f"{shlex.quote(inner)} {link}), or add {inner} to {stage}'s deps")
    return (f"is read through the symbolic link {shown} -> {target}, outside the project: "
            "no commit holds that file, so a clone or another machine lacks it (or has "
            "another file there) and the metrics cannot be made again from the repository; "
            f"put a copy in place of the link ({copy}) and commit it (git add, or dvc add "
            "for a large file)")


def _contents(folder: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """``(files, nested repositories, .dvc files)`` below ``folder``, sorted, at most
    :data:`LISTED_FILES` files looked at."""
    files: list[Path] = []
    repos: list[Path] = []
    dvc_files: list[Path] = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        here = Path(root)
        if ".git" in dirs or ".git" in names or ".dvc" in dirs:
            repos.append(here)
        dvc_files += [here / n for n in sorted(names) if n.endswith(".dvc")]
        files += [here / n for n in sorted(names)]
        if len(files) >= LISTED_FILES:
            break
    return files, repos, dvc_files


def unwritable(path: str | Path) -> str | None:
    """Why an output cannot be written at ``path`` (a file, or a folder replaced whole),
    in words that follow the path in a message; None when it can. Its temporary goes
    beside it (:func:`atomic_open`, :func:`atomic_dir`), so the nearest existing folder
    above it must be a folder in which a file can be made, and so must ``path`` itself
    when it is an existing folder (its contents are removed). Tried by making an
    unnamed temporary file there (``tempfile.TemporaryFile``: Linux's ``O_TMPFILE``,
    nothing left behind), since ``os.access`` answers yes to root on a folder of
    another filesystem that refuses it (``/sys``) and does not see every read-only mount.
    """
    full = Path(path).absolute()
    existing = next(p for p in full.parents if p.exists())
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    for folder in (existing, *([full] if full.is_dir() else [])):
        try:
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as err:
            return f"cannot write in {folder} ({err.strerror or type(err).__name__})"
    return None


def check_output_folder(path: str | Path, *, command: str, force: bool,
                        option: str = "--out",
                        inputs: Iterable[tuple[str, str | Path]] = ()) -> None:
    """Refuse, before any work is done, an output folder whose replacement would destroy
    what is there (``lorasent <command>`` replaces the whole folder, :func:`output_dir`).

    Refused even with ``force``: the current folder or one holding it, the filesystem
    root, ``$HOME`` or a folder holding it, a repository root (a folder with ``.git`` or
    ``.dvc``: the current folder's, the output's, or one inside the output) or a folder
    holding one, a folder in such a root's ``.git`` or ``.dvc``, a symbolic link, a file,
    a folder this process cannot write or make (:func:`unwritable`),
    one of the command's own ``inputs`` (``(option, folder)``), a folder holding one or
    inside one, and a DVC output, a folder holding one or inside one (``dvc.yaml``,
    ``dvc.lock``, ``.dvc`` files: ``dvc checkout`` and ``dvc repro`` own it), and a folder
    holding a git-tracked path without the :data:`OUTPUT_MARKER` of ``command`` (a command
    never deletes what it did not write). Refused unless ``force``: a folder of its own
    (with that marker) holding a git-tracked path (a report committed, which git keeps),
    and a non-empty folder without the marker. Of a folder of its own, a git-tracked file
    the marker does not list as written (:func:`written_files`; with a marker that lists
    none, every git-tracked file) is refused even with ``force``, and any other file it
    does not list unless ``force``: a command never deletes what it did not write, and
    ``--force`` never deletes what git tracks. A folder that does not exist yet, or an
    empty one, is fine.

    Raises:
        OutputPathError: one line naming ``option``, the folder, what it holds (counts
            and an example path) and whether ``--force`` overrides it.
    """
    path = Path(path)
    where = f"{option} {path}"
    never = "choose another folder (--force does not override this)"
    if path.is_symlink():
        raise OutputPathError(f"{where}: a symbolic link (to {os.readlink(path)}); "
                              f"{command} replaces the folder it writes, so give the path "
                              f"of a real folder, or a new one")
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{where}: a file, not a folder; {never}")
    full, cwd, home = path.resolve(), Path.cwd().resolve(), Path.home().resolve()
    if full.parent == full:
        raise OutputPathError(f"{where}: the filesystem root; {never}")
    if _within(cwd, full):
        what = ("the current folder" if full == cwd
                else f"a folder holding the current folder ({cwd})")
        raise OutputPathError(f"{where}: refusing to replace {what}: {command} replaces the "
                              f"whole folder it writes; {never}")
    if _within(home, full):
        what = "your home folder" if full == home else f"{full}, which holds your home folder"
        raise OutputPathError(f"{where}: refusing to replace {what}; {never}")
    existing = next(p for p in (full, *full.parents) if p.exists())
    roots = _repo_roots(cwd, existing)
    for root in roots:
        if _within(root, full):
            what = ("the root of the repository" if root == full
                    else f"a folder holding the repository {root}")
            raise OutputPathError(f"{where}: refusing to replace {what}; {never}")
    meta = _metadata_folder(full, roots)
    if meta is not None:
        raise OutputPathError(f"{where}: inside {meta}, the repository's own {meta.name} "
                              f"data; {never}")
    problem = unwritable(full)
    if problem is not None:
        raise OutputPathError(f"{where}: {problem}; give a folder you can write to with "
                              "--out (--force does not override this)")
    files, repos, dvc_files = _contents(full) if full.is_dir() else ([], [], [])
    if repos:
        raise OutputPathError(f"{where}: refusing to replace a folder holding the repository "
                              f"{repos[0]}; {never}")
    for name, given in inputs:
        source = Path(given).resolve()
        if _within(source, full) or _within(full, source):
            what = ("is" if source == full else "holds" if _within(source, full)
                    else "is inside")
            raise OutputPathError(f"{where}: {what} {name} {given}, which {command} reads; "
                                  f"{never}")
    for root in roots:
        for out, declared in dvc_outputs(root).items():
            if _within(out, full) or _within(full, out):
                inside = "holding" if _within(out, full) else "inside"
                raise OutputPathError(
                    f"{where}: refusing to replace a folder {inside} the DVC-tracked output "
                    f"{out.relative_to(root) if _within(out, root) else out} (declared in "
                    f"{declared}); {never}")
    if dvc_files:
        raise OutputPathError(f"{where}: refusing to replace a folder holding the DVC file "
                              f"{dvc_files[0]} (a DVC-tracked path); {never}")
    marker = full / OUTPUT_MARKER
    ours = marker.is_file() and marker.read_text(encoding="utf-8", errors="replace"
                                                 ).split("\n", 1)[0] == f"lorasent {command}"
    overridable = "choose a new folder, or pass --force to replace it"
    listed = written_files(marker) if ours else None
    for root in roots:
        tracked = _git(root, "ls-files", "-z", "--full-name", "--", str(full)) \
            if _within(full, root) else []
        if tracked and not ours:  # a command never deletes what it did not write
            raise OutputPathError(
                f"{where}: refusing to replace a folder holding files tracked by git "
                f"({_files(len(tracked))}, e.g. {tracked[0]}) that `lorasent {command}` did "
                f"not write; {never}")
        if tracked and listed is None:  # a marker of before issue 51: what it wrote is unknown
            raise OutputPathError(
                f"{where}: refusing to replace a folder holding files tracked by git "
                f"({_files(len(tracked))}, e.g. {tracked[0]}): its {OUTPUT_MARKER}, of an "
                f"older lorasent, does not list the files `lorasent {command}` wrote; remove "
                f"the folder yourself (git rm -r) if all of it is lorasent's, or {never}")
        foreign = [p for p in tracked if listed is not None
                   and (root / p).relative_to(full).as_posix() not in listed]
        if foreign:  # issue 51: a file committed into the command's own folder
            raise OutputPathError(
                f"{where}: refusing to replace a folder holding {foreign[0]}, tracked by git, "
                f"which `lorasent {command}` did not write (its {OUTPUT_MARKER} does not list "
                f"it); move the file out of the folder (git mv) or {never}")
        if tracked and not force:  # its own output, committed: git keeps that copy
            raise OutputPathError(
                f"{where}: refusing to replace a folder holding files tracked by git "
                f"({_files(len(tracked))}, e.g. {tracked[0]}); {overridable} (git keeps "
                "the committed copy)")
    if force:
        return
    if files and not ours:
        count = (_files(len(files)) if len(files) < LISTED_FILES
                 else f"{LISTED_FILES} files or more")
        raise OutputPathError(
            f"{where}: refusing to replace a folder `lorasent {command}` did not write "
            f"({count}, e.g. {path / files[0].relative_to(full)}); {overridable}")
    strangers = [f for f in files if listed is not None
                 and f.relative_to(full).as_posix() not in listed]
    if strangers:
        raise OutputPathError(
            f"{where}: refusing to replace a folder holding "
            f"{path / strangers[0].relative_to(full)}, which `lorasent {command}` did not "
            f"write (its {OUTPUT_MARKER} does not list it); move it out of the folder, choose "
            "a new folder, or pass --force to replace the folder, that file too")


def check_output_file(path: str | Path, *, force: bool, option: str = "--output",
                      inputs: Iterable[tuple[str, str | Path]] = (),
                      ours: tuple[str, Callable[[Path], bool]] | None = None) -> None:
    """Refuse, before any work is done, an output file that would destroy what is there.

    Refused even with ``force``: the same file as one of ``inputs`` (``(option, path)``
    pairs; compared by :func:`os.path.samefile`, or by resolved path when one does not
    exist yet), an existing folder, a file in a repository's ``.git`` or ``.dvc``, a
    path that cannot be written (:func:`unwritable`: below a file, or in a folder, or
    a read-only filesystem, in which no file can be made).
    Refused unless ``force``: an existing file tracked by git, a DVC output or a file
    (new or not) inside one; with ``ours = (command, written_by)``, an existing non-empty
    file for which ``written_by(path)`` is false (``lorasent <command>`` did not write
    it, so replacing it would lose what is there).

    Raises:
        OutputPathError: one line naming ``option`` and the file (and the input it is).
    """
    path = Path(path)
    where = f"{option} {path}"
    for input_option, source in inputs:
        same = (os.path.samefile(path, source) if path.exists() and Path(source).exists()
                else path.resolve() == Path(source).resolve())
        if same:
            raise OutputPathError(
                f"{where}: the same file as {input_option} {source}; writing it would replace "
                f"the input: give another output file (--force does not override this)")
    if path.is_dir():
        raise OutputPathError(f"{where}: a folder; give a file path (a .csv or .jsonl file)")
    full = path.resolve()
    existing = next(p for p in full.parents if p.exists())
    roots = _repo_roots(Path.cwd().resolve(), existing)
    meta = _metadata_folder(full, roots)
    if meta is not None:
        raise OutputPathError(f"{where}: inside {meta}, the repository's own {meta.name} "
                              "data; give another output file (--force does not override "
                              "this)")
    problem = unwritable(full)
    if problem is not None:
        raise OutputPathError(f"{where}: {problem}; give {option} a path in a folder you "
                              "can write to (--force does not override this)")
    if force:
        return
    for root in roots:
        if path.exists() and _git(root, "ls-files", "-z", "--", str(full)):
            raise OutputPathError(f"{where}: tracked by git; writing it would replace the "
                                  f"committed file: give another output file, or pass "
                                  f"--force to replace it")
        for out, declared in dvc_outputs(root).items():
            if full == out:
                raise OutputPathError(
                    f"{where}: a DVC-tracked output (declared in {declared}); writing it "
                    f"would replace it: give another output file, or pass --force to "
                    f"replace it")
            if _within(full, out):
                raise OutputPathError(
                    f"{where}: inside the DVC-tracked output "
                    f"{out.relative_to(root) if _within(out, root) else out} (declared in "
                    f"{declared}); writing there would change it: give another output "
                    f"file, or pass --force to write it")
    if not path.exists():
        return
    if ours is not None and path.stat().st_size and not ours[1](path):
        raise OutputPathError(f"{where}: an existing file that `lorasent {ours[0]}` did not "
                              "write; writing it would replace it: give another output "
                              "file, or pass --force to replace it")


def aside_names(path: Path) -> Iterator[Path]:
    """``<path>.1.bak``, ``<path>.2.bak``, ...: the names :func:`keep_aside` tries."""
    return (path.with_name(f"{path.name}.{n}.bak") for n in itertools.count(1))


def keep_aside(path: str | Path) -> Path:
    """Copy the file at ``path`` to the first of :func:`aside_names` that does not exist,
    created exclusively (``open(..., "xb")``), so that no file is ever overwritten; its
    times and mode copied too. Returns the copy's path.

    Raises:
        OSError: ``path`` cannot be read, or the copy cannot be written.
    """
    path = Path(path)
    for aside in aside_names(path):
        try:
            with open(path, "rb") as src, open(aside, "xb") as dst:
                shutil.copyfileobj(src, dst)
        except FileExistsError:
            continue
        shutil.copystat(path, aside)
        return aside
    raise AssertionError("unreachable: aside_names never ends")


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
