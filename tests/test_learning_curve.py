"""`lorasent learning-curve` without Ray (the fast tier): the nested stratified subsets
(train.fraction), the power-law fit and its sentence on synthetic curves, the outputs
from a made-up sweep (a failed run among them), and the bad cases; the e2e tier runs it
in tests/test_sweep_ray.py, on its sweep's runs."""

import itertools
import json
import math
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import committed
from lorasent.cli import main
from lorasent.contracts import EvalMetrics, parse
from lorasent.errors import LorasentError
from lorasent.experiments.curve_forms import Fit, fit_power_law
from lorasent.experiments.curve_report import Analysis, analyse, markdown, plot_spec
from lorasent.experiments.curve_sentence import FLAT_GAIN, ZERO_GAIN, answer, sentence
from lorasent.experiments.grid import RunSpec, plan
from lorasent.experiments.learning_curve import (
    build,
    fraction_sets,
    parse_fractions,
    refit,
    write_outputs,
)
from lorasent.experiments.projection import Backtest, Forecast, Projection, backtest, project, trend
from lorasent.experiments.runtime_estimate import estimate
from lorasent.experiments.sweep import SweepResult, SweepRun
from lorasent.experiments.task import RunResult
from lorasent.metrics import Predictions
from lorasent.params import ParamsError, parse_params
from lorasent.provenance import write_provenance
from lorasent.review.verdict import Side
from lorasent.subsets import class_rows, subset_counts, training_subset

LABELS = ["negative", "neutral", "positive"]


def _rows(per_class: dict[int, int]) -> list[dict[str, Any]]:
    rows = [{"id": f"{k}-{i}", "label_id": k} for k, n in per_class.items() for i in range(n)]
    return sorted(rows, key=lambda r: hash(r["id"]) % 97)  # classes interleaved


# ------------------------------------------------------------------ subsets

def test_a_fraction_keeps_the_ceiling_of_each_class_and_larger_ones_hold_smaller_ones():
    rows = _rows({0: 30, 1: 7, 2: 1})
    subsets = {f: training_subset(rows, f, 42, LABELS) for f in (0.1, 0.25, 0.5, 1.0)}
    for f, subset in subsets.items():
        counts = [sum(r["label_id"] == k for r in subset) for k in range(3)]
        # 0.1 * 30 is 3 rows, not ceil(3.0000000000000004) = 4
        assert counts == [class_rows(f, 30), class_rows(f, 7), 1]
        assert subset == [r for r in rows if r in subset]  # the split's order
    assert [len(s) for s in subsets.values()] == [3 + 1 + 1, 8 + 2 + 1, 15 + 4 + 1, 38]
    ids = [{r["id"] for r in s} for s in subsets.values()]
    assert all(small <= large for small, large in itertools.pairwise(ids))
    assert subsets[1.0] == rows  # all of it, row for row
    # the order is the seed's: another seed keeps other rows, the same seed the same
    assert training_subset(rows, 0.5, 42, LABELS) == subsets[0.5]
    assert training_subset(rows, 0.5, 43, LABELS) != subsets[0.5]


def test_subset_counts_name_the_fraction_and_the_empty_class():
    assert subset_counts({"negative": 801, "neutral": 400, "positive": 399}, 0.125) == \
        {"negative": 101, "neutral": 50, "positive": 50}
    with pytest.raises(LorasentError) as err:
        subset_counts({"negative": 5, "neutral": 0, "positive": 3}, 0.5)
    assert str(err.value).startswith("train.fraction 0.5: class 'neutral' has no training rows")
    with pytest.raises(LorasentError, match=r"train.fraction: 0 is not in \(0, 1\]"):
        subset_counts({"negative": 5}, 0.0)


@pytest.mark.parametrize("value", [0, 0.0, 1.5, -0.25])
def test_the_params_check_refuses_a_fraction_outside_zero_to_one(params_raw, value):
    params_raw["train"]["fraction"] = value
    with pytest.raises(ParamsError) as err:
        parse_params(params_raw)
    assert "train.fraction" in str(err.value)


def test_the_committed_params_train_on_all_of_the_split(params):
    assert params.train.fraction == 1.0


# ------------------------------------------------------------------ the fit

def _curve(a: float, b: float, c: float, rows: list[int], seeds: int = 3,
           noise: list[float] | None = None) -> list[tuple[int, list[float]]]:
    noise = noise or [0.0] * seeds
    return [(n, [a - b * n ** -c + e for e in noise]) for n in rows]


ROWS = [200, 400, 800, 1600]


def test_the_fit_finds_the_power_law_of_a_noise_free_curve():
    points = _curve(0.8, 2.0, 0.5, ROWS, seeds=1)
    fit = fit_power_law([n for n, _ in points], [accs[0] for _, accs in points])
    assert fit is not None
    assert (round(fit.a, 6), round(fit.b, 5), round(fit.c, 6)) == (0.8, 2.0, 0.5)


def test_doubling_a_rising_curve_is_said_with_its_interval():
    # 4x only when asked (--project-to 4): by default the projection ends at 2x
    default = project(_curve(0.8, 2.0, 0.5, ROWS), resamples=5)
    assert default is not None and list(default.gain) == [2.0]
    p = project(_curve(0.8, 2.0, 0.5, ROWS), resamples=50, to=4)
    assert p is not None and p.resamples == 50
    gain = 2.0 * 1600 ** -0.5 * (1 - 2 ** -0.5)  # f(2N) - f(N) = b N^-c (1 - 2^-c)
    assert round(p.gain[2], 6) == round(gain, 6)
    # every resample draws the same values: the interval is the point itself
    assert [round(x, 6) for x in p.interval[2]] == [round(gain, 6)] * 2
    assert sentence(p, 4) == ("doubling the labels is expected to add +0.015 [+0.015, +0.015] "
                              "accuracy, +0.025 [+0.025, +0.025] at 4×")
    assert not p.fit.at_bound and p.refits_at_bound == 0


