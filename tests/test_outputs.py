"""What the project writes and prints: file modes, predict's table on a terminal, the
messages for a missing adapter, the exported model card (fast: no model is loaded)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import termios
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from lorasent.atomic import atomic_dir, atomic_open, atomic_write_text
from lorasent.cli import main
from lorasent.contracts import AdapterRecord, EvalMetrics, dump
from lorasent.hashes import sha256_file
from lorasent.tools.predict import (
    Prediction,
    adapter_evaluation,
    evaluation_section,
    export_readme,
    write_predictions,
)

LABELS = ["negative", "neutral", "positive"]


# -------------------------------------------------------------------------- file modes

@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_atomic_dir_gives_every_file_and_folder_the_usual_mode(tmp_path, umask_022):
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "plain.txt").write_text("x")
        fd, name = tempfile.mkstemp(dir=tmp)  # what safetensors and transformers do: 0600
        os.write(fd, b"weights")
        os.close(fd)
        os.replace(name, tmp / "model.safetensors")
        sub = Path(tempfile.mkdtemp(dir=tmp))  # 0700
        fd, name = tempfile.mkstemp(dir=sub)
        os.close(fd)
    files = [p for p in out.rglob("*") if p.is_file()]
    folders = [out, *(p for p in out.rglob("*") if p.is_dir())]
    assert len(files) == 3 and len(folders) == 2
    assert {p.name: oct(_mode(p)) for p in files} == {p.name: "0o644" for p in files}
    assert {oct(_mode(p)) for p in folders} == {"0o755"}


def test_single_files_get_the_usual_mode(tmp_path, umask_022):
    atomic_write_text(tmp_path / "a.json", "{}\n")
    with atomic_open(tmp_path / "b.csv") as fh:
        fh.write("x\n")
    assert oct(_mode(tmp_path / "a.json")) == oct(_mode(tmp_path / "b.csv")) == "0o644"


# ----------------------------------------------------------------- a missing adapter

def _invoke(args, cwd, monkeypatch):
    """With the venv activated (dvc on PATH): the messages name plain `dvc`."""
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}"
                               f"{os.environ.get('PATH', '')}")
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize("command", [["predict", "some text"], ["export", "--out", "exported"]])
def test_missing_adapter_folder_says_how_to_get_it_back(tmp_path, monkeypatch, command):
    result = _invoke(command, tmp_path, monkeypatch)
    assert result.exit_code == 1
    message = " ".join(result.stderr.split())
    assert "models/adapter: no such folder" in message
    assert ("a fresh clone has none until `make run` (or `make smoke`, a tiny one) trains it, "
            "and DVC removes that folder when a train run is interrupted") in message
    for way in ("`dvc checkout models/adapter` (from DVC's cache, if a train run finished "
                "before)", "`dvc exp apply <name>`", "`dvc repro` (retrains)"):
        assert way in message
    assert "point --adapter at models/adapter" not in message  # the folder it just tried


@pytest.mark.parametrize("command", [["predict", "some text"], ["export", "--out", "exported"]])
def test_folder_that_is_not_a_lorasent_adapter_is_told_apart(tmp_path, monkeypatch, command):
    adapter = tmp_path / "models" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    result = _invoke(command, tmp_path, monkeypatch)
    assert result.exit_code == 1
    message = " ".join(result.stderr.split())
    assert ("models/adapter: a folder, but not an adapter trained by lorasent: it has no "
            "lorasent.json") in message
    assert "it holds adapter_config.json" in message
    assert "no such folder" not in message
    assert "`dvc checkout models/adapter`" in message  # it is models/adapter: restore it


def test_another_folder_that_is_not_an_adapter_points_at_models_adapter(tmp_path,
                                                                         monkeypatch):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step-2").mkdir()
    result = _invoke(["predict", "--adapter", "checkpoints", "x"], tmp_path, monkeypatch)
    assert result.exit_code == 1
    assert ("checkpoints: a folder, but not an adapter trained by lorasent: it has no "
            "lorasent.json") in " ".join(result.stderr.split())
    assert "point --adapter at the folder the train stage writes (models/adapter)" in (
        " ".join(result.stderr.split()))


# ------------------------------------------------------------- predict's table output

def test_table_shows_the_note_of_an_empty_text():
    import io

    out = io.StringIO()
    write_predictions([Prediction("good", "positive", dict(zip(LABELS, [0.1, 0.2, 0.7],
                                                              strict=True))),
                       Prediction("", None, None, "empty text")], LABELS, out, "table")
    lines = out.getvalue().splitlines()
    assert lines[1].endswith("'good'")
    assert lines[2].startswith("-") and lines[2].endswith("''  (empty text)")


def render_terminal(raw: bytes) -> list[str]:
    """The lines a terminal shows after ``raw``: carriage returns overwrite, ``ESC[A``
    moves up a line, other escape sequences are dropped."""
    screen: list[list[str]] = [[]]
    row, col = 0, 0
    text = raw.decode("utf-8", "replace")
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\x1b":
            match = re.match(r"\x1b\[(\d*)([A-Za-z])", text[i:])
            if match:
                if match.group(2) == "A":
                    row = max(0, row - int(match.group(1) or 1))
                i += match.end()
                continue
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row += 1
            while len(screen) <= row:
                screen.append([])
        else:
            line = screen[row]
            line.extend(" " * (col - len(line) + 1))
            line[col] = ch
            col += 1
        i += 1
    return ["".join(line).rstrip() for line in screen]


def run_in_terminal(args: list[str], cwd: Path, timeout: float = 300) -> tuple[int, list[str]]:
    """Run ``args`` with standard output and error on one pseudo-terminal (100 columns);
    return its exit status and the lines the terminal shows at the end."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    proc = subprocess.Popen(args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    raw = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                block = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not block:
                break
            raw += block
    finally:
        os.close(master)
        if proc.poll() is None and time.monotonic() >= deadline:
            proc.kill()
    return proc.wait(timeout=60), render_terminal(bytes(raw))


TABLE_ROW = re.compile(r"(negative|neutral|positive)(\s+0\.\d{6}){3}  '.*'")


def check_table_on_terminal(lines: list[str], texts: list[str]) -> None:
    """The table is whole and last: its header, one clean row per text (the empty one
    with its note), no progress bar drawn into it or after it."""
    header = [i for i, line in enumerate(lines) if line.startswith("label ")]
    assert len(header) == 1, lines
    table = [line for line in lines[header[0]:] if line.strip()]
    assert table[0].split() == ["label", *LABELS, "text"], lines
    assert len(table) == 1 + len(texts), lines
    for line, text in zip(table[1:], texts, strict=True):
        if text:
            assert TABLE_ROW.fullmatch(line) and line.endswith(repr(text)), lines
        else:
            assert re.fullmatch(r"-\s+'' {2}\(empty text\)", line), lines
    assert not any("texts:" in line for line in lines), lines


FAKE_MODEL = textwrap.dedent("""
    import sys
    import types
    import numpy as np
    from tqdm.auto import tqdm
    import lorasent.modeling, lorasent.tools.predict
    from lorasent.cli import main

    def load_trained_model(adapter_dir, base_dir, device=None, device_option=None):
        record = types.SimpleNamespace(labels=["negative", "neutral", "positive"])
        return None, None, record, None

    def score_texts(model, encoder, texts, batch_size, desc="score"):
        # scoring's own bar, on standard error, as lorasent.scoring draws it
        for _ in tqdm(range(len(texts)), desc=desc, unit="batch", disable=False):
            pass
        return np.log(np.tile([0.2, 0.3, 0.5], (len(texts), 1)))

    lorasent.modeling.load_trained_model = load_trained_model
    lorasent.tools.predict.score_texts = score_texts
    main(sys.argv[1:])
""")


@pytest.mark.slow
def test_predict_table_on_a_terminal_is_not_drawn_through_by_progress_bars(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "lorasent.json").write_text("{}")
    texts = ["What a great day!", "", "awful service"]
    status, lines = run_in_terminal(
        [sys.executable, "-c", FAKE_MODEL, "predict", "--adapter", "adapter", *texts],
        tmp_path, timeout=120)
    assert status == 0, lines
    check_table_on_terminal(lines, texts)


# ------------------------------------------------------------------ the model card

RECORD = AdapterRecord.model_validate({
    "mode": "generative", "labels": LABELS,
    "label2id": {label: i for i, label in enumerate(LABELS)}, "max_length": 128,
    "base_model": {"source": "packaged:gemma-3-270m", "sha256": "b" * 64}, "params": {},
    "template": "Text: {text}\nSentiment:", "label_words": [" negative", " neutral", " positive"]})
EVAL = {"accuracy": 0.7066666, "accuracy_ci95_low": 0.67, "accuracy_ci95_high": 0.7433333,
        "macro_f1": 0.6858269, "macro_f1_ci95_low": 0.6437913, "macro_f1_ci95_high": 0.7252515,
        "relative_error_reduction": 0.5356, "per_class": {
            label: {"precision": 0.7, "recall": 0.7, "f1": 0.7, "support": 200}
            for label in LABELS},
        "confusion_matrix": {actual: {predicted: 140 if actual == predicted else 30
                                      for predicted in LABELS} for actual in LABELS},
        "labels": LABELS, "test_rows": 600,
        "baseline": {"majority_class": "negative", "majority_accuracy": 0.4283333,
                     "zero_shot_accuracy": 0.3683333, "zero_shot_macro_f1": 0.3070309},
        "reference": "zero_shot", "reference_accuracy": 0.3683333,
        "relative_error_reduction_note": None, "warnings": []}


@pytest.fixture
def project(tmp_path):
    """A fake adapter (weights are any bytes) and the metrics of its evaluation."""
    adapter = tmp_path / "models" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_model.safetensors").write_bytes(b"lora weights")
    (adapter / "lorasent.json").write_text(json.dumps(dump(RECORD)))
    (tmp_path / "metrics" / "provenance").mkdir(parents=True)
    (tmp_path / "metrics" / "eval.json").write_text(json.dumps(EVAL))
    provenance = {"stage": "evaluate", "status": "ok", "test_rows": 600,
                  "inputs": {"model": "b" * 64,
                             "adapter": sha256_file(adapter / "adapter_model.safetensors")}}
    (tmp_path / "metrics" / "provenance" / "evaluate.json").write_text(json.dumps(provenance))
    return tmp_path


def test_model_card_gives_the_adapters_metrics(project):
    evaluation = adapter_evaluation(project / "models" / "adapter", RECORD,
                                    project / "metrics" / "eval.json")
    assert evaluation.metrics == EvalMetrics.model_validate(EVAL)
    card = export_readme(RECORD, "models/adapter", evaluation)
    assert "## Evaluation" in card and "600 held-out test rows" in card
    assert "| **this model** | **0.707** [0.670, 0.743] | **0.686** [0.644, 0.725] |" in card
    assert "| majority-class baseline (always `negative`) | 0.428 | – |" in card
    assert "| zero-shot base model | 0.368 | 0.307 |" in card
    assert "no evaluation of this adapter found" not in card.lower()


@pytest.mark.parametrize("change", ["other adapter", "failed run", "no provenance",
                                    "no eval.json"])
def test_model_card_gives_no_numbers_of_another_adapter(project, change):
    adapter = project / "models" / "adapter"
    provenance = project / "metrics" / "provenance" / "evaluate.json"
    if change == "other adapter":
        (adapter / "adapter_model.safetensors").write_bytes(b"retrained")
    elif change == "failed run":
        provenance.write_text(json.dumps({**json.loads(provenance.read_text()),
                                          "status": "failed"}))
    elif change == "no provenance":
        provenance.unlink()
    else:
        (project / "metrics" / "eval.json").unlink()
    evaluation = adapter_evaluation(adapter, RECORD, project / "metrics" / "eval.json")
    assert evaluation.metrics is None and evaluation.reason
    section = evaluation_section(evaluation)
    assert section.startswith("## Evaluation\n\nNo evaluation of this adapter found")
    assert "0.707" not in section


def test_export_readme_snippet_reads_its_own_folder(project):
    card = export_readme(RECORD, project / "models" / "adapter")
    found = re.search(r"```python\n(.*?)```", card, re.S)
    assert found is not None
    snippet = found.group(1)
    assert 'path = "."' in snippet and str(project) not in snippet
