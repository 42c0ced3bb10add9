"""make device-check: the predictions join and its arithmetic, the report files, the
parts' outcomes and exit status, the no-GPU refusal, and the make target."""

import json
import subprocess
import time

import pytest
import torch

from conftest import REPO
from lorasent.errors import LorasentError
from lorasent.tools import device_check
from lorasent.tools.bench_report import markdown as bench_markdown
from lorasent.tools.device_check import (
    MIN_AGREEMENT,
    agreement_passes,
    compare_pipelines,
    compare_predictions,
    main,
    markdown,
    write_report,
)

HEADER = "id,actual,predicted,p_negative,p_neutral,p_positive\n"


def _csv(rows):
    """A predictions file: ``(id, actual, predicted)`` rows; the probabilities are filler."""
    return HEADER + "".join(f"{i},{a},{p},0.2,0.3,0.5\n" for i, a, p in rows)


def test_predictions_join_on_the_row_id_not_on_the_order():
    a = _csv([("r1", "negative", "negative"), ("r2", "neutral", "neutral"),
              ("r3", "positive", "negative"), ("r4", "positive", "positive"),
              ("only-a", "neutral", "neutral")])
    # the same rows in another order; r3 now right, r4 now wrong; one row of its own
    b = _csv([("r4", "positive", "neutral"), ("r3", "positive", "positive"),
              ("r2", "neutral", "neutral"), ("r1", "negative", "negative"),
              ("only-b", "negative", "positive")])
    out = compare_predictions(a, b)
    assert out == {"rows": 4, "same": 2, "agreement": 0.5, "only_in_a": 1, "only_in_b": 1,
                   "accuracy_a": 0.8, "accuracy_b": 0.6,
                   "differing": [{"id": "r3", "a": "negative", "b": "positive",
                                  "margin_a": 0.5108},   # log(0.5 / 0.3)
                                 {"id": "r4", "a": "positive", "b": "neutral",
                                  "margin_a": 0.5108}]}
    assert agreement_passes(out) is False


def test_agreement_threshold_and_unmatched_rows():
    rows = [(f"r{k}", "negative", "negative") for k in range(50)]
    one_off = rows[:-1] + [("r49", "negative", "neutral")]
    two_off = rows[:-2] + [("r48", "negative", "neutral"), ("r49", "negative", "neutral")]
    same = compare_predictions(_csv(rows), _csv(list(reversed(rows))))
    assert (same["same"], same["rows"], same["agreement"]) == (50, 50, 1.0)
    assert same["differing"] == [] and agreement_passes(same)
    assert MIN_AGREEMENT == 0.98
    one = compare_predictions(_csv(rows), _csv(one_off))
    assert (one["same"], one["agreement"], one["accuracy_b"]) == (49, 0.98, 0.98)
    assert agreement_passes(one)                                  # 49 / 50 = 0.98: enough
    two = compare_predictions(_csv(rows), _csv(two_off))
    assert two["agreement"] == 0.96 and not agreement_passes(two)
    missing = compare_predictions(_csv(rows), _csv(rows[:-1]))
    assert missing["agreement"] == 1.0 and missing["only_in_a"] == 1
    assert not agreement_passes(missing)                          # a row that did not join
    with pytest.raises(LorasentError, match="^b: no data rows, only the header"):
        compare_predictions(_csv(rows), HEADER)


def test_a_file_without_ids_or_with_a_repeated_id_is_refused():
    with pytest.raises(LorasentError, match="no `id` column"):
        compare_predictions("actual,predicted\nneutral,neutral\n", _csv([]))
    with pytest.raises(LorasentError, match="^b: id r1 is on line 2 and line 3;"):
        compare_predictions(_csv([("r1", "neutral", "neutral"), ("r2", "neutral", "neutral")]),
                            _csv([("r1", "neutral", "neutral")] * 2))


def _bench():
    """A results.json of bench on a GPU, as bench writes it (one model, made up)."""
    ways = {name: {"seconds_per_step": s, "examples_per_s": 8 / s,
                   "useful_tokens_per_s": 400 / s, "tokens_in_batch": 480,
                   "peak_rss_bytes": 2**31, "peak_device_bytes": 2**32,
                   "model_flops_per_s": f * 1e12}
            for name, s, f in (("project", 0.05, 40.0), ("project_unshared", 0.06, 33.5),
                               ("seed002", 0.5, 20.0), ("plain_trainer", 0.1, 25.0),
                               ("floor", 0.04, 50.0))}
    results = {"train": {"gemma-2b": {"batch_size": 8, "steps": 5, "warmup": 2,
                                      "shared_prefix_tokens": 18, "width": 60, "ways": ways}},
               "eval": {"gemma-2b": {"examples": 96, "rounds": 3, "peak_rss_bytes": 2**31,
                                     "ways": {"project": {"examples_per_s": 900.0,
                                                          "accuracy": 0.4},
                                              "seed000": {"examples_per_s": 30.0,
                                                          "accuracy": 0.3}}}}}
    from lorasent.tools.bench_report import summarise

    return {"machine": {"cpu": "AMD EPYC", "cores": 16, "torch": "2.8.0", "device": "cuda",
                        "gpu": "NVIDIA H200"},
            "results": results,
            "summary": summarise(results, torch.device("cuda"), 989.0), "wall_time_s": 200.0}


