"""The pull request comment (issue 28) on a throwaway git + DVC repo of one stage: one
comment found by its marker, both verdicts, warnings about the change only, the fold;
and its pieces: the earlier comment in `gh api --paginate`'s output, shared warnings."""

import contextlib
import io
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from markdown_it import MarkdownIt

from conftest import REPO
from lorasent.contracts import EvalMetrics
from lorasent.errors import LorasentError
from lorasent.review.collect import Comparison
from lorasent.review.pr_comment import (
    COMMENT_LIMIT,
    GITHUB_COMMENT_LIMIT,
    MARKER_LINE,
    UNREAD,
    EarlierComment,
    comment_text,
    earlier_comment,
    marker,
    pr_comment,
)
from lorasent.review.verdict import Review, Side, alike, busy, paired_verdict, side_warnings
from lorasent.statistics import PairedComparison
from test_compare import git_dvc, make_metrics_repo

HEAD_A, HEAD_B = "a" * 40, "b" * 40
# `user` as GitHub's REST API "list issue comments" gives it
BOT_USER = {"login": "github-actions[bot]", "type": "Bot"}
REVIEWER = {"login": "octocat", "type": "User"}


def _pages(*pages: list[dict[str, Any]]) -> str:
    """``gh api --paginate``'s output; a comment without ``user`` is the workflow's."""
    return "".join(json.dumps([{"user": BOT_USER, **c} for c in page]) + "\n"
                   for page in pages)


def test_the_earlier_comment_is_the_last_that_starts_with_the_marker():
    text = _pages([{"id": 1, "body": marker(HEAD_A) + "\nold"}, {"id": 2, "body": "LGTM"}],
                  [{"id": 3, "body": "> " + marker(HEAD_B) + "\nquoted by a reviewer"}],
                  [{"id": 4, "body": marker(HEAD_B) + "\nnewer"}, {"id": 5, "body": None}])
    assert earlier_comment(text, "comments.json") == EarlierComment(4, HEAD_B)
    assert earlier_comment(_pages([{"id": 2, "body": "LGTM"}]), "c") is None
    assert earlier_comment("[]", "c") is None


def test_only_the_workflows_own_comment_is_edited_and_read():
    """Another user's comment that carries the marker (after the bot's, or alone) is
    neither edited nor read for the previous head, and is named in one line; so is a
    comment of the bot's whose marker does not parse."""
    theirs = {"id": 7, "body": marker(HEAD_B) + "\nplanted", "user": REVIEWER}
    text = _pages([{"id": 4, "body": marker(HEAD_A) + "\nmine"}], [theirs])
    found = earlier_comment(text, "c")
    assert found == EarlierComment(4, HEAD_A, ignored=(7,))
    assert found.ignored_line("github-actions[bot]") == (
        "ignored comment 7: it carries the lorasent marker but was not written by "
        "github-actions[bot], so it is neither edited nor read for the previous head")
    assert earlier_comment(_pages([theirs]), "c") == EarlierComment(None, None, ignored=(7,))
    other_bot = {**theirs, "user": {"login": "evil[bot]", "type": "Bot"}}
    broken = {"id": 8, "body": marker("not-a-sha") + "\n"}
    assert earlier_comment(_pages([other_bot, broken]), "c") == EarlierComment(
        None, None, ignored=(7,), damaged=(8,))
    # a configured identity
    assert earlier_comment(_pages([theirs]), "c", author="octocat") == EarlierComment(
        7, HEAD_B)


def test_the_bots_own_comment_with_a_damaged_marker_is_said_as_such():
    """Issue 51: it was reported as "not written by github-actions[bot]"."""
    broken = {"id": 8, "body": marker("not-a-sha") + "\nedited by hand"}
    found = earlier_comment(_pages([broken]), "c")
    assert found == EarlierComment(None, None, damaged=(8,))
    assert found.ignored_line("github-actions[bot]") == ""
    assert found.damaged_line("github-actions[bot]") == (
        "ignored comment 8 by github-actions[bot]: it starts with the lorasent marker, but "
        "the marker does not parse (the first line must be `<!-- lorasent-pr-comment "
        "head=<sha> -->`, <sha> 7 to 40 hex digits), so it is neither edited nor read for "
        "the previous head and a new comment is posted; delete comment 8 on the pull request "
        "(or restore its first line) to keep one lorasent comment")
    later = earlier_comment(_pages([broken, {"id": 9, "body": marker(HEAD_A)}]), "c")
    assert later == EarlierComment(9, HEAD_A, damaged=(8,))
    assert "previous head; delete comment 8" in later.damaged_line("github-actions[bot]")


