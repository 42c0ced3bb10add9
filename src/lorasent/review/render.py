"""The report of a comparison: Markdown, one HTML page, PNGs; the rendering half of
``lorasent compare``.

The folder, written whole or not at all (:func:`write_report`):

- ``verdict.md``: the verdict sentence and the warnings (the pull request comment's top);
- ``report.md``: the verdict, then the tables and links to the PNGs, for a pull request;
- ``report.html``: the same page with the PNGs inside it (``data:`` URIs); it opens
  offline, in any browser, alone;
- one PNG per plot, named after the plot: DVC's plots as Vega-Lite specs drawn offline
  by vl-convert, and the report's own: K x K confusion matrices, a reliability diagram
  and a risk-coverage curve (:func:`calibration_specs`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lorasent.contracts import REFERENCE_NAMES, SUPERVISED_REFERENCES, EvalMetrics, dump
from lorasent.metrics import Predictions
from lorasent.output_guard import output_dir
from lorasent.paths import EVAL_METRICS, EVAL_RELIABILITY, SPLIT_DIR
from lorasent.review.collect import Comparison, lookup, ran_with
from lorasent.review.markup import SENTENCE_LIMIT, md_code, md_text, visible
from lorasent.review.verdict import Review, Side, busy, class_order, delta_text, p_text
from lorasent.statistics import (
    GroupComparison,
    PairedComparison,
    resamples_said,
    with_interval,
)

REPORT_MD = "report.md"


REPORT_HTML = "report.html"


VERDICT_MD = "verdict.md"


FLIPPED_TEXTS = 10  # texts listed each way


VEGA_LITE = "https://vega.github.io/schema/vega-lite/v5.json"  # the report's own plots


# the calibration of the adapter's probabilities (eval.json's ``calibration``, issue 30)
CALIBRATION = [
    ("calibration.ece", "ECE (raw probabilities)"),
    ("calibration.nll", "NLL (raw probabilities)"),
    ("calibration.brier", "Brier score (raw probabilities)"),
    ("calibration.temperature", "temperature (fitted on validation)"),
]


# (key in metrics/eval.json, name in the report): the headline rows, in this order; those
# of INTERVALS carry their 95% interval. A key a side's file lacks is "—".
HEADLINE = [
    ("accuracy", "accuracy"),
    ("macro_f1", "macro-F1"),
    ("relative_error_reduction", "relative error reduction"),
    ("reference_accuracy", "reference accuracy"),
    ("baseline.majority_accuracy", "majority-class baseline accuracy"),
    ("baseline.zero_shot_accuracy", "zero-shot baseline accuracy"),
    ("baseline.zero_shot_macro_f1", "zero-shot baseline macro-F1"),
    ("baseline.zero_shot_calibrated_accuracy", "calibrated zero-shot baseline accuracy"),
    *CALIBRATION,
]
# the headline rows of an extra test set (eval.json's ``test_sets.<name>``)
SET_HEADLINE = [("test_rows", "test rows"), *HEADLINE[:4], *CALIBRATION]


METRICS_HEADER = ["metric", "A", "B", "Δ", "A 95% interval", "B 95% interval"]
INTERVALS = ("accuracy", "macro_f1", "relative_error_reduction", "calibration.ece",
             "calibration.nll", "calibration.brier")  # keys with a 95% interval
# (key under per_class.<label>, name, with a Δ column)
PER_CLASS = [("f1", "F1", True), ("precision", "precision", False),
             ("recall", "recall", False), ("support", "support", False)]


# (file, key, name): dvclive's record of training (metrics/train/metrics.json).
TRAINING = [
    ("metrics/train/metrics.json", "train.loss", "mean training loss"),
    ("metrics/train/metrics.json", "loss", "last logged loss"),
    ("metrics/train/metrics.json", "step", "optimiser steps"),
]
# (key of train's provenance ``training_speed``, dvclive's key in a revision made before
# the speed went to the machine record, name): machine facts, found for a side whose
# record this checkout's last train run wrote (lorasent.provenance.with_machine_facts).
SPEED = [("train_runtime", "train.runtime", "training time (s)"),
         ("train_samples_per_second", "train.samples_per_second", "examples per second")]


def report_folder(rev_a: str, rev_b: str, out_dir: str | Path | None = None,
                  repo: str | Path = ".") -> Path:
    """The folder :func:`compare` writes: ``out_dir``, else ``reports/<A>-vs-<B>`` in
    ``repo``. It is replaced as a whole, with the marker of ``lorasent compare``
    (:func:`lorasent.output_guard.output_dir`); the CLI checks it first
    (:func:`lorasent.output_guard.check_output_folder`)."""
    return (Path(out_dir) if out_dir else
            Path(repo) / "reports" / f"{slug(rev_a)}-vs-{slug(rev_b)}")


def write_report(c: Comparison, out: Path, repo: Path) -> Path:
    """Write :func:`collect`'s comparison as the report folder ``out`` (verdict.md,
    report.md, report.html, the PNGs), whole or not at all; returns ``out``."""
    own = own_plot_titles(repo)  # drawn by the report itself, both sides in one
    with output_dir(out, command="compare") as tmp:
        images = {title: _render_png(specs, tmp) for title, specs in c.plots.items()
                  if title not in own}
        images = {**_confusion_pngs(c.sides, c.review.labels, tmp),
                  **_calibration_pngs(c.sides, tmp), **images}
        text = _markdown(c, images, _texts(repo, c.review))
        (tmp / VERDICT_MD).write_text(c.review.summary(), encoding="utf-8")
        (tmp / REPORT_MD).write_text(text, encoding="utf-8")
        (tmp / REPORT_HTML).write_text(html_page(text, tmp, f"lorasent: {c.rev_a} vs {c.rev_b}"),
                                       encoding="utf-8")
    return out


def _render_png(specs: list[dict[str, Any]], folder: Path) -> list[str]:
    """Draw each Vega-Lite spec of one plot to ``<plot name>.png`` in ``folder``; returns
    the file names."""
    import vl_convert

    names = []
    for i, spec in enumerate(s for s in specs if s.get("type") == "vega"):
        content = still_spec(spec["content"])
        title = content.get("title")
        title = title.get("text") if isinstance(title, dict) else title
        name = f"{slug(title or 'plot')}{f'-{i}' if i else ''}.png"
        png = vl_convert.vegalite_to_png(content, vl_version=_vl_version(content), scale=1)
        (folder / name).write_bytes(png)
        names.append(name)
    return names


def own_plot_titles(repo: Path) -> set[str]:
    """The titles of ``dvc.yaml``'s plots that the report draws itself, both sides in
    one picture: the confusion matrices, from each side's ``metrics/eval.json``
    (revisions made before the plots drew ``metrics/confusion.json`` have only DVC's
    built-in ``confusion`` template on the predictions file, which drops the row of a
    class never predicted), and the reliability diagram (``metrics/reliability.json``),
    from each side's predictions."""
    from lorasent.params import read_yaml

    path = repo / "dvc.yaml"
    plots = (read_yaml(path.read_text(encoding="utf-8"), path) or {}).get("plots", []) \
        if path.is_file() else []
    return {title for plot in plots if isinstance(plot, dict) for title, spec in plot.items()
            if isinstance(spec, dict) and (
                str(spec.get("template", "")).startswith("confusion")
                or EVAL_RELIABILITY.as_posix() in (spec.get("y") or {}))}


