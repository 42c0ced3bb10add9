"""The repo a sweep's runs clone, checked before anything runs: HEAD clean (:func:`check_repo`)
and, with ``--git-remote``, on that remote (:func:`_on_git_remote`); the runs of the grid
that landed before as experiments of HEAD with the same params (:func:`reusable`: a sweep
or a learning curve run again makes only the missing runs); and no other experiment of a
run's name.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from lorasent.addresses import RAISE_IT, connect_timeout_s, redact
from lorasent.errors import LorasentError
from lorasent.experiments.grid import RunSpec, with_sets
from lorasent.git import git, git_or_none, run_git
from lorasent.params import ParamsError, parse_params, read_yaml
from lorasent.programs import environment
from lorasent.review.collect import git_lines, read_at, run_dvc
from lorasent.run_pipeline import one_line

# What to do with files that differ from HEAD ({it}: it or them); with params.yaml among
# them, by command: sweep takes params changes as -S; learning-curve has no -S, it trains
# HEAD's params as committed.
COMMIT_THEM = "commit {it} (or `git stash`)"
PARAMS_EDIT = {"sweep": COMMIT_THEM + ", or give the params changes as -S",
               "learning-curve": "commit {it} for a curve of the edited params, or `git stash` "
                                 "{it} for HEAD's (learning-curve trains HEAD's params as "
                                 "committed; it takes no -S)"}


def landed_on(repo: Path, commit: str) -> set[str]:
    """The names of the experiments whose baseline is ``commit`` (their refs are
    ``refs/exps/<2 hex>/<38 hex>/<name>``)."""
    names = set()
    for ref in git_lines(repo, "for-each-ref", "--format=%(refname)", "refs/exps") or []:
        parts = ref.strip().split("/")
        if len(parts) == 5 and parts[2] + parts[3] == commit:
            names.add(parts[4])
    return names


def reusable(repo: Path, commit: str, runs: Sequence[RunSpec],
             command: str = "sweep") -> list[str]:
    """The runs of the grid that landed before as experiments of ``commit`` (HEAD) with
    the params that run would have (HEAD's params.yaml with its settings): a sweep or a
    learning curve run again under its name makes only the runs that are missing (a run
    that failed, a machine lost).

    Raises:
        LorasentError: an experiment of that name and commit with other params (one line
            naming it and what to do), prefixed ``command``.
    """
    landed = landed_on(repo, commit)
    head = read_yaml(read_at(repo, commit, "params.yaml") or "", "params.yaml")
    found = []
    for run in runs:
        if run.name not in landed:
            continue
        ref = next(iter(git_lines(repo, "for-each-ref", "--format=%(objectname)",
                                  f"refs/exps/*/*/{run.name}") or []), "").strip()
        try:
            same = parse_params(read_yaml(read_at(repo, ref, "params.yaml") or "",
                                          f"{run.name}:params.yaml"), run.name) == \
                parse_params(with_sets(head, run.sets), run.name)
        except ParamsError:
            same = False
        if not same:
            raise LorasentError(f"{command}: experiment {run.name} of this commit has "
                                "other params than that run would; remove it (dvc exp remove "
                                f"{run.name}) or choose another --name")
        found.append(run.name)
    return found


def check_repo(repo: Path, runs: Sequence[RunSpec], git_remote: str | None,
               command: str = "sweep", timeout_s: float | None = None
               ) -> tuple[str, str, list[str]]:
    """``(commit, url, reuse)``: HEAD, which must be clean (the runs clone it) and, with a
    ``git_remote``, on that remote; the url the runs clone from; and the runs that landed
    before (:func:`reusable`). No other run's name may be an existing experiment's.
    Errors are prefixed ``command`` and say what to do with an edited params.yaml for it
    (:data:`PARAMS_EDIT`). The git remote is checked by :func:`_on_git_remote`, within
    ``timeout_s`` seconds."""
    commit = git(repo, "rev-parse", "HEAD", command=command).strip()
    dirty = [line[3:] for line in git(repo, "status", "--porcelain",
                                      "--untracked-files=no", command=command).splitlines()]
    if dirty:
        files = ", ".join(dirty[:5]) + (" ..." if len(dirty) > 5 else "")
        raise LorasentError(
            f"{command}: each run clones commit HEAD, and {files} "
            f"{'differs' if len(dirty) == 1 else 'differ'} from it: "
            + (PARAMS_EDIT.get(command, COMMIT_THEM) if "params.yaml" in dirty
               else COMMIT_THEM).format(it="it" if len(dirty) == 1 else "them"))
    reuse = reusable(repo, commit, runs, command)
    existing = set(str(run_dvc(repo, "exp", "list", "--all-commits", "--name-only",
                               as_json=False, command=command)).split())
    if clash := sorted(existing & {run.name for run in runs} - set(reuse)):
        raise LorasentError(f"{command}: experiments {', '.join(clash)} exist already; choose "
                            f"another --name, or remove them (dvc exp remove {' '.join(clash)})")
    if git_remote is None:
        return commit, str(repo.resolve()), reuse
    return commit, _on_git_remote(repo, git_remote, commit, command, timeout_s), reuse


def _on_git_remote(repo: Path, git_remote: str, commit: str, command: str = "sweep",
                   timeout_s: float | None = None) -> str:
    """The URL of ``repo``'s git remote ``git_remote``, which answers and holds
    ``commit``: its branches as they are now (``git ls-remote``) fetched, and ``commit``
    an ancestor of one of them.

    The remote gets ``timeout_s`` seconds (None:
    :func:`lorasent.addresses.connect_timeout_s`) to connect and list its branches: one
    that accepts the connection and stays silent would hold the command for as long as git
    and ssh wait (no limit), without a word. Every line names the URL through
    :func:`lorasent.addresses.redact`.

    Raises:
        LorasentError: the remote did not answer in time, refused (git's last line), or
            lacks ``commit``; prefixed ``command``.
    """
    url = git(repo, "remote", "get-url", git_remote, command=command).strip()
    wait_s = connect_timeout_s(timeout_s)

    def ask(*args: str, limit_s: float | None = None) -> str:
        try:
            done = run_git(repo, *args, timeout_s=limit_s, env=environment())
        except subprocess.TimeoutExpired:
            raise LorasentError(redact(
                f"{command}: git remote {git_remote} ({url}) did not answer within "
                f"{limit_s:g} s (`git {args[0]}`: the time it gets to connect and list its "
                "branches): check its address (host, port) and that a git server runs "
                f"there; {RAISE_IT}")) from None
        if done.returncode != 0:
            said = done.stderr.strip().splitlines()
            raise LorasentError(redact(
                f"{command}: git remote {git_remote} ({url}) does not answer "
                f"({one_line(said[-1] if said else done.returncode)}); the runs clone from "
                "it: check its address and this machine's key"))
        return str(done.stdout)

    # the remote's branches as they are now, not as this clone last saw them (another
    # machine may have pushed, or a branch been deleted or reset there since): their tips
    # fetched, and HEAD an ancestor of one of them
    tips = [line.split()[0] for line in ask("ls-remote", "--heads", git_remote,
                                            limit_s=wait_s).splitlines() if line.strip()]
    ask("fetch", "--quiet", git_remote)
    if not any(git_or_none(repo, "merge-base", "--is-ancestor", commit, tip) is not None
               for tip in tips):
        raise LorasentError(redact(f"{command}: commit {commit[:7]} is not on {git_remote} "
                                   f"({url}), and the runs clone it from there: git push "
                                   f"{git_remote} HEAD"))
    return url
