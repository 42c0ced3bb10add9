"""``lorasent <stage>``: run one pipeline stage in the folder that holds its params.

Each command reads ``params.yaml`` (or ``--params PATH``) once, validates it and passes
each stage only its sections. Paths are relative to the params file's folder, where the
stage runs (see ``lorasent.paths``); ``dvc.yaml`` runs these commands.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import click

from lorasent.artifacts import record_failure, require_deps
from lorasent.errors import LorasentError
from lorasent.params import Params, load_params

if TYPE_CHECKING:
    from lorasent.environment import Finding

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# transformers' own deprecation notice, raised inside peft on every model load.
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)


P = ParamSpec("P")
R = TypeVar("R")


class FiniteFloat(click.FloatRange):
    """The type of every float option: a number in the range given (if any), never
    ``nan`` or ``inf``, which compare false with every bound and so passed a range:
    ``--random-share nan`` crashed after the pool was scored, ``--project-to inf`` wrote
    ``+nan [+nan, +nan]``. Refused while the command line is parsed, in one line
    (:class:`_OneLineUsageError`). The integer options are click's ``int`` and
    ``IntRange``, which refuse ``nan`` and ``inf`` as not integers."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number (nan and inf are refused); give a "
                      f"number{self._range_phrase()}", param, ctx)
        return super().convert(number, param, ctx)

    def _range_phrase(self) -> str:
        if self.min is None and self.max is None:
            return ""
        return " " + self._describe_range()


