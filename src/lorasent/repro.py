"""``make run``'s pipeline run: ``dvc repro`` in this process, then one closing hint.

Usage: ``python -m lorasent.repro [--pull]`` (``make run`` passes ``--pull`` when a
default DVC remote is set; docs/sharing.md).

With ``--pull`` DVC first tries to take each unchanged stage's outputs from the remote.
On a new, empty remote (or one this run was never pushed to) it cannot, and says so
for each such stage in warnings such as::

    Pulling data for stage: 'fetch'
    WARNING: Some of the cache files do not exist neither locally nor on remote. Missing ...
    md5: 9cfdc2b8b5f6365cd1bcba53cde64ebb.dir
    Unable to pull data for stage: 'fetch'

and then runs the stage here. The first time DVC logs one of them,
:data:`NOT_ON_REMOTE` says once, before the stage runs, what they mean. DVC's own
closing hint ("git add dvc.lock") names the lock alone; :func:`closing_hint` names
everything a run changes in git (``params.yaml``, ``dvc.lock``, ``metrics/``), only
when git sees one of them changed, and ``dvc push`` when a remote is set.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys

# DVC's log records (their format strings, not the formatted text) that mean "the
# remote lacks this stage's outputs", and the one that starts a stage here.
MISSING_ON_REMOTE = "Some of the cache files do not exist neither locally nor on remote"
PULL_FAILED = "Unable to pull data for %s"
RUNNING_STAGE = "Running stage '%s':"
# The loggers they come from (dvc.data_cloud, dvc.stage and its child dvc.stage.run).
DVC_LOGGERS = ("dvc.data_cloud", "dvc.stage")

NOT_ON_REMOTE = ("run: DVC's 'Missing cache files' and 'Unable to pull data' warnings (above, "
                 "and any for a later stage) mean that the DVC remote does not hold these "
                 "outputs yet (a new remote, or a run nobody pushed): each such stage runs here "
                 "instead, and `dvc push` after the run fills the remote")
# What a run changes in git: the params it ran with, the lock, the small outputs.
RUN_FILES = ("params.yaml", "dvc.lock", "metrics")
COMMIT = ("run: to keep this run, commit params.yaml, dvc.lock and metrics/ together "
          "(not dvc.lock alone): git add params.yaml dvc.lock metrics && git commit")
PUSH = "dvc push, so that clones pull its outputs instead of running the stages again"
UNCHANGED = "run: params.yaml, dvc.lock and metrics/ are as committed: nothing to commit"


class PullWarnings(logging.Handler):
    """Notes DVC's records that the remote lacks a stage's outputs and prints
    :data:`NOT_ON_REMOTE` once, just before the next stage runs (or at the end).

    Attached to the loggers of :data:`DVC_LOGGERS`, it sees each record before DVC's own
    handlers (on the ``dvc`` logger) print it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen = False  # one of the warnings was logged
        self.said = False  # NOT_ON_REMOTE was printed

    def emit(self, record: logging.LogRecord) -> None:
        message = str(record.msg)
        if message.startswith(MISSING_ON_REMOTE) or message == PULL_FAILED:
            self.seen = True
        elif message == RUNNING_STAGE:
            self.say()

    def say(self) -> None:
        """Print :data:`NOT_ON_REMOTE`, once, if one of the warnings was logged."""
        if self.seen and not self.said:
            self.said = True
            print(NOT_ON_REMOTE, flush=True)


def closing_hint(changed: bool, *, remote: bool, pull_warnings: bool = False) -> str:
    """The line that ends ``make run``.

    ``changed``: git sees one of :data:`RUN_FILES` changed (or new); ``remote``: a default
    DVC remote is set; ``pull_warnings``: DVC could not pull a stage's outputs from it,
    so the remote lacks what this run made even when git sees nothing to commit.
    """
    if changed:
        return f"{COMMIT}; then {PUSH}" if remote else COMMIT
    if remote and pull_warnings:
        return f"{UNCHANGED}; the remote lacks the outputs made here: {PUSH}"
    return UNCHANGED


def run_files_changed() -> bool | None:
    """Whether git sees :data:`RUN_FILES` changed, new or deleted in the current folder;
    None when git cannot tell (not a git repository, no git)."""
    try:
        done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--",
                               *RUN_FILES], capture_output=True, text=True, check=False)
    except OSError:
        return None
    return bool(done.stdout.strip()) if done.returncode == 0 else None


def reproduce(pull: bool) -> int:
    """``dvc repro`` (``--pull``) in this process, :data:`NOT_ON_REMOTE` after DVC's
    first warning that the remote lacks a stage's outputs, and :func:`closing_hint`
    after a run that succeeded (none when git cannot tell what changed).

    Returns:
        DVC's exit status.
    """
    from dvc.cli import main as dvc_main

    watch = PullWarnings()
    loggers = [logging.getLogger(name) for name in DVC_LOGGERS]
    for logger in loggers:
        logger.addHandler(watch)
    try:
        status = dvc_main(["repro", *(["--pull"] if pull else [])])
    finally:
        for logger in loggers:
            logger.removeHandler(watch)
    watch.say()
    if status == 0:
        changed = run_files_changed()
        if changed is not None:
            print(closing_hint(changed, remote=pull, pull_warnings=watch.seen), flush=True)
    return status


def main(argv: list[str] | None = None) -> None:
    """``python -m lorasent.repro [--pull]``: exits with DVC's status."""
    parser = argparse.ArgumentParser(prog="python -m lorasent.repro",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--pull", action="store_true",
                        help="dvc repro --pull: take unchanged stages' outputs from the "
                             "default DVC remote")
    sys.exit(reproduce(parser.parse_args(argv).pull))


if __name__ == "__main__":
    main()
