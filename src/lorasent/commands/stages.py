"""``lorasent <stage>``: the five pipeline stages' commands, each run in the folder that
holds its params.

Each command reads ``params.yaml`` (or ``--params PATH``) once, validates it and passes
each stage only its sections. Paths are relative to the params file's folder, where the
stage runs (see ``lorasent.paths``); ``dvc.yaml`` runs these commands. This is the one
command module in the stages' deps (``dvc.yaml``) and in the training's checkpoint key
(``lorasent.stages.train.TRAIN_CODE``): a change to any other command reruns no stage.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from lorasent.command_errors import user_errors
from lorasent.dvc_project import require_deps
from lorasent.errors import LorasentError
from lorasent.params import Params, load_params
from lorasent.paths import ADAPTER_DIR
from lorasent.provenance import record_failure

STAGES = ("fetch", "split", "baseline", "train", "evaluate")


StageFunction = Callable[[Params], str]  # the params in, the summary line out


def stage(*, loads_model: bool = False, accelerate_config: str | None = None,
          marks_written: Path | None = None) -> Callable[[StageFunction], click.Command]:
    """A decorator: the stage's function (params in, its summary line out) as a click
    command that loads the params, runs the stage in their folder and prints its summary.

    The stage runs in the folder that holds the params file, as under DVC: ``--params
    other/params.yaml`` reads and writes under ``other/`` (``data.source`` and every path
    of ``lorasent.paths`` are relative to it), never in the current folder.

    Each stage's own part is a hook, given here (no stage is known by its name):

    Args:
        loads_model: baseline, train and evaluate. Such a stage runs under ``accelerate
            launch`` when the params ask for several processes (see ``lorasent.launch``),
            only its main process prints and writes, and when it fails after starting
            its provenance record is replaced by one with ``status: failed`` and the
            error (the metrics stay as they were).
        accelerate_config: the params key naming an accelerate config file for this
            stage (train's ``train.accelerate_config``), or None. A file it names is
            checked to be among the stage's deps and is a reason to launch even with one
            process.
        marks_written: a folder marked as being written from the start of the run
            (train's adapter: ``lorasent predict`` says a train run is writing it).

    Inside a DVC experiment (``dvc exp run``), each stage first prints (standard error)
    the params that differ from HEAD's, one line per key
    (:func:`lorasent.experiment_params.experiment_params_report`); a params error there adds that
    ``dvc exp run -S`` left the bad value in params.yaml, and the way back
    (:func:`lorasent.experiment_params.experiment_params_advice`).
    """

    def decorate(func: StageFunction) -> click.Command:
        return click.command(name=func.__name__)(user_errors(_stage_command(
            func, loads_model=loads_model, accelerate_config=accelerate_config,
            marks_written=marks_written)))

    return decorate


def _stage_command(func: StageFunction, *, loads_model: bool,
                   accelerate_config: str | None,
                   marks_written: Path | None) -> Callable[[Path], None]:
    """:func:`stage`'s command function, before click and the one-line errors."""
    from lorasent.experiment_params import experiment_params_advice, experiment_params_report
    from lorasent.launch import init_processes, is_launched, is_main, launch, needs_launch
    from lorasent.params import ParamsError

    name = func.__name__

    @click.option("--params", "params_path", default="params.yaml", show_default=True,
                  type=click.Path(dir_okay=False, path_type=Path),
                  help="Params file to read (all knobs; see the comments in it).")
    @functools.wraps(func)
    def command(params_path: Path) -> None:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        try:
            params = load_params(params_path)  # bad params fail here, before any work
        except ParamsError as err:  # inside `dvc exp run -S`: the bad value stays; say so
            raise ParamsError(f"{err}{experiment_params_advice(params_path)}") from None
        report = None if is_launched() else experiment_params_report(params_path)
        if report is not None:  # the params an experiment changed, once per stage
            click.echo(f"lorasent {name}: {report}", err=True)
        folder = params_path.absolute().parent.resolve()
        if folder != Path.cwd().resolve():
            click.echo(f"lorasent {name}: running in {folder} (the folder of "
                       f"{params_path}); its paths are relative to it", err=True)
        with contextlib.chdir(folder), contextlib.ExitStack() as stack:  # back afterwards
            if marks_written is not None and not is_launched():
                from lorasent.atomic import marked_as_written

                stack.enter_context(marked_as_written(marks_written))
            key = accelerate_config
            config = _param(params, key) if key else None
            if key and config:  # before a launch: the config decides how the stage runs
                require_deps(name, {key: config})
            if loads_model and needs_launch(params.base.num_processes, config):
                sys.exit(launch(name, folder / params_path.name,
                                params.base.num_processes, config))
            if loads_model:
                init_processes(params.base.device)
            started = time.perf_counter()
            try:
                summary = func(params)
                if not loads_model or is_main():
                    click.echo(summary)
            except BaseException as err:  # Ctrl-C too: the record says it was interrupted
                if loads_model and is_main():
                    record_failure(name, params_record(params), err,
                                   time.perf_counter() - started)
                raise

    return command


def _param(params: Params, key: str) -> Any:
    """The value of a dotted params key (``train.accelerate_config``)."""
    value: Any = params
    for part in key.split("."):
        value = getattr(value, part)
    return value


def params_record(params: Params) -> dict[str, Any]:
    """The params as the provenance records hold them (JSON types)."""
    return params.model_dump(mode="json")


@stage()
def fetch(params: Params) -> str:
    """Fetch the corpus into data/raw and the base model into models/base."""
    from lorasent.stages.fetch import run_fetch

    require_deps("fetch", {"data.source": params.data.source})
    result = run_fetch(data_source=params.data.source, text_column=params.data.text_column,
                       label_column=params.data.label_column, encoding=params.data.encoding,
                       hf_split=params.data.hf_split, separator=params.data.separator,
                       model_source=params.base.model)
    return (f"fetched {result.rows} rows (sha256 {result.dataset_sha256[:12]}) and "
            f"{params.base.model} (sha256 {result.model_sha256[:12]})")


@stage()
def split(params: Params) -> str:
    """Clean labels, drop empty rows and duplicates, split into data/split."""
    from lorasent.stages.split import run_split

    result = run_split(labels=params.base.labels, aliases=params.base.label_aliases,
                       sizes={"train": params.split.train_size,
                              "validation": params.split.validation_size,
                              "test": params.split.test_size},
                       seed=params.split.seed)
    rows = result.report["split_rows"]
    return (f"split {result.report['rows_kept']} of {result.report['rows_read']} rows: "
            + ", ".join(f"{k} {v}" for k, v in rows.items())
            + f"; dropped {result.report['dropped']}")


@stage(loads_model=True)
def baseline(params: Params) -> str:
    """Majority-class and zero-shot (plain and calibrated) baselines on the test split, and
    the supervised references (lorasent.reference_registry) trained on the adapter's rows."""
    from lorasent.modes import no_zero_shot_cell
    from lorasent.stages.baseline import run_baseline
    from lorasent.stages.test_sets import load_test_sets

    check_inputs(params)  # baseline runs before train: a bad test set stops dvc repro here
    result = run_baseline(base=params.base, prompt=params.prompt, mode=params.train.mode,
                          batch_size=params.evaluate.batch_size,
                          params_record=params_record(params),
                          references=params.baseline, fraction=params.train.fraction,
                          train_seed=params.base.seed,
                          class_weighting=params.train.class_weighting,
                          test_sets=load_test_sets(
                              params.evaluate.test_sets, labels=params.base.labels,
                              aliases=params.base.label_aliases, seed=params.split.seed))
    zero_shot = (no_zero_shot_cell(params.train.mode)
                 if result.zero_shot_accuracy is None else f"{result.zero_shot_accuracy:.4f}")
    calibrated = ("" if result.zero_shot_calibrated_accuracy is None
                  else f" (calibrated {result.zero_shot_calibrated_accuracy:.4f})")
    supervised = "".join(
        f", {name} {'not fitted' if acc is None else f'{acc:.4f}'}"
        + (f" ({(result.reference_seconds or {})[name]:.1f} s)"
           if name in (result.reference_seconds or {}) else "")
        for name, acc in (result.references or {}).items())
    return (f"majority-class accuracy {result.majority_accuracy:.4f}, zero-shot accuracy "
            f"{zero_shot}{calibrated}{supervised}")


@stage(loads_model=True, accelerate_config="train.accelerate_config", marks_written=ADAPTER_DIR)
def train(params: Params) -> str:
    """LoRA fine-tuning; writes models/adapter."""
    from lorasent.stages.train import run_train

    result = run_train(base=params.base, prompt=params.prompt, train=params.train,
                       params_record=params_record(params))
    from lorasent.launch import is_main
    from lorasent.paths import PROVENANCE_DIR
    from lorasent.provenance import read_provenance

    # the main process wrote the record; the others' summaries are never printed
    load = (read_provenance(PROVENANCE_DIR / "train.json").get("machine_load") or {}
            if is_main() else {})
    busy = (f"\nWARNING: the machine was busy (load {load['load_average']} over the last "
            f"{load['window_s'] // 60} min on {load['cpu_cores']} cores): this run's wall "
            "times are not comparable" if load.get("busy") else "")
    return (f"trained {result.steps} steps, {result.trainable_parameters:,} trainable "
            f"parameters, final loss {result.final_loss}{busy}")


@stage(loads_model=True)
def evaluate(params: Params) -> str:
    """Base model + adapter on the test split; writes metrics/eval.json."""
    from lorasent.stages.evaluate import run_evaluate

    check_inputs(params)
    result = run_evaluate(base=params.base, prompt=params.prompt, evaluate=params.evaluate,
                          split_seed=params.split.seed, mode=params.train.mode,
                          params_record=params_record(params), fraction=params.train.fraction,
                          train_seed=params.base.seed)
    return result.summary()


def input_problems(params: Params) -> list[str]:
    """What is wrong with the files the params name, one line each: each bad set of
    ``evaluate.test_sets`` (:func:`lorasent.stages.test_sets.check_test_sets`), and each
    local file a param names that is not among its stage's deps
    (:func:`lorasent.dvc_project.require_deps`). The one check of ``doctor``, of the
    baseline stage (the first stage that reads ``evaluate``, run before train, so that a
    bad set is found before a training, not after) and of evaluate (before it loads the
    model)."""
    from lorasent.stages.test_sets import check_test_sets

    problems = check_test_sets(params.evaluate.test_sets, labels=params.base.labels,
                               aliases=params.base.label_aliases, seed=params.split.seed)
    for name, files in (("fetch", {"data.source": params.data.source}),
                        ("train", {"train.accelerate_config": params.train.accelerate_config}
                         if params.train.accelerate_config else {}),
                        ("evaluate", {f"evaluate.test_sets.{set_name}.source": spec.source
                                      for set_name, spec in params.evaluate.test_sets.items()})):
        try:
            require_deps(name, files)
        except LorasentError as err:
            problems.append(str(err))
    return problems


def check_inputs(params: Params) -> None:
    """Raise the first of :func:`input_problems`, before a stage's work.

    Raises:
        LorasentError: that problem, in one line (the CLI prints it).
    """
    problems = input_problems(params)
    if problems:
        raise LorasentError(problems[0] + (f" (and {len(problems) - 1} more problem"
                                           f"{'s' if len(problems) > 2 else ''}: "
                                           "lorasent doctor lists them)"
                                           if len(problems) > 1 else ""))
