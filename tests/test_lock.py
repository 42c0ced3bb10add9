"""requirements.lock pins every dependency with hashes, and never torch."""

import ast
import re
import sys
import tomllib
from importlib import metadata

import pytest

from conftest import REPO

LOCK = REPO / "requirements.lock"


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock() -> dict[str, tuple[str, list[str]]]:
    """``{name: (version, [sha256, ...])}`` from the lock's `name==version \\` entries."""
    text = re.sub(r"\\\n\s*", " ", LOCK.read_text(encoding="utf-8"))
    entries = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:\w+)*)\s*$",
                         line)
        assert match, f"requirements.lock: not an exact pin with hashes: {line!r}"
        hashes = re.findall(r"sha256:(\w+)", match.group(3))
        entries[normalise(match.group(1))] = (match.group(2), hashes)
    return entries


LOCKED = parse_lock()


def test_lock_leaves_out_torch_and_its_gpu_builds():
    assert "torch" not in LOCKED
    # The CUDA runtime wheels a PyPI torch pulls in (nvidia-ml-py, dvc's NVML binding, is
    # plain Python and stays).
    gpu = [n for n in LOCKED if n.startswith(("nvidia-cu", "nvidia-nccl", "nvidia-nv",
                                              "triton", "pytorch-triton", "cuda-"))]
    assert gpu == []


def test_every_entry_carries_hashes():
    missing = [name for name, (_, hashes) in LOCKED.items() if not hashes]
    assert missing == []
    assert all(len(h) == 64 for _, hashes in LOCKED.values() for h in hashes)


def _imported_modules() -> set[str]:
    modules = set()
    for path in (REPO / "src" / "lorasent").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"lorasent", "__future__", "torch"}


def test_every_import_of_the_package_is_pinned():
    owners = metadata.packages_distributions()
    imported = _imported_modules()
    assert {"transformers", "peft", "sklearn", "ruamel", "dvclive"} <= imported
    unpinned = {m: owners.get(m) for m in imported
                if not any(normalise(d) in LOCKED for d in owners.get(m, []))}
    assert unpinned == {}


def test_every_declared_dependency_is_pinned():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    assert set(extras) == {"dev", "ssh", "s3"}
    declared = project["dependencies"] + [d for extra in extras.values() for d in extra]
    names = {normalise(re.split(r"[<>=!~ ;\[]", d, maxsplit=1)[0]) for d in declared}
    assert names - {"torch"} - set(LOCKED) == set()


@pytest.mark.parametrize("name", sorted(LOCKED))
def test_installed_version_matches_the_lock(name):
    assert metadata.version(name) == LOCKED[name][0]
