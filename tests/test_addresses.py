"""The addresses a user gives (a DVC remote, a git remote, a Ray cluster), on loopback only.

Issue 62, kind 1: every line, log and record that names one goes through
``lorasent.addresses.redact``; each message path is driven with a URL holding a
password and a secret query parameter, and neither appears in standard output, standard
error or any file written. Kind 2: an address that accepts the TCP connection and never
answers is named in one line once the connect timeout passes (given here as a fraction
of a second, through the flag), with nothing pulled, trained or sent elsewhere.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import dvc.cli  # at collection: `import dvc` binds its log handlers to the streams of the moment
import pytest
from click.testing import CliRunner
from dvc.data_cloud import DataCloud

from lorasent.addresses import (
    CONNECT_TIMEOUT_ENV,
    CONNECT_TIMEOUT_MAX_S,
    connect_timeout_s,
    redact,
    within,
)
from lorasent.cli import main
from lorasent.errors import LorasentError
from remote_servers import free_port

PASSWORD = "pa55w0rd-k12"  # never shown
SECRET = "s1gnature-k12"   # a secret query parameter's value, never shown
QUERY = f"?X-Amz-Signature={SECRET}&X-Amz-Expires=60"
WAIT = "0.2"  # --connect-timeout before a silent server, in seconds


@contextlib.contextmanager
def _listening(answer: bytes | None) -> Iterator[int]:
    """A port of 127.0.0.1 that accepts every connection and then sends ``answer`` and
    keeps it open (None: sends nothing, ever: a silent server)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = server.accept()
                held.append(conn)
                if answer is not None:
                    conn.sendall(answer)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


@pytest.fixture
def silent() -> Iterator[int]:
    with _listening(None) as port:
        yield port


# ------------------------------------------------------------------ the one function

@pytest.mark.parametrize(("text", "shown"), [
    ("ssh://user:s3cret@host:2222/srv/store", "ssh://user@host:2222/srv/store"),
    ("ssh://git@host/srv/store", "ssh://git@host/srv/store"),
    ("https://:tok@example.com/x", "https://example.com/x"),
    ("https://ghp_token@github.com/o/r.git", "https://github.com/o/r.git"),
    ("https://x-access-token:ghs_t@github.com/o/r", "https://github.com/o/r"),
    ("s3://bucket/store", "s3://bucket/store"),
    ("/srv/store", "/srv/store"),
    ("https://h/o?X-Amz-Algorithm=AWS4&X-Amz-Credential=AKIA%2F1&X-Amz-Signature=ab12&n=1",
     "https://h/o?X-Amz-Algorithm=AWS4&X-Amz-Credential=***&X-Amz-Signature=***&n=1"),
    ("https://acct.blob.core.windows.net/c?sv=2022&sig=abc%3D#access_token=t",
     "https://acct.blob.core.windows.net/c?sv=2022&sig=***#access_token=***"),
    ("http://h/p?password=pw&user=bob&api_key=k", "http://h/p?password=***&user=bob&api_key=***"),
    ("fatal: unable to access 'https://bob:pw@h/r.git/': Failed (ssh://a:b@c, ray://d:e@f)",
     "fatal: unable to access 'https://h/r.git/': Failed (ssh://a@c, ray://f)"),
])
def test_redact_takes_out_passwords_tokens_and_signatures_and_nothing_else(text, shown):
    assert redact(text) == shown
    assert redact(shown) == shown


def test_the_connect_timeout_comes_from_the_flag_then_the_environment(monkeypatch):
    monkeypatch.delenv(CONNECT_TIMEOUT_ENV, raising=False)
    assert connect_timeout_s() == 10.0
    monkeypatch.setenv(CONNECT_TIMEOUT_ENV, "60")
    assert (connect_timeout_s(), connect_timeout_s(2.5)) == (60.0, 2.5)
    for bad in ("nan", "0", "-1", "soon"):
        monkeypatch.setenv(CONNECT_TIMEOUT_ENV, bad)
        with pytest.raises(LorasentError) as err:
            connect_timeout_s()
        assert str(err.value) == (
            f"LORASENT_CONNECT_TIMEOUT {bad!r}: give the seconds to wait for a remote to "
            f"connect and answer, {RANGE}")


