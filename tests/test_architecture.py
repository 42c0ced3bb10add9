"""The import rules of docs/architecture.md, checked on the import graph of src/lorasent/
(tests/import_graph.py: imports at the top and inside functions, not under
``if TYPE_CHECKING:``).

The layers: ``cli`` (the entry point: the ``lorasent`` group), ``commands/`` (each
command, calling a stage, tool, review or experiment function; ``commands.stages``, the
one command module in the stages' deps, imports no other command module), ``stages/``,
``training/`` (the train stage's machinery, which only ``stages.train`` imports),
``tools/``, ``review/``, ``experiments/`` (the experiment runners: sweep, seeds, learning
curve; only the commands import them, and they import the core, ``review/`` and
themselves), and the shared core (every other module at the package's top level). A
broken rule fails with one line per offending import, naming the file, the line and the
statement.

That the review code loads no torch is tests/test_review.py's check (it runs the
commands); this file checks only which modules import which.
"""

import ast
import re

import pytest

from import_graph import SRC, Import, graph, lorasent_imports, module_names
from lorasent.modes import MODES
from lorasent.params import read_yaml

PACKAGES = ("commands", "stages", "training", "tools", "review", "experiments")
TOP = "cli"
# `python -m lorasent`: the entry point too, the one module that imports cli.
MAIN = "__main__"
STAGE_COMMANDS = "commands.stages"
# The one module outside training/ that imports it: the train stage's recipe.
TRAINING_USER = "stages.train"

# Imports across the layers that the rules below would refuse, each with its reason. A new
# one is a decision: add it here and to docs/architecture.md's import rules.
EXCEPTIONS = {
    ("review.render", "stages.split"):
        "row_id, a test row's id, for test splits written before their rows carried one "
        "(the report's flipped texts); the function belongs to the split stage, which "
        "writes the ids",
    ("stages.evaluate", "stages.test_sets"):
        "load_test_sets: the evaluate stage's extra test sets, read and checked before the "
        "model loads; a module of its own because it reads with the fetch stage's reader "
        "and cleans with the split stage's rules",
    ("stages.test_sets", "stages.fetch"):
        "read_source: the evaluate stage's extra test sets are read as data.source is",
    ("stages.test_sets", "stages.split"):
        "clean_rows, deduplicate, normalise_text, row_id: the extra test sets are cleaned "
        "and identified under the split stage's rules, by its own functions",
    ("tools.label_queue", "stages.split"):
        "normalise_text: the queue drops texts of the splits and near-duplicates on the "
        "split stage's own key, so that 'already labelled' means what the split's dedup "
        "means",
    ("tools.queue_trial", "stages.split"):
        "clean_rows, normalise_text, row_id: the queue's trial adds labelled rows to the "
        "training split as the split stage writes them",
    ("tools.bench", "stages.fetch"):
        "the packaged tweets (read_source) and the packaged Gemma converted from its GGUF "
        "(packaged_gemma): the bench times its ways on what the pipeline fetches",
}


def layer(module: str) -> str:
    """``cli``, ``commands``, ``stages``, ``training``, ``tools``, ``review``,
    ``experiments`` or ``core``."""
    first = module.split(".")[0]
    return TOP if module == MAIN else first if module == TOP or first in PACKAGES else "core"


