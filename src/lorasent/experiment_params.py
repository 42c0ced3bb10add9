"""The params of a DVC experiment: inside ``dvc exp run``, what a stage prints first (the
params that differ from the experiment's baseline commit) and what a params error adds
(where the bad value was written, and the way back).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lorasent.errors import LorasentError
from lorasent.params import read_params_text, read_yaml

# What ``dvc exp run`` sets in the environment of the stages it runs (dvc.env): the
# experiment's name, its baseline commit (HEAD when it was started) and the workspace's
# root. Named here, not imported: importing dvc sets up its logging in every stage.
EXP_NAME, EXP_BASELINE, EXP_ROOT = "DVC_EXP_NAME", "DVC_EXP_BASELINE_REV", "DVC_ROOT"


def _experiment() -> tuple[str, str] | None:
    """``(name, baseline commit)`` of the DVC experiment this stage runs in, else None."""
    name = os.environ.get(EXP_NAME)
    return (name, os.environ.get(EXP_BASELINE) or "HEAD") if name else None


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{"train.lora.r": 8, ...}``: every leaf of nested mappings, by dotted key."""
    if not isinstance(node, dict):
        return {prefix: node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def params_changes(path: str | Path, rev: str = "HEAD") -> list[str]:
    """``key: REV value -> this run`` for each param of the file ``path`` that differs
    from the same file in the git commit ``rev`` (``git show REV:./params.yaml``, in the
    file's folder), in the file's key order; values as JSON, ``(not set)`` for a key one
    side lacks. Empty when the two hold the same values.

    Raises:
        LorasentError: git is missing, or cannot read the file at ``rev`` (not a git
            repository, the file not committed); the message gives git's reason.
        ParamsError: either side is not YAML.
    """
    from lorasent.git import run_git
    from lorasent.programs import environment

    path = Path(path)
    done = run_git(path.absolute().parent, "show", f"{rev}:./{path.name}", text=False,
                   env=environment())
    if done.returncode != 0:
        reason = (_text(done.stderr).strip().splitlines()
                  or [f"exit status {done.returncode}"])[0]
        raise LorasentError(f"git cannot read {path} at {rev}: {reason}")
    before = _flat(read_yaml(_text(done.stdout), f"{path} at {rev}") or {})
    now = _flat(read_yaml(read_params_text(path), path) or {})
    return [f"{key}: {_shown(before, key)} -> {_shown(now, key)}"
            for key in [*now, *(k for k in before if k not in now)]
            if key not in before or key not in now or before[key] != now[key]]


def _text(output: bytes) -> str:
    """git's output as text: UTF-8, an undecodable byte replaced, newlines as ``\\n``
    (what ``subprocess`` gives with ``encoding="utf-8", errors="replace"``)."""
    return output.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def _shown(values: dict[str, Any], key: str) -> str:
    """A value as JSON (one line, whatever it holds), or ``(not set)``."""
    if key not in values:
        return "(not set)"
    return json.dumps(values[key], ensure_ascii=False, default=str)


def experiment_params_report(path: str | Path) -> str | None:
    """Inside a DVC experiment (``dvc exp run`` sets :data:`EXP_NAME`), what a stage prints
    first: the params of ``path`` that differ from the experiment's baseline commit, one
    line per key (:func:`params_changes`), or that none does. None outside an experiment.
    A baseline git cannot read is said in the text, not raised: the stage goes on."""
    experiment = _experiment()
    if experiment is None:
        return None
    name, rev = experiment
    where = f"DVC experiment {name}: {Path(path).name} "
    try:
        changes = params_changes(path, rev)
    except LorasentError as err:
        return f"{where}not compared with HEAD ({rev[:7]}): {err}"
    if not changes:
        return f"{where}holds HEAD's params ({rev[:7]})"
    return "\n".join([f"{where}differs from HEAD ({rev[:7]}) in {len(changes)} "
                      f"key{'s' if len(changes) > 1 else ''} (HEAD -> this run):",
                      *(f"  {change}" for change in changes)])


# Set by `make exp` around `dvc exp run`: on a failure it restores params.yaml and the
# outputs itself, so a params error must not send the user to `git checkout`.
MAKE_EXP = "LORASENT_MAKE_EXP"


def experiment_params_advice(path: str | Path) -> str:
    """What a params error adds inside a DVC experiment ("" outside one): ``dvc exp run -S``
    wrote its values into ``path`` before the stage read it, so a workspace run leaves the
    bad value there for the next run; the line names the keys that differ from HEAD
    (:func:`params_changes`) and the way back (fix the value, or ``git checkout`` and
    ``dvc checkout``: DVC removes a stage's outputs before it runs the stage). A
    queued or ``--temp`` experiment runs in a copy under ``.dvc/tmp`` and leaves the
    workspace's file as it was, and the line says so; so does ``make exp``
    (:data:`MAKE_EXP` set), which puts the params and the outputs back itself."""
    experiment = _experiment()
    if experiment is None:
        return ""
    name, rev = experiment
    path = Path(path)
    try:
        changes = params_changes(path, rev)
    except LorasentError:
        changes = []
    differ = (f" ({path} differs from HEAD in {'; '.join(changes)})" if changes else "")
    root = os.environ.get(EXP_ROOT)
    if os.environ.get(MAKE_EXP):
        return (f"\n  DVC experiment {name}{differ}: make exp puts {path.name} and the "
                "outputs back as they were before it; run it again with a valid value")
    if root and path.absolute().resolve().is_relative_to(Path(root).resolve() / ".dvc"):
        return (f"\n  DVC experiment {name} runs in a temporary copy{differ}; the "
                f"workspace's {path.name} is unchanged: run it again with a valid value")
    return (f"\n  DVC experiment {name}: `dvc exp run -S` has already written its values "
            f"into {path}{differ}, and the next run would use them: fix the value "
            f"(`dvc exp run -S key=value`), or go back to HEAD's params and to the outputs "
            f"DVC removed before the stage ran with `git checkout {path} && dvc checkout`")
