"""How a command prints an error: one line naming what is wrong and what to do, no
traceback, exit status 1 (:func:`user_errors`, which every ``lorasent`` command wears)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import click

from lorasent.errors import LorasentError

P = ParamSpec("P")
R = TypeVar("R")


def user_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Print a user error's message (no traceback) and exit with status 1.

    A missing file is one an earlier stage writes (the message says to run them); a
    program that could not be started (dvc, git) is named as a program, with how to get
    it (``lorasent.programs``). A write that failed for lack of space, wherever it was,
    is one line naming the filesystem, what was written and where
    (:func:`lorasent.environment.out_of_space_message`). ``LORASENT_DEBUG=1`` re-raises
    instead, for a traceback.
    """

    command = func.__name__.replace("_", "-")  # click's name of the command

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (LorasentError, FileNotFoundError) as err:
            if os.environ.get("LORASENT_DEBUG"):
                raise
            text = str(err)
            if isinstance(err, FileNotFoundError):
                from lorasent.programs import missing_program, not_found

                name = missing_program(err)  # a program that could not start: not a stage's
                text = (not_found(name) if name else
                        f"{err.filename}: not found; run the earlier stages first (dvc repro)")
            # a message that names the command itself ("compare: ...") is not prefixed twice
            message = text.removeprefix(f"{command}: ")
            click.echo(f"lorasent {command}: error: {message}", err=True)
            sys.exit(1)
        except Exception as err:
            # only an error that can be a full disk loads lorasent.environment (and torch)
            if os.environ.get("LORASENT_DEBUG") or not (
                    isinstance(err, (OSError, RuntimeError)) or "os error" in str(err)):
                raise
            from lorasent.environment import out_of_space_message

            no_space = out_of_space_message(err)
            if no_space is None:
                raise
            click.echo(f"lorasent {command}: error: {no_space}", err=True)
            sys.exit(1)

    return wrapper
