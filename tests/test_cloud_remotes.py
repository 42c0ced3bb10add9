"""Sharing runs over the network, on loopback: a DVC remote over SSH (dvc-ssh, against an
sshd this module starts with its own config and keys) and one over S3 (dvc-s3, against
moto's S3 server, which checks the request signatures against an IAM user's keys). For
each: the tiny run pushed, a fresh clone (over SSH for the first) whose ``make run``
(its ``python -m lorasent.run_pipeline --pull``) pulls every stage and trains none, and a remote
that refuses the key or the secret: ``make run`` stops in one line naming the remote and
what to fix, before any stage.
Nothing is mocked; each fixture removes what it made (its server by pid, its folders).
The servers: tests/remote_servers.py.

The local-folder remote, experiments and damaged objects: tests/test_remote.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from remote_servers import S3, NoServer, Sshd, serve_s3, serve_sshd
from tiny_repo import GIT, clone_run, env, run

pytestmark = pytest.mark.slow

# The outputs of the stages that pull (fetch's data/raw and models/base are compared
# through dvc status; these are the ones predict reads).
COMPARED = ("data/split", "models/adapter")
PULLED = ("fetch", "split", "train")  # the stages with DVC-cached outputs
REPRO = "python -m lorasent.run_pipeline --pull"


def cannot_run(reason: str) -> NoReturn:
    """A skip in one line; under ``CI=true`` a failure instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"the network remote tests cannot run under CI=true: {reason}",
                    pytrace=False)
    pytest.skip(f"the network remote tests cannot run: {reason}")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """tests/remote_servers.py's sshd, its folder removed at the end."""
    folder = tmp_path_factory.mktemp("sshd")
    try:
        with serve_sshd(folder) as server:
            yield server
    except NoServer as err:
        cannot_run(str(err))
    finally:
        shutil.rmtree(folder)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    """tests/remote_servers.py's S3 server, its folder removed at the end."""
    folder = tmp_path_factory.mktemp("moto")
    try:
        with serve_s3(folder) as server:
            yield server
    finally:
        shutil.rmtree(folder)


# ------------------------------------------------------------ push, clone, pull

@dataclass(frozen=True)
class Shared:
    """The tiny run pushed to a DVC remote and a git remote: its outputs, and the seconds
    ``dvc push`` took."""

    git_url: str
    outputs: dict[str, bytes]
    push_s: float


def _outputs(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for folder in COMPARED for p in (root / folder).rglob("*") if p.is_file()}


def share(tiny_run: Path, folder: Path, url: str, settings: dict[str, str],
          local: dict[str, str], git_url: str, git_env: dict[str, str] | None = None
          ) -> Shared:
    """A clone of the tiny run in ``folder`` with the DVC remote ``store`` at ``url`` (its
    ``settings`` committed in .dvc/config, ``local`` ones in .dvc/config.local), pushed
    to it, and to the bare git repository ``folder/origin.git`` through ``git_url``
    (``git_env``: what git needs to reach it, :attr:`Sshd.git_env`)."""
    root = clone_run(tiny_run, folder / "origin")
    run(root, "dvc", "remote", "add", "--default", "store", url)
    for key, value in settings.items():
        run(root, "dvc", "remote", "modify", "store", key, value)
    for key, value in local.items():
        run(root, "dvc", "remote", "modify", "--local", "store", key, value)
    assert not set(local.values()) & set((root / ".dvc/config").read_text().split())
    run(root, "git", "add", ".dvc/config")
    run(root, *GIT, "commit", "-q", "-m", "a run, with its DVC remote")
    started = time.monotonic()
    run(root, "dvc", "push")
    push_s = time.monotonic() - started
    run(folder, "git", "init", "-q", "--bare", str(folder / "origin.git"))
    run(root, "git", "remote", "set-url", "origin", git_url)  # was the tiny run
    run(root, "git", "push", "-q", "origin", "HEAD:refs/heads/main",
        extra_env=git_env)
    return Shared(git_url, _outputs(root), push_s)


def fresh_clone(shared: Shared, dest: Path, local: dict[str, str],
                git_env: dict[str, str] | None = None) -> Path:
    """A fresh ``git clone`` of ``shared`` with ``local`` set in its .dvc/config.local:
    no DVC output, its own empty DVC cache."""
    run(dest.parent, "git", "clone", "-q", "-b", "main", shared.git_url, str(dest),
        extra_env=git_env)
    for key, value in local.items():
        run(dest, "dvc", "remote", "modify", "--local", "store", key, value)
    assert not (dest / "models/adapter").exists()
    return dest


# No AWS credentials from this machine's environment or files: each test says its own.
NO_AWS = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "AWS_SESSION_TOKEN": None,
          "AWS_PROFILE": None, "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials",
          "AWS_CONFIG_FILE": "/nonexistent/config"}