def _confusion_pngs(sides: tuple[Side, Side], labels: list[str],
                    folder: Path) -> dict[str, list[str]]:
    """A K x K heatmap per predictor (adapter, zero-shot baseline), A beside B, actual
    classes on the rows and every cell drawn with its count, zeros too."""
    matrices = {
        "Confusion matrix, adapter (test split)":
            [(s, s.evals.confusion_matrix if s.evals else None) for s in sides],
        "Confusion matrix, zero-shot baseline (test split)":
            [(s, ((s.baseline or {}).get("zero_shot") or {}).get("confusion_matrix"))
             for s in sides],
    }
    images = {}
    for title, pairs in matrices.items():
        found = [(f"{side} ({s.rev})", m) for side, (s, m) in zip("AB", pairs, strict=True) if m]
        if not found:
            continue
        order = labels or list(found[0][1])
        values: list[dict[str, Any]] = [
            {"revision": name, "actual": actual, "predicted": predicted,
             "count": matrix.get(actual, {}).get(predicted, 0)}
            for name, matrix in found for actual in order for predicted in order]
        top = max(v["count"] for v in values) or 1
        spec = {
            "$schema": VEGA_LITE,
            "title": title, "data": {"values": values},
            "facet": {"column": {"field": "revision", "type": "nominal", "title": None,
                                 "sort": [name for name, _ in found]}},
            "spec": {
                "width": 70 * len(order), "height": 70 * len(order),
                "encoding": {
                    "x": {"field": "predicted", "type": "nominal", "sort": order,
                          "axis": {"labelAngle": 0}},
                    "y": {"field": "actual", "type": "nominal", "sort": order}},
                "layer": [
                    {"mark": "rect", "encoding": {"color": {
                        "field": "count", "type": "quantitative", "title": "rows",
                        "scale": {"scheme": "blues", "domain": [0, top]}}}},
                    {"mark": {"type": "text", "fontSize": 14}, "encoding": {
                        "text": {"field": "count", "type": "quantitative"},
                        "color": {"condition": {"test": f"datum.count > {top / 2}",
                                                "value": "white"}, "value": "black"}}}]}}
        images[title] = [draw(spec, folder)]
    return images


