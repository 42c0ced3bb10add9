"""The machine: device and precision choice, the seeds' environment pitfalls, a report.

``lorasent doctor`` prints :func:`environment_report`, :func:`check_environment` and
:func:`disk_report` (the free space where checkpoints, models and the DVC cache go);
every stage that loads a model runs :func:`require_environment` first, so a wrong
torch build or an impossible setting fails before minutes of loading, with what to do.
A write that fails for lack of space becomes one line naming the filesystem, what was
being written and where (:func:`writing`, :func:`out_of_space_message`).

The pitfalls (seed 000, section 6):
1. A CUDA or CPU wheel of torch installed over the ROCm one: ``torch.version.hip`` is
   ``None`` although the params ask for ROCm (``base.device: rocm``).
2. ``attn_implementation: flash_attention_2`` without flash-attn: on ROCm it must be
   compiled by hand; PyTorch's ``sdpa`` is fused already and needs nothing.
3. bf16 asked on a GPU without bf16, or bf16 or fp16 on a CPU without native support
   for it (emulated, slower than fp32; with it, training on a CPU autocasts over fp32
   weights).
And a warning: fp16 with a Gemma model (its activations overflow fp16: NaN losses).
Each stage that computes says in which dtype, on which device and why
(:func:`precision_line`), and records it (:func:`compute_dtype`).
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import json
import logging
import os
import platform
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from lorasent.errors import LorasentError
from lorasent.paths import BASE_MODEL_DIR, CHECKPOINT_DIR

log = logging.getLogger(__name__)

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ROCM_HELP = ("Install a ROCm build of torch from PyTorch's index, e.g. `make setup "
             "TORCH_INDEX_URL=https://download.pytorch.org/whl/rocm6.4` in a new .venv, or use "
             "the container (docker/rocm); never a plain `pip install torch`")


class EnvironmentProblem(LorasentError, RuntimeError):
    """The device, precision or attention asked for cannot work on this machine."""


@dataclass(frozen=True)
class Finding:
    """One check's outcome: ``fail`` stops a run, ``warn`` is printed."""

    level: Literal["fail", "warn"]
    message: str


# Where a device name came from, and what its error tells the user to change there.
PARAMS_DEVICE = ("base.device", "set base.device: auto")


def resolve_device(name: str, source: tuple[str, str] = PARAMS_DEVICE) -> torch.device:
    """The torch device for ``base.device`` (or another ``source``: ``(setting, fix)``,
    such as predict's ``--device`` and what to pass instead, :data:`PARAMS_DEVICE`).

    ``auto``: a ROCm or CUDA GPU (ROCm builds expose AMD GPUs as ``cuda``), else MPS,
    else the CPU. ``rocm`` and ``cuda`` insist on that GPU stack. In a process that
    ``accelerate launch`` started, a GPU is this process's own (``LOCAL_RANK``).

    Raises:
        EnvironmentProblem: the asked-for device is not there, saying why.
    """
    device = _resolve_device(name, *source)
    if device.type == "cuda" and "LOCAL_RANK" in os.environ:
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return device


