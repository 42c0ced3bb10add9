"""The lorasent import graph, read from the source with ``ast``: which lorasent modules a
module imports, where, and how. Shared by tests/test_dvc_deps.py (each stage's import
closure against its dvc.yaml deps) and tests/test_architecture.py (the import rules).

Imports are found anywhere: at the top of a module and inside functions (the stages and
tools import their heavy modules late), except under ``if TYPE_CHECKING:``, which never
runs. Modules are named dotted below the package: ``cli``, ``stages.train``,
``review.collect``; a package's ``__init__.py`` is the package's name (``stages``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "lorasent"


@dataclass(frozen=True)
class Import:
    """One lorasent module imported by one statement."""

    module: str      # the imported module, dotted below lorasent: ``stages.split``
    line: int        # the statement's line in the importing file
    statement: str   # the statement as written (first line), for messages
    level: int = 0   # > 0: a relative import (``from . import x``), its dots


def module_names(src: Path = SRC) -> list[str]:
    """Every module of the package, dotted below it, in path order."""
    names = []
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def module_path(name: str, src: Path = SRC) -> Path:
    """The file of module ``name`` (``stages.train`` or the package ``stages``)."""
    path = src / name.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _resolve(base: str, names: list[str], src: Path) -> list[str]:
    """``from lorasent.<base> import <names>``: each name that is a module of its own
    (``from lorasent.stages import split``), else ``base`` itself."""
    found = []
    for name in names:
        dotted = f"{base}.{name}" if base else name
        if (src / dotted.replace(".", "/")).with_suffix(".py").is_file() \
                or (src / dotted.replace(".", "/")).is_dir():
            found.append(dotted)
        elif base:
            found.append(base)
    return found


def lorasent_imports(nodes: list[ast.stmt], lines: list[str] | None = None,
                     src: Path = SRC) -> list[Import]:
    """The lorasent modules imported anywhere in ``nodes``, function bodies included,
    except under ``if TYPE_CHECKING:``; in source order. ``lines``: the file's lines,
    for :attr:`Import.statement`. A relative import is reported with its ``level``."""
    found: list[Import] = []
    todo: list[ast.AST] = list(nodes)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            todo += node.orelse
            continue
        todo += ast.iter_child_nodes(node)
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        statement = (lines[node.lineno - 1].strip() if lines else ast.unparse(node))
        if isinstance(node, ast.ImportFrom) and node.level:
            found.append(Import(node.module or "", node.lineno, statement, node.level))
        elif isinstance(node, ast.ImportFrom) and node.module \
                and (node.module == "lorasent" or node.module.startswith("lorasent.")):
            base = node.module.removeprefix("lorasent").removeprefix(".")
            found += [Import(name, node.lineno, statement)
                      for name in _resolve(base, [alias.name for alias in node.names], src)]
        elif isinstance(node, ast.Import):
            found += [Import(alias.name.removeprefix("lorasent."), node.lineno, statement)
                      for alias in node.names if alias.name.startswith("lorasent.")]
    return sorted(found, key=lambda found: (found.line, found.module))


def imports_of(name: str, src: Path = SRC) -> list[Import]:
    """What module ``name`` imports of lorasent, anywhere in it."""
    text = module_path(name, src).read_text(encoding="utf-8")
    return lorasent_imports(ast.parse(text).body, text.splitlines(), src)


def graph(src: Path = SRC) -> dict[str, list[Import]]:
    """``{module: its lorasent imports}`` for every module of the package."""
    return {name: imports_of(name, src) for name in module_names(src)}
