"""Stopping the programs lorasent runs in a session of their own (``start_new_session``:
a Ctrl-C at the terminal reaches lorasent alone, which stops them in order).

- :func:`stop`: SIGTERM to a child's session (the program and what it started: dvc and
  the stage it runs, git and its ssh), SIGKILL after a grace period;
- :func:`interrupt`: a SIGTERM handler that raises ``KeyboardInterrupt``, so that
  ``kill`` stops a command as Ctrl-C does (its runs stopped, its clones removed).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Any

STOP_GRACE_S = 20  # seconds a stopped session's processes get after SIGTERM, before SIGKILL


def stop(proc: subprocess.Popen[Any], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to ``proc``'s session, SIGKILL after ``grace_s`` seconds (then 5 s more for
    it to go). ``proc`` must have been started with ``start_new_session=True``: its
    process group is its session's. A session already gone is no error."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait_s)
            return


def interrupt(signum: int, frame: Any) -> None:
    """A signal handler (``signal.signal(signal.SIGTERM, interrupt)``) that raises
    ``KeyboardInterrupt``, as Ctrl-C does."""
    raise KeyboardInterrupt
