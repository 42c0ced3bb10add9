"""Precision said and recorded (issue 51): fp16 on a CPU is refused without native fp16,
as bf16 is without native bf16; each stage that computes says in which dtype, on which
device and why, and records that dtype in its provenance (``compute_dtype``).

The CPU's flags are set by the tests (a CPU with native bf16 or fp16 is simulated); the
stages run the tiny random Gemma in the fast tier.
"""

import json
import logging

import pytest
import torch

from conftest import train_in
from lorasent import environment
from lorasent.atomic import atomic_write_text, jsonl_text
from lorasent.environment import (
    check_environment,
    compute_dtype,
    precision_line,
    resolve_dtype,
)
from lorasent.params import parse_params
from lorasent.stages.baseline import run_baseline
from lorasent.stages.evaluate import run_evaluate
from lorasent.stages.split import row_id
from test_train_recipe import LABELS, PARAMS, ROWS

CPU = torch.device("cpu")


@pytest.fixture
def cpu_flags(monkeypatch):
    """Set the CPU's native bf16 and fp16 flags: ``cpu_flags(bf16=[...], fp16=[...])``."""
    monkeypatch.setattr(environment, "cpu_model", lambda: "Intel Xeon E5-2680")

    def set_flags(bf16: tuple[str, ...] = (), fp16: tuple[str, ...] = ()) -> None:
        monkeypatch.setattr(environment, "cpu_bf16_flags", lambda *a: list(bf16))
        monkeypatch.setattr(environment, "cpu_fp16_flags", lambda *a: list(fp16))
    return set_flags


@pytest.mark.parametrize(("flags", "found"), [
    ("fpu sse2 avx512f avx512_fp16 avx512_bf16", ["avx512_fp16"]),
    ("fpu amx_fp16 amx_tile avx512_fp16", ["avx512_fp16", "amx_fp16"]),
    ("fpu sse2 avx2 avx512f f16c", []),   # f16c converts, it does not compute
])
def test_cpu_fp16_flags_are_read_from_cpuinfo(tmp_path, flags, found):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: {flags}\n")
    assert environment.cpu_fp16_flags(cpuinfo) == found
    assert environment.cpu_fp16_flags(tmp_path / "absent") == []


def test_fp16_on_a_cpu_without_native_fp16_is_refused_as_bf16_is(cpu_flags):
    """Emulated fp16 was accepted (slow) while emulated bf16 was refused."""
    cpu_flags()
    findings = check_environment(device="cpu", precision="fp16", attn_implementation="sdpa",
                                 model="gpt2")
    assert [(f.level, f.message) for f in findings] == [(
        "fail", "base.precision is fp16 but this CPU (Intel Xeon E5-2680) has no native fp16 "
        "(none of avx512_fp16, amx_fp16 in /proc/cpuinfo): emulated fp16 is slower than fp32; "
        "set base.precision: auto or fp32")]
    assert environment.params_choice(device="cpu", precision="fp16", attn_implementation="sdpa",
                                     num_processes=1)["precision"] is None
    cpu_flags(fp16=["avx512_fp16"])   # native: autocast in fp16 over fp32 weights
    assert check_environment(device="cpu", precision="fp16", attn_implementation="sdpa",
                             model="gpt2") == []
    assert resolve_dtype("fp16", CPU) == torch.float16
    assert environment.weights_dtype(torch.float16, CPU) == torch.float32


def test_fp16_on_a_gpu_is_taken(monkeypatch, cpu_flags):
    cpu_flags()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_dtype("fp16", torch.device("cuda")) == torch.float16


@pytest.mark.parametrize(("stage", "precision", "flags", "training", "line"), [
    ("train", "bf16", {"bf16": ["avx512_bf16"]}, True,
     "train: computing in bf16 on cpu (native avx512_bf16; autocast over fp32 master "
     "weights; base.precision bf16)"),
    ("train", "fp16", {"fp16": ["avx512_fp16", "amx_fp16"]}, True,
     "train: computing in fp16 on cpu (native avx512_fp16, amx_fp16; autocast over fp32 "
     "master weights; base.precision fp16)"),
    ("evaluate", "bf16", {"bf16": ["amx_bf16"]}, False,
     "evaluate: computing in fp32 on cpu (scoring runs on the fp32 weights; only training "
     "autocasts to bf16 on a CPU; base.precision bf16)"),
    ("baseline", "auto", {}, False,
     "baseline: computing in fp32 on cpu (base.precision auto: fp32 on a CPU, so that a "
     "committed run reproduces on any CPU)"),
    ("train", "fp32", {"bf16": ["avx512_bf16"]}, True,
     "train: computing in fp32 on cpu (base.precision fp32)"),
])
def test_the_stage_line_says_the_dtype_used_and_why(cpu_flags, stage, precision, flags,
                                                    training, line):
    cpu_flags(**flags)
    dtype = resolve_dtype(precision, CPU)
    assert precision_line(stage, precision=precision, dtype=dtype, device=CPU,
                          training=training) == line
    assert compute_dtype(dtype, CPU, training=training) == line.split()[3]


