"""The container tier's machinery (``make test-container``, tests/test_container.py).

A Docker engine: the one that answers, else one started here (``dockerd`` on a socket,
data root and pid file of its own; Debian's ``docker.io`` installed first when missing
and this process is root), stopped again by its pid at the end. A base image for
``docker/cpu/Dockerfile``: the real ``python:<version>-slim-bookworm`` when it can be
pulled, else a stand-in made from Debian's packages (``debootstrap``; the same Python
layout, a venv rooted at ``/usr/local``) under that tag. What is particular to this
machine (its own CA certificates, pip's ``find-links`` with the CPU wheel of torch) goes
into the stand-in base and the build arguments, never into the Dockerfiles.

Every failure is one line naming what failed and the log file to read
(:class:`TierError`); under ``CI=true`` a tier that cannot run fails instead of
skipping (tests/test_container.py).
"""

from __future__ import annotations

import configparser
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from conftest import REPO

CPU_DOCKERFILE = REPO / "docker" / "cpu" / "Dockerfile"
ROCM_DOCKERFILE = REPO / "docker" / "rocm" / "Dockerfile"
# Where an engine started here keeps everything: removed when it stops.
ENGINE_ROOT = Path("/var/lib/lorasent-test-docker")
TEST_TAG = "lorasent-test"
# The Debian release and packages of the stand-in base (the official image's Debian 12).
SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# The CA certificates this machine trusts beyond Debian's (update-ca-certificates' input).
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
STAND_IN_PACKAGES = "python3,python3-venv,ca-certificates"
# Where the stand-in base's tarball is kept between runs of the tier (383 MB; remove the
# folder to make it again): a fresh machine (CI's) has none and makes it.
STAND_IN_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / \
    "lorasent" / "container-tier"


class TierError(Exception):
    """One line: what failed, and the log file that holds the rest."""


class CannotRun(Exception):
    """No engine and no way to start one: the tier skips (fails under CI=true)."""


def sh(argv: list[str], log: Path, *, env: dict[str, str] | None = None,
       timeout_s: float = 900, what: str | None = None, cwd: Path = REPO) -> str:
    """Run ``argv``, appending its output to ``log``; its stdout+stderr.

    Raises:
        TierError: a non-zero exit or a timeout, naming ``what`` (default: the command)
            and ``log``.
    """
    what = what or " ".join(argv[:3])
    with log.open("a", encoding="utf-8") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        try:
            done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise TierError(f"{what}: still running after {timeout_s:.0f} s; see {log}") from None
        out.write(done.stdout)
    if done.returncode != 0:
        raise TierError(f"{what} failed (exit {done.returncode}): {last_line(done.stdout)}; "
                        f"see {log}")
    return done.stdout


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


# ------------------------------------------------------------------ the engine

@dataclass
class Engine:
    """A Docker engine the ``docker`` CLI talks to through :attr:`env`."""

    env: dict[str, str]
    log: Path
    started: subprocess.Popen[bytes] | None = None
    made: list[str] = field(default_factory=list)  # image tags this tier created

    def docker(self, *args: str, what: str | None = None, timeout_s: float = 900) -> str:
        return sh(["docker", *args], self.log, env=self.env, what=what, timeout_s=timeout_s)

    def answers(self) -> bool:
        return subprocess.run(["docker", "info"], env=self.env, capture_output=True,
                              timeout=60).returncode == 0

    def image_id(self, tag: str) -> str | None:
        done = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag],
                              env=self.env, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    def tag(self, source: str, tag: str) -> None:
        self.docker("tag", source, tag)
        self.made.append(tag)