RANGE = "a number above 0 and at most 2147483 (about 24 days; default 10)"
# Issue 70, kind 3: seconds past what a socket, a thread's join or a subprocess's poll
# takes (1e308 crashed with "timestamp out of range"); the generated extremes
TOO_LONG = [CONNECT_TIMEOUT_MAX_S + 1, CONNECT_TIMEOUT_MAX_S + 0.001, threading.TIMEOUT_MAX,
            *(10.0 ** e for e in range(7, 309, 15)), 1.7976931348623157e308, float("inf"),
            10 ** 30, 2 ** 64, 10 ** 400]


def test_the_connect_timeout_is_at_most_what_every_wait_takes(monkeypatch):
    """The longest timeout accepted is one each wait it feeds takes (a thread's join, a
    socket's, a subprocess's poll); each longer one, given or from the environment, is
    refused in one line naming where it came from, and so are 0 and below."""
    from lorasent.git import run_git

    longest = connect_timeout_s(CONNECT_TIMEOUT_MAX_S)
    assert longest == CONNECT_TIMEOUT_MAX_S == 2147483
    assert within(lambda: "answered", longest) == "answered"
    with socket.socket() as sock:
        sock.settimeout(longest)
    assert run_git(".", "--version", timeout_s=longest).returncode == 0
    assert connect_timeout_s(1e-300) == 1e-300  # short: the remote is named as silent
    for bad in [*TOO_LONG, 0, -0.0, -1e308, float("-inf"), float("nan")]:
        with pytest.raises(LorasentError) as err:
            connect_timeout_s(bad)
        shown = (repr(bad) if len(repr(bad)) <= 40
                 else f"{repr(bad)[:40]}... ({len(repr(bad))} characters)")
        assert str(err.value) == f"--connect-timeout {shown}: give the seconds to wait for " \
            f"a remote to connect and answer, {RANGE}"
        monkeypatch.setenv(CONNECT_TIMEOUT_ENV, str(bad))
        with pytest.raises(LorasentError) as err:
            connect_timeout_s()
        said = str(err.value)
        assert said.startswith("LORASENT_CONNECT_TIMEOUT '") and said.endswith(RANGE)
        assert "\n" not in said and len(said) < 220
    with pytest.raises(LorasentError) as err:  # past int's repr limit: its size
        connect_timeout_s(10 ** 5000)
    assert str(err.value).startswith("--connect-timeout (an integer of 16610 bits): ")


@pytest.mark.parametrize("command", ["sweep", "learning-curve", "reproduce"])
def test_a_connect_timeout_too_long_is_refused_by_each_command_in_one_line(command):
    for bad in ("1e308", "2147484", "2147483.5", "0", "-1e308"):
        done = CliRunner().invoke(main, [command, "--connect-timeout", bad],
                                  prog_name="lorasent")
        assert (done.exit_code, done.output) == (2, (
            f"lorasent {command}: error: Invalid value for '--connect-timeout': {float(bad)} "
            f"is not in the range 0<x<=2147483 (see `lorasent {command} --help`)\n"))
    for bad in ("1e999", "1" + "0" * 400, "inf"):  # past float's range: inf
        done = CliRunner().invoke(main, [command, "--connect-timeout", bad],
                                  prog_name="lorasent")
        assert (done.exit_code, done.output) == (2, (
            f"lorasent {command}: error: Invalid value for '--connect-timeout': {bad!r} is not "
            "a finite number (nan and inf are refused); give a number 0<x<=2147483 (see "
            f"`lorasent {command} --help`)\n"))