def _user_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Print a user error's message (no traceback) and exit with status 1.

    A missing file is one an earlier stage writes (the message says to run them); a
    program that could not be started (dvc, git) is named as a program, with how to get
    it (``lorasent.programs``). A write that failed for lack of space, wherever it was,
    is one line naming the filesystem, what was written and where
    (:func:`lorasent.environment.out_of_space_message`). ``LORASENT_DEBUG=1`` re-raises
    instead, for a traceback.
    """

    command = func.__name__.replace("_", "-")  # click's name of the command

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (LorasentError, FileNotFoundError) as err:
            if os.environ.get("LORASENT_DEBUG"):
                raise
            text = str(err)
            if isinstance(err, FileNotFoundError):
                from lorasent.programs import missing_program, not_found

                name = missing_program(err)  # a program that could not start: not a stage's
                text = (not_found(name) if name else
                        f"{err.filename}: not found; run the earlier stages first (dvc repro)")
            # a message that names the command itself ("compare: ...") is not prefixed twice
            message = text.removeprefix(f"{command}: ")
            click.echo(f"lorasent {command}: error: {message}", err=True)
            sys.exit(1)
        except Exception as err:
            # only an error that can be a full disk loads lorasent.environment (and torch)
            if os.environ.get("LORASENT_DEBUG") or not (
                    isinstance(err, (OSError, RuntimeError)) or "os error" in str(err)):
                raise
            from lorasent.environment import out_of_space_message

            no_space = out_of_space_message(err)
            if no_space is None:
                raise
            click.echo(f"lorasent {command}: error: {no_space}", err=True)
            sys.exit(1)

    return wrapper


PROVENANCE_STAGES = ("baseline", "train", "evaluate")


def _stage(func: Callable[[Params], str]) -> click.Command:
    """A click command that loads the params, runs the stage, prints its summary.

    The stage runs in the folder that holds the params file, as under DVC: ``--params
    other/params.yaml`` reads and writes under ``other/`` (``data.source`` and every path
    of ``lorasent.paths`` are relative to it), never in the current folder.

    baseline, train and evaluate run under ``accelerate launch`` when the params ask for
    several processes, and train also when they name an accelerate config (see
    ``lorasent.launch``); then only the main process prints and writes. When one of
    them fails after starting, its provenance record is replaced by one with
    ``status: failed`` and the error; the metrics stay as they were.

    Inside a DVC experiment (``dvc exp run``), each stage first prints (standard error)
    the params that differ from HEAD's, one line per key
    (:func:`lorasent.params.experiment_params_report`); a params error there adds that
    ``dvc exp run -S`` left the bad value in params.yaml, and the way back
    (:func:`lorasent.params.experiment_params_advice`).
    """
    from lorasent.launch import init_processes, is_launched, is_main, launch, needs_launch
    from lorasent.params import ParamsError, experiment_params_advice, experiment_params_report

    model_stage = func.__name__ in PROVENANCE_STAGES

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
            click.echo(f"lorasent {func.__name__}: {report}", err=True)
        folder = params_path.absolute().parent.resolve()
        if folder != Path.cwd().resolve():
            click.echo(f"lorasent {func.__name__}: running in {folder} (the folder of "
                       f"{params_path}); its paths are relative to it", err=True)
        with contextlib.chdir(folder), contextlib.ExitStack() as stack:  # back afterwards
            if func.__name__ == "train" and not is_launched():
                from lorasent.artifacts import marked_as_written
                from lorasent.paths import ADAPTER_DIR

                # from the start: predict says a train run is writing the adapter
                stack.enter_context(marked_as_written(ADAPTER_DIR))
            config = params.train.accelerate_config if func.__name__ == "train" else None
            if config:  # before a launch: the config decides how train runs
                require_deps("train", {"train.accelerate_config": config})
            if model_stage and needs_launch(params.base.num_processes, config):
                sys.exit(launch(func.__name__, folder / params_path.name,
                                params.base.num_processes, config))
            if model_stage:
                init_processes(params.base.device)
            started = time.perf_counter()
            try:
                summary = func(params)
                if not model_stage or is_main():
                    click.echo(summary)
            except BaseException as err:  # Ctrl-C too: the record says it was interrupted
                if model_stage and is_main():
                    record_failure(func.__name__, _record(params), err,
                                   time.perf_counter() - started)
                raise

    return click.command(name=func.__name__)(_user_errors(command))


def _record(params: Params) -> dict[str, Any]:
    return params.model_dump(mode="json")


@_stage
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


@_stage
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


@_stage
def baseline(params: Params) -> str:
    """Majority-class and zero-shot (plain and calibrated) baselines on the test split."""
    from lorasent.modes import no_zero_shot_cell
    from lorasent.stages.baseline import run_baseline
    from lorasent.stages.test_sets import load_test_sets

    _check_inputs(params)  # baseline runs before train: a bad test set stops dvc repro here
    result = run_baseline(base=params.base, prompt=params.prompt, mode=params.train.mode,
                          batch_size=params.evaluate.batch_size, params_record=_record(params),
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


@_stage
def train(params: Params) -> str:
    """LoRA fine-tuning; writes models/adapter."""
    from lorasent.stages.train import run_train

    result = run_train(base=params.base, prompt=params.prompt, train=params.train,
                       params_record=_record(params))
    from lorasent.artifacts import read_provenance
    from lorasent.launch import is_main
    from lorasent.paths import PROVENANCE_DIR

    # the main process wrote the record; the others' summaries are never printed
    load = (read_provenance(PROVENANCE_DIR / "train.json").get("machine_load") or {}
            if is_main() else {})
    busy = (f"\nWARNING: the machine was busy (load {load['load_average']} over the last "
            f"{load['window_s'] // 60} min on {load['cpu_cores']} cores): this run's wall "
            "times are not comparable" if load.get("busy") else "")
    return (f"trained {result.steps} steps, {result.trainable_parameters:,} trainable "
            f"parameters, final loss {result.final_loss}{busy}")


@_stage
def evaluate(params: Params) -> str:
    """Base model + adapter on the test split; writes metrics/eval.json."""
    from lorasent.stages.evaluate import run_evaluate

    _check_inputs(params)
    result = run_evaluate(base=params.base, prompt=params.prompt, evaluate=params.evaluate,
                          split_seed=params.split.seed, mode=params.train.mode,
                          params_record=_record(params), fraction=params.train.fraction,
                          train_seed=params.base.seed)
    return result.summary()


_ADAPTER = click.option("--adapter", "adapter_dir", default="models/adapter", show_default=True,
                        type=click.Path(file_okay=False, path_type=Path),
                        help="Adapter folder written by the train stage.")
_BASE = click.option("--base", "base_dir", default="models/base", show_default=True,
                     type=click.Path(file_okay=False, path_type=Path),
                     help="Base model folder the adapter was trained on (checked by hash).")
_TEXT_COLUMN = click.option("--text-column", default="text", show_default=True,
                            help="Column (CSV, TSV, Parquet) or key (JSONL) holding the text.")
_SEPARATOR = click.option("--separator", default="auto", show_default=True,
                          help="CSV separator: auto (detected from the header) or one "
                          "character.")
_BATCH_SIZE = click.option("--batch-size", default=16, show_default=True,
                           type=click.IntRange(min=1), help="Texts per forward pass.")
_DEVICE = click.option("--device", type=click.Choice(["auto", "cpu", "cuda", "rocm", "mps"]),
                       help="Device to run on; default: as recorded at training time.")


@click.command()
@click.argument("texts", nargs=-1)
@_ADAPTER
@_BASE
@click.option("--input", "input_path", help="A CSV, TSV, JSONL or Parquet file, or any other "
              "file (or - for stdin) with one text per line; read as the fetch stage reads "
              "data.source.")
@click.option("--output", "output_path", help="Write predictions to this .csv or .jsonl file "
              "(input order kept, the input's other columns first) instead of printing a "
              "table.")
@_TEXT_COLUMN
@click.option("--keep", multiple=True, metavar="COLUMN",
              help="Input column to copy into --output (repeat for several); default: every "
              "column but the text.")
@_SEPARATOR
@click.option("--encoding", default="utf-8", show_default=True,
              help="Encoding of the --input file.")
@_BATCH_SIZE
@click.option("--min-confidence", type=FiniteFloat(), metavar="FLOAT",
              help="In (0, 1]: abstain (no label; abstained true) on a text whose top "
              "probability, after the adapter's temperature, is below it; the end of the "
              "run says how many, and what calibration.json's validation risk-coverage says "
              "this threshold keeps. Default: always label.")
@click.option("--force", is_flag=True,
              help="Replace an --output file that git or DVC tracks, or that predict did "
              "not write (never the --input).")
@_DEVICE
@_user_errors
def predict(texts: tuple[str, ...], adapter_dir: Path, base_dir: Path, input_path: str | None,
            output_path: str | None, text_column: str, keep: tuple[str, ...], separator: str,
            encoding: str, batch_size: int, min_confidence: float | None, force: bool,
            device: str | None) -> None:
    """Predict labels, with each class's probability, for TEXTS or an --input file.

    The probabilities are scaled by the temperature the train stage fitted on the
    validation split (the adapter's calibration.json), or the raw softmax without one
    (said on standard error)."""
    import contextlib
    import itertools

    from lorasent.artifacts import check_output_file
    from lorasent.contracts import read_temperature_scaling
    from lorasent.modeling import load_trained_model
    from lorasent.tables import check_separator
    from lorasent.tools.predict import (
        InputError,
        Inputs,
        Tally,
        abstention_summary,
        check_adapter_folder,
        check_min_confidence,
        open_inputs,
        output_format,
        probabilities_note,
        stream_predictions,
        write_predictions,
        written_by_predict,
    )

    if bool(texts) == bool(input_path):
        raise InputError("give texts as arguments or --input FILE, not both or neither")
    check_min_confidence(min_confidence)
    separator = check_separator(separator, "--separator")
    fmt = output_format(output_path)
    if output_path is not None:
        check_output_file(output_path, force=force, option="--output",
                          inputs=[("--input", input_path)] if input_path and input_path != "-"
                          else [], ours=("predict", written_by_predict))
    check_adapter_folder(adapter_dir)
    scaling = read_temperature_scaling(adapter_dir)
    abstentions = min_confidence is not None
    tally = Tally()
    # a table on the terminal is printed once the progress bars (standard error, the same
    # terminal) are closed, so that no bar is drawn through its rows
    to_terminal = output_path is None and sys.stdout.isatty()
    with contextlib.ExitStack() as stack:
        inputs = (stack.enter_context(open_inputs(
            input_path, text_column=text_column, separator=separator, encoding=encoding,
            keep=keep or None)) if input_path else Inputs([], ((t, {}) for t in texts)))
        rows = iter(inputs.rows)
        first = list(itertools.islice(rows, 1))  # fail on a bad file before loading the model
        model, encoder, record, _ = load_trained_model(adapter_dir, base_dir, device=device,
                                                       device_option="--device")
        click.echo(probabilities_note(adapter_dir, scaling), err=True)
        predictions = tally.count(stream_predictions(
            model, encoder, record.labels, itertools.chain(first, rows), batch_size,
            progress=not to_terminal,
            temperature=None if scaling is None else scaling.temperature,
            min_confidence=min_confidence))
        if output_path is None:
            write_predictions(list(predictions) if to_terminal else predictions,
                              record.labels, sys.stdout, fmt, abstentions=abstentions)
        else:
            from lorasent.artifacts import atomic_open

            with atomic_open(output_path) as out:  # streamed; complete or not there at all
                write_predictions(predictions, record.labels, out, fmt, inputs.columns,
                                  abstentions=abstentions)
    if output_path is not None:
        click.echo(f"wrote {output_path}", err=True)
    if min_confidence is not None:
        click.echo(abstention_summary(tally, min_confidence, adapter_dir, scaling), err=True)


@click.command()
@_ADAPTER
@_BASE
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Folder for the merged model: a new folder, or one an earlier export "
              "wrote (replaced as a whole).")
@click.option("--force", is_flag=True,
              help="Replace an --out folder that export did not write, or one of its own "
              "that holds git-tracked files (never git-tracked files it did not write, a DVC "
              "output, the current folder or the repository).")
@click.option("--metrics", "metrics_path", default="metrics/eval.json", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="The evaluate stage's metrics for the model card; used only when the "
              "provenance/evaluate.json beside it records this adapter's hash.")
@_DEVICE
@_user_errors
def export(adapter_dir: Path, base_dir: Path, out_dir: Path, force: bool, metrics_path: Path,
           device: str | None) -> None:
    """Merge the adapter into its base model and save it for plain transformers, with a
    model card (README.md) giving the adapter's evaluation."""
    from lorasent.artifacts import check_output_folder
    from lorasent.contracts import read_temperature_scaling
    from lorasent.modeling import load_trained_model, read_adapter_record
    from lorasent.tools.predict import adapter_evaluation, check_adapter_folder, export_merged

    check_output_folder(out_dir, command="export", force=force,
                        inputs=[("--adapter", adapter_dir), ("--base", base_dir)])
    check_adapter_folder(adapter_dir)
    evaluation = adapter_evaluation(adapter_dir, read_adapter_record(adapter_dir), metrics_path)
    scaling = read_temperature_scaling(adapter_dir)
    model, encoder, record, _ = load_trained_model(adapter_dir, base_dir, device=device,
                                                   device_option="--device")
    export_merged(model, encoder, record, adapter_dir, out_dir, evaluation, scaling)
    card = ("with the evaluation of " + str(metrics_path) if evaluation.metrics is not None
            else f"without metrics: no evaluation of this adapter found ({evaluation.reason})")
    temperature = (scaling.temperature if scaling is not None else None)
    card += (f"; temperature {temperature:.4g} (calibration.json)" if temperature is not None
             else "; no temperature (raw probabilities)")
    click.echo(f"exported {adapter_dir} merged into {record.base_model.source} to "
               f"{out_dir} (see {out_dir}/README.md, {card})")


@click.command()
@click.argument("pool_path", metavar="UNLABELLED")
@click.option("--budget", required=True, type=int,
              help="Texts to queue for labelling (at least 1, at most the pool's texts "
              "after duplicates and labelled texts are dropped).")
@click.option("--strategy", type=click.Choice(["margin", "entropy"]), default="margin",
              show_default=True, help="Uncertainty: margin between the top two calibrated "
              "probabilities (smallest first) or their entropy (largest first).")
@click.option("--relabel", is_flag=True,
              help="Also list the training rows that the label audit (confident learning) "
              "flags, with their given label, for a second look.")
@click.option("--random-share", default=0.2, show_default=True, type=FiniteFloat(0, 1),
              help="Share of the budget drawn at random from the pool (a hedge against the "
              "uncertain picks' outliers; their reason starts `random:`).")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Seed of the random picks.")
@click.option("--out", "out_path", default="to_label.csv", show_default=True,
              help="The .csv file to write.")
@click.option("--split-dir", default="data/split", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="The split stage's folder: its texts are never queued (and --relabel "
              "reads train.jsonl).")
@_ADAPTER
@_BASE
@_TEXT_COLUMN
@_SEPARATOR
@click.option("--encoding", default="utf-8", show_default=True,
              help="Encoding of the UNLABELLED file.")
@_BATCH_SIZE
@click.option("--force", is_flag=True,
              help="Replace an --out file that git or DVC tracks, that queue did not "
              "write, or that a person may have filled in (labels, a renamed or added "
              "column, a re-save in another encoding: kept first as <out>.<n>.bak); never "
              "the UNLABELLED file.")
@_DEVICE
@_user_errors
def queue(pool_path: str, budget: int, strategy: str, relabel: bool, random_share: float,
          seed: int, out_path: str, split_dir: Path, adapter_dir: Path, base_dir: Path,
          text_column: str, separator: str, encoding: str, batch_size: int, force: bool,
          device: str | None) -> None:
    """Queue the UNLABELLED texts (read as predict --input reads) that the adapter is
    least sure of for labelling: near-duplicates and texts of the splits left out,
    balanced over the predicted classes, the most extreme 5% left out and a share drawn
    at random (docs/active-learning.md)."""
    from lorasent.artifacts import atomic_open, check_output_file, keep_aside, read_jsonl
    from lorasent.calibration import label_issues
    from lorasent.contracts import read_temperature_scaling
    from lorasent.modeling import load_trained_model
    from lorasent.tables import check_separator
    from lorasent.tools.label_queue import (
        SKIP_SHARE,
        QueueError,
        check_budget,
        check_labels_kept,
        check_pool,
        clean_pool,
        done_note,
        hedge_note,
        kept_note,
        pool_note,
        rank_pool,
        relabel_rows,
        relabel_warnings,
        split_keys,
        write_queue,
        written_by_queue,
    )
    from lorasent.tools.predict import (
        check_adapter_folder,
        open_inputs,
        probabilities_note,
        stream_predictions,
    )

    check_budget(budget)
    separator = check_separator(separator, "--separator")
    if Path(out_path).suffix.lower() != ".csv":
        raise QueueError(f"--out {out_path}: queue writes a .csv file; give a path ending "
                         "in .csv (nothing was written)")
    check_labels_kept(out_path, force)
    check_output_file(out_path, force=force, option="--out",
                      inputs=[("UNLABELLED", pool_path)] if pool_path != "-" else [],
                      ours=("queue", written_by_queue))
    labelled = split_keys(split_dir)
    with open_inputs(pool_path, text_column=text_column, separator=separator,
                     encoding=encoding) as inputs:
        pool = clean_pool(inputs.rows, labelled)
        columns = inputs.columns
    shown = "standard input" if pool_path == "-" else pool_path
    check_pool(pool, budget, shown)
    train_rows = read_jsonl(split_dir / "train.jsonl") if relabel else []
    check_adapter_folder(adapter_dir)
    scaling = read_temperature_scaling(adapter_dir)
    temperature = None if scaling is None else scaling.temperature
    model, encoder, record, _ = load_trained_model(adapter_dir, base_dir, device=device,
                                                   device_option="--device")
    unknown = sorted({r["label"] for r in train_rows} - set(record.labels))
    if unknown:
        raise QueueError(f"{split_dir / 'train.jsonl'}: labels {unknown} are not the "
                         f"adapter's {record.labels}: the split and {adapter_dir} are of "
                         "different runs; run `dvc repro` so that they match")
    click.echo(pool_note(pool, shown), err=True)
    click.echo(probabilities_note(adapter_dir, scaling), err=True)
    scored = list(stream_predictions(model, encoder, record.labels, pool.rows, batch_size,
                                     temperature=temperature))
    queued = rank_pool(scored, record.labels, strategy, budget, random_share, seed, SKIP_SHARE)
    click.echo(hedge_note(len(scored), budget, random_share, seed, strategy), err=True)
    flagged = None
    if relabel:
        audited = list(stream_predictions(model, encoder, record.labels,
                                          ((r["text"], {c: r[c] for c in columns if c in r})
                                           for r in train_rows), batch_size,
                                          temperature=temperature))
        given = [r["label"] for r in train_rows]
        for line in relabel_warnings(audited, given, record.labels):
            click.echo(line, err=True)
        flagged = relabel_rows(audited, given, record.labels, strategy, len(queued) + 1,
                               lambda ids, p: label_issues(ids, p).indices)
    # again: labels may have been filled in while the texts were scored
    work = check_labels_kept(out_path, force)
    aside = keep_aside(out_path) if work is not None else None
    with atomic_open(out_path) as out:
        write_queue([*queued, *(flagged or [])], record.labels, strategy, columns, out)
    if aside is not None and work is not None:
        click.echo(kept_note(out_path, aside, work), err=True)
    click.echo(done_note(queued, flagged, out_path, record.labels), err=True)


@click.command()
@click.option("--params", "params_path", default="params.yaml", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Params whose device, precision and attention to check (skipped if "
              "the default is absent).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@_user_errors
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

    from lorasent.artifacts import package_versions
    from lorasent.environment import (
        check_environment,
        disk_findings,
        disk_report,
        environment_report,
        params_choice,
    )
    from lorasent.paths import BASE_MODEL_DIR

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
@_user_errors
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
@_user_errors
def metrics() -> None:
    """Print the headline of metrics/eval.json: accuracy, macro-F1 and the relative error
    reduction with their 95% intervals, each class's F1, the baselines and the warnings.

    The narrow view of `dvc metrics show`, which prints every key of every file. A first
    WARNING line says when `dvc status` finds the workspace stale (params, code or data
    changed since the last `dvc repro`), in one short line: what is out of date and why.
    """
    import json

    from lorasent.contracts import EvalMetrics, read
    from lorasent.modes import MODES
    from lorasent.paths import BASELINE_METRICS, EVAL_METRICS, PROVENANCE_DIR
    from lorasent.references import seconds_here
    from lorasent.review.collect import workspace_staleness
    from lorasent.statistics import with_interval

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
    if verdict := m.strongest_verdict(seconds):
        click.echo(f"The adapter: {verdict}")
    click.echo(f"{EVAL_METRICS}: {m.test_rows} test rows, {m.mode} mode"
               + (f"; [95% interval: {method.method}, {method.resamples:,} resamples]"
                  if method else ""))
    for name, value in rows:
        click.echo(f"  {name:<26}{value}")
    for name, s in m.test_sets.items():
        click.echo(f"test set {name} ({s.source}): {s.test_rows} rows")
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


@click.command()
@click.option("-n", "n", default=3, show_default=True,
              help="Runs, at least 2: base.seed, base.seed + 1, ... (from params.yaml).")
@click.option("--name", default="seeds", show_default=True,
              help="Experiments are named <NAME>-seed<S>.")
@click.option("-S", "--set-param", "sets", multiple=True, metavar="KEY=VALUE",
              help="A params change for every run, as `dvc exp run -S` takes it.")
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(min=1),
              help="Experiments run at once (`dvc queue start -j`).")
@click.option("--params", "params_path", default="params.yaml", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Params whose base.seed is the first seed.")
@_user_errors
def seeds(n: int, name: str, sets: tuple[str, ...], jobs: int, params_path: Path) -> None:
    """Run the params over N seeds as queued DVC experiments; print mean ± sd.

    Waits for the queue. Then `lorasent compare 'A-seed*' 'B-seed*'` compares two groups.
    """
    from lorasent.experiments.seeds import run_seeds

    result = run_seeds(n=n, name=name, sets=sets, jobs=jobs,
                       base_seed=load_params(params_path).base.seed,
                       progress=lambda line: click.echo(line, err=True))
    click.echo(result.summary())
    if any(run.evals is None for run in result.runs):
        sys.exit(1)


def _ray_options(command: Callable[..., None]) -> Callable[..., None]:
    """The Ray cluster options of ``sweep`` and ``learning-curve`` (which runs a sweep)."""
    for option in reversed((
            click.option("--address", help="A Ray cluster to run on (`auto`: the one `ray "
                         "start --head` started here)  [default: a local cluster for this "
                         "sweep]"),
            click.option("--cpus-per-run", type=click.IntRange(min=1),
                         help="CPUs (and torch threads) per run  [default: 1 beside a GPU; all "
                              "of a machine's without GPUs]"),
            click.option("--num-gpus", type=click.IntRange(min=0),
                         help="GPUs of the local cluster, when Ray does not detect them."),
            click.option("--git-remote", help="Clone from and push to this git remote (a "
                         "cluster of several machines); the experiments are pulled back from "
                         "it."),
            click.option("--cache-dir", help="DVC cache of the runs on other machines (a "
                         "shared filesystem)  [default: one per machine]"),
            click.option("--connect-timeout", type=FiniteFloat(min=0, min_open=True),
                         help="Seconds each address (--address, the git remote, the DVC "
                              "remote) gets to connect and answer  [default: "
                              "$LORASENT_CONNECT_TIMEOUT, else 10]"))):
        command = option(command)
    return command


@click.command()
@click.option("-S", "--set-param", "sets", multiple=True, metavar="KEY=VALUES",
              help="A params change, as `dvc exp run --queue -S` takes it; several values "
                   "(KEY=a,b or range(...)) make a grid axis.")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(min=1),
              help="Runs per grid point: base.seed, base.seed + 1, ... (HEAD's params.yaml).")
@click.option("--name", default="sweep", show_default=True,
              help="Experiments are named <NAME>-<key><value>...-seed<S>.")
@_ray_options
@_user_errors
def sweep(sets: tuple[str, ...], seeds: int, name: str, address: str | None,
          cpus_per_run: int | None, num_gpus: int | None, git_remote: str | None,
          cache_dir: str | None, connect_timeout: float | None) -> None:
    """Run a grid of params x seeds on Ray, one GPU (or --cpus-per-run CPUs) per run.

    Each run clones HEAD, runs `dvc exp run --temp` and lands as the DVC experiment
    <NAME>-<key><value>-seed<S>. Prints each run's state as it changes, then each run's
    metrics, each group's mean ± sd and its verdict against the first group
    (docs/scale-out.md).
    """
    from lorasent.experiments.sweep import sweep as run_sweep

    result = run_sweep(name=name, sets=sets, seeds=seeds, address=address,
                       num_gpus=num_gpus, cpus_per_run=cpus_per_run, git_remote=git_remote,
                       cache_dir=cache_dir, connect_timeout=connect_timeout,
                       progress=lambda line: click.echo(line, err=True))
    click.echo(result.summary())
    if result.failed:
        raise LorasentError(f"sweep: {len(result.failed)} of {len(result.runs)} runs failed: "
                            + ", ".join(run.spec.name for run in result.failed)
                            + "; the same command again makes only the runs that did not land")


@click.command("learning-curve")
@click.option("--fractions", default="0.125,0.25,0.5,1", show_default=True,
              help="Shares of the training split, each in (0, 1]: nested stratified subsets "
                   "(train.fraction).")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(min=1),
              help="Runs per fraction: base.seed, base.seed + 1, ... (HEAD's params.yaml).")
@click.option("--name", default="lc", show_default=True,
              help="Experiments are named <NAME>-fraction<f>-seed<S>; a rerun reuses them.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Output folder, replaced as a whole  [default: reports/learning-curve-<NAME>]")
@click.option("--force", is_flag=True,
              help="Replace an --out folder that learning-curve did not write (never "
              "git-tracked files it did not write).")
@click.option("--project-to", default=2.0, show_default=True, type=FiniteFloat(min=2),
              help="Project the fit to this many times the largest fraction's training rows "
                   "(the further, the less a backtest vouches for it).")
@_ray_options
@_user_errors
def learning_curve(fractions: str, seeds: int, name: str, out_dir: Path | None, force: bool,
                   project_to: float, address: str | None, cpus_per_run: int | None,
                   num_gpus: int | None, git_remote: str | None, cache_dir: str | None,
                   connect_timeout: float | None) -> None:
    """Would more labels help? Train HEAD's params on fractions of the training split.

    Each fraction x seed is a run of `lorasent sweep` (a DVC experiment); runs that
    landed before with the same params are reused. Writes learning_curve.json, the plot
    and learning_curve.md, and prints the answer: the accuracy that doubling the labels
    is expected to add, from the form (a - b*n^(-c), 1 - b*n^(-c) or the last observation)
    that best predicted the largest fraction from the smaller ones (docs/learning-curve.md).
    """
    from lorasent.artifacts import check_output_folder
    from lorasent.experiments.grid import check_name
    from lorasent.experiments.learning_curve import MD_FILE, OUT_MARKER, parse_fractions
    from lorasent.experiments.learning_curve import learning_curve as run_curve

    shares = parse_fractions(fractions)
    check_name(name, "learning-curve")  # before the default --out, named after it
    folder = out_dir or Path("reports") / f"learning-curve-{name}"
    check_output_folder(folder, command=OUT_MARKER, force=force,
                        option="--out" if out_dir else "the output folder")
    curve = run_curve(name=name, fractions=shares, seeds=seeds, out=folder,
                      project_to=project_to,
                      progress=lambda line: click.echo(line, err=True), address=address,
                      cpus_per_run=cpus_per_run, num_gpus=num_gpus, git_remote=git_remote,
                      cache_dir=cache_dir, connect_timeout=connect_timeout)
    click.echo(curve.sweep.summary())
    click.echo(f"learning-curve: {curve.summary_sentence}")
    click.echo(f"wrote {folder / MD_FILE}")
    if curve.failed:
        raise LorasentError(
            f"learning-curve: {len(curve.failed)} of {len(curve.sweep.runs)} runs failed "
            "(the curve is drawn from the others): " + "; ".join(
                f"{run.spec.name} ({' '.join(run.spec.sets)})" for run in curve.failed))


@click.command()
@click.argument("rev_a", metavar="A", default="HEAD")
@click.argument("rev_b", metavar="B", default="workspace")
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Report folder: a new folder, or one an earlier compare wrote (replaced "
              "as a whole)  [default: reports/<A>-vs-<B>]")
@click.option("--force", is_flag=True,
              help="Replace an --out folder that compare did not write, or one of its own "
              "that holds git-tracked files (never git-tracked files it did not write, a DVC "
              "output, the current folder or the repository).")
@_user_errors
def compare(rev_a: str, rev_b: str, out_dir: Path | None, force: bool) -> None:
    """Report whether revision B is better than A, and how their metrics differ.

    A and B are commits, branches, tags or experiment names (dvc exp show); B may be
    `workspace`. Either may be a group of runs over seeds: comma-separated, or a pattern
    such as 'base-seed*'. Reads what each revision committed; retrains nothing. Writes
    verdict.md, report.md, report.html (self-contained) and one PNG per plot, and prints
    the verdict.
    """
    from lorasent.artifacts import check_output_folder
    from lorasent.review.compare import compare as write_report
    from lorasent.review.render import (
        REPORT_HTML,
        REPORT_MD,
        VERDICT_MD,
        report_folder,
        terminal_text,
    )

    folder = report_folder(rev_a, rev_b, out_dir)
    check_output_folder(folder, command="compare", force=force,
                        option="--out" if out_dir else "the report folder")
    out = write_report(rev_a, rev_b, folder)
    # plain text: GitHub's escapes (&#8203;, \*) are for the Markdown files (issue 51)
    click.echo(terminal_text((out / VERDICT_MD).read_text(encoding="utf-8")).strip())
    click.echo(f"wrote {out / REPORT_MD} and {out / REPORT_HTML}")


@click.command()
@click.argument("rev", metavar="[REV]", default="HEAD")
@click.option("--workspace", is_flag=True,
              help="Judge the outputs a run left here (make run, dvc repro) instead of "
              "rerunning REV in a temporary clone.")
@click.option("--no-train", is_flag=True,
              help="Re-score REV's adapter only (its evaluate stage, minutes): REV's outputs "
              "from the DVC cache or remote; without them, the whole pipeline runs.")
@click.option("--tolerance", type=FiniteFloat(),
              help="How far a probability may move for 'equivalent' (absolute); a metric "
              "computed from probabilities may move by this or 0.1% of itself  "
              "[default: 0.0001]")
@click.option("--seed-groups", nargs=2, metavar="REV_GROUP HERE_GROUP",
              help="Judge two groups of runs over seeds instead (experiments, e.g. 'ref-seed*' "
              "'here-seed*', as lorasent seeds names them): Welch's t-test, olympic means.")
@click.option("--connect-timeout", type=FiniteFloat(min=0, min_open=True),
              help="Seconds the default DVC remote gets to connect and answer (--no-train "
                   "pulls from it)  [default: $LORASENT_CONNECT_TIMEOUT, else 10]")
@click.option("--after-run", is_flag=True, hidden=True,
              help="make run's call: a workspace that is no reproduction, or cannot be "
              "judged, is said in one line, never a failure.")
@_user_errors
def reproduce(rev: str, workspace: bool, no_train: bool, tolerance: float | None,
              seed_groups: tuple[str, str] | None, connect_timeout: float | None,
              after_run: bool) -> None:
    """Did this machine reproduce REV's run (default HEAD)? One verdict line first:
    identical, equivalent (within --tolerance), consistent (no detectable difference by
    the paired test) or different; then each file that differs and the two machines side
    by side. Reruns REV in a temporary clone unless --workspace. Exit 1 when different.
    """
    from lorasent.review.reproduce import TOLERANCE, NotAReproduction, judge_groups
    from lorasent.review.reproduce import reproduce as run_reproduce

    repo = Path(".")
    if seed_groups:
        verdict = judge_groups(repo, *seed_groups)
    else:
        try:
            verdict = run_reproduce(repo, rev, workspace=workspace or after_run,
                                    no_train=no_train,
                                    tolerance=TOLERANCE if tolerance is None else tolerance,
                                    progress=lambda line: click.echo(line, err=True),
                                    connect_timeout=connect_timeout)
        except (LorasentError, FileNotFoundError) as err:
            # make run's call never fails the run: a workspace that is no reproduction (a
            # preset's params), or one that cannot be judged (no commit yet, no
            # lorasent outputs), is said in one line
            if not after_run:
                raise
            what = "not judged as a reproduction of" if isinstance(
                err, NotAReproduction) else "could not be judged against"
            click.echo(f"run: {what} {rev}: {str(err).removeprefix('reproduce: ')}")
            return
    click.echo(verdict.text())
    if not verdict.ok and not after_run:
        sys.exit(1)


def _test_set_findings(params: Params, folder: Path) -> list[Finding]:
    """``doctor``'s check of the inputs the params name (:func:`_input_problems`, sources
    read from ``folder``, the params file's): each problem a ``fail``."""
    from lorasent.environment import Finding  # noqa: F811 - at run time, not only for mypy

    with contextlib.chdir(folder):
        return [Finding("fail", problem) for problem in _input_problems(params)]


def _input_problems(params: Params) -> list[str]:
    """What is wrong with the files the params name, one line each: each bad set of
    ``evaluate.test_sets`` (:func:`lorasent.stages.test_sets.check_test_sets`), and each
    local file a param names that is not among its stage's deps
    (:func:`lorasent.artifacts.require_deps`). The one check of ``doctor``, of the
    baseline stage (the first stage that reads ``evaluate``, run before train, so that a
    bad set is found before a training, not after) and of evaluate (before it loads the
    model)."""
    from lorasent.stages.test_sets import check_test_sets

    problems = check_test_sets(params.evaluate.test_sets, labels=params.base.labels,
                               aliases=params.base.label_aliases, seed=params.split.seed)
    for stage, files in (("fetch", {"data.source": params.data.source}),
                         ("train", {"train.accelerate_config": params.train.accelerate_config}
                          if params.train.accelerate_config else {}),
                         ("evaluate", {f"evaluate.test_sets.{name}.source": spec.source
                                       for name, spec in params.evaluate.test_sets.items()})):
        try:
            require_deps(stage, files)
        except LorasentError as err:
            problems.append(str(err))
    return problems


def _check_inputs(params: Params) -> None:
    """Raise the first of :func:`_input_problems`, before a stage's work.

    Raises:
        LorasentError: that problem, in one line (the CLI prints it).
    """
    problems = _input_problems(params)
    if problems:
        raise LorasentError(problems[0] + (f" (and {len(problems) - 1} more problem"
                                           f"{'s' if len(problems) > 2 else ''}: "
                                           "lorasent doctor lists them)"
                                           if len(problems) > 1 else ""))


@click.command("pr-comment")
@click.argument("base")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("pr-report"),
              show_default=True,
              help="Folder for the reports and comment.md: a new folder, or one an earlier "
              "pr-comment wrote (replaced as a whole).")
