"""The output-folder guard: refuse, before any work, an output folder or file whose
replacement would destroy what is there, and the marker a command leaves in a folder it
writes so that it may replace its own output again.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from lorasent.atomic import atomic_dir
from lorasent.dvc_project import dvc_outputs, git_paths, within
from lorasent.errors import LorasentError

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
                 if within(full, meta)), None)


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
    if within(cwd, full):
        what = ("the current folder" if full == cwd
                else f"a folder holding the current folder ({cwd})")
        raise OutputPathError(f"{where}: refusing to replace {what}: {command} replaces the "
                              f"whole folder it writes; {never}")
    if within(home, full):
        what = "your home folder" if full == home else f"{full}, which holds your home folder"
        raise OutputPathError(f"{where}: refusing to replace {what}; {never}")
    existing = next(p for p in (full, *full.parents) if p.exists())
    roots = _repo_roots(cwd, existing)
    for root in roots:
        if within(root, full):
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
        if within(source, full) or within(full, source):
            what = ("is" if source == full else "holds" if within(source, full)
                    else "is inside")
            raise OutputPathError(f"{where}: {what} {name} {given}, which {command} reads; "
                                  f"{never}")
    for root in roots:
        for out, declared in dvc_outputs(root).items():
            if within(out, full) or within(full, out):
                inside = "holding" if within(out, full) else "inside"
                raise OutputPathError(
                    f"{where}: refusing to replace a folder {inside} the DVC-tracked output "
                    f"{out.relative_to(root) if within(out, root) else out} (declared in "
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
        tracked = git_paths(root, "ls-files", "-z", "--full-name", "--", str(full)) \
            if within(full, root) else []
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
        if path.exists() and git_paths(root, "ls-files", "-z", "--", str(full)):
            raise OutputPathError(f"{where}: tracked by git; writing it would replace the "
                                  f"committed file: give another output file, or pass "
                                  f"--force to replace it")
        for out, declared in dvc_outputs(root).items():
            if full == out:
                raise OutputPathError(
                    f"{where}: a DVC-tracked output (declared in {declared}); writing it "
                    f"would replace it: give another output file, or pass --force to "
                    f"replace it")
            if within(full, out):
                raise OutputPathError(
                    f"{where}: inside the DVC-tracked output "
                    f"{out.relative_to(root) if within(out, root) else out} (declared in "
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