def test_a_ceiling_at_its_bound_is_said_with_the_gains():
    """A curve still rising at the last fraction (its true ceiling 1.2, above any accuracy):
    the fit's a stops at 1, which holds the projected gain below the true one."""
    p = project(_curve(1.2, 2.0, 0.3, ROWS, noise=[-0.01, 0.0, 0.01]), resamples=50, to=4)
    assert p is not None and p.fit.at_bound and (p.refits_at_bound, p.resamples) == (50, 50)
    assert p.gain[2] < 2.0 * 1600 ** -0.3 * (1 - 2 ** -0.3)  # the true f(2N) - f(N)
    assert sentence(p, 4) == (
        "doubling the labels is expected to add +0.016 [+0.015, +0.017] accuracy, +0.025 "
        "[+0.023, +0.027] at 4×; the fit's ceiling is at its bound, accuracy 1 (and in 50 "
        "of 50 refits): the runs show no levelling off yet, so the bound, not the data, "
        "limits these gains")


def test_a_flat_curve_says_more_labels_like_these_do_not_help():
    p = project(_curve(0.7, 0.0, 0.5, ROWS, noise=[-0.004, 0.0, 0.004]), resamples=30)
    assert p is not None and p.interval[2][1] < FLAT_GAIN
    assert sentence(p, 4).startswith("the curve is flat: doubling the labels is expected to "
                                     "add +0.000 [")
    assert sentence(p, 4).endswith("under 0.01; more labels like these are not expected to "
                                   "help; look at the test-label audit (metrics/label_issues.csv)")


def test_a_noisy_curve_says_how_many_more_seeds_would_tell():
    p = project(_curve(0.8, 2.0, 0.5, ROWS, noise=[-0.06, 0.0, 0.06]), resamples=30)
    assert p is not None
    low, high = p.interval[2]
    assert low < ZERO_GAIN and high >= FLAT_GAIN  # b >= 0: no gain is below 0
    half, margin = (high - low) / 2, max(p.gain[2], FLAT_GAIN - p.gain[2])
    more = math.ceil(3 * (half / margin) ** 2) - 3
    assert sentence(p, 4).startswith("too noisy to tell: doubling the labels adds ")
    assert sentence(p, 4).endswith(f"about {more} more seeds per fraction would tell "
                                   f"(--seeds {3 + more})")


def test_fewer_than_three_fractions_have_no_backtest_and_an_untested_projection():
    """Issue 52's bad case: no backtest, said in one line, the projection marked untested
    (the error rate's power law, which 2 fractions can fit); one fraction: no number."""
    assert project(_curve(0.8, 2.0, 0.5, [800, 1600])) is None  # a − b·n^(−c) needs 3
    assert backtest(_curve(0.8, 2.0, 0.5, [800, 1600]), resamples=5) is None
    two = analyse(_curve(0.8, 2.0, 0.5, [800, 1600]), resamples=10)
    assert two.backtest is None and two.projection is not None
    assert two.projection.fit.form == "power"
    assert two.untested == ("no backtest: 2 fractions with runs, and a backtest needs 3 (a "
                            "fit on the smaller ones, checked on the largest); the projection "
                            "is untested")
    assert two.sentence.endswith("; " + two.untested)
    record = two.record()
    assert record["backtest"] is None
    assert (record["fit"]["tested"], record["fit"]["untested"]) == (False, two.untested)
    one = analyse(_curve(0.8, 2.0, 0.5, [1600]), resamples=10)
    assert one.projection is None and one.record()["fit"] is None
    assert one.sentence == ("no projection: no curve could be fitted to 1 fraction with runs; "
                            "give at least 3 (--fractions) for a projection and its backtest")


def test_one_seed_per_fraction_is_too_noisy_to_tell():
    p = project(_curve(0.8, 2.0, 0.5, ROWS, seeds=1), resamples=10)
    assert sentence(p, 4) == ("too noisy to tell: a fraction with one run has no spread over "
                              "seeds; 2 more seeds per fraction would measure it (--seeds 3)")


FALLING = {200: 0.71, 400: 0.65, 800: 0.59, 1600: 0.51}  # the curve, by rows


def test_a_falling_curve_says_it_falls_and_projects_nothing():
    """It was called "flat: ... +0.000" (the fit's b >= 0 cannot fall), the fall unsaid."""
    points = [(n, [a - 0.01, a, a + 0.01]) for n, a in FALLING.items()]
    t = trend(points, resamples=200)
    assert t is not None and t.falls and round(t.slope, 6) == -0.066
    assert sentence(project(points, resamples=20), 4, t) == (
        "accuracy falls as the training rows grow: 0.710 at 200 rows, 0.510 at 1,600 (-0.066 "
        "[-0.070, -0.062] per doubling of the rows); no projection (a − b·n^(−c) only rises): "
        "more labels will not help until that is understood; look at what the larger "
        "fractions add: their training loss (more rows are more steps at one learning "
        "rate), their labels, and the test-label audit (metrics/label_issues.csv)")
    one = trend([(n, [a]) for n, a in FALLING.items()], resamples=20)
    assert one is not None and one.falls
    assert sentence(None, 4, one) == (
        "accuracy falls as the training rows grow: 0.710 at 200 rows, 0.510 at 1,600, but a "
        "fraction with one run has no spread over seeds to tell a fall from noise; 2 more "
        "seeds per fraction would (--seeds 3); no projection")
    # a rise, and a level curve within its noise, do not fall
    for rising in (_curve(0.8, 2.0, 0.5, ROWS), _curve(0.7, 0.0, 0.5, ROWS,
                                                        noise=[-0.004, 0.0, 0.004])):
        found = trend(rising, resamples=50)
        assert found is not None and not found.falls


