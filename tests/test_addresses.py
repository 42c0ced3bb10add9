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
import io
import logging
import random
import socket
import string
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

from conftest import REPO
from lorasent.addresses import (
    CONNECT_TIMEOUT_ENV,
    CONNECT_TIMEOUT_MAX_S,
    RedactedError,
    RedactSecrets,
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


# Issue 70: a password typed unencoded may hold any printable character but a space.
DELIMITERS = string.punctuation


def _passwords(mark: str) -> list[str]:
    """Passwords that hold ``mark``: inside, at both ends, doubled, beside ``@`` and ``:``,
    and four random ones (a fixed seed) drawn from every printable character."""
    draw = random.Random(f"issue-70-{mark}")
    printable = string.ascii_letters + string.digits + DELIMITERS
    return [f"pw{mark}k70", f"{mark}pw{mark}", f"pw{mark}{mark}", f"p@w{mark}:70",
            *(mark + "".join(draw.choice(printable) for _ in range(draw.randint(6, 24)))
              + mark for _ in range(4))]


# (scheme, host, tail): ports, IPv6, paths, queries (one secret parameter) and fragments
URL_SHAPES = [(scheme, host, tail)
              for scheme in ("https", "http", "ssh", "s3", "git+ssh")
              for host in ("example.com", "127.0.0.1:8443", "[::1]:22")
              for tail in ("", "/srv/store", "/r.git/?n=1&X-Amz-Signature=k70#top",
                           "?sig=k70", "#frag")]


def _shown(scheme: str, user: str, host: str, tail: str) -> str:
    """The URL as redact shows it: no user info but an SSH login (before the first
    ``:``), the secret parameters' values ``***``."""
    login = user.partition(":")[0]
    kept = f"{login}@" if login and scheme.endswith("ssh") else ""
    return (f"{scheme}://{kept}{host}"
            + tail.replace("Signature=k70", "Signature=***").replace("sig=k70", "sig=***"))


@pytest.mark.parametrize("mark", list(DELIMITERS))
def test_a_password_with_any_delimiter_is_never_shown(mark):
    for password in _passwords(mark):
        for scheme, host, tail in URL_SHAPES:
            for user in (f"bob:{password}", f":{password}", password):
                url, shown = f"{scheme}://{user}@{host}{tail}", _shown(scheme, user, host, tail)
                for line in ("{}", "fatal: unable to access '{}': error 403",
                             "run: DVC remote 'store' ({}) refused", '"{}", ssh://a:b@c'):
                    assert redact(line.format(url)) == (
                        line.format(shown).replace("a:b@", "a@")), url


def test_a_user_info_cut_off_at_its_at_sign_is_hidden_as_no_port():
    """An unquoted ``#`` in .dvc/config starts a comment: DVC reads
    ``http://bob:pa#ss@host`` as ``http://bob:pa``, a "port" that is no number."""
    for text, shown in [("http://bob:pa", "http://bob:***"),
                        ("run: DVC remote 'store' (http://bob:p4) did", "run: DVC remote "
                         "'store' (http://bob:***) did"),
                        ("http://h:8080/x (http://h:80), http://[::1]:22/x",
                         "http://h:8080/x (http://h:80), http://[::1]:22/x")]:
        assert (redact(text), redact(shown)) == (shown, shown)


CONNECTION_STRINGS = [
    ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Ab+/k70==;EndpointSuffix=c",
     "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=***;EndpointSuffix=c"),
    ("BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=2022&ss=b&"
     "sig=k70%3D", "BlobEndpoint=https://acct.blob.core.windows.net/;"
     "SharedAccessSignature=***"),
    ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=k70=",
     "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=***"),
    ("Driver={ODBC 18};Server=h;Uid=bob;Pwd={k7;0}}x};Database=d",
     "Driver={ODBC 18};Server=h;Uid=bob;Pwd=***;Database=d"),
    ('Server=h;User Id=bob;Password="k7;""0";Pooling=true',
     "Server=h;User Id=bob;Password=***;Pooling=true"),
    ("export AZURE_STORAGE_CONNECTION_STRING='AccountName=a;AccountKey=k70'",
     "export AZURE_STORAGE_CONNECTION_STRING='AccountName=a;AccountKey=***"),
    ("sas: sv=2022-11-02&ss=b&srt=co&sig=k70%2B&se=2030 (expires)",
     "sas: sv=2022-11-02&ss=b&srt=co&sig=***&se=2030 (expires)"),
]