def test_an_empty_author_is_refused():
    """Issue 51: `--author ""` said "was not written by , so ..."."""
    from lorasent.cli import main

    with pytest.raises(LorasentError) as err:
        earlier_comment("[]", "c", author="")
    assert str(err.value) == ("pr-comment: --author is empty; give the login the workflow "
                              "posts as (github-actions[bot] for the GITHUB_TOKEN)")
    for author in ("", "  "):
        result = CliRunner().invoke(main, ["pr-comment", "main", "--author", author],
                                    prog_name="lorasent")
        assert result.exit_code == 2
        assert result.output == (
            "lorasent pr-comment: error: Invalid value for '--author': empty; give the login "
            "the workflow posts as (github-actions[bot] for the GITHUB_TOKEN) (see "
            "`lorasent pr-comment --help`)\n")


@pytest.mark.parametrize("text, why", [
    ('[{"id": 1}] {', "not the JSON of `gh api --paginate` (Expecting property name "
                      "enclosed in double quotes at character 13)"),
    ('{"message": "Not Found"}', "a page that is not a list of comment objects at character "
                                 "24"),
])
def test_comments_that_are_not_gh_api_pages_are_one_error(text, why):
    with pytest.raises(LorasentError) as err:
        earlier_comment(text, "comments.json")
    assert str(err.value).startswith(f"pr-comment: comments.json: {why}")


def test_a_warning_of_a_kind_both_sides_have_is_one_note():
    def side(rev: str, accuracy: float, reference: float, predicted: str = "neg") -> Side:
        other = "pos" if predicted == "neg" else "neg"
        scores = {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 5}
        evals = EvalMetrics.model_validate({
            "accuracy": accuracy, "macro_f1": 0.5, "relative_error_reduction": 0.1,
            "per_class": {"neg": scores, "pos": scores},
            "confusion_matrix": {label: {predicted: 5, other: 0} for label in ("neg", "pos")},
            "labels": ["neg", "pos"], "test_rows": 10,
            "baseline": {"majority_class": "neg", "majority_accuracy": 0.5,
                         "zero_shot_accuracy": reference, "zero_shot_macro_f1": 0.3},
            "reference": "zero_shot", "reference_accuracy": reference,
            "relative_error_reduction_note": None})
        return Side(rev, evals, None, None, None, None)

    warnings, notes = side_warnings(side("main", 0.6, 0.4), side("HEAD", 0.45, 0.4))
    assert warnings == ["B: accuracy 0.450 is below the majority-class baseline 0.500 (always "
                        "`neg`): the adapter does worse than predicting one class"]
    assert side_warnings(side("main", 0.48, 0.4), side("HEAD", 0.45, 0.4))[1][0] == (
        "A and B alike, so not this change: accuracy 0.450 (A: 0.480) is below the "
        "majority-class baseline 0.500 (always `neg`): the adapter does worse than "
        "predicting one class")
    # the same kind of warning about other classes, or another reference: not alike
    apart, none = side_warnings(side("main", 0.6, 0.4), side("HEAD", 0.6, 0.45, "pos"))
    assert [w[:28] for w in apart] == [
        "A: never predicted: `pos` (5", "A: `neg` is predicted for 10",
        "A: the relative error reduct", "B: never predicted: `neg` (5",
        "B: `pos` is predicted for 10", "B: the relative error reduct"]
    assert none == []
    assert notes == [
        "A and B alike, so not this change: never predicted: `pos` (5 of 10 test rows are pos)",
        "A and B alike, so not this change: `neg` is predicted for 10 of 10 rows (100%), "
        "though 50% of them are neg",
        "A and B alike, so not this change: the relative error reduction is measured against "
        "the zero_shot baseline (0.400), which is itself below the majority-class baseline "
        "(0.500); against the majority class it is -0.100 (A: 0.200)"]
    assert alike("same words", "same words") == "same words"


