"""What a learning curve's runs say and how it is written: the analysis (:func:`analyse`:
the trend, the backtest, the chosen form's projection and the sentence) and its record
(``learning_curve.json``'s), the plot (:func:`plot_spec`, Vega-Lite) and the report
section (:func:`markdown`), every value a run or a user controls escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lorasent.experiments.curve_forms import FORMS, POWER, power_law
from lorasent.experiments.curve_sentence import ROUGH_ERROR, sentence
from lorasent.experiments.projection import (
    FIT_RESAMPLES,
    PROJECT_TO,
    Backtest,
    Projection,
    Trend,
    backtest,
    no_backtest,
    project,
    trend,
)
from lorasent.review.markup import md_text
from lorasent.review.render import table
from lorasent.statistics import BOOTSTRAP_SEED, CONFIDENCE

PLOT_TITLE = "Learning curve"  # the PNG is learning-curve.png (render's slug of it)
# The form projected when there is no backtest to choose one (said to be untested).
UNTESTED_FORM = POWER


@dataclass(frozen=True)
class Analysis:
    """What the runs say: the trend, the backtest (or why there is none: ``untested``),
    the projection of the form the backtest chose, and the sentence (:func:`analyse`)."""

    trend: Trend | None = None
    backtest: Backtest | None = None
    untested: str = ""
    projection: Projection | None = None
    sentence: str = ""

    def record(self) -> dict[str, Any]:
        """``learning_curve.json``'s ``trend``, ``backtest``, ``fit`` and ``sentence``."""
        p, t, b = self.projection, self.trend, self.backtest
        interval, margin = (p.interval, p.margin) if p is not None else ({}, {})
        return {
            "trend": None if t is None else {
                "model": "accuracy = intercept + slope * log2(n), n = training rows",
                "accuracy_per_doubling": t.slope, "ci95_low": _known(t.interval[0]),
                "ci95_high": _known(t.interval[1]), "falls": t.falls},
            "backtest": None if b is None else {
                "held_out_train_rows": b.rows, "measured_accuracy_mean": b.measured,
                "fitted_on_train_rows": list(b.fitted_on),
                "forecasts": {form: {"model": FORMS[form].model, "predicted": f.predicted,
                                     "ci95_low": _known(f.interval[0]),
                                     "ci95_high": _known(f.interval[1]),
                                     "error": b.error(form), "inside": b.inside(form),
                                     "at_bound": list(f.fit.bounds)}
                              for form, f in b.forecasts.items()},
                "chosen": b.chosen, "rough_error": ROUGH_ERROR},
            "fit": None if p is None else {
                "form": p.fit.form,
                "model": FORMS[p.fit.form].model,
                "a": p.fit.a, "b": p.fit.b, "c": p.fit.c,
                "at_bound": list(p.fit.bounds),
                "tested": b is not None,
                "untested": self.untested or None,
                "full_train_rows": p.full_rows,
                "project_to": p.to,
                "projected": {f"{k:g}x": {
                    "train_rows": round(k * p.full_rows), "accuracy": p.fit.at(k * p.full_rows),
                    "gain": p.gain[k], "gain_ci95_low": _known(interval[k][0]),
                    "gain_ci95_high": _known(interval[k][1]),
                    "gain_seeds_ci95_low": _known(p.seed_interval[k][0]),
                    "gain_seeds_ci95_high": _known(p.seed_interval[k][1]),
                    "backtest_margin": margin[k]} for k in p.gain},
                "interval": (ONE_SEED if p.most_seeds < 2 else
                             "the seeds' bootstrap interval widened on each side by the "
                             "backtest's error x log(reach) / log(the backtest's step)"
                             if b is not None else "the seeds' bootstrap interval (untested: "
                             "no backtest to widen it by)"),
                "band": [{"train_rows": n, "accuracy_ci95_low": _known(low),
                          "accuracy_ci95_high": _known(high),
                          "accuracy_seeds_ci95_low": _known(s_low),
                          "accuracy_seeds_ci95_high": _known(s_high)}
                         for (n, low, high), (_, s_low, s_high)
                         in zip(p.band, p.seed_band, strict=True)],
                "clipped": p.clipped,
                "a_at_bound": p.fit.at_bound,
                "bootstrap": {"resamples": p.requested, "converged": p.resamples,
                              "a_at_bound": p.refits_at_bound,
                              "seed": BOOTSTRAP_SEED, "confidence": CONFIDENCE},
            },
            "sentence": self.sentence,
        }


ONE_SEED = ("none: one run per fraction has no spread over seeds (unknown), so every "
            "interval over seeds is null")


