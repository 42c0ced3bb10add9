"""Tests never read the workspace's outputs (issue 41, item 1): ``make run``, ``make smoke``
and ``make bench`` rewrite metrics/, dvc.lock, bench/results.json, models/ and data/, so a
test that read them would fail after the README's commands in a new user's order. A test
reads what is committed (``conftest.committed``) or a fixture; this scan finds a path of
the repo's outputs joined to ``REPO`` in any test file."""

import re

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