def draw(spec: dict[str, Any], folder: Path) -> str:
    """Draw the Vega-Lite ``spec`` to ``<its title>.png`` in ``folder`` (vl-convert,
    offline); returns the file name."""
    import vl_convert

    name = f"{slug(spec['title'])}.png"
    (folder / name).write_bytes(vl_convert.vegalite_to_png(spec, vl_version=_vl_version(spec),
                                                           scale=1))
    return name


CURVE_DOTS = 40  # a risk-coverage curve of at most this many points marks each
RELIABILITY = "Reliability diagram, adapter (test split)"
RISK_COVERAGE = "Risk-coverage curve, adapter (test split)"


def _calibration_pngs(sides: tuple[Side, Side], folder: Path) -> dict[str, list[str]]:
    """:func:`calibration_specs` drawn to PNG in ``folder``: ``{title: [file name]}``."""
    return {spec["title"]: [draw(spec, folder)] for spec in calibration_specs(sides)}


def calibration_specs(sides: tuple[Side, Side]) -> list[dict[str, Any]]:
    """Vega-Lite specs from each side's predictions (raw probabilities), A and B on one
    plot each:

    - a reliability diagram: accuracy against mean confidence in each of
      :func:`lorasent.calibration.reliability_bins`'s bins that has rows, and the
      diagonal of perfect calibration;
    - a risk-coverage curve: the accuracy of the rows kept against the share kept, as
      the confidence threshold rises (:func:`lorasent.calibration.risk_coverage`).

    A side without predictions is left out; ``[]`` when neither has them."""
    from lorasent.calibration import reliability_bins, risk_coverage

    found = [(f"{side} ({s.rev})", s.predictions) for side, s in zip("AB", sides, strict=True)
             if s.predictions is not None]
    if not found:
        return []
    bins = [{"revision": name, **b} for name, p in found
            for b in reliability_bins(p.actual, p.probabilities) if b["rows"]]
    curve = [{"revision": name, **r} for name, p in found
             for r in risk_coverage(p.actual, p.probabilities)]
    color = {"field": "revision", "type": "nominal", "sort": [name for name, _ in found]}
    unit = {"type": "quantitative", "scale": {"domain": [0, 1]}}
    plots: list[dict[str, Any]] = [
        {"title": RELIABILITY, "layer": [
            {"data": {"values": [{"confidence": 0, "accuracy": 0},
                                 {"confidence": 1, "accuracy": 1}]},
             "mark": {"type": "line", "color": "gray", "strokeDash": [4, 4]},
             "encoding": {"x": {"field": "confidence", **unit},
                          "y": {"field": "accuracy", **unit}}},
            {"data": {"values": bins}, "mark": {"type": "line", "point": True},
             "encoding": {"x": {"field": "confidence", **unit,
                                "title": "confidence (mean top probability of the bin)"},
                          "y": {"field": "accuracy", **unit, "title": "accuracy of the bin"},
                          "color": color}}]},
        {"title": RISK_COVERAGE, "data": {"values": curve},  # dots only where they are few
         "mark": {"type": "line", "point": len(curve) <= CURVE_DOTS},
         "encoding": {"x": {"field": "coverage", **unit,
                            "title": "coverage (share of rows at or above the threshold)"},
                      "y": {"field": "accuracy", "type": "quantitative",
                            "title": "accuracy of those rows"},
                      "color": color}},
    ]
    return [{"$schema": VEGA_LITE, "width": 360, "height": 300, **plot} for plot in plots]


def still_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """DVC's interactive spec made right for a still image.

    - A confusion matrix shows its counts: the ``showValues`` checkbox, which does
      nothing in a PNG, is set.
    - A confusion plot faceted both by revision and by file (two prediction files in
      two revisions, as this project's ``dvc.yaml`` had before its confusion plot was
      split in two) loses DVC's empty facet ``sort`` lists: with them Vega-Lite draws
      each cell under another cell's header (seen with every Vega-Lite 5 and 6 that
      vl-convert bundles; an explicit order does the same). Such a plot then orders
      revisions by name. A plot faceted by revision alone keeps A before B.
    """
    spec = {**spec, "params": [{**p, "value": True} if p.get("name") == "showValues" else p
                               for p in spec.get("params", [])]}
    facet = spec.get("facet")
    if isinstance(facet, dict) and {"row", "column"} <= set(facet):
        spec["facet"] = {k: {f: v for f, v in d.items() if not (f == "sort" and v == [])}
                         for k, d in facet.items()}
    return spec


def _vl_version(spec: dict[str, Any]) -> str | None:
    """The newest Vega-Lite vl-convert bundles with the major version of the spec's
    ``$schema`` (DVC writes v5 specs); None (vl-convert's default) when unknown."""
    import vl_convert

    major = re.search(r"/vega-lite/v(\d+)", spec.get("$schema", ""))
    versions = [v for v in vl_convert.get_vegalite_versions()
                if major and v.split(".")[0] == major.group(1)]
    return versions[-1] if versions else None


