"""dvc.yaml's deps cover the code that makes each stage's outputs, and the workflow
passes zizmor.

A stage's code is its import closure: what ``lorasent <stage>`` runs in
``commands/stages.py`` (the module's top level, the stage's function and the functions it
names, such as ``stage``), and every lorasent module those import, at the top or inside
a function, followed to the end. ``cli.py``, the group that dispatches to every command,
is no stage's code: a change to it, or to any other command module, reruns nothing
(:func:`test_a_change_to_a_command_outside_the_stages_reruns_no_stage`). A module left
out of the deps is one that cannot change results (:data:`EXEMPT`, with the reason each).
"""

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from import_graph import lorasent_imports
from lorasent.params import read_yaml
from lorasent.training.checkpoints import TRAIN_CODE

SRC = REPO / "src" / "lorasent"
DVC = read_yaml((REPO / "dvc.yaml").read_text(encoding="utf-8"), "dvc.yaml")
STAGES = ["fetch", "split", "baseline", "train", "evaluate"]

# Modules in a stage's import closure that no stage output depends on.
EXEMPT = {
    "programs": "finds dvc and git and words the message when one is missing: reached only "
                "from the error path of every command and from lorasent.git, which it tells "
                "where git is (the git lookups of the output guard, of the machine facts and "
                "of the params an experiment changed): which git runs, or the words when none "
                "is found, changes no output",
}


def _imports(nodes: list[ast.stmt]) -> set[str]:
    """The lorasent modules imported anywhere in ``nodes`` (function bodies included),
    except under ``if TYPE_CHECKING:``, which never runs (tests/import_graph.py)."""
    return {found.module for found in lorasent_imports(nodes) if not found.level}


def _module(name: str) -> ast.Module:
    """The module ``lorasent.<name>`` (``name`` dotted below the package: ``stages.train``)."""
    return ast.parse((SRC / f"{name.replace('.', '/')}.py").read_text(encoding="utf-8"))


COMMANDS = "commands.stages"


