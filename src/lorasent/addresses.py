"""The addresses a user gives lorasent (a DVC remote's URL and ``endpointurl``, a git
remote, a Ray cluster): how every line, log and record shows one (:func:`redact`), and
how long lorasent waits for one to answer (:func:`connect_timeout_s`, :func:`within`).

:func:`redact` is the one function that every message naming an address goes through:
``make run``'s remote check and its damaged-pull line, ``lorasent sweep``'s and
``learning-curve``'s git remote, ``--address`` and run logs, ``lorasent reproduce``. It
takes a URL or any text holding URLs and removes what a URL may carry as a secret: the
password of its user info (``ssh://user:pw@host`` -> ``ssh://user@host``), the whole
user info outside SSH (``https://<token>@host``: a lone user name there is often a
token), and the value of every query or fragment parameter whose name says it is a
secret (``X-Amz-Signature``, ``X-Amz-Credential``, ``sig``, ``token``, ``password``,
``key``...: shown as ``***``).

A remote that accepts the TCP connection and never answers would otherwise hold a
command for minutes without a word (DVC's HTTP and S3 plugins retry for 300 s, asyncssh
waits 120 s for the SSH banner): lorasent waits :data:`CONNECT_TIMEOUT_S` seconds for a
remote to connect and give its first answer, ``--connect-timeout`` or the environment's
:data:`CONNECT_TIMEOUT_ENV` for longer (a slow link).
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Callable
from typing import TypeVar

from lorasent.errors import LorasentError

T = TypeVar("T")

CONNECT_TIMEOUT_S = 10.0  # seconds to connect to an address and get its first answer
CONNECT_TIMEOUT_ENV = "LORASENT_CONNECT_TIMEOUT"  # the same, in seconds, for longer
# The longest wait the timeout can be, in whole seconds (about 24.8 days): a wait in a
# subprocess's communicate() is poll's or epoll's C int of milliseconds, 2**31 - 1 at most
# (longer: "OverflowError: timeout is too large"), the tightest of the waits the timeout
# feeds; a socket's settimeout and a thread's join take up to threading.TIMEOUT_MAX
# (2**63 - 1 ns on 64-bit Linux; longer: "timestamp out of range for platform time_t").
CONNECT_TIMEOUT_MAX_S = min((2**31 - 1) // 1000, int(threading.TIMEOUT_MAX))
# What to say about raising it, after a line that names the wait.
RAISE_IT = (f"on a slow link, wait longer: {CONNECT_TIMEOUT_ENV}=<seconds> (or "
            "--connect-timeout <seconds>)")

# Schemes whose user name is a login, not a secret: kept (``ssh://git@host``).
SSH_SCHEMES = frozenset({"ssh", "sftp", "git+ssh", "ssh+git", "scp"})
# A query or fragment parameter whose name holds one of these is a secret: AWS's
# X-Amz-Signature, -Credential and -Security-Token, Azure's SAS sig, Google's
# X-Goog-Signature, AWSAccessKeyId, access_token, api_key, password, passwd, pwd...
SECRET_NAME = re.compile(r"sig|token|secret|pass|pwd|credential|key|auth|session|code",
                         re.IGNORECASE)
HIDDEN = "***"

_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#\s'\"<>`]*)"
                  r"(?P<rest>[^\s'\"<>`]*)")
_PARAM = re.compile(r"(?P<lead>[?&;#])(?P<name>[^=&;#]*)=(?P<value>[^&;#]*)")


def redact(text: str) -> str:
    """``text`` (a URL, or a line holding URLs) with every URL's secrets taken out: the
    user info's password; all of the user info outside :data:`SSH_SCHEMES`; the value of
    each query or fragment parameter whose name matches :data:`SECRET_NAME`, shown as
    :data:`HIDDEN`. Everything else is left as it is, byte for byte (a path, a folder
    remote, a message's words)."""
    return _URL.sub(_redact_url, text)


def _redact_url(match: re.Match[str]) -> str:
    scheme, authority, rest = match["scheme"], match["authority"], match["rest"]
    user, at, host = authority.rpartition("@")
    if at:
        name = user.partition(":")[0]
        authority = f"{name}@{host}" if name and scheme.lower() in SSH_SCHEMES else host
    start = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=-1)
    if start >= 0:
        rest = rest[:start] + _PARAM.sub(_hide_secret, rest[start:])
    return f"{scheme}://{authority}{rest}"


def _hide_secret(match: re.Match[str]) -> str:
    if not SECRET_NAME.search(match["name"]):
        return match[0]
    return f"{match['lead']}{match['name']}={HIDDEN}"


def connect_timeout_s(given: float | str | None = None) -> float:
    """The seconds to wait for an address to connect and answer: ``given`` (an option's
    value), else the environment's :data:`CONNECT_TIMEOUT_ENV`, else
    :data:`CONNECT_TIMEOUT_S`.

    Raises:
        LorasentError: a value that is not a number of seconds above 0 and at most
            :data:`CONNECT_TIMEOUT_MAX_S`, naming where it came from.
    """
    where = "--connect-timeout"
    if given is None:
        given, where = os.environ.get(CONNECT_TIMEOUT_ENV), CONNECT_TIMEOUT_ENV
        if given is None or not str(given).strip():
            return CONNECT_TIMEOUT_S
    try:
        value = float(given)
    except ValueError:
        value = math.nan
    except OverflowError:  # an integer past float's range
        value = math.inf
    if not 0 < value <= CONNECT_TIMEOUT_MAX_S:  # also nan
        raise LorasentError(f"{where} {_shown(given)}: give the seconds to wait for a remote "
                            f"to connect and answer, a number above 0 and at most "
                            f"{CONNECT_TIMEOUT_MAX_S} (about "
                            f"{CONNECT_TIMEOUT_MAX_S // 86400} days; default "
                            f"{CONNECT_TIMEOUT_S:g})")
    return value


def _shown(value: object, limit: int = 40) -> str:
    """``value``'s repr, cut to its first ``limit`` characters and its length when longer
    (an integer past Python's repr limit of 4,300 digits: its size in bits)."""
    try:
        text = repr(value)
    except ValueError:  # int's repr refuses more digits than sys.get_int_max_str_digits()
        return (f"(an integer of {value.bit_length()} bits)" if isinstance(value, int)
                else f"(a {type(value).__name__})")
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class NoAnswer(Exception):
    """:func:`within`'s call did not return in time."""


def within(call: Callable[[], T], timeout_s: float) -> T:
    """``call()``'s value or error, when it returns within ``timeout_s`` seconds.

    It runs in a daemon thread: a call that hangs (a plugin waiting on a socket that
    never answers) is left there, to end by its own timeout or with the process.

    Raises:
        NoAnswer: ``call`` had not returned after ``timeout_s`` seconds.
    """
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as err:  # handed to the caller's thread
            box["error"] = err

    thread = threading.Thread(target=run, name="lorasent-connect", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise NoAnswer
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
