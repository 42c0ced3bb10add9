"""``lorasent pr-comment``: the one comment a pull request keeps, from ``lorasent compare``.

`.github/workflows/metrics-diff.yml` runs it on the pull request's head with the base
branch's name and the pull request's comments (``gh api --paginate .../comments``). It
finds the comment an earlier run wrote (its first line is :func:`marker`, naming the head
that run compared), compares the base with this head, and, when that earlier head is
another commit git has, the earlier head with this one: what this push did. It writes
one folder, whole or not at all:

- ``<base>-vs-head/`` and ``previous-vs-head/``: :func:`lorasent.review.render.write_report`'s
  reports (the second only after a push that changed the head);
- ``comment.md``: the comment's body, a reviewer's minute: where B's commit holds a
  seeds record of its params (:mod:`lorasent.review.seeds_record`), first the verdict
  over those seeds against the strongest reference, B's own run's called "this seed";
  then each verdict, one line per
  test set when there are extra ones (rows, Δ accuracy with its interval, the verdict in
  a word), the warnings about the change (one true of both sides once, as a note), the
  params that differ (old → new), the paired table (Δ accuracy, Δ macro-F1, Δ ECE, Δ NLL
  and Δ Brier with their intervals, McNemar's p), each class's rows fixed and broken,
  then ``dvc metrics diff`` in a fold without the keys no reviewer reads (:data:`UNREAD`);
- ``comment-id``: the id of the earlier comment, to be edited instead of adding another;
  absent when there is none. The workflow's comment job does not read it (this job runs
  the pull request's code): it finds the same comment itself, by the same rule;
- ``comment.md`` is at most :data:`COMMENT_LIMIT` bytes (:func:`bounded`), which the
  workflow checks again before it posts.

The earlier comment is one the workflow's own identity wrote (:data:`BOT`, or ``author``):
a comment by anyone else that carries the marker is ignored, and said so
(:attr:`EarlierComment.ignored`), so a pull request's author can neither have the
workflow edit their comment nor choose the head "this push" is compared with. Every value
the pull request controls is written through :mod:`lorasent.review.markup`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lorasent.contracts import dump
from lorasent.errors import LorasentError
from lorasent.output_guard import output_dir
from lorasent.review.collect import (
    Comparison,
    check_revisions,
    collect,
    git_lines,
    resolve_commits,
)
from lorasent.review.markup import CELL_LIMIT, md_code, md_text
from lorasent.review.render import (
    REPORT_HTML,
    REPORT_MD,
    diff_cells,
    paired_table,
    param_cell,
    resample_notes,
    slug,
    table,
    with_interval_of,
    write_report,
)

T = TypeVar("T")
MARKER = "<!-- lorasent-pr-comment"  # the first line of the comment: marker(head)
# GitHub refuses a comment body longer than this ("Body is too long (maximum is 65536
# characters)", status 422 of the REST API's create and update issue comment), and then
# there is no comment at all.
GITHUB_COMMENT_LIMIT = 65_536
# comment.md's most, in UTF-8 bytes: GitHub's limit less a margin. A byte count is at
# least the count of characters and of UTF-16 code units, so the body fits however GitHub
# counts; the fold is cut first (:func:`bounded`), and the workflow refuses a longer body.
COMMENT_LIMIT = 60_000
BOT = "github-actions[bot]"  # the login GitHub gives the workflow's GITHUB_TOKEN
COMMENT_MD = "comment.md"
COMMENT_ID = "comment-id"
PREVIOUS = "previous-vs-head"
# Keys of `dvc metrics diff` the comment's fold leaves out (matched against the key, in
# any metrics file): each interval bound as its own row (the paired table gives the
# intervals that matter), confusion cells (the report draws the matrices), eval.json's
# copies of baseline.json, the intervals' method, and dvclive's step-level training
# records: runtimes, throughput, grad_norm, epoch, FLOPs and the scheduler's last
# learning rate, which reads as the param on a learning-rate pull request.
UNREAD = re.compile(r"_ci95_(low|high)$|(^|\.)confusion_matrix\.|^baseline\.|^intervals\."
                    r"|^(grad_norm|learning_rate|epoch|total_flos)$"
                    r"|^train\.(runtime|\w+_per_second)$"
                    # issue 30: the references' accuracies (copies of the baselines), the
                    # calibration's and the audit's fixed texts; of an extra test set, all
                    # but its headline, its ECE, its flagged rows and its warnings
                    r"|^references\.\w+\.(accuracy|relative_error_reduction_note)$"
                    # issue 58: of each reference, all but its reduction, Δ accuracy and
                    # verdict; the adapter's and the references' costs and notes
                    r"|^references\.\w+\.(macro_f1|method|per_class\.|cost(\.|$)"
                    r"|paired\.(?!(delta_accuracy|verdict)$))|^reference_notes\.|^cost\."
                    r"|^calibration\.(ece_bins|temperature_note|interval_method)$"
                    r"|^label_issues\.(method|file)$"
                    r"|^test_sets\.[^.]+\.(?!(test_rows|accuracy|macro_f1|relative_error_reduction"
                    r"|reference|warnings|calibration\.(scaled\.)?ece|label_issues\.rows)$)")


def marker(head: str) -> str:
    """The hidden first line of the comment: ``<!-- lorasent-pr-comment head=<sha> -->``."""
    return f"{MARKER} head={head} -->"


MARKER_LINE = re.compile(re.escape(MARKER) + r" head=([0-9a-f]{7,40}) -->(\n|$)")


@dataclass(frozen=True)
class EarlierComment:
    """The comment an earlier run posted: its GitHub id, and the head it compared; the
    ids of the comments that carry the marker but were written by someone else
    (``ignored``), and of those by the workflow's identity whose marker does not parse
    (``damaged``)."""

    id: int | None
    head: str | None
    ignored: tuple[int, ...] = ()
    damaged: tuple[int, ...] = ()

    def ignored_line(self, author: str) -> str:
        """One line naming the ignored comments; empty when there are none."""
        if not self.ignored:
            return ""
        return (f"ignored comment {', '.join(map(str, self.ignored))}: it carries the lorasent "
                f"marker but was not written by {author}, so it is neither edited nor read "
                "for the previous head")

    def damaged_line(self, author: str) -> str:
        """One line naming ``author``'s comments whose marker does not parse, and what to
        do; empty when there are none."""
        if not self.damaged:
            return ""
        ids = ", ".join(map(str, self.damaged))
        return (f"ignored comment {ids} by {author}: it starts with the lorasent marker, but "
                f"the marker does not parse (the first line must be `{marker('<sha>')}`, "
                "<sha> 7 to 40 hex digits), so it is neither edited nor read for the previous "
                f"head{'' if self.id is not None else ' and a new comment is posted'}; delete "
                f"comment {ids} on the pull request (or restore its first line) to keep one "
                "lorasent comment")


def earlier_comment(text: str, source: str, author: str = BOT) -> EarlierComment | None:
    """The last comment in ``text`` written by ``author`` (its ``user.login``) whose body
    starts with a :func:`marker` that parses; None if there is none and no other comment
    carries the marker. A comment by anyone else that starts with :data:`MARKER` is
    listed in ``ignored``, one by ``author`` whose marker does not parse in ``damaged``
    (then ``id`` and ``head`` may be None).

    ``text`` is what ``gh api --paginate repos/<o>/<r>/issues/<n>/comments`` prints: one
    JSON array of comment objects (``id``, ``body``, ``user``: ``{login, type}``, as
    GitHub's REST API "list issue comments" returns them) per page, one after the other.

    Raises:
        LorasentError: ``author`` is empty; ``text`` is empty, or not such arrays; names
            ``source`` and the offset.
    """
    if not author.strip():
        raise LorasentError("pr-comment: --author is empty; give the login the workflow "
                            f"posts as ({BOT} for the GITHUB_TOKEN)")
    if not text.strip():
        raise LorasentError(f"pr-comment: {source}: empty; `gh api --paginate` prints [] for "
                            "a pull request without comments, so an empty file means it "
                            "failed: pass what it printed")
    decoder, at, comments = json.JSONDecoder(), 0, []
    while at < len(text.rstrip()):
        while text[at].isspace():
            at += 1
        try:
            page, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as err:
            raise LorasentError(f"pr-comment: {source}: not the JSON of `gh api --paginate` "
                                f"({err.msg} at character {err.pos}); pass the comments "
                                "exactly as gh prints them") from None
        if not isinstance(page, list) or not all(isinstance(c, dict) for c in page):
            raise LorasentError(f"pr-comment: {source}: a page that is not a list of comment "
                                f"objects at character {at}; pass the output of `gh api "
                                "--paginate repos/<owner>/<repo>/issues/<number>/comments`")
        comments += page
    found: tuple[int, str] | None = None
    ignored, damaged = [], []
    for comment in comments:
        body = str(comment.get("body") or "")
        if not body.startswith(MARKER):
            continue
        user = comment.get("user")
        head = MARKER_LINE.match(body)
        own = isinstance(user, dict) and user.get("login") == author \
            and isinstance(comment.get("id"), int)
        if own and head:
            found = (comment["id"], head.group(1))
        elif own:
            damaged.append(comment["id"])
        else:
            ignored.append(comment.get("id"))
    if found is None and not ignored and not damaged:
        return None
    shown = tuple(i if isinstance(i, int) else -1 for i in ignored)
    return EarlierComment(found[0] if found else None, found[1] if found else None,
                          ignored=shown, damaged=tuple(damaged))


def pr_comment(base: str, out: str | Path, comments: str | None = None,
               pr: str | None = None, run_url: str | None = None,
               repo: str | Path = ".", author: str = BOT,
               say: Callable[[str], object] = print) -> Path:
    """Write the folder ``out`` (see the module): the reports and the comment on the
    checked-out head (``HEAD``) against branch ``base``, and against the head of the
    earlier comment found in ``comments`` (the text of ``gh api --paginate``). ``pr``
    (the pull request's number) and ``run_url`` (the workflow run, whose artifacts hold
    the reports) go into the comment's last lines; ``author`` is the login the workflow
    posts as (:func:`earlier_comment`); ``say`` gets the one line naming the comments
    that carry the marker but are not ``author``'s, and the one naming ``author``'s whose
    marker does not parse, if any.

    Raises:
        LorasentError: as :func:`lorasent.review.compare.compare` for either comparison, and as
            :func:`earlier_comment`; ``HEAD`` is not a commit.
    """
    repo, out = Path(repo), Path(out)
    head = next(iter(git_lines(repo, "rev-parse", "--verify", "-q", "HEAD^{commit}") or []),
                None)
    if head is None:
        raise LorasentError(f"pr-comment: {repo.resolve()} has no HEAD commit; run it in a "
                            "checkout of the pull request's head")
    earlier = earlier_comment(comments, "--comments", author) if comments is not None else None
    for line in (earlier.ignored_line(author), earlier.damaged_line(author)) if earlier else ():
        if line:
            say(f"pr-comment: {line}")
    check_revisions(repo, {"base": [base]}, command="pr-comment")
    against_base = _own(collect, repo, base, "HEAD")
    previous: Comparison | str | None = None  # the comparison, or why there is none
    if earlier and earlier.head and earlier.head != head[:len(earlier.head)]:
        known = resolve_commits(repo, earlier.head).get(earlier.head)
        previous = (_own(collect, repo, known, "HEAD") if known else
                    f"The head of the previous run ({earlier.head[:7]}) is not in this clone "
                    "(a force-push rewrote it?), so there is no verdict against it.")
    base_folder = f"{slug(base)}-vs-head"
    seeds = seeds_line(repo, against_base)
    with output_dir(out, command="pr-comment") as tmp:
        write_report(against_base, tmp / base_folder, repo)
        if isinstance(previous, Comparison):
            write_report(previous, tmp / PREVIOUS, repo)
        text = comment_text(head, base, against_base, previous, pr, run_url, base_folder,
                            seeds=seeds)
        (tmp / COMMENT_MD).write_text(text, encoding="utf-8")
        if earlier and earlier.id is not None:
            (tmp / COMMENT_ID).write_text(f"{earlier.id}\n", encoding="utf-8")
    return out


def comment_text(head: str, base: str, against_base: Comparison,
                 previous: Comparison | str | None, pr: str | None, run_url: str | None,
                 base_folder: str, limit: int = COMMENT_LIMIT, seeds: str | None = None
                 ) -> str:
    """The comment's Markdown: :func:`marker`, ``seeds`` (:func:`seeds_line`, where B has
    a seeds record of its params), the comparison against ``base``, the one against the
    previous head (or why there is none), the fold, the footer; at most ``limit`` UTF-8
    bytes (:func:`bounded`: the fold is cut first)."""
    short = _short(against_base, "HEAD")
    lines = [marker(head), f"### lorasent: B, this pull request's head ({short}), against "
             f"A, {md_code(base)} ({_short(against_base, base)})", ""]
    lines += [seeds, ""] if seeds else []
    lines += _section(against_base, md_text(base))
    if previous is not None:
        lines += ["", f"### This push: B, the head ({short}), against A, the previous head"
                  + (f" ({previous.rev_a})" if isinstance(previous, Comparison) else ""), ""]
        lines += [previous] if isinstance(previous, str) else \
            _section(previous, "previous head", tables=False)
    # an HTML block: Markdown's backslashes show there, its references and <br> do not
    fold = ["", "<details>", f"<summary>Every metric that changed against <code>"
            f"{md_text(base)}</code> (<code>dvc metrics diff</code>, less the keys no "
            "reviewer reads)</summary>", ""]
    fold += _metrics_diff(against_base, base)
    fold += ["", "</details>", ""]
    where = f"the `lorasent-report` artifact of [this run]({run_url})" if run_url else \
        "the folder this comment was written to"
    fetch = f"`git fetch origin pull/{pr}/head`, then " if pr else ""
    locally = f"{fetch}`make compare A={_short(against_base, base)} B={short}`"
    push = (f"; this push: `make compare A={previous.rev_a} B={short}`"
            if isinstance(previous, Comparison) else "")
    foot = [f"Per-class tables, confusion matrices, flipped texts and loss curves: {where} "
            f"(open `{base_folder}/{REPORT_HTML}`). Locally: {locally} ({md_code(base)} as "
            f"compared here){push}."]
    rest = f"{where} (`{base_folder}/{REPORT_MD}`, which has every metric), or locally {locally}"
    return bounded(lines, fold, foot, rest, limit)


def bounded(head: list[str], fold: list[str], foot: list[str], rest: str,
            limit: int = COMMENT_LIMIT) -> str:
    """The comment's lines ``head``, ``fold`` and ``foot`` joined, at most ``limit`` UTF-8
    bytes (:data:`COMMENT_LIMIT`): whole when they fit; else the fold's table (``fold``:
    the ``<details>`` block, its table's header ending at the first ``|---`` line) loses
    its last rows, and a line inside the fold says how many and that they are in ``rest``
    (Markdown: where the whole report is); when even the fold's header does not fit, the
    fold goes and ``head`` loses its last lines, the verdict first kept, with such a
    line. Lines are kept whole, so a table cut stays a table."""
    def size(lines: list[str]) -> int:
        return len(("\n".join(lines) + "\n").encode("utf-8"))

    if size(head + fold + foot) <= limit:
        return "\n".join(head + fold + foot) + "\n"
    table = next((i for i, line in enumerate(fold) if line.startswith("|---")), None)
    close = fold.index("</details>") if "</details>" in fold else len(fold)
    end = close - 1 if table is not None and fold[close - 1] == "" else close
    rows = fold[table + 1:end] if table is not None else []

    def note(left: int, what: str) -> str:
        said = f"{left} more {what} do not" if left != 1 else f"1 more {what[:-1]} does not"
        return (f"Cut here: {said} fit in one comment (GitHub takes "
                f"{GITHUB_COMMENT_LIMIT:,} characters at most); the rest is in {rest}.")

    if table is not None:
        opening, closing = fold[:table + 1], ["", note(len(rows), "rows"), *fold[end:]]
        kept = _fitting(rows, head + opening + closing + foot, limit, size)
        if kept is not None:
            closing[1] = note(len(rows) - kept, "rows")
            return "\n".join(head + opening + rows[:kept] + closing + foot) + "\n"
    kept = _fitting(head, ["", note(len(head), "lines"), ""] + foot, limit, size) or 0
    return "\n".join(head[:kept] + ["", note(len(head) - kept, "lines"), ""] + foot) + "\n"


def _fitting(lines: list[str], fixed: list[str], limit: int,
             size: Callable[[list[str]], int]) -> int | None:
    """How many of ``lines``, from the first, fit within ``limit`` bytes beside ``fixed``
    (one line break each); None when not even ``fixed`` fits."""
    room = limit - size(fixed)
    if room < 0:
        return None
    kept = 0
    for line in lines:
        room -= len(line.encode("utf-8")) + 1
        if room < 0:
            break
        kept += 1
    return kept


def seeds_line(repo: Path, c: Comparison) -> str | None:
    """One Markdown line on B (``HEAD``) over seeds: the verdict against the strongest
    reference of the seeds record B's commit holds for its params (less ``base.seed``:
    :func:`lorasent.review.seeds_record.committed_seeds_record`), then B's own run's
    verdict as "this seed (N)", saying where one seed's better or worse is not the
    group's; a warning line where B's record is damaged; None without a record of B's
    params. The record is the pull request's: its text goes through :func:`md_text`."""
    from lorasent.review.seeds_record import (
        SEEDS_RECORD,
        committed_seeds_record,
        group_line,
        params_at,
        seed_line,
        seed_of,
    )

    at = _short(c, "HEAD")
    warnings: list[str] = []
    params = params_at(repo, at)
    record = committed_seeds_record(params, repo, at, warn=warnings.append,
                                    source=str(SEEDS_RECORD))
    if record is None:
        return f"⚠ B ({at}): {md_text(warnings[0], 3 * CELL_LIMIT)}" if warnings else None
    line = group_line(record, f"{SEEDS_RECORD} at B")
    evals = c.sides[1].evals
    if evals is not None and (verdict := evals.strongest_verdict()):
        ref = (evals.references or {}).get(evals.strongest_supervised or "")
        word = ref.paired.verdict if ref is not None and ref.paired is not None else None
        line += "; " + seed_line(record, seed_of(params), verdict, evals.strongest_supervised,
                                 word)
    return f"**Over seeds:** B ({at}) {md_text(line, 3 * CELL_LIMIT)}."


