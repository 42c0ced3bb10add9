"""``lorasent reproduce`` (issue 50): the tiers on files made here (fast), and the command
on clones of the session's tiny run (end to end): identical, equivalent with the CPU's
kernels capped, consistent and different against a committed run changed on purpose,
the refusals, and an interrupted rerun that leaves nothing behind."""

import itertools
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from lorasent.metrics import predictions_csv
from lorasent.review import reproduce as rp
from lorasent.review import tiers
from lorasent.review.diffs import TOLERANCE, json_diff, table_diff
from lorasent.review.tiers import Verdict, machine_rows, verdict_of

LABELS = ["negative", "neutral", "positive"]
PREDICTIONS = "metrics/predictions.csv"


def rows(n: int = 60, seed: int = 0) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``n`` rows: ids, gold ids and probabilities whose top-two margin is at least 0.1."""
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet([1, 1, 1], n)
    probs[:, rng.integers(0, 3)] += 0.3
    probs /= probs.sum(axis=1, keepdims=True)
    top = np.sort(probs, axis=1)
    assert (top[:, -1] - top[:, -2]).min() > 0.001
    return [f"row{i:03d}" for i in range(n)], rng.integers(0, 3, n), probs


def csv_bytes(ids: list[str], gold: np.ndarray, probs: np.ndarray) -> bytes:
    return predictions_csv(ids, gold.tolist(), np.log(probs), LABELS).encode()


def test_no_file_that_differs_is_identical():
    verdict = verdict_of({}, rev="HEAD", commit="abcdef123", outputs=16)
    assert verdict.tier == "identical" and verdict.ok
    assert verdict.text().splitlines()[0] == (
        "reproduce: identical: every output of HEAD (abcdef1) byte for byte (16 outputs; the "
        "provenance records describe the machines, below)")


def test_probabilities_within_the_tolerance_and_a_near_tie_are_equivalent():
    ids, gold, probs = rows()
    moved = probs + np.array([2e-6, -1e-6, -1e-6])  # as the kernels capped move them
    tie = np.array([0.4, 0.39995, 0.20005])  # top-two margin 5e-5 < 1e-4
    old, new = probs.copy(), moved.copy()
    old[0], new[0] = tie, tie[[1, 0, 2]]  # row000 flips between two near-equal classes
    verdict = verdict_of({PREDICTIONS: (csv_bytes(ids, gold, old), csv_bytes(ids, gold, new))},
                         rev="HEAD", commit="abcdef1")
    assert verdict.tier == "equivalent", verdict.text()
    assert verdict.line.startswith(
        "the same predicted labels as HEAD (abcdef1) but 1 near-tie rows (top-two margin under "
        "0.0001: row000); probabilities within 5e-05 (tolerance 0.0001)")
    [only] = verdict.sets
    assert (only.flipped, only.near_ties) == (["row000"], ["row000"])


def test_a_reference_s_predictions_within_the_tolerance_are_equivalent_not_bytes():
    """The fresh-clone `make run` of issue 61 on another AMD EPYC (avx_vnni, OpenBLAS's
    Haswell kernels): every predictions file byte for byte but the encoder reference's,
    its probabilities up to 1.1e-5 apart, and `different` for two files judged as bytes."""
    ids, gold, probs = rows()
    moved = probs + np.array([1.1e-5, -1e-5, -1e-6])
    pairs = {f"metrics/references/encoder/{name}.csv": (csv_bytes(ids, gold, probs),
                                                        csv_bytes(ids, gold, moved))
             for name in ("test", "reviews-zh")}
    verdict = verdict_of(pairs, rev="HEAD", commit="abcdef1")
    assert verdict.tier == "equivalent", verdict.text()
    assert verdict.line.startswith("the same predicted labels on every test row of HEAD "
                                   "(abcdef1); probabilities within 1.1e-05")
    assert [s.name for s in verdict.sets] == sorted(pairs)
    assert "bytes differ" not in verdict.text()


def test_a_probability_over_the_tolerance_is_not_equivalent_but_consistent():
    ids, gold, probs = rows()
    moved = probs.copy()
    moved[3] += np.array([-4e-4, 4e-4, 0])  # another CPU family: 4e-4, same labels
    verdict = verdict_of({PREDICTIONS: (csv_bytes(ids, gold, probs),
                                        csv_bytes(ids, gold, moved))}, rev="HEAD")
    assert verdict.tier == "consistent" and verdict.ok
    assert verdict.line.startswith("0 of 60 predictions differ from HEAD; no detectable "
                                   "difference: accuracy +0.000 [+0.000, +0.000]")
    assert "probabilities up to 0.0004 apart" in verdict.text()


def test_a_few_flipped_rows_are_consistent_and_many_are_different():
    ids, gold, probs = rows(200)
    flipped = probs.copy()
    flipped[:3] = flipped[:3][:, [1, 2, 0]]  # 3 rows another label by a clear margin
    few = verdict_of({PREDICTIONS: (csv_bytes(ids, gold, probs), csv_bytes(ids, gold, flipped))},
                     rev="HEAD")
    assert few.tier == "consistent", few.text()
    right = np.eye(3)[gold] * 0.9 + 0.1 / 3  # B right on every row: far better
    many = verdict_of({PREDICTIONS: (csv_bytes(ids, gold, probs), csv_bytes(ids, gold, right))},
                      rev="HEAD")
    assert many.tier == "different" and not many.ok
    assert "this run is better than HEAD" in many.line


def test_inputs_that_differ_are_different_whatever_the_predictions():
    verdict = verdict_of({"data/split/test.jsonl": (b"a", b"b")}, rev="v1",
                         inputs=["data/split"])
    assert verdict.tier == "different"
    assert verdict.line.startswith("its inputs differ from v1's (data/split)")


def test_metrics_from_labels_must_be_equal_and_from_probabilities_within_their_tolerance():
    old = json.dumps({"accuracy": 0.7, "calibration": {"nll": 0.65, "ece": 0.036}}).encode()
    near = json.dumps({"accuracy": 0.7, "calibration": {"nll": 0.6504, "ece": 0.03605}}).encode()
    far = json.dumps({"accuracy": 0.7, "calibration": {"nll": 0.66, "ece": 0.036}}).encode()
    moved = json.dumps({"accuracy": 0.71, "calibration": {"nll": 0.65, "ece": 0.036}}).encode()
    found = json_diff("metrics/eval.json", old, near, TOLERANCE, labels_moved=False)
    assert found.within and found.deviation == (
        "largest deviation 0.0004 at calibration.nll (allowed 0.00065)")
    assert not json_diff("m.json", old, far, TOLERANCE, labels_moved=False).within
    assert not json_diff("m.json", old, moved, TOLERANCE, labels_moved=False).within
    follows = json_diff("m.json", old, moved, TOLERANCE, labels_moved=True)
    assert follows.within and "(follows from rows that moved)" in follows.deviation


def test_a_training_history_within_its_tolerance():
    old = b"step\tloss\n1\t1.0\n2\t0.5\n"
    assert table_diff("loss.tsv", old, b"step\tloss\n1\t1.0004\n2\t0.5\n", TOLERANCE).within
    assert not table_diff("loss.tsv", old, b"step\tloss\n1\t1.01\n2\t0.5\n", TOLERANCE).within


def test_the_machines_side_by_side_say_what_a_record_lacks():
    record = {"device": {"device": "cpu", "cpu": "AMD EPYC", "torch_threads": 2,
                         "kernels": {"torch_cpu_capability": "AVX2", "numpy_simd": "X86_V3",
                                     "cpu_flags": ["avx", "avx2"], "variables": {}},
                         "container": {"in_container": False}},
              "processes": 1, "params": {"base": {"precision": "auto"}},
              "packages": {"torch": "2.13.0+cpu", "numpy": "2.4.6"}, "python": "3.11.7"}
    older = json.loads(json.dumps(record))
    del older["device"]["kernels"]
    older["device"]["container"]["in_container"] = True
    table = {name: (a, b) for name, a, b in machine_rows(older, record)}
    assert table["torch CPU capability"] == ("not recorded", "AVX2")
    assert table["kernel CPU flags"] == ("not recorded", "avx,avx2")
    assert table["kernel variables"] == ("not recorded", "none")
    assert table["venv or container"] == ("container", "venv")
    assert table["torch threads"] == ("2", "2")


def test_a_long_value_of_revs_machine_keeps_the_columns_apart():
    """AVX-512's CPU flags run past the 28 characters of REV's column: the two sides stay
    two spaces apart, and every row's second side starts in the same column."""
    flags = "avx,avx2,fma,f16c,avx512f,avx512cd,avx512bw,avx512_bf16"
    verdict = Verdict("identical", "HEAD", "0" * 40, "line", machines=[
        ("device", "cpu", "cpu"), ("kernel CPU flags", flags, "avx,avx2")])
    header, device, cpu_flags = verdict.text().splitlines()[1:]
    assert cpu_flags.endswith(f"{flags}  avx,avx2   ≠")
    starts = {line.rindex(side) for line, side in
              ((header, "this run"), (device, "cpu"), (cpu_flags, "avx,avx2   ≠"))}
    assert len(starts) == 1