def _markdown(c: Comparison, images: dict[str, list[str]], texts: dict[str, str] | str) -> str:
    """The report page. A stale side's dvc.lock (``c.runs``) marks each param change its
    metrics were not made with."""
    rev_a, rev_b, commits, params, metrics = c.rev_a, c.rev_b, c.commits, c.params, c.metrics
    sides, review, runs = c.sides, c.review, c.runs
    evals = metrics.get(str(EVAL_METRICS), {})
    a, b = (f"{md_text(rev)} ({commits[rev]})" if rev in commits else md_text(rev)
            for rev in (rev_a, rev_b))
    lines = [f"# lorasent: {md_text(rev_a)} vs {md_text(rev_b)}", "", review.summary(),
             f"A is **{a}**, B is **{b}**; Δ is B − A. From the metrics and predictions each "
             "revision committed (`dvc metrics diff`, `dvc params diff`, `dvc plots diff`); "
             "intervals and tests from `lorasent.statistics`.", ""]
    for key in ("mode", "reference", "test_rows"):
        if key in evals:
            lines.append(f"- {key.replace('_', ' ')}: {_pair(evals[key])}")
    for key in ("reference_note", "relative_error_reduction_note"):
        for side in ("old", "new"):
            if evals.get(key, {}).get(side):
                lines.append(f"- {key.replace('_', ' ')} ({'A' if side == 'old' else 'B'}): "
                             f"{md_text(evals[key][side], SENTENCE_LIMIT)}")
    lines += ["", "## Params that differ", ""]
    changed = sorted(((f"{file}: {key}" if file != "params.yaml" else key, v,
                       _not_run(runs, file, key, v))
                      for file, keys in params.items() for key, v in keys.items()
                      if v.get("old") != v.get("new")), key=lambda row: row[0])
    if any(note for *_, note in changed):
        lines += ["A stale side's metrics were not made with every value below: the last "
                  "column gives the value its dvc.lock says they were made with.", ""]
        lines += table(["param", "A", "B", "metrics made with (not reproduced)"],
                        ([md_code(k), param_cell(v.get("old")), param_cell(v.get("new")), note]
                         for k, v, note in changed))
    else:
        lines += params_table(c.changed_params())

    lines += ["", "## Metrics (test split)", ""]
    values = _pair_of(dump(s.evals) if s.evals else None for s in sides)
    lines += table(METRICS_HEADER, metrics_rows(HEADLINE, values))
    lines += interval_notes(values)
    if review.paired:
        lines += ["", "## Is the difference real? (paired, same test rows"
                  + ("; not a result: a side is stale)" if runs else ")"), ""]
        lines += paired_table(review.paired, review.calibration)
    lines += references_section(sides)
    lines += ["", "## Per class (test split)", ""]
    header = ["class"] + [f"{name} {side}" for _, name, delta in PER_CLASS
                          for side in ("A", "B", "Δ")[:3 if delta else 2]]
    def class_cells(label: str) -> list[str]:
        return [value for key, _, delta in PER_CLASS for value in
                diff_cells(evals.get(f"per_class.{label}.{key}"))[:3 if delta else 2]]

    lines += table(header, ([md_text(label), *class_cells(label)]
                            for label in class_order(params, evals)))
    lines += ["", "## Confusion matrices (test split; rows: actual, columns: predicted)", ""]
    for side, s in zip("AB", sides, strict=True):
        matrix = s.evals.confusion_matrix if s.evals else None
        if matrix:
            lines += [f"{side} ({md_text(s.rev)}), adapter:", ""]
            lines += table(["actual \\ predicted", *map(md_text, matrix)],
                            ([md_text(actual), *(cell(n) for n in row.values())]
                             for actual, row in matrix.items())) + [""]
    if review.paired:
        lines += ["## Flipped texts", ""] + _flipped(review, texts) + [""]
    for name, judged in review.sets.items():
        lines += set_section(name, judged, sides)
    training = [(name, metrics.get(file, {}).get(key)) for file, key, name in TRAINING]
    training += [(name, _speed(sides, key) or metrics.get(TRAINING[0][0], {}).get(old))
                 for key, old, name in SPEED]
    if any(v for _, v in training):
        lines += ["## Training (dvclive)", ""]
        lines += table(["metric", "A", "B", "Δ"],
                       ([name, *diff_cells(v)] for name, v in training if v))
        lines += [""] + [line for busy in busy(sides) for line in (busy, "")]
    lines += ["## Plots", ""]
    for title, names in images.items():
        shown = md_text(title)
        lines += [f"### {shown}", ""] + [f"![{shown}]({name})" for name in names] + [""]
    lines += ["## Every metric (`dvc metrics diff --all`)", "", "<details>",
              "<summary>All keys of every metrics file</summary>", ""]
    lines += table(["Path", "Metric", "A", "B", "Change"],
                   ([md_text(path), md_text(key), *diff_cells(v)]
                    for path, keys in sorted(metrics.items()) for key, v in sorted(keys.items())))
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def _not_run(runs: dict[str, dict[str, Any]] | None, file: str, key: str,
             diff: dict[str, Any]) -> str:
    """For a param that differs: the value each stale side's metrics were made with,
    where its dvc.lock holds another than its params file (empty when none)."""
    said = []
    for side, end in (("A", "old"), ("B", "new")):
        ran = [v for v in ran_with((runs or {}).get(side) or {}, file, key)
               if diff.get(end) not in (v, str(v))]  # DVC gives a list param as its repr
        if ran:
            said.append(f"{side}: {param_cell(ran[0])}")
    return "; ".join(said)