@click.option("--comments", "comments_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The pull request's comments as `gh api --paginate "
              "repos/<owner>/<repo>/issues/<number>/comments` prints them: the earlier "
              "lorasent comment is edited, and this push compared with its head.")
@click.option("--pr", help="The pull request's number, for the comment's `git fetch` line.")
@click.option("--run-url", help="The workflow run whose artifacts hold the reports.")
@click.option("--author", default="github-actions[bot]", show_default=True,
              help="The login the workflow posts as: only a comment of its own is edited "
              "and read for the previous head.")
@click.option("--force", is_flag=True,
              help="Replace an --out folder that pr-comment did not write (never git-tracked "
              "files it did not write).")
@_user_errors
def pr_comment(base: str, out_dir: Path, comments_path: Path | None, pr: str | None,
               run_url: str | None, author: str, force: bool) -> None:
    """Write a pull request's lorasent comment: HEAD against branch BASE, and against
    the head the earlier comment compared (what this push did).

    Writes --out/comment.md, the two reports, and --out/comment-id when an earlier
    comment is to be edited (see .github/workflows/metrics-diff.yml). Reads committed
    metrics only; retrains nothing.
    """
    from lorasent.artifacts import check_output_folder
    from lorasent.review.pr_comment import COMMENT_ID, COMMENT_MD
    from lorasent.review.pr_comment import pr_comment as write_comment

    if not author.strip():  # "was not written by , so ..." (issue 51)
        raise click.BadParameter("empty; give the login the workflow posts as "
                                 "(github-actions[bot] for the GITHUB_TOKEN)",
                                 param_hint="'--author'")
    check_output_folder(out_dir, command="pr-comment", force=force)
    try:
        comments = comments_path.read_bytes().decode("utf-8") if comments_path else None
    except UnicodeDecodeError as err:
        raise LorasentError(f"--comments {comments_path}: not UTF-8 text (byte {err.start}); "
                            "pass what `gh api --paginate .../comments` printed") from None
    out = write_comment(base, out_dir, comments, pr=pr, run_url=run_url, author=author,
                        say=lambda line: click.echo(line, err=True))
    edits = out / COMMENT_ID
    click.echo(f"wrote {out / COMMENT_MD}: " + (
        f"it replaces comment {edits.read_text(encoding='utf-8').strip()}, the earlier "
        f"lorasent comment ({edits})" if edits.is_file() else "a new comment"))