def test_a_busy_machine_is_said_with_what_it_affects():
    loaded = {"machine_load": {"load_average": 5.2, "cpu_cores": 2, "busy": True}}
    sides = [Side("main", None, None, None, None, loaded),
             Side("HEAD", None, None, None, None, {})]
    assert busy(sides) == ["A (main) trained on a busy machine (load 5.2 on 2 cores): its "
                            "training time and examples per second are not comparable; that "
                            "affects runtimes only, not the metrics."]


def test_the_fold_leaves_out_the_keys_no_reviewer_reads():
    keys = ["accuracy", "accuracy_ci95_low", "macro_f1_ci95_high", "per_class.neg.f1",
            "confusion_matrix.neg.pos", "zero_shot.confusion_matrix.neg.neg",
            "baseline.majority_accuracy", "majority_accuracy", "intervals.resamples",
            "loss", "train.loss", "step", "grad_norm", "learning_rate", "epoch", "total_flos",
            "train.runtime", "train.samples_per_second", "train.steps_per_second",
            "split_rows.test", "relative_error_reduction"]
    assert [k for k in keys if not UNREAD.search(k)] == [
        "accuracy", "per_class.neg.f1", "majority_accuracy", "loss", "train.loss", "step",
        "split_rows.test", "relative_error_reduction"]


def _classes_diff(classes: int, metrics_diff: bool = True) -> Comparison:
    """A comparison of ``classes`` classes as a 150-class pull request gives it: each
    class's fixed and broken rows, and (``metrics_diff``) each class's precision, recall,
    F1 and support changed in eval.json and in baseline.json's zero-shot scores."""
    labels = [f"class-{i:03d}" for i in range(classes)]
    paired = PairedComparison(
        rows=4 * classes, accuracy=(0.6, 0.7), macro_f1=(0.6, 0.7), delta_accuracy=0.1,
        delta_accuracy_ci=(0.05, 0.15), delta_macro_f1=0.1, delta_macro_f1_ci=(0.05, 0.15),
        only_b_right=90, only_a_right=30, p_value=1e-6,
        flips={label: {"fixed": 1, "broken": 0} for label in labels})
    review = Review(paired_verdict(paired), [], labels, paired)
    change = {"old": 0.5, "new": 0.625, "diff": 0.125}
    metrics = {"metrics/eval.json": {f"per_class.{label}.{key}": change for label in labels
                                     for key in ("f1", "precision", "recall", "support")},
               "metrics/baseline.json": {f"zero_shot.per_class.{label}.{key}": change
                                         for label in labels for key in ("f1", "precision")}
               } if metrics_diff else {}
    sides = (Side("main", None, None, None, None, None), Side("HEAD", None, None, None, None,
                                                                None))
    return Comparison("main", "HEAD", {"main": "aaaaaaa", "HEAD": "bbbbbbb"}, {}, metrics, {},
                      sides, review, {})


