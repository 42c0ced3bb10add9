"""make bench: each way builds the batch it claims, and the summary's arithmetic."""

import pytest
import torch

from lorasent.bench import bench_eval, bench_train, main, markdown, summarise

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_train_ways_on_a_tiny_gemma():
    result = bench_train("tiny", torch.device("cpu"), batch_size=8, warmup=0, steps=1)
    ways = result["ways"]
    assert list(ways) == ["project", "seed002", "plain_trainer", "floor"]
    assert ways["seed002"]["tokens_in_batch"] == 8 * 256          # padded to max_length
    assert ways["plain_trainer"]["tokens_in_batch"] < 8 * 256     # dynamic padding
    assert ways["project"]["tokens_in_batch"] == ways["floor"]["tokens_in_batch"]
    for way in ways.values():
        assert way["seconds_per_step"] > 0 and way["peak_rss_bytes"] > 0
        assert way["examples_per_s"] == pytest.approx(8 / way["seconds_per_step"])


def test_eval_ways_on_a_tiny_gemma():
    result = bench_eval("tiny", torch.device("cpu"), n=8, batch_size=4, rounds=2)
    assert set(result["ways"]) == {"project", "seed000"} and result["rounds"] == 2
    for way in result["ways"].values():
        assert way["accuracy"] in {k / 8 for k in range(9)}


def _fake(project, seed002, plain, floor, eval_project, eval_seed000, noop):
    ways = {name: {"seconds_per_step": s, "examples_per_s": 8 / s, "useful_tokens_per_s": 400 / s,
                   "tokens_in_batch": 480, "peak_rss_bytes": 2**30 * (12 if s > 20 else 3)}
            for name, s in (("project", project), ("seed002", seed002),
                            ("plain_trainer", plain), ("floor", floor))}
    return {"train": {"m": {"batch_size": 8, "steps": 3, "warmup": 1, "ways": ways}},
            "eval": {"m": {"examples": 96, "peak_rss_bytes": 2**31, "ways": {
                "project": {"examples_per_s": eval_project, "accuracy": 0.4},
                "seed000": {"examples_per_s": eval_seed000, "accuracy": 0.35}}}},
            "pipeline": {"noop_repro_s": noop, "evaluate_param_rerun_s": 30.0}}


def test_summary_ratios_and_verdicts():
    results = _fake(2.5, 32.0, 8.5, 2.2, 10.0, 4.0, 3.1)
    summary = summarise(results, torch.device("cpu"), None)
    r = summary["ratios"]["m"]
    assert r["train_speedup_vs_seed002"] == pytest.approx(12.8)
    assert r["train_speedup_vs_plain_trainer"] == pytest.approx(3.4)
    assert r["train_time_vs_floor"] == pytest.approx(2.5 / 2.2)
    assert r["eval_speedup_vs_seed000"] == pytest.approx(2.5)
    assert r["eval_accuracy_project_minus_seed000"] == pytest.approx(0.05)
    assert summary["all_targets_met"] is True
    slow = summarise(_fake(2.5, 20.0, 8.5, 2.2, 10.0, 4.0, 6.0), torch.device("cpu"), None)
    assert slow["checks"]["m"]["train >= 10x seed 002"] is False
    assert slow["checks"]["pipeline"]["no-op dvc repro < 5 s"] is False
    assert slow["all_targets_met"] is False
    table = markdown({"machine": {"cpu": "x", "cores": 2, "torch": "t", "device": "cpu"},
                      "results": results, "summary": summary})
    assert "| seed002 | 32.00 | 0.25 | 12 | 480 | 12.80x faster |" in table
    assert "| floor | 2.20 |" in table and "1.14x the floor's time" in table
    assert "- pipeline: no-op dvc repro < 5 s: met" in table
    assert "peak RSS of the project's way: 3.0 GiB; of the whole part, with seed 002's way: " \
        "12.0 GiB" in table
    assert "busy" not in table
    busy = markdown({"machine": {"cpu": "x", "cores": 2, "torch": "t", "device": "cpu",
                                 "load_average_1min_before": 1.0},
                     "results": results, "summary": summary})
    assert "**Warning: the machine was busy** (1-minute load average 1.0 on 2 cores" in busy


def test_gpu_asked_of_a_torch_without_one(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_:
        main(["--device", "cuda", "--out", "never-written"])
    assert exit_.value.code == 2
    assert f"--device cuda: torch {torch.__version__} sees no GPU" in capsys.readouterr().err
