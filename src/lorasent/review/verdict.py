"""The judgement on two revisions' data, once read: pure functions, no git and no DVC.

From each side's committed metrics and predictions (:class:`Side`, read by
:mod:`lorasent.review.collect`): the verdict sentence and what a reviewer must not miss
(:class:`Review`):

- scored on the same test rows: Δ accuracy and Δ macro-F1 with paired-bootstrap 95%
  intervals and McNemar's exact test (``lorasent.statistics``); "Not settled" when the
  two disagree; Δ ECE, Δ NLL and Δ Brier of the probabilities with their paired
  intervals (``lorasent.calibration.calibration_deltas``); how many of the rows B fixed
  or broke a side's test-label audit flags (:func:`flagged_note`);
- each extra test set both sides have (``test_sets`` of eval.json): the same paired
  verdict, and one sentence when the sets disagree (:func:`disagreement`);
- scored on different rows, with other classes or other gold labels: no paired test, and
  why;
- groups of runs (one per seed): Welch's t-test (:func:`group_review`), on the test split
  and on each extra test set every run has;
- warnings (``lorasent.metrics.warnings_by_kind``): a kind only one side has is about the
  change; one both have is one note;
- a stale side (:class:`Stale`) is said first, and then no verdict is called a result.

Every text of a :class:`Review` is Markdown: each value in it that a data file, git or a
user controls (revision and set names, labels, row ids, file names, changed params, the
warnings eval.json holds, the callers' ``notes``, which they write so) is written through
:func:`lorasent.review.markup.md_text` where the sentence is made.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lorasent.calibration import calibration_deltas
from lorasent.contracts import EvalMetrics, ValidationMetrics, dump
from lorasent.metrics import NOT_BETTER, Predictions, warnings_by_kind
from lorasent.review.markup import SENTENCE_LIMIT, md_code, md_text
from lorasent.statistics import (
    ALPHA,
    GroupComparison,
    PairedComparison,
    group_comparison,
    paired_comparison,
    resamples_said,
    with_interval,
)

SHOWN_IDS = 5  # ids listed when rows differ


def _some(ids: Iterable[str]) -> str:
    ordered = sorted(ids)
    more = f", … ({len(ordered) - SHOWN_IDS} more)" if len(ordered) > SHOWN_IDS else ""
    return ", ".join(map(md_text, ordered[:SHOWN_IDS])) + more


@dataclass(frozen=True)
class LabelIssue:
    """One row of a test-label audit (``metrics/label_issues.csv``): a test row whose
    given label cleanlab finds likely wrong."""

    rank: int               # 1: the most likely mislabelled
    id: str                 # the test row's id
    actual: str             # the given label
    suggested: str          # the model's argmax
    self_confidence: float  # the model's probability of the given label, in [0, 1]


@dataclass(frozen=True)
class Side:
    """What one revision committed: its metrics, predictions and training record; for an
    extra test set (``test_sets``), its predictions and label audit only."""

    rev: str
    evals: EvalMetrics | None      # metrics/eval.json
    baseline: dict[str, Any] | None
    predictions: Predictions | None
    predictions_error: str | None  # why there are no predictions to pair
    train: dict[str, Any] | None   # metrics/provenance/train.json
    # metrics/label_issues.csv by row id, in rank order; None: no audit committed
    label_issues: dict[str, LabelIssue] | None = None
    # eval.json's test_sets, by name, each with its own predictions and label audit
    test_sets: dict[str, Side] = field(default_factory=dict)
    # metrics/validation.json; None: not committed (a run before train wrote it) or damaged
    validation: ValidationMetrics | None = None


@dataclass(frozen=True)
class Stale:
    """A side whose metrics are not of its params: stages out of date, and what changed."""

    stages: list[str]
    changed: list[str]  # ``params.yaml train.lr``, ``src/lorasent/stages/train.py``, ``command``
    by: str  # who says so: "`dvc status`" or "its dvc.lock"

    def sentence(self, who: str, metrics: str = "its metrics", params: str = "its params",
                 fix: str = "run dvc repro") -> str:
        """``<who> is stale: <by> says <stages> ... out of date (changed: ...), so <metrics>
        are not of <params>; <fix>``."""
        verb = "is" if len(self.stages) == 1 else "are"
        return (f"{who} is stale: {self.by} says {', '.join(map(md_text, self.stages))} "
                f"{verb} out of date (changed: {', '.join(map(md_text, self.changed))}), so "
                f"{metrics} "
                f"{'is' if metrics.endswith('.json') else 'are'} not of {params}; {fix}")

    def line(self, metrics: str, shown: int = 3) -> str:
        """One short line for a terminal: ``<metrics> is stale (<stages> out of date):
        <what changed>; run dvc repro``, what changed split into the params (``params
        changed: train.lr``) and the files, code or data (``code or data changed:
        src/lorasent/stages/train.py and 12 more``), at most ``shown`` of each named."""
        def some(items: list[str]) -> str:
            more = len(items) - shown
            return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")

        params = [c.split(" ", 1)[1] for c in self.changed
                  if c.startswith("params.yaml ") and " " in c]
        files = [c for c in self.changed if not (c.startswith("params.yaml ") and " " in c)]
        what = [f"{kind} changed: {some(items)}" for kind, items in (
            ("params", params), ("code or data", files)) if items]
        return (f"{metrics} is stale ({some(self.stages)} out of date): {'; '.join(what)}; "
                "run dvc repro")


@dataclass(frozen=True)
class Review:
    """The verdict on B against A, and what a reviewer must not miss."""

    verdict: str
    warnings: list[str]
    labels: list[str]
    paired: PairedComparison | None = None
    rows: tuple[Predictions, Predictions] | None = None  # A's and B's, rows in A's order
    notes: list[str] = field(default_factory=list)  # true of A and B alike: not the change
    # ``lorasent.calibration.calibration_deltas`` of the paired rows' probabilities
    calibration: dict[str, Any] | None = None
    # {row id: "A", "B" or "A, B"}: the rows B fixed or broke that a side's audit flags
    flagged: dict[str, str] = field(default_factory=dict)
    sets: dict[str, Review] = field(default_factory=dict)  # each extra test set's review
    unpaired: str = ""  # why there is no paired test, in a few words, for its set's line
    # groups over seeds with extra test sets: each set's accuracy test, the test split first
    group_sets: dict[str, GroupComparison] = field(default_factory=dict)
    # each side's verdict against its strongest supervised reference (Markdown), B first
    against_references: list[str] = field(default_factory=list)

    def summary(self, notes: bool = True) -> str:
        """The verdict, one line per test set (:func:`set_lines`, with extra sets), each
        side's verdict against its strongest supervised reference, the warnings about the
        change, then (with ``notes``) the notes true of both sides, as Markdown: the top
        of the report and of the pull request comment."""
        lines = [f"**{self.verdict}**", ""] + (set_lines(self) + [""]
                                               if self.sets or self.group_sets else [])
        said = [f"- {line}" for line in self.against_references]
        said += [f"- ⚠ {w}" for w in self.warnings] + [f"- Note: {n}" for n in self.notes
                                                       if notes]
        return "\n".join(lines + said + ([""] if said else []))


MAIN_SPLIT = "the test split"  # the main test set, as sentences name it


def set_lines(review: Review) -> list[str]:
    """Markdown lines, one per test set (the test split first, then each extra set both
    sides have): ``- reviews-zh (400 rows): worse, Δ accuracy −0.050 [−0.090, −0.012]``,
    the verdict in a word (:func:`outcome`); ``- reviews-zh: no paired test`` without one.
    Groups over seeds (``group_sets``): ``- reviews-zh: worse over seeds, Δ accuracy
    −0.045, Welch's t-test p = 0.012`` (:func:`group_outcome`)."""
    if review.group_sets:
        return [f"- {md_text(name.removeprefix('the '))}: {group_outcome(g)} over seeds, "
                f"Δ accuracy {delta_text(g.delta)}"
                + ("" if g.p_value is None else f", Welch's t-test {p_text(g.p_value)}")
                for name, g in review.group_sets.items()]

    def line(name: str, r: Review) -> str:
        p = r.paired
        return (f"- {md_text(name)} ({p.rows} rows): {outcome(p)}, Δ accuracy "
                f"{delta_text(p.delta_accuracy, *p.delta_accuracy_ci)}" if p else
                f"- {md_text(name)}: {outcome(p)}" + (f" ({r.unpaired})" if r.unpaired else ""))

    return [line(MAIN_SPLIT.removeprefix("the "), review),
            *(line(name, r) for name, r in review.sets.items())]