def test_a_150_class_diff_fits_in_one_comment_its_fold_cut_saying_where_the_rest_is():
    """Issue 51: 150 classes made a body GitHub refuses (over 65,536 characters), so no
    comment at all; now the verdict and the tables come whole, and the fold is cut."""
    c = _classes_diff(150)
    args = (HEAD_B, "main", c, None, "7", "https://github.example/run", "main-vs-head")
    whole, text = comment_text(*args, limit=10**9), comment_text(*args)
    assert len(whole) > GITHUB_COMMENT_LIMIT  # as before: GitHub would refuse it
    assert len(text.encode("utf-8")) <= COMMENT_LIMIT < GITHUB_COMMENT_LIMIT
    head = whole[:whole.index("<details>")]
    assert text.startswith(head)  # the marker, the verdict and every table, whole
    assert text.startswith(marker(HEAD_B) + "\n") and "| class-149 | 1 | 0 |" in head
    fold = text[text.index("<details>"):]
    rows = [line for line in fold.splitlines() if line.startswith("| metrics/")]
    assert 0 < len(rows) < 900 and rows == [
        line for line in whole.splitlines() if line.startswith("| metrics/")][:len(rows)]
    assert fold.endswith(
        f"\n\nCut here: {900 - len(rows)} more rows do not fit in one comment (GitHub takes "
        "65,536 characters at most); the rest is in the `lorasent-report` artifact of [this run]"
        "(https://github.example/run) (`main-vs-head/report.md`, which has every metric), or "
        "locally `git fetch origin pull/7/head`, then `make compare A=aaaaaaa B=bbbbbbb`.\n\n"
        "</details>\n\nPer-class tables, confusion matrices, flipped texts and loss curves: "
        "the `lorasent-report` artifact of [this run](https://github.example/run) (open "
        "`main-vs-head/report.html`). Locally: `git fetch origin pull/7/head`, then `make "
        "compare A=aaaaaaa B=bbbbbbb` (`main` as compared here).\n")
    # valid GitHub Markdown: the fold's table and the line after it
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    assert html.count("<details>") == html.count("</details>") == 1
    assert "</table>\n<p>Cut here:" in html
    # a few classes: nothing cut
    assert comment_text(HEAD_B, "main", _classes_diff(3), None, None, None, "x") == \
        comment_text(HEAD_B, "main", _classes_diff(3), None, None, None, "x", limit=10**9)


def test_tables_beyond_the_bound_are_cut_after_the_verdict():
    """Thousands of classes: even the fold's header does not fit; the fold goes, the
    verdict stays first, and the last table loses rows, said in a line."""
    text = comment_text(HEAD_B, "main", _classes_diff(3000, metrics_diff=False), None, None,
                        None, "main-vs-head")
    assert len(text.encode("utf-8")) <= COMMENT_LIMIT and "<details>" not in text
    assert text.startswith(marker(HEAD_B) + "\n### lorasent: B, this pull request's head "
                           "(bbbbbbb), against A, `main` (aaaaaaa)\n\n**B is better than A")
    cut = text.splitlines()[-3]
    assert re.fullmatch(r"Cut here: \d+ more lines do not fit in one comment \(GitHub takes "
                        r"65,536 characters at most\); the rest is in the folder this comment "
                        r"was written to \(`main-vs-head/report.md`, which has every "
                        r"metric\), or locally `make compare A=aaaaaaa B=bbbbbbb`\.", cut)
    assert text.splitlines()[-5].startswith("| class-")


WORKFLOW = REPO / ".github" / "workflows" / "metrics-diff.yml"
RUN_URL = "https://github.com/owner/repo/actions/runs/99"  # the comment job's own
SAME_REPO = "github.event.pull_request.head.repo.full_name == github.repository"


def _comment_job() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]["comment"]


def _posting_step() -> dict[str, Any]:
    """The workflow's script that posts the comment, run as the workflow runs it, with a
    stand-in ``gh`` that records its calls and lists ``listed`` as the comments."""
    step = next(s for s in _comment_job()["steps"] if s.get("shell") == "python")
    script: dict[str, Any] = {"__name__": "metrics_diff_comment"}
    exec(compile(step["run"], str(WORKFLOW), "exec"), script)
    return script


def _post(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str | bytes,
          listed: list[dict[str, Any]]) -> tuple[int, list[list[str]], str]:
    """Run the posting step in ``tmp_path`` with ``body`` as comment.md: its exit status,
    the ``gh`` calls it made and what it printed."""
    script, calls = _posting_step(), []

    def gh(*args: str) -> str:
        calls.append(list(args))
        return json.dumps(listed[:2]) + "\n" + json.dumps(listed[2:]) if args[1] == \
            "--paginate" else ""

    (tmp_path / "pr-report").mkdir(parents=True, exist_ok=True)
    (tmp_path / "pr-report" / "comment.md").write_bytes(
        body if isinstance(body, bytes) else body.encode("utf-8"))
    monkeypatch.chdir(tmp_path)
    for key, value in {"PR": "7", "REPO": "owner/repo", "BOT": "github-actions[bot]",
                       "RUN_URL": RUN_URL}.items():
        monkeypatch.setenv(key, value)
    script["gh"] = gh
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = script["main"]()
    return status, calls, printed.getvalue()


