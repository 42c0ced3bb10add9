"""``make run``'s pipeline run: ``dvc repro`` in this process, then one closing hint.

Usage: ``python -m lorasent.run_pipeline [--pull] [--connect-timeout S]`` (``make run`` passes
``--pull`` when a default DVC remote is set; docs/sharing.md).

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

DVC does not check what it pulls: an object whose bytes changed on the remote is taken
under its name, checked out, and ``dvc status`` then says "up to date" (it trusts the
hash it recorded at checkout). So every stage whose outputs DVC pulled or checked out
in this run (its "Pulling data for" and "is cached - skipping run, checking out
outputs" records) is checked against ``dvc.lock`` (:func:`damaged_outputs`: DVC's own
MD5 of each file). A file that does not match stops the run in one line naming it,
the stage and the remote (:func:`damage_message`), and is removed, so that nothing
uses it (``lorasent predict`` the adapter, for one) and ``dvc status`` no longer
calls it up to date.

Before all that, with ``--pull``, the default remote is asked whether its folder exists
(:func:`remote_problem`, through the remote's own DVC filesystem: dvc-ssh, dvc-s3, a
folder). A remote that refuses this machine (a key file the SSH server does not take,
credentials S3 refuses) or that cannot be reached would otherwise end ``dvc repro
--pull`` in DVC's "unexpected error - Permission denied ..."; the run stops instead, in
one line naming the remote (through :func:`lorasent.addresses.redact`: no password, no
token or signature) and what to fix, and nothing is pulled or trained. A remote that
accepts the connection and never answers gets ``--connect-timeout`` seconds
(``LORASENT_CONNECT_TIMEOUT``, else 10) to connect and answer, not the plugins' minutes.
A local remote folder this user cannot write (read-only, or its disk full:
:func:`remote_unwritable`) is said in one line before DVC runs; the run still pulls from
it, and its closing hint does not ask for a ``dvc push`` there. Should DVC fail to write
objects anyway (a full or read-only cache or remote), its error per object is said as one
line with the count (:class:`TransferErrors`).
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorasent.addresses import (
    CONNECT_TIMEOUT_ENV,
    CONNECT_TIMEOUT_S,
    RAISE_IT,
    NoAnswer,
    connect_timeout_s,
    redact,
    redacted_logs,
    within,
)

# DVC's log records (their format strings, not the formatted text) that mean "the
# remote lacks this stage's outputs", and the one that starts a stage here.
MISSING_ON_REMOTE = "Some of the cache files do not exist neither locally nor on remote"
PULL_FAILED = "Unable to pull data for %s"
RUNNING_STAGE = "Running stage '%s':"
# The records of a stage whose outputs DVC pulls and checks out (args: the stage), and
# of one it checks out of its run cache (args: the stage's name).
PULLING = "Pulling data for %s"
RESTORED = "Stage '%s' is cached - skipping run, checking out outputs"
# The loggers they come from (dvc.data_cloud, dvc.stage and its child dvc.stage.run).
DVC_LOGGERS = ("dvc.data_cloud", "dvc.stage")
# The loggers of DVC (the three its handlers print: dvc.logger.setup), of its remote
# plugins and of the filesystems under them: their records pass through
# lorasent.addresses.redact while DVC runs here (a warning may name a remote's URL with
# its password: "Failed to pull run cache: ...").
DVC_PLUGIN_LOGGERS = ("dvc", "dvc_objects", "dvc_data", "dvc_http", "dvc_s3", "dvc_ssh",
                      "fsspec", "s3fs", "sshfs", "asyncssh", "aiohttp", "botocore")

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


# The loggers that log each object DVC failed to copy ("failed to transfer '%s'", with its
# error), and the errors that no retry mends: a full disk, a read-only or forbidden folder.
TRANSFER_LOGGERS = ("dvc_objects.fs.generic", "dvc_data.hashfile.transfer",
                    "dvc_data.index.fetch")
TRANSFER_FAILED = "failed to transfer '%s'"
UNWRITABLE = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
              errno.EROFS: "the folder is read-only", errno.EACCES: "this user may not write it",
              errno.EPERM: "this user may not write it"}


class TransferErrors(logging.Filter):
    """Drops DVC's per-object "failed to transfer" records whose error is one of
    :data:`UNWRITABLE` (a full or read-only folder fails every object alike), counting them,
    so that :meth:`line` says them once; other records pass."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.first: OSError | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if (str(record.msg) == TRANSFER_FAILED and isinstance(exc, OSError)
                and exc.errno in UNWRITABLE):
            self.count += 1
            self.first = self.first or exc
            return False
        return True

    def line(self) -> str | None:
        """One line for the records dropped (None when none were): how many objects,
        the folder's error, where, and what to do."""
        if self.first is None:
            return None
        where = self.first.filename or "the DVC cache or remote"
        return redact(f"run: DVC could not write {self.count} object(s): "
                      f"{UNWRITABLE[self.first.errno or 0]} ({where}: "
                      f"{self.first.strerror}); free space there or make it writable for "
                      "this user, then run make run again")


