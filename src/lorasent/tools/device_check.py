"""``make device-check``: one prepared check of a GPU machine, its results committed.

Usage: ``python -m lorasent.tools.device_check [--out bench] [--peak-tflops X] [--device cuda]``

Meant to be run once whenever a machine with an NVIDIA or AMD ROCm GPU (torch calls
both ``cuda``) is at hand; it takes a few minutes (sized for under 8 on one GPU). In
order, each part printing a progress line:

1. ``lorasent doctor --json`` in the project folder: torch, the GPU, the libraries and
   what ``params.yaml`` chooses there. Its findings are recorded; a failing finding does
   not fail the check.
2. ``python -m lorasent.tools.bench --device cuda --no-pipeline`` (with ``--peak-tflops`` when
   given: about 989 for an H200's bf16 dense peak, 1307 for an MI300X), in its own
   process: Gemma 3 270M and Gemma 2B with random weights in bf16, every way of the
   training step and of label scoring that bench measures, with tokens/s and model
   FLOP/s. Its ``results.json`` is carried into the report unchanged.
3. The real pipeline (fetch -> split -> baseline -> train -> evaluate) on a small run
   (:data:`SMALL_RUN`: 64 training tweets, 8 steps, 200 test tweets), on a copy of the
   git-tracked files, first with ``base.device: cpu``, then with ``base.device: cuda``
   (``base.precision: auto``: fp32 on the CPU, bf16 on the GPU, what users get). The two
   runs' ``metrics/predictions.csv`` are joined on the row ``id``; the check passes when
   at least :data:`MIN_AGREEMENT` of the test rows get the same predicted label. The
   zero-shot predictions (``metrics/baseline_predictions.csv``, no training) are
   compared the same way, for information.

Writes ``<out>/results-gpu.json`` (the machine, doctor's JSON, bench's results and
summary, the pipeline comparison, each part's wall time in seconds, ``passed``) and
``<out>/results-gpu.md`` (bench's tables as :func:`lorasent.tools.bench_report.markdown` renders
them, the agreement, the verdict), both only at the end and each atomically: an
interrupted check leaves neither half-written. A part that fails is recorded with its
error and the check goes on with the next part. Exit status 0 when every part ran and
the agreement is at least :data:`MIN_AGREEMENT`, 1 otherwise, 2 when torch sees no GPU.

``--device cpu`` runs everything on the CPU (the pipeline then compares the CPU with
itself), and ``--bench-args`` passes more options to bench (``--model tiny --steps 1``):
for tests and dry runs. Times are seconds, rates per second, shares in [0, 1].
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lorasent.git import run_git
from lorasent.paths import CHECKOUT
from lorasent.statistics import with_interval
from lorasent.tools import finite_float

# The check passes when at least this share of the test rows get the same label on the
# GPU (bf16) as on the CPU (fp32).
MIN_AGREEMENT = 0.98
# The small run of part 3, merged into a copy of params.yaml: well under 2 minutes a run
# on a GPU machine with 16 cores.
SMALL_RUN: dict[str, Any] = {
    "split": {"train_size": 64, "validation_size": 0, "test_size": 200},
    "train": {"max_steps": 8, "per_device_train_batch_size": 8},
    "evaluate": {"batch_size": 16},
}
PREDICTIONS = "metrics/predictions.csv"
ZERO_SHOT_PREDICTIONS = "metrics/baseline_predictions.csv"
OUTPUT_TAIL = 3000  # characters of a failed command's output kept in its error


class CheckError(RuntimeError):
    """A part of the check could not run; the message says which command and why."""


def _env() -> dict[str, str]:
    """The environment of the commands run: this Python's folder first on PATH, so that
    ``dvc`` and ``lorasent`` are the ones beside it."""
    return {**os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _run(argv: list[str], cwd: Path, what: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``cwd``, output captured; raise :class:`CheckError` naming ``what``
    with the end of its output when it fails."""
    return _checked(subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True,
                                   text=True), argv, what)


def _git(root: Path, what: str, *args: str) -> None:
    """``git <args>`` in ``root`` (:func:`lorasent.git.run_git`), checked as :func:`_run`
    checks a command."""
    _checked(run_git(root, *args, env=_env()), ["git", *args], what)