def _progress_bars_only_in_a_terminal() -> None:
    """Progress bars only when stderr is a terminal; plain lines in a log file or CI.

    A bar redrawn with carriage returns fills a log with one line per redraw. Off a
    terminal this turns off the bars of huggingface_hub, transformers (model loading,
    and Trainer's, which ``lorasent.stages.train`` follows) and datasets, here and in the
    processes started from here (``accelerate launch``); a value the user set wins.
    lorasent's own bars (tqdm ``disable=None``) and DVC's check the terminal themselves.
    The libraries read these variables when first imported: after this, in the commands.
    """
    if not sys.stderr.isatty():
        for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
            os.environ.setdefault(name, "1")


class _OneLineUsageError(click.UsageError):
    """A bad option, argument or command, shown in one line as every other error is."""

    def show(self, file: Any = None) -> None:
        path = self.ctx.command_path if self.ctx else "lorasent"
        click.echo(f"{path}: error: {self.format_message().removesuffix('.')} (see "
                   f"`{path} --help`)", file=file, err=True)


@contextlib.contextmanager
def _usage_errors_in_one_line() -> Iterator[None]:
    try:
        yield
    except click.UsageError as err:
        raise _OneLineUsageError(err.format_message(), err.ctx) from None


class _Group(click.Group):
    """click's group, its usage errors (and its commands', parsed in ``invoke``) in one
    line instead of click's three (usage, hint, error); the exit status stays click's 2."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with _usage_errors_in_one_line():
            return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        with _usage_errors_in_one_line():
            return super().invoke(ctx)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lorasent")
def main() -> None:
    """lorasent: LoRA fine-tuning for text classification, one DVC stage per command.

    Stages in order: fetch, split, baseline, train, evaluate. `dvc repro` runs them.
    """
    _progress_bars_only_in_a_terminal()


for _command in (fetch, split, baseline, train, evaluate, doctor, predict, export, queue,
                 preset, compare, pr_comment, metrics, seeds, sweep, learning_curve, reproduce):
    main.add_command(_command)


if __name__ == "__main__":
    main()