def _listed() -> list[dict[str, Any]]:
    """A pull request's comments: a reviewer's, another workflow's (by the same bot),
    lorasent's, a copy of lorasent's marker by the author, the bot's with a damaged
    marker."""
    return [{"id": 1, "body": "LGTM", "user": REVIEWER},
            {"id": 2, "body": "## Coverage report\n85%", "user": BOT_USER},
            {"id": 3, "body": marker(HEAD_A) + "\nlorasent's", "user": BOT_USER},
            {"id": 4, "body": marker(HEAD_B) + "\nplanted", "user": REVIEWER},
            {"id": 5, "body": marker("not-a-sha") + "\n", "user": BOT_USER}]


def test_the_workflow_edits_only_its_own_marked_comment(tmp_path, monkeypatch):
    """Issue 51: the comment job edited any comment by github-actions[bot] that the
    compare job's comment-id named, another workflow's included."""
    body = marker(HEAD_B) + "\nnew\n"
    status, calls, printed = _post(tmp_path, monkeypatch, body, _listed())
    assert status == 0 and printed == "edited comment 3, the workflow's own\n"
    assert calls == [["api", "--paginate", "repos/owner/repo/issues/7/comments"],
                     ["api", "--method", "PATCH", "repos/owner/repo/issues/comments/3", "-F",
                      "body=@comment-posted.md"]]
    # comment-id, written by the job that ran the pull request's code, is never read
    (tmp_path / "pr-report" / "comment-id").write_text("2\n", encoding="utf-8")
    assert _post(tmp_path, monkeypatch, body, _listed())[1][1][3].endswith("/comments/3")
    # without a marked comment of its own (another workflow's only): a new comment
    others = [c for c in _listed() if c["id"] != 3]
    status, calls, printed = _post(tmp_path / "new", monkeypatch, body, others)
    assert status == 0 and printed == "posted a new comment\n"
    assert calls[1] == ["pr", "comment", "7", "--repo", "owner/repo", "--body-file",
                        "comment-posted.md"]
    # the same choice as pr-comment's, which names it in comment-id
    script = _posting_step()
    for listed in (_listed(), others):
        text = json.dumps(listed)
        found = earlier_comment(text, "c")
        assert found is not None
        assert script["to_edit"](script["comments"](text), "github-actions[bot]") == found.id


@pytest.mark.parametrize("body, why", [
    ("## Coverage report\n", "pr-report/comment.md does not start with lorasent's marker "
                             "line (<!-- lorasent-pr-comment head=<sha> -->)"),
    ("> " + marker(HEAD_B) + "\n", "pr-report/comment.md does not start with lorasent's "
                                   "marker line (<!-- lorasent-pr-comment head=<sha> -->)"),
    (marker(HEAD_B) + "\n" + "x" * COMMENT_LIMIT, "pr-report/comment.md is 60,075 bytes, "
                                                  "over lorasent's bound of 60,000"),
    (marker(HEAD_B).encode() + b"\n\xe4\n", "pr-report/comment.md is not UTF-8 text "
                                              "(byte 75)"),
])
def test_the_workflow_refuses_a_body_without_the_marker_or_over_the_bound(
        tmp_path, monkeypatch, body, why):
    status, calls, printed = _post(tmp_path, monkeypatch, body, _listed())
    assert status == 1 and calls == []  # nothing listed, nothing posted
    assert printed == (f"::error title=No comment posted::{why}; the compare job wrote it, "
                       "and this job posts only lorasent's own comment\n")


def test_the_workflows_bound_and_marker_are_lorasents():
    script = _posting_step()
    assert script["LIMIT"] == COMMENT_LIMIT
    for line in (marker(HEAD_A), marker(HEAD_A[:7]), marker(HEAD_A + "a"), marker("A" * 40),
                 marker("not-a-sha"), " " + marker(HEAD_A), marker(HEAD_A) + " x"):
        assert bool(script["MARKER"].match(line + "\n")) == bool(MARKER_LINE.match(line + "\n"))