def test_the_stage_line_on_a_gpu_names_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "AMD Instinct MI300X")
    gpu = torch.device("cuda")
    assert precision_line("evaluate", precision="auto", dtype=torch.bfloat16, device=gpu,
                          training=False) == (
        "evaluate: computing in bf16 on cuda (AMD Instinct MI300X; base.precision auto: bf16 "
        "on a GPU that has it, else fp32)")


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory, tiny_base):
    """baseline, train (2 steps) and evaluate of the tiny Gemma with ``base.precision:
    bf16`` on a CPU made to list avx512_bf16: ``(folder, log lines)``."""
    folder = tmp_path_factory.mktemp("bf16")
    rows = [{"id": row_id(t), "text": t, "label": LABELS[i], "label_id": i} for t, i in ROWS]
    split = folder / "split"
    for name, part in (("train", rows), ("validation", rows[:4]), ("test", rows)):
        atomic_write_text(split / f"{name}.jsonl", jsonl_text(part))
    params = parse_params({**PARAMS, "base": {**PARAMS["base"], "precision": "bf16"},
                           "train": {**PARAMS["train"], "max_steps": 2, "save_steps": 0,
                                     "eval_strategy": "no"}})
    record = params.model_dump(mode="json")
    metrics = folder / "metrics"
    handler = _Lines()
    logging.getLogger("lorasent").addHandler(handler)
    previous = logging.getLogger("lorasent").level
    logging.getLogger("lorasent").setLevel(logging.INFO)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(environment, "cpu_bf16_flags", lambda *a: ["avx512_bf16"])
        try:
            run_baseline(base=params.base, prompt=params.prompt, batch_size=4,
                         params_record=record, model_dir=tiny_base, split_dir=split,
                         metrics_path=metrics / "baseline.json",
                         predictions_path=metrics / "baseline_predictions.csv",
                         calibrated_predictions_path=metrics
                         / "baseline_calibrated_predictions.csv",
                         confusion_path=metrics / "baseline_confusion.json",
                         provenance_dir=folder / "provenance")
            train_in(folder, params, tiny_base, split)
            run_evaluate(base=params.base, prompt=params.prompt, evaluate=params.evaluate,
                         split_seed=params.split.seed,
                         params_record=record, model_dir=tiny_base,
                         adapter_dir=folder / "adapter", split_dir=split,
                         baseline_path=metrics / "baseline.json",
                         baseline_predictions_path=metrics / "baseline_predictions.csv",
                         metrics_path=metrics / "eval.json",
                         predictions_path=metrics / "predictions.csv",
                         confusion_path=metrics / "confusion.json",
                         provenance_dir=folder / "provenance")
        finally:
            logging.getLogger("lorasent").removeHandler(handler)
            logging.getLogger("lorasent").setLevel(previous)
    return folder, handler.lines


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.parametrize(("stage", "used", "line"), [
    ("baseline", "fp32", "baseline: computing in fp32 on cpu (scoring runs on the fp32 "
                         "weights; only training autocasts to bf16 on a CPU; base.precision "
                         "bf16)"),
    ("train", "bf16", "train: computing in bf16 on cpu (native avx512_bf16; autocast over "
                      "fp32 master weights; base.precision bf16)"),
    ("evaluate", "fp32", "evaluate: computing in fp32 on cpu (scoring runs on the fp32 "
                         "weights; only training autocasts to bf16 on a CPU; base.precision "
                         "bf16)"),
])
def test_each_stage_says_and_records_the_dtype_it_computed_in(bf16_run, stage, used, line):
    """bf16 on a CPU with native bf16 trained without a word, and provenance recorded
    only the param."""
    folder, lines = bf16_run
    assert [x for x in lines if x.startswith(f"{stage}: computing in ")] == [line]
    record = json.loads((folder / "provenance" / f"{stage}.json").read_text(encoding="utf-8"))
    assert record["compute_dtype"] == used
    assert record["params"]["base"]["precision"] == "bf16"


def test_a_baseline_without_a_model_records_no_compute_dtype(tmp_path, tiny_base):
    """seq_cls: the baseline is the majority class alone, nothing is computed."""
    split = tmp_path / "split"
    rows = [{"id": row_id(t), "text": t, "label": LABELS[i], "label_id": i} for t, i in ROWS]
    for name in ("train", "test"):
        atomic_write_text(split / f"{name}.jsonl", jsonl_text(rows))
    params = parse_params({**PARAMS, "train": {**PARAMS["train"], "mode": "seq_cls"}})
    run_baseline(base=params.base, prompt=params.prompt, batch_size=4,
                 params_record=params.model_dump(mode="json"), mode="seq_cls",
                 model_dir=tiny_base, split_dir=split, metrics_path=tmp_path / "b.json",
                 predictions_path=tmp_path / "p.csv", calibrated_predictions_path=tmp_path
                 / "c.csv", confusion_path=tmp_path / "m.json",
                 provenance_dir=tmp_path / "provenance")
    record = json.loads((tmp_path / "provenance" / "baseline.json").read_text(encoding="utf-8"))
    assert record["compute_dtype"] is None