def broken_rule(importer: str, imported: str) -> str | None:
    """Why ``importer`` may not import ``imported``, or None when it may."""
    if (importer, imported) in EXCEPTIONS:
        return None
    if importer in PACKAGES:
        return f"{importer}/__init__.py holds only its docstring: a package imports nothing"
    if imported == TOP:
        if importer == MAIN:
            return None
        return ("nothing imports cli but __main__ (python -m lorasent): it is the entry "
                "point, the top of the graph")
    if importer == STAGE_COMMANDS and layer(imported) not in {"core", "stages"}:
        return (f"the stages' commands import {imported}; commands.stages may import the "
                "core and stages/ only (it is the one command module in the stages' deps)")
    what = {"cli": "cli", "commands": "a command", "core": "the shared core",
            "stages": "a stage", "training": "the training code", "tools": "a tool",
            "review": "the review code", "experiments": "an experiment runner"}
    if layer(imported) == "training" and layer(importer) != "training":
        if importer == TRAINING_USER:
            return None
        return (f"{what[layer(importer)]} imports the training code ({imported}); only "
                f"{TRAINING_USER} and training/ may import training/ (the train stage's "
                "machinery)")
    allowed = {
        "cli": {"commands"},
        "commands": {"core", "stages", "tools", "review", "experiments", "commands"},
        "core": {"core"},
        "stages": {"core"},
        "training": {"core", "training"},
        "tools": {"core", "tools"},
        "review": {"core", "review"},
        "experiments": {"core", "review", "experiments"},
    }[layer(importer)]
    if layer(imported) in allowed:
        return None
    named = ["the core" if name == "core" else f"{name}/"
             for name in sorted(allowed, key=["core", *PACKAGES].index)]
    may = " and ".join(named) if len(named) < 3 else (", ".join(named[:-1]) + " and "
                                                      + named[-1])
    return (f"{what[layer(importer)]} imports {what[layer(imported)]} ({imported}); "
            f"{layer(importer) if layer(importer) != 'core' else 'the core'} may import "
            f"{may} only")


def path_of(module: str) -> str:
    path = SRC / module.replace(".", "/")
    file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    return str(file.relative_to(SRC.parents[1]))


def problems(imports: dict[str, list[Import]]) -> list[str]:
    """One line per import that breaks a rule: a relative import, or an edge that
    :func:`broken_rule` refuses."""
    found = []
    for importer, statements in imports.items():
        for statement in statements:
            where = f"{path_of(importer)}:{statement.line}: `{statement.statement}`"
            if statement.level:
                found.append(f"{where}: a relative import; lorasent imports itself by "
                             "absolute name (lorasent.<module>)")
                continue
            why = broken_rule(importer, statement.module)
            if why:
                found.append(f"{where}: {why}")
    return found