def _resolve_device(name: str, setting: str, fix: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    build = f"torch {torch.__version__} (hip={torch.version.hip}, cuda={torch.version.cuda})"
    if name == "rocm":
        if torch.version.hip is None:
            raise EnvironmentProblem(
                f"{setting} is rocm but {build} is not a ROCm build: a CUDA or CPU wheel "
                f"was installed over the ROCm one. {ROCM_HELP}")
        if not torch.cuda.is_available():
            raise EnvironmentProblem(
                f"{setting} is rocm and {build} is a ROCm build, but it sees no GPU. Check "
                "that /dev/kfd and /dev/dri are present (in a container: --device=/dev/kfd "
                "--device=/dev/dri --group-add video), and for a card ROCm does not list, "
                "HSA_OVERRIDE_GFX_VERSION (see docker/README.md)")
        return torch.device("cuda")
    if name == "cuda" and not torch.cuda.is_available():
        raise EnvironmentProblem(f"{setting} is cuda but {build} sees no GPU; {fix} to "
                                 "use what is there")
    if name == "mps" and not torch.backends.mps.is_available():
        raise EnvironmentProblem(f"{setting} is mps but MPS is not available; {fix}")
    return torch.device(name)


# x86 flags of native bf16 arithmetic (Linux /proc/cpuinfo): AVX512-BF16 (Intel Cooper
# Lake and later, AMD Zen 4 and later) and AMX-BF16 (Intel Sapphire Rapids and later)
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# and of native fp16 arithmetic: AVX512-FP16 (Intel Sapphire Rapids and later) and
# AMX-FP16 (Intel Granite Rapids and later); elsewhere torch emulates fp16 on a CPU too
CPU_FP16_FLAGS = ("avx512_fp16", "amx_fp16")


def _cpu_flags(wanted: tuple[str, ...], cpuinfo: Path) -> list[str]:
    """The ``wanted`` flags this CPU lists in ``cpuinfo`` (empty where it lists none, or
    the file is absent: not Linux)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith(("flags", "Features"))), [])
    return [flag for flag in wanted if flag in flags]


def cpu_bf16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """The :data:`CPU_BF16_FLAGS` this CPU lists in ``cpuinfo`` (empty where it lists
    none, or the file is absent: not Linux)."""
    return _cpu_flags(CPU_BF16_FLAGS, cpuinfo)


def cpu_fp16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """The :data:`CPU_FP16_FLAGS` this CPU lists in ``cpuinfo``, as
    :func:`cpu_bf16_flags`."""
    return _cpu_flags(CPU_FP16_FLAGS, cpuinfo)


def bf16_supported(device: torch.device) -> bool:
    """Whether ``device`` computes in bf16 natively: a GPU from Ampere / CDNA on
    (``torch.cuda.is_bf16_supported``), a CPU with :data:`CPU_BF16_FLAGS` (elsewhere
    torch emulates bf16, slower than fp32)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool(cpu_bf16_flags())
    return True


def fp16_supported(device: torch.device) -> bool:
    """Whether ``device`` computes in fp16 natively: every GPU torch runs on, a CPU with
    :data:`CPU_FP16_FLAGS` (elsewhere torch emulates fp16, slower than fp32)."""
    if device.type == "cpu":
        return bool(cpu_fp16_flags())
    return True


def resolve_dtype(precision: str, device: torch.device) -> torch.dtype:
    """The compute dtype for ``base.precision``: ``auto`` is bf16 on a GPU that has it
    (seed 000's choice), else fp32 (on a CPU too, so that a committed run reproduces on
    any CPU). On a CPU, bf16 and fp16 are mixed precision: the weights stay fp32
    (:func:`weights_dtype`) and training runs under ``torch.autocast`` in that dtype.

    Raises:
        EnvironmentProblem: bf16 asked on a GPU or CPU without native bf16, or fp16 on a
            CPU without native fp16.
    """
    if precision == "auto":
        on_gpu_with_bf16 = device.type == "cuda" and bf16_supported(device)
        return torch.bfloat16 if on_gpu_with_bf16 else torch.float32
    if precision == "fp16" and not fp16_supported(device):
        raise EnvironmentProblem(
            f"base.precision is fp16 but this CPU ({cpu_model()}) has no native fp16 "
            f"(none of {', '.join(CPU_FP16_FLAGS)} in /proc/cpuinfo): emulated fp16 is "
            "slower than fp32; set base.precision: auto or fp32")
    if precision == "bf16" and not bf16_supported(device):
        if device.type == "cpu":
            raise EnvironmentProblem(
                f"base.precision is bf16 but this CPU ({cpu_model()}) has no native bf16 "
                f"(none of {', '.join(CPU_BF16_FLAGS)} in /proc/cpuinfo): emulated bf16 is "
                "slower than fp32; set base.precision: auto or fp32")
        raise EnvironmentProblem(
            f"base.precision is bf16 but {torch.cuda.get_device_name(device)} does not "
            "support bf16; set base.precision: auto (fp32 there) or fp32")
    return _DTYPES[precision]


def weights_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype the model's weights load in for compute dtype ``dtype``: fp32 on a CPU
    (bf16 or fp16 there is autocast over these fp32 weights, the LoRA weights and the
    optimiser state fp32 too), else ``dtype`` itself."""
    return torch.float32 if device.type == "cpu" else dtype


def dtype_name(dtype: torch.dtype) -> str:
    """``bf16``, ``fp16`` or ``fp32``: ``dtype`` as ``base.precision`` names it."""
    return next(name for name, value in _DTYPES.items() if value == dtype)


def compute_dtype(dtype: torch.dtype, device: torch.device, *, training: bool) -> str:
    """The dtype a stage's matrix products run in, as :func:`dtype_name` names it, for
    the compute dtype ``dtype`` that :func:`resolve_dtype` gave: training autocasts to
    ``dtype`` (the Trainer's ``bf16``/``fp16``, accelerate's autocast) over the weights of
    :func:`weights_dtype`; scoring (baseline, evaluate, predict) runs on those weights as
    loaded, so in fp32 on a CPU whatever ``base.precision`` says."""
    return dtype_name(dtype if training else weights_dtype(dtype, device))


def precision_line(stage: str, *, precision: str, dtype: torch.dtype, device: torch.device,
                   training: bool) -> str:
    """One line for a stage's log: the dtype it computes in (:func:`compute_dtype`), on
    which device, and why, e.g. ``train: computing in bf16 on cpu (native avx512_bf16;
    autocast over fp32 master weights; base.precision bf16)``."""
    used = compute_dtype(dtype, device, training=training)
    how = []
    if device.type == "cpu" and used != "fp32":
        flags = cpu_bf16_flags() if used == "bf16" else cpu_fp16_flags()
        how += [f"native {', '.join(flags)}", "autocast over fp32 master weights"]
    elif device.type == "cpu" and dtype != torch.float32:
        how.append(f"scoring runs on the fp32 weights; only training autocasts to "
                   f"{dtype_name(dtype)} on a CPU")
    elif device.type == "cuda":
        how.append(torch.cuda.get_device_name(device))
    asked = f"base.precision {precision}"
    if precision == "auto":
        asked += (": bf16 on a GPU that has it, else fp32" if device.type != "cpu"
                  else ": fp32 on a CPU, so that a committed run reproduces on any CPU")
    return f"{stage}: computing in {used} on {device.type} ({'; '.join([*how, asked])})"


def flash_attn_available() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def _is_gemma(model: str, model_dir: Path | None) -> bool:
    if "gemma" in model.lower():
        return True
    config = model_dir / "config.json" if model_dir else None
    if config and config.is_file():
        return json.loads(config.read_text(encoding="utf-8")).get("model_type", "").startswith(
            "gemma")
    return False


def check_environment(*, device: str, precision: str, attn_implementation: str, model: str,
                      model_dir: Path | None = None,
                      device_source: tuple[str, str] = PARAMS_DEVICE) -> list[Finding]:
    """Every problem with running these ``base`` params here (none: an empty list).
    ``device_source``: where ``device`` came from (:func:`resolve_device`)."""
    findings: list[Finding] = []
    try:
        torch_device = resolve_device(device, device_source)
        resolve_dtype(precision, torch_device)
    except EnvironmentProblem as err:
        findings.append(Finding("fail", str(err)))
    if attn_implementation == "flash_attention_2" and not flash_attn_available():
        findings.append(Finding(
            "fail", "base.attn_implementation is flash_attention_2 but flash-attn is not "
            "installed (on ROCm it must be compiled for your GPU). Use sdpa: PyTorch's fused "
            "attention, as fast at these lengths (seed 000 lost an hour to this)"))
    if precision == "fp16" and _is_gemma(model, model_dir):
        findings.append(Finding(
            "warn", "base.precision is fp16 with a Gemma model: Gemma's activations overflow "
            "fp16 (NaN or exploding loss); prefer bf16, or fp32 where bf16 is missing"))
    return findings


def params_choice(*, device: str, precision: str, attn_implementation: str,
                  num_processes: int) -> dict[str, Any]:
    """What these ``base`` params choose on this machine, resolved as the stages resolve
    them (:func:`resolve_device`, :func:`resolve_dtype`).

    Returns:
        ``device`` (``cpu``, ``cuda``, ...), ``precision`` (``bf16``, ``fp16`` or
        ``fp32``), ``attn_implementation`` and ``num_processes``; a value is ``None``
        where the params cannot run here (:func:`check_environment` says why).
    """
    choice: dict[str, Any] = {"device": None, "precision": None,
                              "attn_implementation": attn_implementation,
                              "num_processes": num_processes}
    try:
        torch_device = resolve_device(device)
        choice["device"] = str(torch_device)
        choice["precision"] = dtype_name(resolve_dtype(precision, torch_device))
    except EnvironmentProblem:
        pass
    if not attention_backends().get(attn_implementation):
        choice["attn_implementation"] = None
    return choice


def require_environment(*, device: str, precision: str, attn_implementation: str, model: str,
                        model_dir: Path | None = None,
                        device_source: tuple[str, str] = PARAMS_DEVICE,
                        ) -> tuple[torch.device, torch.dtype]:
    """Run :func:`check_environment`; log warnings, raise on a failure.

    Returns:
        the resolved ``(torch.device, torch.dtype)``.

    Raises:
        EnvironmentProblem: listing every failed check.
    """
    findings = check_environment(device=device, precision=precision,
                                 attn_implementation=attn_implementation, model=model,
                                 model_dir=model_dir, device_source=device_source)
    for f in findings:
        if f.level == "warn":
            log.warning(f.message)
    failures = [f.message for f in findings if f.level == "fail"]
    if failures:
        raise EnvironmentProblem("\n".join(failures) + "\n(`lorasent doctor` shows the "
                                 "whole environment)")
    torch_device = resolve_device(device)
    return torch_device, resolve_dtype(precision, torch_device)


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), else the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def attention_backends() -> dict[str, Any]:
    """Which ``attn_implementation`` values can run, and PyTorch's enabled SDPA kernels."""
    backends: dict[str, Any] = {"sdpa": hasattr(torch.nn.functional,
                                                "scaled_dot_product_attention"),
                                "eager": True, "flash_attention_2": flash_attn_available()}
    if torch.cuda.is_available():
        cuda = torch.backends.cuda
        backends["sdpa_kernels"] = {
            name: getattr(cuda, f"{name}_sdp_enabled")()
            for name in ("flash", "mem_efficient", "math", "cudnn")
            if hasattr(cuda, f"{name}_sdp_enabled")}
    return backends


# The CPU flags by which torch (ATen's capability, oneDNN, MKL), numpy and OpenBLAS pick
# their kernels on x86 (Linux /proc/cpuinfo names), and on Arm: two CPUs that differ in
# one of them may round the same sum differently (docs/reproducibility.md).
KERNEL_CPU_FLAGS = (
    "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512cd", "avx512bw", "avx512dq",
    "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx512ifma", "avx512vbmi",
    "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "asimd", "asimddp", "bf16", "i8mm",
    "sve", "sve2")
# Environment variables that change which kernels run or how many threads share a sum:
# ATen's capability, oneDNN's ISA cap, MKL's conditional numerical reproducibility and
# ISA cap, OpenBLAS's kernel, numpy's SIMD targets, the thread counts, cuBLAS's workspace.
KERNEL_VARIABLES = (
    "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS", "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES",
    "NPY_ENABLE_CPU_FEATURES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "CUBLAS_WORKSPACE_CONFIG")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str] | None:
    """The :data:`KERNEL_CPU_FLAGS` this CPU lists in ``cpuinfo``, in that order; None
    where the file is absent (not Linux)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    listed = next((line.split(":", 1)[1].split() for line in text.splitlines()
                   if line.startswith(("flags", "Features"))), [])
    return [flag for flag in KERNEL_CPU_FLAGS if flag in listed]


def numpy_simd() -> str | None:
    """numpy's highest SIMD dispatch target this CPU runs (``X86_V3``, ``AVX512_SKX``,
    ...), as ``numpy.show_runtime()`` reports it; None where numpy does not say."""
    import importlib

    try:  # numpy's own module for show_runtime's SIMD section (no public name)
        umath = importlib.import_module("numpy._core._multiarray_umath")
        dispatch, features = umath.__cpu_dispatch__, umath.__cpu_features__
    except (ImportError, AttributeError):
        return None
    running = [target for target in dispatch if features.get(target)]
    return str(running[-1]) if running else "baseline"


def kernel_report() -> dict[str, Any]:
    """What chooses the CPU kernels, and so the last bits of a float: torch's ATen CPU
    capability (``torch.backends.cpu.get_cpu_capability()``: ``AVX2``, ``AVX512``, ...),
    numpy's SIMD target (:func:`numpy_simd`), the CPU's :data:`KERNEL_CPU_FLAGS` and the
    :data:`KERNEL_VARIABLES` set in the environment. The same on every machine of one
    kind, so provenance keeps them beside the result (lorasent reproduce shows them)."""
    return {"torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "numpy_simd": numpy_simd(), "cpu_flags": cpu_flags(),
            "variables": {name: os.environ[name] for name in KERNEL_VARIABLES
                          if name in os.environ}}


# Files a container runtime puts at the root of every container it starts.
CONTAINER_MARKERS = (Path("/.dockerenv"), Path("/run/.containerenv"))


def container_report() -> dict[str, Any]:
    """Whether this process runs in a container, and which image, for provenance.

    Returns:
        ``in_container`` (Docker's ``/.dockerenv`` or Podman's ``/run/.containerenv``
        exists), ``image_id`` (``sha256:...``, what ``make docker-run``/``docker-run-cpu``
        pass as ``LORASENT_IMAGE_ID``), ``image_revision`` (the commit the image was
        built from, ``-dirty`` when uncommitted changes were in it; the Dockerfiles'
        ``VCS_REF``) and ``base_digest`` (the base image's ``name@sha256:...``; empty for
        a base made locally): each None when not known.
    """
    return {"in_container": any(marker.exists() for marker in CONTAINER_MARKERS),
            **{key: os.environ.get(var) or None for key, var in (
                ("image_id", "LORASENT_IMAGE_ID"), ("image_revision", "LORASENT_IMAGE_REVISION"),
                ("base_digest", "LORASENT_BASE_DIGEST"))}}


def environment_report(device: torch.device | str | None = None) -> dict[str, Any]:
    """Facts about torch and the device, for ``lorasent doctor`` and provenance.

    Returns:
        torch version, ``hip`` / ``cuda`` versions, device type, name and architecture
        (gfx id on AMD, sm_XY on NVIDIA), the GPU variables set
        (:func:`lorasent.programs.visible_devices`: which GPU a sweep gave the run), torch's
        CPU threads, bf16 support, attention backends, what chooses the CPU kernels
        (:func:`kernel_report`), the container and image it runs in
        (:func:`container_report`) and free and total memory in bytes (device memory on a
        GPU, RAM on the CPU).
    """
    import psutil

    from lorasent.programs import visible_devices

    device = torch.device(device) if device is not None else resolve_device("auto")
    report: dict[str, Any] = {
        "torch": torch.__version__, "hip": torch.version.hip, "cuda": torch.version.cuda,
        "device": str(device), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
        "visible_devices": visible_devices(), "torch_threads": torch.get_num_threads(),
        "bf16": bf16_supported(device),
        "cpu_bf16": (f"native ({', '.join(cpu_bf16_flags())})" if cpu_bf16_flags() else
                     "not native (emulated, slower than fp32: base.precision bf16 is refused "
                     "on this CPU)"),
        "attention": attention_backends(),
        "kernels": kernel_report(),
        "container": container_report(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        free, total = torch.cuda.mem_get_info(device)
        report.update(name=props.name,
                      arch=getattr(props, "gcnArchName", None) or f"sm_{props.major}{props.minor}",
                      memory_free_bytes=free, memory_total_bytes=total)
    else:
        memory = psutil.virtual_memory()
        report.update(name=report["cpu"], arch=platform.machine(),
                      memory_free_bytes=memory.available, memory_total_bytes=memory.total)
    return report


# ------------------------------------------------------------------ disk space

# What doctor asks to be free where a run writes when models/base is not fetched yet
# (so its size is unknown): 1 GiB, the packaged Gemma 3 270M in bf16 with room to spare.
FALLBACK_NEEDED_BYTES = 1 << 30
# A write that failed inside torch's C++ writer names no errno ("unexpected pos 704 vs
# 598", "basic_ios::clear"); it is taken as a full disk when less than this many bytes
# (1 MiB, a few filesystem blocks) are left free on the filesystem it wrote to.
NEARLY_FULL_BYTES = 1 << 20
_NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_NO_SPACE_TEXTS = ("No space left on device", "os error 28", "Disk quota exceeded",
                   "os error 122")
_TORCH_WRITER_TEXTS = ("basic_ios::clear", "unexpected pos", "PytorchStreamWriter failed")


class NoSpaceLeft(LorasentError):
    """A write failed because its filesystem is full (or the user's quota is spent)."""


def _existing(path: Path) -> Path:
    """``path`` made absolute, or its nearest ancestor that exists."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def filesystem(path: str | Path) -> dict[str, Any]:
    """The filesystem holding ``path`` (or, when it does not exist yet, the one its
    nearest existing ancestor is on).

    Returns:
        ``mount`` (its mount point), ``device`` (the device or kind, e.g. ``/dev/vda1``,
        ``tmpfs``; None where psutil does not list it), ``free_bytes`` (bytes this user
        may still write, ``shutil.disk_usage``) and ``total_bytes``.
    """
    import psutil

    found = _existing(Path(path))
    mount = found
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    device = next((p.device for p in psutil.disk_partitions(all=True)
                   if Path(p.mountpoint) == mount), None)
    usage = shutil.disk_usage(found)
    return {"mount": str(mount), "device": device, "free_bytes": usage.free,
            "total_bytes": usage.total}


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and the exceptions it was raised from or during, innermost last."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_out_of_space(err: BaseException, path: str | Path | None = None) -> bool:
    """Whether ``err`` (or an exception it came from) is a write that failed for lack of
    space: an ``OSError`` with errno ENOSPC or EDQUOT, a message saying so (safetensors'
    ``os error 28``), or torch's writer failing (``basic_ios::clear``, ``unexpected
    pos``) while the filesystem of ``path`` (the current folder when None) has less than
    :data:`NEARLY_FULL_BYTES` free."""
    for e in _chain(err):
        if isinstance(e, NoSpaceLeft):
            return True
        if isinstance(e, OSError) and e.errno in _NO_SPACE_ERRNOS:
            return True
        text = str(e)
        if any(t in text for t in _NO_SPACE_TEXTS):
            return True
        if isinstance(e, RuntimeError) and any(t in text for t in _TORCH_WRITER_TEXTS):
            where = path if path is not None else Path.cwd()
            with contextlib.suppress(OSError):
                if filesystem(where)["free_bytes"] < NEARLY_FULL_BYTES:
                    return True
    return False


def no_space_message(path: str | Path, what: str, remedy: str) -> str:
    """The one line for a write of ``what`` to ``path`` that found no space:
    ``no space left on <mount> (<device>, <free> GiB free) while writing <what>
    (<path>); free space there or <remedy>``."""
    fs = filesystem(path)
    device = f"{fs['device']}, " if fs["device"] else ""
    return (f"no space left on {fs['mount']} ({device}{fs['free_bytes'] / 2**30:.1f} GiB "
            f"free) while writing {what} ({path}); free space there or {remedy}")


SPACE_REMEDY = ("move the project to a larger disk (`lorasent doctor` shows the free space "
                "where checkpoints, models and the DVC cache go)")


def out_of_space_message(err: BaseException) -> str | None:
    """The one-line message for ``err`` when it is a write that failed for lack of space,
    else None. A :class:`NoSpaceLeft` keeps its own message; another exception names the
    file it carries (``OSError.filename``) or, when it names none, the current folder."""
    for e in _chain(err):
        if isinstance(e, NoSpaceLeft):
            return str(e)
    named = next((e.filename for e in _chain(err)
                  if isinstance(e, OSError) and e.filename), None)
    if not is_out_of_space(err, named):
        return None
    if named is None:
        return no_space_message(Path.cwd(), "a file under the current folder", SPACE_REMEDY)
    return no_space_message(named, "a file", SPACE_REMEDY)


@contextlib.contextmanager
def writing(what: str, path: str | Path, remedy: str = SPACE_REMEDY) -> Iterator[None]:
    """Turn a write in the block that fails for lack of space (:func:`is_out_of_space`)
    into :class:`NoSpaceLeft` naming ``what``, ``path`` and its filesystem; other errors
    pass unchanged.

    Raises:
        NoSpaceLeft: ``no space left on <mount> ... while writing <what> (<path>); free
            space there or <remedy>``.
    """
    try:
        yield
    except NoSpaceLeft:
        raise
    except Exception as err:
        if not is_out_of_space(err, path):
            raise
        raise NoSpaceLeft(no_space_message(path, what, remedy)) from err


def folder_bytes(folder: Path) -> int:
    """The total size in bytes of the files under ``folder`` (0 when it is absent)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def dvc_cache_dir(root: Path) -> Path | None:
    """The DVC cache folder of the repo holding ``root`` (``.dvc/cache`` unless
    ``dvc cache dir`` set another), read through DVC's API; None outside a DVC repo."""
    from dvc.exceptions import NotDvcRepoError
    from dvc.repo import Repo

    try:
        with Repo(str(root)) as repo:
            cache = repo.cache.local_cache_dir
    except NotDvcRepoError:
        return None
    return Path(cache) if cache else None


def disk_report(root: Path) -> dict[str, Any]:
    """Free space where a run in the project folder ``root`` writes, for
    ``lorasent doctor``.

    Returns:
        ``needed_bytes``: the space a run wants free on each of them: the size of
        ``models/base`` (a refetch writes a new copy beside the old one, DVC caches a
        copy, and the checkpoints of a LoRA run, the last two kept and one being
        written, are smaller), or :data:`FALLBACK_NEEDED_BYTES` before it is fetched;
        ``needed_from`` (that folder, or ``"fallback"``); and ``places``:
        ``checkpoints``, ``models`` and ``dvc_cache`` (None outside a DVC repo), each
        ``{"path", "mount", "device", "free_bytes", "total_bytes"}``
        (:func:`filesystem`).
    """
    base = root / BASE_MODEL_DIR
    size = folder_bytes(base) if base.is_dir() else 0
    cache = dvc_cache_dir(root)
    places: dict[str, Any] = {}
    for name, path in (("checkpoints", root / CHECKPOINT_DIR),
                       ("models", root / BASE_MODEL_DIR.parent), ("dvc_cache", cache)):
        places[name] = None if path is None else {"path": str(path), **filesystem(path)}
    return {"needed_bytes": size or FALLBACK_NEEDED_BYTES,
            "needed_from": str(base) if size else "fallback", "places": places}


def disk_findings(report: dict[str, Any]) -> list[Finding]:
    """A warning for each filesystem of :func:`disk_report` with less free than
    ``needed_bytes``, naming the places it holds."""
    low: dict[str, list[str]] = {}
    free: dict[str, int] = {}
    for name, place in report["places"].items():
        if place is not None and place["free_bytes"] < report["needed_bytes"]:
            low.setdefault(place["mount"], []).append(name)
            free[place["mount"]] = place["free_bytes"]
    needed = report["needed_bytes"] / 2**30
    basis = ("the size of models/base" if report["needed_from"] != "fallback"
             else "models/base is not fetched yet")
    return [Finding("warn", f"{free[mount] / 2**30:.1f} GiB free on {mount} (holding "
                    f"{', '.join(names)}); a run wants about {needed:.1f} GiB there "
                    f"({basis}): free space there, or move the DVC cache (`dvc cache dir "
                    "PATH`) or checkpoints/ (a link) to a larger disk")
            for mount, names in low.items()]
