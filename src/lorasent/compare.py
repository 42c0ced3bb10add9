"""``lorasent compare A B``: a report a reviewer reads, from two revisions' committed metrics.

Everything in it comes from DVC, read from what each revision committed, so nothing is
retrained or recomputed:

- ``dvc params diff A B --json``: the params that differ;
- ``dvc metrics diff A B --all --json``: accuracy, macro-F1, relative error reduction,
  the majority-class and zero-shot baselines, each class's precision, recall, F1 and
  support, and the training metrics dvclive recorded;
- ``dvc plots diff A B --json``: the plots of ``dvc.yaml`` (confusion matrices, loss
  curve) as Vega-Lite specs holding both revisions' data, drawn to PNG offline by
  vl-convert (the same Vega-Lite that ``dvc plots diff`` uses in a browser).

On top of DVC's diffs, the report says whether B is really better than A
(``lorasent.statistics``), from the committed predictions files, whose rows carry ids:

- scored on the same test rows: Δ accuracy and Δ macro-F1 with paired-bootstrap 95%
  intervals, McNemar's exact test, each class's rows fixed and broken by B, and, when the
  test split is here (after a run or ``dvc pull``), up to 10 of those texts each way;
- scored on different rows: each side's interval, and no paired test;
- a group of runs on a side (``a,b,c`` or a pattern such as ``'base-seed*'`` matching
  experiment names; see ``lorasent seeds``): mean ± sd over the seeds and Welch's t-test;
- a side that is stale first (``dvc status`` for the workspace; a commit's dvc.lock
  against its own dvc.yaml and params): then no verdict is called a result;
- warnings a reviewer cannot miss (``lorasent.metrics.warnings_by_kind``, different
  rows): those about the change; one true of both sides is said once, as a note; a side
  trained on a busy machine is said beside the training times, the only numbers it
  affects;
- predictions files read strictly (:func:`read_predictions_strict`): columns by name, a
  damaged file one error naming revision, path, line and id;
- full K x K confusion matrices, actual classes on the rows as in scikit-learn.

A and B are anything DVC takes as a revision: a commit, a branch, a tag, an experiment
name (``dvc exp show``), and ``workspace`` for B (the files as they are now). The
report is a folder, written whole or not at all:

- ``verdict.md``: the verdict sentence and the warnings (the pull request comment's top);
- ``report.md``: the verdict, then the tables and links to the PNGs, for a pull request;
- ``report.html``: the same page with the PNGs inside it (``data:`` URIs); it opens
  offline, in any browser, alone;
- one PNG per plot, named after the plot.
"""

from __future__ import annotations

import base64
import difflib
import fnmatch
import json
import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from lorasent.artifacts import output_dir
from lorasent.errors import LorasentError
from lorasent.metrics import (
    NoRowIdsError,
    Predictions,
    PredictionsFileError,
    read_predictions,
    run_warnings,
    warnings_by_kind,
)
from lorasent.paths import (
    BASELINE_METRICS,
    EVAL_METRICS,
    EVAL_PREDICTIONS,
    PROVENANCE_DIR,
    SPLIT_DIR,
)
from lorasent.programs import environment, program
from lorasent.statistics import (
    ALPHA,
    GroupComparison,
    PairedComparison,
    group_comparison,
    paired_comparison,
)

WORKSPACE = "workspace"  # DVC's name for the files as they are, uncommitted changes too
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
VERDICT_MD = "verdict.md"
FLIPPED_TEXTS = 10  # texts listed each way

# (key in metrics/eval.json, name in the report): the headline rows, in this order; the
# first three carry their 95% interval.
HEADLINE = [
    ("accuracy", "accuracy"),
    ("macro_f1", "macro-F1"),
    ("relative_error_reduction", "relative error reduction"),
    ("reference_accuracy", "reference accuracy"),
    ("baseline.majority_accuracy", "majority-class baseline accuracy"),
    ("baseline.zero_shot_accuracy", "zero-shot baseline accuracy"),
    ("baseline.zero_shot_macro_f1", "zero-shot baseline macro-F1"),
]
# (key under per_class.<label>, name, with a Δ column)
PER_CLASS = [("f1", "F1", True), ("precision", "precision", False),
             ("recall", "recall", False), ("support", "support", False)]
# (file, key, name): dvclive's record of training (metrics/train/metrics.json).
TRAINING = [
    ("metrics/train/metrics.json", "train.loss", "mean training loss"),
    ("metrics/train/metrics.json", "loss", "last logged loss"),
    ("metrics/train/metrics.json", "step", "optimiser steps"),
    ("metrics/train/metrics.json", "train.runtime", "training time (s)"),
    ("metrics/train/metrics.json", "train.samples_per_second", "examples per second"),
]


def report_folder(rev_a: str, rev_b: str, out_dir: str | Path | None = None,
                  repo: str | Path = ".") -> Path:
    """The folder :func:`compare` writes: ``out_dir``, else ``reports/<A>-vs-<B>`` in
    ``repo``. It is replaced as a whole, with the marker of ``lorasent compare``
    (:func:`lorasent.artifacts.output_dir`); the CLI checks it first
    (:func:`lorasent.artifacts.check_output_folder`)."""
    return (Path(out_dir) if out_dir else
            Path(repo) / "reports" / f"{_slug(rev_a)}-vs-{_slug(rev_b)}")


def compare(rev_a: str = "HEAD", rev_b: str = WORKSPACE, out_dir: str | Path | None = None,
            repo: str | Path = ".") -> Path:
    """Write the report comparing revision ``rev_b`` against ``rev_a``; returns its folder.

    Deltas are B minus A. ``out_dir`` defaults to ``reports/<A>-vs-<B>`` in ``repo``.
    Either side may be a group of revisions, comma-separated or a pattern (``*``, ``?``)
    matched against experiment names: then the report compares the groups over seeds.

    Raises:
        LorasentError: ``rev_a`` is ``workspace``; a revision is neither a commit,
            branch, tag nor experiment (the message lists the close matches, then the
            experiments, branches and tags); ``dvc`` or ``git`` is neither beside the
            running Python nor on PATH (``lorasent.programs.program``); DVC cannot read a
            revision (the message is DVC's); neither revision has ``metrics/eval.json``; a pattern
            matches no experiment (the message lists them); a group has fewer than 2
            revisions with metrics (a pattern matching one run is named as such).
        PredictionsFileError: a side's ``metrics/predictions.csv`` is damaged
            (:func:`read_predictions_strict`); nothing is written.

    A side whose metrics are not of its params (``dvc status`` for ``workspace``, the
    revision's dvc.lock against its dvc.yaml and params for a commit) is said first in
    the verdict, and the paired numbers are then not called a result.
    """
    repo = Path(repo)
    group_a, group_b = _group(repo, rev_a), _group(repo, rev_b)
    if WORKSPACE in group_a:
        raise LorasentError("compare: A must be a revision (a commit, branch, tag or "
                            "experiment); only B may be 'workspace'")
    _check_revisions(repo, {"A": group_a, "B": group_b})
    out = report_folder(rev_a, rev_b, out_dir, repo)
    if len(group_a) > 1 or len(group_b) > 1:
        return _compare_groups(repo, rev_a, rev_b, group_a, group_b, out)
    notes = [f"{side}: {spec.strip()!r} matches one run, {group[0]}, so A and B are "
             "compared as a plain pair, row by row; a comparison over seeds needs at least 2 "
             "runs on each side" for side, spec, group in (("A", rev_a, group_a),
                                                           ("B", rev_b, group_b))
             if group[0] != spec.strip()]
    return write_report(collect(repo, group_a[0], group_b[0], notes), out, repo)