def test_a_falling_sweep_writes_no_fit_and_draws_none():
    fractions = [0.125, 0.25, 0.5, 1.0]
    runs = plan("lc", fraction_sets(fractions), 3, 42)
    rows = dict(zip(fractions, FALLING, strict=True))
    result = SweepResult([_sweep_run(r, FALLING[rows[float(r.sets[0].split("=")[1])]],
                                     rows[float(r.sets[0].split("=")[1])]) for r in runs])
    curve = build(result, fractions, {}, resamples=20)
    record = curve.record()
    assert curve.projection is None and record["fit"] is None
    assert record["trend"] == {
        "model": "accuracy = intercept + slope * log2(n), n = training rows",
        "accuracy_per_doubling": pytest.approx(-0.066), "ci95_low": pytest.approx(-0.066),
        "ci95_high": pytest.approx(-0.066), "falls": True}
    assert record["sentence"].startswith("accuracy falls as the training rows grow: 0.710 at "
                                         "200 rows, 0.510 at 1,600 (-0.066 [-0.066, -0.066] ")
    assert "flat" not in record["sentence"] and "+0.000" not in record["sentence"]
    assert not any(layer["mark"].get("strokeDash") == [2, 2]
                   for layer in plot_spec(record)["layer"])  # no dotted fit
    assert "Fit:" not in markdown(record, None)


def test_fit_at_is_the_power_law():
    assert Fit(0.9, 1.0, 1.0).at(10.0) == pytest.approx(0.8)


# ------------------------------------------------------------------ the grid and outputs

def test_fractions_are_parsed_sorted_and_swept_as_train_fraction():
    assert parse_fractions("0.5,0.125,1,0.25") == [0.125, 0.25, 0.5, 1.0]
    assert fraction_sets([0.125, 1.0]) == ["train.fraction=0.125,1.0"]
    runs = plan("lc", fraction_sets([0.125, 1.0]), 2, 42)
    assert [r.name for r in runs] == ["lc-fraction0.125-seed42", "lc-fraction0.125-seed43",
                                      "lc-fraction1.0-seed42", "lc-fraction1.0-seed43"]
    assert runs[1].sets == ("train.fraction=0.125", "base.seed=43")


@pytest.mark.parametrize(("text", "message"), [
    ("0,0.5", "learning-curve: --fractions 0,0.5: 0 is not in (0, 1]; a fraction of 0"),
    ("0.5,1.5", "learning-curve: --fractions 0.5,1.5: 1.5 is not in (0, 1]"),
    ("half", "learning-curve: --fractions half: 'half' is not a number"),
    ("0.5,0.5", "learning-curve: --fractions 0.5,0.5: 0.5 is given twice"),
])
def test_bad_fractions_are_one_line_and_nothing_is_written(text, message, tmp_path):
    with pytest.raises(LorasentError) as err:
        parse_fractions(text)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    out = tmp_path / "out"
    done = CliRunner().invoke(main, ["learning-curve", "--fractions", text, "--out", str(out)])
    assert done.exit_code == 1 and done.output.strip().splitlines()[-1].startswith(
        "lorasent learning-curve: error: " + message.removeprefix("learning-curve: "))
    assert not out.exists()


@pytest.mark.parametrize(("argv", "line"), [
    (["learning-curve", "--seeds", "0"],
     "lorasent learning-curve: error: Invalid value for '--seeds': 0 is not in the range "
     "x>=1 (see `lorasent learning-curve --help`)"),
    (["learning-curv"], "lorasent: error: No such command 'learning-curv'. Did you mean "
     "'learning-curve'? (see `lorasent --help`)"),
    (["--no-such-option"], "lorasent: error: No such option '--no-such-option' (see "
     "`lorasent --help`)"),
])
def test_a_bad_option_or_command_is_one_line(argv, line):
    """click's usage errors (any command's), in one line instead of click's three."""
    done = CliRunner().invoke(main, argv, prog_name="lorasent")
    assert done.exit_code == 2 and done.output == line + "\n"


def _evals(accuracy: float) -> EvalMetrics:
    found = parse(EvalMetrics, json.loads(committed("metrics/eval.json")), "eval.json", "")
    return found.model_copy(update={"accuracy": accuracy, "macro_f1": accuracy - 0.1})


def _sweep_run(spec: RunSpec, accuracy: float | None, rows: int) -> SweepRun:
    ok = accuracy is not None
    result = RunResult(spec.name, "succeeded" if ok else "failed", "local", {},
                       f"/tmp/logs/{spec.name}.log", 0.0, 1.0,
                       "" if ok else "dvc exp run exited with 1")
    if not ok:
        return SweepRun(spec, result, None)
    assert accuracy is not None
    correct = round(accuracy * 10)  # 10 test rows, `correct` of them right
    preds = Predictions([str(i) for i in range(10)], np.zeros(10, dtype=np.int64),
                        np.array([0] * correct + [1] * (10 - correct), dtype=np.int64),
                        np.full((10, 3), 1 / 3), LABELS)
    return SweepRun(spec, result, Side(spec.name, _evals(accuracy), None, preds, None,
                                       {"train_rows": rows}))