def paired_table(p: PairedComparison, calibration: dict[str, Any] | None = None
                 ) -> list[str]:
    """Markdown lines: Δ accuracy and Δ macro-F1 with their paired intervals, then (given
    ``calibration``, :func:`lorasent.calibration.calibration_deltas`'s) Δ ECE, Δ NLL and
    Δ Brier with theirs, McNemar's test, and each actual class's rows B fixed and broke;
    numbers as in the verdict."""
    rows = [[name, delta_text(delta), delta_text(None, low, high)]
            for name, delta, (low, high) in (("Δ accuracy", p.delta_accuracy, p.delta_accuracy_ci),
                                             ("Δ macro-F1", p.delta_macro_f1, p.delta_macro_f1_ci))]
    rows += [[name, delta_text(calibration[key]), delta_text(None, calibration[f"{key}_ci95_low"],
                                                            calibration[f"{key}_ci95_high"])]
             for key, name in DELTAS if calibration]
    fewer = resamples_said(p.resamples)
    lines = table(["B − A", "value", "paired bootstrap 95% interval"
                   + (f" ({fewer})" if fewer else "")], rows)
    if calibration:
        lines += ["", "ECE, NLL and Brier score of the probabilities each predictions file "
                      "holds (raw, before temperature scaling): lower is better."]
        if calibration.get("delta_interval_note"):
            lines += ["", f"Note: {md_text(calibration['delta_interval_note'], None)}."]
    lines += ["", f"McNemar's exact test on the {p.rows} rows: {p.only_b_right} right only in B, "
                  f"{p.only_a_right} right only in A, {p_text(p.p_value)}.", ""]
    lines += table(["actual class", "rows B fixed (A wrong, B right)",
                     "rows B broke (A right, B wrong)"],
                    ([md_text(label), str(f["fixed"]), str(f["broken"])]
                     for label, f in p.flips.items()))
    return lines


DELTAS = [("delta_ece", "Δ ECE"), ("delta_nll", "Δ NLL"), ("delta_brier", "Δ Brier score")]


def set_section(name: str, review: Review, sides: tuple[Side, Side]) -> list[str]:
    """Markdown lines: one extra test set both sides have: its verdict, warnings and notes,
    each side's metrics on it (eval.json's ``test_sets.<name>``) and the paired table."""
    values = _pair_of(set_metrics(s, name) for s in sides)
    sources = [lookup(v, "source", None) for v in values]
    lines = [f"## Test set {md_text(name)}", "", review.summary().rstrip(), ""]
    if any(sources):
        lines += [f"Source: {_pair({'old': sources[0], 'new': sources[1]})}.", ""]
    lines += table(METRICS_HEADER, metrics_rows(SET_HEADLINE, values))
    lines += interval_notes(values)
    if review.paired:
        lines += [""] + paired_table(review.paired, review.calibration)
    return lines + [""]


def interval_notes(values: tuple[dict[str, Any] | None, dict[str, Any] | None]) -> list[str]:
    """Markdown lines: each side's resample count where it drew fewer
    (:func:`resample_notes`), then its ``calibration.interval_note`` (why its ECE, NLL or
    Brier interval leaves out the estimate, ``lorasent.calibration.interval_note``),
    escaped: a side's eval.json is the pull request's."""
    notes = [(side, lookup(v, "calibration.interval_note", None))
             for side, v in zip("AB", values, strict=True)]
    return resample_notes(values) + [line for side, note in notes if note
                                     for line in ("", f"Note on {side}: {md_text(note, None)}.")]


def resample_notes(values: Sequence[dict[str, Any] | None]) -> list[str]:
    """Markdown lines: for each side (A, B) whose intervals on this set drew fewer than
    10,000 resamples (its ``intervals.resamples``; above 10,000 rows,
    ``lorasent.statistics.resamples_for``), how many; ``[]`` where none did."""
    counts = [(side, resamples_said(lookup(v, "intervals.resamples", None)))
              for side, v in zip("AB", values, strict=True)]
    return [line for side, fewer in counts if fewer
            for line in ("", f"{side}'s 95% intervals on this set: {fewer} (above "
                             "10,000 rows, `lorasent.statistics.resamples_for`).")]