def make_run(clone: Path) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in {**env(), **NO_AWS}.items() if v is not None}
    return subprocess.run(["make", "LORASENT_SYSTEM_PYTHON=1", f"PYTHON={sys.executable}",
                           "run"], cwd=clone, env=environ, capture_output=True, text=True,
                          timeout=600)


def pull_and_check(shared: Shared, clone: Path) -> float:
    """``make run``'s ``dvc repro --pull`` in ``clone`` (lorasent.run_pipeline, as make run runs
    it): every stage pulled, none run, the outputs the origin's byte for byte and as
    dvc.lock records them; returns its seconds."""
    started = time.monotonic()
    out = run(clone, sys.executable, "-m", "lorasent.run_pipeline", "--pull", logs=True)
    seconds = time.monotonic() - started
    for stage in PULLED:
        assert f"Pulling data for stage: '{stage}'" in out, out
    assert "Running stage" not in out and "Unable to pull data" not in out, out
    assert not (clone / "checkpoints").exists(), out  # train never started
    assert json.loads(run(clone, "dvc", "status", "--json")) == {}
    assert _outputs(clone) == shared.outputs
    return seconds


def refused(clone: Path) -> str:
    """``make run`` in ``clone``, which must fail before any stage: its one ``run:``
    line."""
    done = make_run(clone)
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr and "Running stage" not in done.stdout, done
    assert "[Makefile" in done.stderr and "run] Error 1" in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("run: ")]
    assert len(said) == 1, done.stderr
    nothing = [p for p in ("data/raw", "models/base", "data/split", "models/adapter",
                           "checkpoints") if (clone / p).exists()]
    assert nothing == [], done.stdout  # nothing pulled, nothing trained
    return said[0]


def say(request: pytest.FixtureRequest, line: str) -> None:
    """``line`` on the terminal (pytest's capture set aside): the times and the lines
    docs/sharing.md quotes."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n{line}", flush=True)


# ------------------------------------------------------------------------- SSH

@pytest.fixture(scope="module")
def over_ssh(sshd: Sshd, tiny_run: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Shared]]:
    folder = tmp_path_factory.mktemp("over-ssh")
    try:
        shared = share(tiny_run, folder, sshd.url(folder / "dvc-store"), {},
                       {"keyfile": str(sshd.key)}, sshd.url(folder / "origin.git"),
                       sshd.git_env)
        yield folder, shared
    finally:
        shutil.rmtree(folder)


def test_over_ssh_a_clone_pulls_every_stage_and_trains_none(over_ssh, sshd, request):
    folder, shared = over_ssh
    clone = fresh_clone(shared, folder / "clone", {"keyfile": str(sshd.key)}, sshd.git_env)
    pull_s = pull_and_check(shared, clone)
    size = sum(p.stat().st_size for p in (folder / "dvc-store").rglob("*") if p.is_file())
    say(request, f"ssh remote: dvc push {shared.push_s:.1f} s, {REPRO} {pull_s:.1f} s "
                    f"({size / 1e6:.1f} MB)")


def test_over_ssh_an_experiment_travels_both_ways(over_ssh, sshd, request):
    """`dvc exp push` of an experiment (only evaluate reruns) to the git remote over SSH
    and its outputs to the SSH remote; `dvc exp pull` into a fresh clone."""
    folder, shared = over_ssh
    origin = folder / "origin"
    run(origin, "dvc", "exp", "run", "-n", "ref-zero", "-S", "evaluate.reference=zero_shot")
    started = time.monotonic()
    run(origin, "dvc", "exp", "push", "origin", "ref-zero", extra_env=sshd.git_env)
    push_s = time.monotonic() - started
    clone = fresh_clone(shared, folder / "exp-clone", {"keyfile": str(sshd.key)}, sshd.git_env)
    started = time.monotonic()
    run(clone, "dvc", "exp", "pull", "origin", "ref-zero", extra_env=sshd.git_env)
    pull_s = time.monotonic() - started
    assert "ref-zero" in run(clone, "dvc", "exp", "list", "--name-only").split()
    run(clone, "dvc", "exp", "apply", "ref-zero")
    run(clone, "dvc", "checkout")
    assert json.loads(run(clone, "dvc", "status", "--json")) == {}
    assert (clone / "metrics/eval.json").read_bytes() == (origin / "metrics/eval.json").read_bytes()
    say(request, f"ssh remote: dvc exp push {push_s:.1f} s, dvc exp pull {pull_s:.1f} s")


def test_over_ssh_a_refused_key_stops_make_run_in_one_line(over_ssh, sshd, request):
    """The key file the remote names is one the server refuses: make run says which
    remote and what to fix, exits 1 (make: Error 1), pulls and trains nothing; a sweep
    refuses before any run, and a sweep's run in one line too."""
    from lorasent.errors import LorasentError
    from lorasent.experiments.sweep import sweep
    from lorasent.experiments.task import pulled_and_checked

    folder, shared = over_ssh
    clone = fresh_clone(shared, folder / "wrong-key", {"keyfile": str(sshd.wrong)},
                        sshd.git_env)
    said = (f"DVC remote 'store' ({sshd.url(folder / 'dvc-store')}) refused this machine: "
            f"Permission denied for user {sshd.user} on host 127.0.0.1; check its key file "
            f"({sshd.wrong}; dvc remote modify --local store keyfile <private key>) and that "
            "the server's authorized_keys holds its public key")
    line = refused(clone)
    say(request, line)
    assert line == f"run: {said}; nothing was pulled or trained"
    with pytest.raises(LorasentError) as err:
        sweep(name="refused", repo=clone, seeds=1)
    assert str(err.value) == f"sweep: {said}; no run was started"
    with (folder / "run.log").open("w") as log:
        assert pulled_and_checked(clone, log) == said
    assert not (clone / "models/base").exists()


