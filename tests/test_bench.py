"""make bench: each way builds the batch it claims, and the summary's arithmetic."""

import pytest
import torch

from lorasent.environment import bf16_supported
from lorasent.tools.bench import LONG_TEMPLATE, bench_eval, bench_scale, bench_train, main
from lorasent.tools.bench_report import markdown, scale_table, summarise

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def one_tokenizer(packaged_model_dir):
    """The packaged Gemma's tokenizer, loaded once for the bench's three tiny runs."""
    from lorasent.modeling import load_tokenizer

    return load_tokenizer(packaged_model_dir)


@pytest.fixture
def tokenizer_once(one_tokenizer, monkeypatch):
    monkeypatch.setattr("lorasent.modeling.load_tokenizer", lambda folder: one_tokenizer)


@pytest.mark.integration  # the real Gemma 3 tokenizer on a tiny random model
def test_train_ways_on_a_tiny_gemma(tokenizer_once):
    result = bench_train("tiny", torch.device("cpu"), batch_size=8, warmup=0, steps=1)
    ways = result["ways"]
    native_bf16 = ["project_bf16", "floor_bf16"] if bf16_supported(torch.device("cpu")) else []
    assert list(ways) == ["project", "project_unshared", "seed002", "plain_trainer", "floor",
                          *native_bf16]
    for name in native_bf16:  # autocast: the same batch, the fp32 way's positions
        assert ways[name]["tokens_in_batch"] == ways[name.removesuffix("_bf16")][
            "tokens_in_batch"]
    assert ways["seed002"]["tokens_in_batch"] == 8 * 256          # padded to max_length
    assert ways["plain_trainer"]["tokens_in_batch"] < 8 * 256     # dynamic padding
    width, shared = result["width"], result["shared_prefix_tokens"]
    assert shared == 18                   # BOS and the instruction, up to "Tweet:"
    assert ways["project_unshared"]["tokens_in_batch"] == ways["floor"]["tokens_in_batch"] \
        == 8 * width
    assert ways["project"]["tokens_in_batch"] == shared + 8 * (width - shared)
    for way in ways.values():
        assert way["seconds_per_step"] > 0 and way["peak_rss_bytes"] > 0
        assert way["examples_per_s"] == pytest.approx(8 / way["seconds_per_step"])


@pytest.mark.integration  # the real Gemma 3 tokenizer on a tiny random model
def test_long_template_part_runs_the_project_ways_and_the_floor(tokenizer_once):
    result = bench_train("tiny", torch.device("cpu"), batch_size=8, warmup=0, steps=1,
                         template=LONG_TEMPLATE)
    assert list(result["ways"]) == ["project", "project_unshared", "floor"]
    assert result["shared_prefix_tokens"] == 70   # BOS and the 69-token instruction


@pytest.mark.integration  # the real Gemma 3 tokenizer on a tiny random model
def test_eval_ways_on_a_tiny_gemma(tokenizer_once):
    result = bench_eval("tiny", torch.device("cpu"), n=8, batch_size=4, rounds=2)
    assert set(result["ways"]) == {"project", "seed000"} and result["rounds"] == 2
    for way in result["ways"].values():
        assert way["accuracy"] in {k / 8 for k in range(9)}


def _ways(**seconds):
    return {name: {"seconds_per_step": s, "examples_per_s": 8 / s, "useful_tokens_per_s": 400 / s,
                   "tokens_in_batch": 480, "peak_rss_bytes": 2**30 * (12 if s > 20 else 3)}
            for name, s in seconds.items()}


def _fake(project, seed002, floor, long_project, eval_project, eval_seed000, noop):
    part = {"batch_size": 8, "steps": 3, "warmup": 1, "shared_prefix_tokens": 18, "width": 60}
    return {"train": {"m": {**part, "ways": _ways(
                project=project, project_unshared=2.3, seed002=seed002, plain_trainer=4.0,
                floor=floor)}},
            "train_long_template": {"m": {**part, "shared_prefix_tokens": 70, "width": 110,
                                          "ways": _ways(project=long_project,
                                                        project_unshared=2.4, floor=2.2)}},
            "eval": {"m": {"examples": 96, "peak_rss_bytes": 2**31, "ways": {
                "project": {"examples_per_s": eval_project, "accuracy": 0.4},
                "seed000": {"examples_per_s": eval_seed000, "accuracy": 0.35}}}},
            "pipeline": {"noop_repro_s": noop, "evaluate_param_rerun_s": 30.0}}


