"""One reader for every table: the fetch stage and ``lorasent predict`` read files here.

Formats, chosen by the file's suffix:

``.csv``
    RFC 4180 (Python's :mod:`csv`, ``strict=True``): a field holding the separator, a
    double quote or a line break is quoted, a quote inside it doubled. The separator is
    ``auto`` (detected from the header with :class:`csv.Sniffer` among ``, ; tab |``,
    ``,`` when the header has one column) or a given character.
``.tsv``
    Tab-separated values (IANA ``text/tab-separated-values``): one record per line, no
    quoting, so a ``"`` is an ordinary character.
``.jsonl`` / ``.ndjson``
    One JSON object per line. Its keys, as written, are the columns; a key given twice is
    an error.
``.parquet``
    Read with pyarrow in record batches. Binary columns are decoded (an error names the
    row and column of bytes that do not decode), dictionary-encoded columns become
    their values, integers their decimal strings (which ``base.label_aliases`` can map).
anything else (only where ``lines`` is allowed, i.e. predict) and ``-`` (standard input)
    One text per line; a blank line is an empty text, so output line N is input line N.

A CSV whose header is that of ``lorasent predict --output`` or ``lorasent queue``
(:func:`written_for_people`) is read back as written: the quote that neutralised a
formula-like cell (:func:`spreadsheet_cell`) is taken off (:func:`spreadsheet_text`).

Rules common to all: text files are decoded with the given encoding and a byte-order
mark is dropped; blank lines of a table are skipped; header names (CSV, TSV, Parquet)
are stripped of surrounding spaces (logged); a column name given twice is an error
naming it; a row with more or fewer fields than the header is an error naming its line
(and the separator it seems to use); a file without data rows is an error naming the
header it found; a row that repeats the header (files joined with ``cat``) is dropped
and logged. The required columns' values are ``str``, a missing value (JSON ``null``,
Parquet null) ``""``; the other columns' are ``str`` too, or with ``typed`` the file's
own values (JSON numbers, booleans and null; Parquet's as pyarrow gives them), so that
an ``id`` joins back.

Errors are :class:`TableError`: they name the file, the line (text files) or row
(Parquet) and the column, and say what to do.

The CSV files lorasent writes for people to open in a spreadsheet (``lorasent queue``'s
``to_label.csv``, ``lorasent predict --output x.csv``, the evaluate stage's predictions
and label audits) neutralise every text cell a spreadsheet would run as a formula
(:func:`spreadsheet_cell`, OWASP's CSV-injection rule), and everything that reads them
back reverses it (:func:`spreadsheet_text`): this reader for a file with the header of
predict's or the queue's CSV (:func:`written_for_people`), :mod:`lorasent.metrics` for the
evaluate stage's files.

The characters no reader sees (Unicode's default-ignorable code points, and the format
characters) are defined in :mod:`lorasent.characters`; the names that mix scripts or look
like another are here (:func:`mixed_script`, :func:`skeleton`): a class name that does is
refused.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import logging
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from lorasent.characters import character_name, is_blank
from lorasent.errors import LorasentError

log = logging.getLogger(__name__)

TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".ndjson", ".parquet")
SEPARATORS = ",;\t|"  # what ``auto`` chooses among; also the candidates of the hints
PARQUET_BATCH_ROWS = 4096
# pandas' to_csv(sep="\t") and spreadsheets quote fields as CSV does, also in a .tsv.
TSV_QUOTED = ("If the file was written with CSV quoting (pandas' to_csv(sep='\\t'), a "
              "spreadsheet), name it .csv and set the separator to '\\t'")
FETCH_SETTINGS = {"separator": "data.separator", "encoding": "data.encoding"}
PREDICT_SETTINGS = {"separator": "--separator", "encoding": "--encoding"}


# A text cell starting with one of these is run as a formula by a spreadsheet (Excel,
# LibreOffice Calc, Google Sheets): OWASP, "CSV Injection"
# (https://owasp.org/www-community/attacks/CSV_Injection). The quote is what neutralises
# them, so a text that starts with one is marked too, and the rule can be reversed.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# The signs a formula starts with, compared after Unicode NFKC, which maps their
# full-width (＝ ＋ － ＠), small (﹦ ﹢ ﹣ ﹫) and superscript forms onto them; and U+2212
# MINUS SIGN, which NFKC keeps.
FORMULA_SIGNS = "=+-@\u2212"
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _formula_sign(ch: str) -> bool:
    return ch in FORMULA_SIGNS or unicodedata.normalize("NFKC", ch)[:1] in FORMULA_SIGNS


def _lead_in(ch: str) -> bool:
    """A character a spreadsheet may skip before a formula: one with no visible glyph
    (:func:`is_blank`: NUL and the other controls, spaces, the no-break and other Unicode
    spaces, line and paragraph separators, a byte-order mark and the other format and
    default-ignorable characters, the blank graphic characters)."""
    return is_blank(ch) or unicodedata.category(ch) == "Cc"


def spreadsheet_cell(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet shows as text: a ``str`` that starts with one
    of :data:`FORMULA_STARTS` or with a single quote, or whose first character with a
    glyph is a formula sign (:data:`FORMULA_SIGNS`, in any of its Unicode forms) after any
    lead-in a spreadsheet may skip (:func:`_lead_in`: ``"\\0="``, ``" ="``, ``"\\u00a0="``,
    ``"\\ufeff="``, ``"\\n="``, ``"＝"``), gets a single quote in front
    (``=HYPERLINK(...)`` -> ``'=HYPERLINK(...)``, ``'tis`` -> ``''tis``), OWASP's rule,
    the same for every lead-in; anything else is returned as it is: a number (``-0.5``,
    as a ``float`` or as its decimal text) stays a number, it runs nothing.
    :func:`spreadsheet_text` reverses it.
    """
    if not isinstance(value, str) or _NUMBER.fullmatch(value):
        return value
    if value.startswith((*FORMULA_STARTS, "'")):
        return "'" + value
    first = next((ch for ch in value if not _lead_in(ch)), "")
    return "'" + value if first and _formula_sign(first) else value