def test_the_outputs_of_a_sweep_with_a_failed_run(tmp_path):
    runs = plan("lc", fraction_sets([0.25, 0.5, 1.0]), 2, 42)
    accuracy = {"lc-fraction0.25-seed42": 0.5, "lc-fraction0.25-seed43": 0.6,
                "lc-fraction0.5-seed42": 0.7, "lc-fraction0.5-seed43": None,
                "lc-fraction1.0-seed42": 0.8, "lc-fraction1.0-seed43": 0.8}
    rows = {0.25: 400, 0.5: 800, 1.0: 1600}
    result = SweepResult([_sweep_run(r, accuracy[r.name], rows[float(r.sets[0].split("=")[1])])
                          for r in runs])
    curve = build(result, [0.25, 0.5, 1.0], {}, resamples=20)
    record = write_outputs(curve, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        ".lorasent-output", "learning-curve.png", "learning_curve.json", "learning_curve.md"]
    assert json.loads((tmp_path / "out/learning_curve.json").read_text()) == record
    first, middle, last = record["fractions"]
    assert (first["fraction"], first["train_rows"]) == (0.25, 400)
    assert [r["accuracy"] for r in first["runs"]] == [0.5, 0.6]
    assert round(first["accuracy_mean"], 6) == 0.55
    assert round(first["accuracy_sd"], 6) == round(float(np.std([0.5, 0.6], ddof=1)), 6)
    # the pooled test rows: 11 of 20 right
    assert first["accuracy_ci95_low"] < 0.55 < first["accuracy_ci95_high"]
    assert len(middle["runs"]) == 1 and middle["accuracy_sd"] is None
    assert last["accuracy_sd"] == 0.0
    assert record["failed"] == [{"experiment": "lc-fraction0.5-seed43",
                                 "params": ["train.fraction=0.5", "base.seed=43"],
                                 "error": "dvc exp run exited with 1",
                                 "log": "/tmp/logs/lc-fraction0.5-seed43.log"}]
    evals = _evals(0.5)
    assert record["baselines"] == {"majority_class": evals.baseline.majority_accuracy,
                                   "zero_shot": evals.baseline.zero_shot_accuracy}
    # the backtest: fitted on 400 and 800 rows (0.55, 0.7), the error rate's power law
    # predicts 1,600 rows' 0.8 exactly (0.45 -> 0.3 -> 0.2); the last observation says 0.7
    check = curve.analysis.backtest
    assert check is not None and check.chosen == "power"
    assert record["backtest"]["fitted_on_train_rows"] == [400, 800]
    forecasts = record["backtest"]["forecasts"]
    assert list(forecasts) == ["power", "last_observation"]  # a − b·n^(−c) needs 3 fractions
    assert round(forecasts["power"]["predicted"], 6) == 0.8
    assert forecasts["power"]["inside"] is True
    assert (round(forecasts["last_observation"]["error"], 6),
            forecasts["last_observation"]["inside"]) == (-0.1, False)
    assert record["fit"]["form"] == "power" and record["fit"]["tested"] is True
    assert record["fit"]["bootstrap"] == {"resamples": 20, "converged": 20, "a_at_bound": 0,
                                          "seed": 0, "confidence": 0.95}
    assert list(record["fit"]["projected"]) == ["2x"]
    assert curve.projection is not None
    assert record["sentence"] == curve.summary_sentence == sentence(curve.projection, 3,
                                                                     curve.trend, check)
    assert record["sentence"].endswith(
        "; the fit (1 − b·n^(−c), the closest of 2 forms in the backtest) predicted 1,600 rows "
        "from the smaller runs within 0.000 (inside its interval; the last observation missed "
        "by 0.100)")
    md = (tmp_path / "out/learning_curve.md").read_text()
    assert "![Learning curve](learning-curve.png)" in md
    assert ("The curve is drawn from the runs that finished; 1 failed:\n\n"
            "- lc-fraction0.5-seed43 (train.fraction=0.5 base.seed=43): dvc exp run exited "
            "with 1; log /tmp/logs/lc-fraction0.5-seed43.log") in md


def test_what_a_run_controls_is_escaped_in_the_section():
    record: dict[str, Any] = {"sentence": "a *b*", "fractions": [], "fit": None, "baselines": {},
              "failed": [{"experiment": "x<img>", "params": ["a=`b`"], "error": "[x](y)",
                          "log": "l"}]}
    md = markdown(record, None)
    assert "<img>" not in md and "`b`" not in md and "[x](y)" not in md and "*b*" not in md


def test_a_class_missing_from_the_split_stops_a_fraction_before_training():
    rows = _rows({0: 4, 2: 4})
    with pytest.raises(LorasentError) as err:
        training_subset(rows, 0.5, 42, LABELS)
    assert str(err.value).startswith("train.fraction 0.5: class 'neutral' has no training rows")
    assert training_subset(rows, 1.0, 42, LABELS) == rows  # all of it: as before the key


def test_the_estimate_scales_the_last_training_by_each_runs_share(tmp_path):
    runs = plan("lc", fraction_sets([0.25, 1.0]), 2, 42)
    share = {"lc-fraction0.25": 0.25, "lc-fraction1.0": 1.0}
    assert estimate(tmp_path, runs, share) == (
        "about how long: unknown (no record of a training on this machine: "
        "metrics/provenance/machine/train.json)")
    write_provenance(tmp_path / "metrics/provenance/train.json",
                     {"stage": "train", "wall_time_s": 240.0,
                      "params": {"train": {"fraction": 1.0}}})
    assert estimate(tmp_path, runs, share) == (
        "about 10 min of training one after the other (the last training here took 240 s; "
        "each run scaled by its share of the rows; evaluation not counted, runs side by "
        "side take less)")


