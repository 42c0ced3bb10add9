"""The preflight: each of the seeds' environment pitfalls, simulated, and the report."""

import json
import logging
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from conftest import REPO
from lorasent import environment
from lorasent.cli import main
from lorasent.environment import (
    EnvironmentProblem,
    check_environment,
    environment_report,
    require_environment,
)

OK: dict[str, Any] = {"device": "cpu", "precision": "fp32", "attn_implementation": "sdpa",
      "model": "packaged:gemma-3-270m"}


def check(**changes):
    return check_environment(**{**OK, **changes})


@pytest.fixture
def fake_gpu(monkeypatch):
    """A GPU that torch can see, whose bf16 support the test sets."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Radeon Pro W6800")

    def set_bf16(supported: bool):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: supported)
    return set_bf16


def test_this_machine_passes_with_the_default_params():
    assert check() == []
    assert check(device="auto", precision="auto") == []


def test_rocm_asked_with_a_cuda_or_cpu_wheel_fails(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None)
    [finding] = check(device="rocm")
    assert finding.level == "fail"
    assert "is not a ROCm build" in finding.message
    assert "TORCH_INDEX_URL=https://download.pytorch.org/whl/rocm" in finding.message


def test_rocm_wheel_without_a_visible_gpu_fails(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.4.43482")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    [finding] = check(device="rocm")
    assert "sees no GPU" in finding.message and "--device=/dev/kfd" in finding.message


def test_rocm_wheel_with_a_gpu_resolves_to_cuda(monkeypatch, fake_gpu):
    monkeypatch.setattr(torch.version, "hip", "6.4.43482")
    fake_gpu(True)
    assert check(device="rocm", precision="bf16") == []
    assert environment.resolve_device("rocm") == torch.device("cuda")
    assert environment.resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16


def test_flash_attention_without_flash_attn_fails_and_says_sdpa(monkeypatch):
    monkeypatch.setattr(environment, "flash_attn_available", lambda: False)
    [finding] = check(attn_implementation="flash_attention_2")
    assert finding.level == "fail" and "Use sdpa" in finding.message
    monkeypatch.setattr(environment, "flash_attn_available", lambda: True)
    assert check(attn_implementation="flash_attention_2") == []


@pytest.mark.parametrize(("flags", "found"), [
    ("fpu sse2 avx512f avx512_bf16 avx512_vnni", ["avx512_bf16"]),
    ("fpu sse2 amx_bf16 amx_tile avx512_bf16", ["avx512_bf16", "amx_bf16"]),
    ("fpu sse2 avx2 avx512f", []),
])
def test_cpu_bf16_flags_are_read_from_cpuinfo(tmp_path, flags, found):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n")
    assert environment.cpu_bf16_flags(cpuinfo) == found
    assert environment.cpu_bf16_flags(tmp_path / "absent") == []


def test_bf16_on_a_cpu_is_autocast_over_fp32_weights_or_refused_in_one_line(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(environment, "cpu_bf16_flags", lambda *a: ["avx512_bf16"])
    assert check(precision="bf16") == []
    assert environment.resolve_dtype("bf16", cpu) == torch.bfloat16
    assert environment.weights_dtype(torch.bfloat16, cpu) == torch.float32
    assert environment.resolve_dtype("auto", cpu) == torch.float32  # reproducible anywhere
    assert environment_report("cpu")["cpu_bf16"] == "native (avx512_bf16)"
    monkeypatch.setattr(environment, "cpu_bf16_flags", lambda *a: [])
    monkeypatch.setattr(environment, "cpu_model", lambda: "Intel Xeon E5-2680")
    [finding] = check(precision="bf16")
    assert finding.level == "fail" and "\n" not in finding.message
    assert finding.message == (
        "base.precision is bf16 but this CPU (Intel Xeon E5-2680) has no native bf16 (none "
        "of avx512_bf16, amx_bf16 in /proc/cpuinfo): emulated bf16 is slower than fp32; set "
        "base.precision: auto or fp32")
    assert check(precision="auto") == []
    assert environment_report("cpu")["cpu_bf16"].startswith("not native")


def test_bf16_on_a_gpu_without_it_fails(fake_gpu):
    fake_gpu(False)
    [finding] = check(device="cuda", precision="bf16")
    assert finding.level == "fail"
    assert "Radeon Pro W6800 does not support bf16" in finding.message
    assert check(device="cuda", precision="auto") == []   # auto falls back to fp32
    assert environment.resolve_dtype("auto", torch.device("cuda")) == torch.float32


def test_fp16_with_gemma_warns(tmp_path, monkeypatch):
    monkeypatch.setattr(environment, "cpu_fp16_flags", lambda *a: ["avx512_fp16"])
    [finding] = check(precision="fp16")
    assert finding.level == "warn" and "overflow" in finding.message
    assert check(precision="fp16", model="gpt2") == []
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3_text"}))
    assert len(check(precision="fp16", model="./my-model", model_dir=tmp_path)) == 1


def test_require_environment_raises_every_failure_and_logs_warnings(monkeypatch, caplog):
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(environment, "flash_attn_available", lambda: False)
    with pytest.raises(EnvironmentProblem) as err:
        require_environment(**{**OK, "device": "rocm", "attn_implementation": "flash_attention_2"})
    assert "not a ROCm build" in str(err.value) and "Use sdpa" in str(err.value)
    monkeypatch.setattr(environment, "cpu_fp16_flags", lambda *a: ["avx512_fp16"])
    with caplog.at_level(logging.WARNING):
        assert require_environment(**{**OK, "precision": "fp16"}) == (torch.device("cpu"),
                                                                       torch.float16)
    assert "overflow" in caplog.text


def test_report_has_the_facts_doctor_prints():
    report = environment_report("cpu")
    for key in ("torch", "hip", "cuda", "device", "name", "arch", "bf16", "attention",
                "memory_free_bytes"):
        assert key in report
    assert report["attention"]["sdpa"] is True
    assert report["memory_free_bytes"] > 0


def test_the_report_records_the_gpu_a_scheduler_gave(monkeypatch):
    """What a sweep's run records in its provenance: the variable Ray set for it."""
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    assert environment_report("cpu")["visible_devices"] == {}
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert environment_report("cpu")["visible_devices"] == {"CUDA_VISIBLE_DEVICES": "",
                                                            "HIP_VISIBLE_DEVICES": "3"}