def test_a_pull_request_from_a_fork_skips_the_comment_and_says_why():
    """Its token is read-only: the comment steps are skipped (not a red job), and a
    notice says why."""
    steps = _comment_job()["steps"]
    assert [s.get("if") for s in steps] == [SAME_REPO.replace("==", "!="), SAME_REPO, SAME_REPO]
    assert steps[0]["run"].startswith('echo "::notice title=No comment::a pull request from '
                                      'a fork gets a read-only token, which cannot comment;')
    assert not any("checkout" in s.get("uses", "") for s in steps)  # nothing of the head


@pytest.fixture(scope="module")
def pull_request(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """main (tag v1: no row wrong), then branch pr: push4 (4 rows wrong), push6 (6)."""
    root = make_metrics_repo(tmp_path_factory.mktemp("pull-request"))
    git_dvc(root, "git", "checkout", "-q", "-b", "pr")
    for wrong in (4, 6):
        (root / "params.yaml").write_text(f"wrong: {wrong}\n", encoding="utf-8")
        git_dvc(root, "dvc", "repro", "-q")
        git_dvc(root, "git", "commit", "-q", "-am", f"push{wrong}")
        git_dvc(root, "git", "tag", f"push{wrong}")
    return root


def _comment_on(root: Path, head: str, out: Path, comments: str | None = None) -> str:
    git_dvc(root, "git", "checkout", "-q", "--detach", head)
    pr_comment("main", out, comments, pr="7", run_url="https://github.example/run", repo=root)
    return (out / "comment.md").read_text(encoding="utf-8")


def _commit(root: Path, rev: str) -> str:
    return git_dvc(root, "git", "rev-parse", rev)


@pytest.mark.slow
def test_a_push_after_the_first_gets_its_own_verdict_against_the_previous_head(pull_request,
                                                                            tmp_path):
    root = pull_request
    head4, head6 = _commit(root, "push4"), _commit(root, "push6")
    main = _commit(root, "main")[:7]
    first = _comment_on(root, "push4", tmp_path / "one")
    assert not (tmp_path / "one" / "comment-id").exists()
    assert first.startswith(
        f"{marker(head4)}\n### lorasent: B, this pull request's head ({head4[:7]}), against A, "
        f"`main` ({main})\n\n**Not settled: accuracy −0.100 [−0.200, −0.025], McNemar p = "
        "0.12; macro-F1 −0.100 [−0.204, −0.025]. The paired interval of Δ accuracy excludes 0, "
        "but McNemar's p is not below 0.05: only both together call B worse, so more test rows "
        "are needed to tell.**\n\n| test split | A (main) | B (head) |\n|---|---|---|\n"
        "| accuracy [95% interval] | 1.0000 | 0.9000 |\n| macro-F1 [95% "
        "interval] | 1.0000 | 0.9000 |\n\nParams that differ (main → head): `wrong` 0 → 4."
        "\n\n| B − A | value | paired "
        "bootstrap 95% interval |\n|---|---|---|\n| Δ accuracy | −0.100 | [−0.200, −0.025] |\n"
        "| Δ macro-F1 | −0.100 | [−0.204, −0.025] |\n"
        # 0.8-sure rows: ECE 0.2 -> 0.1; 4 of 40 rows wrong: NLL 0.1 * ln(0.8 / 0.2),
        # Brier 0.1 * (1.28 - 0.08)
        "| Δ ECE | −0.100 | [−0.200, −0.025] |\n| Δ NLL | +0.139 | [+0.035, +0.277] |\n"
        "| Δ Brier score | +0.120 | [+0.030, +0.240] |\n\nECE, NLL and Brier score of the "
        "probabilities each predictions file holds (raw, before temperature scaling): lower "
        "is better.\n\nMcNemar's exact test on the 40 rows: 0 "
        "right only in B, 4 right only in A, p = 0.12.\n\n| actual class | rows B fixed (A "
        "wrong, B right) | rows B broke (A right, B wrong) |\n|---|---|---|\n| neg | 0 | 2 |\n"
        "| pos | 0 | 2 |\n\n<details>\n")
    assert first.endswith(
        "(open `main-vs-head/report.html`). Locally: `git fetch origin pull/7/head`, then "
        f"`make compare A={main} B={head4[:7]}` (`main` as compared here).\n")

    comments = _pages([{"id": 1, "body": "LGTM"}, {"id": 9, "body": first}])
    second = _comment_on(root, "push6", tmp_path / "two", comments)
    assert _comment_on(root, "push6", tmp_path / "two", comments) == second  # the same again
    assert (tmp_path / "two" / "comment-id").read_text(encoding="utf-8") == "9\n"
    assert second.startswith(f"{marker(head6)}\n### lorasent: B, this pull request's head "
                             f"({head6[:7]}), against A, `main` ({main})\n\n**B is worse than "
                             "A: accuracy −0.150 [−0.275, −0.050], McNemar p = 0.031;")
    assert (f"### This push: B, the head ({head6[:7]}), against A, the previous head "
            f"({head4[:7]})\n\n**No detectable difference: accuracy −0.050 [−0.125, +0.000], "
            "McNemar p = 0.5; macro-F1 −0.050 [−0.127, +0.000]. With 40 test rows, accuracy "
            "differences smaller than about 0.062 cannot be told apart from noise.**\n\n"
            "Params that differ (previous head → head): `wrong` 4 → 6.\n\n<details>") in second
    # one number for the smallest difference the rows tell apart, in comment and report
    report = (tmp_path / "two" / "previous-vs-head" / "report.md").read_text(encoding="utf-8")
    for text in (second, report):
        assert text.count("cannot be told apart") == 1 and "about 0.062 " in text
    assert second.endswith(f"(`main` as compared here); this push: `make compare "
                           f"A={head4[:7]} B={head6[:7]}`.\n")
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [
        ".lorasent-output", "comment-id", "comment.md", "main-vs-head", "previous-vs-head"]
    # the fold renders as GitHub renders Markdown: a summary, then a table
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(second)
    fold = html[html.index("<details>"):html.index("</details>")]
    assert "<summary>Every metric that changed against <code>main</code>" in fold
    assert "<td>metrics/eval.json</td>\n<td>accuracy</td>\n<td>1.0000</td>\n<td>0.8500</td>" \
        in fold

    # the same head again (a rerun): the comment is edited, nothing compared twice
    again = _pages([{"id": 9, "body": second}])
    assert "### This push" not in _comment_on(root, "push6", tmp_path / "three", again)
    # a previous head this clone does not have (a force-push)
    gone = _pages([{"id": 9, "body": marker("c" * 40)}])
    assert (f"### This push: B, the head ({head6[:7]}), against A, the previous head\n\nThe "
            "head of the previous run (ccccccc) is not in this clone (a force-push rewrote "
            "it?), so there is no verdict against it.\n") in \
        _comment_on(root, "push6", tmp_path / "four", gone)
    git_dvc(root, "git", "checkout", "-q", "pr")


@pytest.mark.parametrize("content, error", [
    (b"<html>rate limited</html>", "--comments: not the JSON of `gh api --paginate` (Expecting "
                                   "value at character 0); pass the comments exactly as gh "
                                   "prints them"),
    (b"\n", "--comments: empty; `gh api --paginate` prints [] for a pull request without "
            "comments, so an empty file means it failed: pass what it printed"),
    (b"[\xe4]", "--comments {path}: not UTF-8 text (byte 1); pass what `gh api --paginate "
                ".../comments` printed"),
    (b"[]", None),
])
@pytest.mark.slow
def test_the_command_refuses_bad_comments_in_one_line_and_writes_nothing(
        pull_request, tmp_path, monkeypatch, content, error):
    from lorasent.cli import main

    monkeypatch.chdir(pull_request)
    bad = tmp_path / "comments.json"
    bad.write_bytes(content)
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["pr-comment", "main", "--comments", str(bad),
                                       "--out", str(out)])
    if error is None:  # no comments yet: a new one
        assert result.exit_code == 0, result.output
        assert result.output == f"wrote {out / 'comment.md'}: a new comment\n"
        return
    assert result.exit_code == 1 and not out.exists()
    assert result.output.strip().splitlines() == [
        f"lorasent pr-comment: error: {error.format(path=bad)}"]
    assert subprocess.run(["git", "status", "--porcelain"], cwd=pull_request,
                          capture_output=True, text=True).stdout == ""