def test_summary_ratios_and_verdicts():
    results = _fake(1.6, 32.0, 2.2, 1.2, 10.0, 4.0, 3.1)
    summary = summarise(results, torch.device("cpu"), None)
    r = summary["ratios"]["m"]
    assert r["train_speedup_vs_seed002"] == pytest.approx(20.0)
    assert r["train_speedup_vs_plain_trainer"] == pytest.approx(2.5)
    assert r["train_time_vs_floor"] == pytest.approx(1.6 / 2.2)
    assert r["train_unshared_time_vs_floor"] == pytest.approx(2.3 / 2.2)
    assert r["train_long_template_time_vs_floor"] == pytest.approx(1.2 / 2.2)
    assert r["train_long_template_unshared_time_vs_floor"] == pytest.approx(2.4 / 2.2)
    assert r["eval_speedup_vs_seed000"] == pytest.approx(2.5)
    assert r["eval_accuracy_project_minus_seed000"] == pytest.approx(0.05)
    assert summary["checks"]["m"] == {
        "train >= 10x seed 002": True, "train step <= 0.75x the floor's time": True,
        "eval >= 2.5x seed 000": True, "eval loses no accuracy": True,
        "long template: train step <= 0.6x the floor's time": True}
    assert summary["all_targets_met"] is True
    slow = summarise(_fake(1.7, 15.0, 2.2, 1.4, 9.0, 4.0, 6.0), torch.device("cpu"), None)
    assert slow["checks"]["m"] == {
        "train >= 10x seed 002": False, "train step <= 0.75x the floor's time": False,
        "eval >= 2.5x seed 000": False, "eval loses no accuracy": True,
        "long template: train step <= 0.6x the floor's time": False}
    assert slow["checks"]["pipeline"]["no-op dvc repro < 5 s"] is False
    assert slow["all_targets_met"] is False
    table = markdown({"machine": {"cpu": "x", "cores": 2, "torch": "t", "device": "cpu"},
                      "results": results, "summary": summary})
    assert "| seed002 | 32.00 | 0.25 | 12 | 480 | 20.00x faster |" in table
    assert "| project_unshared | 2.30 | 3.48 | 174 | 480 | 1.44x faster |" in table
    assert "| floor | 2.20 |" in table and "0.73x the floor's time" in table
    assert "**Train step, m, batch 8, long template** (median of 3 steps, interleaved, " \
        "after 1 warm-up round; 70 of 110 positions shared; peak RSS of the project's way: " \
        "3.0 GiB; of the whole part: 3.0 GiB)" in table
    assert "0.55x the floor's time" in table
    assert "- pipeline: no-op dvc repro < 5 s: met" in table
    assert "18 of 60 positions shared; peak RSS of the project's way: 3.0 GiB; of the whole " \
        "part, with seed 002's way: 12.0 GiB" in table
    assert "busy" not in table
    busy = markdown({"machine": {"cpu": "x", "cores": 2, "torch": "t", "device": "cpu",
                                 "load_average_1min_before": 1.0},
                     "results": results, "summary": summary})
    assert "**Warning: the machine was busy** (1-minute load average 1.0 on 2 cores" in busy


@pytest.mark.integration  # every review statistic once (tens of seconds on a busy machine)
def test_the_scale_part_times_every_review_step_and_checks_the_targets():
    part = bench_scale(300)
    assert part["rows"] == 300 and part["classes"] == 3
    assert list(part["seconds"]) == ["evaluate_intervals", "evaluate_calibration",
                                     "evaluate_label_issues", "compare_paired",
                                     "compare_calibration_deltas"]
    assert part["evaluate_s"] == pytest.approx(sum(
        v for k, v in part["seconds"].items() if k.startswith("evaluate")))
    assert part["peak_rss_bytes"] >= part["added_rss_bytes"] >= 0
    big = {"rows": 100_000, "classes": 3, "evaluate_s": 5.0, "compare_s": 4.0,
           "seconds": {**part["seconds"], "evaluate_intervals": 0.6, "compare_paired": 0.3},
           "peak_rss_bytes": 2**29, "added_rss_bytes": 2**27}
    checks = summarise({"scale": [part, big]}, torch.device("cpu"), None)["checks"]["scale"]
    assert checks == {"100,000 rows, 3 classes: intervals and paired test < 1 s": True,
                      "100,000 rows, 3 classes: whole review < 10 s": True,
                      "100,000 rows, 3 classes: peak RSS added < 1 GiB": True}


