"""The DVC project a command runs in, read by hand from its files: the outputs that
dvc.yaml, dvc.lock and the ``.dvc`` files declare, a stage's deps, and the check that a
file a param names is among them (:func:`require_deps`).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from lorasent.errors import LorasentError
from lorasent.git import git_bytes


def within(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies below it (both as given: resolve first)."""
    return path == folder or folder in path.parents


def git_paths(root: Path, *args: str) -> list[str]:
    """``git <args>``'s NUL-separated output in ``root`` (:func:`lorasent.git.git_bytes`,
    within 60 s); empty when git is missing, fails, or ``root`` is no git work tree (then
    nothing there is git-tracked)."""
    try:
        out = git_bytes(root, *args, timeout_s=60)
    except LorasentError:  # git is not installed
        return []
    return [p for p in (out or b"").decode("utf-8", "surrogateescape").split("\0") if p]


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
    for name in git_paths(root, "ls-files", "-z", "--", "*.dvc"):
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
# Nor baseline.encoder.model and baseline.encoder_ft.model, local encoder folders as
# large: baseline records each one's hash (model_sha256) beside what it fitted.
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
        if not any(within(path, dep) for dep in deps):
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
    if not within(written, top) or not any(within(written, dep) for dep in deps):
        return None
    for part in [*reversed(written.parents), written]:
        if within(part, top) and part != top and part.is_symlink():
            shown, target = part.relative_to(top).as_posix(), part.resolve()
            break
    else:
        return None
    link, to = shlex.quote(shown), shlex.quote(str(target))
    copy = (f"rm {link} && cp -r {to} {link}" if target.is_dir()
            else f"cp --remove-destination {to} {link}")
    if within(target, top):
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