def _section(c: Comparison, name_a: str, tables: bool = True) -> list[str]:
    """One comparison: verdict, warnings, params; with ``tables``, the notes true of both
    sides, the paired table and each class's flips (the report has them all)."""
    lines = [c.review.summary(notes=tables).rstrip(), ""]
    if tables:  # each side's own numbers: what the deltas are of
        lines += table(["test split", f"A ({name_a})", "B (head)"],
                        ([name, *(with_interval_of(s.evals, key) for s in c.sides)]
                         for key, name in (("accuracy", "accuracy [95% interval]"),
                                           ("macro_f1", "macro-F1 [95% interval]"))))
        lines += resample_notes([dump(s.evals) if s.evals else None for s in c.sides]) + [""]
    changed = c.changed_params()
    lines += ([f"Params that differ ({name_a} → head): " + "; ".join(
        f"{md_code(key)} {param_cell(old)} → {param_cell(new)}" for key, old, new in changed)
        + "."]
              if changed else [f"No param differs from {name_a}."])
    if tables and c.review.paired:
        lines += [""] + paired_table(c.review.paired, c.review.calibration)
    return lines


def _metrics_diff(c: Comparison, base: str) -> list[str]:
    """``dvc metrics diff``'s changed keys as its Markdown table, less :data:`UNREAD`,
    sorted by file and key (DVC gives them in no fixed order)."""
    rows = [[md_text(path), md_text(key), *diff_cells(v)]
            for path, keys in sorted(c.metrics.items()) for key, v in sorted(keys.items())
            if v.get("old") != v.get("new") and not UNREAD.search(key)
            and not isinstance(v.get("old", v.get("new")), list | dict | str)]
    return table(["Path", "Metric", md_text(base), "head", "Change"], rows) if rows else \
        ["No metric a reviewer reads changed."]


def _own(func: Callable[..., T], *args: Any) -> T:
    """``func(*args)``, its errors said as pr-comment's, not compare's."""
    try:
        return func(*args)
    except LorasentError as err:
        raise LorasentError(f"pr-comment: {str(err).removeprefix('compare: ')}") from None


def _short(c: Comparison, rev: str) -> str:
    return c.commits.get(rev, rev)