def folder_unwritable(path: str | Path) -> str | None:
    """Why this user cannot write into the existing folder ``path`` (a local DVC remote):
    it is read-only for this user (``os.access`` W_OK), or its disk has 0 bytes free
    (``shutil.disk_usage``); None when neither, or no such folder (DVC makes it)."""
    if not os.path.isdir(path):
        return None
    if not os.access(path, os.W_OK):
        return "is read-only for this user"
    if shutil.disk_usage(path).free == 0:
        return "is on a full disk (0 bytes free)"
    return None


def remote_unwritable(root: Path = Path(".")) -> str | None:
    """One line when ``root``'s default DVC remote is a local folder this user cannot write
    (:func:`folder_unwritable`): ``make run`` still pulls from it, but ``dvc push`` there
    would fail object by object. The remote's name and folder go through
    :func:`lorasent.addresses.redact`; None for any other remote, or one that can be
    written."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        repo = Repo(str(root))
    except DvcException:
        return None
    with repo:
        name = repo.config["core"].get("remote")
        config = repo.config["remote"].get(name) if name else None
        url = str((config or {}).get("url", ""))
        if not url or "://" in url:
            return None
        try:
            path = repo.cloud.get_remote(name).path
        except DvcException:
            return None
    why = folder_unwritable(path)
    return None if why is None else redact(
        f"run: DVC remote '{name}' ({path}) {why}: make run pulls from it, but `dvc push` "
        "there fails; free space there or make it writable for this user (or `dvc remote "
        "default <a remote you may write>`) before pushing this run")


class PullWarnings(logging.Handler):
    """Notes DVC's records that the remote lacks a stage's outputs and prints
    :data:`NOT_ON_REMOTE` once, just before the next stage runs (or at the end).

    Attached to the loggers of :data:`DVC_LOGGERS`, it sees each record before DVC's own
    handlers (on the ``dvc`` logger) print it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen = False  # one of the warnings was logged
        self.said = False  # NOT_ON_REMOTE was printed
        self.checked_out: dict[str, None] = {}  # the stages DVC pulled or checked out, in order

    def emit(self, record: logging.LogRecord) -> None:
        message = str(record.msg)
        if message.startswith(MISSING_ON_REMOTE) or message == PULL_FAILED:
            self.seen = True
        elif message == RUNNING_STAGE:
            self.say()
        elif message in (PULLING, RESTORED) and record.args:
            first = record.args[0] if isinstance(record.args, tuple) else record.args
            self.checked_out[str(getattr(first, "addressing", first))] = None

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
    from lorasent.errors import LorasentError
    from lorasent.git import git_or_none

    try:
        out = git_or_none(".", "status", "--porcelain", "--untracked-files=all", "--",
                          *RUN_FILES)
    except LorasentError:  # git is not installed
        return None
    return None if out is None else bool(out.strip())


