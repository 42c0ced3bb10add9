"""The addresses a user gives lorasent (a DVC remote's URL and ``endpointurl``, a git
remote, a Ray cluster): how every line, log and record shows one (:func:`redact`), and
how long lorasent waits for one to answer (:func:`connect_timeout_s`, :func:`within`).

:func:`redact` is the one function that every message naming an address goes through:
``make run``'s remote check and its damaged-pull line, ``lorasent sweep``'s and
``learning-curve``'s git remote, ``--address`` and run logs, ``lorasent reproduce``; and,
through :func:`redacted_logs`, the records of DVC and its plugins while ``make run`` runs
them in lorasent's process. It takes a URL or any text holding URLs and removes what a URL
may carry as a secret: the password of its user info (``ssh://user:pw@host`` ->
``ssh://user@host``), the whole user info outside SSH (``https://<token>@host``: a lone
user name there is often a token), and the value of every query or fragment parameter
whose name says it is a secret (``X-Amz-Signature``, ``X-Amz-Credential``, ``sig``,
``token``, ``password``, ``key``...: shown as ``***``). A password typed unencoded may
hold any printable character (``/``, ``?``, ``#``, ``@``, a quote): the user info runs
from ``://`` to the last ``@`` before the next space, so a URL whose path or query holds
an ``@`` is shown from that ``@`` on (more hidden, never less); a "port" that is no
number is hidden too (``http://bob:pa``: a user info cut at its ``@``, as an unquoted
``#`` in ``.dvc/config`` cuts ``http://bob:pa#ss@host``). Outside URLs, the values
of the secret keys of connection strings (:data:`CONNECTION_SECRETS`: Azure's
``AccountKey=...;``, ``SharedAccessSignature=``, ODBC's ``Pwd={...}``) are hidden too.

A remote that accepts the TCP connection and never answers would otherwise hold a
command for minutes without a word (DVC's HTTP and S3 plugins retry for 300 s, asyncssh
waits 120 s for the SSH banner): lorasent waits :data:`CONNECT_TIMEOUT_S` seconds for a
remote to connect and give its first answer, ``--connect-timeout`` or the environment's
:data:`CONNECT_TIMEOUT_ENV` for longer (a slow link).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
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

# The user info runs to the last "@" before a space (a password may hold "/", "?", "#",
# "@" or a quote); the host and the rest end where the old grammar ends them.
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?:(?P<userinfo>\S*)@)?"
                  r"(?P<host>[^/?#\s'\"<>`]*)(?P<rest>[^\s'\"<>`]*)")
# Marks that close what holds a URL, kept after a hidden value: "(http://h:80)", "?sig=x).".
_CLOSING = r"[)\]},.:]*"
# A host's port, and the closing marks after it. A "port" that is no number is the rest
# of a user info whose "@" was cut off (an unquoted "#" in .dvc/config starts a comment:
# ``http://bob:pa#ss@host`` is read ``http://bob:pa``).
_PORT = re.compile(rf"(?P<host>[^:\[\]]*):(?P<port>.*?)(?P<end>{_CLOSING})")
_PARAM = re.compile(rf"(?P<lead>[?&;#])(?P<name>[^=&;#]*)=(?P<value>[^&;#]*?)"
                    rf"(?P<end>{_CLOSING}(?=[&;#]|$))")
# Keys of connection strings (``Key=value;``) whose value is a secret: Azure Storage's
# AccountKey and SharedAccessSignature, Service Bus's and Event Hubs' SharedAccessKey,
# ADO.NET's and ODBC's Password and Pwd; and a SAS token's ``sig`` (``sv=...&sig=...``).
CONNECTION_SECRETS = ("AccountKey", "SharedAccessSignature", "SharedAccessKey", "Password",
                      "Pwd", "sig")
# A key of CONNECTION_SECRETS where a connection string's key starts (``sig`` also after
# a SAS token's ``&`` or ``?``); its value braced (ODBC: ``}}`` is a brace), quoted
# (ADO.NET: a doubled quote is a quote), or up to the next ``;`` or space (``sig``'s up
# to the next ``&``, ``;``, ``#``, quote or space, as a query parameter's, closing marks
# before them kept).
_SETTING = re.compile(
    r"(?:(?<=[\s;'\"{(,])|^)(?P<name>"
    + "|".join(name for name in CONNECTION_SECRETS if name != "sig")
    + r")\s*=\s*(?P<value>\{(?:\}\}|[^}\n])*\}?|\"(?:\"\"|[^\"\n])*\"?|'(?:''|[^'\n])*'?"
    r"|[^;\s]*)"
    rf"|(?:(?<=[\s;'\"{{(,&?])|^)(?P<sas>sig)=(?P<sig>[^&;#\s'\"]*?)"
    rf"(?={_CLOSING}(?:[&;#\s'\"]|$))",
    re.IGNORECASE | re.MULTILINE)


def redact(text: str) -> str:
    """``text`` (a URL, or a line holding URLs or connection strings) with their secrets
    taken out: a URL's user info (from ``://`` to the last ``@`` before a space, whatever
    it holds) but for its user name under :data:`SSH_SCHEMES`; the value of each query
    or fragment parameter whose name matches :data:`SECRET_NAME`, and of each key of
    :data:`CONNECTION_SECRETS` in a connection string, shown as :data:`HIDDEN`.
    Everything else is left as it is, byte for byte (a path, a folder remote, a
    message's words)."""
    return _URL.sub(_redact_url, _SETTING.sub(_hide_setting, text))


def _hide_setting(match: re.Match[str]) -> str:
    value = "value" if match["name"] else "sig"
    return match[0][:match.start(value) - match.start()] + HIDDEN


def _redact_url(match: re.Match[str]) -> str:
    scheme, user, host, rest = match["scheme"], match["userinfo"], match["host"], match["rest"]
    if user is not None:
        name = user.partition(":")[0]
        host = f"{name}@{host}" if name and scheme.lower() in SSH_SCHEMES else host
    elif (cut := _PORT.fullmatch(host)) and cut["port"] and not cut["port"].isdigit():
        host = f"{cut['host']}:{HIDDEN}{cut['end']}"
    start = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=-1)
    if start >= 0:
        rest = rest[:start] + _PARAM.sub(_hide_secret, rest[start:])
    return f"{scheme}://{host}{rest}"