def ensure_packages(packages: dict[str, str], log: Path) -> None:
    """Install Debian's ``packages`` ({command: package}) whose command is missing.

    Raises:
        CannotRun: a command is missing and this process cannot install it (not root).
    """
    missing = [pkg for cmd, pkg in packages.items() if shutil.which(cmd) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise CannotRun(f"{', '.join(missing)} not installed and this user cannot install it "
                        f"(run as root or install Debian's {' '.join(missing)})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        sh(["apt-get", "update", "-q"], log, env=env, what="apt-get update")
        sh(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], log, env=env,
           what=f"apt-get install {' '.join(missing)}")
    except TierError as err:
        raise CannotRun(str(err)) from None


@contextlib.contextmanager
def engine(log: Path) -> Iterator[Engine]:
    """The engine that answers (``DOCKER_HOST`` or the default socket), else one started
    here and stopped (by its pid) with its data root removed on leaving; either way, the
    images this tier tagged are removed on leaving.

    Raises:
        CannotRun: none answers and none can be started.
    """
    ensure_packages({"docker": "docker.io"}, log)
    found = Engine(env=dict(os.environ), log=log)
    if found.answers():
        with _cleanup(found):
            yield found
        return
    ensure_packages({"dockerd": "docker.io"}, log)
    if os.geteuid() != 0:
        raise CannotRun("no Docker engine answers and only root can start one here")
    # Short paths: a unix socket's path is limited to 107 bytes.
    run_dir = Path("/run/lorasent-test-docker")
    run_dir.mkdir(parents=True, exist_ok=True)
    socket = run_dir / "docker.sock"
    own = Engine(env={**os.environ, "DOCKER_HOST": f"unix://{socket}"}, log=log)
    engine_log = log.with_name("dockerd.log")
    with engine_log.open("ab") as out:
        own.started = subprocess.Popen(
            ["dockerd", "--data-root", str(ENGINE_ROOT / "data"), "--exec-root",
             str(run_dir / "exec"), "--host", f"unix://{socket}", "--pidfile",
             str(run_dir / "dockerd.pid")],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not own.answers():
            if own.started.poll() is not None or time.monotonic() > deadline:
                raise CannotRun(f"dockerd did not start: {last_line(engine_log.read_text())}; "
                                f"see {engine_log}")
            time.sleep(0.5)
        yield own  # its images go with its data root, below
    finally:
        own.started.send_signal(signal.SIGTERM)
        try:
            own.started.wait(60)
        except subprocess.TimeoutExpired:
            own.started.kill()
            own.started.wait()
        shutil.rmtree(ENGINE_ROOT, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)  # its sockets and exec root


@contextlib.contextmanager
def _cleanup(eng: Engine) -> Iterator[None]:
    try:
        yield
    finally:
        for tag in reversed(eng.made):
            subprocess.run(["docker", "image", "rm", "--force", tag], env=eng.env,
                           capture_output=True)
        subprocess.run(["docker", "image", "prune", "--force"], env=eng.env, capture_output=True)


# ------------------------------------------------------------------ the base images

def cpu_base_tag() -> str:
    """``docker/cpu/Dockerfile``'s ``FROM`` with its ``ARG`` defaults filled in."""
    return from_tag(CPU_DOCKERFILE)


def from_tag(dockerfile: Path, build_args: dict[str, str] | None = None) -> str:
    """``dockerfile``'s ``FROM`` image with its ``ARG`` defaults, or ``build_args``."""
    text = dockerfile.read_text(encoding="utf-8")
    args = {**dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.M)), **(build_args or {})}
    image = re.search(r"^FROM (\S+)", text, flags=re.M)
    assert image, f"{dockerfile} has no FROM line"
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image.group(1))


def pip_find_links() -> list[Path]:
    """The local folders of wheels pip is configured with here (``pip config``'s
    ``find-links`` and ``PIP_FIND_LINKS``): the CPU build of torch lies there."""
    done = subprocess.run(["python3", "-m", "pip", "config", "list"], capture_output=True,
                          text=True)
    values = re.findall(r"find-links='([^']*)'", done.stdout)
    values.append(os.environ.get("PIP_FIND_LINKS", ""))
    return sorted({Path(p) for v in values for p in v.split() if p and Path(p).is_dir()})


def base_image(eng: Engine, work: Path) -> str:
    """Make ``docker/cpu/Dockerfile``'s base available: pulled, else the stand-in.

    Returns:
        one line saying which, with the base's digest when it has one.
    """
    tag = cpu_base_tag()
    pulled = subprocess.run(["docker", "pull", "-q", tag], env=eng.env, capture_output=True,
                            text=True, timeout=300)
    if pulled.returncode == 0:
        return f"base: {tag} pulled ({pulled.stdout.strip()})"
    tarball = STAND_IN_CACHE / f"stand-in-{stand_in_key()}.tar"
    made = not tarball.is_file()
    if made:
        stand_in_rootfs(work, tarball)
    eng.docker("import", str(tarball), tag, what=f"docker import of the stand-in {tag}")
    eng.made.append(tag)
    reason = last_line(pulled.stderr)
    return (f"base: {tag} cannot be pulled ({reason[:120]}); a stand-in made from Debian "
            f"{SUITE}'s packages under that tag ({'made, kept' if made else 'kept'} in "
            f"{tarball})")