def _cli_roots(stage: str) -> list[ast.stmt]:
    """What ``lorasent <stage>`` runs of commands/stages.py: its top level, and the
    functions reached by name from the stage's function (its decorator ``stage``, then
    ``_stage_command``, ``params_record``, ...)."""
    tree = _module(COMMANDS)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    top = [node for node in tree.body
           if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    reached, todo = set(), [stage]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        todo += [node.id for node in ast.walk(functions[name])
                 if isinstance(node, ast.Name) and node.id in functions]
    return top + [functions[name] for name in sorted(reached)]


def closure(stage: str) -> set[str]:
    """The lorasent modules ``lorasent <stage>`` can run, its command module included."""
    seen: set[str] = set()
    todo = [COMMANDS, f"stages.{stage}", *_imports(_cli_roots(stage))]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            if name != COMMANDS:  # its own imports: only those of _cli_roots
                todo += _imports(_module(name).body)
    return seen


def _declared_code(stage: str) -> list[str]:
    return [dep.removeprefix("src/lorasent/").removesuffix(".py").replace("/", ".")
            for dep in DVC["stages"][stage]["deps"] if dep.startswith("src/")]


def test_the_walk_follows_imports_inside_functions():
    # the command imports the stage module inside the stage's function, and params imports
    # atomic inside update_params: both are followed
    assert "stages.train" in _imports(_cli_roots("train"))
    assert not any(name.startswith("review") for name in _imports(_cli_roots("train")))
    assert "atomic" in _imports(_module("params").body)
    # statistics names metrics only for the type checker
    assert "metrics" not in _imports(_module("statistics").body)


@pytest.mark.parametrize("stage", STAGES)
def test_stage_deps_are_its_import_closure(stage):
    declared = _declared_code(stage)
    assert len(declared) == len(set(declared)), f"{stage}: a module is listed twice"
    assert set(declared) == closure(stage) - set(EXEMPT)


@pytest.mark.slow
def test_the_closures_hold_what_writes_and_maps_the_outputs():
    assert closure("fetch") - set(EXEMPT) == {
        "stages.fetch", "addresses", "atomic", "baseline_params", "characters", "command_errors",
        "commands.stages", "dvc_project", "environment", "errors", "experiment_params", "git",
        "hashes", "launch", "modes", "params", "paths", "processes", "provenance",
        "reference_registry", "section", "tables"}
    assert closure("train") - closure("fetch") == {"stages.train", "training.callbacks",
                                                   "training.checkpoints", "training.trainer",
                                                   "calibration", "contracts",
                                                   "frozen_weights", "metrics",
                                                   "modeling", "scoring", "statistics",
                                                   "subsets"}
    assert closure("evaluate") - closure("train") == {"stages.evaluate", "stages.test_sets",
                                                      "stages.fetch", "stages.split",
                                                      "references"}


def test_exempt_modules_are_in_some_closure():
    every = set().union(*(closure(stage) for stage in STAGES))
    assert set(EXEMPT) <= every


def test_the_training_key_hashes_the_train_closure():
    assert sorted(TRAIN_CODE) == sorted(closure("train") - set(EXEMPT))


@pytest.mark.slow
def test_a_change_to_a_command_outside_the_stages_reruns_no_stage(tiny_copy):
    """An edit of the group (cli.py) or of a tool, review or experiment command leaves
    every stage up to date: a `git pull` that touched `lorasent doctor` retrains nothing
    and keeps the checkpoints (their key hashes TRAIN_CODE). An edit of the stages'
    commands makes all five stale."""
    from tiny_repo import run

    root = tiny_copy
    assert json.loads(run(root, "dvc", "status", "--json")) == {}
    commands = root / "src/lorasent/commands"
    others = [root / "src/lorasent/cli.py",
              *(path for path in sorted(commands.glob("*.py")) if path.name != "stages.py")]
    assert len(others) >= 5
    for path in others:
        path.write_text(path.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert json.loads(run(root, "dvc", "status", "--json")) == {}
    stages = commands / "stages.py"
    stages.write_text(stages.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    status = json.loads(run(root, "dvc", "status", "--json"))
    assert sorted(status) == sorted(STAGES)
    assert all({"changed deps": {"src/lorasent/commands/stages.py": "modified"}} in status[stage]
               for stage in STAGES)


def _zizmor() -> str:
    found = shutil.which("zizmor", path=str(Path(sys.executable).parent)) or shutil.which("zizmor")
    assert found is not None, "zizmor is not installed: make setup installs requirements.lock"
    return found


def test_the_workflows_pass_zizmor():
    done = subprocess.run([_zizmor(), "--offline", "--format", "json",
                           str(REPO / ".github" / "workflows")],
                          capture_output=True, text=True, timeout=120)
    assert json.loads(done.stdout) == [], done.stderr
    assert done.returncode == 0, done.stderr


def test_the_committed_lock_records_the_committed_code():
    """HEAD's dvc.lock records the MD5 of every file dependency as HEAD holds it: a commit
    that changes a stage's code commits the lock of a run of that code too (a rerun, or
    `dvc commit` when the change cannot move an output), so that `lorasent compare` and
    `dvc status` do not call the committed run stale. Read from git, not the workspace (a
    user's `make smoke` rewrites dvc.lock; a developer's edit is not committed yet)."""
    import hashlib

    def show(path: str) -> bytes:
        return subprocess.run(["git", "show", f"HEAD:{path}"], cwd=REPO, capture_output=True,
                              check=True).stdout

    lock = read_yaml(show("dvc.lock").decode(), "dvc.lock")
    tracked = set(subprocess.run(["git", "ls-tree", "-r", "--name-only", "HEAD"], cwd=REPO,
                                 capture_output=True, text=True, check=True).stdout.split())
    deps = {(d["path"], d["md5"]) for stage in lock["stages"].values()
            for d in stage.get("deps", []) if d["path"] in tracked}
    assert len(deps) > 20  # the code and configs, not only data
    stale = sorted(path for path, md5 in deps if hashlib.md5(show(path)).hexdigest() != md5)
    assert not stale, f"HEAD's dvc.lock records other bytes of {stale}"
