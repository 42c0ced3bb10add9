"""The report's pieces that need no repo: DVC's plot specs made still, cell formats; and,
on a throwaway git + DVC repo of one stage, a side whose metrics are not of its params
(issue 27, item 3)."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lorasent.review.render import cell, param_cell, slug, still_spec
from lorasent.review.verdict import class_order


def _confusion(facet: dict[str, Any]) -> dict[str, Any]:
    return {"facet": facet, "params": [{"name": "showValues", "bind": {"input": "checkbox"}}],
            "spec": {}}


def test_a_plot_faceted_by_revision_keeps_dvcs_order_and_shows_counts():
    spec = still_spec(_confusion({"column": {"field": "rev", "sort": []}}))
    assert spec["facet"] == {"column": {"field": "rev", "sort": []}}  # A, then B
    assert spec["params"] == [{"name": "showValues", "bind": {"input": "checkbox"},
                               "value": True}]


def test_a_plot_faceted_by_revision_and_file_loses_the_empty_sorts():
    original = _confusion({"column": {"field": "rev", "sort": []},
                           "row": {"field": "filename", "sort": []}})
    spec = still_spec(original)
    assert spec["facet"] == {"column": {"field": "rev"}, "row": {"field": "filename"}}
    assert original["facet"]["row"] == {"field": "filename", "sort": []}  # not changed


def test_cells():
    assert [cell(None), cell(0.70666), cell(257), cell("generative")] == [
        "—", "0.7067", "257", "generative"]
    assert [cell(-0.01834, signed=True), cell(0, signed=True), cell(0.0, signed=True)] == [
        "-0.0183", "+0", "+0.0000"]
    assert [param_cell(v) for v in (5e-05, 0.001, 2.0e-4, 8, ["a", "b"])] == [
        "5e-05", "0.001", "0.0002", "8", "`['a', 'b']`"]
    assert slug("Confusion matrix, adapter (test split)") == "confusion-matrix-adapter-test-split"
    assert slug("origin/main") == "origin-main"


def test_classes_follow_base_labels_then_the_metrics():
    params = {"params.yaml": {"base.labels": {"old": "['neg', 'pos']",  # DVC's repr
                                              "new": "['neg', 'pos', 'neu']"}}}
    evals: dict[str, Any] = {"per_class.other.f1": {}, "per_class.neg.f1": {}}
    assert class_order(params, evals) == ["neg", "pos", "neu", "other"]


def test_a_users_text_is_one_cell_shown_as_written():
    from lorasent.review.render import clip

    assert clip("a <b>x</b>\n*y* _z_ [l](u) `c` #t #1 @u") == (
        "a &lt;b&gt;x&lt;/b&gt; \\*y\\* \\_z\\_ \\[l\\](u) \\`c\\` #t #&#8203;1 @&#8203;u")
    assert clip("w " * 200) == ("w " * 100)[:199] + "… (399 characters)"


def test_groups_split_at_commas_and_keep_their_order(tmp_path):
    from lorasent.review.collect import expand_group

    assert expand_group(tmp_path, "b-seed43, a-seed42,b-seed43") == ["b-seed43", "a-seed42"]
    assert expand_group(tmp_path, "HEAD") == ["HEAD"]


def test_a_tag_whose_name_holds_a_comma_is_one_revision(tmp_path):
    from lorasent.review.collect import expand_group

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
           "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "c"], cwd=tmp_path, check=True)
    subprocess.run(["git", "tag", "lr,2e-4"], cwd=tmp_path, check=True)
    assert expand_group(tmp_path, "lr,2e-4") == ["lr,2e-4"]
    assert expand_group(tmp_path, "HEAD,lr,2e-4") == ["HEAD", "lr", "2e-4"]  # split: not a tag


def test_the_reports_own_plots_replace_dvcs_confusion_and_reliability_plots(tmp_path):
    from conftest import REPO
    from lorasent.review.render import own_plot_titles

    assert own_plot_titles(REPO) == {"Confusion matrix, adapter (test split)",
                                     "Confusion matrix, baseline (test split)",
                                     "Reliability diagram, adapter (test split)"}
    assert own_plot_titles(tmp_path) == set()


# ------------------------------------------------- issue 27 item 3: a stale side is said first

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
       "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"]
# One stage that writes a predictions file of 40 rows and an eval.json (as of before the
# intervals: lorasent.contracts.EvalMetrics reads it);
# `wrong` rows are predicted wrongly (param `wrong` of params.yaml).
MAKE_METRICS = '''\
import json, pathlib
wrong = int(pathlib.Path("params.yaml").read_text().split("wrong:")[1].split()[0])
rows = [(f"r{i:02d}", ("neg", "pos")[i % 2]) for i in range(40)]
lines = ["id,actual,predicted,p_neg,p_pos"]
right = 0
for i, (row_id, gold) in enumerate(rows):
    guess = gold if i >= wrong else ("pos" if gold == "neg" else "neg")
    right += guess == gold
    p = 0.8 if guess == "neg" else 0.2
    lines.append(f"{row_id},{gold},{guess},{p:.6f},{1 - p:.6f}")
pathlib.Path("metrics").mkdir(exist_ok=True)
pathlib.Path("metrics/predictions.csv").write_text("\\n".join(lines) + "\\n")
accuracy = right / len(rows)
scores = {"precision": accuracy, "recall": accuracy, "f1": accuracy, "support": 20}
pathlib.Path("metrics/eval.json").write_text(json.dumps({
    "accuracy": accuracy, "macro_f1": accuracy, "relative_error_reduction": (accuracy - 0.5) / 0.5,
    "per_class": {"neg": scores, "pos": scores},
    "confusion_matrix": {"neg": {"neg": 20 - wrong // 2, "pos": wrong // 2},
                         "pos": {"neg": wrong - wrong // 2, "pos": 20 - (wrong - wrong // 2)}},
    "labels": ["neg", "pos"], "test_rows": len(rows),
    "baseline": {"majority_class": "neg", "majority_accuracy": 0.5, "zero_shot_accuracy": None,
                 "zero_shot_macro_f1": None},
    "mode": "generative", "reference": "majority", "reference_accuracy": 0.5,
    "relative_error_reduction_note": None,
}))
'''
DVC_YAML = f"""stages:
  evaluate:
    cmd: {sys.executable} make_metrics.py
    deps: [make_metrics.py]
    params: [wrong]
    metrics:
      - metrics/eval.json:
          cache: false
    outs:
      - metrics/predictions.csv:
          cache: false
