"""Temperature scaling (issue 30, item 2): fitted on the validation split by the train
stage, written to ``calibration.json`` beside the adapter, used by ``lorasent predict``
(with ``--min-confidence``) and carried by ``lorasent export`` (fast tier: the tiny random
Gemma, about a second per training); and the metrics of the same validation scores,
``metrics/validation.json`` (issue 69).
"""

import csv
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import train_in
from lorasent import environment
from lorasent.atomic import atomic_write_text, jsonl_text, read_json, read_jsonl
from lorasent.calibration import (
    CONFIDENCE_GRID,
    NO_VALIDATION_NOTE,
    apply_temperature,
    brier,
    ece,
    fit_temperature,
    nll,
    temperature_scaling,
)
from lorasent.cli import main
from lorasent.contracts import (
    TEMPERATURE_MAX,
    TEMPERATURE_MIN,
    TemperatureScaling,
    ValidationMetrics,
    dump,
    read_temperature_scaling,
)
from lorasent.errors import LorasentError
from lorasent.hashes import sha256_file
from lorasent.metrics import probabilities
from lorasent.modeling import load_trained_model
from lorasent.params import parse_params
from lorasent.scoring import score_texts
from lorasent.stages.train import (
    NO_VALIDATION_METRICS_NOTE,
    ONE_VALIDATION_ROW,
    VALIDATION_SCORES_ARE,
    validation_metrics,
)
from lorasent.statistics import interval_method, intervals
from lorasent.tools.predict import NotFiniteError, predict, restore_adapter, written_by_predict
from test_contracts import round_trip
from test_train_recipe import LABELS, PARAMS, ROWS, SEQ_CLS

RAW = {**PARAMS, "train": {**PARAMS["train"], "max_steps": 2, "eval_strategy": "no",
                           "save_steps": 0}}
BATCH = RAW["train"]["per_device_train_batch_size"]  # the train stage scores validation so
TEXTS = ["I love this phone", "worst day ever", "the store opens at 9", "so happy with it",
         "great service, thank you", "this is broken and useless"]


def _split(folder: Path, validation: bool) -> Path:
    rows = [{"text": text, "label": LABELS[i], "label_id": i} for text, i in ROWS]
    for name, part in (("train", rows), ("validation", rows if validation else []),
                       ("test", rows)):
        atomic_write_text(folder / f"{name}.jsonl", jsonl_text(part))
    return folder


@pytest.fixture(scope="module")
def run(tiny_base, tmp_path_factory) -> Path:
    """A training whose validation split holds the 8 rows: its folder (``adapter/``,
    ``provenance/``, ``split/``)."""
    folder = tmp_path_factory.mktemp("calibrated")
    split = _split(folder / "split", validation=True)
    train_in(folder, parse_params(RAW), tiny_base, split)
    return folder


@pytest.fixture(scope="module")
def validation_scores(run, tiny_base) -> tuple[np.ndarray, np.ndarray]:
    """The validation rows scored again, by the saved adapter loaded as evaluate loads it,
    in batches of the train stage's size: ``(scores (N, K) float32, y (N,))``."""
    model, encoder, _, _ = load_trained_model(run / "adapter", tiny_base)
    rows = [json.loads(line) for line in (run / "split" / "validation.jsonl").read_text(
        encoding="utf-8").splitlines()]
    scores = score_texts(model, encoder, [r["text"] for r in rows], BATCH)
    return scores, np.array([r["label_id"] for r in rows])


@pytest.fixture(scope="module")
def raw_scores(run, tiny_base) -> np.ndarray:
    """:data:`TEXTS` scored by the adapter in predict's batches (``--batch-size 16``)."""
    model, encoder, _, _ = load_trained_model(run / "adapter", tiny_base)
    return score_texts(model, encoder, TEXTS, 16)


def _calibration(folder: Path) -> dict[str, Any]:
    return read_json(folder / "adapter" / "calibration.json")


# ------------------------------------------------------------------------------ train