@dataclass(frozen=True)
class Comparison:
    """What :func:`collect` read from DVC and git for revision B against A, and the
    review of it: everything the report and a pull request comment show."""

    rev_a: str
    rev_b: str
    commits: dict[str, str]       # {rev: short commit} of those git resolves
    params: dict[str, Any]        # `dvc params diff A B --all --json`
    metrics: dict[str, Any]       # `dvc metrics diff A B --all --json`
    plots: dict[str, Any]         # `dvc plots diff A B --json`'s "data"
    metrics_md: str               # `dvc metrics diff A B --all --md`
    sides: tuple[Side, Side]
    review: Review
    runs: dict[str, dict[str, Any]]  # the dvc.lock of each stale side

    def changed_params(self) -> list[tuple[str, Any, Any]]:
        """``(key, A's value, B's value)`` of each param that differs, sorted by key (DVC
        gives them in no fixed order); keys of files other than params.yaml are
        ``<file>: <key>``."""
        return sorted((key if file == "params.yaml" else f"{file}: {key}", v.get("old"),
                       v.get("new")) for file, keys in self.params.items()
                      for key, v in keys.items() if v.get("old") != v.get("new"))


def collect(repo: Path, rev_a: str, rev_b: str, notes: Sequence[str] = ()) -> Comparison:
    """Read and judge revision ``rev_b`` against ``rev_a`` (single revisions, checked by
    :func:`_check_revisions`); ``notes`` go first among the warnings.

    Raises:
        LorasentError, PredictionsFileError: as :func:`compare`.
    """
    notes = list(notes)
    commits = _commits(repo, rev_a, rev_b)
    same = rev_b != WORKSPACE and commits.get(rev_a) == commits.get(rev_b)
    if same and rev_a != rev_b:  # DVC diffs one commit under two names as nothing at all
        notes.append(f"A ({rev_a}) and B ({rev_b}) are the same commit, "
                     f"{commits[rev_a]}: nothing differs")
    revs = [rev_a] + ([] if rev_b == WORKSPACE else [rev_a if same else rev_b])
    metrics = _dvc(repo, "metrics", "diff", *revs, "--all", "--json")
    params = _dvc(repo, "params", "diff", *revs, "--all", "--json")
    plots = _dvc(repo, "plots", "diff", *revs, "--json").get("data", {})  # {} without plots
    metrics_md = _dvc(repo, "metrics", "diff", *revs, "--all", "--md", as_json=False)
    evals = metrics.get(str(EVAL_METRICS), {})
    if not evals:
        raise LorasentError(f"compare: neither {rev_a} nor {rev_b} has {EVAL_METRICS}; "
                            "run the pipeline (dvc repro) and commit its metrics first")
    sides = (_side(repo, rev_a, commits), _side(repo, rev_b, commits))
    stale = {side: _staleness(repo, rev, commits) for side, rev in (("A", rev_a), ("B", rev_b))}
    review = _review(*sides, _labels(params, evals), stale, notes)
    runs = {side: _lock(repo, commits.get(rev, rev)) for side, rev in (("A", rev_a), ("B", rev_b))
            if stale[side]}
    return Comparison(rev_a, rev_b, commits, params, metrics, plots, metrics_md, sides, review,
                      runs)


def write_report(c: Comparison, out: Path, repo: Path) -> Path:
    """Write :func:`collect`'s comparison as the report folder ``out`` (verdict.md,
    report.md, report.html, the PNGs), whole or not at all; returns ``out``."""
    confusion = _confusion_plots(repo)  # drawn by the report itself, K x K
    with output_dir(out, command="compare") as tmp:
        images = {title: _render_png(specs, tmp) for title, specs in c.plots.items()
                  if title not in confusion}
        images = {**_confusion_pngs(c.sides, c.review.labels, tmp), **images}
        text = _markdown(c, images, _texts(repo, c.review))
        (tmp / VERDICT_MD).write_text(c.review.summary(), encoding="utf-8")
        (tmp / REPORT_MD).write_text(text, encoding="utf-8")
        (tmp / REPORT_HTML).write_text(_html(text, tmp, f"lorasent: {c.rev_a} vs {c.rev_b}"),
                                       encoding="utf-8")
    return out


# ------------------------------------------------------------------ sides and verdict


@dataclass(frozen=True)
class Side:
    """What one revision committed: its metrics, predictions and training record."""

    rev: str
    evals: dict[str, Any] | None
    baseline: dict[str, Any] | None
    predictions: Predictions | None
    predictions_error: str | None  # why there are no predictions to pair
    train: dict[str, Any] | None   # metrics/provenance/train.json


def _side(repo: Path, rev: str, commits: dict[str, str]) -> Side:
    def read(path: Path) -> str | None:
        if rev == WORKSPACE:
            return (repo / path).read_text(encoding="utf-8") if (repo / path).is_file() else None
        done = subprocess.run([program("git"), "show",
                               f"{commits.get(rev, rev)}:{path.as_posix()}"],
                              cwd=repo, capture_output=True, text=True)
        return done.stdout if done.returncode == 0 else None

    def read_json(path: Path) -> dict[str, Any] | None:
        text = read(path)
        return json.loads(text) if text else None

    text, predictions, error = read(EVAL_PREDICTIONS), None, None
    if text is None:
        error = f"{rev} has no {EVAL_PREDICTIONS}"
    else:
        try:
            predictions = read_predictions_strict(text, f"{rev}:{EVAL_PREDICTIONS}")
        except NoRowIdsError as err:  # an older file: the report goes on, unpaired
            error = str(err)
    return Side(rev, read_json(EVAL_METRICS), read_json(BASELINE_METRICS), predictions, error,
                read_json(PROVENANCE_DIR / "train.json"))