def _checked(done: subprocess.CompletedProcess[str], argv: list[str], what: str
             ) -> subprocess.CompletedProcess[str]:
    """``done``, or a :class:`CheckError` naming ``what`` and ``argv`` with the end of its
    output when it failed."""
    if done.returncode:
        output = (done.stdout + done.stderr)[-OUTPUT_TAIL:]
        raise CheckError(f"{what}: `{shlex.join(argv)}` exited with {done.returncode}:\n"
                         f"{output}")
    return done


# ------------------------------------------------------------------------------ parts

def machine_info(device: str) -> dict[str, Any]:
    """The machine: lorasent's environment report (torch, HIP/CUDA versions, the GPU's
    name, architecture and memory), plus ``gpu``, Python, the platform and the commit."""
    from lorasent.environment import environment_report
    from lorasent.provenance import git_state

    report = environment_report(torch.device(device))
    return {**report, "gpu": report["name"] if device == "cuda" else None,
            "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "python": platform.python_version(), "platform": platform.platform(),
            "git": git_state(CHECKOUT)}


def run_doctor(repo: Path = CHECKOUT) -> dict[str, Any]:
    """``lorasent doctor --json`` in ``repo``: its report, its exit status and the
    findings it calls problems (``fail`` and ``warn``). A status of 1 (a failing
    finding) is recorded, not raised.

    Raises:
        CheckError: doctor printed no JSON (it crashed).
    """
    done = subprocess.run([sys.executable, "-m", "lorasent.cli", "doctor", "--json"],
                          cwd=repo, env=_env(), capture_output=True, text=True)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise CheckError(f"lorasent doctor --json exited with {done.returncode} and printed "
                         f"no JSON:\n{(done.stdout + done.stderr)[-OUTPUT_TAIL:]}") from None
    return {"returncode": done.returncode, "problems": report.get("findings", []),
            "report": report}


def run_bench(device: str, peak_tflops: float | None, extra: list[str],
              repo: Path = CHECKOUT) -> dict[str, Any]:
    """``python -m lorasent.tools.bench --device <device> --no-pipeline`` in its own process,
    its progress on this standard output; returns its ``results.json`` as it wrote it.

    Raises:
        CheckError: bench failed (the message holds the end of its standard error).
    """
    with tempfile.TemporaryDirectory(prefix="lorasent-device-check-bench-") as tmp:
        argv = [sys.executable, "-m", "lorasent.tools.bench", "--device", device, "--no-pipeline",
                "--out", tmp, *(["--peak-tflops", str(peak_tflops)] if peak_tflops else []),
                *extra]
        done = subprocess.run(argv, cwd=repo, env=_env(), stderr=subprocess.PIPE, text=True)
        if done.returncode:
            raise CheckError(f"bench: `{shlex.join(argv)}` exited with {done.returncode}:\n"
                             f"{done.stderr[-OUTPUT_TAIL:]}")
        result: dict[str, Any] = json.loads((Path(tmp) / "results.json").read_text("utf-8"))
    return result


def run_pipeline(repo: Path, root: Path, device: str, changes: dict[str, Any]) -> float:
    """Copy ``repo``'s tracked files into ``root``, merge ``changes`` and
    ``base.device: <device>`` into its params.yaml, commit it as a fresh git repository
    and run ``dvc repro`` there; returns the seconds of ``dvc repro``.

    Raises:
        CheckError: git or ``dvc repro`` failed (with the end of its output).
    """
    from lorasent.params import merge, update_params
    from lorasent.tools.bench import copy_tracked

    copy_tracked(repo, root)
    update_params(merge(changes, {"base": {"device": device}}), root / "params.yaml")
    _git(root, "git init", "init", "-q")
    _git(root, "git add", "add", "-A")
    _git(root, "git commit", "-c", "user.name=device-check", "-c",
         "user.email=device-check@example.com", "-c", "commit.gpgsign=false", "commit", "-q",
         "-m", "device-check")
    started = time.perf_counter()
    _run(["dvc", "repro"], root, f"the pipeline on {device}")
    return time.perf_counter() - started