def test_calibration_json_holds_the_temperature_fitted_on_the_validation_scores(
        run, validation_scores):
    scores, y = validation_scores
    found = _calibration(run)
    temperature = fit_temperature(scores, y)
    assert found["temperature"] == temperature and temperature > 0
    before, after = probabilities(scores), apply_temperature(scores, temperature)
    assert list(found) == ["method", "fitted_on", "validation_rows", "temperature", "note",
                           "ece_bins", "nll_before", "nll_after", "ece_before", "ece_after",
                           "brier_before", "brier_after", "risk_coverage"]
    assert "Guo et al. 2017" in found["method"] and "scikit-learn" in found["method"]
    assert {k: found[k] for k in ("fitted_on", "validation_rows", "note", "ece_bins")} == {
        "fitted_on": "validation", "validation_rows": 8, "note": None, "ece_bins": 15}
    assert (found["nll_before"], found["nll_after"]) == (nll(y, before), nll(y, after))
    assert (found["ece_before"], found["ece_after"]) == (ece(y, before, bins=15),
                                                          ece(y, after, bins=15))
    assert (found["brier_before"], found["brier_after"]) == (brier(y, before), brier(y, after))
    # the risk-coverage by hand: a row is kept when its top scaled probability >= threshold
    top, right = after.max(1), after.argmax(1) == y
    expected = []
    for k in range(20):
        kept = top >= k / 20
        expected.append({"min_confidence": round(k * 0.05, 2), "coverage": kept.mean(),
                         "accuracy": right[kept].mean() if kept.any() else None,
                         "rows": int(kept.sum())})
    assert [p["min_confidence"] for p in found["risk_coverage"]] == list(CONFIDENCE_GRID) == [
        0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7,
        0.75, 0.8, 0.85, 0.9, 0.95]
    for point, want in zip(found["risk_coverage"], expected, strict=True):
        assert (point["rows"], point["accuracy"] is None) == (want["rows"],
                                                              want["accuracy"] is None)
        assert point == {**want, "coverage": pytest.approx(want["coverage"], abs=1e-15),
                         "accuracy": want["accuracy"] if want["accuracy"] is None
                         else pytest.approx(want["accuracy"], abs=1e-15)}
    # the contract's own bytes, read back by the reader evaluate and predict use
    text = (run / "adapter" / "calibration.json").read_text(encoding="utf-8")
    assert round_trip(text, TemperatureScaling) == text
    assert read_temperature_scaling(run / "adapter") == TemperatureScaling.model_validate(found)
    provenance = read_json(run / "provenance" / "train.json")
    assert provenance["temperature"] == temperature
    assert provenance["inputs"]["validation.jsonl"] == sha256_file(
        run / "split" / "validation.jsonl")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("mode", ["generative", "seq_cls"])
def test_the_temperature_is_fitted_on_the_scores_evaluate_and_predict_give(
        tiny_base, tmp_path, monkeypatch, mode, precision):
    """Issue 70: after a bf16 training on a CPU the validation split was scored under the
    training's autocast, so the temperature and calibration.json's numbers described bf16
    scores that evaluate and predict (fp32) never give (its NLL after scaling 6e-3 from
    predict's on the same rows). Trained one step in each precision and mode (on a CPU
    made to list avx512_bf16): the scores the temperature is fitted on are, bit for bit,
    those of evaluate's model (base + the saved adapter, loaded as evaluate loads it) on
    the same rows in the same batches; calibration.json is their record; and predict's
    probabilities, in its own batches of 16, give its NLL after scaling to 1e-6."""
    monkeypatch.setattr(environment, "cpu_bf16_flags", lambda *a: ["avx512_bf16"])
    fitted: list[np.ndarray] = []

    def fit(scores: np.ndarray, y: Any) -> TemperatureScaling:
        fitted.append(np.array(scores, copy=True))
        return temperature_scaling(scores, y)

    monkeypatch.setattr("lorasent.stages.train.temperature_scaling", fit)
    split = _split(tmp_path / "split", validation=True)
    train = {**RAW["train"], **(SEQ_CLS if mode == "seq_cls" else {}), "max_steps": 1,
             "warmup_ratio": 0.0}  # no warmup: the one step moves the adapter
    params = parse_params({**RAW, "base": {**RAW["base"], "precision": precision},
                           "train": train})
    train_in(tmp_path, params, tiny_base, split)
    assert read_json(tmp_path / "provenance" / "train.json")["compute_dtype"] == precision
    rows = read_jsonl(split / "validation.jsonl")
    texts, y = [r["text"] for r in rows], [r["label_id"] for r in rows]
    model, encoder, _, _ = load_trained_model(tmp_path / "adapter", tiny_base)
    assert any(p.abs().sum() > 0 for name, p in model.named_parameters() if "lora_B" in name)
    scores = score_texts(model, encoder, texts, params.train.per_device_train_batch_size)
    assert len(fitted) == 1
    np.testing.assert_array_equal(fitted[0], scores)
    found = _calibration(tmp_path)
    assert found == dump(temperature_scaling(scores, y))
    temperature = found["temperature"]
    assert temperature is not None
    assert found["nll_after"] == nll(y, apply_temperature(scores, temperature))
    predicted = predict(model, encoder, LABELS, texts, 16, temperature=temperature)
    probs = np.array([[p.probabilities[label] for label in LABELS]  # type: ignore[index]
                      for p in predicted])
    assert nll(y, probs) == pytest.approx(found["nll_after"], abs=1e-6)