def test_no_train_without_revs_adapter_runs_the_whole_pipeline_after_saying_so(
        tmp_path, monkeypatch):
    """REV's outputs in neither the cache nor a remote: the rerun trains, and says first how
    long the stages took when they last ran here."""
    machine = tmp_path / "metrics" / "provenance" / "machine"
    machine.mkdir(parents=True)
    for stage, seconds in (("baseline", 65), ("train", 524), ("evaluate", 208)):
        (machine / f"{stage}.json").write_text(json.dumps({"wall_time_s": seconds}))
    ran: list[list[str]] = []
    said: list[str] = []
    monkeypatch.setattr(rp, "run_dvc", lambda *a, **k: "/cache")
    monkeypatch.setattr(rp, "_run", lambda argv, cwd, progress: ran.append(argv[1:]))
    monkeypatch.setattr(rp, "_checkout", lambda clone, progress, timeout_s: set())
    judged = tiers.Verdict("identical", "HEAD", "abc", "judged")
    monkeypatch.setattr(rp, "judge", lambda *a, **k: judged)
    assert rp._rerun(tmp_path, "HEAD", "abc", tmp_path / "clone", True, TOLERANCE,
                     said.append) is judged
    assert ["repro", "--quiet", "--force", "--no-run-cache"] in ran
    assert said[-1] == ("reproduce: HEAD's models/adapter, data/split, models/base are neither "
                        "in the DVC cache nor on a remote: the pipeline runs from the start, "
                        "training included (about 13 min 17 s, as they last took here)")


NO_RECORD = "no record of these stages on this machine to estimate from"
BENCH_STEP = 1.609191846000158  # bench/results.json's fp32 project step when this was written


def _bench(step: Any = BENCH_STEP, batch: Any = 8) -> dict[str, Any]:
    """A bench/results.json as make bench writes it, its train part trimmed to what the
    estimate reads beside a way it does not."""
    return {"machine": {"cpu": "AMD EPYC", "cores": 2},
            "results": {"train": {"gemma-3-270m": {
                "model": "gemma-3-270m", "batch_size": batch,
                "ways": {"project": {"seconds_per_step": step, "compute_dtype": "fp32"},
                         "project_bf16": {"seconds_per_step": 0.89, "compute_dtype": "bf16"}}}}}}


def _train_record(steps: Any = 400, batch: Any = 8,
                  model: Any = "packaged:gemma-3-270m") -> dict[str, Any]:
    return {"stage": "train", "status": "ok", "steps": steps, "effective_batch_size": batch,
            "params": {"base": {"model": model}}, "compute_dtype": "fp32"}


def _committed(repo: Path, bench: Any, record: Any) -> Path:
    """``repo`` holding the committed train record and bench results (each a JSON value,
    text or bytes written as they are, or None for no file), no machine record."""
    for path, value in ((repo / rp.TRAIN_RECORD, record), (repo / rp.BENCH_RESULTS, bench)):
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(value, bytes):
            path.write_bytes(value)
        elif value is not None:
            path.write_text(value if isinstance(value, str) else json.dumps(value), "utf-8")
    return repo


def test_a_fresh_clone_s_retraining_is_estimated_from_the_committed_steps_and_bench_step(
        tmp_path, monkeypatch):
    """Issue 70: a fresh clone has no machine record, so --no-train's retraining gave no
    estimate; the committed train record's steps times make bench's committed step give
    one, naming its source and the stages it leaves out."""
    _committed(tmp_path, _bench(), _train_record())
    said: list[str] = []
    monkeypatch.setattr(rp, "run_dvc", lambda *a, **k: "/cache")
    monkeypatch.setattr(rp, "_run", lambda argv, cwd, progress: None)
    monkeypatch.setattr(rp, "_checkout", lambda clone, progress, timeout_s: set())
    monkeypatch.setattr(rp, "judge", lambda *a, **k: tiers.Verdict("identical", "HEAD", "a", ""))
    rp._rerun(tmp_path, "HEAD", "abc", tmp_path / "clone", True, TOLERANCE, said.append)
    assert said[-1] == ("reproduce: HEAD's models/adapter, data/split, models/base are neither "
                        "in the DVC cache nor on a remote: the pipeline runs from the start, "
                        "training included (about 11 min: 400 steps x 1.61 s a step (make "
                        "bench's fp32 step on its machine, bench/results.json), not this "
                        "machine's; baseline and evaluate not estimated)")


