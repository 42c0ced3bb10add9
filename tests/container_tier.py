"""The container tier's machinery (``make test-container``, tests/test_container.py).

A Docker engine: the one that answers, else one started here (``dockerd`` with every
path in a folder made fresh for this run: data root, exec root, socket, pid file; no
bridge or firewall rules; Debian's ``docker.io`` installed first when missing and this
process is root), stopped again by its own pid at the end and its folder removed. Two
tiers at once on one machine each start their own; when one cannot start beside the
other, it says in one line that an engine is busy (:class:`EngineBusy`). A base image
for ``docker/cpu/Dockerfile``: the real ``python:<version>-slim-bookworm`` when the
engine holds it or it can be pulled, else a stand-in made from Debian's packages
(``debootstrap``; the same Python layout, a venv rooted at ``/usr/local``) under a tag
of the run's own. What is particular to this machine (its own CA certificates, pip's
``find-links`` with the CPU wheel of torch) goes into the stand-in base and the build
arguments, never into the Dockerfiles.

The tier removes what it made and nothing else, found by id, in a user's engine or its
own: the containers it ran (``--cidfile``), the images its builds made (their ids from
the build's output), the tags it gave (names of its run's own, ``lorasent-test-<run>``);
never a prune, never a fixed path (:meth:`Engine.clean_up`, :func:`removals`).

Every failure is one line naming what failed and the log file to read
(:class:`TierError`); under ``CI=true`` a tier that cannot run fails instead of
skipping (tests/test_container.py).
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

from conftest import REPO
from lorasent.review.tiers import Verdict

CPU_DOCKERFILE = REPO / "docker" / "cpu" / "Dockerfile"
ROCM_DOCKERFILE = REPO / "docker" / "rocm" / "Dockerfile"
# An engine started here keeps everything (data root, exec root, socket, pid file, its
# configuration file) in a folder of its own per run, made fresh under this parent (a
# disk that holds the images: GBs) and removed once that engine has stopped.
ENGINE_PARENT = Path("/var/lib")
ENGINE_PREFIX = "lorasent-test-docker-"
# A unix socket's path holds at most 107 bytes (sun_path's 108, its NUL included).
SOCKET_PATH_MAX = 107
# The repository of the images this tier builds: a name of each run's own under it
# (lorasent-test-<run>:cpu), so that two tiers on one engine never share a tag.
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


@dataclass
class Built:
    """``docker/cpu/Dockerfile`` built in ``engine`` (conftest's ``cpu_image``): the
    container tier and the cluster tier's machines run it."""

    engine: Engine
    tag: str  # lorasent-test-<run>:cpu
    image_id: str
    revision: str  # git_revision() when the build started
    output: str
    work: Path


def say(request: pytest.FixtureRequest, line: str, tier: str = "container tier") -> None:
    """``line`` on the terminal as the tier goes (pytest's capture set aside)."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n{tier}: {line}", flush=True)


def cannot_run(err: Exception, tier: str = "container tier") -> NoReturn:
    """A skip in one line; under ``CI=true`` a failure instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"the {tier} cannot run under CI=true: {err}", pytrace=False)
    pytest.skip(f"the {tier} cannot run: {err}")


class TierError(Exception):
    """One line: what failed, and the log file that holds the rest."""


class CannotRun(Exception):
    """No engine and no way to start one: the tier skips (fails under CI=true)."""


class EngineBusy(CannotRun):
    """The engine started here did not start while other engines run on this machine."""


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

