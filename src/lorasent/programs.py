"""The programs lorasent runs (``dvc``, ``git``): where they are, and what to say when
one is missing.

``.venv/bin/lorasent`` runs without an activated venv, so ``dvc`` (installed into the venv
by ``make setup``) need not be on PATH: each program is looked up beside the running
Python first, then on PATH; and each runs with that folder first on PATH
(:func:`environment`), for the ``lorasent`` commands that DVC runs in turn.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from lorasent.errors import LorasentError

# How to get each program, after "<name>: program not found ...; ".
HOW_TO_GET = {
    "dvc": ("`make setup` installs it into .venv; then run .venv/bin/lorasent, or activate "
            ".venv (source .venv/bin/activate)"),
    "git": "install git (for example `apt-get install git`) and put it on PATH",
}


def program(name: str) -> str:
    """The path of the program ``name``: the one beside the running Python (the venv's
    ``bin``), else the first on PATH.

    Raises:
        LorasentError: it is in neither place; the message names the program and how to
            get it (:func:`not_found`).
    """
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        raise LorasentError(not_found(name))
    return found


def as_typed(name: str) -> str:
    """How a user types the program ``name`` here: the bare name when it is on PATH,
    else its path beside this Python (relative to the current folder when inside it),
    e.g. ``.venv/bin/dvc`` for a venv that is not activated."""
    beside = shutil.which(name, path=str(Path(sys.executable).parent))
    if beside is None or shutil.which(name) is not None:
        return name
    try:
        return str(Path(beside).relative_to(Path.cwd()))
    except ValueError:
        return beside


def environment() -> dict[str, str]:
    """The environment to run a program in: this one, with the running Python's folder
    first on PATH, so that the commands DVC runs in turn (the stages' ``lorasent ...``, a
    queued experiment's) are found as dvc was, with no activated venv."""
    path = os.environ.get("PATH")
    here = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": here + (os.pathsep + path if path else "")}


# The variables that say which GPUs a process may use: CUDA's, and HIP's and ROCr's on
# ROCm. A scheduler sets one per run: Ray 2.60 sets CUDA_VISIBLE_DEVICES, or
# HIP_VISIBLE_DEVICES where it finds AMD GPUs (lorasent.experiments.cluster, docs/scale-out.md).
VISIBLE_DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                            "ROCR_VISIBLE_DEVICES")


def visible_devices() -> dict[str, str]:
    """``{variable: value}`` of the :data:`VISIBLE_DEVICE_VARIABLES` set in this process
    (e.g. ``{"CUDA_VISIBLE_DEVICES": "1"}``: the GPU a sweep gave this run); ``{}``:
    every device of the machine is visible."""
    return {name: os.environ[name] for name in VISIBLE_DEVICE_VARIABLES if name in os.environ}


def not_found(name: str) -> str:
    """The message for a program that is missing: which one, where it was looked for, and
    how to get it. A missing program, never a missing file: nothing about pipeline stages."""
    how = HOW_TO_GET.get(name, "install it, or put the folder that holds it on PATH")
    return (f"{name}: program not found, neither beside this Python "
            f"({Path(sys.executable).parent}) nor on PATH; {how}")


def missing_program(err: FileNotFoundError) -> str | None:
    """The program's name when ``err`` says a program could not be started (``subprocess``
    found no executable), None when it is about a file or folder."""
    tb = err.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "_execute_child" and \
                frame.f_globals.get("__name__") == "subprocess":
            cwd = frame.f_locals.get("cwd")
            if err.filename is None or (cwd is not None and str(err.filename) == str(cwd)):
                return None  # the working folder is missing, not the program
            return Path(str(err.filename)).name
        tb = tb.tb_next
    return None