def spreadsheet_text(cell: str) -> str:
    """The text :func:`spreadsheet_cell` was given: ``cell`` without one leading single
    quote (a cell that starts with one was always given one)."""
    return cell[1:] if cell.startswith("'") else cell


def spreadsheet_row(row: Iterable[Any]) -> list[Any]:
    """:func:`spreadsheet_cell` of each cell of ``row``."""
    return [spreadsheet_cell(value) for value in row]


def written_for_people(names: Sequence[str]) -> str | None:
    """Which lorasent command writes a CSV with the header ``names`` (as written, or read
    back), or None:

    - ``predict`` (``--output x.csv``): the kept input columns, then ``text``, ``label``,
      one or more ``p_<class>``, ``note``, and ``abstained`` with ``--min-confidence``;
    - ``queue`` (``to_label.csv``): the kept input columns, then ``text``, ``label``,
      ``predicted``, one or more ``p_<class>``, ``margin`` or ``entropy``, ``rank``,
      ``given_label``, ``reason``.
    """
    names = list(names)
    if names[-3:] == ["rank", "given_label", "reason"] \
            and names[-4:-3] in (["margin"], ["entropy"]):
        head, own = names[:-4], ["text", "label", "predicted"]
    else:
        head = names[:-1] if names[-1:] == ["abstained"] else names
        if head[-1:] != ["note"]:
            return None
        head, own = head[:-1], ["text", "label"]
    probabilities = 0
    while head and head[-1].startswith("p_"):
        head, probabilities = head[:-1], probabilities + 1
    if not probabilities or head[-len(own):] != own:
        return None
    return "queue" if "predicted" in own else "predict"


class TableError(LorasentError, ValueError):
    """A table that cannot be read as it stands; the message names the file, the line or
    row, the column, and what to do."""


