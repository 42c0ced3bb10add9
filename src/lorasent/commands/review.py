"""``lorasent compare``, ``reproduce`` and ``pr-comment``: the review of a change, from the
committed runs."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from lorasent.command_errors import user_errors
from lorasent.commands.options import CONNECT_SECONDS, FiniteFloat
from lorasent.errors import LorasentError


@click.command()
@click.argument("rev_a", metavar="A", default="HEAD")
@click.argument("rev_b", metavar="B", default="workspace")
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Report folder: a new folder, or one an earlier compare wrote (replaced "
              "as a whole)  [default: reports/<A>-vs-<B>]")
@click.option("--force", is_flag=True,
              help="Replace an --out folder that compare did not write, or one of its own "
              "that holds git-tracked files (never git-tracked files it did not write, a DVC "
              "output, the current folder or the repository).")
@user_errors
def compare(rev_a: str, rev_b: str, out_dir: Path | None, force: bool) -> None:
    """Report whether revision B is better than A, and how their metrics differ.

    A and B are commits, branches, tags or experiment names (dvc exp show); B may be
    `workspace`. Either may be a group of runs over seeds: comma-separated, or a pattern
    such as 'base-seed*'. Reads what each revision committed; retrains nothing. Writes
    verdict.md, report.md, report.html (self-contained) and one PNG per plot, and prints
    the verdict.
    """
    from lorasent.output_guard import check_output_folder
    from lorasent.review.compare import compare as write_report
    from lorasent.review.render import (
        REPORT_HTML,
        REPORT_MD,
        VERDICT_MD,
        report_folder,
        terminal_text,
    )

    folder = report_folder(rev_a, rev_b, out_dir)
    check_output_folder(folder, command="compare", force=force,
                        option="--out" if out_dir else "the report folder")
    out = write_report(rev_a, rev_b, folder)
    # plain text: GitHub's escapes (&#8203;, \*) are for the Markdown files (issue 51)
    click.echo(terminal_text((out / VERDICT_MD).read_text(encoding="utf-8")).strip())
    click.echo(f"wrote {out / REPORT_MD} and {out / REPORT_HTML}")


@click.command()
@click.argument("rev", metavar="[REV]", default="HEAD")
@click.option("--workspace", is_flag=True,
              help="Judge the outputs a run left here (make run, dvc repro) instead of "
              "rerunning REV in a temporary clone.")
@click.option("--no-train", is_flag=True,
              help="Re-score REV's adapter only (its evaluate stage, minutes): REV's outputs "
              "from the DVC cache or remote; without them, the whole pipeline runs.")
@click.option("--tolerance", type=FiniteFloat(),
              help="How far a probability may move for 'equivalent' (absolute); a metric "
              "computed from probabilities may move by this or 0.1% of itself  "
              "[default: 0.0001]")
@click.option("--seed-groups", nargs=2, metavar="REV_GROUP HERE_GROUP",
              help="Judge two groups of runs over seeds instead (experiments, e.g. 'ref-seed*' "
              "'here-seed*', as lorasent seeds names them): Welch's t-test, olympic means.")
@click.option("--connect-timeout", type=CONNECT_SECONDS,
              help="Seconds the default DVC remote gets to connect and answer (--no-train "
                   "pulls from it)  [default: $LORASENT_CONNECT_TIMEOUT, else 10]")
@click.option("--after-run", is_flag=True, hidden=True,
              help="make run's call: a workspace that is no reproduction, or cannot be "
              "judged, is said in one line, never a failure.")
@user_errors
def reproduce(rev: str, workspace: bool, no_train: bool, tolerance: float | None,
              seed_groups: tuple[str, str] | None, connect_timeout: float | None,
              after_run: bool) -> None:
    """Did this machine reproduce REV's run (default HEAD)? One verdict line first:
    identical, equivalent (within --tolerance), consistent (no detectable difference by
    the paired test) or different; then each file that differs and the two machines side
    by side. Reruns REV in a temporary clone unless --workspace. Exit 1 when different.
    """
    from lorasent.review.diffs import TOLERANCE
    from lorasent.review.reproduce import NotAReproduction
    from lorasent.review.reproduce import reproduce as run_reproduce
    from lorasent.review.tiers import judge_groups

    repo = Path(".")
    if seed_groups:
        verdict = judge_groups(repo, *seed_groups)
    else:
        try:
            verdict = run_reproduce(repo, rev, workspace=workspace or after_run,
                                    no_train=no_train,
                                    tolerance=TOLERANCE if tolerance is None else tolerance,
                                    progress=lambda line: click.echo(line, err=True),
                                    connect_timeout=connect_timeout)
        except (LorasentError, FileNotFoundError) as err:
            # make run's call never fails the run: a workspace that is no reproduction (a
            # preset's params), or one that cannot be judged (no commit yet, no
            # lorasent outputs), is said in one line
            if not after_run:
                raise
            what = "not judged as a reproduction of" if isinstance(
                err, NotAReproduction) else "could not be judged against"
            click.echo(f"run: {what} {rev}: {str(err).removeprefix('reproduce: ')}")
            return
    click.echo(verdict.text())
    if not verdict.ok and not after_run:
        sys.exit(1)


@click.command("pr-comment")
@click.argument("base")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("pr-report"),
              show_default=True,
              help="Folder for the reports and comment.md: a new folder, or one an earlier "
              "pr-comment wrote (replaced as a whole).")
@click.option("--comments", "comments_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The pull request's comments as `gh api --paginate "
              "repos/<owner>/<repo>/issues/<number>/comments` prints them: the earlier "
              "lorasent comment is edited, and this push compared with its head.")
@click.option("--pr", help="The pull request's number, for the comment's `git fetch` line.")
@click.option("--run-url", help="The workflow run whose artifacts hold the reports.")
@click.option("--author", default="github-actions[bot]", show_default=True,
              help="The login the workflow posts as: only a comment of its own is edited "
              "and read for the previous head.")
@click.option("--force", is_flag=True,
              help="Replace an --out folder that pr-comment did not write (never git-tracked "
              "files it did not write).")
@user_errors
def pr_comment(base: str, out_dir: Path, comments_path: Path | None, pr: str | None,
               run_url: str | None, author: str, force: bool) -> None:
    """Write a pull request's lorasent comment: HEAD against branch BASE, and against
    the head the earlier comment compared (what this push did).

    Writes --out/comment.md, the two reports, and --out/comment-id when an earlier
    comment is to be edited (see .github/workflows/metrics-diff.yml). Reads committed
    metrics only; retrains nothing.
    """
    from lorasent.output_guard import check_output_folder
    from lorasent.review.pr_comment import COMMENT_ID, COMMENT_MD
    from lorasent.review.pr_comment import pr_comment as write_comment

    if not author.strip():  # "was not written by , so ..." (issue 51)
        raise click.BadParameter("empty; give the login the workflow posts as "
                                 "(github-actions[bot] for the GITHUB_TOKEN)",
                                 param_hint="'--author'")
    check_output_folder(out_dir, command="pr-comment", force=force)
    try:
        comments = comments_path.read_bytes().decode("utf-8") if comments_path else None
    except UnicodeDecodeError as err:
        raise LorasentError(f"--comments {comments_path}: not UTF-8 text (byte {err.start}); "
                            "pass what `gh api --paginate .../comments` printed") from None
    out = write_comment(base, out_dir, comments, pr=pr, run_url=run_url, author=author,
                        say=lambda line: click.echo(line, err=True))
    edits = out / COMMENT_ID
    click.echo(f"wrote {out / COMMENT_MD}: " + (
        f"it replaces comment {edits.read_text(encoding='utf-8').strip()}, the earlier "
        f"lorasent comment ({edits})" if edits.is_file() else "a new comment"))
