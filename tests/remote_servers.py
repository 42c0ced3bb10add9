"""The servers a team reaches its remotes through, on 127.0.0.1 only: Debian's sshd with a
config, keys and authorized_keys of its own (a git remote and a dvc-ssh remote), and
moto's S3 server checking every request's signature against an IAM user's keys (a dvc-s3
remote). tests/test_cloud_remotes.py shares runs through them from this host; the
cluster tier (tests/test_cluster.py) from containers on the host's network.

Each context manager stops its server by pid and leaves its folder to the caller (a
pytest temporary folder, removed by the fixture). :class:`NoServer` when the machine
cannot run it: the caller skips in one line, or fails under ``CI=true``."""

from __future__ import annotations

import contextlib
import getpass
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil


class NoServer(Exception):
    """This machine cannot run the server (not installed): one line saying what to do."""


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc`` and the processes it started (sshd's per-connection children), by
    pid: SIGTERM, then SIGKILL after 10 s."""
    with contextlib.suppress(psutil.NoSuchProcess):
        children = psutil.Process(proc.pid).children(recursive=True)
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.terminate()
        psutil.wait_procs(children, timeout=10)
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_until(answers: Callable[[], bool], what: str, proc: subprocess.Popen[bytes],
               log: Path, timeout_s: float = 30) -> None:
    """Poll ``answers()`` until it is true; fail naming ``what`` and its log when ``proc``
    ends first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while not answers():
        assert proc.poll() is None, f"{what} ended ({proc.returncode}):\n{log.read_text()}"
        assert time.monotonic() < deadline, f"{what} did not answer in {timeout_s:.0f} s:\n" \
                                            f"{log.read_text()}"
        time.sleep(0.2)


# ------------------------------------------------------------------------- SSH

@dataclass(frozen=True)
class Sshd:
    """An sshd on 127.0.0.1:``port`` that takes ``key`` for ``user`` and nothing else;
    ``wrong``: a key it refuses; ``ssh_command``: the ssh that uses ``key`` (no host key
    prompt, a known_hosts file of the server's folder); ``git_env``: the variables that
    make git and DVC's git client (``dvc exp push``/``pull``) use it on this host.

    DVC's git client (scmrepo 3.6's dulwich) runs the system's ssh only when
    GIT_SSH_COMMAND is set, and then the command of core.sshCommand in git's global
    config (dulwich is given the global and system config only, and no longer reads the
    variable): so both, the global config a file of the server's folder
    (GIT_CONFIG_GLOBAL), nothing written to ~/.gitconfig."""

    port: int
    user: str
    key: Path
    wrong: Path
    ssh_command: str
    git_env: dict[str, str]

    def url(self, path: Path) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{path}"


SSHD_CONFIG = """\
ListenAddress 127.0.0.1
Port {port}
HostKey {folder}/host_key
PidFile none
AuthorizedKeysFile {folder}/authorized_keys
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
"""


def ssh_command(key: str, known_hosts: str) -> str:
    """The ssh command line git runs (core.sshCommand, GIT_SSH_COMMAND) with ``key``."""
    return (f"ssh -i {key} -o IdentitiesOnly=yes -o BatchMode=yes "
            f"-o StrictHostKeyChecking=no -o UserKnownHostsFile={known_hosts}")


@contextlib.contextmanager
def serve_sshd(folder: Path) -> Iterator[Sshd]:
    """Debian's sshd (``make sshd`` installs it) on a free port of 127.0.0.1, with its
    own config, host key and authorized_keys in ``folder``; key authentication only.
    Stopped by pid at the end.

    Raises:
        NoServer: no sshd, or no /run/sshd (its privilege separation folder).
    """
    binary = shutil.which("sshd") or shutil.which("sshd", path="/usr/sbin:/usr/local/sbin")
    if binary is None:
        raise NoServer("no sshd: run `make sshd` (Debian's openssh-server)")
    if not Path("/run/sshd").is_dir():
        raise NoServer("no /run/sshd, sshd's privilege separation folder: run `make sshd`")
    for key in ("host_key", "user_key", "wrong_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", key, "-f",
                        str(folder / key)], check=True)
    shutil.copy(folder / "user_key.pub", folder / "authorized_keys")
    port = free_port()
    (folder / "sshd_config").write_text(SSHD_CONFIG.format(port=port, folder=folder))
    log = folder / "sshd.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([binary, "-D", "-e", "-f", str(folder / "sshd_config")],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        def answers() -> bool:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", port), timeout=1) as sock:
                return sock.recv(4).startswith(b"SSH-")
            return False

        wait_until(answers, "sshd", proc, log)
        git_ssh = ssh_command(str(folder / "user_key"), str(folder / "known"))
        (folder / "gitconfig").write_text(f"[core]\n\tsshCommand = {git_ssh}\n")
        yield Sshd(port, getpass.getuser(), folder / "user_key", folder / "wrong_key", git_ssh,
                   {"GIT_SSH_COMMAND": git_ssh, "GIT_CONFIG_GLOBAL": str(folder / "gitconfig")})
    finally:
        stop(proc)


# -------------------------------------------------------------------------- S3

@dataclass(frozen=True)
class S3:
    """moto's S3 server at ``endpoint`` with the bucket ``bucket``, taking requests signed
    with ``key_id`` and ``secret`` (an IAM user's, allowed s3:*) and no others."""

    endpoint: str
    bucket: str
    key_id: str
    secret: str

    def client(self) -> Any:
        """A boto3 S3 client with the IAM user's keys."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=self.key_id, aws_secret_access_key=self.secret)


@contextlib.contextmanager
def serve_s3(folder: Path) -> Iterator[S3]:
    """``moto_server`` on a free port of 127.0.0.1, its log in ``folder``: a bucket and an
    IAM user with an access key are made, then every request is authenticated (moto's
    reset-auth, ``INITIAL_NO_AUTH_ACTION_COUNT`` 0). Stopped by pid at the end."""
    import boto3

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = folder / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H",
                                 "127.0.0.1", "-p", str(port)], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        def answers() -> bool:
            with contextlib.suppress(OSError), urllib.request.urlopen(
                    f"{endpoint}/moto-api/data.json", timeout=1) as response:
                return bool(response.status == 200)
            return False

        wait_until(answers, "moto_server", proc, log)
        setup = {"endpoint_url": endpoint, "region_name": "us-east-1",
                 "aws_access_key_id": "setup", "aws_secret_access_key": "setup"}
        boto3.client("s3", **setup).create_bucket(Bucket="lorasent")
        iam = boto3.client("iam", **setup)
        iam.create_user(UserName="lorasent")
        iam.put_user_policy(UserName="lorasent", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17",
             "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="lorasent")["AccessKey"]
        # from here on, every request is checked against the IAM user's keys
        request = urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=b"0",
                                         method="POST", headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
        yield S3(endpoint, "lorasent", key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        stop(proc)