def compare_predictions(a_text: str, b_text: str, a_source: str = "a",
                        b_source: str = "b") -> dict[str, Any]:
    """Two predictions files (the ``id,actual,predicted,p_<label>...`` CSV that baseline
    and evaluate write) joined on the row id.

    Returns:
        ``rows`` (ids in both), ``same`` (of those, rows with the same predicted label),
        ``agreement`` (``same / rows``; None when no row joins), ``only_in_a`` and
        ``only_in_b`` (ids in one file alone), each file's accuracy over all its rows,
        and up to 20 ids whose labels differ, with both labels and ``margin_a``: how
        close a tie the row was in ``a``, the log-probability of its top label minus its
        second's (bf16 against fp32 flips near-ties first).

    Raises:
        LorasentError: a file that :func:`lorasent.metrics.read_predictions` refuses
            (no ``id`` column, a row id twice, no data rows, a damaged row).
    """
    from lorasent.metrics import read_predictions

    def by_id(text: str, source: str,
              ) -> tuple[dict[str, str], dict[str, float | None], float | None]:
        p = read_predictions(text, source)
        labels = {row_id: p.labels[int(k)] for row_id, k in zip(p.ids, p.predicted,
                                                                 strict=True)}
        top2 = np.sort(p.probabilities, axis=1)[:, -2:]
        with np.errstate(divide="ignore", invalid="ignore"):
            gaps = np.log(top2[:, 1]) - np.log(top2[:, 0])
        # None where a probability of 0 makes it infinite (strict JSON has no Infinity)
        margins = {row_id: round(float(g), 4) if np.isfinite(g) else None
                   for row_id, g in zip(p.ids, gaps, strict=True)}
        accuracy = float((p.actual == p.predicted).mean())
        return labels, margins, accuracy

    a, margins, accuracy_a = by_id(a_text, a_source)
    b, _, accuracy_b = by_id(b_text, b_source)
    common = [row_id for row_id in a if row_id in b]
    differ = [row_id for row_id in common if a[row_id] != b[row_id]]
    same = len(common) - len(differ)
    return {"rows": len(common), "same": same,
            "agreement": same / len(common) if common else None,
            "only_in_a": len(a.keys() - b.keys()), "only_in_b": len(b.keys() - a.keys()),
            "accuracy_a": accuracy_a, "accuracy_b": accuracy_b,
            "differing": [{"id": row_id, "a": a[row_id], "b": b[row_id],
                           "margin_a": margins[row_id]} for row_id in differ[:20]]}


def agreement_passes(comparison: dict[str, Any]) -> bool:
    """Whether every row joined and at least :data:`MIN_AGREEMENT` of them agree."""
    return (comparison["rows"] > 0 and comparison["only_in_a"] == 0
            and comparison["only_in_b"] == 0 and comparison["agreement"] >= MIN_AGREEMENT)


def compare_pipelines(repo: Path = CHECKOUT, devices: tuple[str, str] = ("cpu", "cuda"),
                      changes: dict[str, Any] = SMALL_RUN) -> dict[str, Any]:
    """The pipeline run on ``devices[0]``, then on ``devices[1]`` (see
    :func:`run_pipeline`), each in its own temporary copy of ``repo``; the two runs'
    predictions compared (:func:`compare_predictions`, ``a`` the first device).

    Returns:
        ``devices``, ``changes`` (the params merged), ``runs`` (per run: device, seconds
        of ``dvc repro``, accuracy), ``predictions`` (the adapter's predictions
        compared), ``zero_shot`` (the baseline's), ``min_agreement`` and ``passed``.
    """
    runs, texts = [], []
    for device in devices:
        with tempfile.TemporaryDirectory(prefix=f"lorasent-device-check-{device}-") as tmp:
            root = Path(tmp)
            print(f"device-check: pipeline on {device} (dvc repro in {root}) ...", flush=True)
            seconds = run_pipeline(repo, root, device, changes)
            texts.append({name: (root / name).read_text("utf-8")
                          for name in (PREDICTIONS, ZERO_SHOT_PREDICTIONS)})
            runs.append({"device": device, "dvc_repro_s": seconds})
    sources = [f"{PREDICTIONS} ({device}, run {i + 1})" for i, device in enumerate(devices)]
    predictions = compare_predictions(texts[0][PREDICTIONS], texts[1][PREDICTIONS], *sources)
    zero_shot = compare_predictions(texts[0][ZERO_SHOT_PREDICTIONS],
                                    texts[1][ZERO_SHOT_PREDICTIONS],
                                    *(s.replace(PREDICTIONS, ZERO_SHOT_PREDICTIONS)
                                      for s in sources))
    for run, key in zip(runs, ("accuracy_a", "accuracy_b"), strict=True):
        run["accuracy"] = predictions[key]
    return {"devices": list(devices), "changes": changes, "runs": runs,
            "predictions": predictions, "zero_shot": zero_shot,
            "min_agreement": MIN_AGREEMENT, "passed": agreement_passes(predictions)}


