"""Use a trained adapter: ``lorasent predict`` on new texts, ``lorasent export`` for serving.

Usage::

    lorasent predict --adapter models/adapter "text one" "text two"
    lorasent predict --adapter models/adapter --input texts.csv --output labels.jsonl
    lorasent export --adapter models/adapter --out exported/

The adapter folder carries what scoring needs (``lorasent.json``: prompt, label words,
label order, max_length, base model source and SHA-256); the base model folder
(``--base``, ``models/base`` by default) must be the one it was trained on, by hash.
Predictions use the same label scoring as the evaluate stage (:mod:`lorasent.scoring`),
so they equal evaluate's.

Inputs: texts on the command line, or ``--input`` a CSV, TSV, JSONL or Parquet file
(column ``--text-column``), any other file or ``-`` (standard input) with one text per
line. Files are read by :mod:`lorasent.tables`, the reader of the fetch stage, under the
same rules (``--separator``, ``--encoding``), and streamed in chunks, so their size is not
bounded by memory. The input's other columns (or those named with ``--keep``) are
written ahead of each prediction, so results join back, e.g. on an ``id``. An empty or
blank text gets no label (``label`` null / empty, ``note`` "empty text"); a text longer
than ``max_length`` is cut from its end (in generative mode the prompt's answer slot is
kept). Adapters of either ``train.mode`` work: the record says which.

Probabilities: the softmax of the class scores divided by the adapter's temperature
(``calibration.json``, fitted on the validation split by the train stage: temperature
scaling, Guo et al. 2017), or the raw softmax for an adapter without one (an adapter
trained before the file existed, or without validation rows; said once on standard
error). The temperature changes no label. With ``--min-confidence`` a text whose top
probability is below the threshold gets no label (``abstained`` true), and the end of
the run says how many were abstained on and what the validation split's risk-coverage
(``calibration.json``) says that threshold keeps.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from tqdm.auto import tqdm

from lorasent.atomic import being_written, read_json, write_json
from lorasent.calibration import apply_temperature
from lorasent.contracts import AdapterRecord, EvalMetrics, TemperatureScaling, dump, parse
from lorasent.errors import LorasentError
from lorasent.hashes import sha256_file
from lorasent.metrics import probabilities
from lorasent.modes import MODES, no_zero_shot_cell
from lorasent.output_guard import output_dir
from lorasent.paths import (
    ADAPTER_DIR,
    ADAPTER_RECORD,
    CALIBRATION_RECORD,
    EVAL_METRICS,
    TRAIN_LIVE_DIR,
)
from lorasent.scoring import Encoder, score_texts
from lorasent.statistics import with_interval
from lorasent.tables import PREDICT_SETTINGS, Table, spreadsheet_row, written_for_people

log = logging.getLogger(__name__)

CHUNK_TEXTS = 512  # texts read, scored and written at a time


class InputError(LorasentError, ValueError):
    """Arguments that cannot be used (texts and --input together, an unknown --keep
    column, an --output suffix); the message names the option."""


class AdapterFolderError(LorasentError):
    """``--adapter`` names no folder, or a folder that is not an adapter lorasent trained;
    the message says which, and how to get the adapter back."""


def restore_adapter() -> str:
    """The ways to get ``models/adapter`` back, with ``dvc`` as it is typed here."""
    from lorasent.programs import as_typed

    dvc = as_typed("dvc")
    return (f"get it back with `{dvc} checkout {ADAPTER_DIR}` (from DVC's cache, if a train "
            f"run finished before), `{dvc} exp apply <name>` (an experiment's adapter; "
            f"`{dvc} exp show` lists them) or `{dvc} repro` (retrains)")


# DVC's record of the paths its running commands read and write, in the repository
# (dvc/rwlock.py: {"write": {path: {"pid", "cmd"}}, "read": {path: [{"pid", "cmd"}]}},
# absolute paths). ``dvc repro`` holds a stage's outputs there from before it removes
# them until the stage ends; a holder whose process is gone is stale.
DVC_RWLOCK = Path(".dvc") / "tmp" / "rwlock"


def dvc_holders(path: str | Path, rwlock: Path = DVC_RWLOCK) -> list[str]:
    """The running DVC commands that hold ``path`` (or a folder above or below it) in
    DVC's :data:`DVC_RWLOCK`, each as ``dvc repro, PID 1234`` (the program's name, not
    its path); empty when none does or the file is absent or not such a record."""
    import psutil

    try:
        lock = json.loads(rwlock.read_text(encoding="utf-8"))
        entries = [(key, info) for key, info in lock.get("write", {}).items()]
        entries += [(key, info) for key, infos in lock.get("read", {}).items()
                    for info in infos]
        target = str(Path(path).resolve())
        holders = []
        for key, info in entries:
            held = str(Path(key).resolve())
            if not (held == target or target.startswith(held + os.sep)
                    or held.startswith(target + os.sep)) or not psutil.pid_exists(info["pid"]):
                continue
            program, _, rest = str(info["cmd"]).partition(" ")
            shown = f"{Path(program).name} {rest}".strip() + f", PID {int(info['pid'])}"
            if shown not in holders:
                holders.append(shown)
        return holders
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return []


def check_adapter_folder(adapter_dir: str | Path) -> None:
    """Refuse, before any model is loaded, an ``--adapter`` that is missing (saying when a
    train run is writing it now: DVC holds it in :data:`DVC_RWLOCK`, from before it
    removes the last adapter, or the train stage marks it, from its start), empty, a
    file, or a folder without lorasent's record (``lorasent.json``).

    Raises:
        AdapterFolderError: naming which of these it is, and the way out.
    """
    path = Path(adapter_dir)
    default = path.resolve() == ADAPTER_DIR.resolve()
    holders = dvc_holders(ADAPTER_DIR) if default and not path.exists() else []
    if holders and not any("repro" in h or "exp run" in h for h in holders):
        raise AdapterFolderError(
            f"{path}: not there yet: DVC is writing it now ({'; '.join(holders)}); wait "
            "until it finishes, then run again")
    if not path.exists() and default and (holders or being_written(TRAIN_LIVE_DIR)
                                          or being_written(ADAPTER_DIR)):
        why = (f"{'; '.join(holders)}; DVC removed the last adapter when the stage started"
               if holders else "DVC removes the last adapter when a train stage starts")
        raise AdapterFolderError(
            f"{path}: not there yet: a train run is writing it now ({why}); wait until it "
            "finishes, then run again")
    if not path.exists():
        raise AdapterFolderError(
            f"{path}: no such folder. The train stage writes the adapter to {ADAPTER_DIR}: "
            f"a fresh clone has none until `make run` (or `make smoke`, a tiny one) trains "
            f"it, and DVC removes that folder when a train run is interrupted; "
            f"{restore_adapter()}")
    if not path.is_dir():
        raise AdapterFolderError(f"{path}: a file, not a folder; point --adapter at the "
                                 f"folder the train stage writes ({ADAPTER_DIR})")
    names = sorted(p.name for p in path.iterdir())
    if not names:
        raise AdapterFolderError(f"{path}: an empty folder, not an adapter; {restore_adapter()}")
    if ADAPTER_RECORD not in names:
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        way = (restore_adapter() if path.resolve() == ADAPTER_DIR.resolve() else
               f"point --adapter at the folder the train stage writes ({ADAPTER_DIR})")
        raise AdapterFolderError(
            f"{path}: a folder, but not an adapter trained by lorasent: it has no "
            f"{ADAPTER_RECORD} (the labels, prompt and base-model hash lorasent writes "
            f"beside the weights); it holds {shown}. To use lorasent's adapter, {way}")


@dataclass(frozen=True)
class Prediction:
    """One text's prediction; ``columns`` are the input's kept columns (name -> value,
    typed as in the input: JSON and Parquet values keep their type). ``abstained``:
    scored, but its top probability is below ``--min-confidence``, so ``label`` is None
    (the probabilities are kept)."""

    text: str
    label: str | None
    probabilities: dict[str, float] | None
    note: str | None = None
    columns: dict[str, Any] = field(default_factory=dict)
    abstained: bool = False


@dataclass(frozen=True)
class Inputs:
    """Texts to predict, with the names of the input columns kept in the output."""

    columns: list[str]
    rows: Iterator[tuple[str, dict[str, Any]]]  # (text, {kept column: value})


def predict(model: Any, encoder: Encoder, labels: list[str], texts: list[str],
            batch_size: int, temperature: float | None = None,
            min_confidence: float | None = None) -> list[Prediction]:
    """Predictions for ``texts`` in order; blank texts get no label.

    Args:
        temperature: the adapter's (``calibration.json``): the probabilities are
            :func:`lorasent.calibration.apply_temperature` of the scores; None: the raw
            softmax (:func:`lorasent.metrics.probabilities`).
        min_confidence: in (0, 1]: a text whose top probability is below it is
            ``abstained`` (no label, its probabilities kept); None: never.

    Raises:
        NotFiniteError: a score or probability is NaN or infinite (:func:`check_finite`),
            before any of these texts is returned.
    """
    scored = [i for i, t in enumerate(texts) if t.strip()]
    probs = {}
    if scored:
        scores = score_texts(model, encoder, [texts[i] for i in scored], batch_size,
                             desc="predict")
        check_finite(scores, [texts[i] for i in scored], "class scores")
        scaled = (probabilities(scores) if temperature is None
                  else apply_temperature(scores, temperature))
        check_finite(scaled, [texts[i] for i in scored], "probabilities")
        probs = dict(zip(scored, scaled, strict=True))
    predictions = []
    for i, text in enumerate(texts):
        if i not in probs:
            predictions.append(Prediction(text, None, None, "empty text"))
            continue
        row = probs[i]
        abstained = min_confidence is not None and float(row.max()) < min_confidence
        predictions.append(Prediction(
            text, None if abstained else labels[int(np.argmax(row))],
            {label: float(v) for label, v in zip(labels, row, strict=True)},
            abstained=abstained))
    return predictions


class NotFiniteError(LorasentError):
    """The adapter gave a NaN or infinite class score or probability."""


def check_finite(values: np.ndarray, texts: Sequence[str], what: str) -> None:
    """Refuse (N, K) ``values`` (``what``: ``class scores`` or ``probabilities``) of the N
    ``texts`` holding a NaN or an infinity, which would be printed as NaN and labelled
    as the first class (argmax of NaN).

    Raises:
        NotFiniteError: one line naming how many texts, the first of them, and the way out.
    """
    bad = ~np.isfinite(values).all(axis=1)
    if bad.any():
        first = texts[int(np.argmax(bad))]
        shown = first if len(first) <= 60 else first[:57] + "..."
        raise NotFiniteError(
            f"the adapter gave {what} that are not finite (NaN or infinite) for "
            f"{int(bad.sum())} of {len(texts)} texts, the first {shown!r}, and stopped before "
            f"writing them: its weights or its {CALIBRATION_RECORD} are damaged; "
            f"{restore_adapter()}")


class MinConfidenceError(InputError):
    """``--min-confidence`` outside (0, 1]."""


def check_min_confidence(value: float | None) -> float | None:
    """``value`` (``--min-confidence``) when it is None or in (0, 1].

    Raises:
        MinConfidenceError: outside (0, 1] (or NaN), in one line.
    """
    if value is not None and not 0 < value <= 1:
        raise MinConfidenceError(
            f"--min-confidence {value}: must be a probability in (0, 1], e.g. 0.8 (a text "
            "whose top probability is below it gets no label)")
    return value


def probabilities_note(adapter_dir: str | Path, scaling: TemperatureScaling | None) -> str:
    """One line for standard error: which probabilities predict writes, the adapter's
    temperature-scaled ones or the raw softmax, and why."""
    path = Path(adapter_dir) / CALIBRATION_RECORD
    if scaling is None:
        return (f"probabilities: the raw softmax of the scores, not temperature-scaled: "
                f"{path} not found (an adapter trained before the train stage fitted a "
                "temperature; retrain to get one)")
    if scaling.temperature is None:
        return f"probabilities: the raw softmax of the scores ({path}: {scaling.note})"
    return (f"probabilities: temperature-scaled, softmax(scores / {scaling.temperature:.4g}), "
            f"the temperature fitted on {scaling.validation_rows} validation rows ({path})")


@dataclass
class Tally:
    """Counts of the predictions that pass through :meth:`count`: texts scored (not
    blank) and abstained on."""

    scored: int = 0
    abstained: int = 0

    def count(self, predictions: Iterable[Prediction]) -> Iterator[Prediction]:
        """``predictions`` unchanged, counted as they pass."""
        for p in predictions:
            self.scored += p.probabilities is not None
            self.abstained += p.abstained
            yield p


def abstention_summary(tally: Tally, min_confidence: float, adapter_dir: str | Path,
                       scaling: TemperatureScaling | None) -> str:
    """One line for standard error at the end of ``predict --min-confidence``: the texts
    abstained on, and what the validation split's risk-coverage (``calibration.json``'s
    :meth:`lorasent.contracts.TemperatureScaling.point_at`, the threshold of its grid at
    or below ``min_confidence``: it keeps at least as many rows) says of the threshold;
    or that there is no validation estimate."""
    share = f" ({tally.abstained / tally.scored:.1%})" if tally.scored else ""
    done = (f"--min-confidence {min_confidence:g}: abstained on {tally.abstained} of "
            f"{tally.scored} scored texts{share}")
    point = None if scaling is None else scaling.point_at(min_confidence)
    if scaling is None or point is None:
        why = (f"{Path(adapter_dir) / CALIBRATION_RECORD} not found" if scaling is None
               else scaling.note or "calibration.json holds no risk-coverage")
        return f"{done}; no validation estimate ({why})"
    at = (f"at min_confidence {point.min_confidence:.2f}" if point.min_confidence ==
          min_confidence else f"at {point.min_confidence:.2f}, the grid's threshold at or "
          f"below {min_confidence:g}")
    accuracy = ("no accuracy: no row kept" if point.accuracy is None
                else f"accuracy {point.accuracy:.3f} on them")
    kept = "at most " if point.min_confidence < min_confidence else ""
    return (f"{done}; on the validation split {at}, {point.rows} of "
            f"{scaling.validation_rows} rows ({point.coverage:.1%}) were kept, {accuracy}"
            + (f" ({kept}as many at {min_confidence:g})" if kept else ""))


# ------------------------------------------------------------------------------ inputs

@contextmanager
def open_inputs(source: str, *, text_column: str = "text", separator: str = "auto",
                encoding: str = "utf-8", keep: Sequence[str] | None = None
                ) -> Iterator[Inputs]:
    """The texts of ``source`` (a table, a text file or ``-``), streamed.

    ``keep``: the input columns written with each prediction; ``None`` keeps all but the
    text column.

    Raises:
        TableError: the file breaks a rule of :mod:`lorasent.tables` (on opening, or
            while the rows are read).
        InputError: a ``keep`` column the input does not have.
    """
    with Table(source, required={text_column: "--text-column"}, encoding=encoding,
               separator=separator, settings=PREDICT_SETTINGS, lines=True,
               typed=True) as table:
        others = [c for c in table.columns if c and c != text_column]
        if keep is None:
            kept = others
        else:
            kept = list(keep)
            missing = [c for c in kept if c not in others]
            if missing:
                raise InputError(f"--keep: {source} has no column {missing} besides the text "
                                 f"column {text_column!r}; its columns: {table.columns}")
        yield Inputs(kept, ((row[text_column], {c: row.get(c) for c in kept})
                            for _, row in table.rows()))


# ----------------------------------------------------------------------------- outputs

def _rows(predictions: Iterable[Prediction], labels: list[str],
          abstentions: bool = False) -> Iterator[list[Any]]:
    for p in predictions:
        probs = p.probabilities or {}
        yield [*p.columns.values(), p.text, p.label or "",
               *(f"{probs[label]:.6f}" if probs else "" for label in labels), p.note or "",
               *([str(p.abstained).lower()] if abstentions else [])]


def kept_names(columns: Sequence[str], outputs: Sequence[str]) -> list[str]:
    """Output names of kept input columns: their own, or, where the name is one of the
    prediction's own (an input ``label`` next to the predicted one), ``input_<name>``,
    prefixed again while that is taken too, so that no name repeats."""
    names: list[str] = []
    for column in columns:
        name = column
        while name in outputs or name in names or (name != column and name in columns):
            name = f"input_{name}"
        names.append(name)
    renamed = [f"{c} -> {n}" for c, n in zip(columns, names, strict=True) if c != n]
    if renamed:
        log.warning("input columns renamed in the output: %s", ", ".join(renamed))
    return names


# Line breaks that str.splitlines() (and so many JSONL readers) honour but JSON leaves
# unescaped with ensure_ascii=False; JSON escapes every other one (they are controls).
JSON_LINE_BREAKS = {"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def json_line(obj: Any) -> str:
    """``obj`` as one JSONL line (``\\n``-terminated, non-ASCII kept as UTF-8), with the
    line breaks of :data:`JSON_LINE_BREAKS` escaped so that no reader splits the row:
    they can only occur inside JSON strings, where the escape reads back as the same
    character."""
    text = json.dumps(obj, ensure_ascii=False, default=str)
    for char, escaped in JSON_LINE_BREAKS.items():
        text = text.replace(char, escaped)
    return text + "\n"


class CsvRows:
    """Rows written with :mod:`csv` (``QUOTE_MINIMAL``) and ``\\n`` line ends, every field
    holding a ``\\r`` or ``\\n`` quoted, and every cell a spreadsheet would run as a
    formula neutralised (:func:`lorasent.tables.spreadsheet_cell`; the header too).

    Python 3.11's writer quotes only the characters of its own ``lineterminator``: with
    ``"\\n"`` a text holding a bare ``\\r`` (as real tweets do) is written unquoted, and
    pandas then reads it as two rows. Each row is therefore written with ``"\\r\\n"``
    (both characters quoted) and its terminator replaced by ``"\\n"``.
    """

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.buffer = io.StringIO()
        self.writer = csv.writer(self.buffer, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")

    def writerow(self, row: Iterable[Any]) -> None:
        self.buffer.seek(0)
        self.buffer.truncate()
        self.writer.writerow(spreadsheet_row(row))
        self.out.write(self.buffer.getvalue().removesuffix("\r\n") + "\n")

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def write_predictions(predictions: Iterable[Prediction], labels: list[str], out: TextIO,
                      fmt: str, columns: Sequence[str] = (), abstentions: bool = False
                      ) -> None:
    """Write predictions as ``csv``, ``jsonl`` or a ``table`` for the terminal.

    ``columns``: the kept input columns (CSV and JSONL write them first, under the
    names of :func:`kept_names`; the table leaves them out). ``abstentions``
    (``--min-confidence`` given): CSV and JSONL end each row with ``abstained``
    (``true``/``false``; an abstained row's ``label`` is empty in CSV, null in JSONL).
    The table shows a text without a label as ``-``, followed by its note (``(empty
    text)``, ``(abstained)``) after the text. CSV goes through :class:`CsvRows` and
    JSONL through :func:`json_line`, so that pandas, :mod:`csv` and line-by-line readers
    get one row per prediction, in order, texts unchanged, whatever line breaks, quotes
    or separators they hold.
    """
    ends = ["abstained"] if abstentions else []
    if fmt == "jsonl":
        names = kept_names(columns, ["text", "label", "probabilities", "note", *ends])
        for p in predictions:
            out.write(json_line({**dict(zip(names, p.columns.values(), strict=True)),
                                 "text": p.text, "label": p.label,
                                 "probabilities": p.probabilities, "note": p.note,
                                 **({"abstained": p.abstained} if abstentions else {})}))
    elif fmt == "csv":
        header = ["text", "label", *(f"p_{label}" for label in labels), "note", *ends]
        writer = CsvRows(out)
        writer.writerow([*kept_names(columns, header), *header])
        writer.writerows(_rows(predictions, labels, abstentions))
    else:
        width = max(len(label) for label in labels)
        out.write(f"{'label':<{width}}  " + "  ".join(f"{label[:8]:>8}" for label in labels)
                  + "  text\n")
        for row in _rows((replace(p, columns={}, note="abstained" if p.abstained else p.note)
                          for p in predictions), labels):
            text = row[0] if len(row[0]) <= 60 else row[0][:57] + "..."
            note = f"  ({row[-1]})" if row[-1] else ""
            out.write(f"{row[1] or '-':<{width}}  " + "  ".join(f"{v:>8}" for v in row[2:-1])
                      + f"  {text!r}{note}\n")


def output_format(path: str | None) -> str:
    if path is None:
        return "table"
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    raise InputError(f"--output {path}: predict writes .csv or .jsonl files; give a path "
                     "ending in .csv or .jsonl (nothing was written)")


def written_by_predict(path: str | Path) -> bool:
    """Whether the file at ``path`` starts as :func:`write_predictions` starts a file of
    its :func:`output_format`: a CSV header ending in ``text``, ``label``, one or more
    ``p_<class>`` columns and ``note``, or a JSONL object whose last keys are ``text``,
    ``label``, ``probabilities`` and ``note``; either followed by ``abstained`` (written
    with ``--min-confidence``). Only the first line is read (at most 1 MiB); an
    unreadable or undecodable file is not predict's."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            first = fh.readline(1 << 20)
    except (OSError, UnicodeDecodeError):
        return False
    if output_format(str(path)) == "jsonl":
        try:
            row = json.loads(first)
        except ValueError:
            return False
        if not isinstance(row, dict):
            return False
        keys = list(row)[:-1] if list(row)[-1:] == ["abstained"] else list(row)
        return keys[-4:] == ["text", "label", "probabilities", "note"]
    return written_for_people(next(csv.reader([first.rstrip("\r\n")]), [])) == "predict"


def stream_predictions(model: Any, encoder: Encoder, labels: list[str],
                       rows: Iterable[tuple[str, dict[str, Any]]], batch_size: int,
                       chunk: int = CHUNK_TEXTS, progress: bool = True,
                       temperature: float | None = None,
                       min_confidence: float | None = None) -> Iterator[Prediction]:
    """Predictions for a stream of ``(text, kept columns)``, ``chunk`` texts at a time, in
    input order; ``temperature`` and ``min_confidence`` as in :func:`predict`.

    ``progress``: show the ``texts`` bar (on standard error, when it is a terminal);
    turn it off when the predictions go to the same terminal, as the table does.
    """
    rows = iter(rows)
    with tqdm(desc="texts", unit="text", disable=None if progress else True) as bar:
        while batch := list(itertools.islice(rows, chunk)):
            for p, (_, columns) in zip(
                    predict(model, encoder, labels, [text for text, _ in batch], batch_size,
                            temperature=temperature, min_confidence=min_confidence),
                    batch, strict=True):
                yield replace(p, columns=columns)
            bar.update(len(batch))


# ------------------------------------------------------------------------------ export

@dataclass(frozen=True)
class Evaluation:
    """The evaluate stage's metrics of one adapter, or why there are none.

    ``metrics``: the ``eval.json`` (``None`` when it is missing or belongs to another
    adapter); ``source``: the path read; ``reason``: why ``metrics`` is ``None``.
    """

    metrics: EvalMetrics | None
    source: Path
    reason: str = ""


def adapter_evaluation(adapter_dir: str | Path, record: AdapterRecord,
                       metrics_path: str | Path = EVAL_METRICS) -> Evaluation:
    """The metrics of ``metrics_path`` if they are this adapter's, else the reason not.

    ``eval.json`` names no adapter; the evaluate stage's provenance record written with
    it (``provenance/evaluate.json`` beside it) does: the SHA-256 of the adapter's
    ``adapter_model.safetensors`` and of the base model. Both must match this adapter,
    the record's status be ``ok``, and its test rows and labels those of ``eval.json``.
    Never raises: a file that cannot be read is a reason.
    """
    metrics_path = Path(metrics_path)
    provenance_path = metrics_path.parent / "provenance" / "evaluate.json"
    weights = Path(adapter_dir) / "adapter_model.safetensors"

    def none(reason: str) -> Evaluation:
        return Evaluation(None, metrics_path, reason)

    for path in (metrics_path, provenance_path):
        if not path.is_file():
            return none(f"{path}: not found")
    try:
        metrics, prov = read_json(metrics_path), read_json(provenance_path)
    except (OSError, ValueError) as err:
        return none(f"unreadable: {err}")
    if not isinstance(metrics, dict) or not isinstance(prov, dict):
        return none(f"{metrics_path} or {provenance_path} is not a JSON object")
    try:
        metrics = parse(EvalMetrics, metrics, str(metrics_path), "rerun evaluate (dvc repro)")
    except LorasentError as err:
        return none(str(err))
    inputs = prov.get("inputs") or {}
    mine = sha256_file(weights) if weights.is_file() else None
    if prov.get("status") != "ok":
        return none(f"{provenance_path} records a {prov.get('status')} evaluate run")
    if inputs.get("adapter") != mine:
        return none(f"{provenance_path} records adapter sha256 {inputs.get('adapter')}, "
                    f"this adapter's {weights.name} has {mine}")
    if inputs.get("model") != record.base_model.sha256:
        return none(f"{provenance_path} records base model sha256 {inputs.get('model')}, "
                    f"this adapter was trained on {record.base_model.sha256}")
    if prov.get("test_rows") != metrics.test_rows or metrics.labels != record.labels:
        return none(f"{metrics_path} and {provenance_path} are of different runs "
                    "(test rows or labels differ)")
    return Evaluation(metrics, metrics_path)


def _num(value: float | None, bold: bool = False) -> str:
    return with_interval(value, digits=3, missing="–", bold=bold)


def evaluation_section(evaluation: Evaluation) -> str:
    """The model card's ``## Evaluation``: accuracy and macro-F1 with their 95%
    intervals, the test rows, the majority-class and zero-shot baselines; or, when no
    evaluation of this adapter was found, that sentence and why."""
    m = evaluation.metrics
    if m is None:
        return ("## Evaluation\n\nNo evaluation of this adapter found "
                f"({evaluation.reason}), so no metrics are given here. Run the evaluate "
                "stage (`dvc repro`) in the project that trained it and export again, or "
                "pass `--metrics` the eval.json of this adapter.")
    base = m.baseline
    if base.zero_shot_accuracy is None:
        zero_shot = f"{no_zero_shot_cell(m.mode)} | –"
    else:
        zero_shot = f"{_num(base.zero_shot_accuracy)} | {_num(base.zero_shot_macro_f1)}"
    lines = [
        "## Evaluation", "",
        f"The evaluate stage of lorasent on {m.test_rows} held-out test rows "
        f"(`{evaluation.source}` at export; 95% percentile-bootstrap intervals over the "
        "test rows):", "",
        "| | accuracy [95% interval] | macro-F1 [95% interval] |",
        "|---|---|---|",
        f"| majority-class baseline (always `{base.majority_class}`) | "
        f"{_num(base.majority_accuracy)} | – |",
        f"| zero-shot base model | {zero_shot} |",
        f"| **this model** | {_card(m, 'accuracy')} | {_card(m, 'macro_f1')} |",
    ]
    if m.warnings:
        lines += ["", "Warnings of the evaluation:", ""] + [f"- {w}" for w in m.warnings]
    return "\n".join(lines)


def _card(m: EvalMetrics, name: str) -> str:
    """``**value** [low, high]``, 3 decimals: the model card's cell of ``name``."""
    return with_interval(*m.interval(name), digits=3, missing="–", bold=True)


def calibration_section(scaling: TemperatureScaling | None) -> str:
    """The model card's ``## Calibration``: the adapter's temperature (``scaling``, its
    ``calibration.json``; None: the adapter folder had none) with the validation NLL
    and ECE before and after it, or why there is none."""
    head = "## Calibration\n\n"
    if scaling is None or scaling.temperature is None:
        why = ("the adapter folder had no calibration.json (trained before lorasent fitted "
               "a temperature)" if scaling is None else scaling.note)
        return (f"{head}No temperature: {why}. The snippet's `temperature = 1.0` gives the "
                "raw softmax of the scores, as `lorasent predict` does for this adapter.")
    return (
        f"{head}The probabilities are temperature-scaled (Guo et al. 2017): the scores are "
        f"divided by T = {scaling.temperature!r} before the softmax, T fitted on "
        f"{scaling.validation_rows} validation rows; the snippet's `temperature` is T, as "
        "`lorasent predict` uses it. T changes no label, only how confident the "
        f"probabilities are: on the validation rows the NLL went from "
        f"{scaling.nll_before:.4f} to {scaling.nll_after:.4f} and the ECE "
        f"({scaling.ece_bins} bins) from {scaling.ece_before:.4f} to "
        f"{scaling.ece_after:.4f}. `calibration.json` holds the method, these metrics, the "
        "Brier score and the validation risk-coverage (the rows kept and their accuracy "
        "for each minimum confidence).")


def export_readme(record: AdapterRecord, adapter_dir: str | Path,
                  evaluation: Evaluation | None = None,
                  scaling: TemperatureScaling | None = None) -> str:
    """The exported folder's README (model card): loading, scoring, the evaluation, the
    temperature (``scaling``: the adapter's ``calibration.json``, None when it has none:
    :func:`calibration_section`; the snippet divides the scores by it).

    The template is the mode's ``model_card`` (:data:`lorasent.modes.MODES`), given
    every key below (a mode's card uses those it needs: the seq_cls card has no prompt).
    Its snippet reads the model from ``"."``, the README's own folder, so it runs as
    written from inside the folder wherever it was moved.
    """
    evaluation = evaluation or Evaluation(None, Path(EVAL_METRICS), "none given")
    temperature = 1.0 if scaling is None or scaling.temperature is None else scaling.temperature
    return MODES[record.mode].model_card.format(
        labels_str=" / ".join(record.labels), adapter=adapter_dir,
        base=record.base_model.source, base_sha=record.base_model.sha256,
        max_length=record.max_length, evaluation=evaluation_section(evaluation),
        calibration=calibration_section(scaling), temperature=repr(temperature),
        template=repr(record.template), labels=record.labels,
        words=", ".join(repr(w) for w in record.label_words or []),
        label_words=record.label_words)


def export_merged(model: Any, encoder: Encoder, record: AdapterRecord,
                  adapter_dir: Path, out_dir: Path,
                  evaluation: Evaluation | None = None,
                  scaling: TemperatureScaling | None = None) -> Path:
    """Fold the LoRA weights (and in a mode with a ``head``, seq_cls, the trained head)
    into the base model and save it, loadable without peft.

    Writes ``model.safetensors`` (+ config), the tokenizer, ``lorasent.json`` (the adapter's
    record: labels, prompt, label words and token ids), ``calibration.json`` (the
    adapter's ``scaling``, when it has one: the temperature) and a README on loading
    and scoring with the adapter's ``evaluation`` and temperature
    (:func:`export_readme`), with the marker that lets the next export replace the
    folder (:func:`lorasent.output_guard.output_dir`; check ``out_dir`` first with
    :func:`lorasent.output_guard.check_output_folder`).
    """
    merged = model.merge_and_unload()
    merged.config.id2label = dict(enumerate(record.labels))
    merged.config.label2id = {label: i for i, label in enumerate(record.labels)}
    with output_dir(out_dir, command="export") as tmp:
        merged.save_pretrained(tmp, safe_serialization=True)
        encoder.tokenizer.save_pretrained(tmp)
        write_json(tmp / ADAPTER_RECORD,
                   dump(record.model_copy(update={"exported_from": str(adapter_dir)})))
        if scaling is not None:
            write_json(tmp / CALIBRATION_RECORD, dump(scaling))
        (tmp / "README.md").write_text(export_readme(record, adapter_dir, evaluation, scaling),
                                       encoding="utf-8")
    return out_dir
