"""Faults: a NaN loss, out of memory, a failed stage's record, killed runs' leftovers,
remote code. Each keeps the last good outputs and says what to do."""

import json
import shutil
import subprocess
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from conftest import REPO, minilm_folder, train_in
from lorasent import modeling
from lorasent.atomic import atomic_dir, write_json
from lorasent.cli import main
from lorasent.errors import LorasentError
from lorasent.scoring import TextEncoder
from lorasent.training.trainer import NonFiniteLossError


@pytest.mark.integration
def test_nan_loss_stops_training_at_its_step(tmp_path, monkeypatch, minilm_params, minilm_dir,
                                             split_dir):
    real, calls = TextEncoder.loss, []

    def nan_from_the_second_batch(model, batch):
        calls.append(1)
        loss = real(model, batch)
        return loss * float("nan") if len(calls) > 1 else loss

    monkeypatch.setattr(TextEncoder, "loss", staticmethod(nan_from_the_second_batch))
    with pytest.raises(NonFiniteLossError, match=r"the loss is nan at optimiser step 2 "
                                                 r"\(learning rate .*, weights in torch.float32\)"
                                                 r".*fp16 with a Gemma model"):
        train_in(tmp_path, minilm_params(), minilm_dir, split_dir)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no adapter, no history


@pytest.mark.integration
def test_out_of_memory_names_the_batch_size_and_the_way_out(tmp_path, monkeypatch,
                                                            minilm_params, minilm_dir,
                                                            split_dir):
    from transformers import Trainer

    def oom(self, *args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(Trainer, "train", oom)
    with pytest.raises(LorasentError) as err:
        train_in(tmp_path, minilm_params(per_device_train_batch_size=4), minilm_dir, split_dir)
    assert str(err.value) == (
        "train: out of cpu memory with train.per_device_train_batch_size 4. Set "
        "per_device_train_batch_size: 2 and gradient_accumulation_steps: 2 to keep the "
        "effective batch of 4 examples, or train.auto_find_batch_size: true to let the "
        "Trainer halve the batch until it fits (CUDA out of memory. Tried to allocate "
        "2.00 GiB)")
    assert not (tmp_path / "adapter").exists()


def test_failed_stage_records_its_failure_and_keeps_the_metrics(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    write_json(tmp_path / "metrics" / "eval.json", {"accuracy": 0.7})
    result = CliRunner().invoke(main, ["train"])
    assert result.exit_code == 1
    assert "data/split/train.jsonl: not found; run the earlier stages first" in result.output
    # the failure goes to the git-ignored machine record; tracked files stay as they were
    assert not (tmp_path / "metrics/provenance/train.json").exists()
    record = json.loads((tmp_path / "metrics/provenance/machine/train.json").read_text())
    assert record["status"] == "failed" and record["stage"] == "train"
    assert record["error"] == ("FileNotFoundError: [Errno 2] No such file or directory: "
                               "'data/split/train.jsonl'")
    assert record["params"]["train"]["lora"]["r"] == 8 and record["wall_time_s"] >= 0
    assert json.loads((tmp_path / "metrics/eval.json").read_text()) == {"accuracy": 0.7}


def test_bad_params_fail_before_any_record_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    (tmp_path / "params.yaml").write_text(text.replace("    r: 8", "    rank: 8"))
    result = CliRunner().invoke(main, ["train"])
    assert result.exit_code == 1 and "train.lora.rank: unknown key" in result.output
    assert not (tmp_path / "metrics").exists()


def test_temporaries_of_a_killed_run_are_removed_by_the_next(tmp_path):
    (tmp_path / ".eval.json.k1ll3d.tmp").write_text("half written")
    (tmp_path / ".adapter.k1ll3d.tmp").mkdir()
    (tmp_path / ".other.json.k1ll3d.tmp").write_text("another file's")
    write_json(tmp_path / "eval.json", {"accuracy": 0.5})
    with atomic_dir(tmp_path / "adapter") as folder:
        (folder / "weights").write_text("w")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.json.k1ll3d.tmp", "adapter",
                                                          "eval.json"]


class _Stop(Exception):
    pass


@pytest.mark.parametrize("trust", [False, True])
def test_model_code_runs_only_when_the_param_says_so(monkeypatch, params_raw, trust):
    from transformers import AutoTokenizer

    from lorasent.params import parse_params

    seen = {}

    class Tokenizer:
        @staticmethod
        def from_pretrained(path, **kwargs):
            seen["tokenizer"] = kwargs["trust_remote_code"]
            return AutoTokenizer.from_pretrained(minilm_folder())

    class Model:
        @staticmethod
        def from_pretrained(path, **kwargs):
            seen["model"] = (kwargs["trust_remote_code"], kwargs["use_safetensors"])
            raise _Stop

    monkeypatch.setattr(modeling, "AutoTokenizer", Tokenizer)
    monkeypatch.setattr(modeling, "AutoModelForCausalLM", Model)
    params_raw["base"]["trust_remote_code"] = trust
    params = parse_params(params_raw)
    with pytest.raises(_Stop):
        modeling.load_model_and_prompt(minilm_folder(), base=params.base, prompt=params.prompt)
    assert seen == {"tokenizer": trust, "model": (trust, True)}
    assert parse_params(params_raw).base.trust_remote_code is trust


def test_pickled_adapter_is_never_loaded(tmp_path):
    (tmp_path / "adapter_model.bin").write_bytes(b"pickle")
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(LorasentError, match="no adapter_model.safetensors; only safetensors"):
        modeling.load_adapter(torch.nn.Linear(1, 1), tmp_path)


@pytest.mark.parametrize(("wall_time_s", "window_s", "load", "busy"), [
    (30, 60, 1.0, False),     # a short stage reads the 1-minute average
    (313, 300, 1.9, False),   # the default train: the 5-minute one, not the 15-minute
    (1600, 900, 4.0, True),   # a long stage that shared its 2 cores: the 15-minute one
])
def test_machine_load_reads_the_average_that_fits_in_the_stage(monkeypatch, wall_time_s,
                                                               window_s, load, busy):
    from lorasent.provenance import machine_load

    monkeypatch.setattr("os.getloadavg", lambda: (1.0, 1.9, 4.0))  # busy only before
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert machine_load(wall_time_s) == {"load_average": load, "window_s": window_s,
                                         "cpu_cores": 2, "busy": busy}


def test_a_provenance_record_is_split_into_what_defines_the_result_and_machine_facts(tmp_path):
    from lorasent.provenance import (
        machine_path,
        read_provenance,
        split_record,
        with_machine_facts,
        write_provenance,
    )

    record = {"stage": "train", "wall_time_s": 12.5, "git": {"commit": "ab", "dirty": False},
              "machine_load": {"busy": True}, "platform": "Linux-6", "params": {"r": 8},
              "training_speed": {"train_runtime": 10.0},
              "device": {"device": "cpu", "memory_free_bytes": 7, "memory_total_bytes": 9,
                         "visible_devices": {}}}
    tracked, machine = split_record(record)
    assert tracked == {"stage": "train", "params": {"r": 8}, "device": {"device": "cpu"}}
    assert machine == {"wall_time_s": 12.5, "git": {"commit": "ab", "dirty": False},
                       "machine_load": {"busy": True}, "platform": "Linux-6",
                       "training_speed": {"train_runtime": 10.0},
                       "device": {"memory_free_bytes": 7, "memory_total_bytes": 9,
                                  "visible_devices": {}}}
    path = tmp_path / "provenance" / "train.json"
    path.parent.mkdir()
    write_provenance(path, record)
    assert json.loads(path.read_text()) == tracked
    assert machine_path(path) == tmp_path / "provenance" / "machine" / "train.json"
    assert read_provenance(path) == record
    # a second run with other times rewrites the tracked file byte for byte
    before = path.read_bytes()
    write_provenance(path, {**record, "wall_time_s": 99.0, "machine_load": {"busy": False}})
    assert path.read_bytes() == before and read_provenance(path)["wall_time_s"] == 99.0
    # machine facts of another record are not joined to this one; an old record keeps its own
    assert with_machine_facts(json.dumps({"stage": "train", "params": {"r": 4}}),
                              machine_path(path)) == {"stage": "train", "params": {"r": 4}}
    assert with_machine_facts(json.dumps(record), tmp_path / "absent.json") == record


def test_trainer_speed_figures_go_to_the_machine_record_not_to_the_history():
    from lorasent.training.callbacks import MACHINE_SPEED, training_speed

    history = [{"loss": 1.2, "step": 1}, {"eval_runtime": 2.0, "eval_accuracy": 0.5, "step": 2},
               {"train_runtime": 30.0, "train_samples_per_second": 3.2,
                "train_steps_per_second": 0.4, "train_loss": 1.1, "total_flos": 5.0}]
    assert training_speed(history) == {"eval_runtime": 2.0, "train_runtime": 30.0,
                                       "train_samples_per_second": 3.2,
                                       "train_steps_per_second": 0.4}
    assert [key for record in history for key in record if not MACHINE_SPEED.search(key)] == [
        "loss", "step", "eval_accuracy", "step", "train_loss", "total_flos"]


# Two machines of one kind, at two moments: every machine fact lorasent reads differs.
# The cores are the kind's (the README's "2 cores"), and torch's threads follow from them.
MACHINES: list[dict[str, Any]] = [
    {"memory": (25275973632, 20e9), "load": (1.0, 2.0, 3.0), "platform": "Linux-6.1-x86_64",
     "wall_time_s": 612.5, "speed": 3.1, "image": "sha256:aa", "revision": "c0ffee",
     "digest": "python@sha256:11", "gpu": "0"},
    {"memory": (25276071936, 9e9), "load": (7.0, 6.0, 5.0), "platform": "Linux-6.8-x86_64",
     "wall_time_s": 1225.0, "speed": 1.4, "image": "sha256:bb", "revision": "beef-dirty",
     "digest": "python@sha256:22", "gpu": "3"},
]


def test_no_machine_fact_reaches_the_tracked_provenance(tmp_path, monkeypatch):
    """Issue 50: a rerun on another machine of this kind must leave git and dvc.lock
    clean. Every machine fact the record reads (memory, load, platform, times, Trainer's
    speed, the image, the GPU a scheduler gave, the commit and whether the tree is dirty)
    differs between two runs here; the tracked bytes do not, and every path of
    MACHINE_FACTS differs in the machine records (a new one must be varied here too)."""
    import psutil

    from lorasent.provenance import MACHINE_FACTS, machine_path, provenance, write_provenance

    machine_records = []
    for i, fact in enumerate(MACHINES):
        repo = tmp_path / f"checkout{i}"
        repo.mkdir()
        for args in (["init", "-q"], ["add", "-A"],
                     ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c"]):
            if args[0] == "add":
                (repo / "f").write_text(str(i))
            subprocess.run(["git", *args], cwd=repo, check=True)
        if i:
            (repo / "f").write_text("dirty")
        monkeypatch.chdir(repo)
        total, free = fact["memory"]
        monkeypatch.setattr(psutil, "virtual_memory",
                            lambda t=total, f=free: SimpleNamespace(total=t, available=f))
        monkeypatch.setattr("os.getloadavg", lambda f=fact: f["load"])
        monkeypatch.setattr("platform.platform", lambda f=fact: f["platform"])
        for name, value in (("LORASENT_IMAGE_ID", fact["image"]),
                            ("LORASENT_IMAGE_REVISION", fact["revision"]),
                            ("LORASENT_BASE_DIGEST", fact["digest"]),
                            ("CUDA_VISIBLE_DEVICES", fact["gpu"])):
            monkeypatch.setenv(name, value)
        record = provenance(stage="train", params={"train": {"lora": {"r": 8}}}, device="cpu",
                            wall_time_s=fact["wall_time_s"], inputs={"model": "ab12"},
                            extra={"training_speed": {"train_samples_per_second": fact["speed"]},
                                   "reference_costs": {"tfidf_lr": {"fit_seconds": fact["speed"]}},
                                   "steps": 200})
        write_provenance(tmp_path / f"run{i}" / "train.json", record)
        machine_records.append(json.loads(machine_path(tmp_path / f"run{i}" / "train.json")
                                          .read_text()))
    assert (tmp_path / "run0" / "train.json").read_bytes() == \
        (tmp_path / "run1" / "train.json").read_bytes()
    for path in MACHINE_FACTS:
        values = []
        for record in machine_records:
            for key in path:
                record = record[key]
            values.append(record)
        assert values[0] != values[1], path
