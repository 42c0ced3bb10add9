"""dvc.yaml and the CLI agree: commands resolve, deps name modules, params exist."""

import shlex

import click
import pytest
from click.testing import CliRunner

from conftest import REPO
from lorasent import paths
from lorasent.cli import main
from lorasent.params import read_yaml

DVC = read_yaml((REPO / "dvc.yaml").read_text(encoding="utf-8"), "dvc.yaml")
PARAMS = read_yaml((REPO / "params.yaml").read_text(encoding="utf-8"), "params.yaml")
STAGES = ["fetch", "split", "baseline", "train", "evaluate"]


def test_five_stages_in_order():
    assert list(DVC["stages"]) == STAGES


@pytest.mark.parametrize("stage", STAGES)
def test_command_resolves_to_a_cli_command(stage):
    argv = shlex.split(DVC["stages"][stage]["cmd"])
    assert argv[0] == "lorasent"
    assert main.get_command(click.Context(main), argv[1]) is not None
    result = CliRunner().invoke(main, [*argv[1:], "--help"])
    assert result.exit_code == 0, result.output
    assert "--params" in result.output


@pytest.mark.parametrize("stage", STAGES)
def test_stage_depends_on_its_own_module(stage):
    assert f"src/lorasent/{stage}.py" in DVC["stages"][stage]["deps"]


@pytest.mark.parametrize("stage", STAGES)
def test_stage_params_exist(stage):
    for key in DVC["stages"][stage].get("params", []):
        node = PARAMS
        for part in key.split("."):
            assert part in node, f"{stage}: params key {key} is not in params.yaml"
            node = node[part]


def _declared(stage):
    spec = DVC["stages"][stage]
    return {next(iter(o)) if isinstance(o, dict) else o
            for kind in ("outs", "metrics") for o in spec.get(kind, [])}


def test_outs_are_the_paths_the_code_writes():
    assert _declared("fetch") == {str(paths.RAW_DIR), str(paths.BASE_MODEL_DIR)}
    assert _declared("split") == {str(paths.SPLIT_DIR), str(paths.DATA_REPORT)}
    assert _declared("baseline") == {str(paths.BASELINE_METRICS), str(paths.BASELINE_PREDICTIONS),
                                     str(paths.PROVENANCE_DIR / "baseline.json")}
    assert _declared("train") == {str(paths.ADAPTER_DIR), str(paths.TRAIN_LIVE_DIR),
                                  str(paths.PROVENANCE_DIR / "train.json")}
    assert _declared("evaluate") == {str(paths.EVAL_METRICS), str(paths.EVAL_PREDICTIONS),
                                     str(paths.PROVENANCE_DIR / "evaluate.json")}


def test_bad_params_fail_before_any_work(tmp_path, monkeypatch):
    (tmp_path / "params.yaml").write_text(
        (REPO / "params.yaml").read_text(encoding="utf-8").replace("    r: 8", "    rank: 8"),
        encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["fetch"])
    assert result.exit_code == 1
    assert "train.lora.rank: unknown key" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_params_option_reads_another_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["split", "--params", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 1
    assert "nope.yaml: not found" in result.output


def test_stage_before_its_inputs_says_what_to_run(tmp_path, monkeypatch):
    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text(encoding="utf-8"),
                                          encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["split"])
    assert result.exit_code == 1
    assert "data/raw/dataset.jsonl: not found; run the earlier stages first" in result.output