def _expected_metrics(scores: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """metrics/validation.json's numbers for ``scores``' argmax, counted here by hand."""
    predicted = scores.argmax(1)
    k = len(LABELS)
    matrix = [[int(np.sum((y == a) & (predicted == p))) for p in range(k)] for a in range(k)]
    per_class = {}
    for i, label in enumerate(LABELS):
        hit = matrix[i][i]
        said, actual = sum(matrix[a][i] for a in range(k)), sum(matrix[i])
        precision = hit / said if said else 0.0
        recall = hit / actual if actual else 0.0
        f1 = 2 * hit / (said + actual) if said + actual else 0.0
        per_class[label] = {"precision": precision, "recall": recall, "f1": f1,
                            "support": actual}
    return {"accuracy": float(np.mean(predicted == y)),
            "macro_f1": float(np.mean([c["f1"] for c in per_class.values()])),
            "per_class": per_class,
            "confusion_matrix": {a: dict(zip(LABELS, row, strict=True))
                                 for a, row in zip(LABELS, matrix, strict=True)}}


def test_validation_json_measures_the_scores_the_temperature_is_fitted_on(
        run, validation_scores):
    """Issue 69: every run records its validation split's accuracy and macro-F1 with
    intervals, from the scores calibration.json's temperature is fitted on (the same
    scores, bit for bit, as the saved adapter gives: the test above)."""
    scores, y = validation_scores
    text = (run / "validation.json").read_text(encoding="utf-8")
    found = json.loads(text)
    assert list(found) == ["accuracy", "accuracy_ci95_low", "accuracy_ci95_high", "macro_f1",
                           "macro_f1_ci95_low", "macro_f1_ci95_high", "per_class",
                           "confusion_matrix", "labels", "validation_rows", "intervals",
                           "scores_are", "note"]
    expected = _expected_metrics(scores, y)
    assert found["accuracy"] == expected["accuracy"]
    assert found["macro_f1"] == pytest.approx(expected["macro_f1"], abs=1e-15)
    assert found["confusion_matrix"] == expected["confusion_matrix"]
    assert found["per_class"] == {label: {**c, "precision": pytest.approx(c["precision"]),
                                          "recall": pytest.approx(c["recall"]),
                                          "f1": pytest.approx(c["f1"])}
                                  for label, c in expected["per_class"].items()}
    assert found["validation_rows"] == 8 == len(read_jsonl(run / "split" / "validation.jsonl"))
    assert found["validation_rows"] == _calibration(run)["validation_rows"]
    assert {k: v for k, v in found.items() if "_ci95_" in k} == intervals(
        y, scores.argmax(1), len(LABELS))
    assert found["accuracy_ci95_low"] <= found["accuracy"] <= found["accuracy_ci95_high"]
    assert found["intervals"] == interval_method(8, over="validation rows")
    assert found["intervals"]["method"].startswith("percentile bootstrap over validation rows")
    assert (found["labels"], found["scores_are"], found["note"]) == (
        LABELS, VALIDATION_SCORES_ARE, None)
    assert found == dump(validation_metrics(scores, y, LABELS))
    assert round_trip(text, ValidationMetrics) == text  # strict JSON, the contract's bytes


def test_no_validation_rows_write_the_same_shape_and_the_same_adapter(run, tiny_base, tmp_path):
    """Without validation rows: no temperature, the note, the same keys; and the adapter's
    bytes are those of the run that scored 8 validation rows after training. Its
    validation.json is still written (DVC's output), every metric None."""
    split = _split(tmp_path / "split", validation=False)
    train_in(tmp_path, parse_params(RAW), tiny_base, split)
    text = (tmp_path / "validation.json").read_text(encoding="utf-8")
    assert json.loads(text) == {
        "accuracy": None, "accuracy_ci95_low": None, "accuracy_ci95_high": None,
        "macro_f1": None, "macro_f1_ci95_low": None, "macro_f1_ci95_high": None,
        "per_class": None, "confusion_matrix": None, "labels": LABELS, "validation_rows": 0,
        "intervals": None, "scores_are": None, "note": NO_VALIDATION_METRICS_NOTE}
    assert list(json.loads(text)) == list(json.loads((run / "validation.json").read_text(
        encoding="utf-8")))
    assert round_trip(text, ValidationMetrics) == text
    assert NO_VALIDATION_METRICS_NOTE == ("no validation split (split.validation_size: 0): "
                                          "nothing to choose on")
    found = _calibration(tmp_path)
    assert found == {**{k: v for k, v in _calibration(run).items()
                        if k in ("method", "fitted_on", "ece_bins")},
                     "validation_rows": 0, "temperature": None, "note": NO_VALIDATION_NOTE,
                     "nll_before": None, "nll_after": None, "ece_before": None,
                     "ece_after": None, "brier_before": None, "brier_after": None,
                     "risk_coverage": []}
    assert list(found) == list(_calibration(run))
    assert NO_VALIDATION_NOTE == ("no validation split (split.validation_size: 0): "
                                  "temperature scaling not fitted; predict uses the raw "
                                  "probabilities")
    assert sorted(p.name for p in (tmp_path / "adapter").iterdir()) == sorted(
        p.name for p in (run / "adapter").iterdir())
    for name in ("adapter_model.safetensors", "adapter_config.json", "lorasent.json"):
        assert sha256_file(tmp_path / "adapter" / name) == sha256_file(
            run / "adapter" / name), name
    assert read_json(tmp_path / "provenance" / "train.json")["temperature"] is None


@pytest.mark.parametrize("rows", [1, 2, 3, 7, 40])
@pytest.mark.parametrize("k", [2, 3, 5])
def test_validation_metrics_of_any_size_are_the_argmax_counted_by_hand(rows, k):
    """Generated validation splits of many sizes and class counts: the metrics are the
    argmax's; one row gives them without intervals (a bootstrap over one row has no
    spread), its note saying so; more give the bootstrap's."""
    rng = np.random.default_rng(rows * 10 + k)
    scores, y = rng.normal(size=(rows, k)), rng.integers(0, k, size=rows)
    labels = [f"class {i}" for i in range(k)]
    found = dump(validation_metrics(scores, y, labels))
    predicted = scores.argmax(1)
    assert found["accuracy"] == float(np.mean(predicted == y))
    assert found["validation_rows"] == rows == sum(
        c["support"] for c in found["per_class"].values())
    assert found["confusion_matrix"] == {
        labels[a]: {labels[p]: int(np.sum((y == a) & (predicted == p))) for p in range(k)}
        for a in range(k)}
    bounds = {key: found[key] for key in found if "_ci95_" in key}
    if rows == 1:
        assert bounds == dict.fromkeys(bounds) and len(bounds) == 4
        assert (found["intervals"], found["note"]) == (None, ONE_VALIDATION_ROW)
    else:
        assert bounds == intervals(y, predicted, k)
        assert (found["intervals"], found["note"]) == (
            interval_method(rows, over="validation rows"), None)
    assert found["scores_are"] == VALIDATION_SCORES_ARE
    assert ValidationMetrics.model_validate(found) == validation_metrics(scores, y, labels)


def test_validation_rows_of_one_class_give_no_temperature_but_the_raw_metrics():
    """fit_temperature refuses rows of one class; training goes on, the record says why
    and gives the raw softmax's metrics, by hand: rows (0.7, 0.2, 0.1) and (0.6, 0.3,
    0.1), both of class 0 (right, confidences 0.7 and 0.6)."""
    probs = np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1]])
    found = temperature_scaling(np.log(probs), [0, 0])
    assert found.temperature is None and found.validation_rows == 2
    assert found.note is not None and found.note.startswith(
        "temperature scaling not fitted (temperature scaling needs at least 2 rows of at "
        "least 2 classes")
    assert found.note.endswith("); predict uses the raw probabilities")
    assert found.nll_before == pytest.approx(-(np.log(0.7) + np.log(0.6)) / 2, abs=1e-12)
    assert found.brier_before == pytest.approx(((0.09 + 0.04 + 0.01) + (0.16 + 0.09 + 0.01))
                                               / 2, abs=1e-12)
    assert found.ece_before == pytest.approx((0.3 + 0.4) / 2, abs=1e-12)
    assert (found.nll_after, found.ece_after, found.brier_after, found.risk_coverage) == (
        None, None, None, [])
    assert list(dump(found)) == list(TemperatureScaling.model_fields)  # every key written