def _known(value: float) -> float | None:
    """``value``, or None for NaN (an interval over seeds that one seed cannot give)."""
    return None if math.isnan(value) else value


def analyse(points: Sequence[tuple[int, Sequence[float]]], *,
            failed_largest: float | None = None, resamples: int = FIT_RESAMPLES,
            to: float = PROJECT_TO) -> Analysis:
    """The :class:`Analysis` of the runs ``points`` (``(training rows, accuracy of each
    seed)`` per fraction with runs). ``failed_largest``: the grid's largest fraction when
    none of its runs finished (then no backtest, and the projection starts from the
    largest fraction with runs).

    A curve that falls (:attr:`Trend.falls`) gets no backtest and no projection. Else the
    :func:`~lorasent.experiments.projection.backtest` picks the form
    (:attr:`~lorasent.experiments.projection.Backtest.chosen`); without one
    (:func:`~lorasent.experiments.projection.no_backtest`) the projection is
    :data:`UNTESTED_FORM`'s, said to be untested.
    """
    points = sorted((n, list(accs)) for n, accs in points if accs)
    t = trend(points, resamples)
    if t is not None and t.falls:
        # no projection: the forms only rise (b >= 0) and would call the fall flat
        return Analysis(t, sentence=sentence(None, len(points), t))
    check = None if failed_largest is not None else backtest(points, resamples)
    untested = "" if check is not None else no_backtest(len(points), failed_largest)
    p = project(points, resamples, check.chosen if check else UNTESTED_FORM, to, check)
    return Analysis(t, check, untested, p, sentence(p, len(points), t, check or untested))



def plot_spec(record: dict[str, Any]) -> dict[str, Any]:
    """A Vega-Lite spec: each run's accuracy against training rows (log x), the mean's
    test-row interval as a band, the mean as a line, the chosen form's fit dotted from the
    smallest fraction to the projection's end (``--project-to``× the largest fraction's
    rows) with the projection's interval as a grey band, the baselines as rules."""
    runs = [{"rows": f["train_rows"], "accuracy": r["accuracy"]}
            for f in record["fractions"] for r in f["runs"] if f["train_rows"]]
    means = [{"rows": f["train_rows"], "accuracy": f["accuracy_mean"],
              "low": f["accuracy_ci95_low"], "high": f["accuracy_ci95_high"]}
             for f in record["fractions"] if f["train_rows"] and f["accuracy_mean"] is not None]
    fit = record["fit"] if means else None  # drawn from the smallest fraction's mean
    # ticks at each fraction's rows and at the projections (a log axis's own ticks run
    # together near its end: "5,0006,000")
    ticks = sorted({m["rows"] for m in means}
                   | ({p["train_rows"] for p in fit["projected"].values()} if fit else set()))
    x = {"field": "rows", "type": "quantitative", "title": "training rows",
         "scale": {"type": "log", "nice": False},
         "axis": {"format": ",d", **({"values": ticks} if ticks else {})}}
    y = {"field": "accuracy", "type": "quantitative", "title": "accuracy (test split)",
         "scale": {"zero": False}}
    layers: list[dict[str, Any]] = [
        {"data": {"values": [m for m in means if m["low"] is not None]}, "mark": {
            "type": "area", "opacity": 0.2},
         "encoding": {"x": x, "y": {**y, "field": "low"}, "y2": {"field": "high"}}},
        {"data": {"values": means}, "mark": {"type": "line", "point": True},
         "encoding": {"x": x, "y": y}},
        {"data": {"values": runs}, "mark": {"type": "point", "opacity": 0.6},
         "encoding": {"x": x, "y": y}},
    ]
    if fit:
        band = [{"rows": b["train_rows"], "low": b["accuracy_ci95_low"],
                 "high": b["accuracy_ci95_high"]} for b in fit["band"]
                if b["accuracy_ci95_low"] is not None and math.isfinite(b["accuracy_ci95_low"])]
        if band:  # the projection's interval, from the largest fraction's rows on
            layers.append({"data": {"values": band}, "mark": {"type": "area", "opacity": 0.15,
                                                               "color": "gray"},
                           "encoding": {"x": x, "y": {**y, "field": "low"},
                                        "y2": {"field": "high"}}})
        # the fitted form from the smallest fraction to the projection's end, dashed
        end = max(p["train_rows"] for p in fit["projected"].values())
        grid = np.geomspace(min(m["rows"] for m in means), end, 40)
        fitted = [{"rows": float(n), "accuracy": float(power_law(n, fit["a"], fit["b"], fit["c"]))}
                  for n in grid]
        layers.append({"data": {"values": fitted}, "mark": {"type": "line", "strokeDash": [2, 2],
                                                             "color": "gray"},
                       "encoding": {"x": x, "y": y}})
    names = {"majority_class": "majority-class baseline", "zero_shot": "zero-shot baseline"}
    rules = [{"accuracy": v, "baseline": names[k]} for k, v in record["baselines"].items()
             if v is not None]
    if rules:
        layers.append({"data": {"values": rules}, "mark": {"type": "rule", "strokeDash": [4, 4]},
                       "encoding": {"y": {"field": "accuracy", "type": "quantitative"},
                                    "color": {"field": "baseline", "type": "nominal"}}})
    return {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "title": PLOT_TITLE,
            "width": 480, "height": 300, "layer": layers}