def test_make_run_refuses_a_connect_timeout_too_long_in_one_line(tmp_path, monkeypatch,
                                                                   capsys):
    root = _project(tmp_path, "http://127.0.0.1:9/store")
    for bad in ("1e308", "10000000000", "inf"):
        monkeypatch.setenv(CONNECT_TIMEOUT_ENV, bad)
        assert _make_run(root, monkeypatch, capsys) == (1, (
            f"run: LORASENT_CONNECT_TIMEOUT {bad!r}: give the seconds to wait for a remote "
            f"to connect and answer, {RANGE}"))
        monkeypatch.delenv(CONNECT_TIMEOUT_ENV)
        with pytest.raises(SystemExit) as done:
            from lorasent import run_pipeline
            run_pipeline.main(["--pull", "--connect-timeout", bad])
        out, err = capsys.readouterr()
        assert done.value.code == 2 and out == ""
        assert err.splitlines()[-1] == (
            f"python -m lorasent.run_pipeline: error: argument --connect-timeout: {bad!r}: "
            f"give the seconds to wait for a remote to connect and answer, {RANGE}")


# ------------------------------------------------ make run's first step: the DVC remote

def _project(root: Path, url: str, **options: str) -> Path:
    """A DVC project (no git) whose default remote ``store`` is ``url`` (and options)."""
    (root / ".dvc").mkdir(parents=True)
    lines = [f"    {k} = {v}" for k, v in {"url": url, **options}.items()]
    (root / ".dvc/config").write_text(
        "[core]\n    no_scm = True\n    remote = store\n['remote \"store\"']\n"
        + "\n".join(lines) + "\n", encoding="utf-8")
    return root


def _make_run(root: Path, monkeypatch, capsys, *argv: str) -> tuple[int, str]:
    """``python -m lorasent.run_pipeline --pull`` in ``root`` (in this process, with a DVC that
    fails the test if the run goes on): its exit status and its one line; neither
    standard output, standard error nor a file it wrote holds the secrets."""
    from lorasent import run_pipeline

    def no_repro(argv: list[str]) -> int:
        raise AssertionError(f"dvc {' '.join(argv)} ran: something was pulled or trained")

    monkeypatch.setattr(dvc.cli, "main", no_repro)
    monkeypatch.chdir(root)
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as done:
        run_pipeline.main(["--pull", *argv])
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    written = [p for p in root.rglob("*") if p.is_file()
               and before.get(p) != p.stat().st_mtime_ns]
    for text in (out, err, *(p.read_bytes().decode("utf-8", "replace") for p in written)):
        assert PASSWORD not in text and SECRET not in text
    return int(done.value.code or 0), err.strip()


SILENT_URLS = {  # over each protocol: the remote's URL and options, at a silent port
    "http": lambda port: (f"http://bob:{PASSWORD}@127.0.0.1:{port}/store{QUERY}", {}),
    "ssh": lambda port: (f"ssh://bob:{PASSWORD}@127.0.0.1:{port}/srv/store", {}),
    "s3": lambda port: ("s3://bucket/store", {  # (botocore refuses user info: below)
        "endpointurl": f"http://127.0.0.1:{port}", "access_key_id": "AKIAK12",
        "secret_access_key": "k12"}),
}


@pytest.mark.parametrize("scheme", SILENT_URLS)
def test_a_remote_that_accepts_and_never_answers_stops_make_run_in_one_line(
        scheme, silent, tmp_path, monkeypatch, capsys):
    url, options = SILENT_URLS[scheme](silent)
    code, line = _make_run(_project(tmp_path, url, **options), monkeypatch, capsys,
                           "--connect-timeout", WAIT)
    where = redact(url) + (f" at {redact(options['endpointurl'])}" if options else "")
    check = "endpointurl" if options else "URL"
    assert code == 1
    assert line == (
        f"run: DVC remote 'store' ({where}) did not answer within 0.2 s (the time it gets to "
        f"connect and give its first answer): check its {check}'s host and port, that the "
        f"{scheme} server there runs and that nothing between blocks it; on a slow link, "
        "wait longer: LORASENT_CONNECT_TIMEOUT=<seconds> (or --connect-timeout <seconds>); "
        "nothing was pulled or trained")
    assert "bob" not in where or scheme == "ssh"