# ----------------------------------------------------------------------------- report

def _fmt(value: float | None) -> str:
    return with_interval(value, digits=3, missing="n/a")


def agreement_line(pipeline: dict[str, Any]) -> str:
    """One sentence: how many test rows agree between the two runs, and their accuracy."""
    a, b = pipeline["devices"]
    p, z = pipeline["predictions"], pipeline["zero_shot"]
    unmatched = (f"; {p['only_in_a']} rows only on {a}, {p['only_in_b']} only on {b}"
                 if p["only_in_a"] or p["only_in_b"] else "")
    margins = [d["margin_a"] for d in p["differing"] if d.get("margin_a") is not None]
    ties = (f" Largest margin on {a} of a row that differs (log-probability of its top label "
            f"minus its second's; near 0: a near-tie): {max(margins):.3f}." if margins else "")
    return (f"Agreement: {p['same']} of {p['rows']} test rows ({_fmt(p['agreement'])}) get "
            f"the same predicted label on {b} as on {a}{unmatched}; accuracy "
            f"{_fmt(p['accuracy_a'])} on {a}, {_fmt(p['accuracy_b'])} on {b}. Zero-shot "
            f"(no training): {z['same']} of {z['rows']} ({_fmt(z['agreement'])}).{ties}")


def _flops_lines(bench: dict[str, Any]) -> list[str]:
    """One line per train part of bench that reports model FLOP/s."""
    lines = []
    for key, models in bench["results"].items():
        if not key.startswith("train"):
            continue
        for model, part in models.items():
            flops = [f"{name} {way['model_flops_per_s'] / 1e12:.1f}"
                     for name, way in part["ways"].items() if "model_flops_per_s" in way]
            if not flops:
                continue
            ratios = bench["summary"]["ratios"].get(model, {}) if key == "train" else {}
            mfu = [f"{ratios[k]:.3f} {against}" for k, against in (
                ("train_mfu", "of the matmul rate measured beside it"),
                ("train_mfu_vs_peak", "of --peak-tflops")) if k in ratios]
            what = model + ("" if key == "train" else
                            ", " + key.removeprefix("train_").replace("_", " "))
            lines.append(f"- {what}, model TFLOP/s (bench's matrix products per step, "
                         f"counted from the config): {', '.join(flops)}"
                         + (f"; the project's model FLOP utilisation {', '.join(mfu)}"
                            if mfu else ""))
    return [*lines, ""] if lines else []


def markdown(report: dict[str, Any]) -> str:
    """``results-gpu.md``: the machine, doctor's findings, bench's tables (as
    :func:`lorasent.tools.bench_report.markdown` renders them), the agreement line, the verdict; a
    part that failed shows its error in its place."""
    from lorasent.tools.bench_report import markdown as bench_markdown

    m, parts = report["machine"], report["parts"]
    gpu = f"{m['gpu']} ({m.get('arch')})" if m.get("gpu") else "no GPU (device cpu)"
    times = ", ".join(f"{name} {part['wall_time_s']:.0f} s" for name, part in parts.items())
    lines = [f"# GPU check: {m.get('gpu') or 'cpu'}", "",
             f"{report['date']}, {gpu}; torch {m['torch']}, CUDA {m['cuda']}, HIP {m['hip']}; "
             f"{m['cpu']}, {m['cpu_count']} cores. Wall time {report['wall_time_s']:.0f} s "
             f"({times}).", ""]

    def failure(name: str) -> list[str]:
        error = parts[name]["error"]
        return [f"{name} FAILED:", "", "```", error.rstrip("\n"), "```", ""] if error else []

    doctor, bench, pipeline = report.get("doctor"), report.get("bench"), report.get("pipeline")
    lines += failure("doctor")
    if doctor is not None:
        problems = "; ".join(f"{f['level'].upper()}: {f['message']}" for f in doctor["problems"])
        lines += [f"`lorasent doctor`: {problems or 'no problems'} (exit status "
                  f"{doctor['returncode']}).", ""]
    lines += ["## Benchmark", "", *failure("bench")]
    if bench is not None:
        lines += [bench_markdown(bench).rstrip("\n"), "", *_flops_lines(bench)]
    lines += ["## Pipeline on the GPU against the CPU", "", *failure("pipeline")]
    if pipeline is not None:
        changes = ", ".join(f"{section}.{key} {value}"
                            for section, keys in pipeline["changes"].items()
                            for key, value in keys.items())
        lines += [f"Small run ({changes}); `dvc repro` took "
                  + ", ".join(f"{r['dvc_repro_s']:.0f} s on {r['device']}"
                              for r in pipeline["runs"]) + ".", "",
                  agreement_line(pipeline), ""]
    failed = [name for name, part in parts.items() if part["error"]]
    agreement = _fmt(pipeline["predictions"]["agreement"]) if pipeline is not None else "n/a"
    if report["passed"]:
        verdict = f"passed (agreement {agreement} >= {MIN_AGREEMENT}; every part ran)"
    elif failed:
        verdict = f"FAILED ({', '.join(failed)} did not finish)"
    else:
        verdict = (f"FAILED (agreement {agreement} < {MIN_AGREEMENT}, or rows that did not "
                   "join)")
    lines.append(f"**Verdict: {verdict}**")
    return "\n".join(lines) + "\n"


