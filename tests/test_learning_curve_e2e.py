"""`lorasent learning-curve` end to end on the tiny repo: 2 fractions × 2 seeds through
the sweep (a local Ray cluster, 1 CPU per run) land four experiments trained on nested
subsets, the curve's files say it cannot fit 2 fractions, and a second invocation
reuses all four (trains nothing)."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tiny_repo import clone_run, env, exp_named, run

pytestmark = pytest.mark.slow

ARGS = ("--fractions", "0.5,1", "--seeds", "2", "--name", "lc", "--cpus-per-run", "1")
NAMES = ["lc-fraction0.5-seed42", "lc-fraction0.5-seed43", "lc-fraction1.0-seed42",
         "lc-fraction1.0-seed43"]


def _curve(root, out) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["lorasent", "learning-curve", *ARGS, "--out", str(out)], cwd=root,
                          env=env(), text=True, capture_output=True, timeout=900)


@pytest.fixture(scope="module")
def curved(tmp_path_factory, tiny_run):
    root = clone_run(tiny_run, tmp_path_factory.mktemp("learning-curve") / "repo")
    out = root.parent / "lc-out"
    done = _curve(root, out)
    assert done.returncode == 0, done.stdout + done.stderr
    return root, out, done, (out / "learning_curve.json").read_text(encoding="utf-8")


def test_two_fractions_by_two_seeds_land_four_experiments_on_nested_subsets(curved):
    root, out, done, _ = curved
    assert "learning-curve: 2 fractions × 2 seeds = 4 runs; 0 landed before and are " \
           "reused, 4 to run; about " in done.stderr
    shown = json.loads(run(root, "dvc", "exp", "show", "--json"))
    for name in NAMES:
        (exp,) = exp_named(shown, name)
        params = exp["data"]["params"]["params.yaml"]["data"]
        assert params["train"]["fraction"] == float(name.split("fraction")[1].split("-")[0])
    record = json.loads((out / "learning_curve.json").read_text(encoding="utf-8"))
    counts = json.loads(run(root, "git", "show", "HEAD:metrics/data.json"))["class_counts"]
    half = sum(-(-n // 2) for n in counts["train"].values())  # ceil of each class's half
    assert [f["train_rows"] for f in record["fractions"]] == [half, sum(counts["train"].values())]
    assert [[r["experiment"] for r in f["runs"]] for f in record["fractions"]] == \
        [NAMES[:2], NAMES[2:]]
    assert record["fit"] is None and record["failed"] == []
    assert record["sentence"].startswith("cannot fit accuracy = a − b·n^(−c) (3 parameters) "
                                         "to 2 fractions")
    assert (out / "learning-curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert done.stdout.splitlines()[-2] == f"learning-curve: {record['sentence']}"


def test_a_second_invocation_reuses_every_run_and_trains_nothing(curved):
    root, out, _, first = curved
    before = run(root, "git", "for-each-ref", "refs/exps")
    again = _curve(root, out)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "4 landed before and are reused, 0 to run; nothing to train" in again.stderr
    assert " on Ray " not in again.stderr  # no cluster started
    assert run(root, "git", "for-each-ref", "refs/exps") == before
    assert (out / "learning_curve.json").read_text(encoding="utf-8") == first
    folder = re.search(r"logs in (\S+)/logs", curved[2].stderr)
    assert folder, curved[2].stderr
    shutil.rmtree(Path(folder.group(1)))  # the sweep's logs, kept for a failed run