def test_the_environment_sets_the_wait_for_make_run(silent, tmp_path, monkeypatch, capsys):
    url, _ = SILENT_URLS["http"](silent)
    root = _project(tmp_path, url)
    monkeypatch.setenv(CONNECT_TIMEOUT_ENV, "0.25")
    code, line = _make_run(root, monkeypatch, capsys)
    assert code == 1 and " did not answer within 0.25 s " in line
    monkeypatch.setenv(CONNECT_TIMEOUT_ENV, "inf")
    assert _make_run(root, monkeypatch, capsys) == (1, (
        "run: LORASENT_CONNECT_TIMEOUT 'inf': give the seconds to wait for a remote to "
        f"connect and answer, {RANGE}"))


def _refusing(error: BaseException):
    """DataCloud.get_remote whose remote's fs raises ``error`` (as a plugin would, its
    message naming the URL it was given)."""
    def exists(path: str) -> bool:
        raise error

    return lambda self, name=None, command="<command>": SimpleNamespace(
        fs=SimpleNamespace(exists=exists), path="store")


def _errors() -> dict[str, tuple[BaseException, str]]:
    from botocore.exceptions import NoCredentialsError
    from dvc.fs import AuthError

    at = f"https://bob:{PASSWORD}@127.0.0.1:9/store{QUERY}"
    return {
        "refused": (PermissionError(f"Permission denied: {at}"), " refused this machine: "),
        "auth": (AuthError(f"Authentication failed for {at}"), " refused this machine: "),
        "no credentials": (NoCredentialsError(), " has no credentials on this machine: "),
        "no answer": (RuntimeError(f"Cannot connect to {at}"), " did not answer: "),
    }


@pytest.mark.parametrize("case", ["refused", "auth", "no credentials", "no answer"])
def test_every_line_of_the_remote_check_names_the_remote_without_its_secrets(
        case, tmp_path, monkeypatch, capsys):
    error, said = _errors()[case]
    monkeypatch.setattr(DataCloud, "get_remote", _refusing(error))
    url = f"https://bob:{PASSWORD}@127.0.0.1:9/store{QUERY}"
    code, line = _make_run(_project(tmp_path, url), monkeypatch, capsys)
    assert code == 1
    assert line.startswith("run: DVC remote 'store' (https://127.0.0.1:9/store?X-Amz-Signature"
                           f"=***&X-Amz-Expires=60){said}")


def test_a_missing_plugin_and_a_bad_setting_name_the_remote_without_its_secrets(
        tmp_path, monkeypatch, capsys):
    code, line = _make_run(_project(tmp_path / "gs", f"gs://bob:{PASSWORD}@bucket/store{QUERY}"),
                           monkeypatch, capsys)
    assert (code, line) == (1, (
        "run: DVC remote 'store' (gs://bucket/store?X-Amz-Signature=***&X-Amz-Expires=60) "
        "cannot be used here: gs is supported, but requires 'dvc-gs' to be installed; pip "
        "install dvc-gs (docs/sharing.md#cloud-remotes); nothing was pulled or trained"))
    code, line = _make_run(
        _project(tmp_path / "http", f"http://bob:{PASSWORD}@127.0.0.1:9/s{QUERY}", auth="basic"),
        monkeypatch, capsys)
    assert code == 1 and line.startswith(
        "run: DVC remote 'store' (http://127.0.0.1:9/s?X-Amz-Signature=***&X-Amz-Expires=60) "
        "is not set up right: ")
    # botocore's own error names the endpoint it was given
    endpoint = f"http://bob:{PASSWORD}@127.0.0.1:9/{QUERY}"
    code, line = _make_run(_project(tmp_path / "s3", "s3://bucket/store", endpointurl=endpoint,
                                    access_key_id="AKIAK12", secret_access_key="k12"),
                           monkeypatch, capsys)
    shown = "http://127.0.0.1:9/?X-Amz-Signature=***&X-Amz-Expires=60"
    assert (code, line) == (1, (
        f"run: DVC remote 'store' (s3://bucket/store at {shown}) did not answer: Custom "
        f"endpoint `{shown}` was not a valid URI; check its URL (port, endpointurl) and that "
        "the server runs; nothing was pulled or trained"))