def _report(passed=True, bench_error=None):
    pipeline = {"devices": ["cpu", "cuda"], "changes": device_check.SMALL_RUN,
                "runs": [{"device": "cpu", "dvc_repro_s": 61.2, "accuracy": 0.455},
                         {"device": "cuda", "dvc_repro_s": 40.4, "accuracy": 0.46}],
                "predictions": {"rows": 200, "same": 199 if passed else 190,
                                "agreement": 0.995 if passed else 0.95, "only_in_a": 0,
                                "only_in_b": 0, "accuracy_a": 0.455, "accuracy_b": 0.46,
                                "differing": [{"id": "r7", "a": "neutral", "b": "negative",
                                               "margin_a": 0.0123}]},
                "zero_shot": {"rows": 200, "same": 200, "agreement": 1.0, "only_in_a": 0,
                              "only_in_b": 0, "accuracy_a": 0.37, "accuracy_b": 0.37,
                              "differing": []},
                "min_agreement": 0.98, "passed": passed}
    return {"date": "2026-12-01 10:00 UTC",
            "command": ["python", "-m", "lorasent.tools.device_check"],
            "machine": {"torch": "2.8.0", "cuda": "12.8", "hip": None, "gpu": "NVIDIA H200",
                        "arch": "sm_90", "cpu": "AMD EPYC", "cpu_count": 16},
            "min_agreement": 0.98,
            "doctor": {"returncode": 0, "problems": [], "report": {"torch": "2.8.0"}},
            "bench": None if bench_error else _bench(), "pipeline": pipeline,
            "parts": {"doctor": {"wall_time_s": 4.0, "error": None},
                      "bench": {"wall_time_s": 200.0, "error": bench_error},
                      "pipeline": {"wall_time_s": 105.0, "error": None}},
            "wall_time_s": 309.0, "passed": passed and not bench_error}


def test_report_files(tmp_path):
    report = _report()
    json_path, md_path = write_report(tmp_path / "bench", report)
    assert (json_path.name, md_path.name) == ("results-gpu.json", "results-gpu.md")
    assert json.loads(json_path.read_text("utf-8")) == report
    text = md_path.read_text("utf-8")
    assert text == markdown(report)
    lines = text.splitlines()
    assert lines[:5] == [
        "# GPU check: NVIDIA H200", "",
        "2026-12-01 10:00 UTC, NVIDIA H200 (sm_90); torch 2.8.0, CUDA 12.8, HIP None; "
        "AMD EPYC, 16 cores. Wall time 309 s (doctor 4 s, bench 200 s, pipeline 105 s).", "",
        "`lorasent doctor`: no problems (exit status 0)."]
    # bench's own tables, as bench renders them, every way it wrote carried through
    assert bench_markdown(report["bench"]) in text
    assert any(line.startswith("| project_unshared | 0.06 | 133.33 |") for line in lines)
    assert ("- gemma-2b, model TFLOP/s (bench's matrix products per step, counted from the "
            "config): project 40.0, "
            "project_unshared 33.5, seed002 20.0, plain_trainer 25.0, floor 50.0; the "
            "project's model FLOP utilisation 0.040 of --peak-tflops") in lines
    assert lines[-5:] == [
        "Small run (split.train_size 64, split.validation_size 0, split.test_size 200, "
        "train.max_steps 8, train.per_device_train_batch_size 8, evaluate.batch_size 16); "
        "`dvc repro` took 61 s on cpu, 40 s on cuda.", "",
        "Agreement: 199 of 200 test rows (0.995) get the same predicted label on cuda as on "
        "cpu; accuracy 0.455 on cpu, 0.460 on cuda. Zero-shot (no training): 200 of 200 "
        "(1.000). Largest margin on cpu of a row that differs (log-probability of its top "
        "label minus its second's; near 0: a near-tie): 0.012.", "",
        "**Verdict: passed (agreement 0.995 >= 0.98; every part ran)**"]


def test_report_of_a_failed_check(tmp_path):
    low = markdown(_report(passed=False))
    assert low.endswith("**Verdict: FAILED (agreement 0.950 < 0.98, or rows that did not "
                        "join)**\n")
    broken = markdown(_report(bench_error="CheckError: bench: out of memory\n"))
    assert ("## Benchmark\n\nbench FAILED:\n\n```\nCheckError: bench: out of memory\n```\n\n"
            "## Pipeline") in broken
    assert "**Train step" not in broken
    assert broken.endswith("**Verdict: FAILED (bench did not finish)**\n")


@pytest.fixture
def fake_parts(monkeypatch):
    """main's parts replaced by made-up results; returns what each was called with."""
    calls = {}
    monkeypatch.setattr(device_check, "machine_info", lambda device: _report()["machine"])
    monkeypatch.setattr(device_check, "run_doctor", lambda: _report()["doctor"])

    def bench(device, peak_tflops, extra):
        calls["bench"] = (device, peak_tflops, extra)
        return _bench()

    def pipelines(repo, devices):
        calls["pipeline"] = devices
        return calls.get("pipeline_result", _report()["pipeline"])

    monkeypatch.setattr(device_check, "run_bench", bench)
    monkeypatch.setattr(device_check, "compare_pipelines", pipelines)
    return calls