def read_predictions_strict(text: str, source: str) -> Predictions:
    """:func:`lorasent.metrics.read_predictions`, and at least 2 rows: one row gives no
    interval and no paired test.

    Raises:
        NoRowIdsError, PredictionsFileError: as :func:`lorasent.metrics.read_predictions`;
            PredictionsFileError also for a single row.
    """
    p = read_predictions(text, source)
    if len(p.ids) == 1:
        raise PredictionsFileError(f"{source} line 2 (id {p.ids[0]}): the only test row; no "
                                   "interval or paired test can be drawn from 1 row: set "
                                   "split.test_size to more rows and rerun (dvc repro)")
    return p


def _in_order(p: Predictions, labels: list[str]) -> Predictions:
    """``p`` with its classes (ids and probability columns) in the order of ``labels``,
    the same classes in another order: files are paired by column name."""
    if p.labels == labels:
        return p
    new = np.asarray([labels.index(label) for label in p.labels], dtype=np.int64)
    columns = [p.labels.index(label) for label in labels]
    return Predictions(p.ids, new[p.actual], new[p.predicted], p.probabilities[:, columns],
                       labels)


SHOWN_IDS = 5  # ids listed when rows differ


def _some(ids: Iterable[str]) -> str:
    ordered = sorted(ids)
    more = f", … ({len(ordered) - SHOWN_IDS} more)" if len(ordered) > SHOWN_IDS else ""
    return ", ".join(ordered[:SHOWN_IDS]) + more


@dataclass(frozen=True)
class Review:
    """The verdict on B against A, and what a reviewer must not miss."""

    verdict: str
    warnings: list[str]
    labels: list[str]
    paired: PairedComparison | None = None
    rows: tuple[Predictions, Predictions] | None = None  # A's and B's, rows in A's order
    notes: list[str] = field(default_factory=list)  # true of A and B alike: not the change

    def summary(self, notes: bool = True) -> str:
        """The verdict, the warnings about the change, then (with ``notes``) the notes true
        of both sides, as Markdown: the top of the report and of the pull request comment."""
        lines = [f"**{self.verdict}**", ""]
        said = [f"- ⚠ {w}" for w in self.warnings] + [f"- Note: {n}" for n in self.notes
                                                      if notes]
        return "\n".join(lines + said + ([""] if said else []))


def _review(a: Side, b: Side, labels: list[str], stale: dict[str, Stale | None] | None = None,
            notes: Sequence[str] = ()) -> Review:
    """The verdict and warnings. A side in ``stale`` is said first, and then no verdict
    is called a result: its metrics are not of its params."""
    review = _paired_review(a, b, labels)
    said = [found.sentence(f"{side} ({s.rev})") for side, s in (("A", a), ("B", b))
            if (found := (stale or {}).get(side))]
    warnings = [*notes, *review.warnings]
    if said:
        verdict = (f"Not a result until then: the predictions on file give "
                   f"{_measured(review.paired)}." if review.paired else review.verdict)
        review = replace(review, verdict=f"{'. '.join(said)}. {verdict}")
    return replace(review, warnings=warnings)


def _run_warnings(a: Side, b: Side) -> tuple[list[str], list[str]]:
    """Each side's :func:`lorasent.metrics.warnings_by_kind`: ``(warnings, notes)``. A kind
    only one side has is a warning about the change (``A: ...``, ``B: ...``); a kind both
    have is one note, B's sentence with A's own figures after it where they differ."""
    in_a, in_b = (warnings_by_kind(s.evals or {}) for s in (a, b))
    warnings = [f"{side}: {text}" for side, mine, other in (("A", in_a, in_b), ("B", in_b, in_a))
                for kind, text in mine.items() if kind not in other]
    notes = [f"A and B alike, so not this change: {_alike(in_a[kind], text)}"
             for kind, text in in_b.items() if kind in in_a]
    return warnings, notes


def _alike(text_a: str, text_b: str) -> str:
    """B's sentence, with A's words in brackets after the span of words that differs:
    ``accuracy 0.375 (A: 0.400) is below ...``, ``... it is 0.455 (A: 0.487)``."""
    a, b = text_a.split(" "), text_b.split(" ")
    if a == b:
        return text_b
    start = len(os.path.commonprefix([a, b]))
    end = len(os.path.commonprefix([a[start:][::-1], b[start:][::-1]]))
    return " ".join([*b[:len(b) - end], f"(A: {' '.join(a[start:len(a) - end])})",
                     *b[len(b) - end:]])


def _busy(sides: Sequence[Side]) -> list[str]:
    """A sentence for each side trained on a busy machine: what that affects."""
    found = []
    for side, s in zip("AB", sides, strict=True):
        load = (s.train or {}).get("machine_load") or {}
        if load.get("busy"):
            found.append(f"{side} ({s.rev}) trained on a busy machine (load "
                         f"{load.get('load_average')} on {load.get('cpu_cores')} cores): its "
                         "training time and examples per second are not comparable; that "
                         "affects runtimes only, not the metrics.")
    return found


def _paired_review(a: Side, b: Side, labels: list[str]) -> Review:
    warnings, notes = _run_warnings(a, b)
    pa, pb = a.predictions, b.predictions
    if pa is None or pb is None:
        why = a.predictions_error or b.predictions_error
        return Review(f"No paired test: {why}. Each side's own interval, where it has one, is "
                      "in report.md's metrics table.",
                      warnings, labels, notes=notes)
    if set(pa.labels) != set(pb.labels):
        warnings.insert(0, f"A and B have other classes (A: {', '.join(pa.labels)}; B: "
                           f"{', '.join(pb.labels)}): other base.labels, so their metrics "
                           "are not paired")
        return Review("No paired test: A and B have other classes, so only each side's own "
                      "interval can be given (report.md's metrics table).", warnings, labels,
                      notes=notes)
    pb = _in_order(pb, pa.labels)  # paired by column name, whatever the columns' order
    only_a, only_b = set(pa.ids) - set(pb.ids), set(pb.ids) - set(pa.ids)
    if only_a or only_b:
        listed = "".join(f"; only in {side}: {_some(ids)}" for side, ids in
                         (("A", only_a), ("B", only_b)) if ids)
        warnings.insert(0, f"A and B were scored on different test rows ({len(only_a)} rows "
                           f"only in A, {len(only_b)} only in B{listed}): other split params "
                           "or data, so their metrics are not paired")
        return Review("No paired test: A and B were scored on different test rows, so only "
                      "each side's own interval can be given (report.md's metrics table).",
                      warnings, labels, notes=notes)
    order = {row_id: i for i, row_id in enumerate(pb.ids)}
    at = [order[row_id] for row_id in pa.ids]
    pb = Predictions(pa.ids, pb.actual[at], pb.predicted[at], pb.probabilities[at], pb.labels)
    if (pb.actual != pa.actual).any():
        warnings.insert(0, "A and B give the same rows other gold labels (other label "
                           "aliases?): not paired")
        return Review("No paired test: the same rows carry other gold labels in A and B.",
                      warnings, labels, notes=notes)
    paired = paired_comparison(pa.actual, pa.predicted, pb.predicted, pa.labels)
    return Review(paired_verdict(paired), warnings, pa.labels, paired, (pa, pb), notes)