def judge(a: Side, b: Side, labels: list[str], stale: dict[str, Stale | None] | None = None,
            notes: Sequence[str] = ()) -> Review:
    """The verdict and warnings (``notes``, Markdown, first), on the test split and on
    each extra test set both sides have (a set only one side has is named in a
    warning); when the sets' verdicts differ, a sentence saying so ends the verdict
    (:func:`disagreement`). A side in ``stale`` is said first, and then no verdict is
    called a result: its metrics are not of its params."""
    review = _judged(a, b, labels)
    sets = {name: _judged(a.test_sets[name], b.test_sets[name], labels, name)
            for name in a.test_sets if name in b.test_sets}
    only = [f"test set {md_text(name)} is only in {side} ({md_text(s.rev)}), so it has no "
            "paired verdict"
            for side, s, other in (("A", a, b), ("B", b, a))
            for name in s.test_sets if name not in other.test_sets]
    said = [found.sentence(f"{side} ({md_text(s.rev)})") for side, s in (("A", a), ("B", b))
            if (found := (stale or {}).get(side))]
    verdict = review.verdict
    if said:
        verdict = (f"Not a result until then: the predictions on file give "
                   f"{measured_text(review.paired)}." if review.paired else review.verdict)
        verdict = f"{'. '.join(said)}. {verdict}"
    split = disagreement({MAIN_SPLIT: outcome(review.paired),
                          **{name: outcome(r.paired) for name, r in sets.items()}})
    against = [f"{side} ({md_text(s.rev)}), against the strongest reference trained on "
               f"its rows: {md_text(theirs)}" for side, s in (("B", b), ("A", a))
               if s.evals is not None and (theirs := s.evals.strongest_verdict())]
    return replace(review, verdict=f"{verdict} {split}".strip(),
                   warnings=[*notes, *only, *review.warnings], sets=sets,
                   against_references=against)


