"""``lorasent <stage>``: run one pipeline stage in the current folder.

Each command reads ``params.yaml`` (or ``--params PATH``) once, validates it and passes
each stage only its sections. Paths are relative to the current folder (see
``lorasent.paths``); ``dvc.yaml`` runs these commands.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

import click

from lorasent.errors import LorasentError
from lorasent.params import Params, load_params

# Offline by default: every stage after fetch reads local folders only.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def _stage(func: Callable[[Params], str]) -> click.Command:
    """A click command that loads the params and reports errors as one readable line."""

    @click.option("--params", "params_path", default="params.yaml", show_default=True,
                  type=click.Path(dir_okay=False, path_type=Path),
                  help="Params file to read (all knobs; see the comments in it).")
    @functools.wraps(func)
    def command(params_path: Path) -> None:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        try:
            params = load_params(params_path)
            click.echo(func(params))
        except (LorasentError, FileNotFoundError) as err:
            if os.environ.get("LORASENT_DEBUG"):
                raise
            if isinstance(err, FileNotFoundError):
                err = f"{err.filename}: not found; run the earlier stages first (dvc repro)"
            click.echo(f"lorasent {func.__name__}: error: {err}", err=True)
            sys.exit(1)

    return click.command(name=func.__name__)(command)


def _record(params: Params) -> dict:
    return params.model_dump(mode="json")


@_stage
def fetch(params: Params) -> str:
    """Fetch the corpus into data/raw and the base model into models/base."""
    from lorasent.fetch import run_fetch

    result = run_fetch(data_source=params.data.source, text_column=params.data.text_column,
                       label_column=params.data.label_column, encoding=params.data.encoding,
                       hf_split=params.data.hf_split, model_source=params.base.model)
    return (f"fetched {result.rows} rows (sha256 {result.dataset_sha256[:12]}) and "
            f"{params.base.model} (sha256 {result.model_sha256[:12]})")


@_stage
def split(params: Params) -> str:
    """Clean labels, drop empty rows and duplicates, split into data/split."""
    from lorasent.split import run_split

    result = run_split(labels=params.base.labels, aliases=params.base.label_aliases,
                       sizes={"train": params.split.train_size,
                              "validation": params.split.validation_size,
                              "test": params.split.test_size},
                       seed=params.base.seed)
    rows = result.report["split_rows"]
    return (f"split {result.report['rows_kept']} of {result.report['rows_read']} rows: "
            + ", ".join(f"{k} {v}" for k, v in rows.items())
            + f"; dropped {result.report['dropped']}")


@_stage
def baseline(params: Params) -> str:
    """Majority-class and zero-shot baselines on the test split."""
    from lorasent.baseline import run_baseline

    result = run_baseline(base=params.base, prompt=params.prompt,
                          batch_size=params.evaluate.batch_size, params_record=_record(params))
    return (f"majority-class accuracy {result.majority_accuracy:.4f}, zero-shot accuracy "
            f"{result.zero_shot_accuracy:.4f}")


@_stage
def train(params: Params) -> str:
    """LoRA fine-tuning; writes models/adapter."""
    from lorasent.train import run_train

    result = run_train(base=params.base, prompt=params.prompt, train=params.train,
                       params_record=_record(params))
    return (f"trained {result.steps} steps, {result.trainable_parameters:,} trainable "
            f"parameters, final loss {result.final_loss}")


@_stage
def evaluate(params: Params) -> str:
    """Base model + adapter on the test split; writes metrics/eval.json."""
    from lorasent.evaluate import run_evaluate

    result = run_evaluate(base=params.base, prompt=params.prompt, evaluate=params.evaluate,
                          params_record=_record(params))
    rer = ("n/a" if result.relative_error_reduction is None
           else f"{result.relative_error_reduction:.4f}")
    return f"accuracy {result.accuracy:.4f}, relative error reduction {rer}"


@click.command()
@click.option("--params", "params_path", default="params.yaml", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Params whose device, precision and attention to check (skipped if absent).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor(params_path: Path, as_json: bool) -> None:
    """Report torch, the device and the libraries; check the params' environment needs.

    Exits with status 1 when a check fails (e.g. base.device: rocm on a CUDA wheel).
    """
    import json

    from lorasent.artifacts import package_versions
    from lorasent.environment import check_environment, environment_report

    report = {**environment_report(), "packages": package_versions()}
    findings = []
    if params_path.is_file():
        try:
            base = load_params(params_path).base
        except LorasentError as err:
            click.echo(f"lorasent doctor: error: {err}", err=True)
            sys.exit(1)
        findings = check_environment(device=base.device, precision=base.precision,
                                     attn_implementation=base.attn_implementation,
                                     model=base.model, model_dir=Path("models/base"))
    if as_json:
        click.echo(json.dumps({**report, "findings": [f.__dict__ for f in findings]}, indent=2))
    else:
        for key, value in report.items():
            if isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            elif key.endswith("_bytes"):
                key, value = key.removesuffix("_bytes"), f"{value / 2**30:.1f} GiB"
            click.echo(f"{key:>14}: {value}")
        checked = f"checked {params_path}" if params_path.is_file() else f"no {params_path}"
        click.echo(f"\n{checked}: " + ("no problems" if not findings else ""))
        for f in findings:
            click.echo(f"  {f.level.upper()}: {f.message}")
    if any(f.level == "fail" for f in findings):
        sys.exit(1)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lorasent")
def main() -> None:
    """lorasent: LoRA fine-tuning for text classification, one DVC stage per command.

    Stages in order: fetch, split, baseline, train, evaluate. `dvc repro` runs them.
    """


for _command in (fetch, split, baseline, train, evaluate, doctor):
    main.add_command(_command)


if __name__ == "__main__":
    main()