def test_ssh_to_a_closed_port_names_the_remote_without_its_password(
        tmp_path, monkeypatch, capsys):
    port = free_port()
    code, line = _make_run(_project(tmp_path, f"ssh://bob:{PASSWORD}@127.0.0.1:{port}/s"),
                           monkeypatch, capsys, "--connect-timeout", "5")
    assert code == 1 and line.startswith(
        f"run: DVC remote 'store' (ssh://bob@127.0.0.1:{port}/s) did not answer: ")


def test_the_damaged_pull_line_names_the_remote_without_its_secrets():
    from lorasent.run_pipeline import Damaged, damage_message

    line = damage_message([Damaged("data/split.csv", "split", "a" * 32, "b" * 32)],
                          ("store", f"s3://bob:{PASSWORD}@bucket/store{QUERY}"))
    assert line.startswith("run: data/split.csv as pulled from DVC remote 'store' "
                           "(s3://bucket/store?X-Amz-Signature=***&X-Amz-Expires=60) is "
                           "damaged: ")


# ----------------------------------------------------------- sweep: the git remote

def _git_repo(root: Path, url: str) -> str:
    """A git repo of one commit whose remote ``origin`` is ``url``; its commit."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], [*git, "commit", "-qm", "x"],
                 ["git", "remote", "add", "origin", url]):
        subprocess.run(argv, cwd=root, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("scheme", ["http", "ssh"])
def test_a_git_remote_that_never_answers_is_named_once_the_wait_passes(
        scheme, silent, tmp_path, monkeypatch):
    from lorasent.experiments.repo_checks import _on_git_remote

    url = (f"http://bob:{PASSWORD}@127.0.0.1:{silent}/repo.git{QUERY}" if scheme == "http"
           else f"ssh://bob@127.0.0.1:{silent}/repo.git")  # git's ssh takes no password
    # ssh asks no question of a terminal, and takes no key or host of this user's
    monkeypatch.setenv("GIT_SSH_COMMAND", "ssh -o BatchMode=yes -F /dev/null "
                       "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null")
    commit = _git_repo(tmp_path / "repo", url)
    with pytest.raises(LorasentError) as err:
        _on_git_remote(tmp_path / "repo", "origin", commit, "sweep", 0.2)
    assert str(err.value) == (
        f"sweep: git remote origin ({redact(url)}) did not answer within 0.2 s (`git "
        "ls-remote`: the time it gets to connect and list its branches): check its address "
        "(host, port) and that a git server runs there; on a slow link, wait longer: "
        "LORASENT_CONNECT_TIMEOUT=<seconds> (or --connect-timeout <seconds>)")
    assert PASSWORD not in str(err.value) and SECRET not in str(err.value)


def test_a_git_remote_that_refuses_is_named_without_its_secrets(tmp_path):
    from lorasent.experiments.repo_checks import _on_git_remote

    url = f"http://bob:{PASSWORD}@127.0.0.1:{free_port()}/repo.git{QUERY}"
    commit = _git_repo(tmp_path / "repo", url)
    with pytest.raises(LorasentError) as err:
        _on_git_remote(tmp_path / "repo", "origin", commit, "learning-curve", 5)
    assert str(err.value).startswith(
        f"learning-curve: git remote origin ({redact(url)}) does not answer (")
    assert PASSWORD not in str(err.value) and SECRET not in str(err.value)


def test_a_runs_log_shows_commands_and_their_output_without_secrets(tmp_path):
    from lorasent.experiments.task import _step

    url = f"https://bob:{PASSWORD}@git.example/repo.git{QUERY}"
    log = tmp_path / "run.log"
    with log.open("w", encoding="utf-8") as out:
        code = _step([sys.executable, "-c", "import sys; print(sys.argv[1]); "
                      "print('fatal: ' + sys.argv[1], file=sys.stderr); sys.exit(3)", url],
                     tmp_path, out)
    assert code == 3
    shown = redact(url)
    assert log.read_text(encoding="utf-8") == (
        f"$ {sys.executable} -c import sys; print(sys.argv[1]); print('fatal: ' + "
        f"sys.argv[1], file=sys.stderr); sys.exit(3) {shown}\n{shown}\nfatal: {shown}\n")


# ----------------------------------------------------------- sweep --address

SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # a gRPC server's first frame (HTTP/2)
NOT_RAY = (": check the address and port (`ray start --head` prints them), start one "
           "there with `ray start --head`, use --address auto for the one `ray start` "
           "started on this machine, or leave --address out for a local cluster")
SLOW = ("; on a slow link, wait longer: LORASENT_CONNECT_TIMEOUT=<seconds> (or "
        "--connect-timeout <seconds>)")


def test_an_address_is_taken_only_where_a_grpc_server_answers(silent):
    from lorasent.experiments.cluster import _reachable

    with _listening(SETTINGS) as port:
        _reachable(f"127.0.0.1:{port}", 0.5)
        _reachable(f"ray://127.0.0.1:{port}", 0.5)
    with pytest.raises(LorasentError) as err:
        _reachable(f"127.0.0.1:{silent}", 0.2)
    assert str(err.value) == (
        f"sweep: no Ray cluster answers at --address 127.0.0.1:{silent} (something accepted "
        f"the connection and did not answer within 0.2 s){NOT_RAY}{SLOW}")
    with _listening(b"HTTP/1.0 400 Bad Request\r\n\r\n") as port, \
            pytest.raises(LorasentError) as err:
        _reachable(f"127.0.0.1:{port}", 0.5)
    assert str(err.value) == (
        f"sweep: no Ray cluster answers at --address 127.0.0.1:{port} (something answers "
        f"there, but not as Ray's gRPC server does){NOT_RAY}")
    port = free_port()
    with pytest.raises(LorasentError) as err:
        _reachable(f"127.0.0.1:{port}", 0.5)
    assert str(err.value) == (f"sweep: no Ray cluster answers at --address 127.0.0.1:{port} "
                              f"(Connection refused){NOT_RAY}")
    with pytest.raises(LorasentError, match=r"\('x' is not a port number\): check"):
        _reachable("head:x", 0.5)


def test_an_address_where_something_else_answers_is_refused_before_ray_starts(
        tmp_path, monkeypatch):
    import ray

    from lorasent.experiments import cluster, task

    def no_ray(*args, **kwargs):
        raise AssertionError("ray.init ran: Ray would retry, and at another address")

    monkeypatch.setattr(ray, "init", no_ray)
    monkeypatch.setattr(cluster, "_dvc", no_ray)
    with _listening(b"SSH-2.0-OpenSSH_9.2\r\n") as port, pytest.raises(LorasentError) as err:
        cluster.sweep_runs([], name="s", repo=tmp_path, commit="c" * 40, url=str(tmp_path),
                           address=f"127.0.0.1:{port}", num_gpus=None, cpus_per_run=None,
                           git_remote=None, cache_dir=None, progress=print,
                           runner=task.run_one, timeout_s=0.5)
    assert str(err.value).startswith(f"sweep: no Ray cluster answers at --address "
                                     f"127.0.0.1:{port} (something answers there, but not "
                                     "as Ray's gRPC server does): ")
