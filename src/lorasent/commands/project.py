"""``lorasent doctor``, ``preset`` and ``metrics``: the project's environment, params and
headline numbers."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lorasent.command_errors import user_errors
from lorasent.errors import LorasentError
from lorasent.params import Params, load_params

if TYPE_CHECKING:
    from lorasent.environment import Finding


@click.command()
@click.option("--params", "params_path", default="params.yaml", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Params whose device, precision and attention to check (skipped if "
              "the default is absent).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@user_errors
def doctor(params_path: Path, as_json: bool) -> None:
    """Report torch, the device and the libraries; check the params' environment needs
    and say what they choose here (device, precision, attention, processes).

    Also reports the free space (bytes in --json, GiB in text) of the filesystems holding
    checkpoints/, models/ and the DVC cache of the params' folder, and warns where one
    has less than a run wants (:func:`lorasent.environment.disk_report`).

    Without a params file (none in the current folder) the params checks are skipped,
    and the output says so.

    Exits with status 1 when a check fails (e.g. base.device: rocm on a CUDA wheel).

    Raises:
        LorasentError: a ``--params`` file given that is not there.
    """
    import json

    from lorasent.environment import (
        check_environment,
        disk_findings,
        disk_report,
        environment_report,
        params_choice,
    )
    from lorasent.paths import BASE_MODEL_DIR
    from lorasent.provenance import package_versions

    given = (click.get_current_context().get_parameter_source("params_path")
             is not click.core.ParameterSource.DEFAULT)
    if given and not params_path.is_file():
        raise LorasentError(f"--params {params_path}: not found")
    report = {**environment_report(), "packages": package_versions()}
    findings, choice, params = [], None, None
    skipped = (f"skipped the params checks: no {params_path} in {Path.cwd()}; run "
               "`lorasent doctor` in the project folder (the one holding params.yaml) or "
               "pass --params PATH")
    if params_path.is_file():
        params = load_params(params_path)
        base = params.base
        findings = check_environment(device=base.device, precision=base.precision,
                                     attn_implementation=base.attn_implementation,
                                     model=base.model,
                                     model_dir=params_path.parent / BASE_MODEL_DIR)
        choice = params_choice(device=base.device, precision=base.precision,
                               attn_implementation=base.attn_implementation,
                               num_processes=base.num_processes)
        findings += _test_set_findings(params, params_path.parent)
    disk = disk_report(params_path.parent)
    if params is not None:
        findings += disk_findings(disk)
    if as_json:
        checked = {"path": str(params_path), "checked": params is not None, "choice": choice,
                   **({} if params else {"note": skipped})}
        click.echo(json.dumps({**report, "disk": disk, "params": checked,
                               "findings": [f.__dict__ for f in findings]}, indent=2))
    else:
        for key, value in report.items():
            if isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            elif key.endswith("_bytes"):
                key, value = key.removesuffix("_bytes"), f"{value / 2**30:.1f} GiB"
            click.echo(f"{key:>14}: {value}")
        basis = (f"the size of {disk['needed_from']}" if disk["needed_from"] != "fallback"
                 else "models/base is not fetched yet")
        click.echo(f"\nfree space (a run wants about {disk['needed_bytes'] / 2**30:.1f} GiB "
                   f"on each; {basis}):")
        for key, place in disk["places"].items():
            click.echo(f"{key:>14}: " + ("none (not in a DVC repo)" if place is None else
                       f"{place['free_bytes'] / 2**30:.1f} GiB free of "
                       f"{place['total_bytes'] / 2**30:.1f} GiB on {place['mount']}"
                       + (f" ({place['device']})" if place["device"] else "")
                       + f": {place['path']}"))
        if params is None or choice is None:  # both set, or neither
            click.echo(f"\n{skipped}")
        else:
            click.echo(f"\n{params_path} chooses here:")
            for key, name in (("device", "device"), ("precision", "precision"),
                              ("attention", "attn_implementation"),
                              ("processes", "num_processes")):
                value = choice[name] if choice[name] is not None else "none (see FAIL below)"
                click.echo(f"{key:>14}: {value}  (base.{name}: {getattr(base, name)})")
            if params.train.accelerate_config:
                click.echo(f"{'':>16}train: as train.accelerate_config "
                           f"{params.train.accelerate_config} says")
            click.echo(f"\nchecked {params_path}: " + ("no problems" if not findings else ""))
        for f in findings:
            click.echo(f"  {f.level.upper()}: {f.message}")
    if any(f.level == "fail" for f in findings):
        sys.exit(1)


@click.command()
@click.argument("preset_path", metavar="PRESET",
                type=click.Path(dir_okay=False, path_type=Path))
@click.option("--params", "params_path", default="params.yaml", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Params file to merge the preset into.")
@user_errors
def preset(preset_path: Path, params_path: Path) -> None:
    """Merge a preset (configs/*.yaml) into params.yaml, validated first.

    Sections merge key by key; lists, values and the label-keyed maps (base.label_aliases,
    prompt.label_words) are replaced whole. Then `dvc repro` (or `dvc exp run`) runs it;
    `git checkout params.yaml` returns to the committed params.
    """
    from lorasent.params import apply_preset

    params = apply_preset(preset_path, params_path)
    click.echo(f"{params_path}: merged {preset_path} (train.mode {params.train.mode}, "
               f"base.model {params.base.model}, data.source {params.data.source})")


@click.command()
@user_errors
def metrics() -> None:
    """Print the headline of metrics/eval.json: accuracy, macro-F1 and the relative error
    reduction with their 95% intervals, each class's F1, the baselines and the warnings.

    The narrow view of `dvc metrics show`, which prints every key of every file. A first
    WARNING line says when `dvc status` finds the workspace stale (params, code or data
    changed since the last `dvc repro`), in one short line: what is out of date and why.

    Where metrics/seeds.json (`lorasent seeds`) holds params.yaml's params, less
    base.seed, the verdict over its seeds against the strongest reference comes first,
    and the run's own verdict follows as "this seed (N)" (a damaged record: one WARNING
    line, and the output as without one).
    """
    import json

    from lorasent.contracts import EvalMetrics, read
    from lorasent.modes import MODES
    from lorasent.paths import BASELINE_METRICS, EVAL_METRICS, PROVENANCE_DIR
    from lorasent.references import seconds_here
    from lorasent.review.collect import workspace_staleness
    from lorasent.review.seeds_record import (
        committed_seeds_record,
        group_line,
        params_at,
        seed_line,
        seed_of,
    )
    from lorasent.statistics import RESAMPLES, resamples_said, with_interval

    m = read(EvalMetrics, EVAL_METRICS, "rerun evaluate (dvc repro)")
    seconds = seconds_here(PROVENANCE_DIR)
    stale = workspace_staleness()
    if stale:
        click.echo(f"WARNING: {stale.line(str(EVAL_METRICS))}")
    base = m.baseline
    baselines = (json.loads(BASELINE_METRICS.read_text(encoding="utf-8"))
                 if BASELINE_METRICS.is_file() else {})
    zero_shot = baselines.get("zero_shot") or {}

    def baseline(key: str, which: str = "zero_shot") -> str:  # baseline.json: no contract
        found = baselines.get(which) or {}
        return with_interval(*(found.get(k) for k in (key, f"{key}_ci95_low",
                                                       f"{key}_ci95_high")))

    method = m.intervals
    rows = [("accuracy", with_interval(*m.interval("accuracy"))),
            ("macro-F1", with_interval(*m.interval("macro_f1"))),
            *_reduction_rows(m),
            *((f"F1 {label}", f"{scores.f1:.4f}  (support {scores.support})")
              for label, scores in m.per_class.items()),
            ("majority-class baseline",
             f"{base.majority_accuracy:.4f}  (always `{base.majority_class}`)"),
            ("zero-shot baseline",
             f"{baseline('accuracy')}  macro-F1 {baseline('macro_f1')}" if zero_shot
             else f"none ({m.mode})" if m.mode and not MODES[m.mode].zero_shot else "none"),
            *([("calibrated zero-shot",
                f"{baseline('accuracy', 'zero_shot_calibrated')}  macro-F1 "
                f"{baseline('macro_f1', 'zero_shot_calibrated')}")]
              if base.zero_shot_calibrated_accuracy is not None else []),
            *_supervised_rows(m, seconds),
            *_calibration_rows(m)]
    params = params_at()
    record = committed_seeds_record(params, warn=lambda line: click.echo(f"WARNING: {line}"))
    verdict = m.strongest_verdict(seconds)
    if record is not None:
        click.echo(f"The adapter {group_line(record)}.")
    if verdict and record is not None:
        ref = (m.references or {}).get(m.strongest_supervised or "")
        word = ref.paired.verdict if ref is not None and ref.paired is not None else None
        click.echo(f"The adapter, "
                   f"{seed_line(record, seed_of(params), verdict, m.strongest_supervised, word)}")
    elif verdict:
        click.echo(f"The adapter: {verdict}")
    click.echo(f"{EVAL_METRICS}: {m.test_rows} test rows, {m.mode} mode"
               + (f"; [95% interval: {method.method}, {method.resamples:,} resamples]"
                  if method else ""))
    for name, value in rows:
        click.echo(f"  {name:<26}{value}")
    for name, s in m.test_sets.items():  # its resamples where not the header's
        fewer = resamples_said(s.intervals.resamples if s.intervals else None,
                               method.resamples if method else RESAMPLES)
        click.echo(f"test set {name} ({s.source}): {s.test_rows} rows"
                   + (f"; [95% interval: {fewer}]" if fewer else ""))
        for row, value in [("accuracy", with_interval(*s.interval("accuracy"))),
                           ("macro-F1", with_interval(*s.interval("macro_f1"))),
                           *_reduction_rows(s), *_calibration_rows(s)]:
            click.echo(f"  {row:<26}{value}")
    for warning in m.warnings:
        click.echo(f"WARNING: {warning}")
    for name, s in m.test_sets.items():
        for warning in s.warnings:
            click.echo(f"WARNING ({name}): {warning}")


def _reduction_rows(m: Any) -> list[tuple[str, str]]:
    """``lorasent metrics``' relative error reductions: against the reference, then
    against each other reference of ``references`` (absent before issue 30)."""
    from lorasent.contracts import REFERENCE_NAMES
    from lorasent.statistics import with_interval

    rows = [("relative error reduction", with_interval(*m.interval("relative_error_reduction"))
             + f"  against {m.reference} ({m.reference_accuracy:.4f})")]
    for name, ref in (m.references or {}).items():
        if ref is not None and name != m.reference:
            rows.append((f"  vs {REFERENCE_NAMES[name]}", with_interval(
                ref.relative_error_reduction, ref.relative_error_reduction_ci95_low,
                ref.relative_error_reduction_ci95_high) + f"  ({ref.accuracy:.4f})"))
    return rows


def _supervised_rows(m: Any, seconds: dict[str, float]) -> list[tuple[str, str]]:
    """``lorasent metrics``' lines of the supervised references (absent before issue 58)
    and of the adapter's cost: accuracy and macro-F1 with intervals, the paired Δ
    accuracy, and what each cost (trainable parameters, training tokens, and the wall
    seconds of this machine's run where its machine record holds them)."""
    from lorasent.contracts import REFERENCE_NAMES, SUPERVISED_REFERENCES
    from lorasent.statistics import with_interval

    def cost(name: str, c: Any) -> str:
        took = f", {seconds[name]:.1f} s here" if name in seconds else ""
        tokens = f", {c.train_tokens:,} training tokens" if c.train_tokens is not None else ""
        return f"{c.trainable_parameters:,} trainable of {c.total_parameters:,}{tokens}{took}"

    rows = []
    for name in SUPERVISED_REFERENCES:
        ref = (m.references or {}).get(name)
        note = (m.reference_notes or {}).get(name)
        if ref is None:
            if note:
                rows.append((REFERENCE_NAMES[name], f"none: {note}"))
            continue
        paired = ref.paired
        delta = "" if paired is None else "  Δ accuracy " + with_interval(
            paired.delta_accuracy, paired.delta_accuracy_ci95_low,
            paired.delta_accuracy_ci95_high, digits=3, signed=True) + f" ({paired.verdict})"
        rows.append((REFERENCE_NAMES[name],
                     f"{with_interval(ref.accuracy, ref.accuracy_ci95_low, ref.accuracy_ci95_high)}"
                     f"  macro-F1 {with_interval(ref.macro_f1, ref.macro_f1_ci95_low, ref.macro_f1_ci95_high)}"  # noqa: E501
                     f"{delta}"))
        if ref.cost:
            rows.append(("  its cost", cost(name, ref.cost)))
    if getattr(m, "cost", None):
        rows.append(("adapter's cost", cost("adapter", m.cost)))
    return rows


def _calibration_rows(m: Any) -> list[tuple[str, str]]:
    """``lorasent metrics``' calibration lines (absent before issue 30): ECE, NLL and Brier
    with intervals, raw and after temperature scaling; the label issues."""
    from lorasent.statistics import with_interval

    c = m.calibration
    if c is None:
        return []

    def scores(x: Any) -> str:
        return "  ".join(f"{name} " + with_interval(*(getattr(x, f"{name}{end}") for end in
                                                      ("", "_ci95_low", "_ci95_high")))
                         for name in ("ece", "nll", "brier"))

    rows = [("calibration (raw)", scores(c))]
    rows.append(("after temperature", f"T = {c.temperature:.3f}:  {scores(c.scaled)}"
                 if c.scaled and c.temperature is not None else f"none: {c.temperature_note}"))
    rows += [(f"note ({side})", x.interval_note)
             for side, x in (("raw", c), ("after temperature", c.scaled))
             if x is not None and x.interval_note]
    if m.label_issues:
        rows.append(("likely label errors", f"{m.label_issues.rows} rows "
                     f"({m.label_issues.share:.1%}), ranked in {m.label_issues.file}"))
    return rows


def _test_set_findings(params: Params, folder: Path) -> list[Finding]:
    """``doctor``'s check of the inputs the params name (:func:`input_problems`, sources
    read from ``folder``, the params file's): each problem a ``fail``."""
    from lorasent.commands.stages import input_problems
    from lorasent.environment import Finding  # noqa: F811 - at run time, not only for mypy

    with contextlib.chdir(folder):
        return [Finding("fail", problem) for problem in input_problems(params)]