def test_the_estimate_uses_the_machines_time_when_it_belongs_to_another_record(tmp_path):
    """It said "no record of a training on this machine" while the machine record was
    there, written with another tracked record (a run since, or a record checked out
    from another machine)."""
    import subprocess

    from lorasent.atomic import write_json

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                       cwd=tmp_path, check=True, capture_output=True)

    def commit(message: str) -> str:
        git("add", "metrics/provenance/train.json")
        git("commit", "-qm", message)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, check=True,
                              capture_output=True, text=True).stdout.strip()

    record = tmp_path / "metrics/provenance/train.json"
    runs = plan("lc", fraction_sets([0.25, 1.0]), 2, 42)
    share = {"lc-fraction0.25": 0.25, "lc-fraction1.0": 1.0}
    git("init", "-q")
    write_provenance(record, {"stage": "train", "wall_time_s": 240.0,
                              "params": {"train": {"fraction": 0.5, "lora": {"r": 8}}}})
    half = commit("a run of half the rows, here")
    # a record made on another machine, checked out: this machine's time is of the other
    record.write_text(json.dumps({"stage": "train", "params": {"train": {
        "fraction": 1.0, "lora": {"r": 16}}}}), encoding="utf-8")
    commit("a run from elsewhere")
    # 240 s for half the rows: 2 × 0.25 + 2 × 1 of the rows is 5 times that, 20 min
    assert estimate(tmp_path, runs, share) == (
        "about 20 min of training one after the other (the last training here took 240 s, "
        f"measured for the train record of commit {half[:7]}, not the one here "
        "(train.fraction 0.5; other params: train.lora.r); each run scaled by its share of "
        "the rows; evaluation not counted, runs side by side take less)")
    # a run whose record no commit holds (its tracked record checked out again since)
    write_provenance(record, {"stage": "train", "wall_time_s": 120.0,
                              "params": {"train": {"fraction": 0.25}}})
    git("checkout", "--", "metrics/provenance/train.json")
    assert estimate(tmp_path, runs, share) == (
        "about 5 min of training one after the other (the last training here took 120 s, "
        "measured for a train record no commit here holds (its params unknown: taken as a "
        "training on all the rows); each run scaled by its share of the rows; evaluation "
        "not counted, runs side by side take less)")
    # record_failure's record (its provenance() reads the device: torch, seconds)
    write_json(tmp_path / "metrics/provenance/machine/train.json",
               {"stage": "train", "status": "failed", "wall_time_s": 5.0, "params": {},
                "error": "RuntimeError: out of memory\nat step 3"})
    assert estimate(tmp_path, runs, share) == (
        "about how long: unknown (the last training on this machine failed: RuntimeError: "
        "out of memory at step 3; metrics/provenance/machine/train.json)")
    (tmp_path / "metrics/provenance/machine/train.json").write_text("{", encoding="utf-8")
    assert estimate(tmp_path, runs, share) == (
        "about how long: unknown (metrics/provenance/machine/train.json is damaged: not a "
        "JSON object)")


def _plot_record(fit: dict[str, Any] | None) -> dict[str, Any]:
    fractions = [{"train_rows": n, "accuracy_mean": acc, "accuracy_ci95_low": acc - 0.02,
                  "accuracy_ci95_high": acc + 0.02, "runs": [{"accuracy": acc}]}
                 for n, acc in ((201, 0.44), (401, 0.54), (801, 0.65), (1600, 0.71))]
    return {"fractions": fractions, "fit": fit, "baselines": {"majority_class": 0.43}}


def test_the_plots_x_ticks_are_the_fractions_rows_and_the_projections():
    """A log axis's own ticks ran together near its end ("5,0006,000"): the ticks are each
    fraction's training rows, then 2x and 4x the full rows when there is a fit."""
    fit = {"a": 1.0, "b": 3.1, "c": 0.32, "full_train_rows": 1600, "band": [],
           "projected": {"2x": {"train_rows": 3200}, "4x": {"train_rows": 6400}}}
    for record, ticks in ((_plot_record(fit), [201, 401, 801, 1600, 3200, 6400]),
                          (_plot_record(None), [201, 401, 801, 1600])):
        axes = {json.dumps(layer["encoding"]["x"]["axis"], sort_keys=True)
                for layer in plot_spec(record)["layer"] if "x" in layer["encoding"]}
        assert axes == {json.dumps({"format": ",d", "values": ticks}, sort_keys=True)}


# ------------------------------------- issue 52: the backtest, the forms, --project-to

def _noisy(means: dict[int, float]) -> list[tuple[int, list[float]]]:
    return [(n, [a - 0.01, a, a + 0.01]) for n, a in means.items()]


def test_the_backtest_takes_the_form_that_predicted_the_largest_fraction_best():
    """Each form fitted on 200 to 800 rows forecasts 1,600: a curve with a ceiling below
    1 (0.8) is a − b·n^(−c)'s; one whose error rate is a power law is 1 − b·n^(−c)'s,
    which a − b·n^(−c) then equals with its ceiling at the bound 1 (said), and the form
    with fewer parameters is taken."""
    found = analyse(_curve(0.8, 2.0, 0.5, ROWS, noise=[-0.01, 0.0, 0.01]), resamples=10)
    check = found.backtest
    assert check is not None and check.chosen == "saturating" and check.fitted_on == (
        200, 400, 800)
    assert round(check.forecasts["saturating"].predicted, 6) == round(0.8 - 2 / 40, 6)
    assert found.projection is not None and found.projection.fit.form == "saturating"
    assert found.sentence.endswith(
        "; the fit (a − b·n^(−c), the closest of 3 forms in the backtest) predicted 1,600 rows "
        "from the smaller runs within 0.000 (inside its interval; 1 − b·n^(−c) missed by "
        "0.011, the last observation by 0.021)")
    power = analyse(_curve(1.0, 2.0, 0.3, ROWS, noise=[-0.01, 0.0, 0.01]), resamples=10)
    record = power.record()
    assert record["backtest"]["chosen"] == "power" and record["fit"]["form"] == "power"
    assert record["backtest"]["forecasts"]["saturating"]["at_bound"] == ["a = 1"]
    assert record["fit"]["model"] == "error rate = 1 - accuracy = b * n^(-c), n = training rows"
    assert (round(record["fit"]["b"], 5), round(record["fit"]["c"], 5)) == (2.0, 0.3)
    assert sorted(record["backtest"]["forecasts"]["last_observation"]) == [
        "at_bound", "ci95_high", "ci95_low", "error", "inside", "model", "predicted"]


def test_a_fit_the_backtest_finds_far_off_calls_the_projection_rough():
    found = analyse(_noisy({200: 0.40, 400: 0.45, 800: 0.55, 1600: 0.80}), resamples=10)
    assert found.sentence.endswith(
        "; the fit (1 − b·n^(−c), the closest of 3 forms in the backtest) predicted 1,600 rows "
        "from the smaller runs but missed by 0.202 (outside its interval; a − b·n^(−c) "
        "missed by 0.202, the last observation by 0.250): treat the projection as rough")
    md = markdown(found.record() | {"fractions": [], "baselines": {}, "failed": []}, None)
    assert ("Backtest: each form fitted to the runs of 200, 400, 800 rows, then its forecast "
            "of the mean accuracy at 1,600 rows against the measured 0.8000; the form that "
            "erred least is the projection's:") in md
    assert "| 1 − b·n^(−c) (chosen) | 0.5982 [" in md and "| −0.2018 |" not in md
    assert "| -0.2018 | no | — |" in md and "| -0.2500 | no | — |" in md