def _judged(a: Side, b: Side, labels: list[str], name: str | None = None) -> Review:
    """:func:`_paired_review` of one test set (``name``; None: the test split), with the
    calibration deltas of its paired rows and the note on the flipped rows a side's label
    audit flags."""
    review = _paired_review(a, b, labels, name)
    if review.rows is None:
        return review
    pa, pb = review.rows
    flagged = flagged_flips(review.rows, a.label_issues, b.label_issues)
    note = flagged_note(review.rows, flagged, a.label_issues, b.label_issues)
    return replace(review, calibration=calibration_deltas(pa.actual, pa.probabilities,
                                                          pb.probabilities),
                   flagged=flagged, notes=review.notes + ([note] if note else []))


def outcome(p: PairedComparison | None) -> str:
    """The verdict of :func:`paired_verdict` in a word: ``better``, ``worse``, ``not
    settled``, ``no detectable difference``; ``no paired test`` without ``p``."""
    if p is None:
        return "no paired test"
    if p.significant:
        return "better" if p.delta_accuracy > 0 else "worse"
    low, high = p.delta_accuracy_ci
    return ("not settled" if low > 0 or high < 0 or p.p_value < ALPHA
            else "no detectable difference")


def group_outcome(g: GroupComparison) -> str:
    """:func:`group_verdict` in a word, as :func:`outcome` words a paired one: ``better``,
    ``worse``, ``no detectable difference``; ``cannot be tested`` when neither group
    varies over its seeds."""
    if g.p_value is None:
        return "cannot be tested"
    if g.significant:
        return "better" if g.delta > 0 else "worse"
    return "no detectable difference"


_ON = {"better": "better", "worse": "worse", "not settled": "not settled",
       "no detectable difference": "not detectably different"}  # "B is <...> on <sets>"