def cycle(imports: dict[str, list[Import]]) -> list[str] | None:
    """A cycle of imports (``[a, b, a]``), or None when the graph has none."""
    edges = {module: sorted({i.module for i in found if not i.level})
             for module, found in imports.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for nxt in edges.get(module, []):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[module] = 2
        return None

    for module in edges:
        if module not in state and (found := visit(module)):
            return found
    return None


GRAPH = graph()


def test_every_import_keeps_the_rules():
    found = problems(GRAPH)
    assert not found, "imports that break docs/architecture.md's rules:\n" + "\n".join(found)


def test_the_imports_form_no_cycle():
    found = cycle(GRAPH)
    assert found is None, "an import cycle: " + " -> ".join(found or [])


def test_every_exception_is_still_an_import():
    edges = {(importer, i.module) for importer, found in GRAPH.items() for i in found}
    stale = sorted(set(EXCEPTIONS) - edges)
    assert not stale, ("EXCEPTIONS no import needs any more (remove them here and from "
                       f"docs/architecture.md): {stale}")


def test_the_exceptions_and_layers_are_those_the_doc_states():
    doc = (SRC.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    for importer, imported in EXCEPTIONS:
        assert f"`{importer}` → `{imported}`" in doc, (
            f"docs/architecture.md does not list the exception {importer} → {imported}")
    assert {layer(module) for module in module_names()} == {"cli", "core", *PACKAGES}


# The checker itself.

def test_a_stage_that_imports_another_stage_is_one_line_naming_it():
    imports = {"stages.train": [Import("stages.split", 12, "from lorasent.stages.split "
                                       "import row_id")],
               "stages.split": [Import("paths", 3, "from lorasent.paths import SPLIT_DIR")]}
    assert problems(imports) == [
        "src/lorasent/stages/train.py:12: `from lorasent.stages.split import row_id`: a stage "
        "imports a stage (stages.split); stages may import the core only"]


@pytest.mark.parametrize(("importer", "imported", "rule"), [
    ("metrics", "review.verdict", "the shared core imports the review code (review.verdict); "
                                  "the core may import the core only"),
    ("stages.evaluate", "tools.predict", "a stage imports a tool (tools.predict)"),
    ("review.collect", "tools.bench", "the review code imports a tool (tools.bench); review "
                                      "may import the core and review/ only"),
    ("tools.predict", "stages.train", "a tool imports a stage (stages.train); tools may "
                                      "import the core and tools/ only"),
    ("tools.predict", "cli", "nothing imports cli"),
    ("stages.train", "commands.stages", "a stage imports a command (commands.stages)"),
    ("cli", "stages.train", "cli imports a stage (stages.train); cli may import commands/ only"),
    ("__main__", "stages.split", "cli imports a stage (stages.split); cli may import "
                                 "commands/ only"),
    ("commands.stages", "commands.options", "commands.stages may import the core and "
                                            "stages/ only"),
    ("commands.stages", "tools.predict", "the stages' commands import tools.predict"),
    ("review", "review.collect", "a package imports nothing"),
    ("training", "training.trainer", "a package imports nothing"),
    ("stages.evaluate", "training.checkpoints",
     "a stage imports the training code (training.checkpoints); only stages.train and "
     "training/ may import training/"),
    ("modeling", "training.trainer", "the shared core imports the training code "
                                     "(training.trainer); only stages.train"),
    ("tools.bench", "training.trainer", "a tool imports the training code (training.trainer)"),
    ("cli", "training.checkpoints", "cli imports the training code (training.checkpoints); "
                                    "only stages.train and training/ may import training/"),
    ("training.trainer", "stages.split", "the training code imports a stage (stages.split); "
                                         "training may import the core and training/ only"),
    ("training.checkpoints", "tools.bench", "the training code imports a tool (tools.bench)"),
    ("review.reproduce", "experiments.sweep", "the review code imports an experiment runner "
                                              "(experiments.sweep); review may import the "
                                              "core and review/ only"),
    ("stages.train", "experiments.grid", "a stage imports an experiment runner "
                                         "(experiments.grid); stages may import the core only"),
    ("tools.bench", "experiments.task", "a tool imports an experiment runner"),
    ("git", "experiments.sweep", "the shared core imports an experiment runner"),
    ("experiments.sweep", "stages.train", "an experiment runner imports a stage (stages.train); "
                                          "experiments may import the core, review/ and "
                                          "experiments/ only"),
    ("experiments.task", "tools.bench", "an experiment runner imports a tool"),
    ("experiments", "experiments.sweep", "a package imports nothing"),
])
def test_what_each_rule_refuses(importer, imported, rule):
    found = problems({importer: [Import(imported, 1, f"import lorasent.{imported}")]})
    assert len(found) == 1 and rule in found[0], found


@pytest.mark.parametrize(("importer", "imported"), [
    ("cli", "commands.stages"), ("commands.review", "review.compare"),
    ("commands.stages", "stages.train"), ("commands.adapter", "commands.options"),
    ("commands.project", "commands.stages"), ("tools.device_check", "tools.bench"),
    ("review.compare", "review.render"), ("stages.train", "modeling"), ("modeling", "params"),
    ("stages.train", "training.trainer"), ("training.trainer", "training.callbacks"),
    ("training.checkpoints", "atomic"),
    ("commands.experiments", "experiments.sweep"), ("experiments.learning_curve", "review.render"),
    ("experiments.sweep", "experiments.grid"), ("experiments.task", "processes"),
    ("git", "processes"), ("__main__", "cli"),
    *EXCEPTIONS])
def test_what_the_rules_allow(importer, imported):
    assert broken_rule(importer, imported) is None


MAX_LINES, MAX_MEDIAN_LINES = 800, 300  # docs/architecture.md, "The rooms"


def test_every_module_does_one_job_in_under_800_lines():
    lines = {path.relative_to(SRC.parents[1]).as_posix():
             len(path.read_text(encoding="utf-8").splitlines())
             for path in sorted(SRC.rglob("*.py")) if path.name != "__init__.py"}
    long = sorted(f"{path}: {n} lines" for path, n in lines.items() if n >= MAX_LINES)
    assert not long, (f"modules of {MAX_LINES} lines or more (split each along its jobs, "
                      "docs/architecture.md): " + "; ".join(long))
    ordered = sorted(lines.values())
    median = (ordered[(len(ordered) - 1) // 2] + ordered[len(ordered) // 2]) / 2
    assert median < MAX_MEDIAN_LINES, f"the median module has {median:g} lines"


def private_imports(src=SRC) -> list[str]:
    """One line per private name (a leading underscore) that one lorasent module imports
    from another: what crosses a module's edge is public, with its docstring."""
    found = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.ImportFrom) and not node.level
                    and (node.module or "").startswith("lorasent")):
                found += [f"{path.relative_to(src.parents[1])}:{node.lineno}: "
                          f"`{alias.name}` from {node.module}: a private name crosses "
                          "modules; make it public where it lives"
                          for alias in node.names if alias.name.startswith("_")
                          and not alias.name.startswith("__")]
    return found


def test_no_private_name_crosses_modules():
    found = private_imports()
    assert not found, "\n".join(found)


def test_a_private_import_is_one_line_naming_it(tmp_path):
    package = tmp_path / "src" / "lorasent"
    package.mkdir(parents=True)
    (package / "bench.py").write_text("from lorasent.fetch import _packaged, public\n",
                                      encoding="utf-8")
    assert private_imports(package) == [
        "src/lorasent/bench.py:1: `_packaged` from lorasent.fetch: a private name crosses "
        "modules; make it public where it lives"]


def test_the_walk_resolves_submodules_and_skips_the_type_checker():
    source = ("from typing import TYPE_CHECKING\n"
              "from lorasent.stages import split\n"
              "import lorasent.tools.predict as predict\n"
              "from lorasent import errors\n"
              "from . import sibling\n"
              "if TYPE_CHECKING:\n"
              "    from lorasent.review.verdict import Review\n"
              "def late():\n"
              "    from lorasent.paths import SPLIT_DIR\n")
    found = lorasent_imports(ast.parse(source).body, source.splitlines())
    assert [(i.module, i.line, i.level) for i in found] == [
        ("stages.split", 2, 0), ("tools.predict", 3, 0), ("errors", 4, 0), ("", 5, 1),
        ("paths", 9, 0)]
    assert found[-1].statement == "from lorasent.paths import SPLIT_DIR"
    assert problems({"stages.fetch": found})[0].endswith(
        "a stage imports a stage (stages.split); stages may import the core only")
    assert any("`from . import sibling`: a relative import" in line
               for line in problems({"stages.fetch": found}))


def test_a_cycle_is_found():
    imports = {"params": [Import("atomic", 1, "")], "atomic": [Import("paths", 1, "")],
               "paths": [Import("params", 1, "")]}
    assert cycle(imports) == ["params", "atomic", "paths", "params"]


def test_the_doc_gives_each_mode_as_modes_py_does():
    doc = (SRC.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    for name, mode in MODES.items():
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{name}`")), "")
        assert row, f"docs/architecture.md: no row for the mode {name}"
        for value in (mode.peft_task_type, mode.encoder, *mode.record_fields):
            assert f"`{value}`" in row, f"docs/architecture.md: {name}'s row lacks `{value}`"
        assert ("yes" in row.split("|")[-2]) == mode.zero_shot, (
            f"docs/architecture.md: {name}'s zero-shot cell does not match modes.py")


def test_the_doc_gives_each_stage_its_module_params_deps_and_outs():
    doc = (SRC.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    stages = read_yaml((SRC.parents[1] / "dvc.yaml").read_text(encoding="utf-8"),
                       "dvc.yaml")["stages"]
    for stage, spec in stages.items():
        row = next((line for line in doc.splitlines() if line.startswith(f"| {stage} |")), "")
        assert row, f"docs/architecture.md: no row for the stage {stage}"
        _, _, module, params, reads, writes, _ = row.split("|")
        assert f"`stages/{stage}.py`" in module, f"{stage}: the module is not stages/{stage}.py"
        named = re.findall(r"`([^`]+)`", params)
        assert named == spec["params"], f"{stage}: the params are dvc.yaml's {spec['params']}"
        outs = [next(iter(out)) if isinstance(out, dict) else out
                for key in ("outs", "metrics") for out in spec.get(key, [])]
        deps = [dep for dep in spec["deps"] if not dep.startswith("src/")]
        for paths, cell, what in ((outs, writes, "writes"), (deps, reads, "reads")):
            given = re.findall(r"`([^`]+)`", cell)
            missing = [path for path in paths
                       if not any(name.rstrip("/").startswith(path) for name in given)]
            assert not missing, f"{stage}: the {what} cell lacks {missing} (dvc.yaml)"
