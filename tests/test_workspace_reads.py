"""Tests never read the workspace's outputs (issue 41, item 1): ``make run``, ``make smoke``
and ``make bench`` rewrite metrics/, dvc.lock, bench/results.json, models/ and data/, so a
test that read them would fail after the README's commands in a new user's order. A test
reads what is committed (``conftest.committed``) or a fixture; this scan finds a path of
the repo's outputs joined to ``REPO`` in any test file."""

import re

import pytest

from conftest import REPO

OUTPUTS = re.compile(r"""REPO\s*/\s*(?:f?["'](?:metrics|dvc\.lock|models|bench/results"""
                     r"""|data/(?:raw|split))\b)""")
THIS = "test_workspace_reads.py"  # its own examples below


def test_no_test_reads_an_output_of_the_workspace():
    found = [f"{path.name}:{n}: {line.strip()}"
             for path in sorted((REPO / "tests").glob("*.py")) if path.name != THIS
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if OUTPUTS.search(line)]
    assert not found, ("tests that read the workspace's outputs; read them with "
                       "conftest.committed (git's index) or a fixture:\n" + "\n".join(found))


def test_the_scan_finds_what_it_looks_for():
    for line in ('REPO / "metrics" / "eval.json"', "REPO / 'dvc.lock'", 'REPO/"models/base"',
                 'REPO / f"metrics/{name}"', 'REPO / "bench/results.json"',
                 'REPO / "data/split/test.jsonl"'):
        assert OUTPUTS.search(line), line
    for line in ('REPO / "params.yaml"', 'REPO / "docs"', 'REPO / "data/sources"',
                 'committed("metrics/eval.json")', 'tmp_path / "metrics/eval.json"'):
        assert not OUTPUTS.search(line), line


@pytest.mark.slow
def test_the_fast_tier_passes_after_a_pipeline_run_rewrote_the_outputs(tiny_run, tmp_path):
    """The README's two commands in a new user's order (`make run` or `make smoke`, then
    `make test`): a clone of this repo (its history, and the working tree's files on top),
    whose workspace outputs (metrics/, dvc.lock) a pipeline run then rewrote (the tiny
    run's), passes the fast tests of every file that reads the repo (``REPO``,
    ``committed``). A test that read the workspace's outputs, by any path the scan above
    misses, fails here."""
    import shutil
    import subprocess
    import sys

    from tiny_repo import copy_repo, run

    root = tmp_path / "repo"
    run(tmp_path, "git", "clone", "-q", str(REPO), str(root))
    copy_repo(root)  # the working tree's changes, as a developer has them
    run(root, "git", "checkout", "-q", "--", "dvc.lock")  # copy_repo drops it
    shutil.rmtree(root / "metrics")  # the run: its outputs over the committed ones
    shutil.copytree(tiny_run / "metrics", root / "metrics")
    shutil.copy2(tiny_run / "dvc.lock", root / "dvc.lock")
    changed = run(root, "git", "status", "--porcelain", "--", "metrics", "dvc.lock")
    assert " M dvc.lock" in changed and " M metrics/eval.json" in changed
    readers = [f"tests/{path.name}" for path in sorted((REPO / "tests").glob("test_*.py"))
               if re.search(r"\bREPO\b|committed\(", path.read_text(encoding="utf-8"))]
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "--tb=line", *readers], cwd=root,
                           capture_output=True, text=True)
    failed = [line for line in tests.stdout.splitlines() if line.startswith("FAILED")]
    assert tests.returncode == 0 and not failed, "\n".join(failed) or tests.stdout[-3000:]