@dataclass(frozen=True)
class Damaged:
    """A file of a stage's outputs whose bytes are not the ones ``dvc.lock`` records.

    ``path``: the file, relative to the project's root (a folder's file list: the
    folder, ``listing`` True); ``expected``: the MD5 dvc.lock records for it (a folder's
    file: the one its file list gives), the name of the object DVC took; ``found``: its
    MD5 here."""

    path: str
    stage: str
    expected: str
    found: str
    listing: bool = False

    @property
    def object(self) -> str:
        """The object's path in a DVC 3 cache or remote: ``files/md5/<2 hex>/<rest>``."""
        return f"files/md5/{self.expected[:2]}/{self.expected[2:]}"


def _lock_outs(root: Path) -> dict[str, list[dict[str, Any]]]:
    """``{stage: its outs in dvc.lock}`` (``path``, ``md5``, ``hash``...); {} without a
    readable dvc.lock."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe", pure=True).load((root / "dvc.lock").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, YAMLError):
        return {}
    stages = data.get("stages") if isinstance(data, dict) else None
    return {str(name): [o for o in spec.get("outs") or [] if isinstance(o, dict)]
            for name, spec in (stages.items() if isinstance(stages, dict) else ())
            if isinstance(spec, dict)}


def damaged_outputs(root: Path, stages: Iterable[str], objects: Path) -> list[Damaged]:
    """The files of ``stages``' outputs whose MD5 here is not the one ``root``'s
    ``dvc.lock`` records, in dvc.lock's order.

    Each file is hashed as DVC hashes it (``dvc_data.hashfile.hash.file_md5``, under the
    hash name dvc.lock gives: ``md5``, or ``md5-dos2unix`` for a DVC 2 entry without
    ``hash``). A folder output (an MD5 ending ``.dir``) is checked through its file list,
    the object ``<objects>/<2 hex>/<rest>.dir`` (``objects``: the DVC cache's
    ``files/md5`` folder): the list itself first (its MD5 is the folder's), then each file
    it lists. A file that is not here is left out (nothing can use it, and ``dvc status``
    says it is missing), and so is a folder whose list is not in the cache (DVC could not
    have checked it out).

    Args:
        root: the DVC project's root (dvc.lock's folder; its ``wdir`` is ``.``).
        stages: the stages' names, as dvc.lock spells them.
        objects: the cache's objects folder (``Repo().cache.local.path``).

    Returns:
        one :class:`Damaged` per file that differs (a damaged file list: the folder).
    """
    from dvc_data.hashfile.hash import file_md5

    found: list[Damaged] = []
    outs = _lock_outs(root)
    for stage in stages:
        for out in outs.get(stage, []):
            path, md5 = out.get("path"), out.get("md5")
            if not isinstance(path, str) or not isinstance(md5, str):
                continue
            name = "md5" if out.get("hash") == "md5" else "md5-dos2unix"
            full = root / path
            if not md5.endswith(".dir"):
                if full.is_file() and (here := file_md5(str(full), name=name)) != md5:
                    found.append(Damaged(path, stage, md5, here))
                continue
            listing = objects / md5[:2] / md5[2:]
            if not listing.is_file():
                continue
            if (here := file_md5(str(listing), name="md5")) != md5.removesuffix(".dir"):
                found.append(Damaged(path, stage, md5, here + ".dir", listing=True))
                continue
            for entry in json.loads(listing.read_text(encoding="utf-8")):
                relpath, want = str(entry.get("relpath", "")), str(entry.get("md5"))
                file = full / relpath
                if file.is_file() and (here := file_md5(str(file), name=name)) != want:
                    found.append(Damaged(f"{path.rstrip('/')}/{relpath}", stage, want, here))
    return found


def damage_message(damaged: list[Damaged], remote: tuple[str, str] | None) -> str:
    """The one line that stops the run: the first damaged file, its stage, the remote
    (``(name, url)``; None: no remote, the DVC cache's copy), what was removed and what to
    do."""
    first = damaged[0]
    what = f"{first.path}'s file list" if first.listing else first.path
    source = (f"from DVC remote '{remote[0]}' ({redact(remote[1])})" if remote
              else "from the DVC cache")
    more = (f" (and {len(damaged) - 1} more file{'s' * (len(damaged) > 2)}: "
            + ", ".join(d.path for d in damaged[1:4]) + (", ..." if len(damaged) > 4 else "")
            + ")") if len(damaged) > 1 else ""
    where = "on the remote and in the DVC cache" if remote else "in the DVC cache"
    return (f"run: {what} as pulled {source} is damaged: its md5 is {first.found}, dvc.lock "
            f"records {first.expected} (stage {first.stage}){more}; removed here so that "
            f"nothing uses it. Delete {first.object} {where}, then `dvc push` from a clone "
            f"with a good copy, or rerun the stage here: dvc repro --force {first.stage}")


def remove_damaged(root: Path, damaged: Iterable[Damaged]) -> None:
    """Remove the damaged files DVC checked out (a damaged file list: its folder's
    files, which it chose), so that nothing uses them."""
    import shutil

    for d in damaged:
        target = root / d.path
        if d.listing and target.is_dir():
            shutil.rmtree(target)
        elif target.is_file() or target.is_symlink():
            target.unlink()


def check_checked_out(stages: Iterable[str], pull: bool, root: Path = Path(".")) -> str | None:
    """Check the outputs of ``stages`` (those DVC pulled or checked out) against
    ``dvc.lock`` (:func:`damaged_outputs`, in this project's DVC cache); remove any
    damaged file (:func:`remove_damaged`) and return the line that says so
    (:func:`damage_message`, naming the default remote, ``core.remote``, when ``pull``);
    None when all match."""
    from dvc.repo import Repo

    stages = list(stages)
    if not stages:
        return None
    with Repo(str(root)) as repo:
        objects = Path(repo.cache.local.path)
        name = repo.config["core"].get("remote") if pull else None
        remote = (str(name), str(repo.config["remote"].get(name, {}).get("url"))) if name else None
    damaged = damaged_outputs(root, stages, objects)
    if not damaged:
        return None
    remove_damaged(root, damaged)
    return damage_message(damaged, remote)


# What to fix when a remote refuses this machine, by its URL's scheme ({name}: the
# remote's name, {keyfile}: its key file, as .dvc/config or .dvc/config.local give it).
REFUSED_FIX = {
    "ssh": "check its key file ({keyfile}; dvc remote modify --local {name} keyfile "
           "<private key>) and that the server's authorized_keys holds its public key",
    "s3": "check its credentials: dvc remote modify --local {name} access_key_id <id> and "
          "secret_access_key <secret> (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
          "AWS_PROFILE, in the environment)",
    "local": "check that this user may read and write that folder",
}
OTHER_FIX = ("check its credentials (docs/sharing.md#credentials: .dvc/config.local or the "
             "environment, never .dvc/config)")


def remote_problem(root: Path = Path("."), timeout_s: float | None = None) -> str | None:
    """Whether ``root``'s default DVC remote lets this machine in: its fs (the remote's
    DVC plugin, with the credentials DVC would use) asked whether the remote's folder
    exists. None when it answers (yes or no: a new, empty remote is fine) or no default
    remote is set; else one line naming the remote (its URL and an S3 ``endpointurl``
    through :func:`lorasent.addresses.redact`: no password, no signature), what it said,
    and what to fix: a refusal (PermissionError, DVC's AuthError) names the key file or
    the credentials (:data:`REFUSED_FIX`), and so do no credentials at all
    (:func:`no_credentials`); an address that does not answer (any other error of the
    plugin's) says so, and so do a plugin (or a library it needs) that is missing and a
    setting DVC rejects.

    ``timeout_s``: the seconds the remote gets to connect and answer (None:
    :func:`lorasent.addresses.connect_timeout_s`, 10 unless ``LORASENT_CONNECT_TIMEOUT``
    says otherwise). A remote that accepts the connection and stays silent (DVC's plugins
    would wait 120 to 300 s, and retry) is named as not answering within them.

    Raises:
        LorasentError: ``LORASENT_CONNECT_TIMEOUT`` is not a number of seconds above 0.
    """
    timeout_s = connect_timeout_s(timeout_s)
    problem = _remote_problem(root, timeout_s)
    return None if problem is None else redact(problem)


def _remote_problem(root: Path, timeout_s: float) -> str | None:
    from urllib.parse import urlsplit

    from dvc.config import ConfigError
    from dvc.exceptions import DvcException
    from dvc.fs import AuthError, RemoteMissingDepsError
    from dvc.fs import ConfigError as FsConfigError
    from dvc.repo import Repo

    try:
        repo = Repo(str(root))
    except DvcException:  # no DVC project here, or a config file DVC rejects: DVC says so
        return None
    with repo:
        name = repo.config["core"].get("remote")
        if not name:
            return None
        if name not in repo.config["remote"]:
            return (f"the default DVC remote '{name}' (core.remote) is not defined: dvc remote "
                    f"add {name} <url>, or dvc remote default <another remote>")
        config = dict(repo.config["remote"][name])
        url = str(config.get("url", ""))
        scheme = urlsplit(url).scheme if "://" in url else "local"
        where = url + (f" at {config['endpointurl']}" if config.get("endpointurl") else "")
        said = f"DVC remote '{name}' ({where})"
        fix = REFUSED_FIX.get(scheme, OTHER_FIX).format(
            name=name, keyfile=config.get("keyfile") or "none set")

        def ask() -> None:
            remote = repo.cloud.get_remote(name)
            if scheme in ("http", "https"):
                http_answers(remote.fs.fs, remote.path)
            else:
                remote.fs.exists(remote.path)

        try:
            within(ask, timeout_s)
        except NoAnswer:
            check = ("that its folder's filesystem answers (a network mount)"
                     if scheme == "local" else
                     f"its {'endpointurl' if config.get('endpointurl') else 'URL'}'s host "
                     f"and port, that the {scheme} server there runs and that nothing "
                     "between blocks it")
            return (f"{said} did not answer within {timeout_s:g} s (the time it gets to "
                    f"connect and give its first answer): check {check}; {RAISE_IT}")
        except (RemoteMissingDepsError, ImportError) as err:  # DVC's plugin, or its deps
            install = (f"make setup (requirements.lock pins dvc-{scheme}), or pip install -e "
                       f"'.[{scheme}]'" if scheme in ("ssh", "s3")
                       else f"pip install dvc-{scheme} (docs/sharing.md#cloud-remotes)")
            return f"{said} cannot be used here: {one_line(err)}; {install}"
        except (ConfigError, FsConfigError) as err:
            return (f"{said} is not set up right: {one_line(err)}; fix it with dvc remote "
                    f"modify {name} (--local for credentials)")
        except (PermissionError, AuthError) as err:
            return f"{said} refused this machine: {one_line(err)}; {fix}"
        except Exception as err:  # each plugin raises its own: botocore's
            # EndpointConnectionError is no OSError; all of them end make run in one line
            if no_credentials(err):
                return f"{said} has no credentials on this machine: {one_line(err)}; {fix}"
            return (f"{said} did not answer: {one_line(err)}; check its URL (port, "
                    "endpointurl) and that the server runs")
    return None


def http_answers(fs: Any, path: str) -> None:
    """Ask an HTTP remote's server for ``path`` (fsspec's ``HTTPFileSystem``, under
    dvc-http): any answer, a 404 or a 403 too, is one. fsspec's ``exists`` alone takes
    a refused connection for "no such file" (False), and ``make run`` would go on to
    DVC's own retries; ``strict=True`` raises it instead.

    Raises:
        aiohttp.ClientError: no answer came (refused, reset, an unknown host...).
    """
    from aiohttp import ClientResponseError

    try:
        fs.exists(path, strict=True)
    except ClientResponseError:  # an HTTP status other than 404: the server answers
        pass


def no_credentials(err: BaseException) -> bool:
    """botocore found no credentials, or half of them, anywhere it looks (the remote's
    config, the environment, ``~/.aws``): the S3 remote was never asked. A machine of a
    team without its own credentials (a sweep's run there) used to be told that the
    remote did not answer."""
    try:
        from botocore.exceptions import NoCredentialsError, PartialCredentialsError
    except ImportError:  # no dvc-s3 here
        return False
    return isinstance(err, NoCredentialsError | PartialCredentialsError)


def one_line(value: Any) -> str:
    """``value`` as one line of text, its whitespace runs one space each (an error's
    message; an error's type name when its message is empty)."""
    text = " ".join(str(value).split())
    return text or (type(value).__name__ if isinstance(value, BaseException) else "")


def reproduce(pull: bool, connect_timeout: float | None = None) -> int:
    """``dvc repro`` (``--pull``) in this process, :data:`NOT_ON_REMOTE` after DVC's
    first warning that the remote lacks a stage's outputs, the check of what DVC pulled
    or checked out (:func:`check_checked_out`), and :func:`closing_hint` after a run that
    succeeded (none when git cannot tell what changed). Throughout, the records of DVC
    and its plugins (:data:`DVC_PLUGIN_LOGGERS`) pass through
    :func:`lorasent.addresses.redact` (:func:`lorasent.addresses.redacted_logs`).

    ``connect_timeout``: the seconds the remote gets to connect and answer the check
    (None: ``LORASENT_CONNECT_TIMEOUT``, else 10).

    Returns:
        1 when the default remote refuses this machine or does not answer within
        ``connect_timeout`` (:func:`remote_problem`, before anything runs; also a
        ``LORASENT_CONNECT_TIMEOUT`` that is no number of seconds) or a file DVC pulled
        or checked out is damaged (after saying which); else DVC's exit status.
    """
    with redacted_logs(DVC_PLUGIN_LOGGERS):
        return _reproduce(pull, connect_timeout)


def _reproduce(pull: bool, connect_timeout: float | None) -> int:
    from dvc.cli import main as dvc_main

    from lorasent.errors import LorasentError

    try:
        problem = remote_problem(timeout_s=connect_timeout) if pull else None
    except LorasentError as err:
        print(f"run: {err}", file=sys.stderr, flush=True)
        return 1
    if problem:
        print(f"run: {problem}; nothing was pulled or trained", file=sys.stderr, flush=True)
        return 1

    unwritable = remote_unwritable() if pull else None
    if unwritable:
        print(unwritable, file=sys.stderr, flush=True)
    watch = PullWarnings()
    loggers = [logging.getLogger(name) for name in DVC_LOGGERS]
    transfers = TransferErrors()
    for logger in loggers:
        logger.addHandler(watch)
    for name in TRANSFER_LOGGERS:
        logging.getLogger(name).addFilter(transfers)
    try:
        status = dvc_main(["repro", *(["--pull"] if pull else [])])
    finally:
        for logger in loggers:
            logger.removeHandler(watch)
        for name in TRANSFER_LOGGERS:
            logging.getLogger(name).removeFilter(transfers)
    watch.say()
    if failed := transfers.line():
        print(failed, file=sys.stderr, flush=True)
    damage = check_checked_out(watch.checked_out, pull)
    if damage is not None:
        print(damage, file=sys.stderr, flush=True)
        return 1
    if status == 0:
        changed = run_files_changed()
        if changed is not None:
            print(closing_hint(changed, remote=pull and not unwritable,
                               pull_warnings=watch.seen), flush=True)
    return status


def main(argv: list[str] | None = None) -> None:
    """``python -m lorasent.run_pipeline [--pull] [--connect-timeout S]``: exits with DVC's
    status."""
    parser = argparse.ArgumentParser(prog="python -m lorasent.run_pipeline",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--pull", action="store_true",
                        help="dvc repro --pull: take unchanged stages' outputs from the "
                             "default DVC remote")
    parser.add_argument("--connect-timeout", type=seconds, metavar="S",
                        help="seconds the default DVC remote gets to connect and answer "
                             f"before the run stops  [default: ${CONNECT_TIMEOUT_ENV}, else "
                             f"{CONNECT_TIMEOUT_S:g}]")
    args = parser.parse_args(argv)
    sys.exit(reproduce(args.pull, args.connect_timeout))


def seconds(text: str) -> float:
    """``--connect-timeout``'s type: a finite number of seconds above 0."""
    from lorasent.errors import LorasentError

    try:
        return connect_timeout_s(text)
    except LorasentError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--connect-timeout ")) from None


if __name__ == "__main__":
    main()