def check_separator(value: str, setting: str = "data.separator") -> str:
    """``auto`` or the one character between columns; the two characters ``\\t`` (what a
    shell or ``dvc exp run -S data.separator='\\t'`` passes) mean a tab.

    Raises:
        TableError: anything else, or a quote or line break, naming ``setting``.
    """
    if value == "\\t":
        return "\t"
    if value != "auto" and len(value) != 1:
        raise TableError(f"{setting}: {value!r} is neither auto nor one character (e.g. ';', "
                         'or "\\t" for a tab)')
    if value in ('"', "\n", "\r"):
        raise TableError(f"{setting}: {value!r} cannot separate columns (it quotes fields or "
                         "ends lines); use auto or another character")
    return value


def table_kind(source: str | Path, *, lines: bool = False) -> str:
    """``csv``, ``tsv``, ``jsonl``, ``parquet`` or (with ``lines``) ``lines``.

    Raises:
        TableError: another suffix where ``lines`` is not allowed.
    """
    if str(source) == "-":
        if lines:
            return "lines"
    else:
        suffix = Path(source).suffix.lower()
        kinds = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
                 ".parquet": "parquet"}
        if suffix in kinds:
            return kinds[suffix]
        if lines:
            return "lines"
    raise TableError(f"{source}: unknown file type {Path(str(source)).suffix!r}; use "
                     + ", ".join(TABLE_SUFFIXES))


