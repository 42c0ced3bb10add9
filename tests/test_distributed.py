"""Several processes through `accelerate launch`: the command line, and the tiny
pipeline in 2 CPU processes (gloo) against the same adapter evaluated in one."""

import csv
import io
import json
import re
import socket
import sys
import time

import pytest

from lorasent.errors import LorasentError
from lorasent.launch import launch_command, needs_launch, wait_for_main_machine
from lorasent.params import parse_params
from tiny_repo import clone_run, kill_after_checkpoint, run, set_params


def test_one_process_runs_in_place(params):
    assert not needs_launch(params.base.num_processes, params.train.accelerate_config)


def test_launch_command_for_two_processes(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("LORASENT_ACCELERATE_ARGS", "--machine_rank 1")
    assert needs_launch(2)
    cmd = launch_command("train", "params.yaml", 2)
    assert cmd[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    assert cmd[3:5] == ["--multi_gpu", "--num_machines"]
    assert cmd[cmd.index("--num_processes") + 1] == "2"
    assert int(cmd[cmd.index("--main_process_port") + 1]) > 0
    assert cmd[-7:] == ["--machine_rank", "1", "-m", "lorasent.cli", "train", "--params",
                        "params.yaml"]
    monkeypatch.setenv("WORLD_SIZE", "2")  # inside the launched processes: no relaunch
    assert not needs_launch(2)


def test_launch_command_with_a_config_file(params_raw, tmp_path, monkeypatch):
    monkeypatch.delenv("LORASENT_ACCELERATE_ARGS", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    config = tmp_path / "fsdp.yaml"
    params_raw["train"]["accelerate_config"] = str(config)
    params = parse_params(params_raw)
    assert needs_launch(params.base.num_processes, params.train.accelerate_config)
    with pytest.raises(LorasentError, match=f"train.accelerate_config: {config} is not a file"):
        launch_command("train", "params.yaml", 1, str(config))
    config.write_text("distributed_type: FSDP\n", encoding="utf-8")
    cmd = launch_command("train", "params.yaml", 1, str(config))
    assert cmd[3:5] == ["--config_file", str(config)] and "--num_processes" not in cmd


def test_a_second_machine_that_cannot_reach_the_main_one_fails_in_one_line(monkeypatch):
    from conftest import REPO

    config = str(REPO / "configs/accelerate/two-nodes-cpu.yaml")
    monkeypatch.delenv("LORASENT_ACCELERATE_ARGS", raising=False)
    cmd = launch_command("train", "params.yaml", 1, config)
    assert cmd[cmd.index("--rdzv_conf") + 1] == "timeout=60"  # torchrun's rendezvous timeout
    with socket.socket() as listening:  # a port of this host; nobody listens once it closes
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        monkeypatch.setenv("LORASENT_ACCELERATE_ARGS", "--machine_rank=1 --rdzv_conf=timeout=1 "
                           f"--main_process_ip=127.0.0.1 --main_process_port={port}")
        wait_for_main_machine(launch_command("train", "params.yaml", 1, config))  # at once
    second = launch_command("train", "params.yaml", 1, config)
    started = time.monotonic()
    with pytest.raises(LorasentError) as err:
        wait_for_main_machine(second)
    assert time.monotonic() - started < 10
    assert str(err.value) == (
        f"machine rank 1: nobody listens at the main machine's 127.0.0.1:{port} after 1 s; "
        "start the train stage on the main machine (rank 0) first, and check "
        "main_process_ip, main_process_port and that the port is open between the machines")
    monkeypatch.setenv("LORASENT_ACCELERATE_ARGS", "--rdzv_conf=timeout=1 "
                       f"--main_process_ip=127.0.0.1 --main_process_port={port}")
    wait_for_main_machine(launch_command("train", "params.yaml", 1, config))  # the main one


def _read(root, name):
    return json.loads((root / name).read_text(encoding="utf-8"))


def _predictions(root, name):
    return list(csv.DictReader(io.StringIO((root / name).read_text(encoding="utf-8"))))


@pytest.mark.slow
def test_two_gloo_processes_train_and_score_as_one(tiny_two_processes, tmp_path):
    # fetch and split are the tiny run's, train ran in 2 processes (the session's
    # tiny_two_processes); baseline and evaluate rerun in 2 here
    root = clone_run(tiny_two_processes, tmp_path / "repo")
    for stage in ("baseline", "evaluate"):  # processes change no dep: forced
        run(root, "dvc", "repro", "--force", "--single-item", stage)
    for stage in ("baseline", "train", "evaluate"):
        record = _read(root, f"metrics/provenance/{stage}.json")
        assert (record["status"], record["processes"]) == ("ok", 2), stage
    train = _read(root, "metrics/provenance/train.json")
    assert train["steps"] == 3 and train["effective_batch_size"] == 4 * 1 * 2
    loss = (root / "metrics/train/plots/metrics/loss.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in loss] == ["step", "1", "2", "3"]
    assert sorted(p.name for p in (root / "models/adapter").iterdir()) == [
        "README.md", "adapter_config.json", "adapter_model.safetensors", "calibration.json",
        "lorasent.json"]
    adapter = (root / "models/adapter/adapter_model.safetensors").read_bytes()

    # the same adapter, scored again in one process
    two = {name: _read(root, name) for name in ("metrics/eval.json", "metrics/baseline.json")}
    two_predictions = {name: _predictions(root, name) for name in
                       ("metrics/predictions.csv", "metrics/baseline_predictions.csv",
                        "metrics/baseline_calibrated_predictions.csv")}
    set_params(root, {"base": {"num_processes": 1}})
    for stage in ("baseline", "evaluate"):
        run(root, "lorasent", stage)
        assert _read(root, f"metrics/provenance/{stage}.json")["processes"] == 1
    one = {name: _read(root, name) for name in two}
    # the content-free inputs' mean probabilities (the calibrated zero-shot's prior): the
    # same fp32 sums as the predictions below, unrounded (seen 3e-8 apart on an AMD EPYC)
    for side in (one, two):
        prior = side["metrics/baseline.json"]["zero_shot_calibrated"].pop("content_free_prior")
        side["prior"] = pytest.approx(prior, abs=1e-6) if side is two else prior
    assert one == two
    for name, rows in two_predictions.items():
        one = _predictions(root, name)
        assert [r["predicted"] for r in one] == [r["predicted"] for r in rows]
        for a, b in zip(one, rows, strict=True):
            for key in a:
                if key.startswith("p_"):
                    # fp32 sums in another thread layout (1 thread a process against 2 in
                    # one): seen up to 3e-6 apart, each rounded to 6 decimals in the file
                    assert float(a[key]) == pytest.approx(float(b[key]), abs=1e-5)

    # killed after its second checkpoint, run again: it resumes in 2 processes and ends
    # with the adapter of the uninterrupted run above (the same params)
    set_params(root, {"base": {"num_processes": 2}})
    kill_after_checkpoint(root, 2, "dvc", "repro", "--force", "--single-item", "train")
    out = run(root, "dvc", "repro", "--force", "--single-item", "train", logs=True)
    assert re.search(r"resuming from step [23] of 3", out), out
    train = _read(root, "metrics/provenance/train.json")
    assert (train["resumed_from_step"], train["processes"]) in ((2, 2), (3, 2))
    assert not (root / "checkpoints").exists()
    assert (root / "models/adapter/adapter_model.safetensors").read_bytes() == adapter


@pytest.mark.parametrize("name, kind, machines", [("multi-gpu", "MULTI_GPU", 1),
                                                  ("fsdp", "FSDP", 1),
                                                  ("two-nodes", "MULTI_GPU", 2),
                                                  ("two-nodes-cpu", "MULTI_GPU", 2)])
def test_accelerate_configs_load(name, kind, machines):
    from accelerate.commands.config.config_args import load_config_from_file

    from conftest import REPO

    config = load_config_from_file(str(REPO / "configs" / "accelerate" / f"{name}.yaml"))
    assert (config.distributed_type.name, config.num_machines) == (kind, machines)
    assert config.mixed_precision == "no"  # precision is base.precision's