def write_report(out: Path, report: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``<out>/results-gpu.json`` and ``<out>/results-gpu.md``, each atomically, both
    rendered before either is written."""
    from lorasent.atomic import atomic_write_text

    as_json = json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    as_markdown = markdown(report)
    paths = out / "results-gpu.json", out / "results-gpu.md"
    atomic_write_text(paths[0], as_json)
    atomic_write_text(paths[1], as_markdown)
    return paths


# ------------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    from lorasent.output_guard import unwritable
    from lorasent.tools.bench import no_gpu_message

    parser = argparse.ArgumentParser(prog="python -m lorasent.tools.device_check",
                                     description=(__doc__ or "").split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("bench"),
                        help="folder for results-gpu.json and results-gpu.md (default: bench, "
                             "committed)")
    parser.add_argument("--peak-tflops", type=finite_float, default=None,
                        help="the GPU's peak dense bf16 TFLOP/s, for the model FLOP utilisation "
                             "against it besides the measured rate's (H200 about 989, MI300X "
                             "about 1307)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="the device checked (cuda also means a ROCm GPU); cpu runs "
                             "everything on the CPU, for tests")
    parser.add_argument("--bench-args", default="", metavar="ARGS",
                        help="more options for `python -m lorasent.tools.bench`, one string, e.g. "
                             "'--model tiny --steps 1 --warmup 0'")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error(no_gpu_message() + " Run this check on a machine lent a GPU.")
    problem = unwritable(args.out / "results-gpu.json")
    if problem is not None:  # before the check's minutes, not after
        parser.error(f"--out {args.out}: {problem}; give a folder you can write to")

    started = time.perf_counter()
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": ["python", "-m", "lorasent.tools.device_check", *(sys.argv[1:] if argv is None
                                                                else argv)],
        "machine": machine_info(args.device), "min_agreement": MIN_AGREEMENT}
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("doctor", run_doctor),
        ("bench", lambda: run_bench(args.device, args.peak_tflops,
                                    shlex.split(args.bench_args))),
        ("pipeline", lambda: compare_pipelines(CHECKOUT, ("cpu", args.device))),
    ]
    parts: dict[str, dict[str, Any]] = {}
    for name, step in steps:
        print(f"device-check: {name} ...", flush=True)
        part_started = time.perf_counter()
        error = None
        try:
            report[name] = step()
        except Exception as err:  # recorded; the next part still runs
            report[name], error = None, f"{type(err).__name__}: {err}"
            print(f"device-check: {name} FAILED: {error}", file=sys.stderr, flush=True)
        parts[name] = {"wall_time_s": time.perf_counter() - part_started, "error": error}
        print(f"device-check: {name} done in {parts[name]['wall_time_s']:.0f} s", flush=True)
    pipeline = report.get("pipeline")
    report.update(parts=parts, wall_time_s=time.perf_counter() - started,
                  passed=all(p["error"] is None for p in parts.values())
                  and pipeline is not None and pipeline["passed"])
    json_path, md_path = write_report(args.out, report)
    print(md_path.read_text("utf-8"))  # as written, not rendered again
    print(f"device-check: {'passed' if report['passed'] else 'FAILED'} in "
          f"{report['wall_time_s']:.0f} s; wrote {json_path} and {md_path}", flush=True)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
