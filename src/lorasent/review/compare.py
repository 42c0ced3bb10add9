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
- on the same rows too: Δ ECE, Δ NLL and Δ Brier score of the predictions files'
  probabilities (``lorasent.calibration.calibration_deltas``), and how many of the rows
  B fixed or broke a side's test-label audit (``metrics/label_issues.csv``) flags;
- each extra test set both sides have (eval.json's ``test_sets``, predictions in
  ``metrics/test_sets/<name>/``): its own paired verdict and report section, one line
  per set after the verdict, and a sentence ending the verdict when the sets disagree;
- scored on different rows: each side's interval, and no paired test;
- a group of runs on a side (``a,b,c`` or a pattern such as ``'base-seed*'`` matching
  experiment names; see ``lorasent seeds``): mean ± sd over the seeds and Welch's t-test;
- a side that is stale first (``dvc status`` for the workspace; a commit's dvc.lock
  against its own dvc.yaml and params): then no verdict is called a result;
- warnings a reviewer cannot miss (``lorasent.metrics.warnings_by_kind``, different
  rows): those about the change; one true of both sides is said once, as a note; a side
  trained on a busy machine is said beside the training times, the only numbers it
  affects;
- predictions files read strictly (:func:`lorasent.review.collect.read_predictions_strict`):
  columns by name, a damaged file one error naming revision, path, line and id;
- full K x K confusion matrices, actual classes on the rows as in scikit-learn.

A and B are anything DVC takes as a revision: a commit, a branch, a tag, an experiment
name (``dvc exp show``), and ``workspace`` for B (the files as they are now). The
report is a folder, written whole or not at all:

- ``verdict.md``: the verdict sentence and the warnings (the pull request comment's top);
- ``report.md``: the verdict, then the tables and links to the PNGs, for a pull request;
- ``report.html``: the same page with the PNGs inside it (``data:`` URIs); it opens
  offline, in any browser, alone;
- one PNG per plot, named after the plot (the reliability diagram and risk-coverage
  curve of both sides' predictions among them).

The three jobs are modules of their own: :mod:`lorasent.review.collect` reads,
:mod:`lorasent.review.verdict` judges, :mod:`lorasent.review.render` writes.
"""

from __future__ import annotations

from pathlib import Path

from lorasent.errors import LorasentError
from lorasent.output_guard import output_dir
from lorasent.paths import EVAL_METRICS
from lorasent.review.collect import (
    WORKSPACE,
    check_revisions,
    collect,
    expand_group,
    read_side,
    resolve_commits,
    run_dvc,
)
from lorasent.review.markup import md_text
from lorasent.review.render import (
    REPORT_HTML,
    REPORT_MD,
    VERDICT_MD,
    group_report,
    html_page,
    report_folder,
    write_report,
)
from lorasent.review.verdict import group_review


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
    group_a, group_b = expand_group(repo, rev_a), expand_group(repo, rev_b)
    if WORKSPACE in group_a:
        raise LorasentError("compare: A must be a revision (a commit, branch, tag or "
                            "experiment); only B may be 'workspace'")
    check_revisions(repo, {"A": group_a, "B": group_b})
    out = report_folder(rev_a, rev_b, out_dir, repo)
    if len(group_a) > 1 or len(group_b) > 1:
        return _compare_groups(repo, rev_a, rev_b, group_a, group_b, out)
    notes = [f"{side}: {md_text(repr(spec.strip()))} matches one run, {md_text(group[0])}, so "
             "A and B are "
             "compared as a plain pair, row by row; a comparison over seeds needs at least 2 "
             "runs on each side" for side, spec, group in (("A", rev_a, group_a),
                                                           ("B", rev_b, group_b))
             if group[0] != spec.strip()]
    return write_report(collect(repo, group_a[0], group_b[0], notes), out, repo)


def _compare_groups(repo: Path, spec_a: str, spec_b: str, group_a: list[str],
                    group_b: list[str], out: Path) -> Path:
    """A report on two groups of runs (one per seed): mean ± sd and Welch's t-test."""
    found = resolve_commits(repo, *group_a, *group_b)
    sides = {"A": [read_side(repo, rev, found) for rev in group_a],
             "B": [read_side(repo, rev, found) for rev in group_b]}
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
    review, tests = group_review(sides["A"], sides["B"])
    params = run_dvc(repo, "params", "diff", group_a[0], group_b[0], "--json")
    changed = [(key, v.get("old"), v.get("new")) for keys in params.values()
               for key, v in keys.items()
               if key != "base.seed" and v.get("old") != v.get("new")]
    text = group_report(spec_a, spec_b, sides, review, tests, changed)
    with output_dir(out, command="compare") as tmp:
        (tmp / VERDICT_MD).write_text(review.summary(), encoding="utf-8")
        (tmp / REPORT_MD).write_text(text, encoding="utf-8")
        (tmp / REPORT_HTML).write_text(html_page(text, tmp, f"lorasent: {spec_a} vs {spec_b}"),
                                       encoding="utf-8")
    return out