@pytest.mark.parametrize(("steps", "step", "about"), [
    (1, 0.5, "0 s"), (5, 1.61, "8 s"), (55, 1.61, "89 s"), (56, 1.61, "2 min"),
    (400, 1.609191846, "11 min"), (10_000, 2.0, "333 min")])
def test_the_committed_estimate_s_figure_for_many_sizes(steps, step, about, tmp_path):
    repo = _committed(tmp_path, _bench(step), _train_record(steps))
    assert rp._estimate(repo, ["train"]) == (
        f"about {about}: {steps} steps x {step:.2f} s a step (make bench's fp32 step on its "
        "machine, bench/results.json), not this machine's")


def _damaged_benches() -> list[Any]:
    good = json.dumps(_bench())
    cut = [good[:n] for n in range(0, len(good), 17)]  # every truncation, empty included
    wrong = [_bench(step) for step in (0, -1.6, True, "1.6", None, [1.6], float("inf"))]
    wrong += [_bench(batch=b) for b in (16, "8", None)]  # another batch's step
    missing = []
    for path in (("results",), ("results", "train"), ("results", "train", "gemma-3-270m"),
                 ("results", "train", "gemma-3-270m", "ways"),
                 ("results", "train", "gemma-3-270m", "ways", "project"),
                 ("results", "train", "gemma-3-270m", "ways", "project", "seconds_per_step"),
                 ("results", "train", "gemma-3-270m", "batch_size")):
        bench = _bench()
        *above, key = path
        node = bench
        for k in above:
            node = node[k]
        del node[key]
        missing.append(bench)
    other_model = _bench()
    other_model["results"]["train"] = {"gemma-2b": other_model["results"]["train"].popitem()[1]}
    return [None, b"\xff\xfe{}", "NaN", "[]", '{"results": []}', *cut, *wrong, *missing,
            other_model, '{"results": {"train": {"gemma-3-270m": {"ways": {"project": '
            '{"seconds_per_step": NaN}}, "batch_size": 8}}}}']


@pytest.mark.parametrize("bench", _damaged_benches())
def test_an_absent_or_damaged_bench_file_keeps_the_no_record_line(bench, tmp_path):
    """Every truncation, every missing key, every wrong type or value, another model's or
    batch's step: no estimate, no traceback."""
    repo = _committed(tmp_path, bench, _train_record())
    assert rp.bench_train_step(repo / rp.BENCH_RESULTS, "gemma-3-270m", 8) is None
    assert rp._estimate(repo, ["baseline", "train", "evaluate"]) == NO_RECORD


@pytest.mark.parametrize("record", [
    None, "", "{", "[]", _train_record(steps=0), _train_record(steps=True),
    _train_record(steps=400.0), _train_record(steps="400"), _train_record(batch=0),
    _train_record(model="hf:google/gemma-3-270m"), _train_record(model=None),
    _train_record(model="packaged:gemma-2b"), _train_record(batch=16),
    {"steps": 400, "effective_batch_size": 8}, {"steps": 400, "params": {"base": {}}}])
def test_a_train_record_without_what_the_estimate_needs_keeps_the_no_record_line(
        record, tmp_path):
    repo = _committed(tmp_path, _bench(), record)
    assert rp._estimate(repo, ["baseline", "train", "evaluate"]) == NO_RECORD


def test_only_a_training_is_estimated_from_the_committed_files(tmp_path):
    """The evaluate stage alone (re-scoring REV's adapter): no committed file holds its
    time on the real data, so no estimate."""
    repo = _committed(tmp_path, _bench(), _train_record())
    assert rp._estimate(repo, ["evaluate"]) == NO_RECORD


def test_this_machine_s_records_are_preferred_to_the_committed_estimate(tmp_path):
    repo = _committed(tmp_path, _bench(), _train_record())
    machine = repo / "metrics" / "provenance" / "machine"
    machine.mkdir(parents=True)
    for stage, seconds in (("baseline", 65), ("train", 524), ("evaluate", 208)):
        (machine / f"{stage}.json").write_text(json.dumps({"wall_time_s": seconds}))
    assert rp._estimate(repo, ["baseline", "train", "evaluate"]) == (
        "about 13 min 17 s, as they last took here")
    assert rp._estimate(repo, ["evaluate"]) == "about 3 min 28 s, as they last took here"


@pytest.mark.parametrize("ran", [
    ran for n in range(len(rp.MODEL_STAGES) + 1)
    for ran in itertools.combinations(rp.MODEL_STAGES, n)])
def test_the_verdict_names_every_stage_dvc_skipped_in_one_line(ran, tmp_path, monkeypatch):
    """Issue 70: a fresh clone's run whose train made REV's adapter byte for byte, where DVC
    skipped baseline as well as evaluate, named evaluate alone. Every set of stages with a
    machine record here (made from records written here, no DVC run): each one without is
    named, in pipeline order, in one line; with neither train nor evaluate, refused."""
    from lorasent.provenance import machine_path, record_sha256

    for stage in ran:  # a tracked record and this machine's record of it
        tracked = tmp_path / "metrics" / "provenance" / f"{stage}.json"
        machine = tmp_path / machine_path(tracked.relative_to(tmp_path))
        machine.parent.mkdir(parents=True, exist_ok=True)
        tracked.write_text(f'{{"stage": "{stage}"}}')
        machine.write_text(json.dumps({"record_sha256": record_sha256(tracked.read_text()),
                                       "host": "here"}))
    monkeypatch.setattr(rp, "check_revisions", lambda *a, **k: None)
    monkeypatch.setattr(rp, "_full_commit", lambda repo, rev: "abcdef1")
    monkeypatch.setattr(rp, "not_reps", lambda repo, commit: ([], []))
    monkeypatch.setattr("lorasent.review.collect.workspace_staleness", lambda repo: None)
    judged: list[str] = []

    def judge(*args: Any, record_stage: str = "evaluate") -> Verdict:
        judged.append(record_stage)
        return Verdict("identical", "HEAD", "abcdef1", "judged")

    monkeypatch.setattr(rp, "judge", judge)
    if "train" not in ran and "evaluate" not in ran:
        with pytest.raises(rp.NotAReproduction, match="no machine record of its train or "
                                                      "evaluate stage"):
            rp.reproduce(tmp_path, workspace=True)
        return
    verdict = rp.reproduce(tmp_path, workspace=True)
    assert judged == ["evaluate" if "evaluate" in ran else "train"]
    skipped = [stage for stage in rp.MODEL_STAGES if stage not in ran]
    assert verdict.notes == ([rp.skipped_note(ran)] if skipped else [])
    if skipped:
        [note] = verdict.notes
        assert "\n" not in note
        assert note.startswith(f"  {' and '.join(skipped)} did not run here: ")
        assert note.endswith(f"`dvc repro --force --single-item {' '.join(skipped)}` runs "
                             f"{'them' if len(skipped) > 1 else 'it'} here")
        assert all(f"{stage}'s: " in note for stage in skipped)
        assert not any(f"{stage}'s: " in note for stage in ran)