class Table:
    """An open table: its ``columns`` are known on opening, its rows stream.

    Use as a context manager (the file is closed on exit)::

        with Table(path, required={"text": "data.text_column"}) as table:
            for number, row in table.rows():   # number: data row from 1; row: {column: str}
                ...

    Args:
        source: a file path, or ``"-"`` for standard input (lines only).
        required: column -> the setting that names it (``data.text_column``,
            ``--text-column``), for the error when it is missing.
        encoding: of text files and of Parquet binary columns (Python codec name).
        separator: ``auto`` or one character (CSV and TSV).
        settings: the settings that name the ``separator`` and the ``encoding``, for
            the hints of the errors (predict's are ``--separator`` and ``--encoding``).
        lines: allow a plain-text file (or standard input), one text per line, read as
            the single column ``next(iter(required))``.
        typed: give the columns that are not required with the file's own types (JSON,
            Parquet) rather than as text.

    Raises:
        TableError: a missing file, unknown suffix or encoding, a header that repeats
            or lacks a required column, an empty file; while reading rows, any row that
            breaks the rules of the module docstring.
    """

    def __init__(self, source: str | Path, *, required: Mapping[str, str],
                 encoding: str = "utf-8", separator: str = "auto",
                 settings: Mapping[str, str] = FETCH_SETTINGS, lines: bool = False,
                 typed: bool = False) -> None:
        self.source = str(source)
        self.kind = table_kind(source, lines=lines)
        self.required = dict(required)
        self.encoding = encoding
        self.settings = dict(settings)
        self.lines = lines
        self.typed = typed
        # a CSV lorasent wrote for people (:func:`written_for_people`): its cells are read
        # back with :func:`spreadsheet_text`
        self.for_people = False
        self._stack = ExitStack()
        try:
            codecs.lookup(encoding)
        except LookupError:
            raise TableError(f"{self.settings['encoding']}: unknown encoding {encoding!r} "
                             f"for {self.source}") from None
        if self.source != "-" and not Path(source).is_file():
            raise TableError(f"{self.source}: no such file")
        try:
            self._open(separator)
        except BaseException:
            self._stack.close()
            raise

    # ---------------------------------------------------------------- opening

    def _open(self, separator: str) -> None:
        if self.kind == "parquet":
            self._open_parquet()
            return
        raw = (sys.stdin.buffer if self.source == "-"
               else self._stack.enter_context(open(self.source, "rb")))
        # newline="": line ends reach the csv module untranslated, as it requires.
        self._text = io.TextIOWrapper(raw, encoding=self.encoding, newline="")
        if self.source == "-":
            self._stack.callback(self._text.detach)
        self._lines = self._numbered_lines()
        if self.kind == "lines":
            self.columns = [next(iter(self.required))]
            return
        if self.kind == "jsonl":
            first = self._next_object()
            if first is None:
                raise TableError(f"{self.source}: no data rows (no line holds a JSON object)")
            self._first = first
            self.columns = list(first[1])
        else:
            self._open_delimited(separator)
        self._check_required()

    def _numbered_lines(self) -> Iterator[tuple[int, str]]:
        """``(line number, line with its ending)``; the byte-order mark dropped."""
        number = 0
        try:
            for number, line in enumerate(self._text, start=1):
                yield number, line.removeprefix("\ufeff") if number == 1 else line
        except UnicodeDecodeError as err:
            raise TableError(self._decode_error(err, number)) from None

    def _decode_error(self, err: UnicodeDecodeError, lines_read: int) -> str:
        """Which line holds the bytes that do not decode: found again, line by line,
        with an incremental decoder (the buffered reader decodes ahead of the lines)."""
        where = f"after line {lines_read}"
        if self.source != "-":
            decoder = codecs.getincrementaldecoder(self.encoding)()
            line = 1
            with open(self.source, "rb") as fh:
                for chunk in fh:
                    try:
                        line += decoder.decode(chunk).count("\n")
                    except UnicodeDecodeError as e:
                        line += e.object[:e.start].count(b"\n")
                        where, err = f"line {line}", e
                        break
        return (f"{self.source}: {where} is not valid {self.encoding} (byte "
                f"{err.object[err.start]:#04x}). Set {self.settings['encoding']} to the file's "
                "encoding (e.g. cp1252 for Windows exports, gb18030) or re-save it as UTF-8")

    def _open_delimited(self, separator: str) -> None:
        first = next(((n, line) for n, line in self._lines if line.strip()), None)
        if first is None:
            raise TableError(f"{self.source}: no data rows (the file is empty)")
        self._header_line, header = first
        self._header = _strip_line_end(header)
        if self.kind == "tsv" and separator not in ("auto", "\t"):
            raise TableError(
                f"{self.settings['separator']}: {separator!r} does not apply to {self.source}: "
                "a .tsv is tab-separated; use auto, or name the file .csv")
        if separator == "auto":
            separator = "\t" if self.kind == "tsv" else _sniff(header)
        self.separator = separator
        names = self._split(header, self._header_line)
        self.columns = [name.strip() for name in names]
        stripped = [f"{a!r} -> {b!r}" for a, b in zip(names, self.columns, strict=True)
                    if a != b]
        if stripped:
            log.warning("%s: column names stripped of surrounding spaces: %s", self.source,
                        ", ".join(stripped))
        if self.kind == "csv" and written_for_people(self.columns):
            self.for_people = True
            self.columns = [spreadsheet_text(name) for name in self.columns]
        seen: set[str] = set()
        for name in self.columns:
            if name and name in seen:
                raise TableError(
                    f"{self.source}: the header (line {self._header_line}) names the column "
                    f"{name!r} twice: {self.columns}. Rename or remove one of them")
            seen.add(name)

    def _split(self, line: str, number: int) -> list[str]:
        """One record's fields. CSV may continue over the next lines (quoted breaks)."""
        if self.kind == "tsv":
            return _strip_line_end(line).split(self.separator)
        reader = csv.reader(_chain_first(line, self._lines), delimiter=self.separator,
                            quotechar='"', doublequote=True, skipinitialspace=False,
                            strict=True)
        try:
            return next(reader, [])
        except csv.Error as err:
            raise TableError(
                f"{self.source}: line {number}: {err}. A CSV field that holds the separator "
                f"{self.separator!r}, a double quote or a line break must be quoted "
                '("...") with its quotes doubled (RFC 4180); a file without quoting is a '
                ".tsv") from None

    def _check_required(self) -> None:
        missing = [c for c in self.required if c not in self.columns]
        if not missing:
            return
        settings = " / ".join(self.required[c] for c in missing)
        if self.kind == "jsonl":
            raise TableError(f"{self.source}: line {self._first[0]} has no key "
                             f"{_one_or_list(missing)} ({settings}); keys found: "
                             f"{self.columns}")
        hint = ""
        if self.kind in ("csv", "tsv"):
            for sep in SEPARATORS:
                if sep != self.separator and set(missing) <= {
                        c.strip() for c in self._header.split(sep)}:
                    hint = (f". The header looks separated by {sep!r}: set "
                            f"{self.settings['separator']} to {sep!r} (or auto)")
                    break
        folded = {c.casefold(): c for c in self.columns}
        near = [folded[c.casefold()] for c in missing if c.casefold() in folded]
        if near:
            hint += f". Column names are case-sensitive: {_one_or_list(near)}?"
        elif self.lines and self.kind == "csv" and len(self.columns) == 1:
            hint += (". A file of texts without a header, one per line, is read as such when "
                     "it is not named .csv (e.g. texts.txt)")
        where = f" the header (line {self._header_line}) has" if self.kind in ("csv", "tsv") \
            else ""
        raise TableError(f"{self.source}:{where} no column {_one_or_list(missing)} ({settings}); "
                         f"columns found: {self.columns}{hint}")

    # ------------------------------------------------------------------- rows

    def rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(data row number from 1, {column: value})`` in file order, lazily.

        Raises:
            TableError: as the class says; "no data rows" once the file ends without one.
        """
        reader = {"csv": self._delimited_rows, "tsv": self._delimited_rows,
                  "jsonl": self._jsonl_rows, "parquet": self._parquet_rows,
                  "lines": self._text_rows}[self.kind]
        count = 0
        for count, row in enumerate(reader(), start=1):
            yield count, row
        if count == 0:
            found = f"the header {self.columns}" if self.kind in ("csv", "tsv", "parquet") \
                else "no line with data"
            raise TableError(f"{self.source}: no data rows ({found})")

    def _text_rows(self) -> Iterator[dict[str, str]]:
        """One text per ``\n``-ended line (``\r\n`` too). The reader splits at a bare
        ``\r`` as well (``newline=""``), which tweets hold inside a text: such pieces
        are joined again, so that text N is line N."""
        text = ""
        for _, piece in self._lines:
            text += piece
            if piece.endswith("\n"):
                yield {self.columns[0]: _strip_line_end(text)}
                text = ""
        if text:
            yield {self.columns[0]: _strip_line_end(text)}

    def _delimited_rows(self) -> Iterator[dict[str, str]]:
        repeats, quoted = [], []
        for number, line in self._lines:
            if not line.strip():
                continue
            fields = self._split(line, number)
            if self.for_people:
                fields = [spreadsheet_text(f) for f in fields]
            if len(fields) != len(self.columns):
                raise TableError(self._field_count_error(number, line, len(fields)))
            if [f.strip() for f in fields] == self.columns:
                repeats.append(number)
                continue
            if self.kind == "tsv" and any(len(f) > 1 and f[0] == f[-1] == '"' for f in fields):
                quoted.append(number)
            yield {name: value for name, value in zip(self.columns, fields, strict=True)
                   if name}
        if repeats:
            log.warning("%s: dropped %d rows that repeat the header (lines %s)", self.source,
                        len(repeats), repeats[:10])
        if quoted:
            log.warning("%s: %d rows hold fields in double quotes (lines %s), kept with their "
                        "quotes: a TSV has no quoting. %s", self.source, len(quoted),
                        quoted[:10], TSV_QUOTED)

    def _field_count_error(self, number: int, line: str, count: int) -> str:
        message = (f"{self.source}: line {number} has {count} fields, the header (line "
                   f"{self._header_line}) {len(self.columns)}, separated by "
                   f"{self.separator!r}.")
        likely = [s for s in SEPARATORS if s != self.separator
                  and self._header.count(s) == line.count(s) > 0]
        if likely:
            return (f"{message} The file seems separated by {likely[0]!r}: set "
                    f"{self.settings['separator']} to {likely[0]!r} (or auto)")
        if self.kind == "csv":
            return (f"{message} Quote a field that holds {self.separator!r} "
                    '("...", RFC 4180), or fix that line')
        return (f"{message} A TSV field cannot hold a tab or a line break (a quoted one "
                f"may start on an earlier line). {TSV_QUOTED}")

    def _next_object(self) -> tuple[int, dict[str, Any]] | None:
        for number, line in self._lines:
            if not line.strip():
                continue
            try:
                value = json.loads(line, object_pairs_hook=_unique_keys)
            except _DuplicateKey as dup:
                raise TableError(f"{self.source}: line {number} gives the key {dup.args[0]!r} "
                                 "twice; keep one") from None
            except json.JSONDecodeError as err:
                raise TableError(f"{self.source}: line {number} is not valid JSON "
                                 f"({err.msg}, column {err.colno})") from None
            if not isinstance(value, dict):
                raise TableError(
                    f"{self.source}: line {number} is a JSON {_json_type(value)}; expected "
                    f"an object per line, such as "
                    f"{json.dumps({c: '...' for c in self.required})}")
            return number, value
        return None

    def _jsonl_rows(self) -> Iterator[dict[str, str]]:
        item: tuple[int, dict[str, Any]] | None = self._first
        while item is not None:
            number, value = item
            missing = [c for c in self.required if c not in value]
            if missing:
                raise TableError(
                    f"{self.source}: line {number} has no key {_one_or_list(missing)} "
                    f"({' / '.join(self.required[c] for c in missing)}); keys found: "
                    f"{list(value)}")
            yield {key: v if self.typed and key not in self.required
                   else _json_text(v, key, number, self.source, key in self.required)
                   for key, v in value.items()}
            item = self._next_object()

    # ---------------------------------------------------------------- parquet

    def _open_parquet(self) -> None:
        import pyarrow.parquet as pq

        try:
            self._parquet = pq.ParquetFile(self.source)
        except Exception as err:  # pyarrow raises several types for a damaged file
            raise TableError(f"{self.source}: not a readable Parquet file ({err})") from None
        self._stack.callback(self._parquet.close)
        names = self._parquet.schema_arrow.names
        self.columns = [name.strip() for name in names]
        if self.columns != names:
            log.warning("%s: column names stripped of surrounding spaces: %s", self.source,
                        [n for n in names if n != n.strip()])
        twice = sorted({c for c in self.columns if self.columns.count(c) > 1})
        if twice:
            raise TableError(f"{self.source}: the column {twice[0]!r} appears twice: "
                             f"{self.columns}. Rename or remove one of them")
        self._check_required()

    def _parquet_rows(self) -> Iterator[dict[str, str]]:
        start = 1
        for batch in self._parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            columns = [self._parquet_texts(batch.column(i), name, start)
                       for i, name in enumerate(self.columns)]
            for values in zip(*columns, strict=True):
                yield dict(zip(self.columns, values, strict=True))
            start += batch.num_rows

    def _parquet_texts(self, array: Any, name: str, start: int) -> list[str]:
        import pyarrow as pa
        import pyarrow.compute as pc

        kind = array.type
        if pa.types.is_dictionary(kind):
            array, kind = array.dictionary_decode(), kind.value_type
        if pa.types.is_null(kind):
            return [""] * len(array)
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return ["" if v is None else v for v in array.to_pylist()]
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) \
                or pa.types.is_fixed_size_binary(kind):
            out = []
            for i, value in enumerate(array.to_pylist()):
                try:
                    out.append("" if value is None else value.decode(self.encoding))
                except UnicodeDecodeError:
                    raise TableError(
                        f"{self.source}: row {start + i}, column {name!r}: bytes that are "
                        f"not valid {self.encoding}; set {self.settings['encoding']} to their "
                        "encoding or re-encode that column") from None
            return out
        if self.typed and name not in self.required:
            return array.to_pylist()
        if pa.types.is_integer(kind):
            return ["" if v is None else str(v) for v in array.to_pylist()]
        if name in self.required:
            raise TableError(
                f"{self.source}: column {name!r} holds {kind} values; lorasent reads text "
                "(string, or binary in the file's encoding) or integers there. Cast the "
                "column: whole numbers with pandas .astype('Int64') (a float column of "
                "class ids with missing values), text with .astype(str)")
        try:  # another column, kept for the output only
            return ["" if v is None else v for v in pc.cast(array, pa.string()).to_pylist()]
        except pa.ArrowNotImplementedError:
            return ["" if v is None else json.dumps(v, default=str) for v in array.to_pylist()]

    # ---------------------------------------------------------------- context

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Table:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------- helpers

def _sniff(header: str) -> str:
    """The header's separator among :data:`SEPARATORS`; ``,`` for a single column."""
    try:
        return csv.Sniffer().sniff(header, delimiters=SEPARATORS).delimiter
    except csv.Error:
        return ","