def _pair_of(values: Iterable[dict[str, Any] | None]) -> tuple[dict[str, Any] | None,
                                                               dict[str, Any] | None]:
    a, b = values
    return a, b


def params_table(changed: Sequence[tuple[str, Any, Any]]) -> list[str]:
    """Markdown lines: a table of ``(key, A's value, B's value)``, or "None."."""
    return table(["param", "A", "B"], ([md_code(k), param_cell(old), param_cell(new)]
                                        for k, old, new in changed)) if changed else ["None."]


def interval_cell(values: dict[str, Any] | None, key: str) -> str:
    """``[low, high]`` of ``key`` in eval.json's object ``values`` (or a test set's), from
    ``<key>_ci95_low`` and ``_high`` (4 decimals); "—" for a key without an interval
    (:data:`INTERVALS`), a side without metrics or an interval that is None."""
    if values is None or key not in INTERVALS:
        return "—"
    return with_interval(None, *(lookup(values, f"{key}_ci95_{end}", None)
                                 for end in ("low", "high")))


def set_metrics(side: Side, name: str) -> dict[str, Any] | None:
    """eval.json's ``test_sets.<name>`` of ``side``; None when it has no such set."""
    found = side.evals.test_sets.get(name) if side.evals else None
    return dump(found) if found else None


def metrics_rows(keys: Sequence[tuple[str, str]],
                 values: tuple[dict[str, Any] | None, dict[str, Any] | None]) -> list[list[str]]:
    """Rows ``[name, A, B, Δ, A 95% interval, B 95% interval]`` of the ``(key, name)``
    either of A's and B's objects ``values`` holds (dotted keys reach inside)."""
    rows = []
    for key, name in keys:
        a, b = (lookup(v, key, None) for v in values)
        if a is None and b is None:
            continue
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
        diff = {"old": a, "new": b, "diff": b - a if numbers else None}  # as dvc metrics diff
        rows.append([name, *diff_cells(diff), *(interval_cell(v, key) for v in values)])
    return rows


def _texts(repo: Path, review: Review) -> dict[str, str] | str:
    """``{row id: text}`` of the paired rows from the local test split, or why not."""
    path = repo / SPLIT_DIR / "test.jsonl"
    how = ("`dvc pull data/split` (or `dvc repro split`) at the revision to see them; "
           "texts never enter git")
    if review.rows is None:
        return ""
    if not path.is_file():
        return f"The test split is not here ({SPLIT_DIR / 'test.jsonl'}): {how}."
    from lorasent.atomic import read_jsonl
    from lorasent.stages.split import row_id

    texts = {r.get("id") or row_id(r["text"]): r["text"] for r in read_jsonl(path)}
    if not set(review.rows[0].ids) <= set(texts):
        return f"The local {SPLIT_DIR / 'test.jsonl'} holds other rows than A and B: {how}."
    return texts


def _flipped(review: Review, texts: dict[str, str] | str) -> list[str]:
    """Up to :data:`FLIPPED_TEXTS` rows each way, those whose actual class's probability
    moved most first; with a last column marking those a test-label audit flags
    (:func:`flag`) when it flags any flipped row."""
    if isinstance(texts, str):
        return [texts]
    assert review.rows is not None
    labels, (a, b) = review.labels, review.rows
    moved = [b.probabilities[i, y] - a.probabilities[i, y] for i, y in enumerate(a.actual)]

    def picked(side: Predictions, i: int) -> str:
        k = side.predicted[i]
        return f"{md_text(labels[k])} ({side.probabilities[i, k]:.2f})"

    lines = []
    for title, right, sign in (("B fixed (A wrong, B right)", b, 1),
                               ("B broke (A right, B wrong)", a, -1)):
        wrong = b if right is a else a
        found = [i for i in range(len(a.actual))
                 if right.predicted[i] == a.actual[i] != wrong.predicted[i]]
        shown = sorted(found, key=lambda i: -sign * moved[i])[:FLIPPED_TEXTS]
        lines += [f"{title}: {len(found)} rows" + (
            f", the {len(shown)} whose actual class's probability moved most" if shown else ""),
            ""]
        if shown:
            audit = ["test-label audit"] if review.flagged else []
            lines += table(["text", "actual", "A (probability)", "B (probability)", *audit],
                           ([clip(texts[a.ids[i]]), md_text(labels[a.actual[i]]), picked(a, i),
                             picked(b, i), *([flag(review, a.ids[i])] if audit else [])]
                            for i in shown))
        lines += [""]
    return lines


