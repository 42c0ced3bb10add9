"""The baseline stage on the tiny random Gemma (fast tier): majority class, zero-shot and
calibrated zero-shot, each number recomputed here from the scores; seq_cls has neither
zero-shot baseline.

The numbers of a random model mean nothing; what is checked is what baseline.json and
the predictions files hold, key by key and byte by byte.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from lorasent.atomic import atomic_write_text, jsonl_text
from lorasent.metrics import classification_metrics, predictions_csv, read_predictions
from lorasent.modeling import load_model_and_prompt
from lorasent.modes import MODES
from lorasent.params import Params, parse_params
from lorasent.scoring import (
    CALIBRATION_METHOD,
    content_free_prior,
    contextual_calibration,
    score_texts,
)
from lorasent.stages.baseline import run_baseline
from lorasent.stages.split import row_id
from lorasent.statistics import METHOD, intervals
from test_train_recipe import LABELS, PARAMS, ROWS

# train: negative the most frequent class (3 of 6); test: the eight rows of the recipe
TRAIN = ROWS[2:]
TEST = ROWS
ZERO_SHOT_KEYS = ["accuracy", "macro_f1", "per_class", "confusion_matrix",
                  "accuracy_ci95_low", "accuracy_ci95_high", "macro_f1_ci95_low",
                  "macro_f1_ci95_high"]


@pytest.fixture(scope="module")
def split_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("baseline-split")
    for name, part in (("train", TRAIN), ("test", TEST)):
        rows = [{"id": row_id(text), "text": text, "label": LABELS[i], "label_id": i}
                for text, i in part]
        atomic_write_text(folder / f"{name}.jsonl", jsonl_text(rows))
    return folder


def _params(mode: str) -> Params:
    return parse_params({**PARAMS, "train": {**PARAMS["train"], "mode": mode}})


def _run(folder: Path, mode: str, tiny_base: Path, split_dir: Path):
    params = _params(mode)
    result = run_baseline(base=params.base, prompt=params.prompt, batch_size=3,
                          params_record=params.model_dump(mode="json"), mode=mode,
                          model_dir=tiny_base, split_dir=split_dir,
                          metrics_path=folder / "baseline.json",
                          predictions_path=folder / "baseline_predictions.csv",
                          calibrated_predictions_path=folder / "calibrated.csv",
                          confusion_path=folder / "baseline_confusion.json",
                          provenance_dir=folder / "provenance")
    report = json.loads((folder / "baseline.json").read_text(encoding="utf-8"))
    return result, report


def test_generative_baseline_writes_the_calibrated_zero_shot(tmp_path, tiny_base, split_dir):
    result, report = _run(tmp_path, "generative", tiny_base, split_dir)
    assert list(report) == ["majority_class", "majority_accuracy", "zero_shot",
                            "zero_shot_calibrated", "references", "reference_notes",
                            "intervals"]
    assert report["majority_class"] == "negative" and report["majority_accuracy"] == 3 / 8
    assert report["intervals"] == METHOD

    # recomputed here: the scores, the prior, the metrics and their intervals
    params = _params("generative")
    model, encoder, _ = load_model_and_prompt(tiny_base, base=params.base,
                                              prompt=params.prompt)
    texts, y = [t for t, _ in TEST], [i for _, i in TEST]
    ids = [row_id(t) for t in texts]
    scores = score_texts(model, encoder, texts, batch_size=3)
    prior = content_free_prior(model, encoder)
    calibrated = contextual_calibration(scores, prior)

    zero_shot = report["zero_shot"]   # as before calibration came in
    assert list(zero_shot) == ZERO_SHOT_KEYS
    assert zero_shot == json.loads(json.dumps({
        **classification_metrics(y, scores.argmax(1), LABELS),
        **intervals(y, scores.argmax(1), 3)}))

    cal = report["zero_shot_calibrated"]
    assert list(cal) == [*ZERO_SHOT_KEYS, "content_free_inputs", "content_free_prior",
                         "method"]
    assert cal["content_free_inputs"] == ["N/A", "", "[MASK]"]
    assert cal["content_free_prior"] == dict(zip(LABELS, prior.tolist(), strict=True))
    assert sum(cal["content_free_prior"].values()) == pytest.approx(1.0, abs=1e-12)
    assert cal["method"] == CALIBRATION_METHOD and "Zhao et al. 2021" in cal["method"]
    predicted = calibrated.argmax(1)
    assert {k: cal[k] for k in ZERO_SHOT_KEYS} == json.loads(json.dumps({
        **classification_metrics(y, predicted, LABELS), **intervals(y, predicted, 3)}))
    for key in ("accuracy", "macro_f1"):
        assert cal[f"{key}_ci95_low"] <= cal[key] <= cal[f"{key}_ci95_high"]
    assert result.zero_shot_accuracy == zero_shot["accuracy"]
    assert result.zero_shot_calibrated_accuracy == cal["accuracy"]

    # the predictions files: the same ids in the same order, evaluate can pair them
    plain = (tmp_path / "baseline_predictions.csv").read_text(encoding="utf-8")
    written = (tmp_path / "calibrated.csv").read_text(encoding="utf-8")
    assert plain == predictions_csv(ids, y, scores, LABELS)
    assert written == predictions_csv(ids, y, calibrated, LABELS)
    read = read_predictions(written, "calibrated.csv")
    assert read.ids == ids == read_predictions(plain, "plain").ids
    assert read.predicted.tolist() == predicted.tolist()
    np.testing.assert_allclose(read.probabilities, np.exp(calibrated) / np.exp(
        calibrated).sum(1, keepdims=True), rtol=0, atol=5e-7)   # 6 decimals in the file


def test_seq_cls_baseline_has_no_calibrated_zero_shot(tmp_path, tiny_base, split_dir):
    result, report = _run(tmp_path, "seq_cls", tiny_base, split_dir)
    note = MODES["seq_cls"].no_zero_shot_note
    assert note
    # in every mode (no LM is needed); this training split has one positive row
    assert report.pop("references") == {"tfidf_lr": None, "encoder": None, "encoder_ft": None}
    assert set(report.pop("reference_notes")) == {"tfidf_lr", "encoder", "encoder_ft"}
    assert report.pop("intervals") == METHOD
    assert report == {"majority_class": "negative", "majority_accuracy": 3 / 8,
                      "zero_shot": None, "zero_shot_note": note,
                      "zero_shot_calibrated": None, "zero_shot_calibrated_note": note}
    assert result.zero_shot_accuracy is None and result.zero_shot_calibrated_accuracy is None
    # both predictions files: the majority class, byte for byte the same
    written = (tmp_path / "calibrated.csv").read_text(encoding="utf-8")
    assert written == (tmp_path / "baseline_predictions.csv").read_text(encoding="utf-8")
    read = read_predictions(written, "calibrated.csv")
    assert read.ids == [row_id(t) for t, _ in TEST]
    assert read.predicted.tolist() == [0] * len(TEST)