@pytest.mark.parametrize(("text", "shown"), CONNECTION_STRINGS)
def test_the_secret_keys_of_connection_strings_are_hidden(text, shown):
    assert redact(text) == shown
    assert redact(shown) == shown


@pytest.mark.parametrize("key", ["AccountKey", "SharedAccessSignature", "SharedAccessKey",
                                 "Password", "Pwd", "accountkey", "PASSWORD"])
def test_a_connection_strings_secret_with_any_delimiter_is_never_shown(key):
    for mark in DELIMITERS:
        for password in _passwords(mark):
            # a ";" ends an unquoted value, a brace or quote first opens a quoted one;
            # braces and quotes hold any character
            plain = ";" not in password and password[0] not in "{\"'"
            for value in ([password] if plain else []) + [
                    "{" + password.replace("}", "}}") + "}",
                    '"' + password.replace('"', '""') + '"',
                    "'" + password.replace("'", "''") + "'"]:
                text = f"Server=h;{key}={value};Name=x"
                assert redact(text) == f"Server=h;{key}=***;Name=x", (key, value)


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
    def exists(path: str, **kwargs: object) -> bool:
        raise error

    return lambda self, name=None, command="<command>": SimpleNamespace(
        fs=SimpleNamespace(exists=exists, fs=SimpleNamespace(exists=exists)), path="store")


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


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_an_http_remote_with_nothing_listening_stops_make_run_in_one_line(
        scheme, tmp_path, monkeypatch, capsys):
    """fsspec's HTTP ``exists`` took the refused connection for "no such folder", and
    the run went on to DVC's own retries without a word."""
    port = free_port()
    code, line = _make_run(_project(tmp_path, f"{scheme}://bob:{PASSWORD}@127.0.0.1:{port}/s"),
                           monkeypatch, capsys)
    assert code == 1
    assert line.startswith(f"run: DVC remote 'store' ({scheme}://127.0.0.1:{port}/s) did not "
                           f"answer: Cannot connect to host 127.0.0.1:{port} ssl:"), line
    assert line.endswith("; check its URL (port, endpointurl) and that the server runs; "
                         "nothing was pulled or trained")


@pytest.mark.parametrize("status", [b"404 Not Found", b"403 Forbidden", b"200 OK"])
def test_an_http_remote_that_answers_passes_the_check(status, tmp_path):
    """Any answer is one: a new remote's folder is missing (404), a server may refuse to
    list a folder (403) and still serve its files."""
    from lorasent.run_pipeline import remote_problem

    answer = b"HTTP/1.0 " + status + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    with _listening(answer) as port:
        assert remote_problem(_project(tmp_path, f"http://127.0.0.1:{port}/s"), 5) is None


@pytest.mark.parametrize("mark", list("#?/@'"))
def test_make_runs_remote_check_hides_a_password_with_a_delimiter(
        mark, tmp_path, monkeypatch, capsys):
    """The URL as ``dvc remote add`` writes it (quoted), DVC reading it whole."""
    port, password = free_port(), f"p{mark}{PASSWORD}"
    url = f"http://bob:{password}@127.0.0.1:{port}/s"
    code, line = _make_run(_project(tmp_path, f'"{url}"'), monkeypatch, capsys)
    assert code == 1 and line.startswith(
        f"run: DVC remote 'store' (http://127.0.0.1:{port}/s) did not answer: "), line
    assert password not in line and f"p{mark}" not in line


def test_a_password_cut_off_by_an_unquoted_hash_is_hidden(tmp_path, monkeypatch, capsys):
    """Written by hand without quotes, ``#`` starts a comment: DVC reads ``http://bob:p``."""
    code, line = _make_run(_project(tmp_path, f"http://bob:p4#{PASSWORD}@127.0.0.1:9/s"),
                           monkeypatch, capsys)
    assert code == 1 and line.startswith(
        "run: DVC remote 'store' (http://bob:***) did not answer: "), line
    assert "p4" not in line