# -------------------------------------------------------------------------- S3

@pytest.fixture(scope="module")
def over_s3(s3: S3, tiny_run: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Shared]]:
    folder = tmp_path_factory.mktemp("over-s3")
    try:
        shared = share(tiny_run, folder, f"s3://{s3.bucket}/dvc-store",
                       {"endpointurl": s3.endpoint},
                       {"access_key_id": s3.key_id, "secret_access_key": s3.secret},
                       str(folder / "origin.git"))
        yield folder, shared
    finally:
        shutil.rmtree(folder)


def test_over_s3_a_clone_pulls_every_stage_and_trains_none(over_s3, s3, request):
    import boto3

    folder, shared = over_s3
    clone = fresh_clone(shared, folder / "clone",
                        {"access_key_id": s3.key_id, "secret_access_key": s3.secret})
    pull_s = pull_and_check(shared, clone)
    objects = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1",
                           aws_access_key_id=s3.key_id, aws_secret_access_key=s3.secret
                           ).list_objects_v2(Bucket=s3.bucket, Prefix="dvc-store/")
    size = sum(o["Size"] for o in objects["Contents"])
    say(request, f"s3 remote: dvc push {shared.push_s:.1f} s, {REPRO} {pull_s:.1f} s "
                    f"({size / 1e6:.1f} MB)")


def test_over_s3_a_refused_secret_stops_make_run_in_one_line(over_s3, s3, request):
    """The remote's access key with a wrong secret: S3 answers 403 (moto checks the
    signature); make run says which remote and what to fix, exits 1, trains nothing."""
    folder, shared = over_s3
    clone = fresh_clone(shared, folder / "wrong-secret",
                        {"access_key_id": s3.key_id, "secret_access_key": "not-the-secret"})
    line = refused(clone)
    say(request, line)
    assert line == (
        f"run: DVC remote 'store' (s3://{s3.bucket}/dvc-store at {s3.endpoint}) refused this "
        "machine: Forbidden; check its credentials: dvc remote modify --local store "
        "access_key_id <id> and secret_access_key <secret> (or AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, in the environment); nothing was pulled or "
        "trained")
    assert "not-the-secret" not in line and s3.secret not in line


def test_over_s3_no_credentials_at_all_stops_make_run_in_one_line(over_s3, s3, request):
    """A clone on a machine with no credentials for the remote (none in config.local, the
    environment or ~/.aws): botocore never asks the server; make run says so, naming the
    remote and where credentials go (it used to say the remote "did not answer", and to
    check its URL)."""
    folder, shared = over_s3
    clone = fresh_clone(shared, folder / "no-credentials", {})
    line = refused(clone)
    say(request, line)
    assert line == (
        f"run: DVC remote 'store' (s3://{s3.bucket}/dvc-store at {s3.endpoint}) has no "
        "credentials on this machine: Unable to locate credentials; check its credentials: "
        "dvc remote modify --local store access_key_id <id> and secret_access_key <secret> "
        "(or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, in the "
        "environment); nothing was pulled or trained")


def test_over_s3_a_sweep_on_this_machine_takes_the_credentials_set_with_local(
        over_s3, s3, request):
    """The credentials in .dvc/config.local (``dvc remote modify --local``, as above): a
    sweep's run on this machine clones the commit, which holds none, and takes this
    repo's config.local (at 2362f7d the run failed: the remote refused the clone)."""
    folder, shared = over_s3
    clone = fresh_clone(shared, folder / "sweeper",
                        {"access_key_id": s3.key_id, "secret_access_key": s3.secret})
    started = time.monotonic()
    done = subprocess.run(["lorasent", "sweep", "-S", "evaluate.reference=zero_shot",
                           "--seeds", "1", "--cpus-per-run", "1", "--name", "local"],
                          cwd=clone, env=env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "sweep: local-seed42 succeeded in " in done.stderr, done.stderr
    assert "local-seed42" in run(clone, "dvc", "exp", "list", "--name-only")
    say(request, f"a sweep of one run on the S3 remote: {time.monotonic() - started:.0f} s")