def disagreement(outcomes: dict[str, str]) -> str:
    """One sentence when test sets' verdicts (``{set: outcome}``, :func:`outcome`)
    differ, sets without a paired test aside: ``The test sets disagree: B is better on
    the test split but worse on reviews-zh.``; empty when they agree."""
    groups: dict[str, list[str]] = {}
    for name, word in outcomes.items():
        if word in _ON:
            groups.setdefault(word, []).append(name)
    if len(groups) < 2:
        return ""
    parts = [f"{_ON[word]} on {_and([n if n == MAIN_SPLIT else md_text(n) for n in names])}"
             for word, names in groups.items()]
    return (f"The test sets disagree: B is "
            f"{_and(parts, last=' but ' if len(parts) == 2 else ' and ')}.")


def _and(items: list[str], last: str = " and ") -> str:
    """``a``, ``a and b``, ``a, b and c`` (``last`` before the last)."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])}{last}{items[-1]}"


def flipped_ids(rows: tuple[Predictions, Predictions]) -> list[str]:
    """The ids of the paired rows B fixed or broke (exactly one side right), in A's order."""
    a, b = rows
    flipped = (a.predicted == a.actual) != (b.predicted == a.actual)
    return [a.ids[i] for i in np.flatnonzero(flipped)]


def flagged_flips(rows: tuple[Predictions, Predictions], audit_a: dict[str, LabelIssue] | None,
                  audit_b: dict[str, LabelIssue] | None) -> dict[str, str]:
    """``{row id: "A", "B" or "A, B"}``: the rows B fixed or broke (:func:`flipped_ids`)
    whose test label A's or B's audit (``metrics/label_issues.csv``) flags, and whose."""
    found = {row_id: ", ".join(side for side, audit in (("A", audit_a), ("B", audit_b))
                               if row_id in (audit or {}))
             for row_id in flipped_ids(rows)}
    return {row_id: who for row_id, who in found.items() if who}


def flagged_note(rows: tuple[Predictions, Predictions], flagged: dict[str, str],
                 audit_a: dict[str, LabelIssue] | None,
                 audit_b: dict[str, LabelIssue] | None) -> str:
    """How many of the rows B fixed or broke a test-label audit flags, fixed and broken
    apart, and the counts without them: ``3 of the 12 rows B fixed or broke are likely
    label errors (cleanlab, flagged on A's or B's test-label audit): 1 of the 5 B fixed,
    2 of the 7 B broke; without them, B fixed 4 and broke 5. ...: <ids>.``; empty when
    neither side has an audit or B fixed and broke nothing.

    An audit flags rows whose label its own adapter confidently contradicts, so the flags
    of B's audit fall on rows B gets wrong (rows it broke), those of A's on rows A gets
    wrong (rows B fixed): a note from one side's audit alone says so.
    """
    a, b = rows
    flipped = flipped_ids(rows)
    audits = [side for side, audit in (("A", audit_a), ("B", audit_b)) if audit is not None]
    if not audits or not flipped:
        return ""
    fixed = {row_id for i, row_id in enumerate(a.ids) if b.predicted[i] == a.actual[i]} & set(
        flipped)
    broken = set(flipped) - fixed
    whose = " or ".join(f"{side}'s" for side in audits) + " test-label audit"
    one_side = ""
    if len(audits) == 1:
        mine, other = audits[0], "B" if audits == ["A"] else "A"
        one_side = (f" {other} has no audit (written before it existed). An audit flags the "
                    f"rows its own adapter gets wrong, so {mine}'s flags fall on rows "
                    f"{'B broke' if mine == 'B' else 'B fixed'}.")
    counts = (f": {len(fixed & set(flagged))} of the {len(fixed)} B fixed, "
              f"{len(broken & set(flagged))} of the {len(broken)} B broke; without them, B "
              f"fixed {len(fixed - set(flagged))} and broke {len(broken - set(flagged))}.")
    return (f"{len(flagged)} of the {len(flipped)} rows B fixed or broke "
            f"{'is a likely label error' if len(flagged) == 1 else 'are likely label errors'}"
            f" (cleanlab, flagged on {whose}){counts if flagged else '.'}{one_side}"
            f"{f' Flagged: {_some(flagged)}.' if flagged else ''}")