def paired_verdict(p: PairedComparison) -> str:
    """One sentence: which of A and B is better on the same rows; that the two tests
    disagree ("Not settled": the paired interval of Δ accuracy excludes 0 but McNemar's
    p is not below :data:`~lorasent.statistics.ALPHA`, or the other way round); or that
    the difference is within the noise (then with the smallest difference these rows
    resolve). Accuracy decides; a macro-F1 interval that excludes 0 while accuracy's
    does not is said too."""
    f1_low, f1_high = p.delta_macro_f1_ci
    measured = _measured(p)
    if p.significant:
        return f"B is {'better' if p.delta_accuracy > 0 else 'worse'} than A: {measured}."
    low, high = p.delta_accuracy_ci
    if low > 0 or high < 0 or p.p_value < ALPHA:  # one test says so, the other not
        return (f"Not settled: {measured}. The paired interval of Δ accuracy "
                f"{'excludes' if low > 0 or high < 0 else 'holds'} 0, but McNemar's p "
                f"{'is' if p.p_value < ALPHA else 'is not'} below {ALPHA}: only both together "
                f"call B {'better' if p.delta_accuracy > 0 else 'worse'}, so more test rows "
                "are needed to tell.")
    if p.only_a_right + p.only_b_right == 0:
        return f"No detectable difference: {measured}. A and B are right on exactly the same rows."
    f1_note = (f" But macro-F1 is {'higher' if f1_low > 0 else 'lower'} in B: its interval "
               "excludes 0 (report.md's per-class table)." if f1_low > 0 or f1_high < 0 else "")
    return (f"No detectable difference{' in accuracy' if f1_note else ''}: {measured}. "
            f"{resolution_sentence(p)}{f1_note}")


def resolution_sentence(p: PairedComparison) -> str:
    """The smallest difference these rows tell apart, one sentence, the same in the
    verdict and the report (:attr:`PairedComparison.resolution`, 3 decimals)."""
    return (f"With {p.rows} test rows, accuracy differences smaller than about "
            f"{p.resolution:.3f} cannot be told apart from noise.")


def _measured(p: PairedComparison) -> str:
    """Δ accuracy and Δ macro-F1 with their intervals, and McNemar's p."""
    low, high = p.delta_accuracy_ci
    f1_low, f1_high = p.delta_macro_f1_ci
    return (f"accuracy {_signed(p.delta_accuracy)} [{_signed(low)}, {_signed(high)}], "
            f"McNemar p = {_p(p.p_value)}; macro-F1 {_signed(p.delta_macro_f1)} "
            f"[{_signed(f1_low)}, {_signed(f1_high)}]")


def group_verdict(g: GroupComparison) -> str:
    """One sentence over the seeds, as :func:`paired_verdict` over rows."""
    measured = (f"{g.metric} {g.spread(g.a)} in A against {g.spread(g.b)} in B, "
                f"Δ {_signed(g.delta)}")
    if g.p_value is None:
        return (f"Cannot be tested: {measured}; neither group varies over its seeds, so "
                "Welch's t-test is undefined.")
    measured += f", Welch's t-test p = {_p(g.p_value)}"
    if g.significant:
        return f"B is {'better' if g.delta > 0 else 'worse'} than A over seeds: {measured}."
    return f"No detectable difference over seeds: {measured}."


def _signed(value: float) -> str:
    return f"{value:+.3f}".replace("-", "−")


def _p(value: float) -> str:
    return f"{value:.2g}" if value >= 0.001 else "< 0.001"


def _group(repo: Path, spec: str) -> list[str]:
    """The revisions of one side: ``spec`` split at commas, patterns expanded against the
    experiments' names (``dvc exp list --all-commits --name-only``)."""
    revs: list[str] = []
    names: list[str] | None = None
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if not any(c in part for c in "*?["):
            revs.append(part)
            continue
        if names is None:
            listed = _dvc(repo, "exp", "list", "--all-commits", "--name-only", as_json=False)
            names = sorted(set(listed.split()))
        matched = fnmatch.filter(names, part)
        if not matched:
            raise LorasentError(f"compare: no experiment name matches {part!r}; experiments: "
                                f"{_listing(names)} (`dvc exp list --all-commits --name-only`)")
        revs += matched
    return list(dict.fromkeys(revs)) or [spec]


