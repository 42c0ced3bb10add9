"""The container tier's machinery without an engine (tests/container_tier.py): which paths
an engine started here gets, what its cleanup removes (only what the tier recorded, by
id), the one line when an engine is busy, and the kept stand-in tarballs another tier is
importing. The tier itself, in an engine: tests/test_container.py."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from container_tier import (
    CPU_DOCKERFILE,
    ENGINE_PREFIX,
    CannotRun,
    Engine,
    EngineBusy,
    Made,
    built_ids,
    from_tag,
    kept_stand_in,
    mounts_under,
    new_engine_paths,
    other_dockerds,
    python_version,
    removals,
    remove_engine_folder,
    remove_other_stand_ins,
    start_failure,
)


def apart(a: Path, b: Path) -> bool:
    return a != b and a not in b.parents and b not in a.parents


@pytest.fixture
def parent() -> Iterator[Path]:
    """A short folder of the test's own (pytest's are too long for a socket's path)."""
    folder = Path(tempfile.mkdtemp(prefix="lt-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder)


def test_each_engine_gets_a_fresh_folder_of_its_own(parent: Path) -> None:
    """Two engines' paths: each in a folder made for it (mode 0700, named by its run),
    none shared, and dockerd given every one of them, containerd namespaces of its own,
    no bridge and no firewall rules."""
    first, second = new_engine_paths(parent), new_engine_paths(parent)
    assert first.run != second.run
    for paths in (first, second):
        assert paths.root.parent == parent
        assert paths.root.name.startswith(f"{ENGINE_PREFIX}{paths.run}-")
        assert len(paths.run) == 8 and int(paths.run, 16) >= 0
        assert stat.S_IMODE(paths.root.stat().st_mode) == 0o700
        assert all(p == paths.root or paths.root in p.parents for p in paths.all())
        assert paths.config.read_text() == "{}\n"
    assert all(apart(a, b) for a in first.all() for b in second.all())
    root, run = first.root, first.run
    assert first.dockerd_argv(ip6tables_flag=True) == [
        "dockerd", "--data-root", f"{root}/data", "--exec-root", f"{root}/exec",
        "--host", f"unix://{root}/docker.sock", "--pidfile", f"{root}/dockerd.pid",
        "--config-file", f"{root}/daemon.json",
        "--containerd-namespace", f"lorasent-test-{run}",
        "--containerd-plugins-namespace", f"lorasent-test-{run}-plugins",
        "--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false",
        "--ip6tables=false"]
    assert "--ip6tables=false" not in first.dockerd_argv(ip6tables_flag=False)


def test_a_socket_path_over_the_limit_is_refused_and_its_folder_removed(
        parent: Path) -> None:
    deep = parent / ("d" * 40)
    deep.mkdir()
    with pytest.raises(CannotRun) as refused:
        new_engine_paths(deep)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{deep}/{ENGINE_PREFIX}")
    assert message.endswith("/exec/containerd/containerd.sock: a socket's path is limited to "
                            "107 bytes; start the tier with a shorter ENGINE_PARENT")
    assert list(deep.iterdir()) == []


def test_removing_an_engines_folder_leaves_the_other_engines(parent: Path) -> None:
    first, second = new_engine_paths(parent), new_engine_paths(parent)
    for paths in (first, second):
        (paths.data_root / "overlay2").mkdir(parents=True)
        paths.pidfile.write_text("123\n")
    assert remove_engine_folder(first) is None
    assert not first.root.exists()
    assert second.pidfile.read_text() == "123\n" and (second.data_root / "overlay2").is_dir()


def test_mounts_under_reads_mountinfo_with_its_escapes(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 254:0 / / rw - ext4 /dev/vda rw\n"
        "40 22 0:5 / /var/lib/lorasent-test-docker-ab-x rw - ext4 /dev/vda rw\n"
        "41 40 0:6 / /var/lib/lorasent-test-docker-ab-x/data/overlay2/l\\040m/merged rw "
        "- overlay overlay rw\n"
        "42 22 0:7 / /var/lib/lorasent-test-docker-ab-xy rw - ext4 /dev/vda rw\n")
    root = Path("/var/lib/lorasent-test-docker-ab-x")
    assert mounts_under(root, mountinfo) == [root / "data/overlay2/l m/merged", root]


# Ids as docker gives them.
S, I1, F, R1, USER, MOVED, TAGGED, NOT_OURS = (f"sha256:{c * 64}" for c in "0123456789"[:8])
STAND_IN = "python:3.11.7-lorasent-stand-in-0a1b2c3d-slim-bookworm"
CPU = "lorasent-test-0a1b2c3d:cpu"
ROCM_BASE = "rocm/pytorch:rocm0.0-lorasent-stand-in-0a1b2c3d_ubuntu24.04_py3.12"
# What a tier run records: the stand-in base, the CPU build's two images and tag, the
# ROCm base's tag on the CPU image, the failed ROCm build's one image.
RUN = [Made(S, STAND_IN), Made(I1), Made(F), Made(F, CPU), Made(F, ROCM_BASE, new=False),
       Made(R1)]


def test_removals_undo_the_tiers_records_newest_first() -> None:
    """Children before parents, tags before the images they name, the image only tagged
    by the tier untagged, not deleted; a user's image (dangling or tagged) never named."""
    tags = {S: {STAND_IN}, I1: set(), F: {CPU, ROCM_BASE}, R1: set(), USER: set()}
    assert removals(RUN, tags) == ([R1, ROCM_BASE, CPU, I1, STAND_IN], [])
    # Gone already (a failed build's layer, docker's own removal): not named again.
    assert removals(RUN, {S: {STAND_IN}, F: {CPU}}) == ([CPU, STAND_IN], [])


def test_removals_keep_what_is_no_longer_the_tiers_alone() -> None:
    made = [Made(MOVED, "lorasent-test-0a1b2c3d:a"), Made(TAGGED, "lorasent-test-0a1b2c3d:b"),
            Made(NOT_OURS, "lorasent-test-0a1b2c3d:c", new=False)]
    plan, kept = removals(made, {MOVED: set(), TAGGED: {"lorasent-test-0a1b2c3d:b", "mine:1"},
                                 NOT_OURS: {"lorasent-test-0a1b2c3d:c"}})
    # Its tag moved to another image: the tier's image, dangling now, goes by id.
    assert plan == ["lorasent-test-0a1b2c3d:b", MOVED]
    assert kept == [
        "lorasent-test-0a1b2c3d:c (the last tag of sha256:777777777777, an image this tier "
        "did not make)",
        "sha256:666666666666 (tagged mine:1 since this tier made it)"]


def test_built_ids_are_the_images_the_build_made() -> None:
    """Not the base (the FROM step's) nor an earlier build's cached image."""
    output = ("Sending build context to Docker daemon  2.048kB\n"
              "Step 1/5 : ARG PYTHON_VERSION=3.11.7\n"
              "Step 2/5 : FROM python:3.11.7-slim-bookworm\n ---> 4fb123e5d62c\n"
              "Step 3/5 : LABEL x=1\n ---> Using cache\n ---> a97788cf8215\n"
              "Step 4/5 : RUN true\n ---> Running in 24383bff20ed\n"
              "Removing intermediate container 24383bff20ed\n ---> 183037b41fc5\n"
              "Step 5/5 : LABEL y=2\n ---> Running in a388548903ce\n"
              "\x1b[91mwarning\n\x1b[0mRemoving intermediate container a388548903ce\n"
              " ---> 9fbfa842ff09\nSuccessfully built 9fbfa842ff09\n")
    assert built_ids(output) == ["183037b41fc5", "9fbfa842ff09"]


def test_clean_up_removes_only_what_was_recorded_by_id(tmp_path: Path) -> None:
    """Through a stand-in ``docker`` that records its calls and answers ``image inspect``
    with the engine's images, a user's dangling and tagged images among them: the cleanup
    removes the recorded container by id, then the plan of :func:`removals`, each with
    ``--no-prune``; no prune, no other image."""
    bin_dir, calls, state = tmp_path / "bin", tmp_path / "calls", tmp_path / "state"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$FAKE_CALLS"\n'
                                    'if [ "$1 $2" = "image inspect" ]; then cat "$FAKE_STATE"; '
                                    'fi\n')
    (bin_dir / "docker").chmod(0o755)
    state.write_text(f'{S} ["{STAND_IN}"]\n{I1} []\n{F} ["{CPU}","{ROCM_BASE}"]\n{R1} []\n'
                     f'{USER} []\n{NOT_OURS} ["python:3.11.7-slim-bookworm"]\n')
    eng = Engine(env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_CALLS": str(calls),
                      "FAKE_STATE": str(state)}, log=tmp_path / "tier.log", run="0a1b2c3d")
    eng.made = list(RUN)
    Path(eng.container_args()[1]).write_text("c0ffee\n")
    eng.container_args()  # a container whose run never started: no id to remove
    assert eng.clean_up() == []
    assert [p.name for p in eng.cidfiles] == ["0a1b2c3d-1.cid", "0a1b2c3d-2.cid"]
    assert calls.read_text().splitlines() == [
        "container rm --force c0ffee",
        f"image inspect --format {{{{.Id}}}} {{{{json .RepoTags}}}} {S} {I1} {F} {R1}",
        *(f"image rm --no-prune {ref}" for ref in [R1, ROCM_BASE, CPU, I1, STAND_IN])]