def _strip_line_end(line: str) -> str:
    return line.removesuffix("\n").removesuffix("\r")


def _chain_first(line: str, rest: Iterator[tuple[int, str]]) -> Iterator[str]:
    yield line
    yield from (text for _, text in rest)


def _one_or_list(names: Sequence[str]) -> str:
    return repr(names[0]) if len(names) == 1 else repr(list(names))


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _json_type(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null",
            int: "number", float: "number"}.get(type(value), type(value).__name__)


def _json_text(value: Any, key: str, number: int, source: str, strict: bool) -> str:
    """A JSON value as text: strings as they are, integers in decimal, null as ``""``.
    Another type is an error in a required column, and its JSON text elsewhere."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if strict:
        raise TableError(f"{source}: line {number}, key {key!r} is a JSON {_json_type(value)} "
                         f"({json.dumps(value)[:40]}); write it as a string")
    return json.dumps(value, ensure_ascii=False)


# ---------------------------------------------------------------- look-alike names
#
# A class name in two scripts (Latin ``positive`` with a Cyrillic ``о``) shows as another
# name, so it is refused, naming the character (:func:`mixed_script`), and so is a name
# that looks like another (:func:`skeleton`). The rules, without the confusables table of
# Unicode Technical Standard #39: a character's script is the first word of its Unicode
# name (``CYRILLIC SMALL LETTER O``: Cyrillic), for letters and digits (Common and
# Inherited, ignored: ASCII digits, marks, modifier letters, spaces, ``-``, ``_``); a name
# is single-script, or one of UTS #39's "highly restrictive" sets (Latin with Han and
# Japanese kana, Han with Bopomofo, Han with Hangul). Two names look alike when their
# skeletons are equal: NFKC, case folded, each letter of another script that has a Latin
# letter of the same name (``CYRILLIC SMALL LETTER O``, ``GREEK CAPITAL LETTER ETA``...)
# or is in :data:`_LATIN_LOOKS` taken as that letter. A name wholly of such letters of one
# other script (Cyrillic ``рое``) reads as Latin: :func:`disguised_as_latin`.

# Cyrillic and Greek letters that UTS #39's confusables.txt maps to one Latin letter, each
# then the Latin letter it looks like; taken before the name (``CYRILLIC SMALL LETTER ER``
# looks like ``p``; ``CYRILLIC SMALL LETTER U`` like ``y``, not ``u``).
_LATIN_LOOKS = dict(zip(
    "асеһіјӏорԛѕԝхуԁьАВСЕНІЈКМОРЅТХУҮӀԚԜ"  # Cyrillic
    "αικνορυχγΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",  # Greek
    "acehijlopqswxydbABCEHIJKMOPSTXYYlQW"
    "aikvopuxyABEZHIKMNOPTYX", strict=True))

_SCRIPT_WORDS = {"CJK": "HAN", "IDEOGRAPHIC": "HAN", "KATAKANA-HIRAGANA": "KATAKANA"}
_ALLOWED_MIXES = ({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}, {"LATIN", "HAN", "BOPOMOFO"},
                  {"LATIN", "HAN", "HANGUL"})


def script_of(ch: str) -> str | None:
    """The script of a letter or digit, from its Unicode name (``LATIN``, ``CYRILLIC``,
    ``GREEK``, ``HAN``...); None for a character of no script (Common, Inherited)."""
    category = unicodedata.category(ch)
    if not (category.startswith("L") or category == "Nd") or ch.isascii() and ch.isdigit():
        return None
    name = unicodedata.name(ch, "")
    if not name or name.startswith("MODIFIER "):
        return None
    word = (name.split(" DIGIT")[0].split("-")[0].split()[-1] if category == "Nd"
            else name.split()[0])
    return _SCRIPT_WORDS.get(word, word)


def _latin_twin(ch: str) -> str | None:
    """The Latin letter of the same Unicode name as ``ch`` (``CYRILLIC SMALL LETTER O``:
    ``o``), or None."""
    script = script_of(ch)
    if script in (None, "LATIN"):
        return None
    if ch in _LATIN_LOOKS:
        return _LATIN_LOOKS[ch]
    try:
        twin = unicodedata.lookup(unicodedata.name(ch).replace(script, "LATIN", 1))
    except KeyError:
        return None
    # a name without its script's word (``CJK UNIFIED IDEOGRAPH-79EF``) finds itself
    return twin if script_of(twin) == "LATIN" else None


def disguised_as_latin(name: str) -> str | None:
    """The script of ``name`` (NFKC first; ``CYRILLIC``, ``GREEK``...) when it is written
    wholly in the letters of one script other than Latin and every one of them looks like
    a Latin letter (:data:`_LATIN_LOOKS`: Cyrillic ``рое`` reads as ``poe``); None
    otherwise (a Latin name, a mixed one, or one with a letter of its own script: Russian
    ``позитив``, Chinese ``积极``)."""
    letters = [ch for ch in unicodedata.normalize("NFKC", name) if script_of(ch)]
    scripts = {script_of(ch) for ch in letters}
    if len(scripts) != 1 or scripts == {"LATIN"}:
        return None
    return str(scripts.pop()) if all(ch in _LATIN_LOOKS for ch in letters) else None


def mixed_script(name: str) -> str | None:
    """Why ``name`` (NFKC first) mixes scripts, or None: the first character outside the
    script most of its letters are in, that script, and the Latin letter it looks like
    when there is one."""
    text = unicodedata.normalize("NFKC", name)
    scripts = [(i, ch, script_of(ch)) for i, ch in enumerate(text, start=1)]
    found = [s for _, _, s in scripts if s is not None]
    if len(set(found)) < 2 or any(set(found) <= allowed for allowed in _ALLOWED_MIXES):
        return None
    main = max(dict.fromkeys(found), key=found.count)
    where, ch, script = next(x for x in scripts if x[2] not in (None, main))
    twin = _latin_twin(ch) if main == "LATIN" else None
    looks = f", a look-alike of the Latin {twin!r}" if twin else ""
    return (f"mixes scripts: {character_name(ch)} at character {where} is "
            f"{str(script).title()} in a {main.title()} name{looks}")


def skeleton(name: str) -> str:
    """What ``name`` looks like (the rules above): :func:`label_key`, each letter that has
    a Latin twin taken as it, before case folding and after (Cyrillic ``ВОТ`` is ``bot``
    though ``в`` looks like no Latin letter)."""
    def twins(text: str) -> str:
        return "".join(_latin_twin(ch) or ch for ch in text)

    return twins(label_key(twins(unicodedata.normalize("NFKC", name))))


def label_key(label: str) -> str:
    """The key a label is compared on, in ``base.labels``, ``base.label_aliases`` and the
    data: Unicode NFKC, surrounding spaces trimmed, case folded."""
    return unicodedata.normalize("NFKC", label).strip().casefold()


def decomposed(label: str) -> tuple[int, str] | None:
    """The first combining character (general category ``M*``) of ``label`` that Unicode
    NFC composes with the character before it, as ``(position from 1, character)``; None
    when ``label`` is in NFC or its marks compose with nothing."""
    for i, ch in enumerate(label):
        if i and unicodedata.category(ch).startswith("M") and len(
                unicodedata.normalize("NFC", label[i - 1] + ch)) == 1:
            return i + 1, ch
    return None