def test_an_adapter_without_calibration_json_reads_as_none(tmp_path):
    assert read_temperature_scaling(tmp_path) is None
    (tmp_path / "calibration.json").write_text('{"temperature": 1.5}', encoding="utf-8")
    with pytest.raises(LorasentError, match=r"calibration.json: not the TemperatureScaling "
                                           r"lorasent writes: method: field required"):
        read_temperature_scaling(tmp_path)


def _record_with(value: str) -> str:
    """A calibration.json whose ``temperature`` is ``value``, as the file spells it."""
    record = dump(TemperatureScaling(
        method="m", fitted_on="validation", validation_rows=8, temperature=1.5, note=None,
        ece_bins=10, nll_before=1.0, nll_after=0.9, ece_before=0.1, ece_after=0.05,
        brier_before=0.5, brier_after=0.4, risk_coverage=[]))
    return json.dumps(record).replace('"temperature": 1.5', f'"temperature": {value}')


RANGE = "outside [0.05, 20], the range of a temperature fitted on real validation rows (near 1)"


@pytest.mark.parametrize(("value", "why"), [
    ("0", f"0.0 is {RANGE}"), ("-1.5", f"-1.5 is {RANGE}"),
    ("NaN", "input should be a finite number"), ("Infinity", "input should be a finite number"),
    # issue 51: positive and finite, but every probability NaN (5e-324) or all but uniform
    ("5e-324", f"5e-324 is {RANGE}"), ("1e308", f"1e+308 is {RANGE}"),
    ("0.0499", f"0.0499 is {RANGE}"), ("20.001", f"20.001 is {RANGE}"),
    # not JSON numbers: pydantic's lax mode took them as 1.0 and 1.5
    ("true", "input should be a valid number"), ('"1.5"', "input should be a valid number")])