def test_the_workflow_posts_what_the_pull_requests_code_wrote_made_inert(tmp_path, monkeypatch):
    """Issue 62, kind 8: the trusted job posted comment.md as the pull request's code wrote
    it, once its first line was the marker. It now escapes what it posts: no HTML but the
    fold's tags, no link but its own run's, no image, mention, issue link or autolink;
    lorasent's own comment comes through byte for byte."""
    hostile = (f"{marker(HEAD_B)}\n@octocat @org/team #12 gh-12 <img src=x onerror=alert(1)> "
               "<!-- hidden --> &#64;user [phish](https://evil.example) ![p](//evil.example/p.png)"
               " [ref][1]\n\n[1]: /elsewhere\n<https://evil.example> www.evil.example "
               "a@b.example \u202eabc <details open><summary>x</summary>`@in code`</details>\n"
               f"[this run]({RUN_URL})\n")
    status, calls, printed = _post(tmp_path, monkeypatch, hostile, _listed())
    assert status == 0 and printed == "edited comment 3, the workflow's own\n"
    posted = (tmp_path / "comment-posted.md").read_text(encoding="utf-8")
    z = "\u200b"
    assert posted == (
        f"{marker(HEAD_B)}\n@{z}octocat @{z}org/team #{z}12 gh{z}-12 &lt;img src=x "
        f"onerror=alert(1)> &lt;!-- hidden --> &amp;#{z}64;user [phish]\\(https:{z}//evil.example) "
        f"![p]\\(//evil.example/p.png) [ref][1]\n\n[1]\\: /elsewhere\n&lt;https:{z}//evil.example> "
        f"www{z}.evil.example a@{z}b.example ‹U+202E›abc &lt;details open><summary>x</summary>"
        f"`@{z}in code`</details>\n[this run]({RUN_URL})\n")
    tokens = [t for token in MarkdownIt("commonmark", {"html": True}).enable("table").parse(posted)
              for t in [token, *(token.children or [])]]
    assert [t.attrGet("href") for t in tokens if t.type == "link_open"] == [RUN_URL]
    assert not [t for t in tokens if t.type == "image"]
    raw = "".join(t.content for t in tokens if t.type in ("html_inline", "html_block"))
    assert re.sub(r"<!-- lorasent-pr-comment head=b{40} -->|</?(details|summary)>", "",
                  raw).strip() == ""
    words = "".join(t.content for t in tokens if t.type in ("text", "code_inline"))
    assert not re.findall(r"@\w|#\d|\bgh-\d|https?://|www\.", words, re.IGNORECASE)
    # lorasent's own comment, hostile values and all, is posted as it wrote it
    from test_hostile import _documents

    own = _documents()["comment.md"].replace("https://example.com/run", RUN_URL)
    _post(tmp_path / "own", monkeypatch, own, _listed())
    assert (tmp_path / "own" / "comment-posted.md").read_text(encoding="utf-8") == own
    for listed in (_classes_diff(3), _classes_diff(150)):
        body = comment_text(HEAD_B, "main", listed, None, "7", RUN_URL, "main-vs-head")
        assert _posting_step()["inert"](body, RUN_URL) == body
    # escaping that takes the body over the bound refuses it
    wide = marker(HEAD_B) + "\n" + "<a" * (COMMENT_LIMIT // 4)
    status, calls, printed = _post(tmp_path / "wide", monkeypatch, wide, _listed())
    assert status == 1 and calls == []
    assert printed == ("::error title=No comment posted::pr-report/comment.md is 75,075 bytes "
                       "once escaped, over lorasent's bound of 60,000; the compare job wrote it, "
                       "and this job posts only lorasent's own comment\n")