def test_the_projections_interval_is_the_seeds_spread_widened_by_the_backtests_error():
    """Issue 52's study: intervals of the seeds' spread alone held the truth in 2 of 11
    checks. The backtest's error (0.202 one doubling ahead here) is added to each side,
    in proportion to log(reach) / log(the backtest's step): once at 2×, twice at 4×."""
    found = analyse(_noisy({200: 0.40, 400: 0.45, 800: 0.55, 1600: 0.80}), resamples=10,
                    to=4)
    check, p = found.backtest, found.projection
    assert check is not None and p is not None and check.step == 2.0
    error = abs(check.error(check.chosen))
    assert round(error, 4) == 0.2018
    assert p.margin == {2.0: pytest.approx(error, abs=1e-12),
                        4.0: pytest.approx(2 * error, abs=1e-12)}
    floor, ceiling = p.gain_range  # the gains an accuracy in [0, 1] can make (issue 62)
    for k in (2.0, 4.0):
        assert p.interval[k] == pytest.approx(
            (max(p.seed_interval[k][0] - p.margin[k], floor),
             min(p.seed_interval[k][1] + p.margin[k], ceiling)), abs=1e-12)
    assert p.interval[4.0][1] == pytest.approx(ceiling, abs=1e-12)  # 0.80 + 2 x 0.2 > 1
    (n0, low0, high0), (n1, low1, high1) = p.band[0], p.band[-1]
    assert (n0, n1) == pytest.approx((1600, 6400))
    assert (low0, high0) == pytest.approx(p.seed_band[0][1:], abs=1e-12)  # reach 1: none
    assert (low1, high1) == pytest.approx((p.seed_band[-1][1] - 2 * error,
                                           min(p.seed_band[-1][2] + 2 * error, 1.0)),
                                          abs=1e-12)
    assert "(each interval: the seeds' spread widened by the backtest's error, ±0.202 at 2×)" \
        in found.sentence
    projected = found.record()["fit"]["projected"]["4x"]
    assert projected["backtest_margin"] == pytest.approx(2 * error, abs=1e-12)
    assert (projected["gain_seeds_ci95_low"], projected["gain_seeds_ci95_high"]) == \
        p.seed_interval[4.0]
    # a backtest one 1.5× step ahead: 2× is log 2 / log 1.5 of its error
    uneven = analyse(_noisy({300: 0.40, 600: 0.50, 1000: 0.55, 1500: 0.70}), resamples=10)
    assert uneven.backtest is not None and uneven.projection is not None
    assert uneven.projection.margin[2.0] == pytest.approx(
        abs(uneven.backtest.error(uneven.backtest.chosen)) * math.log(2) / math.log(1.5),
        abs=1e-12)


def test_an_untested_projection_keeps_the_seeds_interval_and_says_so():
    two = analyse(_curve(0.8, 2.0, 0.5, [800, 1600], noise=[-0.01, 0.0, 0.01]), resamples=10)
    p = two.projection
    assert p is not None and p.margin == {2.0: 0.0} and p.interval == p.seed_interval
    assert "widened" not in two.sentence
    assert two.record()["fit"]["interval"] == (
        "the seeds' bootstrap interval (untested: no backtest to widen it by)")


def test_a_gain_inside_the_backtests_error_is_not_promised_to_more_seeds():
    """When the backtest's error alone reaches past 0, no number of seeds narrows the
    interval to a side: the sentence says what would (runs at a larger fraction)."""
    fit = Fit(0.8, 1.0, 0.5, "power")

    def one_step_off_by(error: float) -> Backtest:  # 800 -> 1,600 rows: margin(2) = error
        return Backtest(1600, 0.7, (800,), {"power": Forecast(fit, 0.7 + error, (0.0, 1.0))})

    p = Projection(fit, 1600, {2.0: 0.02}, {2.0: (0.01, 0.03)}, 3, 100,
                   check=one_step_off_by(0.03))
    assert answer(p) == (
        "too noisy to tell: doubling the labels adds +0.020 [-0.020, +0.060] accuracy (each "
        "interval: the seeds' spread widened by the backtest's error, ±0.030 at 2×); more "
        "seeds would not tell: the backtest's error alone spans it; runs at a larger fraction "
        "would")
    # the margin leaves room (0.02 - 0.005): seeds for the seeds' half width 0.01 to fit it
    q = Projection(fit, 1600, {2.0: 0.02}, {2.0: (0.0, 0.04)}, 3, 100,
                   check=one_step_off_by(0.005))
    assert answer(q).endswith(f"about {math.ceil(3 * (0.02 / 0.015) ** 2) - 3} more seeds per "
                              f"fraction would tell (--seeds {math.ceil(3 * (0.02 / 0.015) ** 2)})")


def test_when_the_last_observation_predicts_best_no_gain_is_projected():
    """Kielhöfer et al. 2024's forecast is hard to beat: when the fits do worse on the
    backtest than "no further gain", the sentence says more labels are not shown to help."""
    found = analyse(_noisy({200: 0.60, 400: 0.70, 800: 0.75, 1600: 0.75}), resamples=10)
    assert found.backtest is not None and found.backtest.chosen == "last_observation"
    assert found.sentence == (
        "more labels like these are not shown to help: from the smaller runs, no further gain "
        "(the last observation) predicted 1,600 rows within 0.000, closer than the fitted "
        "curves (a − b·n^(−c) missed by 0.025, 1 − b·n^(−c) by 0.059); the projection is no "
        "gain, accuracy 0.750 at 1,600 rows")
    record = found.record() | {"fractions": [], "baselines": {}, "failed": []}
    assert record["fit"]["form"] == "last_observation"
    assert record["fit"]["projected"]["2x"]["gain"] == 0.0
    assert ("Forecast (the last observation, chosen by the backtest): accuracy stays 0.7500 "
            "beyond 1,600 rows (10 of 10 bootstrap refits converged).") in markdown(record, None)