"""


def git_dvc(root: Path, *argv: str) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    argv = (*GIT, *argv[1:]) if argv[0] == "git" else (str(Path(sys.executable).parent / "dvc"),
                                                       *argv[1:])
    return subprocess.run(argv, cwd=root, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def commit_files(root: Path, tag: str, files: dict[str, str], base: str = "v1") -> None:
    """A commit on top of ``base`` that writes ``files`` (no `dvc repro`), tagged ``tag``;
    the workspace goes back to main."""
    git_dvc(root, "git", "checkout", "-q", "--detach", base)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    git_dvc(root, "git", "add", *files)
    git_dvc(root, "git", "commit", "-q", "-m", tag)
    git_dvc(root, "git", "tag", tag)
    git_dvc(root, "git", "checkout", "-q", "main")


def make_metrics_repo(root: Path) -> Path:
    """A git + DVC repo with one stage writing metrics/eval.json and predictions.csv from
    param `wrong`, reproduced and committed as main, tag v1."""
    git_dvc(root, "git", "init", "-q")
    git_dvc(root, "dvc", "init", "-q")
    (root / "params.yaml").write_text("wrong: 0\n", encoding="utf-8")
    (root / "make_metrics.py").write_text(MAKE_METRICS, encoding="utf-8")
    (root / "dvc.yaml").write_text(DVC_YAML, encoding="utf-8")
    git_dvc(root, "dvc", "repro", "-q")
    git_dvc(root, "git", "add", "-A")
    git_dvc(root, "git", "commit", "-q", "-m", "v1")
    git_dvc(root, "git", "tag", "v1")
    return root


@pytest.fixture(scope="module")
def metrics_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_metrics_repo(tmp_path_factory.mktemp("stale"))
    commit_files(root, "unreproduced", {"params.yaml": "wrong: 4\n"})
    commit_files(root, "code-changed", {"make_metrics.py": MAKE_METRICS + "# changed\n"})
    return root


@pytest.fixture
def changed_params(metrics_repo: Path):
    """The workspace with params.yaml changed and no `dvc repro`; restored after."""
    (metrics_repo / "params.yaml").write_text("wrong: 4\n", encoding="utf-8")
    yield metrics_repo
    git_dvc(metrics_repo, "git", "checkout", "-q", "--", "params.yaml")


NO_DIFFERENCE = ("accuracy +0.000 [+0.000, +0.000], McNemar p = 1; macro-F1 +0.000 "
                 "[+0.000, +0.000]")


def _verdict(out: Path) -> str:
    return (out / "verdict.md").read_text(encoding="utf-8").splitlines()[0]


@pytest.mark.slow
def test_a_fresh_workspace_gets_its_verdict(metrics_repo, tmp_path):
    from lorasent.review.collect import workspace_staleness
    from lorasent.review.compare import compare

    assert workspace_staleness(metrics_repo) is None
    out = compare("v1", "workspace", tmp_path / "r", repo=metrics_repo)
    assert _verdict(out) == (f"**No detectable difference: {NO_DIFFERENCE}. A and B are right "
                             "on exactly the same rows.**")


@pytest.mark.slow
def test_a_stale_workspace_is_said_first_and_gives_no_result(changed_params, tmp_path):
    from lorasent.review.compare import compare

    out = compare("v1", "workspace", tmp_path / "r", repo=changed_params)
    assert _verdict(out) == (
        "**B (workspace) is stale: `dvc status` says evaluate is out of date (changed: "
        "params.yaml wrong), so its metrics are not of its params; run dvc repro. Not a "
        f"result until then: the predictions on file give {NO_DIFFERENCE}.**")
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "No detectable difference" not in report
    # the param change is not presented as measured: B's metrics were made with 0
    assert "| `wrong` | 0 | 4 | B: 0 |" in report
    assert "## Is the difference real? (paired, same test rows; not a result: a side is " \
        "stale)" in report


@pytest.mark.slow
def test_metrics_warns_first_when_the_workspace_is_stale(changed_params, monkeypatch):
    from lorasent.commands.project import metrics

    monkeypatch.chdir(changed_params)
    result = CliRunner().invoke(metrics, [])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        "WARNING: metrics/eval.json is stale (evaluate out of date): params changed: wrong; "
        "run dvc repro")


@pytest.mark.slow
def test_metrics_prints_no_warning_when_the_workspace_is_fresh(metrics_repo, monkeypatch):
    from lorasent.commands.project import metrics

    monkeypatch.chdir(metrics_repo)
    result = CliRunner().invoke(metrics, [])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == ("metrics/eval.json: 40 test rows, generative "
                                             "mode")
    assert "WARNING" not in result.output


@pytest.mark.slow
def test_a_commit_whose_lock_does_not_match_its_params_is_stale(metrics_repo, tmp_path):
    from lorasent.review.compare import compare

    out = compare("v1", "unreproduced", tmp_path / "r", repo=metrics_repo)
    assert _verdict(out) == (
        "**B (unreproduced) is stale: its dvc.lock says evaluate is out of date (changed: "
        "params.yaml wrong), so its metrics are not of its params; run dvc repro. Not a "
        f"result until then: the predictions on file give {NO_DIFFERENCE}.**")
    assert "| `wrong` | 0 | 4 | B: 0 |" in (out / "report.md").read_text(encoding="utf-8")
    out = compare("unreproduced", "v1", tmp_path / "r2", repo=metrics_repo)
    assert _verdict(out).startswith("**A (unreproduced) is stale: its dvc.lock says evaluate")


def test_the_stale_line_is_short_and_says_what_changed():
    from lorasent.review.verdict import Stale

    code = Stale(["baseline", "train", "evaluate"],
                 [f"src/lorasent/{name}.py" for name in ("cli", "artifacts", "metrics",
                                                           "params", "scoring")], "`dvc status`")
    assert code.line("metrics/eval.json") == (
        "metrics/eval.json is stale (baseline, train, evaluate out of date): code or data "
        "changed: src/lorasent/cli.py, src/lorasent/artifacts.py, src/lorasent/metrics.py "
        "and 2 more; run dvc repro")
    both = Stale(["fetch", "split", "baseline", "train", "evaluate"],
                 ["params.yaml train.lora.r", "data/sources"], "`dvc status`")
    assert both.line("metrics/eval.json") == (
        "metrics/eval.json is stale (fetch, split, baseline and 2 more out of date): params "
        "changed: train.lora.r; code or data changed: data/sources; run dvc repro")


def test_a_commit_whose_code_changed_without_repro_is_stale(metrics_repo):
    from lorasent.review.collect import commit_staleness
    from lorasent.review.verdict import Stale

    assert commit_staleness(metrics_repo, "code-changed") == Stale(
        ["evaluate"], ["make_metrics.py"], "its dvc.lock")
    assert commit_staleness(metrics_repo, "v1") is None


@pytest.mark.slow
def test_staleness_from_dvc_status_ignores_outputs_not_pulled(metrics_repo):
    """A fresh clone without `dvc pull`: outputs missing are not stale metrics."""
    from lorasent.review.collect import workspace_staleness

    lock = (metrics_repo / "dvc.lock").read_text(encoding="utf-8")
    (metrics_repo / "metrics/predictions.csv").unlink()
    try:
        assert workspace_staleness(metrics_repo) is None
        (metrics_repo / "make_metrics.py").write_text(MAKE_METRICS + "# x\n", encoding="utf-8")
        stale = workspace_staleness(metrics_repo)
        assert stale is not None and (stale.stages, stale.changed) == (
            ["evaluate"], ["make_metrics.py"])
    finally:
        git_dvc(metrics_repo, "git", "checkout", "-q", "--", "make_metrics.py",
                "metrics/predictions.csv")
    assert (metrics_repo / "dvc.lock").read_text(encoding="utf-8") == lock
    assert json.loads((metrics_repo / "metrics/eval.json").read_text())["accuracy"] == 1.0


@pytest.mark.slow
def test_two_names_of_one_commit_are_compared_not_called_metric_less(metrics_repo, tmp_path):
    """`dvc metrics diff v1 main` of one commit is `{}`; it read as "neither has metrics"."""
    from lorasent.review.compare import compare

    sha = git_dvc(metrics_repo, "git", "rev-parse", "--short", "v1")
    out = compare("v1", "main", tmp_path / "r", repo=metrics_repo)
    assert (out / "verdict.md").read_text(encoding="utf-8") == (
        f"**No detectable difference: {NO_DIFFERENCE}. A and B are right on exactly the same "
        f"rows.**\n\n- ⚠ A (v1) and B (main) are the same commit, {sha}: nothing differs\n")