def _number(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def backtest_lines(record: dict[str, Any]) -> list[str]:
    """The report's backtest: each form's forecast of the largest fraction against the
    measured mean, or the line saying why there is none."""
    b, fit = record.get("backtest"), record["fit"]
    if b is None:
        return ["", md_text(fit["untested"], None) + "."] if fit and fit["untested"] else []
    shown = ", ".join(f"{n:,}" for n in b["fitted_on_train_rows"])
    rows = [[FORMS[form].written + (" (chosen)" if form == b["chosen"] else ""),
             f"{_number(f['predicted'])} " + (
                 "(no interval: one seed, the spread over seeds unknown)"
                 if f["ci95_low"] is None else
                 f"[{_number(f['ci95_low'])}, {_number(f['ci95_high'])}]"),
             f"{f['error']:+.4f}",
             "—" if f["inside"] is None else "yes" if f["inside"] else "no",
             ", ".join(f["at_bound"]) or "—"] for form, f in b["forecasts"].items()]
    return ["", f"Backtest: each form fitted to the runs of {shown} rows, then its forecast of "
            f"the mean accuracy at {b['held_out_train_rows']:,} rows against the measured "
            f"{_number(b['measured_accuracy_mean'])}; the form that erred least is the "
            "projection's:", "",
            *table(["form", "forecast [95% interval]", "error", "measured inside",
                    "parameters at a bound"], rows)]


def fit_line(fit: dict[str, Any]) -> str:
    """The fit in one line: its form, its parameters, its bootstrap, its bounds
    (:meth:`~lorasent.experiments.curve_forms.Form.described`)."""
    how = "chosen by the backtest" if fit["tested"] else "untested"
    refits = (f"{fit['bootstrap']['converged']} of {fit['bootstrap']['resamples']} bootstrap "
              "refits converged")
    return FORMS[fit["form"]].described(fit, how, refits)


def markdown(record: dict[str, Any], image: str | None) -> str:
    """The report section: the sentence, the table of fractions, the backtest, the fit,
    the failures; every value a run or a user controls escaped
    (:mod:`lorasent.review.markup`)."""
    lines = ["## Learning curve", "", md_text(record["sentence"], None), ""]
    if image:
        lines += [f"![{PLOT_TITLE}]({image})", ""]
    rows = []
    for f in record["fractions"]:
        interval = ("—" if f["accuracy_ci95_low"] is None else
                    f"[{_number(f['accuracy_ci95_low'])}, {_number(f['accuracy_ci95_high'])}]")
        rows.append([f"{f['fraction']:g}", str(f["train_rows"] or "—"), str(len(f["runs"])),
                     _number(f["accuracy_mean"]), _number(f["accuracy_sd"]), interval,
                     _number(f["macro_f1_mean"]), _number(f["macro_f1_sd"])])
    lines += table(["fraction", "training rows", "seeds", "accuracy (mean)", "sd over seeds",
                    "95% test-row interval", "macro-F1 (mean)", "sd over seeds"], rows)
    lines += backtest_lines(record)
    if record["fit"]:
        lines += ["", fit_line(record["fit"])]
    base = [f"{name.replace('_', ' ')} {_number(v)}" for name, v in record["baselines"].items()
            if v is not None]
    if base:
        lines += ["", "Baselines (accuracy): " + md_text(", ".join(base), None) + "."]
    if record["failed"]:
        lines += ["", f"The curve is drawn from the runs that finished; {len(record['failed'])} "
                  "failed:", ""]
        lines += [f"- {md_text(f['experiment'])} ({md_text(' '.join(f['params']))}): "
                  f"{md_text(f['error'])}; log {md_text(f['log'])}" for f in record["failed"]]
    return "\n".join(lines) + "\n"
