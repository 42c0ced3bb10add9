"""``lorasent predict``, ``export`` and ``queue``: the commands that use a trained adapter
(``models/adapter``) outside the pipeline."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from lorasent.command_errors import user_errors
from lorasent.commands.options import (
    ADAPTER,
    BASE,
    BATCH_SIZE,
    DEVICE,
    SEPARATOR,
    TEXT_COLUMN,
    FiniteFloat,
)


@click.command()
@click.argument("texts", nargs=-1)
@ADAPTER
@BASE
@click.option("--input", "input_path", help="A CSV, TSV, JSONL or Parquet file, or any other "
              "file (or - for stdin) with one text per line; read as the fetch stage reads "
              "data.source.")
@click.option("--output", "output_path", help="Write predictions to this .csv or .jsonl file "
              "(input order kept, the input's other columns first) instead of printing a "
              "table.")
@TEXT_COLUMN
@click.option("--keep", multiple=True, metavar="COLUMN",
              help="Input column to copy into --output (repeat for several); default: every "
              "column but the text.")
@SEPARATOR
@click.option("--encoding", default="utf-8", show_default=True,
              help="Encoding of the --input file.")
@BATCH_SIZE
@click.option("--min-confidence", type=FiniteFloat(), metavar="FLOAT",
              help="In (0, 1]: abstain (no label; abstained true) on a text whose top "
              "probability, after the adapter's temperature, is below it; the end of the "
              "run says how many, and what calibration.json's validation risk-coverage says "
              "this threshold keeps. Default: always label.")
@click.option("--force", is_flag=True,
              help="Replace an --output file that git or DVC tracks, or that predict did "
              "not write (never the --input).")
@DEVICE
@user_errors
def predict(texts: tuple[str, ...], adapter_dir: Path, base_dir: Path, input_path: str | None,
            output_path: str | None, text_column: str, keep: tuple[str, ...], separator: str,
            encoding: str, batch_size: int, min_confidence: float | None, force: bool,
            device: str | None) -> None:
    """Predict labels, with each class's probability, for TEXTS or an --input file.

    The probabilities are scaled by the temperature the train stage fitted on the
    validation split (the adapter's calibration.json), or the raw softmax without one
    (said on standard error)."""
    import itertools

    from lorasent.contracts import read_temperature_scaling
    from lorasent.modeling import load_trained_model
    from lorasent.output_guard import check_output_file
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
            from lorasent.atomic import atomic_open

            with atomic_open(output_path) as out:  # streamed; complete or not there at all
                write_predictions(predictions, record.labels, out, fmt, inputs.columns,
                                  abstentions=abstentions)
    if output_path is not None:
        click.echo(f"wrote {output_path}", err=True)
    if min_confidence is not None:
        click.echo(abstention_summary(tally, min_confidence, adapter_dir, scaling), err=True)


@click.command()
@ADAPTER
@BASE
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
@DEVICE
@user_errors
def export(adapter_dir: Path, base_dir: Path, out_dir: Path, force: bool, metrics_path: Path,
           device: str | None) -> None:
    """Merge the adapter into its base model and save it for plain transformers, with a
    model card (README.md) giving the adapter's evaluation."""
    from lorasent.contracts import read_temperature_scaling
    from lorasent.modeling import load_trained_model, read_adapter_record
    from lorasent.output_guard import check_output_folder
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
@ADAPTER
@BASE
@TEXT_COLUMN
@SEPARATOR
@click.option("--encoding", default="utf-8", show_default=True,
              help="Encoding of the UNLABELLED file.")
@BATCH_SIZE
@click.option("--force", is_flag=True,
              help="Replace an --out file that git or DVC tracks, that queue did not "
              "write, or that a person may have filled in (labels, a renamed or added "
              "column, a re-save in another encoding: kept first as <out>.<n>.bak); never "
              "the UNLABELLED file.")
@DEVICE
@user_errors
def queue(pool_path: str, budget: int, strategy: str, relabel: bool, random_share: float,
          seed: int, out_path: str, split_dir: Path, adapter_dir: Path, base_dir: Path,
          text_column: str, separator: str, encoding: str, batch_size: int, force: bool,
          device: str | None) -> None:
    """Queue the UNLABELLED texts (read as predict --input reads) that the adapter is
    least sure of for labelling: near-duplicates and texts of the splits left out,
    balanced over the predicted classes, the most extreme 5% left out and a share drawn
    at random (docs/active-learning.md)."""
    from lorasent.atomic import atomic_open, read_jsonl
    from lorasent.calibration import label_issues
    from lorasent.contracts import read_temperature_scaling
    from lorasent.modeling import load_trained_model
    from lorasent.output_guard import check_output_file, keep_aside
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
