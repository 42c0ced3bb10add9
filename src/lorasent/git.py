"""git, run in a folder: the one way lorasent runs it.

- :func:`git`: its standard output as text; a failure is a :class:`LorasentError` of one
  line that names the command, git's arguments, the folder and git's last words;
- :func:`git_or_none`: its output as text, None when git fails (for callers to whom a
  failure is an answer: not a repository, no such revision);
- :func:`git_bytes`: its output as bytes, None when git fails (``cat-file --batch``, a
  file's bytes at a revision);
- :func:`run_git`: the call under the three, for callers that read git's exit status
  and its standard error themselves.

git is found by :func:`lorasent.programs.program` and runs in a session of its own; past
``timeout_s`` seconds, or interrupted (Ctrl-C, a Ray cancel), its session (git and the
ssh or credential helper it started) is stopped (:func:`lorasent.processes.stop`). Its
standard input is empty unless ``input`` is given, so that git never waits on a prompt.
Messages go through :func:`lorasent.addresses.redact` (a remote's URL may hold a token).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lorasent.addresses import redact
from lorasent.errors import LorasentError
from lorasent.processes import stop
from lorasent.programs import program

STOP_GRACE_S = 1.0  # seconds a git past its time or interrupted gets after SIGTERM


def run_git(folder: str | Path, *args: str, text: bool = True, input: str | bytes | None = None,
            timeout_s: float | None = None, env: Mapping[str, str] | None = None
            ) -> subprocess.CompletedProcess[Any]:
    """``git <args>`` run in ``folder``, its output captured (``text``: decoded as
    ``subprocess`` decodes with ``text=True``; else bytes); ``input`` its standard input;
    ``env`` its environment (None: this process's). Never raises for git's exit status:
    the result holds it.

    Raises:
        LorasentError: git is not installed (:func:`lorasent.programs.program`'s line).
        OSError: git could not be started in ``folder`` (no such folder).
        subprocess.TimeoutExpired: git ran past ``timeout_s`` seconds (its session then
            stopped).
    """
    argv = [program("git"), *args]
    proc = subprocess.Popen(argv, cwd=folder, text=text, env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = proc.communicate(input, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop(proc, grace_s=STOP_GRACE_S)
        proc.communicate()
        raise
    except BaseException:
        stop(proc, grace_s=STOP_GRACE_S)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def git(folder: str | Path, *args: str, command: str = "git", input: str | None = None,
        timeout_s: float | None = None, env: Mapping[str, str] | None = None) -> str:
    """The standard output of ``git <args>`` run in ``folder`` (:func:`run_git`).

    Raises:
        LorasentError: git failed, one line: ``<command>: `git <args>` failed in <folder>:
            <git's last two lines>`` (or did not finish within ``timeout_s`` seconds);
            git is not installed.
    """
    where = Path(folder).resolve()
    try:
        done = run_git(folder, *args, input=input, timeout_s=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise LorasentError(redact(f"{command}: `git {' '.join(args)}` did not finish within "
                                   f"{timeout_s:g} s in {where}")) from None
    if done.returncode != 0:
        raise LorasentError(redact(f"{command}: `git {' '.join(args)}` failed in {where}: "
                                   + " ".join(done.stderr.strip().splitlines()[-2:])))
    return str(done.stdout)


def git_or_none(folder: str | Path, *args: str, input: str | None = None,
                timeout_s: float | None = None, env: Mapping[str, str] | None = None
                ) -> str | None:
    """The standard output of ``git <args>`` run in ``folder`` (:func:`run_git`); None
    when git exits with an error, cannot start there, or runs past ``timeout_s`` seconds.

    Raises:
        LorasentError: git is not installed (a caller to whom that is an answer too
            catches it).
    """
    try:
        done = run_git(folder, *args, input=input, timeout_s=timeout_s, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return str(done.stdout) if done.returncode == 0 else None


def git_bytes(folder: str | Path, *args: str, input: bytes | None = None,
              timeout_s: float | None = None, env: Mapping[str, str] | None = None
              ) -> bytes | None:
    """:func:`git_or_none`, the output as bytes (``input`` too).

    Raises:
        LorasentError: git is not installed.
    """
    try:
        done = run_git(folder, *args, text=False, input=input, timeout_s=timeout_s, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return bytes(done.stdout) if done.returncode == 0 else None