def test_a_temperature_outside_the_sane_range_or_not_a_number_is_refused_when_read(
        tmp_path, value, why):
    (tmp_path / "calibration.json").write_text(_record_with(value), encoding="utf-8")
    with pytest.raises(LorasentError) as err:
        read_temperature_scaling(tmp_path)
    assert str(err.value) == (
        f"{tmp_path / 'calibration.json'}: not the TemperatureScaling lorasent writes: "
        f"temperature: {why}; retrain the adapter (dvc repro) to write it "
        "again, or delete it to use the raw probabilities")


@pytest.mark.parametrize(("value", "expected"), [("0.05", 0.05), ("20", 20.0), ("1", 1.0),
                                                 ("1.734", 1.734), ("null", None)])
def test_a_temperature_in_the_range_is_taken_bounds_included(tmp_path, value, expected):
    assert (TEMPERATURE_MIN, TEMPERATURE_MAX) == (0.05, 20.0)
    (tmp_path / "calibration.json").write_text(_record_with(value), encoding="utf-8")
    scaling = read_temperature_scaling(tmp_path)
    assert scaling is not None and scaling.temperature == expected


@pytest.mark.parametrize(("y", "fitted"), [([0, 1, 0], "0.01033"), ([1, 0, 1], "2.203e+04")])
def test_a_fit_outside_the_range_writes_no_temperature_but_the_raw_metrics(y, fitted, caplog):
    """Degenerate validation rows: every row right (T towards 0) or wrong (T towards
    infinity) by a margin of 0.5. The train stage writes what the reader takes: no
    temperature, a note with the fitted T, the raw softmax's metrics."""
    scores = np.array([[0.0, -0.5], [-0.5, 0.0], [0.0, -0.5]])
    assert f"{fit_temperature(scores, y):.4g}" == fitted
    found = temperature_scaling(scores, y)
    note = (f"fitted T = {fitted} is outside [0.05, 20] (degenerate validation rows): not "
            "kept; predict uses the raw probabilities")
    assert (found.temperature, found.note, found.validation_rows) == (None, note, 3)
    assert len(f"  {'after temperature':<26}none: {note}") < 160   # lorasent metrics' row
    before = probabilities(scores)
    assert (found.nll_before, found.brier_before) == (nll(y, before), brier(y, before))
    assert (found.nll_after, found.ece_after, found.risk_coverage) == (None, None, [])
    assert [r.getMessage() for r in caplog.records] == [
        f"train: {note}: every validation row right, or every one wrong, by a wide margin "
        "drives the fit to scikit-learn's bounds; a larger validation split gives a usable T"]
    # what train writes reads back
    assert TemperatureScaling.model_validate(dump(found)) == found