def test_main_writes_both_files_at_the_end_and_exits_0(tmp_path, fake_parts, capsys):
    out = tmp_path / "out"
    code = main(["--device", "cpu", "--out", str(out), "--peak-tflops", "989",
                 "--bench-args", "--model tiny --steps 1"])
    assert code == 0
    assert fake_parts["bench"] == ("cpu", 989.0, ["--model", "tiny", "--steps", "1"])
    assert fake_parts["pipeline"] == ("cpu", "cpu")
    report = json.loads((out / "results-gpu.json").read_text("utf-8"))
    assert report["passed"] is True and list(report["parts"]) == ["doctor", "bench", "pipeline"]
    assert report["bench"] == _bench() and report["pipeline"] == _report()["pipeline"]
    assert sorted(p.name for p in out.iterdir()) == ["results-gpu.json", "results-gpu.md"]
    printed = capsys.readouterr().out
    assert "device-check: doctor ..." in printed and "device-check: passed in " in printed


def test_main_exits_1_on_low_agreement_or_a_failed_part(tmp_path, fake_parts, monkeypatch):
    fake_parts["pipeline_result"] = _report(passed=False)["pipeline"]
    assert main(["--device", "cpu", "--out", str(tmp_path / "low")]) == 1
    low = json.loads((tmp_path / "low" / "results-gpu.json").read_text("utf-8"))
    assert low["passed"] is False and low["parts"]["pipeline"]["error"] is None

    def broken(device, peak_tflops, extra):
        raise device_check.CheckError("bench: out of memory")

    fake_parts.pop("pipeline_result")
    monkeypatch.setattr(device_check, "run_bench", broken)
    assert main(["--device", "cpu", "--out", str(tmp_path / "broken")]) == 1
    report = json.loads((tmp_path / "broken" / "results-gpu.json").read_text("utf-8"))
    assert report["bench"] is None and report["passed"] is False
    assert report["parts"]["bench"]["error"] == "CheckError: bench: out of memory"
    assert report["pipeline"]["passed"] is True  # the next part still ran


def test_no_gpu_exits_2_at_once_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_:
        main(["--out", str(tmp_path / "never")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--device cuda: torch {torch.__version__} sees no GPU (CUDA {torch.version.cuda}, " \
        f"HIP {torch.version.hip})" in err
    assert "`lorasent doctor` shows what torch sees" in err
    assert "Run this check on a machine lent a GPU." in err
    assert not (tmp_path / "never").exists()


def test_make_device_check_runs_the_module_after_setup():
    out = subprocess.run(["make", "-n", "device-check", "LORASENT_SYSTEM_PYTHON=1",
                          "DEVICE_CHECK_ARGS=--peak-tflops 989"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1].endswith("/python -m lorasent.tools.device_check --peak-tflops 989")
    help_ = subprocess.run(["make", "help"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout
    assert "make device-check" in help_


@pytest.mark.slow
def test_doctor_json_is_read():
    doctor = device_check.run_doctor()
    assert doctor["report"]["torch"] == torch.__version__
    assert doctor["returncode"] in {0, 1} and isinstance(doctor["problems"], list)


# The real pipeline twice, on the CPU both times, at the smallest sizes, on the tiny random
# Gemma (the packaged one runs the stages in the integration tier): the same predictions
# to the last row (agreement exactly 1.0).
TINY_RUN = {"split": {"train_size": 8, "validation_size": 0, "test_size": 16},
            "train": {"max_steps": 1, "per_device_train_batch_size": 8},
            "evaluate": {"batch_size": 16}}


@pytest.mark.slow
def test_pipeline_on_the_cpu_twice_agrees_exactly(tiny_gemma_dir):
    started = time.perf_counter()
    out = compare_pipelines(REPO, ("cpu", "cpu"),
                            {**TINY_RUN, "base": {"model": str(tiny_gemma_dir)}})
    print(f"compare_pipelines cpu vs cpu: {time.perf_counter() - started:.1f} s")
    assert out["predictions"]["rows"] == 16 and out["predictions"]["agreement"] == 1.0
    assert out["zero_shot"]["agreement"] == 1.0 and out["passed"] is True
    assert out["runs"][0]["accuracy"] == out["runs"][1]["accuracy"]


def test_an_out_folder_that_cannot_be_written_exits_2_at_once(monkeypatch, capsys):
    """Issue 51's kind: the report was written only after the whole check."""
    def ran(*args, **kwargs):
        raise AssertionError("a part ran before --out was checked")

    monkeypatch.setattr(device_check, "run_doctor", ran)
    with pytest.raises(SystemExit) as exit_:
        main(["--device", "cpu", "--out", "/sys/lorasent-check"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "error: --out /sys/lorasent-check: cannot write in /sys (Permission denied); give a "
        "folder you can write to")