def test_the_report_tells_a_container_run_and_its_image(monkeypatch, tmp_path):
    """What provenance records: a venv run (no marker file, nothing passed), and a run in
    an image that make docker-run-cpu started (Docker's /.dockerenv, the image's id, the
    Dockerfile's commit and base digest)."""
    for name in ("LORASENT_IMAGE_ID", "LORASENT_IMAGE_REVISION", "LORASENT_BASE_DIGEST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(environment, "CONTAINER_MARKERS", (tmp_path / ".dockerenv",))
    assert environment_report("cpu")["container"] == {
        "in_container": False, "image_id": None, "image_revision": None, "base_digest": None}
    (tmp_path / ".dockerenv").touch()
    monkeypatch.setenv("LORASENT_IMAGE_ID", "sha256:" + "ab" * 32)
    monkeypatch.setenv("LORASENT_IMAGE_REVISION", "86c64df-dirty")
    monkeypatch.setenv("LORASENT_BASE_DIGEST", "")  # a base made locally has none
    assert environment_report("cpu")["container"] == {
        "in_container": True, "image_id": "sha256:" + "ab" * 32,
        "image_revision": "86c64df-dirty", "base_digest": None}


def _params_with(tmp_path, old, new):
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    assert old in text
    (tmp_path / "params.yaml").write_text(text.replace(old, new), encoding="utf-8")


def test_doctor_passes_here(tmp_path, monkeypatch):
    _params_with(tmp_path, "device: auto", "device: cpu")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "torch: " + torch.__version__ in result.output
    assert "no problems" in result.output
    data = json.loads(CliRunner().invoke(main, ["doctor", "--json"]).output)
    assert data["findings"] == [] and data["packages"]["transformers"]


def test_doctor_fails_on_rocm_params_with_this_cpu_wheel(tmp_path, monkeypatch):
    _params_with(tmp_path, "device: auto", "device: rocm")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 1
    assert "FAIL: base.device is rocm but torch" in result.output


def test_doctor_fails_on_an_extra_test_set_whose_file_is_missing(tmp_path, monkeypatch):
    _params_with(tmp_path, "source: packaged:reviews-zh", "source: data/sources/mine.csv")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 1
    assert ("FAIL: evaluate.test_sets.reviews-zh.source: 'data/sources/mine.csv' is neither "
            "a file nor a known source") in result.output


def test_doctor_fails_on_a_local_test_set_that_is_not_a_dependency(tmp_path, monkeypatch):
    _params_with(tmp_path, "source: packaged:reviews-zh", "source: mine.csv")
    text = (tmp_path / "params.yaml").read_text(encoding="utf-8")
    (tmp_path / "params.yaml").write_text(text.replace("size: 400", "size: 0"),
                                          encoding="utf-8")
    (tmp_path / "mine.csv").write_text("text,label\na,negative\nb,positive\n",
                                       encoding="utf-8")
    (tmp_path / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text(encoding="utf-8"),
                                       encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 1
    assert ("FAIL: evaluate.test_sets.reviews-zh.source: mine.csv is not among the deps of "
            "the evaluate stage in dvc.yaml") in result.output
    assert result.output.count("FAIL") == 1  # the set itself reads fine


def test_train_checks_the_environment_before_loading_the_model(params, tmp_path, monkeypatch):
    from lorasent.stages.train import run_train

    monkeypatch.setattr(environment, "flash_attn_available", lambda: False)
    (tmp_path / "split").mkdir()
    (tmp_path / "split" / "train.jsonl").write_text('{"text": "a", "label_id": 0}\n')
    base = params.base.model_copy(update={"attn_implementation": "flash_attention_2"})
    with pytest.raises(EnvironmentProblem, match="Use sdpa"):
        run_train(base=base, prompt=params.prompt, train=params.train, params_record={},
                  model_dir=tmp_path / "no-model-here", split_dir=tmp_path / "split",
                  adapter_dir=tmp_path / "adapter", live_dir=tmp_path / "live",
                  provenance_dir=tmp_path / "prov")
    assert not (tmp_path / "adapter").exists()