def _compare_groups(repo: Path, spec_a: str, spec_b: str, group_a: list[str],
                    group_b: list[str], out: Path) -> Path:
    """A report on two groups of runs (one per seed): mean ± sd and Welch's t-test."""
    commits = _commits(repo, *group_a, *group_b)
    sides = {"A": [_side(repo, rev, commits) for rev in group_a],
             "B": [_side(repo, rev, commits) for rev in group_b]}
    for name, runs in sides.items():
        if len(runs) < 2:
            spec = (spec_a if name == "A" else spec_b).strip()
            matched = f", the only run {spec!r} matches" if spec != runs[0].rev else ""
            raise LorasentError(
                f"compare: side {name} is one revision ({runs[0].rev}{matched}) and the other "
                "a group; "
                "a comparison over seeds needs at least 2 runs on each side: run `make seeds` "
                "(lorasent seeds) for that side too, then name both groups, e.g. "
                "'base-seed*' 'other-seed*'")
        missing = [s.rev for s in runs if s.evals is None]
        if missing:
            raise LorasentError(f"compare: {', '.join(missing)} in group {name} has no "
                                f"{EVAL_METRICS}; did its experiment fail? (dvc queue logs)")
    evals = {name: [s.evals for s in runs if s.evals is not None]  # all of them, checked above
             for name, runs in sides.items()}
    tests = {key: group_comparison(name, *([e[key] for e in evals[n]] for n in "AB"))
             for key, name in (("accuracy", "accuracy"), ("macro_f1", "macro-F1"))}
    warnings = [f"{name} {s.rev}: {w}" for name, runs in sides.items() for s in runs
                for w in run_warnings(s.evals or {})]
    if min(len(group_a), len(group_b)) < 3:
        warnings.append(f"{min(len(group_a), len(group_b))} runs on a side give Welch's t-test "
                        "little power: only large differences can show; 3 to 5 seeds a side "
                        "tell more")
    rows = {s.rev: e.get("test_rows") for name, runs in sides.items()
            for s, e in zip(runs, evals[name], strict=True)}
    review = Review(group_verdict(tests["accuracy"]), warnings, [])
    params = _dvc(repo, "params", "diff", group_a[0], group_b[0], "--json")
    changed = [(key, v) for keys in params.values() for key, v in keys.items()
               if key != "base.seed" and v.get("old") != v.get("new")]
    lines = [f"# lorasent: {spec_a} vs {spec_b} (over seeds)", "", review.summary(),
             f"A is **{', '.join(group_a)}**, B is **{', '.join(group_b)}**: each a group of "
             "runs that should differ only in `base.seed` (`lorasent seeds`). Each run's "
             "test rows depend on its seed, so runs are compared by their metrics, not row "
             "by row: Welch's t-test over the runs' values (`scipy.stats.ttest_ind`, "
             "unequal variances).", "",
             f"## Params that differ (besides `base.seed`; {group_a[0]} against {group_b[0]})",
             ""]
    lines += _table(["param", "A", "B"], ([f"`{k}`", _param(v.get("old")), _param(v.get("new"))]
                                          for k, v in changed)) if changed else ["None."]
    lines += ["", "## Over seeds", ""]
    lines += _table(["metric", "A (mean ± sd)", "B (mean ± sd)", "Δ mean", "Welch p"],
                    ([t.metric, GroupComparison.spread(t.a), GroupComparison.spread(t.b),
                      _fmt(t.delta, signed=True), "—" if t.p_value is None else
                      f"{t.p_value:.3g}"] for t in tests.values()))
    lines += ["", "## Runs", ""]
    lines += _table(["side", "run", "base.seed", "test rows", "accuracy [95% interval]",
                     "macro-F1 [95% interval]"],
                    ([name, s.rev, _fmt(_seed(s)), _fmt(rows[s.rev]),
                      _with_interval(s.evals, "accuracy"), _with_interval(s.evals, "macro_f1")]
                     for name, runs in sides.items() for s in runs))
    text = "\n".join(lines) + "\n"
    with output_dir(out, command="compare") as tmp:
        (tmp / VERDICT_MD).write_text(review.summary(), encoding="utf-8")
        (tmp / REPORT_MD).write_text(text, encoding="utf-8")
        (tmp / REPORT_HTML).write_text(_html(text, tmp, f"lorasent: {spec_a} vs {spec_b}"),
                                       encoding="utf-8")
    return out


def _seed(side: Side) -> Any:
    return ((side.train or {}).get("params") or {}).get("base", {}).get("seed")


def _with_interval(evals: dict[str, Any] | None, key: str) -> str:
    evals = evals or {}
    low, high = evals.get(f"{key}_ci95_low"), evals.get(f"{key}_ci95_high")
    return _fmt(evals.get(key)) + (f" [{_fmt(low)}, {_fmt(high)}]" if low is not None else "")


# ------------------------------------------------------------------------ stale sides

_MISSING = object()  # a params key a file does not hold
_NOT_RUN = ("deleted", "not in cache")  # a file that is not here: not pulled, not stale


@dataclass(frozen=True)
class Stale:
    """A side whose metrics are not of its params: stages out of date, and what changed."""

    stages: list[str]
    changed: list[str]  # ``params.yaml train.lr``, ``src/lorasent/train.py``, ``command``
    by: str  # who says so: "`dvc status`" or "its dvc.lock"

    def sentence(self, who: str, metrics: str = "its metrics", params: str = "its params",
                 fix: str = "run dvc repro") -> str:
        """``<who> is stale: <by> says <stages> ... out of date (changed: ...), so <metrics>
        are not of <params>; <fix>``."""
        verb = "is" if len(self.stages) == 1 else "are"
        return (f"{who} is stale: {self.by} says {', '.join(self.stages)} {verb} out of date "
                f"(changed: {', '.join(self.changed)}), so {metrics} "
                f"{'is' if metrics.endswith('.json') else 'are'} not of {params}; {fix}")


def workspace_staleness(repo: str | Path = ".") -> Stale | None:
    """The workspace's out-of-date stages, from one ``dvc status --json``; None when it is
    clean, or when DVC cannot tell (no pipeline here).

    Outputs and deps that are only missing (not pulled, ``deleted`` / ``not in cache``)
    do not count: they leave the committed metrics as they were made.
    """
    try:
        status = _dvc(Path(repo), "status", "--json")
    except LorasentError:
        return None
    stages: list[str] = []
    changed: list[str] = []
    for stage, entries in (status or {}).items():
        found = []
        for entry in entries:
            if isinstance(entry, str):
                found += [] if entry == "always changed" else [entry.removeprefix("changed ")]
                continue
            for kind, files in entry.items():
                for path, state in files.items():
                    if isinstance(state, dict):  # a params file: {key: state}
                        found += [f"{path} {key}" for key in state]
                    elif state not in _NOT_RUN:
                        found.append(path if kind == "changed deps" else f"{path} (output)")
        if found:
            stages.append(stage)
            changed += found
    return Stale(stages, list(dict.fromkeys(changed)), "`dvc status`") if stages else None