def test_the_skipped_stages_line_reads_so():
    """The two lines a fresh clone's run gives: DVC skipped evaluate; it skipped baseline
    and evaluate (issue 70's run)."""
    assert rp.skipped_note(["baseline", "train"]) == (
        "  evaluate did not run here: DVC found its inputs unchanged (evaluate's: the "
        "adapter, the split, the baseline's scores) and kept its outputs (metrics/eval.json "
        "and the rest) as they were; `dvc repro --force --single-item evaluate` runs it here")
    assert rp.skipped_note(["train"]) == (
        "  baseline and evaluate did not run here: DVC found their inputs unchanged "
        "(baseline's: the split, the base model; evaluate's: the adapter, the split, the "
        "baseline's scores) and kept their outputs (metrics/baseline.json, metrics/eval.json "
        "and the rest) as they were; `dvc repro --force --single-item baseline evaluate` "
        "runs them here")
    assert rp.skipped_note(rp.MODEL_STAGES) is None


def test_the_tolerance_s_default_is_the_one_the_help_gives():
    from lorasent.cli import main

    help_text = CliRunner().invoke(main, ["reproduce", "--help"]).output
    assert f"[default: {TOLERANCE:g}]" in " ".join(help_text.split())
    bad = CliRunner().invoke(main, ["reproduce", "--tolerance", "2", "--workspace"])
    assert bad.exit_code == 1
    assert "--tolerance must be in (0, 1); got 2" in bad.output


@pytest.mark.parametrize(("change", "platform"), [
    ({"base": {"precision": "bf16"}}, ["base.precision bf16 (REV: auto)"]),
    ({"base": {"precision": "bf16", "device": "cpu"}},
     ["base.device cpu (REV: auto)", "base.precision bf16 (REV: auto)"]),
    ({"base": {"precision": "bf16"}, "train": {"learning_rate": 0.001}}, None),
    ({"base": {"seed": 7}}, None),
])
def test_a_params_file_that_differs_only_in_how_it_computes_is_another_platform(
        tmp_path, change, platform):
    """``base.precision: bf16`` on a CPU (or another device) runs REV's computation on
    another platform: judged, with the params named; any other change is not REV's run."""
    from lorasent.git import run_git

    params: dict[str, dict[str, Any]] = {
        "base": {"device": "auto", "precision": "auto", "seed": 42},
        "train": {"learning_rate": 0.0002}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    for args in (["init", "-q"], ["add", "params.yaml"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "run"]):
        run_git(tmp_path, *args)
    commit = run_git(tmp_path, "rev-parse", "HEAD").stdout.strip()
    changed = {k: {**params[k], **change.get(k, {})} for k in params}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(changed))
    assert rp.platform_changes(tmp_path, commit, ["params.yaml"]) == platform
    assert rp.platform_changes(tmp_path, commit, ["params.yaml", "src/x.py"]) is None


# ------------------------------------------------------------------ end to end


def lorasent(repo: Path, *args: str, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    from tiny_repo import env as tiny_env

    return subprocess.run([str(Path(sys.executable).parent / "lorasent"), "reproduce", *args],
                          cwd=repo, env={**tiny_env(), **(env or {})}, capture_output=True,
                          text=True, timeout=900)


def made_here(copy: Path, source: Path) -> Path:
    """The copy's outputs as if its stages had run in it: the run's machine records (tied
    to the same tracked bytes) copied from the checkout that ran them."""
    shutil.copytree(source / "metrics/provenance/machine", copy / "metrics/provenance/machine")
    return copy


def commit_changed_predictions(repo: Path, change) -> None:
    """A commit whose metrics/predictions.csv ``change`` rewrote (REV), its metrics that
    follow from it (eval.json's accuracy, macro-F1, per-class scores and confusion matrix,
    confusion.json) made again from it, so that REV is a whole run; then the run's own
    files back in the workspace: the workspace is the run, REV a run that differs."""
    from lorasent.metrics import confusion_records
    from tiny_repo import GIT, run

    path = repo / PREDICTIONS
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], *change(lines[1:])]) + "\n")
    made = _metrics_of(path.read_bytes())
    evals = json.loads((repo / "metrics/eval.json").read_text())
    evals.update({key: made[key] for key in ("accuracy", "macro_f1", "per_class",
                                             "confusion_matrix")})
    (repo / "metrics/eval.json").write_text(json.dumps(evals, indent=2) + "\n")
    (repo / "metrics/confusion.json").write_text(json.dumps(confusion_records(
        made["confusion_matrix"], made["labels"]), indent=2) + "\n")
    run(repo, *GIT, "commit", "-qam", "predictions changed")
    run(repo, "git", "checkout", "HEAD~1", "--", PREDICTIONS, "metrics/eval.json",
        "metrics/confusion.json")


def relabelled(rows: list[str], how_many: int, gold: bool = False) -> list[str]:
    """The first ``how_many`` rows predicted as another class by a clear margin (``gold``:
    as their gold class, a file damaged into claiming them right)."""
    out = []
    for i, line in enumerate(rows):
        cells = line.split(",")
        if i < how_many and cells[2] != (cells[1] if gold else None):
            other = cells[1] if gold else next(label for label in LABELS if label != cells[2])
            cells[2] = other
            cells[3:] = ["0.800000" if label == other else "0.100000" for label in LABELS]
        out.append(",".join(cells))
    return out