def test_the_scale_targets_hold_for_3_and_100_classes_at_the_largest_size():
    """Issue 61: the whole review under 10 s and 1 GiB added with 3 classes and with 100
    (issue 42's intervals-and-paired second is of 3 classes); smaller sizes are shown,
    not judged."""
    seconds = {"evaluate_intervals": 0.6, "evaluate_calibration": 3.0,
               "evaluate_label_issues": 0.5, "compare_paired": 0.3,
               "compare_calibration_deltas": 1.5}
    small = {"rows": 1_000, "classes": 3, "evaluate_s": 99.0, "compare_s": 0.0,
             "seconds": seconds, "peak_rss_bytes": 2**29, "added_rss_bytes": 2**31}
    big = {"rows": 100_000, "classes": 3, "evaluate_s": 4.1, "compare_s": 1.8,
           "seconds": seconds, "peak_rss_bytes": 2**29, "added_rss_bytes": 2**27}
    many = {**big, "classes": 100, "evaluate_s": 6.0, "compare_s": 4.5,
            "seconds": {**seconds, "evaluate_intervals": 2.0},
            "peak_rss_bytes": 2**30 + 2**26, "added_rss_bytes": 2**30 + 1}
    summary = summarise({"scale": [small, big, many]}, torch.device("cpu"), None)
    assert summary["checks"]["scale"] == {
        "100,000 rows, 3 classes: intervals and paired test < 1 s": True,
        "100,000 rows, 3 classes: whole review < 10 s": True,
        "100,000 rows, 3 classes: peak RSS added < 1 GiB": True,
        "100,000 rows, 100 classes: whole review < 10 s": False,
        "100,000 rows, 100 classes: peak RSS added < 1 GiB": False}
    assert summary["all_targets_met"] is False
    table = scale_table([small, big, many])
    assert table[2] == ("| rows | classes | `evaluate_intervals` | `evaluate_calibration` | "
                        "`evaluate_label_issues` | `compare_paired` | "
                        "`compare_calibration_deltas` | evaluate | compare / pr-comment | "
                        "peak RSS (added) |")
    assert table[3] == "|---" * 10 + "|"
    assert table[5] == ("| 100,000 | 3 | 0.60 | 3.00 | 0.50 | 0.30 | 1.50 | 4.10 | 1.80 | "
                        "0.50 GiB (128 MiB) |")
    assert table[6] == ("| 100,000 | 100 | 2.00 | 3.00 | 0.50 | 0.30 | 1.50 | 6.00 | 4.50 | "
                        "1.06 GiB (1024 MiB) |")


def test_the_scale_part_runs_both_class_counts_each_in_its_own_process(monkeypatch):
    """``make bench`` runs every (rows, classes) of SCALE_RUNS as its own ``--part scale``
    process, 100 classes at 100,000 rows among them."""
    import argparse
    import subprocess

    from lorasent.tools import bench

    assert bench.SCALE_RUNS == ((1_000, 3), (10_000, 3), (100_000, 3), (100_000, 100))
    commands = []

    def run(cmd, **kwargs):
        commands.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout='{"rows": 1}\n', stderr="")

    monkeypatch.setattr(subprocess, "run", run)
    args = argparse.Namespace(device="cpu", model=None, steps=1, warmup=0, eval_examples=1)
    assert bench._part("scale", args, 100_000, 100) == {"rows": 1}
    assert commands[0][-4:] == ["--scale-rows", "100000", "--scale-classes", "100"]


def test_gpu_asked_of_a_torch_without_one(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_:
        main(["--device", "cuda", "--out", "never-written"])
    assert exit_.value.code == 2
    assert f"--device cuda: torch {torch.__version__} sees no GPU" in capsys.readouterr().err


def test_an_out_folder_that_cannot_be_written_exits_2_before_measuring(monkeypatch, capsys):
    """Issue 51's kind: results were written only after minutes of measuring."""
    from lorasent.tools import bench

    def measured(*args, **kwargs):
        raise AssertionError("measured before checking --out")

    monkeypatch.setattr(bench, "_part", measured)
    with pytest.raises(SystemExit) as exit_:
        main(["--device", "cpu", "--out", "/sys/lorasent-bench"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "error: --out /sys/lorasent-bench: cannot write in /sys (Permission denied); give a "
        "folder you can write to")