def side_warnings(a: Side, b: Side) -> tuple[list[str], list[str]]:
    """Each side's :func:`lorasent.metrics.warnings_by_kind`: ``(warnings, notes)``. A kind
    only one side has is a warning about the change (``A: ...``, ``B: ...``); a kind both
    have is one note, B's sentence with A's own figures after it where they differ."""
    in_a, in_b = (escaped_warnings(s.evals) for s in (a, b))
    warnings = [f"{side}: {text}" for side, mine, other in (("A", in_a, in_b), ("B", in_b, in_a))
                for kind, text in mine.items() if kind not in other]
    notes = [f"A and B alike, so not this change: {alike(in_a[kind], text)}"
             for kind, text in in_b.items() if kind in in_a]
    # first: an adapter not detectably better than a smaller classifier on the same rows
    lost = [w for w in warnings if NOT_BETTER in w]
    return [*lost, *_disagreeing(a, b), *_other_references(a, b),
            *(w for w in warnings if w not in lost)], notes


def _disagreeing(a: Side, b: Side) -> list[str]:
    """A warning for each side whose eval.json and predictions.csv are not of one run:
    other test rows, or another accuracy than the file's predictions give (beyond
    float rounding): the metrics are not those of the predictions that are paired."""
    found = []
    for side, s in (("A", a), ("B", b)):
        if s.evals is None or s.predictions is None:
            continue
        p = s.predictions
        rows, accuracy = len(p.ids), float(np.mean(p.actual == p.predicted))
        if rows != s.evals.test_rows or abs(accuracy - s.evals.accuracy) > 1e-9:
            found.append(
                f"{side} ({s.rev}): its eval.json (accuracy {s.evals.accuracy:.3f} over "
                f"{s.evals.test_rows} test rows) and predictions.csv ({accuracy:.3f} over "
                f"{rows}) are not of one run; rerun evaluate there (dvc repro) and commit "
                "both")
    return found


def _other_references(a: Side, b: Side) -> list[str]:
    """A warning when A and B measure the relative error reduction against other
    references (``evaluate.reference: auto`` picks per run): its Δ compares two baselines.
    B's reduction against A's reference is given when B's eval.json has it."""
    if not (a.evals and b.evals) or a.evals.reference == b.evals.reference:
        return []
    same = (b.evals.references or {}).get(a.evals.reference)
    against = (f"; against A's reference B's is {same.relative_error_reduction:.3f} (A: "
               f"{a.evals.relative_error_reduction:.3f})"
               if same and same.relative_error_reduction is not None
               and a.evals.relative_error_reduction is not None else "")
    return [f"A and B measure the relative error reduction against other references (A: "
            f"{md_text(a.evals.reference)}, B: {md_text(b.evals.reference)}), so its Δ "
            "compares two "
            f"baselines{against}"]


_HIDDEN = "lorasentvalue{}x"  # a name's stand-in while warnings_by_kind words a sentence


def escaped_warnings(evals: EvalMetrics | None) -> dict[str, str]:
    """:func:`lorasent.metrics.warnings_by_kind` of ``evals`` (``{}`` without), each
    class name and reference in its sentences written through
    :func:`~lorasent.review.markup.md_code` where the sentence quotes it as code, else
    :func:`~lorasent.review.markup.md_text`: the sentences are worded on stand-ins, then
    each stand-in is replaced (the kinds keep the names as they are)."""
    if evals is None:
        return {}
    values = dump(evals)
    names: dict[str, str] = {}

    def hide(name: Any) -> str:
        names[_HIDDEN.format(len(names))] = str(name)
        return _HIDDEN.format(len(names) - 1)

    matrix = values.get("confusion_matrix") or {}
    labels = {label: hide(label) for label in matrix}
    values["confusion_matrix"] = {labels[actual]: {labels.get(p, p): n for p, n in row.items()}
                                  for actual, row in matrix.items()}
    if isinstance(values.get("reference"), str):
        values["reference"] = hide(values["reference"])
    baseline = values.get("baseline")
    if isinstance(baseline, dict) and baseline.get("majority_class") is not None:
        values["baseline"] = {**baseline, "majority_class": hide(baseline["majority_class"])}
    stand_in = re.compile("`?" + _HIDDEN.format(r"\d+") + "`?")

    def shown(m: re.Match[str]) -> str:
        name = names[m.group().strip("`")]
        return md_code(name) if m.group().startswith("`") else md_text(name)

    return {re.sub(stand_in, lambda m: names[m.group().strip("`")], kind):
            stand_in.sub(shown, text) for kind, text in warnings_by_kind(values).items()}