def stand_in_key() -> str:
    """What the stand-in base is made from, hashed (16 hex digits): the recipe
    (:func:`stand_in_rootfs`'s source and the constants it reads), this machine's CA
    certificates' bytes and pip's ``find-links`` files (names, sizes, times). A change to
    any of them makes a new stand-in; Debian's packages of the suite may be newer than
    the kept one's, as a pulled base's may be newer than the engine's copy."""
    import hashlib
    import inspect

    digest = hashlib.sha256(inspect.getsource(stand_in_rootfs).encode())
    digest.update(f"{SUITE} {DEBIAN_MIRROR} {STAND_IN_PACKAGES}".encode())
    for cert in sorted(LOCAL_CAS.glob("*.crt")) if LOCAL_CAS.is_dir() else ():
        digest.update(cert.name.encode() + cert.read_bytes())
    for folder in pip_find_links():
        for item in sorted(folder.rglob("*")):
            stat = item.stat()
            digest.update(f"{item} {stat.st_size} {stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def stand_in_rootfs(work: Path, tarball: Path) -> None:
    """``tarball``: Debian ``SUITE`` (minbase, Python 3, venv) laid out as the official
    ``python:*-slim-bookworm``: ``python3`` and ``pip`` in ``/usr/local/bin`` (a venv
    rooted there), with this machine's CA certificates and pip's ``find-links`` folders
    (so that pip reaches the package index and finds the CPU wheel of torch). Written
    under a temporary name and renamed (a tier stopped halfway keeps no tarball); the
    other tarballs of its folder (other keys) are removed then."""
    ensure_packages({"debootstrap": "debootstrap"}, work / "tier.log")
    log = work / "debootstrap.log"
    root = work / "rootfs"
    sh(["debootstrap", "--variant=minbase", f"--include={STAND_IN_PACKAGES}",
        SUITE, str(root), DEBIAN_MIRROR], log, what="debootstrap of the stand-in base",
       timeout_s=900)
    certs = root / LOCAL_CAS.relative_to("/")
    for cert in LOCAL_CAS.glob("*.crt") if LOCAL_CAS.is_dir() else ():
        shutil.copy2(cert, certs / cert.name)
    pip_conf = configparser.ConfigParser()
    pip_conf["global"] = {"cert": "/etc/ssl/certs/ca-certificates.crt"}
    links = []
    for folder in pip_find_links():
        inside = root / folder.relative_to("/")
        shutil.copytree(folder, inside, dirs_exist_ok=True)
        links.append(str(folder))
    if links:
        pip_conf["global"]["find-links"] = " ".join(links)
    with (root / "etc" / "pip.conf").open("w", encoding="utf-8") as out:
        pip_conf.write(out)
    sh(["chroot", str(root), "update-ca-certificates"], log, what="update-ca-certificates")
    sh(["chroot", str(root), "python3", "-m", "venv", "/usr/local"], log,
       what="the stand-in's venv at /usr/local")
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (root / cache).glob("*.deb" if "archives" in cache else "*_*"):
            item.unlink()
    tarball.parent.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_name(f".{tarball.name}.{os.getpid()}.tmp")
    with tarfile.open(partial, "w") as tar:
        tar.add(root, arcname=".")
    shutil.rmtree(root)
    for old in tarball.parent.glob("stand-in-*.tar"):
        old.unlink()
    partial.rename(tarball)


# ------------------------------------------------------------------ builds

def build(eng: Engine, dockerfile: Path, tag: str, docker_args: list[str], log: Path,
          make_vars: dict[str, str] | None = None) -> str:
    """``make docker-build-cpu`` (``docker-build`` for the ROCm Dockerfile) under ``tag``,
    with ``docker_args`` as ``DOCKER_BUILD_ARGS`` and ``make_vars``; the output.

    Raises:
        TierError: the build failed, naming the Dockerfile's step that failed and ``log``.
    """
    cpu = dockerfile == CPU_DOCKERFILE
    argv = ["make", "docker-build-cpu" if cpu else "docker-build",
            f"{'CPU_IMAGE' if cpu else 'IMAGE'}={tag}",
            f"DOCKER_BUILD_ARGS={' '.join(docker_args)}",
            *(f"{k}={v}" for k, v in (make_vars or {}).items())]
    with log.open("w", encoding="utf-8") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        done = subprocess.run(argv, cwd=REPO, env=eng.env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=1500)
    eng.made.append(tag)
    output = plain(log.read_text(encoding="utf-8"))
    if done.returncode != 0:
        steps = re.findall(r"^Step \d+/\d+ : (.*)$", output, flags=re.M)
        step = steps[-1][:160] if steps else "before its first step"
        raise TierError(f"docker build of {dockerfile.relative_to(REPO)} failed at `{step}`: "
                        f"{step_error(output)}; see {log}")
    return output


def plain(text: str) -> str:
    """``text`` without the colour codes the legacy builder wraps a step's stderr in."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def step_error(output: str) -> str:
    """The failed step's own last line: the line before the builder's "The command ...
    returned a non-zero code" (and make's error), else the output's last line."""
    lines = [line.strip() for line in output.splitlines()
             if line.strip() and not line.startswith("Removing intermediate container")]
    ends = [i for i, line in enumerate(lines) if line.startswith("The command '")]
    return lines[ends[-1] - 1] if ends and ends[-1] > 0 else last_line(output)


def context_bytes(build_output: str) -> int:
    """The build context's size, from the legacy builder's "Sending build context" line."""
    sizes = re.findall(r"Sending build context to Docker daemon\s+([\d.]+)([kMG]?B)",
                       build_output)
    assert sizes, "no 'Sending build context' line in the build's output"
    number, unit = sizes[-1]
    return int(float(number) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[unit])


def git_revision() -> str:
    """HEAD's commit, with ``-dirty`` when tracked files differ from it."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.strip()
    return commit + ("-dirty" if dirty else "")


# ------------------------------------------------------------------ comparisons

def differences(venv: Path, container: Path, names: list[str]) -> list[str]:
    """One line for each of ``names`` (paths under both roots) whose bytes differ: the
    file, and for JSON files the first differing keys (dotted paths)."""
    import json

    lines = []
    for name in names:
        a, b = venv / name, container / name
        if not b.is_file():
            lines.append(f"{name}: missing in the container's run")
            continue
        if a.read_bytes() == b.read_bytes():
            continue
        if name.endswith(".json"):
            keys = differing_keys(json.loads(a.read_bytes()), json.loads(b.read_bytes()))
            lines.append(f"{name}: differs at {', '.join(keys[:5]) or 'formatting only'}")
        else:
            lines.append(f"{name}: differs ({a.stat().st_size} vs {b.stat().st_size} bytes)")
    return lines


def differing_keys(a: object, b: object, prefix: str = "") -> list[str]:
    """The dotted paths where ``a`` and ``b`` (parsed JSON) differ, in ``a``'s order."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in [*a, *(k for k in b if k not in a)]:
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in a or key not in b:
                out.append(path)
            else:
                out.extend(differing_keys(a[key], b[key], path))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [k for i, (x, y) in enumerate(zip(a, b, strict=True))
                for k in differing_keys(x, y, f"{prefix}[{i}]")]
    return [] if a == b else [prefix or "(top)"]


# ------------------------------------------------------------------ the lock elsewhere

PYPI_SIMPLE = "https://pypi.org/simple"


def lock_pins(lock: Path) -> dict[str, tuple[str, set[str]]]:
    """``{name: (version, {sha256, ...})}`` of a ``pip --require-hashes`` lock."""
    text = lock.read_text(encoding="utf-8").replace("\\\n", " ")
    pins = {}
    for line in text.splitlines():
        if match := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s+(.*)$", line):
            pins[match.group(1)] = (match.group(2),
                                    set(re.findall(r"--hash=sha256:([0-9a-f]{64})", line)))
    return pins


def lock_problems(lock: Path, python: tuple[int, int], glibc: tuple[int, int],
                  index: str = PYPI_SIMPLE) -> list[str]:
    """One line for each pin of ``lock`` that pip cannot install on CPython ``python``
    with glibc ``glibc`` (x86_64): none of the files its hashes allow, as ``index``
    lists them (PEP 691's JSON), is an sdist or a wheel whose tags that interpreter takes
    (``packaging.tags``, as pip computes them) under a ``Requires-Python`` it meets.

    What ``pip install --dry-run --python-version --platform --require-hashes`` decides,
    from the index's listing alone: pip downloads each file to check its hash (a GB, minutes).
    """
    import json
    import ssl
    import urllib.error
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    from packaging.specifiers import SpecifierSet
    from packaging.tags import compatible_tags, cpython_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename

    platforms = [f"manylinux_{glibc[0]}_{minor}_x86_64" for minor in range(glibc[1], 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64",
                  "linux_x86_64"]
    tags = {*cpython_tags(python, platforms=platforms),
            *compatible_tags(python, platforms=platforms)}
    version = ".".join(map(str, python))
    context = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))

    def check(item: tuple[str, tuple[str, set[str]]]) -> str | None:
        name, (pinned, hashes) = item
        request = urllib.request.Request(f"{index}/{canonicalize_name(name)}/",
                                         headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        for attempt in range(3):  # a name lookup fails now and then under load
            try:
                with urllib.request.urlopen(request, timeout=60, context=context) as response:
                    listing = json.load(response)["files"]
                break
            except urllib.error.URLError:
                if attempt == 2:
                    raise
                time.sleep(2)
        files = [f for f in listing if f.get("hashes", {}).get("sha256") in hashes]
        if not files:
            return f"{name}=={pinned}: none of its hashes is a file on {index}"
        for f in files:
            if f.get("requires-python") and version not in SpecifierSet(f["requires-python"]):
                continue
            if not f["filename"].endswith(".whl") or tags & parse_wheel_filename(f["filename"])[3]:
                return None
        return (f"{name}=={pinned}: no wheel for CPython {version} on glibc "
                f"{glibc[0]}.{glibc[1]} among its hashes' files, and no sdist "
                f"({', '.join(sorted(f['filename'] for f in files))[:200]})")

    with ThreadPoolExecutor(4) as pool:
        return [line for line in pool.map(check, sorted(lock_pins(lock).items())) if line]