def test_dvc_warnings_in_lorasents_process_hide_the_password(monkeypatch, tmp_path):
    """``make run`` runs ``dvc repro`` in its process: DVC's own warnings (its run-cache
    warning names the remote's URL) pass through redact while it runs, and only then."""
    from dvc.logger import ColorFormatter, LoggerHandler

    from lorasent import run_pipeline

    url = f"http://bob:p#{PASSWORD}@127.0.0.1:9/store{QUERY}"
    shown = "http://127.0.0.1:9/store?X-Amz-Signature=***&X-Amz-Expires=60"

    def repro(argv: list[str]) -> int:
        logging.getLogger("dvc.repo.reproduce").warning(
            "Failed to pull run cache: %s", PermissionError(f"403 Forbidden: {url}"))
        try:
            try:
                raise OSError(f"refused at {url}")
            except OSError as err:
                raise RuntimeError(f"Cannot connect to {url}") from err
        except RuntimeError:
            logging.getLogger("dvc_data.index.fetch").exception("unexpected error")
        return 0

    monkeypatch.setattr(dvc.cli, "main", repro)
    monkeypatch.chdir(_project(tmp_path, url))
    out, traced = io.StringIO(), io.StringIO()
    handlers = [LoggerHandler(out), LoggerHandler(traced)]
    handlers[0].setFormatter(ColorFormatter(log_colors=False))
    handlers[1].setFormatter(ColorFormatter(log_colors=False, show_traceback=True))
    loggers = [logging.getLogger("dvc"), logging.getLogger("dvc_data")]
    for logger, handler in zip(loggers, handlers, strict=True):
        logger.addHandler(handler)
    before = [list(logger.filters) for logger in loggers]
    try:
        assert run_pipeline.reproduce(pull=False) == 0
        # removed after the run
        assert [h.filters for h in handlers] == [[], []]
        assert [logger.filters for logger in loggers] == before
    finally:
        for logger, handler in zip(loggers, handlers, strict=True):
            logger.removeHandler(handler)
    assert out.getvalue() == (
        f"WARNING: Failed to pull run cache: 403 Forbidden: {shown}\n")
    assert traced.getvalue().startswith(
        f"ERROR: unexpected error - Cannot connect to {shown}: refused at {shown}\n"
        "Traceback (most recent call last):\n")
    assert "RedactedError: Cannot connect to " in traced.getvalue()
    for text in (out.getvalue(), traced.getvalue()):
        assert PASSWORD not in text and SECRET not in text


def test_the_filter_reaches_a_plugin_logger_without_handlers():
    """A plugin's warning with no handler above it is printed by Python's last-resort
    handler; and a record whose arguments do not fit its format still hides them."""
    url = f"http://bob:p?{PASSWORD}@127.0.0.1:9/store"
    code = ("import logging, sys\n"
            "from lorasent.addresses import redacted_logs\n"
            "with redacted_logs(['dvc_http']):\n"
            "    logging.getLogger('dvc_http.spec').warning('GET %s: 401', sys.argv[1])\n"
            "    logging.getLogger('dvc_http').warning('no fit %d', sys.argv[1])\n")
    done = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(REPO / "src")})
    assert done.stderr == ("GET http://127.0.0.1:9/store: 401\n"
                           "no fit %d ('http://127.0.0.1:9/store',)\n")


def test_an_exception_stand_in_keeps_the_chain_without_secrets():
    url = f"https://bob:{PASSWORD}@h/x"
    try:
        try:
            raise KeyError(url)
        except KeyError:
            raise ValueError(f"at {url}") from None
    except ValueError as err:
        caught = err
        record = logging.LogRecord("dvc", logging.ERROR, __file__, 1, "failed %s", (url,),
                                   sys.exc_info())
    assert RedactSecrets().filter(record)
    assert record.exc_info is not None
    stand_in = record.exc_info[1]
    assert (record.getMessage(), str(stand_in)) == ("failed https://h/x", "at https://h/x")
    assert isinstance(stand_in, RedactedError) and stand_in.__suppress_context__
    assert str(stand_in.__context__) == "'https://h/x'"
    assert stand_in.__traceback__ is caught.__traceback__


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


@pytest.mark.parametrize("mark", ["", *"#?/@'\""])
def test_a_git_remote_that_refuses_is_named_without_its_secrets(mark, tmp_path):
    """git's own last line may name the URL with a password it did not parse
    (``http://bob:pw/k70@...``)."""
    from lorasent.experiments.repo_checks import _on_git_remote

    port = free_port()
    url = f"http://bob:p{mark}{PASSWORD}@127.0.0.1:{port}/repo.git{QUERY}"
    assert redact(url) == (f"http://127.0.0.1:{port}/repo.git?X-Amz-Signature=***"
                           "&X-Amz-Expires=60")
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