def alike(text_a: str, text_b: str) -> str:
    """B's sentence, with A's words in brackets after the span of words that differs:
    ``accuracy 0.375 (A: 0.400) is below ...``, ``... it is 0.455 (A: 0.487)``."""
    a, b = text_a.split(" "), text_b.split(" ")
    if a == b:
        return text_b
    start = len(os.path.commonprefix([a, b]))
    end = len(os.path.commonprefix([a[start:][::-1], b[start:][::-1]]))
    return " ".join([*b[:len(b) - end], f"(A: {' '.join(a[start:len(a) - end])})",
                     *b[len(b) - end:]])


def busy(sides: Sequence[Side]) -> list[str]:
    """A sentence for each side trained on a busy machine: what that affects."""
    found = []
    for side, s in zip("AB", sides, strict=True):
        load = (s.train or {}).get("machine_load") or {}
        if load.get("busy"):
            found.append(f"{side} ({md_text(s.rev)}) trained on a busy machine (load "
                         f"{md_text(load.get('load_average'))} on "
                         f"{md_text(load.get('cpu_cores'))} cores): its "
                         "training time and examples per second are not comparable; that "
                         "affects runtimes only, not the metrics.")
    return found


def too_few_rows(rows: int, name: str | None = None) -> str:
    """The verdict on a test set (``name``; None: the test split) of ``rows`` rows, fewer
    than a paired test takes (2): what to set, the key of that set."""
    what, fix = (("the test split", "set split.test_size to more rows and rerun (dvc repro)")
                 if name is None else
                 (f"test set {md_text(name)}", f"give it more rows (its source, "
                  f"{md_code(f'evaluate.test_sets.{name}.source')}, or its "
                  f"{md_code(f'evaluate.test_sets.{name}.size')}: 0 keeps every row) and "
                  "rerun evaluate (dvc repro)"))
    return (f"No paired test: {what} has {rows} row{'' if rows == 1 else 's'}, too few for "
            "one (a bootstrap over one row draws it every time: no spread, no interval); "
            f"{fix}.")


def _paired_review(a: Side, b: Side, labels: list[str], name: str | None = None) -> Review:
    warnings, notes = side_warnings(a, b)
    pa, pb = a.predictions, b.predictions
    if pa is None or pb is None:
        why = a.predictions_error or b.predictions_error
        return Review(f"No paired test: {md_text(why, SENTENCE_LIMIT)}. Each side's own "
                      "interval, where it has one, is "
                      "in report.md's metrics table.",
                      warnings, labels, notes=notes)
    if set(pa.labels) != set(pb.labels):
        warnings.insert(0, f"A and B have other classes (A: {', '.join(map(md_text, pa.labels))};"
                           f" B: {', '.join(map(md_text, pb.labels))}): other base.labels, so "
                           "their metrics "
                           "are not paired")
        return Review("No paired test: A and B have other classes, so only each side's own "
                      "interval can be given (report.md's metrics table).", warnings, labels,
                      notes=notes)
    pb = in_order(pb, pa.labels)  # paired by column name, whatever the columns' order
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
    if len(pa.ids) < 2:  # issue 51: scored as such, so compared as such; the rest goes on
        return Review(too_few_rows(len(pa.ids), name), warnings, labels, notes=notes,
                      unpaired=f"{len(pa.ids)} row, too few for one")
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
    measured = measured_text(p)
    word = outcome(p)
    if word in ("better", "worse"):
        return f"B is {word} than A: {measured}."
    low, high = p.delta_accuracy_ci
    if word == "not settled":  # one test says so, the other not
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


def measured_text(p: PairedComparison) -> str:
    """Δ accuracy and Δ macro-F1 with their intervals, and McNemar's p; the intervals'
    resample count where they drew fewer than 10,000 (above 10,000 rows,
    :func:`lorasent.statistics.resamples_said`)."""
    low, high = p.delta_accuracy_ci
    f1_low, f1_high = p.delta_macro_f1_ci
    fewer = resamples_said(p.resamples)
    return (f"accuracy {delta_text(p.delta_accuracy, low, high)}, McNemar "
            f"{p_text(p.p_value)}; macro-F1 {delta_text(p.delta_macro_f1, f1_low, f1_high)}"
            + (f" (paired intervals of {fewer})" if fewer else ""))