def flag(review: Review, row_id: str) -> str:
    """The mark of a flipped row whose test label a side's audit flags: ``likely label
    error (flagged by A, B)``; empty for another row."""
    who = review.flagged.get(row_id)
    return f"⚑ likely label error (flagged by {who})" if who else ""


def clip(text: str, limit: int = 200) -> str:
    """A user's text as one table cell: its whitespace runs as one space, then
    :func:`~lorasent.review.markup.md_text` (at most ``limit`` characters, markup shown
    as written, nothing live)."""
    return md_text(" ".join(text.split()), limit)


REFERENCES_HEADER = ["classifier", "A accuracy", "B accuracy", "A's adapter minus it",
                     "B's adapter minus it", "A's cost", "B's cost"]


def references_section(sides: Sequence[Side]) -> list[str]:
    """The report's section of the supervised references (eval.json's ``references``,
    issue 58) beside each side's adapter, on the test split: accuracy with its 95%
    interval, that side's adapter minus it on the same rows (paired Δ accuracy with its
    interval, McNemar's p, the verdict) and the machine-independent cost (trainable of
    total parameters, training tokens; the seconds are in the machine records). ``[]``
    when neither side has a supervised reference (a revision before issue 58)."""
    evals = [s.evals for s in sides]
    references: list[dict[str, Any]] = [
        {str(name): ref for name, ref in ((e.references if e else None) or {}).items()}
        for e in evals]
    found = [name for name in SUPERVISED_REFERENCES if any(r.get(name) for r in references)]
    if not found:
        return []

    def scores(side: int, name: str) -> tuple[str, str, str]:
        ref: Any = evals[side] if name == "adapter" else references[side].get(name)
        if ref is None:
            return "—", "—", "—"
        accuracy = with_interval(ref.accuracy, ref.accuracy_ci95_low, ref.accuracy_ci95_high,
                                 digits=3)
        p = None if name == "adapter" else ref.paired
        paired = "—" if p is None else (
            delta_text(p.delta_accuracy, p.delta_accuracy_ci95_low, p.delta_accuracy_ci95_high)
            + f", McNemar {p_text(p.mcnemar_p)}: {p.verdict}")
        c = ref.cost
        cost = "—" if c is None else (
            f"{c.trainable_parameters:,} of {c.total_parameters:,} parameters"
            + (f", {c.train_tokens:,} training tokens" if c.train_tokens is not None else ""))
        return accuracy, paired, cost

    rows = []
    for name in [*found, "adapter"]:
        (acc_a, paired_a, cost_a), (acc_b, paired_b, cost_b) = (scores(i, name) for i in (0, 1))
        rows.append([REFERENCE_NAMES.get(name, "LoRA adapter"), acc_a, acc_b, paired_a,
                     paired_b, cost_a, cost_b])
    return ["", "## References trained on the same rows, and what each cost (test split)", "",
            *table(REFERENCES_HEADER, rows),
            *resample_notes([dump(e) if e else None for e in evals])]


def _speed(sides: Sequence[Side], key: str) -> dict[str, Any] | None:
    """A ``dvc metrics diff`` entry of ``training_speed.<key>`` in the sides' train
    records (None: neither has it)."""
    old, new = (((s.train or {}).get("training_speed") or {}).get(key) for s in sides)
    if old is None and new is None:
        return None
    diff = new - old if isinstance(old, int | float) and isinstance(new, int | float) else None
    return {"old": old, "new": new, "diff": diff}


def diff_cells(diff: dict[str, Any] | None) -> list[str]:
    """``[A, B, Δ]`` cells of one ``dvc metrics diff`` entry."""
    if not diff:
        return ["—", "—", "—"]
    return [cell(diff.get("old")), cell(diff.get("new")), cell(diff.get("diff"), signed=True)]


def _pair(diff: dict[str, Any]) -> str:
    old, new = cell(diff.get("old")), cell(diff.get("new"))
    return old if old == new else f"{old} (A), {new} (B)"


def cell(value: Any, signed: bool = False) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return md_code(value) if isinstance(value, list | dict) else md_text(value)
    if isinstance(value, int):
        return f"{value:+d}" if signed else f"{value}"
    return with_interval(value, signed=signed)


def param_cell(value: Any) -> str:
    """A param's value as params.yaml gives it: a float in full (``5e-05``, not the
    4 decimals of a metric), anything else as :func:`cell`."""
    return repr(value) if isinstance(value, float) else cell(value)


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
                  for row in rows]