def _read_at(repo: Path, rev: str, path: str) -> str | None:
    """``path`` as ``rev`` holds it (``workspace``: the file here); None when absent."""
    if rev == WORKSPACE:
        return (repo / path).read_text(encoding="utf-8") if (repo / path).is_file() else None
    done = subprocess.run([program("git"), "show", f"{rev}:{path}"], cwd=repo,
                          capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def _lookup(params: Any, key: str) -> Any:
    """``params[a][b]`` for the DVC key ``a.b``; :data:`_MISSING` when absent."""
    for part in key.split("."):
        if not isinstance(params, dict) or part not in params:
            return _MISSING
        params = params[part]
    return params


def _lock(repo: Path, rev: str) -> dict[str, Any]:
    """``rev``'s dvc.lock, ``{}`` when it has none."""
    from lorasent.params import read_yaml

    text = _read_at(repo, rev, "dvc.lock")
    lock = read_yaml(text, f"{rev}:dvc.lock") if text else None
    return lock if isinstance(lock, dict) else {}


def _ran_with(lock: dict[str, Any], file: str, key: str) -> list[Any]:
    """The values of params ``key`` of ``file`` that ``lock``'s stages ran with."""
    values = []
    for stage in (lock.get("stages") or {}).values():
        for name, value in ((stage.get("params") or {}).get(file) or {}).items():
            found = value if key == name else _lookup(value, key[len(name) + 1:]) \
                if key.startswith(f"{name}.") else _MISSING
            if found is not _MISSING:
                values.append(found)
    return values


def _commit_staleness(repo: Path, rev: str) -> Stale | None:
    """Whether committed revision ``rev``'s dvc.lock matches its dvc.yaml, params files and
    git-tracked deps (`dvc status` covers only the workspace): each stage's command, the
    params it ran with against the revision's params files, and the md5 of each
    git-tracked file dep against the lock. Deps DVC caches (not in git) are not checked.
    None when the lock matches or ``rev`` has no dvc.yaml."""
    from lorasent.params import read_yaml

    text = _read_at(repo, rev, "dvc.yaml")
    pipeline = read_yaml(text, f"{rev}:dvc.yaml") if text else None
    if not isinstance(pipeline, dict):
        return None
    lock = _lock(repo, rev)
    files: dict[str, Any] = {}

    def params_of(file: str) -> Any:
        if file not in files:
            content = _read_at(repo, rev, file)
            files[file] = read_yaml(content, f"{rev}:{file}") if content else {}
        return files[file]

    locked = lock.get("stages") or {}
    deps = {d["path"]: d["md5"] for stage in locked.values() for d in stage.get("deps") or []
            if d.get("hash") == "md5" and not str(d.get("md5", "")).endswith(".dir")}
    md5s = _blob_md5s(repo, rev, list(deps))
    stages, changed = [], []
    for name, spec in (pipeline.get("stages") or {}).items():
        if not isinstance(spec, dict) or "foreach" in spec or "matrix" in spec:
            continue
        ran = locked.get(name)
        if not isinstance(ran, dict):
            stages.append(name)
            changed.append(f"{name} never run")
            continue
        found = [] if spec.get("cmd") == ran.get("cmd") or "${" in str(spec.get("cmd")) \
            else [f"{name} command"]
        declared = [(f, k) for item in spec.get("params") or []
                    for f, keys in ({"params.yaml": [item]} if isinstance(item, str)
                                    else item).items() for k in keys]
        for file, keys in (ran.get("params") or {}).items():
            found += [f"{file} {key}" for key, value in keys.items()
                      if _lookup(params_of(file), key) != value]
        found += [f"{file} {key}" for file, key in declared if "${" not in key
                  and key not in ((ran.get("params") or {}).get(file) or {})]
        ran_deps = {d.get("path") for d in ran.get("deps") or []}
        found += [d["path"] for d in ran.get("deps") or []
                  if d.get("path") in md5s and md5s[d["path"]] != deps.get(d["path"])]
        found += [d for d in spec.get("deps") or [] if isinstance(d, str) and d not in ran_deps]
        if found:
            stages.append(name)
            changed += found
    return Stale(stages, list(dict.fromkeys(changed)), "its dvc.lock") if stages else None


def _blob_md5s(repo: Path, rev: str, paths: list[str]) -> dict[str, str]:
    """``{path: md5 of its bytes}`` of the ``paths`` git holds at ``rev`` (one ``git
    cat-file --batch``); paths git does not hold are left out."""
    import hashlib

    if not paths:
        return {}
    done = subprocess.run([program("git"), "cat-file", "--batch"], cwd=repo, capture_output=True,
                          input="".join(f"{rev}:{path}\n" for path in paths).encode())
    out, at, found = done.stdout, 0, {}
    for path in paths:
        end = out.index(b"\n", at)
        head = out[at:end].split()
        at = end + 1
        if len(head) == 3 and head[1] == b"blob":
            size = int(head[2])
            found[path] = hashlib.md5(out[at:at + size]).hexdigest()
            at += size + 1
        elif len(head) == 3:  # a tree or another object: skip its bytes
            at += int(head[2]) + 1
    return found


def _staleness(repo: Path, rev: str, commits: dict[str, str]) -> Stale | None:
    return (workspace_staleness(repo) if rev == WORKSPACE
            else _commit_staleness(repo, commits.get(rev, rev)))


# --------------------------------------------------------------------------- DVC and git


def _dvc(repo: Path, *args: str, as_json: bool = True) -> Any:
    done = subprocess.run([program("dvc"), *args], cwd=repo, capture_output=True, text=True,
                          env=environment())
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise LorasentError(f"compare: `dvc {' '.join(args)}` failed in {repo.resolve()}: "
                            + " ".join(detail[-3:]))  # unknown revisions: _check_revisions
    return json.loads(done.stdout or "{}") if as_json else done.stdout


def _check_revisions(repo: Path, sides: dict[str, list[str]]) -> None:
    """Check that git or DVC knows each revision of each side, before DVC reads them, so
    that a typo gets the names it could have meant rather than DVC's error.

    Raises:
        LorasentError: ``repo`` is not in a git repository; a revision is neither a
            commit, branch or tag (``git rev-parse --verify``) nor an experiment (``dvc
            exp list --all-commits --name-only``): the message gives the close matches
            first, then the experiments, branches and tags.
    """
    revs = {rev: side for side, group in sides.items() for rev in group if rev != WORKSPACE}
    unknown = [rev for rev in revs if rev not in _commits(repo, *revs)]
    if not unknown:
        return
    if _git_lines(repo, "rev-parse", "--git-dir") is None:
        raise LorasentError(f"compare: {repo.resolve()} is not in a git repository; A and B "
                            "are read from git: run compare in the project's folder")
    program("dvc")  # a missing dvc is said as such, not as a repository without experiments
    try:
        listed = _dvc(repo, "exp", "list", "--all-commits", "--name-only", as_json=False)
    except LorasentError:  # not a DVC repository: no experiments
        listed = ""
    experiments = sorted(set(listed.split()))
    unknown = [rev for rev in unknown if rev not in experiments]
    if not unknown:
        return
    branches, tags = (_git_lines(repo, "for-each-ref", "--format=%(refname:short)", refs) or []
                      for refs in ("refs/heads", "refs/tags"))
    names = list(dict.fromkeys([*experiments, *branches, *tags]))
    parts = []
    for rev in unknown:
        close = difflib.get_close_matches(rev, names, n=3)
        parts.append(f"unknown revision {rev!r} ({revs[rev]})" + (
            f"; did you mean {' or '.join(repr(name) for name in close)}?" if close else
            ": not a commit, branch, tag or experiment here."))
    raise LorasentError(
        "compare: " + "; ".join(parts) + f" Experiments: {_listing(experiments)}; "
        f"branches: {_listing(branches)}; tags: {_listing(tags)} (`git log --oneline` "
        "lists the commits)")


def _listing(names: list[str], limit: int = 20) -> str:
    if not names:
        return "none"
    more = f", … ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _git_lines(repo: Path, *args: str) -> list[str] | None:
    """The lines ``git args`` prints in ``repo``, None when it fails."""
    done = subprocess.run([program("git"), *args], cwd=repo, capture_output=True, text=True)
    return done.stdout.splitlines() if done.returncode == 0 else None


def _commits(repo: Path, *revs: str) -> dict[str, str]:
    """``{rev: short commit}`` for the revisions git resolves, experiments included
    (their refs are ``refs/exps/<xx>/<baseline>/<name>``)."""
    found = {}
    for rev in revs:
        for cmd in (["rev-parse", "--short", "--verify", "-q", f"{rev}^{{commit}}"],
                    ["for-each-ref", "--format=%(objectname:short)", f"refs/exps/*/*/{rev}"]):
            lines = _git_lines(repo, *cmd)
            if lines:
                found[rev] = lines[0].strip()
                break
    return found


# ----------------------------------------------------------------------------- plots


def _render_png(specs: list[dict[str, Any]], folder: Path) -> list[str]:
    """Draw each Vega-Lite spec of one plot to ``<plot name>.png`` in ``folder``; returns
    the file names."""
    import vl_convert

    names = []
    for i, spec in enumerate(s for s in specs if s.get("type") == "vega"):
        content = _static(spec["content"])
        title = content.get("title")
        title = title.get("text") if isinstance(title, dict) else title
        name = f"{_slug(title or 'plot')}{f'-{i}' if i else ''}.png"
        png = vl_convert.vegalite_to_png(content, vl_version=_vl_version(content), scale=1)
        (folder / name).write_bytes(png)
        names.append(name)
    return names


def _confusion_plots(repo: Path) -> set[str]:
    """The titles of ``dvc.yaml``'s confusion plots. The report draws its own matrices,
    the same picture from each side's ``metrics/eval.json``: revisions made before the
    plots drew ``metrics/confusion.json`` have only DVC's built-in ``confusion`` template
    on the predictions file, which drops the row of a class never predicted."""
    from lorasent.params import read_yaml

    path = repo / "dvc.yaml"
    plots = (read_yaml(path.read_text(encoding="utf-8"), path) or {}).get("plots", []) \
        if path.is_file() else []
    return {title for plot in plots if isinstance(plot, dict) for title, spec in plot.items()
            if isinstance(spec, dict) and str(spec.get("template", "")).startswith("confusion")}


def _confusion_pngs(sides: tuple[Side, Side], labels: list[str],
                    folder: Path) -> dict[str, list[str]]:
    """A K x K heatmap per predictor (adapter, zero-shot baseline), A beside B, actual
    classes on the rows and every cell drawn with its count, zeros too."""
    import vl_convert

    matrices = {
        "Confusion matrix, adapter (test split)":
            [(s, (s.evals or {}).get("confusion_matrix")) for s in sides],
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
        values = [{"revision": name, "actual": actual, "predicted": predicted,
                   "count": matrix.get(actual, {}).get(predicted, 0)}
                  for name, matrix in found for actual in order for predicted in order]
        top = max(v["count"] for v in values) or 1
        spec = {
            "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
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
        name = f"{_slug(title)}.png"
        (folder / name).write_bytes(vl_convert.vegalite_to_png(
            spec, vl_version=_vl_version(spec), scale=1))
        images[title] = [name]
    return images


def _static(spec: dict[str, Any]) -> dict[str, Any]:
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


# ---------------------------------------------------------------------------- report


def _markdown(c: Comparison, images: dict[str, list[str]], texts: dict[str, str] | str) -> str:
    """The report page. A stale side's dvc.lock (``c.runs``) marks each param change its
    metrics were not made with."""
    rev_a, rev_b, commits, params, metrics = c.rev_a, c.rev_b, c.commits, c.params, c.metrics
    sides, review, runs = c.sides, c.review, c.runs
    evals = metrics.get(str(EVAL_METRICS), {})
    a, b = (f"{rev} ({commits[rev]})" if rev in commits else rev for rev in (rev_a, rev_b))
    lines = [f"# lorasent: {rev_a} vs {rev_b}", "", review.summary(),
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
                             f"{evals[key][side]}")
    lines += ["", "## Params that differ", ""]
    changed = sorted(((f"{file}: {key}" if file != "params.yaml" else key, v,
                       _not_run(runs, file, key, v))
                      for file, keys in params.items() for key, v in keys.items()
                      if v.get("old") != v.get("new")), key=lambda row: row[0])
    if any(note for *_, note in changed):
        lines += ["A stale side's metrics were not made with every value below: the last "
                  "column gives the value its dvc.lock says they were made with.", ""]
        lines += _table(["param", "A", "B", "metrics made with (not reproduced)"],
                        ([f"`{k}`", _param(v.get("old")), _param(v.get("new")), note]
                         for k, v, note in changed))
    else:
        lines += params_table(c.changed_params())

    lines += ["", "## Metrics (test split)", ""]
    lines += _table(["metric", "A", "B", "Δ", "A 95% interval", "B 95% interval"],
                    ([name, *_row(evals.get(key)), *(_interval(s.evals, key) for s in sides)]
                     for key, name in HEADLINE if key in evals))
    if review.paired:
        lines += ["", "## Is the difference real? (paired, same test rows"
                  + ("; not a result: a side is stale)" if runs else ")"), ""]
        lines += paired_table(review.paired)
    lines += ["", "## Per class (test split)", ""]
    header = ["class"] + [f"{name} {side}" for _, name, delta in PER_CLASS
                          for side in ("A", "B", "Δ")[:3 if delta else 2]]
    lines += _table(header, ([label, *(cell for key, _, delta in PER_CLASS
                                       for cell in _row(evals.get(f"per_class.{label}.{key}"))
                                       [:3 if delta else 2])]
                             for label in _labels(params, evals)))
    lines += ["", "## Confusion matrices (test split; rows: actual, columns: predicted)", ""]
    for side, s in zip("AB", sides, strict=True):
        matrix = (s.evals or {}).get("confusion_matrix")
        if matrix:
            lines += [f"{side} ({s.rev}), adapter:", ""]
            lines += _table(["actual \\ predicted", *matrix],
                            ([actual, *(str(n) for n in row.values())]
                             for actual, row in matrix.items())) + [""]
    if review.paired:
        lines += ["## Flipped texts", ""] + _flipped(review, texts) + [""]
    training = [(name, metrics.get(file, {}).get(key)) for file, key, name in TRAINING]
    if any(v for _, v in training):
        lines += ["## Training (dvclive)", ""]
        lines += _table(["metric", "A", "B", "Δ"], ([name, *_row(v)] for name, v in training if v))
        lines += [""] + [line for busy in _busy(sides) for line in (busy, "")]
    lines += ["## Plots", ""]
    for title, names in images.items():
        lines += [f"### {title}", ""] + [f"![{title}]({name})" for name in names] + [""]
    lines += ["## Every metric (`dvc metrics diff --all --md`)", "", "<details>",
              "<summary>All keys of every metrics file</summary>", "", c.metrics_md.strip(), "",
              "</details>", ""]
    return "\n".join(lines)


def _not_run(runs: dict[str, dict[str, Any]] | None, file: str, key: str,
             diff: dict[str, Any]) -> str:
    """For a param that differs: the value each stale side's metrics were made with,
    where its dvc.lock holds another than its params file (empty when none)."""
    said = []
    for side, end in (("A", "old"), ("B", "new")):
        ran = [v for v in _ran_with((runs or {}).get(side) or {}, file, key)
               if diff.get(end) not in (v, str(v))]  # DVC gives a list param as its repr
        if ran:
            said.append(f"{side}: {_param(ran[0])}")
    return "; ".join(said)


def paired_table(p: PairedComparison) -> list[str]:
    """Markdown lines: Δ accuracy and Δ macro-F1 with their paired intervals, McNemar's
    test, and each actual class's rows B fixed and broke; numbers as in the verdict."""
    rows = [[name, _signed(delta), f"[{_signed(low)}, {_signed(high)}]"]
            for name, delta, (low, high) in (("Δ accuracy", p.delta_accuracy, p.delta_accuracy_ci),
                                             ("Δ macro-F1", p.delta_macro_f1, p.delta_macro_f1_ci))]
    lines = _table(["B − A", "value", "paired bootstrap 95% interval"], rows)
    lines += ["", f"McNemar's exact test on the {p.rows} rows: {p.only_b_right} right only in B, "
                  f"{p.only_a_right} right only in A, p = {_p(p.p_value)}.", ""]
    lines += _table(["actual class", "rows B fixed (A wrong, B right)",
                     "rows B broke (A right, B wrong)"],
                    ([label, str(f["fixed"]), str(f["broken"])] for label, f in p.flips.items()))
    return lines


def params_table(changed: Sequence[tuple[str, Any, Any]]) -> list[str]:
    """Markdown lines: a table of ``(key, A's value, B's value)``, or "None."."""
    return _table(["param", "A", "B"], ([f"`{k}`", _param(old), _param(new)]
                                        for k, old, new in changed)) if changed else ["None."]


def _interval(evals: dict[str, Any] | None, key: str) -> str:
    low, high = ((evals or {}).get(f"{key}_ci95_{end}") for end in ("low", "high"))
    return "—" if low is None or high is None else f"[{_fmt(low)}, {_fmt(high)}]"


def _texts(repo: Path, review: Review) -> dict[str, str] | str:
    """``{row id: text}`` of the paired rows from the local test split, or why not."""
    path = repo / SPLIT_DIR / "test.jsonl"
    how = ("`dvc pull data/split` (or `dvc repro split`) at the revision to see them; "
           "texts never enter git")
    if review.rows is None:
        return ""
    if not path.is_file():
        return f"The test split is not here ({SPLIT_DIR / 'test.jsonl'}): {how}."
    from lorasent.artifacts import read_jsonl
    from lorasent.split import row_id

    texts = {r.get("id") or row_id(r["text"]): r["text"] for r in read_jsonl(path)}
    if not set(review.rows[0].ids) <= set(texts):
        return f"The local {SPLIT_DIR / 'test.jsonl'} holds other rows than A and B: {how}."
    return texts


def _flipped(review: Review, texts: dict[str, str] | str) -> list[str]:
    """Up to :data:`FLIPPED_TEXTS` rows each way, those whose actual class's probability
    moved most first."""
    if isinstance(texts, str):
        return [texts]
    assert review.rows is not None
    labels, (a, b) = review.labels, review.rows
    moved = [b.probabilities[i, y] - a.probabilities[i, y] for i, y in enumerate(a.actual)]

    def cell(side: Predictions, i: int) -> str:
        k = side.predicted[i]
        return f"{labels[k]} ({side.probabilities[i, k]:.2f})"

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
            lines += _table(["text", "actual", "A (probability)", "B (probability)"],
                            ([_clip(texts[a.ids[i]]), labels[a.actual[i]], cell(a, i),
                              cell(b, i)] for i in shown))
        lines += [""]
    return lines


def _clip(text: str, limit: int = 200) -> str:
    """A user's text as one table cell: one line, at most ``limit`` characters, HTML and
    Markdown markup shown as written, never rendered."""
    import html

    text = " ".join(text.split())
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return re.sub(r"([\\`*_\[\]#!~])", r"\\\1", html.escape(text, quote=False))


def _labels(params: dict[str, Any], evals: dict[str, Any]) -> list[str]:
    """The classes in ``base.labels`` order (A's, then any that only B has); those of
    the per-class metrics when params.yaml has no labels."""
    from lorasent.params import read_yaml

    labels = params.get("params.yaml", {}).get("base.labels", {})
    # DVC writes a list param as its Python repr, which YAML (1.2, as DVC) reads back
    ordered = [label for side in ("old", "new") for label in
               (read_yaml(labels[side], "params.yaml: base.labels")
                if isinstance(labels.get(side), str)
                else labels.get(side) or [])]
    ordered += [k.split(".")[1] for k in evals if k.startswith("per_class.") and k.endswith(".f1")]
    return list(dict.fromkeys(ordered))


def _row(diff: dict[str, Any] | None) -> list[str]:
    """``[A, B, Δ]`` cells of one ``dvc metrics diff`` entry."""
    if not diff:
        return ["—", "—", "—"]
    return [_fmt(diff.get("old")), _fmt(diff.get("new")), _fmt(diff.get("diff"), signed=True)]


def _pair(diff: dict[str, Any]) -> str:
    old, new = _fmt(diff.get("old")), _fmt(diff.get("new"))
    return old if old == new else f"{old} (A), {new} (B)"


def _fmt(value: Any, signed: bool = False) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"`{value}`" if isinstance(value, list | dict) else str(value)
    if isinstance(value, int):
        return f"{value:+d}" if signed else f"{value}"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def _param(value: Any) -> str:
    """A param's value as params.yaml gives it: a float in full (``5e-05``, not the
    4 decimals of a metric), anything else as :func:`_fmt`."""
    return repr(value) if isinstance(value, float) else _fmt(value)


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
                  for row in rows]


def _html(text: str, folder: Path, title: str) -> str:
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


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-").lower() or "rev"