def _hide_secret(match: re.Match[str]) -> str:
    if not SECRET_NAME.search(match["name"]):
        return match[0]
    return f"{match['lead']}{match['name']}={HIDDEN}{match['end']}"


class RedactedError(Exception):
    """Stands in, in a log record, for an exception whose message holds a secret: its
    message is the original's through :func:`redact`, its traceback the original's, its
    cause and context stand-ins of the original's."""


def _stand_in(err: BaseException, seen: dict[int, BaseException]) -> BaseException:
    if id(err) in seen:
        return seen[id(err)]
    new = seen[id(err)] = RedactedError(redact(str(err)))
    new.__cause__ = None if err.__cause__ is None else _stand_in(err.__cause__, seen)
    new.__context__ = None if err.__context__ is None else _stand_in(err.__context__, seen)
    new.__suppress_context__ = err.__suppress_context__
    return new.with_traceback(err.__traceback__)


def _chain(err: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


class RedactSecrets(logging.Filter):
    """A logging filter that passes every record with its secrets taken out
    (:func:`redact`): its message (format and arguments, when they hold one, become the
    redacted text), its exception (:class:`RedactedError` in its place, when a message
    of its chain holds one) and its formatted traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # arguments that do not fit the format: both shown, as text
            text = record.msg = f"{record.msg} {record.args!r}"
            record.args = ()
        if (shown := redact(text)) != text:
            record.msg, record.args = shown, ()
        info = record.exc_info
        if info and info[1] is not None and any(redact(str(err)) != str(err)
                                                for err in _chain(info[1])):
            record.exc_info = (RedactedError, _stand_in(info[1], {}), info[2])
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


@contextlib.contextmanager
def redacted_logs(names: Iterable[str]) -> Iterator[None]:
    """Within the block, :class:`RedactSecrets` filters the records of the loggers
    ``names`` and their children as they are now, and every record that the handlers of
    these loggers, the root logger's and Python's last-resort handler (what prints a
    warning of a logger without handlers) pass on; removed at the end.

    A library that lorasent runs in its process (DVC and its plugins, ``make run``)
    prints its own lines: a warning that names a remote's URL with its password
    (``http://user:pw@host``, DVC's "Failed to pull run cache: ...") is printed with the
    password taken out."""
    guard = RedactSecrets()
    names = tuple(names)
    loggers = [logging.getLogger(name) for name in names]
    loggers += [found for key, found in list(logging.Logger.manager.loggerDict.items())
                if isinstance(found, logging.Logger)
                and any(key.startswith(f"{name}.") for name in names)]
    targets: dict[int, logging.Filterer] = {id(logger): logger for logger in loggers}
    for logger in [*loggers, logging.getLogger()]:
        targets.update((id(handler), handler) for handler in logger.handlers)
    if logging.lastResort is not None:
        targets[id(logging.lastResort)] = logging.lastResort
    for target in targets.values():
        target.addFilter(guard)
    try:
        yield
    finally:
        for target in targets.values():
            target.removeFilter(guard)


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