def html_page(text: str, folder: Path, title: str) -> str:
    """``text`` (CommonMark with tables) as one HTML page, its PNGs embedded."""
    import html

    from markdown_it import MarkdownIt
    from markdown_it.renderer import RendererHTML
    from markdown_it.token import Token
    from markdown_it.utils import EnvType, OptionsDict

    md = MarkdownIt("commonmark", {"html": True}).enable("table")

    def image(renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict,
              env: EnvType) -> str:
        token = tokens[idx]
        src = token.attrGet("src")  # a str for an image; attributes may also hold numbers
        if isinstance(src, str) and src and (folder / src).is_file():
            data = base64.b64encode((folder / src).read_bytes()).decode("ascii")
            token.attrSet("src", f"data:image/png;base64,{data}")
        return renderer.image(tokens, idx, options, env)

    md.add_render_rule("image", image)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>
body {{ font: 15px/1.5 system-ui, sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #1f2328; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
th, td {{ border: 1px solid #d0d7de; padding: 0.25em 0.6em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
img {{ display: block; margin: 0.5em 0 1.5em; }}
code {{ background: #f6f8fa; padding: 0 0.2em; }}
</style>
</head>
<body>
{md.render(text)}</body>
</html>
"""


def terminal_text(markdown: str) -> str:
    """Markdown lorasent wrote (``verdict.md``) as the plain text a terminal prints, to be
    read, copied and searched as GitHub shows it: emphasis and HTML tags gone, backslash
    escapes and character references resolved (so :func:`~lorasent.review.markup.md_text`'s
    zero-width spaces go: ``e781ef3eb5b6``, not ``e781ef&#8203;3eb5b6``), a code span
    in backticks, ``<br>`` (a newline in a value) as ``‹U+000A›``; then every control
    and reordering character spelled out (:func:`~lorasent.review.markup.visible`), so
    nothing a value holds reaches the terminal as an escape sequence. Line by line, as
    written (markdown-it's inline parser, CommonMark)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True})

    def plain(line: str) -> str:
        parts = []
        for token in (md.parseInline(line)[0].children or []) if line else []:
            if token.type == "text":
                parts.append(token.content)
            elif token.type == "code_inline":
                parts.append(f"`{token.content}`")
            elif token.type == "html_inline" and re.match(r"<br\s*/?>", token.content, re.I):
                parts.append("‹U+000A›")
            elif token.type in ("softbreak", "hardbreak"):
                parts.append(" ")
        return visible("".join(parts).replace("\u200b", ""))

    return "\n".join(plain(line) for line in markdown.split("\n"))


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-").lower() or "rev"


def with_interval_of(evals: EvalMetrics | None, key: str) -> str:
    """``value [low, high]`` of eval.json's ``key`` (``accuracy``, ``macro_f1`` or
    ``relative_error_reduction``; 4 decimals), "—" for a side without metrics."""
    return with_interval(*evals.interval(key)) if evals else "—"


def _seed(side: Side) -> Any:
    return ((side.train or {}).get("params") or {}).get("base", {}).get("seed")


def group_report(spec_a: str, spec_b: str, sides: dict[str, list[Side]], review: Review,
                 tests: dict[str, GroupComparison],
                 changed: Sequence[tuple[str, Any, Any]]) -> str:
    """The report page of two groups of runs (:func:`lorasent.review.verdict.group_review`):
    the verdict, the params that differ besides ``base.seed`` (``(key, A's, B's)``, of
    each group's first run), mean ± sd and Welch's p, then each run."""
    group_a, group_b = ([s.rev for s in sides[name]] for name in "AB")
    lines = [f"# lorasent: {md_text(spec_a)} vs {md_text(spec_b)} (over seeds)", "",
             review.summary(),
             f"A is **{', '.join(map(md_text, group_a))}**, B is "
             f"**{', '.join(map(md_text, group_b))}**: each a group of "
             "runs that should differ only in `base.seed` (`lorasent seeds`). Each run's "
             "test rows depend on its seed, so runs are compared by their metrics, not row "
             "by row: Welch's t-test over the runs' values (`scipy.stats.ttest_ind`, "
             "unequal variances).", "",
             f"## Params that differ (besides `base.seed`; {md_text(group_a[0])} against "
             f"{md_text(group_b[0])})",
             ""]
    lines += params_table(changed)
    lines += ["", "## Over seeds", ""]
    lines += table(["metric", "A (mean ± sd)", "B (mean ± sd)", "Δ mean", "Welch p"],
                   ([t.metric, GroupComparison.spread(t.a), GroupComparison.spread(t.b),
                     cell(t.delta, signed=True), "—" if t.p_value is None else
                     f"{t.p_value:.3g}"] for t in tests.values()))
    lines += ["", "## Runs", ""]
    lines += table(["side", "run", "base.seed", "test rows", "accuracy [95% interval]",
                    "macro-F1 [95% interval]"],
                   ([name, md_text(s.rev), cell(_seed(s)),
                     cell(s.evals.test_rows if s.evals else None),
                     with_interval_of(s.evals, "accuracy"), with_interval_of(s.evals, "macro_f1")]
                    for name, runs in sides.items() for s in runs))
    return "\n".join(lines) + "\n"