@pytest.mark.slow
def test_the_workspace_of_a_run_is_identical_then_refused_when_it_is_not_revs(
        tiny_copy, tiny_run):
    repo = made_here(tiny_copy, tiny_run)
    done = lorasent(repo, "--workspace")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("reproduce: identical: every output of HEAD (")
    (repo / "notes.txt").write_text("mine")
    done = lorasent(repo, "--workspace")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        "lorasent reproduce: error: the workspace holds files that are not HEAD's (notes.txt); "
        "commit or stash them (git stash -u), or run `lorasent reproduce HEAD` without "
        "--workspace, which reruns it in a clean clone\n")
    (repo / "notes.txt").unlink()
    params = (repo / "params.yaml").read_text()
    (repo / "params.yaml").write_text(params.replace("max_steps: 3", "max_steps: 4"))
    done = lorasent(repo, "--workspace")
    assert done.returncode == 1
    assert done.stderr == (
        "lorasent reproduce: error: params or code differ from HEAD's (params.yaml): this is "
        "not a reproduction of HEAD; `lorasent compare HEAD workspace` compares the two runs\n")
    after = lorasent(repo, "--after-run")  # make run's call: said, not refused
    assert after.returncode == 0 and after.stdout.startswith(
        "run: not judged as a reproduction of HEAD: params or code differ")


@pytest.mark.slow
def test_a_run_whose_training_made_revs_adapter_is_judged_without_an_evaluate_record(
        tiny_copy, tiny_run):
    """A fresh clone's ``make run`` on REV's kind of machine: train makes REV's adapter
    byte for byte, so DVC skips evaluate and no machine record of it is written here. The
    verdict is judged on what ran (train's record names the machines) and says that
    evaluate kept the scores (at 2362f7d: "not judged", although the run reproduced the
    adapter); with neither record, still not judged."""
    repo = made_here(tiny_copy, tiny_run)
    machine = repo / "metrics/provenance/machine"
    (machine / "evaluate.json").unlink()
    done = lorasent(repo, "--after-run")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("reproduce: identical: every output of HEAD ("), done.stdout
    assert lines[1] == rp.skipped_note(["baseline", "train"])
    (machine / "train.json").unlink()
    done = lorasent(repo, "--after-run")
    assert done.stdout.startswith("run: not judged as a reproduction of HEAD: HEAD's outputs "
                                  "were not made here (no machine record of its train or "
                                  "evaluate stage"), done.stdout


@pytest.mark.slow
def test_a_run_a_few_rows_from_rev_is_consistent_and_one_far_from_it_different(
        tiny_copy, tiny_run):
    repo = made_here(tiny_copy, tiny_run)
    commit_changed_predictions(repo, lambda rows: relabelled(rows, 2))
    done = lorasent(repo, "--workspace")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("reproduce: consistent: 2 of 24 predictions differ from HEAD")
    assert "metrics/predictions.csv: 2 of 24 predicted labels differ (0 near a tie)" in done.stdout
    from tiny_repo import run

    run(repo, "git", "reset", "-q", "--hard", "HEAD~1")
    # a run right on every row, where this one was right on 6 of the 24
    commit_changed_predictions(repo, lambda rows: relabelled(rows, 24, gold=True))
    done = lorasent(repo, "--workspace")
    assert done.returncode == 1
    assert done.stdout.startswith("reproduce: different: 18 of 24 predictions differ from "
                                  "HEAD"), done.stdout
    assert "this run is worse than HEAD: accuracy −0.750 [−0.917, −0.583]" in done.stdout
    assert "✗ metrics/predictions.csv: 18 of 24 predicted labels differ" in done.stdout


@pytest.mark.slow
def test_revs_adapter_rescored_with_the_kernels_capped_is_equivalent(tiny_copy):
    """Another CPU simulated on this one: torch's ATen kernels at their baseline, oneDNN
    at SSE4.1, MKL in its compatible mode. The evaluate stage reruns in a clone; its
    probabilities move (the measured deviation is in docs/reproducibility.md), its labels
    do not."""
    capped = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
              "MKL_CBWR": "COMPATIBLE"}
    done = lorasent(tiny_copy, "--no-train", env=capped)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("reproduce: equivalent: the same predicted labels on every test "
                               "row of HEAD (")
    # which files' rounded probabilities move depends on the CPU: every one that does
    # keeps every label (on AVX-512, only the second test set's moved at 6 digits)
    listed = [line for line in lines if line.strip().endswith("apart")
              and "predictions.csv: " in line]
    assert listed and all(re.search(r"predictions\.csv: 0 of \d+ predicted labels differ", line)
                          for line in listed), done.stdout
    capability = next(line for line in lines if "torch CPU capability" in line)
    assert capability.split()[-2:] == ["DEFAULT", "≠"]
    assert "reproduce: re-scoring HEAD's adapter (" in done.stderr
    assert subprocess.run(["git", "status", "--porcelain"], cwd=tiny_copy, capture_output=True,
                          text=True).stdout == ""  # the rerun was in a clone


