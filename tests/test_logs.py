"""Output to a file or a pipe (CI, `dvc repro > log`): plain lines, no progress bars.

A bar redraws itself with carriage returns; in a log file every redraw is one more line.
Off a terminal the stages draw none (transformers' model loading and Trainer, the
scoring loop), and Trainer's log dicts still come out as plain lines.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers.utils import logging as hf_logging

from conftest import LABELS, REPO, train_in
from lorasent.atomic import jsonl_text, read_jsonl
from lorasent.scoring import score_texts
from tiny_repo import env, set_params

LORASENT = str(Path(sys.executable).parent / "lorasent")


class _Encoder:
    """Scores every text 0 for each of two classes; enough to drive the scoring loop."""

    num_labels = 2

    def encode(self, text):
        return list(text)

    def score(self, model, batch):
        return torch.zeros(len(batch), self.num_labels)


def test_scoring_draws_no_bar_off_a_terminal(capfd):
    # stand-ins: the scoring loop only calls the encoder's encode and score
    scores = score_texts(None, _Encoder(),  # type: ignore[arg-type]
                         [f"text {i}" for i in range(40)], batch_size=4)
    assert scores.shape == (40, 2)
    err = capfd.readouterr().err
    assert "\r" not in err and "%|" not in err  # pytest's capture is no terminal


@pytest.mark.integration
def test_trainer_logs_plain_lines_when_the_bars_are_off(tmp_path, capfd, minilm_params,
                                                          minilm_dir, split_dir):
    """As `lorasent train` runs off a terminal (lorasent.cli turns transformers' bars off):
    Trainer prints each log dict on a line of its own, and redraws no bar."""
    hf_logging.disable_progress_bar()
    try:
        result = train_in(tmp_path, minilm_params(), minilm_dir, split_dir)
    finally:
        hf_logging.enable_progress_bar()
    out = capfd.readouterr()
    assert result.steps == 2
    assert "\r" not in out.out + out.err and "%|" not in out.out + out.err
    assert [line for line in out.out.splitlines() if line.startswith("{'loss': ")] != []
    # what dvclive records of Trainer's arguments does not depend on the terminal
    assert "disable_tqdm: false" in (tmp_path / "live" / "params.yaml").read_text("utf-8")


@pytest.mark.slow
def test_stages_piped_to_a_log_write_no_carriage_returns(tmp_path, minilm_dir, split_dir):
    """MiniLM on the eight fixture tweets: baseline, train (2 steps) and evaluate, each with
    stdout and stderr piped, as `dvc repro > log` runs them."""
    shutil.copy2(REPO / "params.yaml", tmp_path / "params.yaml")
    set_params(tmp_path, {"base": {"model": "packaged:minilm-l6", "labels": LABELS},
                          "prompt": {"max_length": 32},
                          "train": {"mode": "seq_cls", "max_steps": 2, "logging_steps": 1,
                                    "per_device_train_batch_size": 4,
                                    "lora": {"target_modules": ["query", "value"]}},
                          "evaluate": {"batch_size": 4, "reference": "majority"}})
    shutil.copytree(minilm_dir, tmp_path / "models" / "base")
    (tmp_path / "data" / "split").mkdir(parents=True)
    for part in split_dir.glob("*.jsonl"):  # with the ids the split stage gives each row
        rows = [dict(row, id=f"{i:016x}") for i, row in enumerate(read_jsonl(part))]
        (tmp_path / "data" / "split" / part.name).write_text(jsonl_text(rows), "utf-8")
    logs = {}
    for stage in ("baseline", "train", "evaluate"):
        # bytes: text mode would turn each carriage return into a newline
        done = subprocess.run([LORASENT, stage], cwd=tmp_path, env=env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        logs[stage] = done.stdout.decode("utf-8")
        assert done.returncode == 0, f"lorasent {stage} failed:\n{logs[stage]}"
    for stage, log in logs.items():
        assert "\r" not in log and "%|" not in log, (
            f"lorasent {stage} drew a progress bar into a pipe:\n{log!r}")
    # Trainer's log dicts, one plain line per logged step, then the summary
    assert logs["train"].count("{'loss': ") == 2 and "trained 2 steps" in logs["train"]
    assert "accuracy " in logs["evaluate"]