def test_an_engine_that_cannot_start_beside_another_says_it_is_busy_in_one_line(
        tmp_path: Path) -> None:
    log = tmp_path / "dockerd-0a1b2c3d.log"
    busy = start_failure("failed to start daemon: pid file found,\n ensure docker is not "
                         "running", log, [812, 4410])
    assert isinstance(busy, EngineBusy) and isinstance(busy, CannotRun)
    assert str(busy) == ("an engine is busy here: dockerd did not start beside the running "
                         "dockerd (pid 812, 4410): failed to start daemon: pid file found, "
                         f"ensure docker is not running; see {log}")
    alone = start_failure("no space left on device", log, [])
    assert type(alone) is CannotRun
    assert str(alone) == f"dockerd did not start: no space left on device; see {log}"


def test_other_dockerds_are_found_by_name_but_the_own(tmp_path: Path) -> None:
    for pid, comm in ((812, "dockerd"), (900, "containerd"), (4410, "dockerd"),
                      (5000, "dockerd")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(f"{comm}\n")
    (tmp_path / "self").mkdir()
    assert other_dockerds(5000, tmp_path) == [812, 4410]


def test_the_stand_in_goes_under_a_tag_of_the_runs_own() -> None:
    """The official tag, which a user's image may carry, is never moved."""
    assert python_version() == "3.11.7"
    assert from_tag(CPU_DOCKERFILE, {"PYTHON_VERSION": "3.11.7-lorasent-stand-in-0a1b2c3d"}) \
        == STAND_IN


def test_a_kept_stand_in_another_tier_imports_is_not_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Held by :func:`kept_stand_in` (a tier importing it), a kept tarball of another key
    stays when a tier makes its own; one nobody holds goes; the maker's own key stays."""
    import container_tier

    made: list[Path] = []

    def make(work: Path, tarball: Path) -> None:
        tarball.parent.mkdir(parents=True, exist_ok=True)
        tarball.write_bytes(b"rootfs")
        made.append(tarball)

    monkeypatch.setattr(container_tier, "STAND_IN_CACHE", tmp_path / "cache")
    monkeypatch.setattr(container_tier, "stand_in_key", lambda: "old")
    monkeypatch.setattr(container_tier, "stand_in_rootfs", make)
    idle = tmp_path / "cache" / "stand-in-idle.tar"
    with kept_stand_in(tmp_path) as (tarball, fresh):
        assert (tarball, fresh) == (tmp_path / "cache" / "stand-in-old.tar", True)
        idle.write_bytes(b"rootfs")
        new = tmp_path / "cache" / "stand-in-new.tar"
        new.write_bytes(b"rootfs")
        assert remove_other_stand_ins(new) == [idle]
        assert new.is_file()
        assert tarball.is_file()
    assert remove_other_stand_ins(new) == [tarball]
    with kept_stand_in(tmp_path) as (again, fresh):
        assert (again, fresh) == (tarball, True)
    with kept_stand_in(tmp_path) as (again, fresh):
        assert (again, fresh) == (tarball, False)
    assert made == [tarball, tarball]


def test_kept_stand_in_holds_a_shared_lock_while_importing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import container_tier

    monkeypatch.setattr(container_tier, "STAND_IN_CACHE", tmp_path)
    monkeypatch.setattr(container_tier, "stand_in_key", lambda: "k")
    (tmp_path / "stand-in-k.tar").write_bytes(b"rootfs")
    with kept_stand_in(tmp_path) as (tarball, _):
        other = os.open(tarball, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)



@pytest.mark.parametrize("ci", [None, "true"])
def test_a_tier_that_cannot_run_skips_in_one_line_and_fails_under_ci(
        ci: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No engine (or no sshd for the cluster tier): a skip in one line; under CI=true a
    failure, without a traceback."""
    from container_tier import CannotRun, cannot_run

    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    outcome = pytest.skip.Exception if ci is None else pytest.fail.Exception
    with pytest.raises(outcome) as stopped:
        cannot_run(CannotRun("no Docker engine answers and only root can start one here"),
                   "container and cluster tiers")
    assert stopped.value.msg == (
        f"the container and cluster tiers cannot run{' under CI=true' if ci else ''}: no Docker "
        "engine answers and only root can start one here")
    if ci:
        assert stopped.value.pytrace is False  # one line, no traceback


def test_the_cluster_tier_without_sshd_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import remote_servers

    monkeypatch.setattr("remote_servers.shutil.which", lambda *args, **kwargs: None)
    with pytest.raises(remote_servers.NoServer) as missing:
        with remote_servers.serve_sshd(tmp_path):
            pass
    assert str(missing.value) == "no sshd: run `make sshd` (Debian's openssh-server)"
    assert list(tmp_path.iterdir()) == []  # nothing made