@pytest.mark.slow
def test_an_interrupted_rerun_leaves_no_clone_and_the_workspace_as_it_was(tiny_copy, tmp_path):
    from tiny_repo import env as tiny_env

    temp = tmp_path / "temp"
    temp.mkdir()
    before = subprocess.run(["git", "status", "--porcelain"], cwd=tiny_copy,
                            capture_output=True, text=True).stdout
    proc = subprocess.Popen([str(Path(sys.executable).parent / "lorasent"), "reproduce",
                             "--no-train"], cwd=tiny_copy, env={**tiny_env(), "TMPDIR": str(temp)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not any((c / "metrics").is_dir() for c in temp.glob("lorasent-reproduce-*")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no clone after 300 s"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert list(temp.iterdir()) == [], (out, err)
    assert subprocess.run(["git", "status", "--porcelain"], cwd=tiny_copy, capture_output=True,
                          text=True).stdout == before


def test_seed_groups_are_judged_by_welch_s_test_and_reported_by_their_olympic_means(
        monkeypatch):
    """MLPerf's way for a new platform over seeds: each group's olympic mean (less its best
    and worst run) and Welch's t-test of the accuracies; no detectable difference is
    consistent, a real one different."""
    runs = {"ref-seed1": 0.70, "ref-seed2": 0.71, "ref-seed3": 0.69, "ref-seed4": 0.74,
            "mine-seed1": 0.705, "mine-seed2": 0.695, "mine-seed3": 0.715, "mine-seed4": 0.70,
            "far-seed1": 0.61, "far-seed2": 0.60, "far-seed3": 0.62, "far-seed4": 0.605}
    monkeypatch.setattr("lorasent.review.collect.expand_group", lambda repo, spec, **_: sorted(
        r for r in runs if r.startswith(spec[:-1])))
    monkeypatch.setattr(tiers, "check_revisions", lambda repo, sides, **_: None)
    monkeypatch.setattr(tiers, "resolve_commits", lambda repo, *revs: {r: r for r in revs})
    monkeypatch.setattr(tiers, "read_at", lambda repo, rev, path: json.dumps(
        {"accuracy": runs[rev]}) if path == "metrics/eval.json" else None)
    same = tiers.judge_groups(Path("."), "ref-seed*", "mine-seed*")
    assert same.tier == "consistent"
    assert same.line == (
        "no detectable difference over seeds: accuracy over seeds: ref-seed* 0.7100 ± 0.0216 "
        "(4 seeds), olympic mean 0.7050; mine-seed* 0.7037 ± 0.0085 (4 seeds), olympic mean "
        "0.7025; Δ −0.006, Welch's t-test p = 0.62")
    far = tiers.judge_groups(Path("."), "ref-seed*", "far-seed*")
    assert far.tier == "different" and far.line.endswith(": the groups differ")


@pytest.mark.slow
def test_a_damaged_adapter_in_the_cache_stops_the_rescoring_in_one_line(tiny_copy, tmp_path):
    """What the cache gives is hashed against REV's dvc.lock before it is used (issue 51's
    kind): one byte of the adapter's weights changed in a cache of the copy's own."""
    from tiny_repo import run

    cache = tmp_path / "cache"
    shutil.copytree(run(tiny_copy, "dvc", "cache", "dir").strip(), cache)
    run(tiny_copy, "dvc", "cache", "dir", "--local", str(cache))
    lock = yaml.safe_load((tiny_copy / "dvc.lock").read_text())
    listing = next(out["md5"] for out in lock["stages"]["train"]["outs"]
                   if out["path"] == "models/adapter")
    entries = json.loads((cache / "files/md5" / listing[:2] / listing[2:]).read_text())
    weights = next(e["md5"] for e in entries if e["relpath"] == "adapter_model.safetensors")
    blob = cache / "files/md5" / weights[:2] / weights[2:]
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    done = lorasent(tiny_copy, "--no-train")
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("lorasent reproduce: error: models/adapter/adapter_model.safetensors "
                           "as pulled from the DVC cache is damaged: its md5 is "), last
    assert f"dvc.lock records {weights} (stage train)" in last


def test_a_row_on_an_ece_bin_s_edge_lets_the_ece_follow_the_predictions():
    """A confidence within the tolerance of a bin's edge (k/15) can change bins with a
    deviation of 1e-6, and the ECE with it by far more than its tolerance: then the ECE
    and the reliability diagram follow from the predictions (all within the tolerance),
    as the audit's flags do."""
    ids, gold, probs = rows()
    on_edge = probs.copy()
    on_edge[5] = [0.6 + 2e-6, 0.25, 0.15 - 2e-6]  # 0.6 = 9/15, an edge
    moved = on_edge.copy()
    moved[5] = [0.6 - 1e-6, 0.25, 0.15 + 1e-6]
    old_eval = json.dumps({"calibration": {"ece": 0.036}}).encode()
    new_eval = json.dumps({"calibration": {"ece": 0.039}}).encode()
    pairs = {PREDICTIONS: (csv_bytes(ids, gold, on_edge), csv_bytes(ids, gold, moved)),
             "metrics/eval.json": (old_eval, new_eval)}
    verdict = verdict_of(pairs, rev="HEAD")
    assert verdict.tier == "equivalent", verdict.text()
    assert verdict.sets[0].on_edge == 2
    away = {PREDICTIONS: (csv_bytes(ids, gold, probs), csv_bytes(ids, gold, probs + 1e-6)),
            "metrics/eval.json": (old_eval, new_eval)}
    assert verdict_of(away, rev="HEAD").tier == "consistent"  # ECE moved with no row on an edge


def test_the_paired_verdict_names_this_run_and_rev_in_sentence_case():
    """The verdict line after "consistent: ...; " starts lower-case; its second sentence
    ("This run and HEAD are right ...") upper-case, as a sentence does."""
    from lorasent.statistics import paired_comparison

    y = np.array([0, 1, 2, 0, 1, 2])
    said = tiers._paired_said(paired_comparison(y, y, y, LABELS), "HEAD")
    assert said.startswith("no detectable difference: accuracy +0.000")
    assert said.endswith(". This run and HEAD are right on exactly the same rows.")


# ------------------------------------------- issue 62, kind 3: files that are not what they claim

DAMAGED = "reproduce: different: damaged (not what it claims, so nothing is judged on it): "
RESTORE = ("; restore this run's (git checkout, dvc pull) or remake it (dvc repro), then judge "
           "again")


def _rewritten(data: bytes, change) -> bytes:
    """A predictions file with ``change`` applied to each row's probabilities (a list of
    3 floats, written back to 6 decimals) and predicted label."""
    import csv
    import io

    table = list(csv.reader(io.StringIO(data.decode())))
    for row in table[1:]:
        row[2], probs = change(row[2], [float(x) for x in row[3:]])
        row[3:] = [f"{p:.6f}" for p in probs]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(table)
    return out.getvalue().encode()


def test_probabilities_that_do_not_sum_to_one_are_damaged_in_the_first_line():
    """Issue 62: rows summing to 0.5, with the same labels, were "consistent"."""
    ids, gold, probs = rows()
    good = csv_bytes(ids, gold, probs)
    halved = _rewritten(good, lambda label, p: (label, [x / 2 for x in p]))
    total = sum(round(x / 2, 6) for x in map(float, good.decode().splitlines()[1].split(",")[3:]))
    verdict = verdict_of({PREDICTIONS: (good, halved)}, rev="HEAD")
    assert (verdict.tier, verdict.ok) == ("different", False)
    assert verdict.text().splitlines()[0] == (
        f"{DAMAGED}this run's metrics/predictions.csv: the probabilities of 60 of its 60 rows "
        f"do not sum to 1 (row row000: {total:.6g}; allowed ±0.0001), so they are no "
        f"probabilities{RESTORE}")
    # REV's side, named as REV's; a predicted label that is not the row's most probable
    swapped = _rewritten(good, lambda label, p: (
        LABELS[int(np.argmin(p))] if label == "neutral" else label, p))
    neutral = [i for i in range(60) if probs[i].argmax() == 1]
    i = neutral[0]
    line = verdict_of({PREDICTIONS: (swapped, good)}, rev="v1").text().splitlines()[0]
    assert line == (
        "reproduce: different: damaged (not what it claims, so nothing is judged on it): v1's "
        f"metrics/predictions.csv: {len(neutral)} of its 60 rows predict a label that is not "
        f"their most probable class (row {ids[i]}: predicted {LABELS[probs[i].argmin()]} at "
        f"{round(probs[i].min(), 6):.6g}, neutral at {round(probs[i, 1], 6):.6g}); v1's are "
        "as committed: judge against a revision whose files are whole")
    # a probability outside [0, 1]: the reader's own line, as damage
    over = _rewritten(good, lambda label, p: (label, [p[0] + 1, p[1], p[2]]))
    line = verdict_of({PREDICTIONS: (good, over)}, rev="HEAD").text().splitlines()[0]
    assert line == (f"{DAMAGED}this run's metrics/predictions.csv: line 2 (id row000): "
                    f"p_negative is '{round(probs[0, 0], 6) + 1:.6f}', not a probability in "
                    f"[0, 1]{RESTORE}")


def _metrics_of(data: bytes) -> dict[str, Any]:
    from lorasent.metrics import classification_metrics, read_predictions

    p = read_predictions(data.decode(), "p")
    return {**classification_metrics(p.actual, p.predicted, p.labels), "labels": p.labels,
            "test_rows": len(p.ids)}


def _repo(root: Path, files: dict[str, bytes]) -> str:
    """A git repo in ``root`` whose dvc.lock lists ``files`` as evaluate's outputs, which
    git tracks; its commit."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
           "-c", "commit.gpgsign=false"]
    lock = {"schema": "2.0", "stages": {"evaluate": {"cmd": "lorasent evaluate", "outs": [
        {"path": name, "md5": "0" * 32} for name in files]}}}
    for name, data in {**files, "dvc.lock": yaml.safe_dump(lock).encode()}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "run"], cwd=root, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_a_hand_edited_eval_json_beside_the_same_predictions_is_damaged(tmp_path):
    """Issue 62: an eval.json that disagrees with identical predictions got the headline
    "no predictions"; the metrics are recomputed from the predictions beside them."""
    ids, gold, probs = rows()
    predictions = csv_bytes(ids, gold, probs)
    record = _metrics_of(predictions)
    commit = _repo(tmp_path, {PREDICTIONS: predictions,
                              "metrics/eval.json": json.dumps(record).encode()})
    (tmp_path / "metrics/eval.json").write_text(json.dumps({**record, "accuracy": 0.9}))
    verdict = tiers.judge(tmp_path, "HEAD", commit)
    assert verdict.text().splitlines()[0] == (
        f"{DAMAGED}this run's metrics/eval.json: accuracy 0.9 does not follow from "
        f"metrics/predictions.csv beside it ({record['accuracy']:.6g}){RESTORE}")
    # a confusion cell likewise, and an eval.json that stayed while the labels moved
    cells = [{"actual": a, "predicted": b, "count": n} for a, row in
             record["confusion_matrix"].items() for b, n in row.items()]
    flipped = probs.copy()
    flipped[:3] = flipped[:3][:, [1, 2, 0]]
    moved = csv_bytes(ids, gold, flipped)
    verdict = verdict_of({PREDICTIONS: (predictions, moved)}, rev="HEAD", beside={
        "metrics/eval.json": json.dumps(record).encode(),
        "metrics/confusion.json": json.dumps(cells).encode()})
    now = _metrics_of(moved)
    a, b = next((a, b) for a, row in record["confusion_matrix"].items() for b in row
                if row[b] != now["confusion_matrix"][a][b])
    assert verdict.text().splitlines()[0] == (
        "reproduce: different: damaged (not what they claim, so nothing is judged on them): "
        f"this run's metrics/confusion.json: the cell {a} → {b} counts "
        f"{record['confusion_matrix'][a][b]} rows where metrics/predictions.csv beside it "
        f"gives {now['confusion_matrix'][a][b]}; this run's metrics/eval.json: accuracy "
        f"{record['accuracy']:.6g} does not follow from metrics/predictions.csv beside it "
        f"({now['accuracy']:.6g}){RESTORE.replace('remake it', 'remake them')}")
    # the same records made from the moved predictions: consistent, as before
    verdict = verdict_of({PREDICTIONS: (predictions, moved),
                          "metrics/eval.json": (json.dumps(record).encode(),
                                                json.dumps(now).encode())}, rev="HEAD")
    assert verdict.tier == "consistent", verdict.text()


def test_a_row_missing_or_a_class_renamed_is_named_in_the_first_line():
    """Issue 70, kind 6: a predictions file with a row missing or a class renamed was
    "not paired" while the first line blamed eval.json's accuracy, never naming the row
    or the class. Each row's absence at the ends and the middle, several rows, an extra
    row, each class renamed, and classes reordered; with eval.json as it was (damage) and
    remade from the file (files that differ)."""
    ids, gold, probs = rows()
    good = csv_bytes(ids, gold, probs)
    record = json.dumps(_metrics_of(good)).encode()
    cases = []
    for gone in ([0], [30], [59], [1, 2, 3, 4, 5, 6, 7]):
        keep = [i for i in range(60) if i not in gone]
        listed = ", ".join(ids[i] for i in gone[:5]) + (
            f", ... ({len(gone) - 5} more)" if len(gone) > 5 else "")
        cases.append((csv_bytes([ids[i] for i in keep], gold[keep], probs[keep]),
                      f"{len(gone)} of REV's 60 rows not here: {listed}"))
    extra = np.vstack([probs, probs[:1]])
    cases.append((csv_bytes([*ids, "new-row"], np.append(gold, gold[0]), extra),
                  "1 row REV's lacks: new-row"))
    for k, label in enumerate(LABELS):
        renamed = [*LABELS[:k], f"{label}-2", *LABELS[k + 1:]]
        cases.append((predictions_csv(ids, gold.tolist(), np.log(probs), renamed).encode(),
                      f"REV's class {label} not here, {label}-2 instead"))
    order = [2, 0, 1]
    cases.append((predictions_csv(ids, [order.index(g) for g in gold], np.log(probs[:, order]),
                                  [LABELS[i] for i in order]).encode(),
                  "the classes in another order (positive, negative, neutral; REV's "
                  "negative, neutral, positive)"))
    for new, named in cases:
        said = f"the test split: {named}: not paired"
        damaged = verdict_of({PREDICTIONS: (good, new)}, rev="HEAD",
                             beside={"metrics/eval.json": record})
        first = damaged.text().splitlines()[0]
        assert first.startswith(f"{DAMAGED}this run's metrics/eval.json: ")
        assert f"; {said}; restore this run's" in first, first
        assert ("test_rows 60 does not follow" in first if "row" in named
                else "labels ['negative', 'neutral', 'positive'] does not follow" in first)
        remade = verdict_of({PREDICTIONS: (good, new), "metrics/eval.json": (
            record, json.dumps(_metrics_of(new)).encode())}, rev="HEAD")
        assert remade.text().splitlines()[0] == (
            "reproduce: different: files differ beyond the tolerances and no test set could "
            f"be paired with HEAD's: {said}")


def test_metrics_that_differ_beside_identical_predictions_say_so_not_no_predictions():
    """Without predictions that moved, the line says the predictions are REV's."""
    old = json.dumps({"calibration": {"nll": 0.65}}).encode()
    new = json.dumps({"calibration": {"nll": 0.75}}).encode()
    verdict = verdict_of({"metrics/eval.json": (old, new)}, rev="HEAD", commit="abcdef1")
    assert verdict.text().splitlines()[0] == (
        "reproduce: different: every predictions file is HEAD (abcdef1)'s, byte for byte, but "
        "1 file differs beyond its tolerance: metrics/eval.json")


def test_the_first_line_names_each_test_set_that_moved():
    """Issue 62: when only an extra test set moved, the headline did not name it."""
    ids, gold, probs = rows()
    flipped = probs.copy()
    flipped[:3] = flipped[:3][:, [1, 2, 0]]
    extra = "metrics/test_sets/reviews-zh/predictions.csv"
    same, moved = csv_bytes(ids, gold, probs), csv_bytes(ids, gold, flipped)
    only = verdict_of({extra: (same, moved)}, rev="HEAD")
    assert only.tier == "consistent"
    assert only.line.startswith("3 of 60 predictions of test set reviews-zh differ from HEAD; "
                                "no detectable difference: accuracy ")
    nudged = probs + np.array([4e-4, -4e-4, 0])
    both = verdict_of({PREDICTIONS: (same, csv_bytes(ids, gold, nudged)), extra: (same, moved)},
                      rev="HEAD")
    assert both.line.startswith("0 of 60 predictions and 3 of 60 predictions of test set "
                                "reviews-zh differ from HEAD; the test split: no detectable "
                                "difference: accuracy +0.000 [+0.000, +0.000]")
    assert both.notes[0].startswith(f"  {extra}: 3 of 60 predictions differ; no detectable")
    # the test split within the tolerance, the extra set moved: the extra set leads
    within = verdict_of({PREDICTIONS: (same, csv_bytes(ids, gold, probs + [1e-6, -1e-6, 0])),
                         extra: (same, moved)}, rev="HEAD")
    assert within.line.startswith("3 of 60 predictions of test set reviews-zh differ from HEAD; "
                                  "no detectable")
    assert within.notes[0].startswith(f"  {PREDICTIONS}: 0 of 60 predictions differ")


def test_a_seed_group_whose_eval_json_does_not_follow_from_its_predictions_is_damaged(
        monkeypatch):
    ids, gold, probs = rows()
    predictions = csv_bytes(ids, gold, probs)
    accuracy = _metrics_of(predictions)["accuracy"]
    runs = {"a-1": accuracy, "a-2": accuracy, "b-1": accuracy, "b-2": 0.99}
    monkeypatch.setattr("lorasent.review.collect.expand_group", lambda repo, spec, **_: sorted(
        r for r in runs if r.startswith(spec[:-1])))
    monkeypatch.setattr(tiers, "check_revisions", lambda repo, sides, **_: None)
    monkeypatch.setattr(tiers, "resolve_commits", lambda repo, *revs: {r: r for r in revs})
    monkeypatch.setattr(tiers, "read_at", lambda repo, rev, path: json.dumps(
        {"accuracy": runs[rev]}) if path == "metrics/eval.json" else predictions.decode())
    verdict = tiers.judge_groups(Path("."), "a-*", "b-*")
    assert (verdict.tier, verdict.line) == ("different", (
        "damaged (not what it claims, so no accuracy of it is judged): b-2's "
        "metrics/eval.json: accuracy 0.99 does not follow from metrics/predictions.csv beside "
        f"it ({accuracy:.6g}); remake those runs (dvc exp run) or judge groups whose files are "
        "whole"))


# --------------------------------------- issue 62, kind 8: the line starts with its own command


def test_an_unknown_revision_is_said_as_reproduce_s_own_line(tmp_path, monkeypatch):
    """It started with `compare:`; every command that shares the revision check names
    itself (reproduce, its seed groups, pr-comment)."""
    from lorasent.cli import main
    from lorasent.errors import LorasentError

    def no_dvc(*args, **kwargs):
        raise LorasentError("no DVC here")  # no experiments: no `dvc exp list` subprocess

    monkeypatch.setattr("lorasent.review.collect.run_dvc", no_dvc)
    repo = tmp_path / "repo"
    repo.mkdir()
    _repo(repo, {})
    monkeypatch.chdir(repo)
    branch = subprocess.run(["git", "branch", "--show-current"], capture_output=True,
                            text=True).stdout.strip()
    tail = (": not a commit, branch, tag or experiment here. Experiments: none; branches: "
            f"{branch}; tags: none (`git log --oneline` lists the commits)\n")
    result = CliRunner().invoke(main, ["reproduce", "nope"])
    assert (result.exit_code, result.output) == (
        1, f"lorasent reproduce: error: unknown revision 'nope' (REV){tail}")
    result = CliRunner().invoke(main, ["reproduce", "--seed-groups", "nope", "HEAD"])
    assert result.output == ("lorasent reproduce: error: unknown revision 'nope' (a seed "
                             f"group){tail}")
    result = CliRunner().invoke(main, ["reproduce", "--after-run", "nope"])
    assert result.output == ("run: could not be judged against nope: unknown revision 'nope' "
                             f"(REV){tail}")
    from lorasent.review.pr_comment import pr_comment

    with pytest.raises(LorasentError) as err:
        pr_comment("nope", tmp_path / "out", repo=repo)
    assert str(err.value) == f"pr-comment: unknown revision 'nope' (base){tail.rstrip()}"
    elsewhere = tmp_path / "no-git"
    elsewhere.mkdir()
    with pytest.raises(LorasentError) as err:
        rp.reproduce(elsewhere, "HEAD", workspace=True)
    assert str(err.value) == (f"reproduce: {elsewhere.resolve()} is not in a git repository; REV "
                              "is read from git: run reproduce in the project's folder")