def test_no_fitted_curve_in_the_backtest_says_why_never_empty_parentheses():
    """Issue 70, kind 6: with no fitted form's forecast beside the last observation's the
    sentence read "closer than the fitted curves ()". Every subset of fitted forms, on 2
    and 3 smaller fractions, with one seed and with three."""
    last = Fit(0.75, 0.0, 0.0, "last_observation")
    fitted = {"saturating": Fit(0.8, 1.0, 0.5, "saturating"),
              "power": Fit(1.0, 1.0, 0.5, "power")}
    for fitted_on in ((400, 800), (200, 400, 800)):
        for present in itertools.chain.from_iterable(
                itertools.combinations(fitted, k) for k in range(3)):
            forecasts = {"last_observation": Forecast(last, 0.75, (0.7, 0.8)),
                         **{f: Forecast(fitted[f], 0.80, (0.7, 0.9)) for f in present}}
            check = Backtest(1600, 0.75, fitted_on, forecasts)
            assert check.chosen == "last_observation"
            for seeds in (1, 3):
                p = Projection(last, 1600, {2.0: 0.0}, {2.0: (0.0, 0.0)}, seeds, 10)
                said = sentence(p, len(fitted_on) + 1, check=check)
                assert "()" not in said
                if present:
                    assert "closer than the fitted curves (" in said
                    continue
                why = ("a − b·n^(−c) needs 3 fractions, the backtest fits on 2"
                       if len(fitted_on) == 2 else "a − b·n^(−c) did not converge")
                assert (f"(the last observation) predicted 1,600 rows within 0.000, and no "
                        f"curve was fitted to compare with it ({why}; 1 − b·n^(−c) did not "
                        "converge)") in said


def test_the_largest_fraction_failed_no_backtest_and_the_projection_untested(tmp_path):
    fractions = [0.125, 0.25, 0.5, 1.0]
    runs = plan("lc", fraction_sets(fractions), 2, 42)
    rows = {0.125: 200, 0.25: 400, 0.5: 800, 1.0: 1600}
    means = {0.125: 0.5, 0.25: 0.6, 0.5: 0.7, 1.0: None}
    result = SweepResult([_sweep_run(r, means[float(r.sets[0].split("=")[1])],
                                     rows[float(r.sets[0].split("=")[1])]) for r in runs])
    curve = build(result, fractions, rows, resamples=10)
    record = write_outputs(curve, tmp_path / "out")
    assert record["backtest"] is None and record["fit"]["tested"] is False
    line = ("no backtest: the largest fraction (1) has no run that finished, so no run the fit "
            "did not see can check it; the projection is untested")
    assert record["fit"]["untested"] == line and record["sentence"].endswith("; " + line)
    assert record["fit"]["full_train_rows"] == 800  # from the largest fraction with runs
    assert "\n" + line + ".\n" in (
        tmp_path / "out/learning_curve.md").read_text()


def test_the_projection_goes_as_far_as_asked_and_is_drawn_as_a_band():
    p = project(_curve(0.8, 2.0, 0.5, ROWS, noise=[-0.01, 0.0, 0.01]), resamples=10, to=3)
    assert p is not None and list(p.gain) == [2.0, 3.0]
    assert (p.band[0][0], round(p.band[-1][0], 6), len(p.band)) == (1600.0, 4800.0, 12)
    assert all(low <= p.fit.at(n) <= high for n, low, high in p.band)
    record = Analysis(projection=p).record()
    assert list(record["fit"]["projected"]) == ["2x", "3x"]
    spec = plot_spec({"fractions": [{"train_rows": 1600, "accuracy_mean": 0.75,
                                     "accuracy_ci95_low": None, "accuracy_ci95_high": None,
                                     "runs": [{"accuracy": 0.75}]}],
                      "fit": record["fit"], "baselines": {}})
    bands = [layer for layer in spec["layer"] if layer["mark"].get("color") == "gray"
             and layer["mark"]["type"] == "area"]
    assert len(bands) == 1 and [v["rows"] for v in bands[0]["data"]["values"]] == [
        n for n, _, _ in p.band]
    dotted = next(layer for layer in spec["layer"] if layer["mark"].get("strokeDash") == [2, 2])
    assert round(dotted["data"]["values"][-1]["rows"]) == 4800
    assert spec["layer"][0]["encoding"]["x"]["axis"]["values"] == [1600, 3200, 4800]


def test_a_project_to_below_two_is_a_one_line_usage_error():
    done = CliRunner().invoke(main, ["learning-curve", "--project-to", "1.5"],
                              prog_name="lorasent")
    assert done.exit_code == 2 and done.output == (
        "lorasent learning-curve: error: Invalid value for '--project-to': 1.5 is not in the "
        "range x>=2 (see `lorasent learning-curve --help`)\n")