# ---------------------------------------------------------------------------- predict


def _predict(run: Path, tiny_base: Path, out: Path, *args: str, adapter: Path | None = None):
    source = out.parent / "texts.txt"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return CliRunner().invoke(main, ["predict", "--adapter", str(adapter or run / "adapter"),
                                     "--base", str(tiny_base), "--input", str(source),
                                     "--output", str(out), *args])


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_predict_divides_the_scores_by_the_stored_temperature(run, tiny_base, raw_scores, tmp_path):
    out = tmp_path / "out.jsonl"
    result = _predict(run, tiny_base, out)
    assert result.exit_code == 0, result.output
    temperature = _calibration(run)["temperature"]
    expected = apply_temperature(raw_scores, temperature)
    rows = _jsonl(out)
    got = np.array([[r["probabilities"][label] for label in LABELS] for r in rows])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert [r["label"] for r in rows] == [LABELS[i] for i in raw_scores.argmax(1)]
    assert all("abstained" not in r for r in rows)  # only with --min-confidence
    assert result.stderr.count("probabilities:") == 1
    assert (f"probabilities: temperature-scaled, softmax(scores / {temperature:.4g}), the "
            f"temperature fitted on 8 validation rows ({run / 'adapter' / 'calibration.json'})"
            in result.stderr)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_min_confidence_abstains_on_exactly_the_rows_below_it(run, tiny_base, raw_scores, tmp_path,
                                                              fmt):
    scaling = read_temperature_scaling(run / "adapter")
    assert scaling is not None and scaling.temperature is not None
    top = apply_temperature(raw_scores, scaling.temperature).max(1)
    threshold = float(np.sort(top)[len(top) // 2])  # half the rows below it, half kept
    below = top < threshold
    assert below.any() and not below.all()
    out = tmp_path / f"out.{fmt}"
    result = _predict(run, tiny_base, out, "--min-confidence", repr(threshold))
    assert result.exit_code == 0, result.output
    labels = [LABELS[i] for i in raw_scores.argmax(1)]
    if fmt == "jsonl":
        rows = _jsonl(out)
        assert list(rows[0]) == ["text", "label", "probabilities", "note", "abstained"]
        assert [r["abstained"] for r in rows] == below.tolist()
        assert [r["label"] for r in rows] == [None if b else label
                                              for b, label in zip(below, labels, strict=True)]
    else:
        with open(out, encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert list(rows[0]) == ["text", "label", *(f"p_{x}" for x in LABELS), "note",
                                 "abstained"]
        assert [r["abstained"] for r in rows] == ["true" if b else "false" for b in below]
        assert [r["label"] for r in rows] == ["" if b else label
                                              for b, label in zip(below, labels, strict=True)]
        frame = pd.read_csv(out)
        assert frame["abstained"].dtype == bool and frame["abstained"].tolist() == below.tolist()
        assert frame["label"].isna().tolist() == below.tolist()
        assert frame["text"].tolist() == TEXTS
    assert written_by_predict(out)
    # the summary: the abstentions, then the validation risk-coverage's grid point at or
    # below the threshold
    point = max((p for p in scaling.risk_coverage if p.min_confidence <= threshold),
                key=lambda p: p.min_confidence)
    n = int(below.sum())
    accuracy = ("no accuracy: no row kept" if point.accuracy is None
                else f"accuracy {point.accuracy:.3f} on them")
    line = (f"--min-confidence {threshold:g}: abstained on {n} of 6 scored texts ({n / 6:.1%}); "
            f"on the validation split at {point.min_confidence:.2f}, the grid's threshold at or "
            f"below {threshold:g}, {point.rows} of 8 rows ({point.coverage:.1%}) were kept, "
            f"{accuracy} (at most as many at {threshold:g})")
    assert result.stderr.splitlines()[-1] == line
    # predict's own output is replaced by the next run without --force; 1 is off the
    # grid, so its validation estimate is the grid's last point, 0.95
    again = _predict(run, tiny_base, out, "--min-confidence", "1")
    assert again.exit_code == 0, again.output
    assert again.stderr.splitlines()[-1].startswith(
        "--min-confidence 1: abstained on 6 of 6 scored texts (100.0%); on the validation "
        f"split at 0.95, the grid's threshold at or below 1, {scaling.risk_coverage[-1].rows} "
        "of 8 rows")


def test_an_adapter_without_calibration_json_predicts_raw_probabilities(run, tiny_base, raw_scores,
                                                                       tmp_path):
    old = tmp_path / "old-adapter"
    shutil.copytree(run / "adapter", old)
    (old / "calibration.json").unlink()
    out = tmp_path / "out.jsonl"
    result = _predict(run, tiny_base, out, "--min-confidence", "0.5", adapter=old)
    assert result.exit_code == 0, result.output
    rows = _jsonl(out)
    expected = probabilities(raw_scores)
    got = np.array([[r["probabilities"][label] for label in LABELS] for r in rows])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    below = expected.max(1) < 0.5
    assert [r["abstained"] for r in rows] == below.tolist()
    notes = [line for line in result.stderr.splitlines() if line.startswith("probabilities:")]
    assert notes == [f"probabilities: the raw softmax of the scores, not temperature-scaled: "
                     f"{old / 'calibration.json'} not found (an adapter trained before the "
                     "train stage fitted a temperature; retrain to get one)"]
    assert result.stderr.splitlines()[-1] == (
        f"--min-confidence 0.5: abstained on {int(below.sum())} of 6 scored texts "
        f"({below.mean():.1%}); no validation estimate ({old / 'calibration.json'} not found)")


def test_predict_refuses_a_tiny_temperature_before_loading_the_model(run, tiny_base, tmp_path,
                                                                    monkeypatch):
    """Issue 51: 5e-324 made every probability NaN and labelled a clearly positive text
    with the first class, rc 0."""
    bad = tmp_path / "adapter"
    shutil.copytree(run / "adapter", bad)
    (bad / "calibration.json").write_text(
        (run / "adapter" / "calibration.json").read_text(encoding="utf-8").replace(
            f'"temperature": {_calibration(run)["temperature"]!r}', '"temperature": 5e-324'),
        encoding="utf-8")
    monkeypatch.setattr("lorasent.modeling.load_trained_model", _no_model)
    out = tmp_path / "out.jsonl"
    result = _predict(run, tiny_base, out, adapter=bad)
    assert result.exit_code == 1
    assert result.stderr == (
        f"lorasent predict: error: {bad / 'calibration.json'}: not the TemperatureScaling "
        f"lorasent writes: temperature: 5e-324 is {RANGE}; retrain the adapter (dvc repro) "
        "to write it again, or delete it to use the raw probabilities\n")
    assert not out.exists()


def _no_model(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("the model was loaded")


@pytest.mark.parametrize(("fmt", "temperature"), [("jsonl", None), ("csv", 1.0)])
def test_predict_stops_on_scores_that_are_not_finite_and_writes_nothing(
        run, tiny_base, tmp_path, monkeypatch, fmt, temperature):
    """A damaged adapter whose scores hold a NaN: one line, no output file (NaN
    probabilities were printed and the row labelled with the first class)."""
    adapter = tmp_path / "adapter"
    shutil.copytree(run / "adapter", adapter)
    if temperature is None:
        (adapter / "calibration.json").unlink()

    def scores(model, encoder, texts, batch_size, desc=None):
        z = np.zeros((len(texts), len(LABELS)), dtype=np.float32)
        z[1:3, 0] = np.nan
        return z

    monkeypatch.setattr("lorasent.tools.predict.score_texts", scores)
    out = tmp_path / f"out.{fmt}"
    result = _predict(run, tiny_base, out, adapter=adapter)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        "lorasent predict: error: the adapter gave class scores that are not finite (NaN or "
        f"infinite) for 2 of 6 texts, the first {TEXTS[1]!r}, and stopped before writing "
        f"them: its weights or its calibration.json are damaged; {restore_adapter()}")
    assert not out.exists()


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                            "ignore:invalid value encountered:RuntimeWarning")
def test_probabilities_that_are_not_finite_are_refused_whatever_the_temperature(monkeypatch):
    """predict() itself, with a temperature no calibration.json can hold: the check is on
    the probabilities, after the temperature."""
    monkeypatch.setattr("lorasent.tools.predict.score_texts",
                        lambda model, encoder, texts, batch_size, desc=None:
                        np.array([[1.0, 0.0, -1.0]] * len(texts)))
    with pytest.raises(NotFiniteError, match=r"^the adapter gave probabilities that are not "
                                            r"finite \(NaN or infinite\) for 2 of 2 texts, "
                                            r"the first 'so happy with it', "):
        predict(None, None, LABELS, ["so happy with it", "", "fine"], 16,  # type: ignore[arg-type]
                temperature=5e-324)


@pytest.mark.parametrize("value", ["0", "1.5", "-0.2"])  # nan: tests/test_cli_options.py
def test_a_min_confidence_outside_0_1_is_one_line(run, tiny_base, tmp_path, value):
    result = _predict(run, tiny_base, tmp_path / "out.csv", "--min-confidence", value)
    assert result.exit_code == 1
    assert result.stderr == (f"lorasent predict: error: --min-confidence {float(value)}: must be "
                             "a probability in (0, 1], e.g. 0.8 (a text whose top probability "
                             "is below it gets no label)\n")
    assert not (tmp_path / "out.csv").exists()


def test_the_table_marks_an_abstained_text(run, tiny_base):
    result = CliRunner().invoke(main, ["predict", "--adapter", str(run / "adapter"), "--base",
                                       str(tiny_base), "--min-confidence", "1", "so happy with it"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["label", *LABELS, "text"]
    assert re.fullmatch(r"-\s+(0\.\d{6}\s+){3}'so happy with it' {2}\(abstained\)", lines[1])


# ----------------------------------------------------------------------------- export


def test_export_carries_calibration_json_and_the_card_gives_the_temperature(
        run, tiny_base, raw_scores, tmp_path):
    out = tmp_path / "exported"
    result = CliRunner().invoke(main, ["export", "--adapter", str(run / "adapter"), "--base",
                                       str(tiny_base), "--out", str(out), "--metrics",
                                       str(tmp_path / "none.json")])
    assert result.exit_code == 0, result.output
    temperature = _calibration(run)["temperature"]
    assert f"temperature {temperature:.4g} (calibration.json)" in result.stdout
    assert (out / "calibration.json").read_bytes() == (
        run / "adapter" / "calibration.json").read_bytes()
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "## Calibration" in card
    assert f"divided by T = {temperature!r} before the softmax, T fitted on 8 validation rows" \
        in card
    snippet = re.search(r"```python\n(.*?)```", card, re.S)
    assert snippet is not None
    assert f"temperature = {temperature!r}  # calibration.json's" in snippet.group(1)
    # the snippet, run from the folder, gives predict's temperature-scaled probabilities
    namespace: dict[str, Any] = {}
    cwd = os.getcwd()
    os.chdir(out)
    try:
        exec(snippet.group(1).replace('print(classify("I love this phone"))', ""), namespace)
    finally:
        os.chdir(cwd)
    expected = apply_temperature(raw_scores, temperature)
    for text, row in zip(TEXTS, expected, strict=True):
        label, probs = namespace["classify"](text)
        assert label == LABELS[int(np.argmax(row))]
        assert list(probs.values()) == pytest.approx(list(row), abs=1e-4)


def test_the_card_of_an_adapter_without_a_temperature_says_so(run):
    from lorasent.tools.predict import calibration_section

    assert calibration_section(None) == (
        "## Calibration\n\nNo temperature: the adapter folder had no calibration.json "
        "(trained before lorasent fitted a temperature). The snippet's `temperature = 1.0` "
        "gives the raw softmax of the scores, as `lorasent predict` does for this adapter.")
    unfitted = read_temperature_scaling(run / "adapter").model_copy(  # type: ignore[union-attr]
        update={"temperature": None, "note": NO_VALIDATION_NOTE})
    assert f"No temperature: {NO_VALIDATION_NOTE}." in calibration_section(unfitted)


def test_train_says_before_training_that_no_validation_split_means_no_temperature(tmp_path,
                                                                                    caplog):
    from lorasent.atomic import atomic_write_text, jsonl_text
    from lorasent.stages.train import _setup_data

    atomic_write_text(tmp_path / "train.jsonl", jsonl_text([{"text": "a", "label_id": 0}]))
    atomic_write_text(tmp_path / "validation.jsonl", "")
    with caplog.at_level("WARNING", logger="lorasent.stages.train"):
        data = _setup_data(split_dir=tmp_path, eval_strategy="no")
    assert data.calibration == []
    assert caplog.messages == [
        "train: no validation split (split.validation_size: 0): temperature scaling not "
        "fitted; predict uses the raw probabilities; set split.validation_size (e.g. 200) "
        "and rerun split to fit one"]
    caplog.clear()
    atomic_write_text(tmp_path / "validation.jsonl", jsonl_text([{"text": "b", "label_id": 0}]))
    with caplog.at_level("WARNING", logger="lorasent.stages.train"):
        _setup_data(split_dir=tmp_path, eval_strategy="no")
    assert caplog.messages == []