@dataclass(frozen=True)
class EnginePaths:
    """Every path of a ``dockerd`` started here, all in ``root``: a folder made fresh for
    it (:func:`new_engine_paths`), so that no two engines share one."""

    root: Path
    run: str  # 8 hex digits: in the folder's name, its containerd namespaces and its tags

    @property
    def data_root(self) -> Path:
        return self.root / "data"

    @property
    def exec_root(self) -> Path:
        return self.root / "exec"

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def pidfile(self) -> Path:
        return self.root / "dockerd.pid"

    @property
    def config(self) -> Path:
        return self.root / "daemon.json"

    def all(self) -> list[Path]:
        return [self.root, self.data_root, self.exec_root, self.socket, self.pidfile,
                self.config]

    def dockerd_argv(self, *, ip6tables_flag: bool) -> list[str]:
        """``dockerd`` with a distinct value for every option dockerd's reference lists
        for running several daemons on one host ("Run multiple daemons": ``--data-root``,
        ``--exec-root``, ``--pidfile``, ``--host``, ``--config-file``, the bridge and the
        firewall rules), and containerd namespaces of its own (a system containerd, when
        one runs, is shared). No bridge and no iptables rules: ``docker0`` and the
        ``DOCKER`` chains are the machine's, one set for every engine, and another
        engine's stop would remove them; its builds use the host's network
        (:attr:`Engine.build_args`), its containers ``--network none``.
        ``ip6tables_flag``: this dockerd has ``--ip6tables`` (20.10 and later)."""
        return ["dockerd", "--data-root", str(self.data_root), "--exec-root",
                str(self.exec_root), "--host", f"unix://{self.socket}", "--pidfile",
                str(self.pidfile), "--config-file", str(self.config),
                "--containerd-namespace", f"lorasent-test-{self.run}",
                "--containerd-plugins-namespace", f"lorasent-test-{self.run}-plugins",
                "--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false",
                *(["--ip6tables=false"] if ip6tables_flag else [])]


def new_engine_paths(parent: Path = ENGINE_PARENT) -> EnginePaths:
    """A fresh folder under ``parent`` (``mkdtemp``: made by this call, mode 0700) for an
    engine's paths, with its empty configuration file (the machine's
    ``/etc/docker/daemon.json`` may name a socket or data root of its own).

    Raises:
        CannotRun: a socket's path in it would be over :data:`SOCKET_PATH_MAX` bytes.
    """
    run = secrets.token_hex(4)
    paths = EnginePaths(Path(tempfile.mkdtemp(prefix=f"{ENGINE_PREFIX}{run}-", dir=parent)), run)
    # The longest: the containerd dockerd starts listens in its exec root.
    longest = paths.exec_root / "containerd" / "containerd.sock"
    if len(os.fsencode(longest)) > SOCKET_PATH_MAX:
        paths.root.rmdir()
        raise CannotRun(f"{longest}: a socket's path is limited to {SOCKET_PATH_MAX} bytes; "
                        f"start the tier with a shorter ENGINE_PARENT")
    paths.config.write_text("{}\n", encoding="utf-8")
    return paths


@dataclass(frozen=True)
class Made:
    """An image this tier made or tagged: its id, the tag it gave (None: a layer of a
    build, untagged), and whether the image itself is new (made by the tier) or only
    tagged by it (someone else's image, or the tier's under another tag)."""

    image_id: str
    tag: str | None = None
    new: bool = True


def removals(made: list[Made], tags: dict[str, set[str]]) -> tuple[list[str], list[str]]:
    """What undoes ``made``, newest first, given ``tags`` (each recorded id's tags now; an
    id missing is gone): the references for ``docker image rm --no-prune`` (a tag the tier
    gave; a new image's id once no tag is left on it), and one line for each thing it
    keeps: a new image someone tagged since, or the tier's tag on an image it did not
    make that is that image's last (docker would delete the image with it).

    Only recorded ids and tags are named: never a prune, never an image found by name.
    ``--no-prune``: without it ``docker image rm`` also deletes every untagged parent,
    a user's dangling image among them when a build started from it (or from its cache).
    Children go before their parents: a build's layers are recorded in order.
    """
    now = {image_id: set(names) for image_id, names in tags.items()}
    plan: list[str] = []
    kept: list[str] = []
    for item in reversed(made):
        names = now.get(item.image_id)
        if names is None:
            continue
        if item.tag is not None and item.tag in names:
            if not item.new and len(names) == 1:
                kept.append(f"{item.tag} (the last tag of {item.image_id[:19]}, an image "
                            f"this tier did not make)")
                continue
            plan.append(item.tag)
            names.discard(item.tag)
            if not names:  # its last tag: docker deletes the image with it
                del now[item.image_id]
                continue
        if item.new and item.image_id in now:
            if names:
                kept.append(f"{item.image_id[:19]} (tagged {', '.join(sorted(names))} "
                            f"since this tier made it)")
            else:
                plan.append(item.image_id)
            del now[item.image_id]
    return plan, kept


