"""The cluster tier (``make test-cluster``): two containers of the CPU image are two
machines, each with its own filesystem, DVC cache and Ray node, sharing nothing but the
host's network, on which every address is a loopback one.

What the two machines reach, as a team reaches them (tests/remote_servers.py, on this
host): the bare git repo over SSH (Debian's sshd, key authentication), a dvc-s3 remote
(moto's S3 server, signatures checked against an IAM user's keys) and a dvc-ssh remote.
Each machine has its own key and credentials; no folder is shared.

- A sweep whose commit the git remote lacks is refused in one line before Ray starts.
- ``lorasent sweep --address <head> --git-remote origin`` from machine A, Ray's head,
  puts one run on each machine (the progress lines and each run's log name it); each
  run pushes its experiment to the remotes and the sweep pulls both back; ``make
  exp-show`` and ``lorasent compare`` read them on A; each run's ``metrics/eval.json``
  and adapter are the bytes of the same ``dvc exp run`` made on one machine (this
  host's venv: the same CPU and torch build, so the same bytes).
- Machine B lost (its container killed) while its run trains: that run fails naming
  the machine, the other lands, neither remote holds a trace of the lost one, the sweep
  exits 1 in one line, and the same command again makes the missing run only.
- Two machines train the tiny train stage together (``configs/accelerate/
  two-nodes-cpu.yaml``, docs/scale-out.md's steps), machine B taking its inputs from the
  SSH remote: the adapter is the one-machine two-process run's bytes.

The tier runs after the container tier in one pytest process (``make test``), on its
engine and image (conftest's ``cpu_image``). Without an engine, sshd or image it skips
in one line, and fails under ``CI=true``. It removes every container it started (by
id), its servers (by pid) and their folders (keys, remotes), and nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from container_tier import Built, Engine, cannot_run, say
from remote_servers import S3, NoServer, Sshd, free_port, serve_s3, serve_sshd, ssh_command
from tiny_repo import GIT, clone_run, run, set_params

pytestmark = pytest.mark.cluster

TIER = "cluster tier"
# The machines' addresses: each Ray node has its own (Ray takes 127.0.0.1 for the
# machine's outward address, so neither is that one); every port is on the loopback.
HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
# Both values train (the tiny run's r is 8: that run would train nothing), one run a
# machine: each machine offers Ray 1 CPU and each run asks for 1.
GRID = ["-S", "train.lora.r=4,16", "--seeds", "1", "--cpus-per-run", "1"]
KEY = "/root/.ssh/id_ed25519"  # each machine's own copy of the key sshd takes
ADAPTER = "models/adapter/adapter_model.safetensors"
TWO_NODES = "configs/accelerate/two-nodes-cpu.yaml"


@dataclass
class Node:
    """A machine: a container of the CPU image on the host's network, its checkout
    (a clone over SSH) in /work."""

    engine: Engine
    name: str  # its hostname
    ip: str  # its Ray node's address
    cid: str
    log: Path
    ports: dict[str, int] = field(default_factory=dict)

    def exec(self, script: str, *, timeout_s: float = 600,
             check: bool = True) -> subprocess.CompletedProcess[str]:
        """``bash -c script`` in /work on this machine, its output appended to the log."""
        done = subprocess.run(["docker", "exec", "-w", "/work", self.cid, "bash", "-c", script],
                              env=self.engine.env, capture_output=True, text=True,
                              timeout=timeout_s)
        with self.log.open("a", encoding="utf-8") as out:
            out.write(f"\n[{self.name}]$ {script}\n{done.stdout}{done.stderr}"
                      f"[exit {done.returncode}]\n")
        assert not check or done.returncode == 0, \
            f"{self.name}: `{script}` exited {done.returncode}: {done.stderr[-2000:]}"
        return done

    def popen(self, script: str, out: Path) -> subprocess.Popen[bytes]:
        """``bash -c script`` in /work on this machine, started: its stdout to ``out``,
        its stderr to ``out`` with its suffix replaced by ``.err``."""
        with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
            return subprocess.Popen(["docker", "exec", "-w", "/work", self.cid, "bash", "-c",
                                     script], env=self.engine.env, stdout=stdout,
                                    stderr=stderr)

    def read(self, path: str) -> str:
        return self.exec(f"cat {path}").stdout


@dataclass
class Cluster:
    """Machines A (Ray's head) and B, the servers, the bare git repo and the DVC remotes'
    places on this host, and ``work``: the host's clone that pushed the tiny run."""

    a: Node
    b: Node
    sshd: Sshd
    s3: S3
    folder: Path
    work: Path
    address: str  # Ray's head: 127.0.0.2:<port>

    @property
    def bare(self) -> Path:
        return self.folder / "origin.git"


def free_ports(count: int, low: int = 20000, high: int = 32000) -> int:
    """The first of ``count`` consecutive TCP ports of 127.0.0.1 below Linux's ephemeral
    range that nothing listens on now (Ray's worker ports: a range per node)."""
    for _ in range(100):
        first = low + secrets.randbelow(high - low - count)
        try:
            with contextlib.ExitStack() as held:
                for port in range(first, first + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    raise AssertionError(f"no {count} free consecutive ports in [{low}, {high})")


def ray_ports() -> dict[str, int]:
    """A port for each of a Ray node's listeners that `ray start` takes, none shared
    with the other node on the same network (Ray's defaults would collide)."""
    ports = {name: free_port() for name in (
        "node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port")}
    first = free_ports(40)
    return {**ports, "min-worker-port": first, "max-worker-port": first + 39}


def share(tiny_run: Path, folder: Path, sshd: Sshd, s3: S3) -> Path:
    """A clone of the tiny run on this host with two DVC remotes committed: ``store`` on
    S3 (the default) and ``ssh-store`` over SSH (this host's keys and credentials in
    .dvc/config.local), both pushed; HEAD pushed to the bare repo over SSH."""
    work = clone_run(tiny_run, folder / "work")
    run(work, "dvc", "remote", "add", "--default", "store", f"s3://{s3.bucket}/dvc-store")
    run(work, "dvc", "remote", "modify", "store", "endpointurl", s3.endpoint)
    run(work, "dvc", "remote", "add", "ssh-store", sshd.url(folder / "dvc-store"))
    for remote, key, value in (("store", "access_key_id", s3.key_id),
                               ("store", "secret_access_key", s3.secret),
                               ("ssh-store", "keyfile", str(sshd.key))):
        run(work, "dvc", "remote", "modify", "--local", remote, key, value)
    run(work, "git", "add", ".dvc/config")
    run(work, *GIT, "commit", "-q", "-m", "the cluster's remotes")
    run(work, "dvc", "push", "-q")
    run(work, "dvc", "push", "-q", "-r", "ssh-store")
    run(folder, "git", "init", "-q", "--bare", str(folder / "origin.git"))
    run(work, "git", "remote", "set-url", "origin", sshd.url(folder / "origin.git"))
    run(work, "git", "push", "-q", "origin", "HEAD:refs/heads/main", extra_env=sshd.git_env)
    run(work, "git", "fetch", "-q", "origin", extra_env=sshd.git_env)
    return work


def start_node(cpu_image: Built, name: str, ip: str, folder: Path, sshd: Sshd,
               s3: S3) -> Node:
    """A container of the image on the host's network (``sleep infinity`` under
    ``--init``), its own copy of the key and a git config in /root, the S3 credentials
    in its environment (each machine's own: the runs Ray starts there inherit them),
    and the commit cloned over SSH into /work."""
    eng = cpu_image.engine
    home = folder / f"home-{name}"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd.key, home / ".ssh" / "id_ed25519")
    ssh = ssh_command(KEY, "/root/.ssh/known_hosts")
    (home / ".gitconfig").write_text(f"[user]\n\tname = {name}\n\temail = {name}@example.com\n"
                                     f"[core]\n\tsshCommand = {ssh}\n")
    eng.docker("create", *eng.container_args(), "--init", "--network", "host", "--hostname",
               name, "--shm-size", "256m", "-e", "HOME=/root", "-e", f"GIT_SSH_COMMAND={ssh}",
               "-e", f"AWS_ACCESS_KEY_ID={s3.key_id}", "-e",
               f"AWS_SECRET_ACCESS_KEY={s3.secret}", cpu_image.tag, "sleep", "infinity",
               what=f"docker create of machine {name}")
    cid = eng.cidfiles[-1].read_text().strip()
    eng.docker("cp", f"{home}/.", f"{cid}:/root", what=f"the key into machine {name}")
    eng.docker("start", cid, what=f"docker start of machine {name}")
    node = Node(eng, name, ip, cid, folder / "machines.log")
    node.exec(f"chmod 600 {KEY} && git clone -q -b main {sshd.url(folder / 'origin.git')} /work && "
              f"dvc remote modify --local ssh-store keyfile {KEY}")
    return node


def start_ray(node: Node, head: str | None) -> None:
    """``ray start`` on ``node``: the head (``head`` None, its GCS port in
    ``node.ports["port"]``) or a worker joining ``head``; 1 CPU, its own ports and its
    own address."""
    node.ports = ray_ports()
    ports = " ".join(f"--{k} {v}" for k, v in node.ports.items())
    if head is None:
        node.ports["port"] = free_port()
        role = f"--head --port {node.ports['port']} --include-dashboard false"
    else:
        role = f"--address {head}"
    node.exec(f"ray start {role} --node-ip-address {node.ip} --num-cpus 1 "
              f"--object-store-memory 80000000 --disable-usage-stats {ports}")


def alive_nodes(node: Node, address: str) -> list[str]:
    """The addresses of the Ray cluster's live nodes, asked from ``node``."""
    done = node.exec(f"python3 -c \"import ray; ray.init(address='{address}', "
                     "log_to_driver=False, logging_level='ERROR'); print(' '.join(sorted("
                     "n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))\"")
    return done.stdout.split()


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, cpu_image: Built, tiny_run: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The servers, the tiny run shared through them, machines A and B with Ray's head on
    A; at the end the containers are removed by id (the engine keeps the image: the
    session's), the servers stopped, their folders removed, and checked so."""
    folder = tmp_path_factory.mktemp("cluster")
    eng = cpu_image.engine
    first = len(eng.cidfiles)
    started = time.monotonic()
    try:
        with contextlib.ExitStack() as servers:
            (folder / "sshd").mkdir()
            (folder / "moto").mkdir()
            try:
                sshd = servers.enter_context(serve_sshd(folder / "sshd"))
            except NoServer as err:
                cannot_run(err, TIER)
            s3 = servers.enter_context(serve_s3(folder / "moto"))
            work = share(tiny_run, folder, sshd, s3)
            a = start_node(cpu_image, "node-a", HEAD_IP, folder, sshd, s3)
            b = start_node(cpu_image, "node-b", WORKER_IP, folder, sshd, s3)
            start_ray(a, None)
            address = f"{HEAD_IP}:{a.ports['port']}"
            start_ray(b, address)
            deadline = time.monotonic() + 60  # the worker's raylet registers with the head
            while (alive := alive_nodes(a, address)) != [HEAD_IP, WORKER_IP]:
                assert time.monotonic() < deadline, f"Ray's live nodes: {alive}"
                time.sleep(1)
            say(request, f"two machines up, Ray on both, the tiny run on the remotes: "
                         f"{time.monotonic() - started:.0f} s; log {folder / 'machines.log'}",
                TIER)
            yield Cluster(a, b, sshd, s3, folder, work, address)
    finally:
        cids = [f.read_text().strip() for f in eng.cidfiles[first:] if f.is_file()]
        for cid in cids:
            subprocess.run(["docker", "rm", "--force", cid], env=eng.env, capture_output=True)
        left = [cid for cid in cids if eng.docker(
            "ps", "--all", "--quiet", "--no-trunc", "--filter", f"id={cid}").strip()]
        shutil.rmtree(folder)
        assert left == [], f"containers left: {left}"
        assert eng.image_id(cpu_image.tag) == cpu_image.image_id  # the session's, kept


# ------------------------------------------------------------------ helpers

def sweep_line(name: str, address: str) -> str:
    return (f"lorasent sweep --address {address} --git-remote origin {' '.join(GRID)} "
            f"--name {name}")


def started_on(stderr: str) -> dict[str, str]:
    """``{run: node address}`` from the sweep's progress lines."""
    return dict(re.findall(r"^sweep: (\S+) running on (\S+) \(\d+ s\)$", stderr, flags=re.M))


def logs_folder(stderr: str) -> str:
    found = re.search(r"; logs in (\S+)$", stderr, flags=re.M)
    assert found, stderr
    return found.group(1)


def experiment_file(node: Node, name: str, path: str) -> str:
    """``path`` as experiment ``name`` committed it, read on ``node``."""
    return node.exec(f"git show \"$(git for-each-ref --format='%(objectname)' "
                     f"'refs/exps/*/*/{name}')\":{path}").stdout


def adapter_md5(lock_text: str) -> str:
    """The train stage's ``models/adapter`` hash in a dvc.lock: the adapter's bytes."""
    outs = yaml.safe_load(lock_text)["stages"]["train"]["outs"]
    return next(out["md5"] for out in outs if out["path"] == "models/adapter")


def exp_refs(bare: Path) -> list[str]:
    """The experiments the bare git repo holds, by name."""
    refs = run(bare, "git", "for-each-ref", "--format=%(refname)", "refs/exps")
    return sorted(ref.rsplit("/", 1)[-1] for ref in refs.split())


def damaged_objects(s3: S3) -> list[str]:
    """The S3 remote's objects whose bytes do not hash to their name (DVC's content
    addressing: files/md5/<2>/<30>): a partial upload."""
    client = s3.client()
    damaged = []
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket,
                                                             Prefix="dvc-store/")
    for page in pages:
        for item in page.get("Contents", []):
            parts = item["Key"].split("/")
            body = client.get_object(Bucket=s3.bucket, Key=item["Key"])["Body"].read()
            if parts[-3] != "md5" or hashlib.md5(body).hexdigest() != \
                    (parts[-2] + parts[-1]).removesuffix(".dir"):
                damaged.append(item["Key"])
    return damaged


# ------------------------------------------------------------------ the tests

def test_a_sweep_of_a_commit_the_git_remote_lacks_is_refused_before_ray(
        cluster: Cluster) -> None:
    """A commit made on machine A and not pushed: the sweep asks the remote (``git
    ls-remote``, ``git fetch``), names the commit and what to do, exits 1, and starts no
    run."""
    a = cluster.a
    a.exec("git commit -q --allow-empty -m 'not pushed'")
    try:
        commit = a.exec("git rev-parse --short=7 HEAD").stdout.strip()
        done = a.exec(sweep_line("unpushed", cluster.address), check=False)
        assert done.returncode == 1
        assert done.stderr.splitlines() == [
            f"lorasent sweep: error: commit {commit} is not on origin "
            f"({cluster.sshd.url(cluster.bare)}), and the runs clone it from there: git push "
            "origin HEAD"]
        assert a.exec("ls /tmp/lorasent-sweep 2>/dev/null || true").stdout == ""
    finally:
        a.exec("git reset -q --hard HEAD~1")


def test_a_sweep_runs_one_run_on_each_machine_and_brings_both_back(
        request: pytest.FixtureRequest, cluster: Cluster) -> None:
    """Two runs, one on each machine (progress lines, each log's first line), both on the
    remotes and pulled back to A, read there, and the bytes of one machine's runs."""
    a, b = cluster.a, cluster.b
    started = time.monotonic()
    done = a.exec(sweep_line("cluster", cluster.address))
    seconds = time.monotonic() - started
    runs = started_on(done.stderr)
    assert sorted(runs) == ["cluster-r16-seed42", "cluster-r4-seed42"], done.stderr
    assert sorted(runs.values()) == [HEAD_IP, WORKER_IP], done.stderr
    logs = logs_folder(done.stderr)
    commit = a.exec("git rev-parse --short=7 HEAD").stdout.strip()
    for name, ip in runs.items():
        node = a if ip == HEAD_IP else b
        first = node.read(f"{logs}/{name}.log").splitlines()[0]
        assert first.startswith(f"# {name} of commit {commit} on {ip} (host {node.name}, "
                                "Ray node "), first
    # both pulled back to A: listed, compared, read
    shown = a.exec("make exp-show").stdout
    assert "cluster-r4-seed42" in shown and "cluster-r16-seed42" in shown, shown
    compared = a.exec("lorasent compare cluster-r4-seed42 cluster-r16-seed42")
    assert "cluster-r4-seed42" in compared.stdout, compared.stdout
    assert sorted(exp_refs(cluster.bare)) == sorted(runs)
    assert damaged_objects(cluster.s3) == []
    # one machine, the same runs: this host's venv, one torch thread as Ray gives a
    # 1-CPU task
    for r in (4, 16):
        name = f"cluster-r{r}-seed42"
        run(cluster.work, "dvc", "exp", "run", "--temp", "-n", f"one-r{r}", "-S",
            f"train.lora.r={r}", "-S", "base.seed=42", extra_env={"OMP_NUM_THREADS": "1"})
        ref = run(cluster.work, "git", "for-each-ref", "--format=%(objectname)",
                  f"refs/exps/*/*/one-r{r}").strip()
        here = {path: run(cluster.work, "git", "show", f"{ref}:{path}")
                for path in ("metrics/eval.json", "dvc.lock")}
        assert experiment_file(a, name, "metrics/eval.json") == here["metrics/eval.json"]
        assert adapter_md5(experiment_file(a, name, "dvc.lock")) == \
            adapter_md5(here["dvc.lock"])
    say(request, f"the sweep across two machines: {seconds:.0f} s "
                 f"({', '.join(f'{n} on {ip}' for n, ip in sorted(runs.items()))})", TIER)


def test_a_machine_lost_mid_sweep_fails_its_run_alone_and_a_rerun_makes_it(
        request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path) -> None:
    """Machine B's container killed once its run reaches the train stage (Ray's node
    lost, not a failed step): that run fails naming B, the other lands, neither remote
    holds a trace of the lost run, the sweep exits 1; the same command again makes only
    the lost run, on A."""
    a, b = cluster.a, cluster.b
    out = tmp_path / "sweep.out"
    started = time.monotonic()
    sweeping = a.popen(sweep_line("lost", cluster.address), out)
    try:
        deadline = time.monotonic() + 300
        while True:  # machine B's run in its train stage
            found = b.exec("grep -l \"Running stage 'train'\" /tmp/lorasent-sweep/lost-*/logs/"
                           "*.log 2>/dev/null || true").stdout.split()
            if found:
                break
            assert sweeping.poll() is None, out.with_suffix(".err").read_text()
            assert time.monotonic() < deadline, out.with_suffix(".err").read_text()
            time.sleep(0.5)
        lost = Path(found[0]).stem
        cluster.a.engine.docker("kill", b.cid, what="docker kill of machine B")
        killed = time.monotonic()
        sweeping.wait(timeout=300)
        after_kill = time.monotonic() - killed
    finally:
        if sweeping.poll() is None:
            sweeping.kill()
    stderr = out.with_suffix(".err").read_text()
    assert sweeping.returncode == 1, stderr
    other = next(name for name in ("lost-r4-seed42", "lost-r16-seed42") if name != lost)
    assert re.search(rf"^sweep: {lost} failed \(the task died on {WORKER_IP}: .+\): log ",
                     stderr, flags=re.M), stderr
    assert re.search(rf"^sweep: {other} succeeded in \d+ s", stderr, flags=re.M), stderr
    assert stderr.splitlines()[-1] == (
        f"lorasent sweep: error: 1 of 2 runs failed: {lost}; the same command again "
        "makes only the runs that did not land")
    # nothing of the lost run on either remote: no experiment, no partial object
    assert exp_refs(cluster.bare) == sorted(["cluster-r16-seed42", "cluster-r4-seed42", other])
    assert damaged_objects(cluster.s3) == []
    # the same command again: the landed run reused, the lost one made on A
    again = a.exec(sweep_line("lost", cluster.address))
    assert f"sweep: 1 of 2 runs landed before with these params and are reused ({other}); " \
           "1 to run" in again.stderr, again.stderr
    assert started_on(again.stderr) == {lost: HEAD_IP}, again.stderr
    assert lost in exp_refs(cluster.bare)
    say(request, f"machine B lost mid-sweep: the sweep ended {after_kill:.0f} s after the "
                 f"kill ({time.monotonic() - started:.0f} s with the rerun)", TIER)



def test_two_machines_train_together_as_two_processes_of_one(
        request: pytest.FixtureRequest, cluster: Cluster, tiny_two_processes: Path) -> None:
    """docs/scale-out.md's "Several machines" steps on the two containers: a commit of
    ``two-nodes-cpu.yaml`` (machine A's address, a free port) with
    ``train.accelerate_config`` pushed; A runs ``make run``, B, with ``data/split`` and
    ``models/base`` from the SSH remote, runs ``LORASENT_ACCELERATE_ARGS=--machine_rank=1
    lorasent train``; one torch thread each, as torchrun gives 2 processes on one
    machine. A's adapter is the one-machine two-process run's bytes; B writes none."""
    a, b = cluster.a, cluster.b
    a.engine.docker("start", b.cid, what="docker start of machine B")  # lost above
    work = cluster.work
    run(work, "git", "checkout", "-q", "-b", "two-nodes")
    text = (work / TWO_NODES).read_text(encoding="utf-8")
    text = re.sub(r"(?m)^main_process_ip: \S+", f"main_process_ip: {HEAD_IP}", text)
    text = re.sub(r"(?m)^main_process_port: \d+", f"main_process_port: {free_port()}", text)
    (work / TWO_NODES).write_text(text, encoding="utf-8")
    set_params(work, {"base": {"num_processes": 1}, "train": {"accelerate_config": TWO_NODES}})
    run(work, "git", "add", "-A")
    run(work, *GIT, "commit", "-q", "-m", "train on two machines")
    run(work, "git", "push", "-q", "origin", "HEAD:refs/heads/two-nodes",
        extra_env=cluster.sshd.git_env)
    for node in (a, b):
        node.exec("git fetch -q origin && git checkout -q -b two-nodes origin/two-nodes")
    b.exec("dvc pull -q -r ssh-store data/split models/base")
    started = time.monotonic()
    main = a.popen("OMP_NUM_THREADS=1 make run", cluster.folder / "a-run.out")
    second = b.popen("OMP_NUM_THREADS=1 LORASENT_ACCELERATE_ARGS=--machine_rank=1 lorasent "
                     "train", cluster.folder / "b-train.out")
    try:
        for proc in (second, main):
            proc.wait(timeout=600)
    finally:
        for proc in (main, second):
            if proc.poll() is None:
                proc.kill()
    seconds = time.monotonic() - started
    said = {name: (cluster.folder / name).with_suffix(".err").read_text()
            for name in ("a-run.out", "b-train.out")}
    assert (main.returncode, second.returncode) == (0, 0), said
    record = json.loads(a.read("metrics/provenance/train.json"))
    assert (record["status"], record["processes"], record["steps"]) == ("ok", 2, 3)
    assert record["effective_batch_size"] == 4 * 1 * 2  # per device x accumulation x 2
    digest = a.exec(f"sha256sum {ADAPTER}").stdout.split()[0]
    assert digest == hashlib.sha256((tiny_two_processes / ADAPTER).read_bytes()).hexdigest()
    assert b.exec("ls models/adapter 2>/dev/null || true").stdout == ""
    say(request, f"two machines trained together: {seconds:.0f} s (make run on A, lorasent "
                 "train on B)", TIER)