def group_verdict(g: GroupComparison) -> str:
    """One sentence over the seeds, as :func:`paired_verdict` over rows."""
    measured = (f"{g.metric} {g.spread(g.a)} in A against {g.spread(g.b)} in B, "
                f"Δ {delta_text(g.delta)}")
    if g.p_value is None:
        return (f"Cannot be tested: {measured}; neither group varies over its seeds, so "
                "Welch's t-test is undefined.")
    measured += f", Welch's t-test {p_text(g.p_value)}"
    if g.significant:
        return f"B is {'better' if g.delta > 0 else 'worse'} than A over seeds: {measured}."
    return f"No detectable difference over seeds: {measured}."


def delta_text(value: float | None, low: float | None = None, high: float | None = None) -> str:
    """A difference as the verdict words it: ``+0.012 [−0.004, +0.027]`` (3 decimals, the
    typographic minus; :func:`lorasent.statistics.with_interval`)."""
    return with_interval(value, low, high, digits=3, signed=True, minus="−")


def p_text(value: float) -> str:
    """``p = 0.62``, or ``p < 0.001`` below that (never ``p = < 0.001``)."""
    return f"p = {value:.2g}" if value >= 0.001 else "p < 0.001"


def in_order(p: Predictions, labels: list[str]) -> Predictions:
    """``p`` with its classes (ids and probability columns) in the order of ``labels``,
    the same classes in another order: files are paired by column name."""
    if p.labels == labels:
        return p
    new = np.asarray([labels.index(label) for label in p.labels], dtype=np.int64)
    columns = [p.labels.index(label) for label in labels]
    return Predictions(p.ids, new[p.actual], new[p.predicted], p.probabilities[:, columns],
                       labels)


def class_order(params: dict[str, Any], evals: dict[str, Any]) -> list[str]:
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


def group_review(a: Sequence[Side], b: Sequence[Side]) -> tuple[Review, dict[str, GroupComparison]]:
    """The verdict over seeds of group B against group A (each side one run per seed, every
    one with its metrics): Welch's t-test of accuracy (which decides) and of macro-F1,
    and of accuracy on each extra test set every run has (eval.json's ``test_sets``: one
    line each under the verdict, and the sentence of :func:`disagreement` ending it when
    the sets' verdicts differ), each run's warnings, and a warning when a side has fewer
    than 3 runs.

    Returns:
        ``(review, {"accuracy": test, "macro_f1": test, "test_sets.<name>.accuracy":
        test, ...})``.

    Raises:
        ValueError: a group has fewer than 2 runs, or a run has no metrics.
    """
    evals = {name: [s.evals for s in runs] for name, runs in (("A", a), ("B", b))}
    if any(e is None for runs in evals.values() for e in runs):
        raise ValueError("every run of a group needs its metrics")
    tests = {key: group_comparison(name, *([getattr(e, key) for e in evals[n]] for n in "AB"))
             for key, name in (("accuracy", "accuracy"), ("macro_f1", "macro-F1"))}
    first = evals["A"][0]
    assert first is not None
    names = [name for name in first.test_sets
             if all(e is not None and name in e.test_sets for runs in evals.values() for e in runs)]
    sets = {MAIN_SPLIT: tests["accuracy"]}
    for name in names:
        sets[name] = tests[f"test_sets.{name}.accuracy"] = group_comparison(
            f"accuracy on {md_text(name)}",
            *([e.test_sets[name].accuracy for e in evals[n] if e is not None] for n in "AB"))
    warnings = [f"{name} {md_text(s.rev)}: {w}" for name, runs in (("A", a), ("B", b))
                for s in runs for w in escaped_warnings(s.evals).values()]
    if min(len(a), len(b)) < 3:
        warnings.append(f"{min(len(a), len(b))} runs on a side give Welch's t-test "
                        "little power: only large differences can show; 3 to 5 seeds a side "
                        "tell more")
    if not names:
        return Review(group_verdict(tests["accuracy"]), warnings, []), tests
    split = disagreement({name: group_outcome(g) for name, g in sets.items()})
    return Review(f"{group_verdict(tests['accuracy'])} {split}".strip(), warnings, [],
                  group_sets=sets), tests