def test_two_fractions_of_the_same_training_rows_are_refused_before_any_run(tmp_path):
    import subprocess

    from lorasent.experiments.learning_curve import learning_curve

    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics/data.json").write_text(json.dumps({"class_counts": {"train": {
        "negative": 5, "neutral": 3, "positive": 2}}}), encoding="utf-8")
    for args in (["init", "-q"], ["add", "metrics/data.json"], ["commit", "-qm", "split"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                       cwd=tmp_path, check=True, capture_output=True)

    def runner(*_: Any, **__: Any) -> RunResult:
        raise AssertionError("no run may start")

    with pytest.raises(LorasentError) as err:  # 0.45 and 0.5: 3 + 2 + 1 rows each
        learning_curve(name="lc", fractions=[0.5, 0.45, 1.0], repo=tmp_path,
                       out=tmp_path / "out", progress=print, runner=runner)
    assert str(err.value) == (
        "learning-curve: --fractions 0.45 and 0.5 both train on the same 6 rows (each class's "
        "share rounded up, the subsets nested: the same runs twice); leave one out or give "
        "fractions further apart")
    assert not (tmp_path / "out").exists()


def test_the_committed_curve_is_this_codes_analysis_of_its_accuracies():
    """docs/learning-curve-default/ was rewritten by refit() from its committed accuracies
    (the runs not made again): its backtest, chosen form and fit are this code's."""
    committed_record = json.loads(committed("docs/learning-curve-default/learning_curve.json"))
    again = refit(committed_record, resamples=2)
    for key in ("held_out_train_rows", "measured_accuracy_mean", "fitted_on_train_rows",
                "chosen"):
        assert again["backtest"][key] == committed_record["backtest"][key]
    for form, f in again["backtest"]["forecasts"].items():
        assert f["predicted"] == pytest.approx(
            committed_record["backtest"]["forecasts"][form]["predicted"], abs=1e-9)
    # a least-squares optimum: the same bytes on one machine, 1e-9 apart across BLAS
    # kernels (scipy's trust-region steps go through them: b moved 5e-9 on avx512)
    for key in ("form", "at_bound", "full_train_rows", "project_to"):
        assert again["fit"][key] == committed_record["fit"][key]
    for key in ("a", "b", "c"):
        assert again["fit"][key] == pytest.approx(committed_record["fit"][key], rel=1e-8,
                                                  abs=1e-9)
    assert again["fit"]["interval"] == committed_record["fit"]["interval"]
    for k, projected in again["fit"]["projected"].items():  # the backtest's margin
        assert projected["backtest_margin"] == pytest.approx(
            committed_record["fit"]["projected"][k]["backtest_margin"], abs=1e-9)


def test_a_band_or_interval_past_accuracys_range_is_clipped_to_it_and_says_so():
    """Issue 62: the projection's band reached accuracy 1.0041 at 1,000x the rows."""
    points = [(200, [0.60, 0.62, 0.61]), (400, [0.70, 0.71, 0.69]),
              (800, [0.78, 0.79, 0.80]), (1600, [0.86, 0.85, 0.87])]
    found = analyse(points, resamples=50, to=1000)
    p = found.projection
    assert p is not None
    assert max(high for _, _, high in p.band) == 1.0
    assert min(low for _, low, _ in p.band) >= 0.0
    start = p.fit.at(p.full_rows)
    assert all(-start <= low <= high <= 1 - start for low, high in p.interval.values())
    assert p.interval[1000.0][1] == pytest.approx(1 - start, abs=1e-12)
    assert [c.split(" (")[0] for c in p.clipped] == [
        "the gain's interval at 1000×", "the band from 19,726 training rows on"]
    assert "; clipped to accuracy's range [0, 1]: the gain's interval at 1000× (it reached " \
        "accuracy 1.1" in found.sentence
    record = found.record()
    assert record["fit"]["clipped"] == p.clipped
    assert max(b["accuracy_ci95_high"] for b in record["fit"]["band"]) == 1.0
    # within the range nothing is clipped, and nothing is said
    inside = analyse(points, resamples=50)
    assert inside.projection is not None and inside.projection.clipped == []
    assert "clipped" not in inside.sentence


def test_one_seed_per_fraction_cannot_tell_a_flat_curve_from_noise():
    """Issue 62, kind 8: with one seed per fraction a flat curve was "not shown to help",
    with intervals of width 0; one seed cannot tell (the spread over seeds is unknown)."""
    found = analyse([(n, [a]) for n, a in {200: 0.60, 400: 0.70, 800: 0.75, 1600: 0.75}.items()],
                    resamples=10)
    assert found.backtest is not None and found.backtest.chosen == "last_observation"
    assert found.sentence == (
        "one seed cannot tell whether more labels help: from the smaller runs, no further gain "
        "(the last observation) predicted 1,600 rows within 0.000, closer than the fitted "
        "curves (a − b·n^(−c) missed by 0.025, 1 − b·n^(−c) by 0.059), but a fraction with one "
        "run has no spread over seeds (unknown), so neither a gain nor its absence is shown; 2 "
        "more seeds per fraction would tell (--seeds 3)")
    record = found.record() | {"fractions": [], "baselines": {}, "failed": []}
    assert (record["trend"]["ci95_low"], record["trend"]["ci95_high"]) == (None, None)
    for forecast in record["backtest"]["forecasts"].values():
        assert (forecast["ci95_low"], forecast["ci95_high"], forecast["inside"]) == (
            None, None, None)
    gain = record["fit"]["projected"]["2x"]
    assert [gain[k] for k in ("gain_ci95_low", "gain_ci95_high", "gain_seeds_ci95_low",
                              "gain_seeds_ci95_high")] == [None] * 4
    assert {b["accuracy_ci95_low"] for b in record["fit"]["band"]} == {None}
    assert record["fit"]["interval"] == ("none: one run per fraction has no spread over seeds "
                                         "(unknown), so every interval over seeds is null")
    json.dumps(record, allow_nan=False)  # strict JSON: no NaN
    md = markdown(record, None)
    assert ("| the last observation (chosen) | 0.7500 (no interval: one seed, the spread over "
            "seeds unknown) | +0.0000 | — | — |") in md
    assert "[0.7500, 0.7500]" not in md
    # a rising curve of one seed: too noisy, and the backtest's clause names no interval
    rising = analyse([(n, [0.8 - 2.0 * n ** -0.5]) for n in (200, 400, 800, 1600)],
                     resamples=10)
    assert rising.sentence.startswith("too noisy to tell: a fraction with one run has no spread "
                                      "over seeds; 2 more seeds per fraction would measure it "
                                      "(--seeds 3); the fit (")
    assert "(no interval: one seed per fraction has no spread over seeds; " in rising.sentence
    # two seeds at one fraction give a spread: the intervals are measured
    two = analyse([(200, [0.60, 0.62]), (400, [0.70]), (800, [0.75]), (1600, [0.75])],
                  resamples=10)
    assert two.trend is not None and not math.isnan(two.trend.interval[0])