def built_ids(output: str) -> list[str]:
    """The ids of the images a legacy ``docker build`` made, in order: its `` ---> <id>``
    lines, but for a ``FROM`` step's (the base) and those after ``---> Using cache`` (an
    earlier build's image, perhaps the user's)."""
    ids, step, cached = [], "", False
    for line in plain(output).splitlines():
        if found := re.match(r"^Step \d+/\d+ : (.*)$", line):
            step, cached = found.group(1), False
        elif line.strip() == "---> Using cache":
            cached = True
        elif (found := re.match(r"^ ---> ([0-9a-f]{12,64})$", line)) and not cached \
                and not step.upper().startswith("FROM "):
            ids.append(found.group(1))
    return ids


@dataclass
class Engine:
    """A Docker engine the ``docker`` CLI talks to through :attr:`env`, and what this run
    made in it (:attr:`made`, :attr:`cidfiles`): all it removes (:meth:`clean_up`)."""

    env: dict[str, str]
    log: Path
    run: str = field(default_factory=lambda: secrets.token_hex(4))
    paths: EnginePaths | None = None  # an engine started here: its paths
    started: subprocess.Popen[bytes] | None = None
    made: list[Made] = field(default_factory=list)
    cidfiles: list[Path] = field(default_factory=list)  # docker run --cidfile: its containers
    left: list[str] = field(default_factory=list)  # what clean_up and the stop left

    def docker(self, *args: str, what: str | None = None, timeout_s: float = 900) -> str:
        return sh(["docker", *args], self.log, env=self.env, what=what, timeout_s=timeout_s)

    def _quiet(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", *args], env=self.env, capture_output=True, text=True)

    def answers(self) -> bool:
        return subprocess.run(["docker", "info"], env=self.env, capture_output=True,
                              timeout=60).returncode == 0

    @property
    def build_args(self) -> list[str]:
        """``docker build`` options this engine needs: the host's network for an engine
        started here (it has no bridge)."""
        return ["--network=host"] if self.paths else []

    def image_name(self, name: str) -> str:
        """``lorasent-test-<run>:<name>``: a tag no other run uses."""
        return f"{TEST_TAG}-{self.run}:{name}"

    def image_id(self, tag: str) -> str | None:
        done = self._quiet("image", "inspect", "--format", "{{.Id}}", tag)
        return done.stdout.strip() if done.returncode == 0 else None

    def image_ids(self) -> set[str]:
        """Every image's id in the engine now."""
        return set(self._quiet("image", "ls", "--all", "--quiet", "--no-trunc").stdout.split())

    def image_tags(self, ids: list[str]) -> dict[str, set[str]]:
        """``{id: its tags}`` of those of ``ids`` the engine still holds."""
        if not ids:
            return {}
        done = self._quiet("image", "inspect", "--format", "{{.Id}} {{json .RepoTags}}", *ids)
        found = {}
        for line in done.stdout.splitlines():
            image_id, _, names = line.partition(" ")
            if image_id in ids:
                found[image_id] = set(json.loads(names) or [])
        return found

    def tag(self, source: str, tag: str) -> None:
        """``docker tag`` onto a name no image has yet (a run's own), recorded."""
        if self.image_id(tag):
            raise TierError(f"{tag} is in the engine already: the tier tags only names of "
                            f"its own run; see {self.log}")
        self.docker("tag", source, tag)
        self.made.append(Made(self.image_id(tag) or tag, tag, new=False))

    def record_build(self, output: str, tag: str) -> None:
        """Record the images a build made (:func:`built_ids`, by their full ids) and the
        tag it gave, when it gave one."""
        short = built_ids(output)
        full = self._quiet("image", "inspect", "--format", "{{.Id}}", *short).stdout.split() \
            if short else []
        ids = [next(f for f in full if f.removeprefix("sha256:").startswith(s))
               for s in short if any(f.removeprefix("sha256:").startswith(s) for f in full)]
        self.made.extend(Made(image_id) for image_id in ids)
        if tagged := self.image_id(tag):
            self.made.append(Made(tagged, tag, new=tagged in ids))

    def container_args(self) -> list[str]:
        """``docker run`` options that record the container's id (``--cidfile``), in a
        file named by the run (engines of other runs may share the log's folder)."""
        folder = self.log.parent / "containers"
        folder.mkdir(exist_ok=True)
        self.cidfiles.append(folder / f"{self.run}-{len(self.cidfiles) + 1}.cid")
        return ["--cidfile", str(self.cidfiles[-1])]

    def clean_up(self) -> list[str]:
        """Remove what this run made, by id alone: its containers (``--cidfile``), then
        its images and tags (:func:`removals`). Returns one line for each thing left
        (also in :attr:`left` and the log)."""
        left = []
        with self.log.open("a", encoding="utf-8") as out:
            def remove(*argv: str) -> subprocess.CompletedProcess[str]:
                done = self._quiet(*argv)
                out.write(f"\n$ docker {' '.join(argv)}\n{done.stdout}{done.stderr}")
                return done

            for cidfile in reversed(self.cidfiles):
                cid = cidfile.read_text().strip() if cidfile.is_file() else ""
                done = remove("container", "rm", "--force", cid) if cid else None
                if done and done.returncode != 0 and "No such container" not in done.stderr:
                    left.append(f"container {cid[:12]} ({last_line(done.stderr)})")
            plan, kept = removals(self.made, self.image_tags(
                list(dict.fromkeys(m.image_id for m in self.made))))
            left += kept
            for ref in plan:
                if (done := remove("image", "rm", "--no-prune", ref)).returncode != 0:
                    left.append(f"{ref} ({last_line(done.stderr)})")
        self.left += left
        return left


def ensure_packages(packages: dict[str, str], log: Path) -> None:
    """Install Debian's ``packages`` ({command: package}) whose command is missing; a
    second tier installing at the same time waits for dpkg's lock (up to 10 minutes).

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
    wait = ["-o", "DPkg::Lock::Timeout=600"]
    try:
        sh(["apt-get", *wait, "update", "-q"], log, env=env, what="apt-get update")
        sh(["apt-get", *wait, "install", "-y", "-q", "--no-install-recommends", *missing], log,
           env=env, what=f"apt-get install {' '.join(missing)}")
    except TierError as err:
        raise CannotRun(str(err)) from None


@contextlib.contextmanager
def engine(log: Path) -> Iterator[Engine]:
    """The engine that answers (``DOCKER_HOST`` or the default socket), else one started
    here (:func:`started_engine`). On leaving, what this run made in it is removed by id
    (:meth:`Engine.clean_up`): nothing else, in a user's engine or in its own.

    Raises:
        CannotRun: none answers and none can be started (:class:`EngineBusy`: while
            other engines run here).
    """
    ensure_packages({"docker": "docker.io"}, log)
    found = Engine(env=dict(os.environ), log=log)
    if found.answers():
        try:
            yield found
        finally:
            found.clean_up()
        return
    with started_engine(log) as own:
        try:
            yield own
        finally:
            own.clean_up()


@contextlib.contextmanager
def started_engine(log: Path, parent: Path = ENGINE_PARENT) -> Iterator[Engine]:
    """A ``dockerd`` started here on paths of its own (:func:`new_engine_paths`), its
    output in ``dockerd-<run>.log`` beside ``log``; on leaving it is stopped by its own pid
    (:func:`stop`) and its folder removed (:func:`remove_engine_folder`), nothing else.

    Raises:
        CannotRun: dockerd is missing and cannot be installed, this process is not root,
            or it does not answer within 60 s (:class:`EngineBusy` while other dockerd
            processes run here, :func:`start_failure`).
    """
    ensure_packages({"dockerd": "docker.io"}, log)
    if os.geteuid() != 0:
        raise CannotRun("no Docker engine answers and only root can start one here")
    ip6tables = "--ip6tables" in subprocess.run(["dockerd", "--help"], capture_output=True,
                                                 text=True).stdout
    paths = new_engine_paths(parent)
    own = Engine(env={**os.environ, "DOCKER_HOST": f"unix://{paths.socket}"}, log=log,
                 run=paths.run, paths=paths)
    engine_log = log.with_name(f"dockerd-{paths.run}.log")
    try:
        with engine_log.open("ab") as out:
            own.started = subprocess.Popen(paths.dockerd_argv(ip6tables_flag=ip6tables),
                                           stdout=out, stderr=subprocess.STDOUT,
                                           start_new_session=True)
        deadline = time.monotonic() + 60
        while not own.answers():
            if own.started.poll() is not None or time.monotonic() > deadline:
                raise start_failure(last_line(engine_log.read_text(errors="replace")),
                                    engine_log, other_dockerds(own.started.pid))
            time.sleep(0.5)
        yield own
    finally:
        if own.started is not None:
            stop(own.started)
        if (why := remove_engine_folder(paths)) is not None:
            own.left.append(why)


def other_dockerds(own: int | None, proc: Path = Path("/proc")) -> list[int]:
    """The pids of the ``dockerd`` processes running here, ``own`` aside."""
    pids = []
    for entry in proc.iterdir():
        if entry.name.isdigit() and int(entry.name) != own:
            try:
                if (entry / "comm").read_text().strip() == "dockerd":
                    pids.append(int(entry.name))
            except OSError:  # ended meanwhile
                continue
    return sorted(pids)


def start_failure(why: str, log: Path, others: list[int]) -> CannotRun:
    """The one line for a dockerd started here that does not answer: "an engine is busy"
    while other dockerd processes run here (naming them), else what it said last."""
    why = " ".join(why.split())
    if others:
        return EngineBusy(f"an engine is busy here: dockerd did not start beside the running "
                          f"dockerd (pid {', '.join(map(str, others))}): {why}; see {log}")
    return CannotRun(f"dockerd did not start: {why}; see {log}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the dockerd this process started, by its pid: SIGTERM (it stops its
    containers and its containerd), then after 60 s SIGKILL to its process group (its
    own: started in a session of its own)."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def mounts_under(root: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> list[Path]:
    """The mount points at or under ``root`` (``/proc/self/mountinfo``'s fifth field, its
    octal escapes undone), deepest first."""
    found = []
    for line in mountinfo.read_text().splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            point = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
            if point == root or root in point.parents:
                found.append(point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def remove_engine_folder(paths: EnginePaths) -> str | None:
    """Remove the folder of an engine started here once it has stopped: first what is
    still mounted under it (a dockerd killed leaves its layers mounted; unmounted lazily,
    none followed). Returns one line when the folder stays."""
    for point in mounts_under(paths.root):
        subprocess.run(["umount", "--lazy", str(point)], capture_output=True)
    if still := mounts_under(paths.root):
        return f"{paths.root} kept: {still[0]} is still mounted (remove it by hand)"
    shutil.rmtree(paths.root, ignore_errors=True)
    return f"{paths.root} could not be removed whole" if paths.root.exists() else None


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


@dataclass(frozen=True)
class Base:
    """``docker/cpu/Dockerfile``'s base in the engine: the line that says which, the tag
    ``make docker-build-cpu`` builds on (its ``CPU_BASE``), and the build arguments it
    needs (the stand-in's tag through the Dockerfile's ``PYTHON_VERSION``; torch from the
    package index pip uses here)."""

    line: str
    tag: str
    build_args: list[str]


def base_image(eng: Engine, work: Path) -> Base:
    """Make ``docker/cpu/Dockerfile``'s base available: the official image when the engine
    holds it (not this run's: kept) or it can be pulled (removed at the end when the pull
    brought it), else the stand-in, imported under a tag of this run's own
    (``python:3.11.7-lorasent-stand-in-<run>-slim-bookworm``): the official tag, which a
    user's image may carry, is never moved."""
    tag = cpu_base_tag()
    if eng.image_id(tag):
        digests = eng.docker("image", "inspect", "--format", '{{join .RepoDigests " "}}',
                             tag).strip()
        if digests:
            return Base(f"base: {tag} in the engine already ({digests}), kept", tag, [])
        reason = f"{tag} in the engine has no digest (not the official image)"
    else:
        before = eng.image_ids()
        pulled = subprocess.run(["docker", "pull", "-q", tag], env=eng.env, capture_output=True,
                                text=True, timeout=300)
        if pulled.returncode == 0:
            image_id = eng.image_id(tag) or tag
            eng.made.append(Made(image_id, tag, new=image_id not in before))
            return Base(f"base: {tag} pulled ({pulled.stdout.strip()})", tag, [])
        reason = f"{tag} cannot be pulled ({last_line(pulled.stderr)[:120]})"
    version = {"PYTHON_VERSION": f"{python_version()}-lorasent-stand-in-{eng.run}"}
    stand_in = from_tag(CPU_DOCKERFILE, version)
    with kept_stand_in(work) as (tarball, made):
        if eng.image_id(stand_in):
            raise TierError(f"{stand_in} is in the engine already: the tier imports only under "
                            f"names of its own run; see {eng.log}")
        eng.docker("import", str(tarball), stand_in, what=f"docker import of the stand-in {tag}")
        eng.made.append(Made(eng.image_id(stand_in) or stand_in, stand_in))
    return Base(f"base: {reason}; a stand-in made from Debian {SUITE}'s packages under "
                f"{stand_in} ({'made, kept' if made else 'kept'} in {tarball})", stand_in,
                [f"--build-arg=PYTHON_VERSION={version['PYTHON_VERSION']}",
                 "--build-arg=TORCH_INDEX_URL=https://pypi.org/simple"])


def python_version() -> str:
    """``docker/cpu/Dockerfile``'s ``PYTHON_VERSION`` default."""
    found = re.search(r"^ARG PYTHON_VERSION=(\S+)$", CPU_DOCKERFILE.read_text(encoding="utf-8"),
                      flags=re.M)
    assert found, f"{CPU_DOCKERFILE} has no ARG PYTHON_VERSION"
    return found.group(1)


@contextlib.contextmanager
def kept_stand_in(work: Path) -> Iterator[tuple[Path, bool]]:
    """The stand-in base's kept tarball (this machine's key, :func:`stand_in_key`), made
    first when missing, held under a shared ``flock`` while the block imports it: another
    tier, making a tarball of another key, removes only those no tier holds
    (:func:`remove_other_stand_ins`). Yields the tarball and whether it was made here.

    Raises:
        TierError: it vanished three times between being made and being held.
    """
    tarball = STAND_IN_CACHE / f"stand-in-{stand_in_key()}.tar"
    made = False
    for _ in range(3):
        try:
            held = os.open(tarball, os.O_RDONLY)
        except FileNotFoundError:
            stand_in_rootfs(work, tarball)
            made = True
            continue
        try:
            fcntl.flock(held, fcntl.LOCK_SH)
            try:
                same = os.path.samestat(os.fstat(held), os.stat(tarball))
            except FileNotFoundError:  # removed between the open and the lock
                same = False
            if same:
                yield tarball, made
                return
        finally:
            os.close(held)
    raise TierError(f"{tarball} was removed as soon as it was made, three times: another tier "
                    f"is making the stand-in base of another key")


def remove_other_stand_ins(tarball: Path) -> list[Path]:
    """Remove the kept stand-in tarballs of other keys beside ``tarball``, but those a
    tier holds now (:func:`kept_stand_in`'s shared lock): the ones removed."""
    removed = []
    for old in sorted(tarball.parent.glob("stand-in-*.tar")):
        if old.name == tarball.name:
            continue
        try:
            held = os.open(old, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # being imported by another tier
            os.close(held)
            continue
        try:
            if os.path.samestat(os.fstat(held), os.stat(old)):
                old.unlink()
                removed.append(old)
        except FileNotFoundError:
            pass
        finally:
            os.close(held)
    return removed


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
    other tarballs of its folder (other keys) are removed then, but those another tier
    is importing (:func:`remove_other_stand_ins`)."""
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
    remove_other_stand_ins(tarball)
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
    output = plain(log.read_text(encoding="utf-8"))
    eng.record_build(output, tag)
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

def container_verdict(venv: Path, container: Path, names: list[str]) -> Verdict:
    """``lorasent reproduce``'s verdict on the container's run of ``names`` (paths under
    both roots) against the venv's: identical where the platform is the same (the same
    CPU and torch build), else the tier that holds, with each file's largest deviation
    and the two machines side by side (their evaluate stage's provenance)."""
    import json

    from lorasent.review.tiers import machine_rows, verdict_of

    pairs = {}
    for name in names:
        a, b = venv / name, container / name
        old, new = a.read_bytes(), b.read_bytes() if b.is_file() else b""
        if old != new:
            pairs[name] = (old, new)
    record = "metrics/provenance/evaluate.json"
    machines = machine_rows(*(json.loads((root / record).read_text())
                              if (root / record).is_file() else None
                              for root in (venv, container)))
    return verdict_of(pairs, rev="the venv's run", outputs=len(names),
                      machines=[(name, a, b) for name, a, b in machines])


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
