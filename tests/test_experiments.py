"""Experiments and review, end to end on the tiny repo: `dvc exp run` in the workspace and
two queued at once, `dvc exp show`, `dvc metrics diff`, `make exp-show`, `make compare`,
the report in headless Chromium, and the pull-request workflow's commands."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import yaml
from PIL import Image

from conftest import REPO, chromium
from tiny_repo import GIT, LABELS, clone_run, env, exp_named, run

pytestmark = pytest.mark.slow

# name: (train.lora.r, train.learning_rate); the tiny params have r 8, learning rate 2e-4
EXPERIMENTS = {"r4": (4, 2e-4), "r16": (16, 2e-4), "r16-lr": (16, 1e-3)}
# the report's own K x K matrices (DVC's confusion template drops never-predicted rows)
CONFUSION_PNGS = ["confusion-matrix-adapter-test-split.png",
                  "confusion-matrix-zero-shot-baseline-test-split.png"]
CALIBRATION_PNGS = ["reliability-diagram-adapter-test-split.png",
                    "risk-coverage-curve-adapter-test-split.png"]


def _wait_for_queue(root: Path, timeout_s: float = 1200) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        status = run(root, "dvc", "queue", "status")
        if not any(word in status for word in ("Queued", "Running")):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(5)


def _start_workers(root: Path, jobs: int) -> str:
    """`dvc queue start -j jobs`; its output. The output goes through a file, not a pipe:
    dvc-task launches each worker from a forked process that keeps the caller's stdout
    and stderr open until its worker exits, so a pipe would be read until then."""
    with (root.parent / "queue-start.log").open("w+", encoding="utf-8") as log:
        subprocess.run(["dvc", "queue", "start", "-j", str(jobs)], cwd=root, env=env(),
                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                       check=True, timeout=120)
        log.seek(0)
        return log.read()


def _stop_workers(root: Path, timeout_s: float = 60) -> list[str]:
    """`dvc queue stop`, then SIGTERM (Celery's warm shutdown) to each worker still running
    ``timeout_s`` seconds later; the names of those.

    A worker can miss every control message. The broker is kombu's filesystem transport,
    which binds a worker's control queue into `.dvc/tmp/exps/celery/broker/control/
    celery.pidbox.exchange`; two workers starting at once can both find that file missing
    and create it, and the second write drops the first binding. That worker runs its
    experiment, then waits forever: its idle monitor's shutdown and `dvc queue stop`
    never reach it (seen on 2 cores, kombu 5.7.0, dvc-task 0.40.2)."""
    from dvc_task.proc.process import ProcessInfo

    subprocess.run(["dvc", "queue", "stop"], cwd=root, env=env(), capture_output=True,
                   timeout=120)
    infos = (root / ".dvc/tmp/exps/celery").glob("dvc-exp-worker-*.json")
    workers = {info.stem: ProcessInfo.load(str(info)).pid for info in infos}

    def still_running() -> list[str]:
        deadline = time.monotonic() + timeout_s
        while True:
            alive = [name for name, pid in workers.items() if psutil.pid_exists(pid)]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(1)

    stuck = still_running()
    for name in stuck:
        os.kill(workers[name], signal.SIGTERM)
    assert not (left := still_running()), f"queue workers {left} outlived SIGTERM"
    return stuck


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, tiny_run):
    """A clone of the tiny run (committed), then two experiments queued and run at once
    (in DVC's temporary copies, which hold only what git tracks) and one in the workspace."""
    root = clone_run(tiny_run, tmp_path_factory.mktemp("lorasent-sweep") / "repo")
    assert run(root, "git", "status", "--porcelain") == ""
    for name in ("r16", "r16-lr"):
        r, lr = EXPERIMENTS[name]
        run(root, "dvc", "exp", "run", "--queue", "-n", name,
            "-S", f"train.lora.r={r}", "-S", f"train.learning_rate={lr}")
    assert "Started '2' new experiments task queue workers" in _start_workers(root, 2)
    try:
        status = _wait_for_queue(root)
    finally:
        if stuck := _stop_workers(root):
            print(f"queue workers {stuck} missed `dvc queue stop` (see _stop_workers)")
    assert status.count("Success") == 2, status + run(root, "dvc", "queue", "logs", "r16")
    run(root, "dvc", "exp", "run", "-n", "r4", "-S", "train.lora.r=4")
    # dvclive's temporary history folder is not left staged in the index
    assert [line for line in run(root, "git", "status", "--porcelain").splitlines()
            if ".tmp" in line] == []
    return root


def test_a_worker_deaf_to_control_messages_neither_blocks_nor_outlives_the_sweep(tmp_path):
    """The race in `_stop_workers`, made certain: the worker's control binding is dropped
    after it starts, so only a signal stops it."""
    root = tmp_path / "repo"
    root.mkdir()
    run(root, "git", "init", "-q")
    run(root, "dvc", "init", "-q")
    run(root, *GIT, "commit", "-q", "-m", "dvc init")
    assert "Started '1' new experiments task queue worker" in _start_workers(root, 1)
    exchange = root / ".dvc/tmp/exps/celery/broker/control/celery.pidbox.exchange"
    deadline = time.monotonic() + 120
    while not (exchange.exists() and "dvc-exp-" in exchange.read_text(encoding="utf-8")):
        assert time.monotonic() < deadline, "the queue worker never bound its control queue"
        time.sleep(0.5)
    exchange.write_text("[]", encoding="utf-8")
    # this one hears none: however long the wait before the signal, it is still there
    assert _stop_workers(root, timeout_s=5) == ["dvc-exp-worker-1"]


def _exp(root: Path, name: str) -> dict[str, Any]:
    shown = json.loads(run(root, "dvc", "exp", "show", "--json"))
    return next(exp_named(shown, name))


def test_every_experiment_is_recorded_with_its_params_and_metrics(sweep):
    for name, (r, lr) in EXPERIMENTS.items():
        exp = _exp(sweep, name)
        params = exp["data"]["params"]["params.yaml"]["data"]["train"]
        assert (params["lora"]["r"], params["learning_rate"]) == (r, lr), name
        metrics = exp["data"]["metrics"]
        assert set(metrics) >= {"metrics/eval.json", "metrics/train/metrics.json",
                                "metrics/baseline.json", "metrics/data.json"}
        assert metrics["metrics/train/metrics.json"]["data"]["step"] == 3
        # each run's outputs are its own: the provenance it committed names its params
        record = json.loads(run(sweep, "git", "show",
                                f"{exp['rev']}:metrics/provenance/train.json"))
        assert (record["params"]["train"]["lora"]["r"],
                record["params"]["train"]["learning_rate"]) == (r, lr), name
        assert record["status"] == "ok"


def test_metrics_differ_only_where_the_params_reach(sweep):
    for a, b in (("r4", "r16"), ("r16", "r16-lr")):
        diff = json.loads(run(sweep, "dvc", "metrics", "diff", a, b, "--json"))
        # the data split and the baselines do not depend on training; the training does
        assert "metrics/data.json" not in diff and "metrics/baseline.json" not in diff
        assert diff["metrics/train/metrics.json"]["train.loss"]["diff"] != 0
        assert diff["metrics/train/metrics.json"]["loss"]["diff"] != 0
    params = json.loads(run(sweep, "dvc", "params", "diff", "r4", "r16", "--json"))
    assert params == {"params.yaml": {"train.lora.r": {"old": 4, "new": 16, "diff": 12}}}


def _make(root: Path, *args: str) -> str:
    return run(root, "make", "-s", "LORASENT_SYSTEM_PYTHON=1", f"PYTHON={sys.executable}",
               *args)


def test_make_exp_show_lists_the_headline_metrics_and_the_swept_params(sweep, tmp_path):
    """Metrics with their intervals first, then the swept params; no split counts; and
    `make exp-show EXP_SHOW_ARGS=--csv > file` (make not silenced) is a CSV pandas reads."""
    import pandas as pd

    out = tmp_path / "runs.csv"
    with out.open("w", encoding="utf-8") as f:
        subprocess.run(["make", "LORASENT_SYSTEM_PYTHON=1", f"PYTHON={sys.executable}",
                        "exp-show", "EXP_SHOW_ARGS=--csv"], cwd=sweep, env=env(), stdout=f,
                       check=True, timeout=300)
    table = pd.read_csv(out)
    # DVC names a metric by its file where two files hold it (eval.json and validation.json)
    headline = [f"{'metrics/eval.json:' if name != 'relative_error_reduction' else ''}{name}{end}"
                for name in ("accuracy", "macro_f1", "relative_error_reduction")
                for end in ("", "_ci95_low", "_ci95_high")]
    validation = [f"metrics/validation.json:{name}" for name in ("accuracy", "macro_f1")]
    # the scaled ECE only where a run kept a temperature (the tiny random model's fit is
    # degenerate, and train keeps none then)
    scaled = [name for name in EXPERIMENTS if _exp(sweep, name)["data"]["metrics"][
        "metrics/eval.json"]["data"]["calibration"].get("scaled")]
    shown = [c for c in validation if c in table.columns]  # --only-changed: where they differ
    assert list(table.columns) == ["Experiment", "rev", "typ", *shown, *headline,
                                   *(f"metrics/eval.json:per_class.{label}.f1"
                                     for label in LABELS),
                                   "calibration.ece",
                                   *(["calibration.scaled.ece"] if scaled else []),
                                   "test_sets.reviews-zh.accuracy",
                                   "train.loss", "train.lora.r", "train.learning_rate"]
    rows = table.set_index("Experiment")
    for name, (r, lr) in EXPERIMENTS.items():
        assert (rows.loc[name, "train.lora.r"], rows.loc[name, "train.learning_rate"]) == (r, lr)
        metrics = _exp(sweep, name)["data"]["metrics"]["metrics/eval.json"]["data"]
        for key in headline:
            assert rows.loc[name, key] == metrics[key.removeprefix("metrics/eval.json:")], (
                name, key)


@pytest.fixture(scope="module")
def report(sweep):
    out = sweep / "review"
    _make(sweep, "compare", "A=r4", "B=r16", f"OUT={out}")
    return out


def test_report_names_every_metric_class_and_changed_param(sweep, report):
    from lorasent.output_guard import OUTPUT_MARKER
    from lorasent.review.render import cell

    assert sorted(p.name for p in report.iterdir()) == sorted(
        [*CONFUSION_PNGS, *CALIBRATION_PNGS, "training-loss.png", "report.html", "report.md",
         "verdict.md", OUTPUT_MARKER])
    text = (report / "report.md").read_text(encoding="utf-8")
    verdict = (report / "verdict.md").read_text(encoding="utf-8")
    assert text.startswith(f"# lorasent: r4 vs r16\n\n{verdict}")
    assert verdict.startswith(("**No detectable difference: accuracy ", "**B is better than A",
                               "**B is worse than A", "**No detectable difference in accuracy"))
    assert "McNemar's exact test on the 24 rows" in text
    assert "## Flipped texts" in text
    assert "| `train.lora.r` | 4 | 16 |" in text
    diff = json.loads(run(sweep, "dvc", "metrics", "diff", "r4", "r16", "--all", "--json"))
    evals = diff["metrics/eval.json"]
    assert {f"{name}_ci95_{end}" for name in ("accuracy", "macro_f1", "relative_error_reduction")
            for end in ("low", "high")} <= set(evals)  # `dvc metrics diff` shows the intervals
    for key, name in [("accuracy", "accuracy"), ("macro_f1", "macro-F1"),
                      ("relative_error_reduction", "relative error reduction")]:
        row = [name, cell(evals[key]["old"]), cell(evals[key]["new"]),
               cell(evals[key]["diff"], signed=True)]
        assert "| " + " | ".join(row) + " |" in text
    for label in LABELS:
        f1 = evals[f"per_class.{label}.f1"]
        assert f"| {label} | {cell(f1['old'])} | {cell(f1['new'])} |" in text
    # every key of every metrics file, through DVC's own Markdown table
    for file, keys in diff.items():
        for key in keys:
            assert f"| {file} " in text and f" {key} " in text, (file, key)
    for png in [*CONFUSION_PNGS, "training-loss.png"]:
        assert f"]({png})" in text


def test_report_html_is_self_contained(report):
    page = (report / "report.html").read_text(encoding="utf-8")
    # the confusion matrices, the reliability diagram, the risk-coverage curve, the loss
    assert page.count('src="data:image/png;base64,') == 5
    # nothing to fetch: no image, style, script or link points outside the page (the
    # flipped tweets' own URLs are text)
    assert re.findall(r'(?:src|href)="(?!data:)[^"]*"', page) == []


def _find(screen: np.ndarray, image: np.ndarray) -> tuple[int, int] | None:
    """Where ``image`` (H x W x 3 uint8) appears pixel for pixel in ``screen``."""
    h, w = image.shape[:2]
    middle = image[h // 2].tobytes()  # a row across the matrices, searched for as bytes
    for y in range(h // 2, screen.shape[0] - (h - h // 2) + 1):
        line = screen[y].tobytes()
        x = line.find(middle)
        while x != -1:
            top, left = y - h // 2, x // 3
            if x % 3 == 0 and np.array_equal(screen[top:top + h, left:left + w], image):
                return top, left
            x = line.find(middle, x + 1)
    return None


def _rgb_on_white(path: Path) -> np.ndarray:
    image = Image.open(path).convert("RGBA")
    white = Image.new("RGBA", image.size, "white")
    return np.asarray(Image.alpha_composite(white, image).convert("RGB"))


def test_report_opens_in_headless_chromium_and_shows_the_confusion_matrices(report, tmp_path):
    shot = tmp_path / "report.png"
    done = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--hide-scrollbars", "--force-device-scale-factor=1",
         "--window-size=1400,8000", f"--screenshot={shot}", (report / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120)
    assert shot.is_file(), done.stderr
    screen = np.asarray(Image.open(shot).convert("RGB"))
    for png in CONFUSION_PNGS:
        image = _rgb_on_white(report / png)
        assert image.shape[0] > 200 and len(np.unique(image.reshape(-1, 3), axis=0)) > 10
        assert _find(screen, image) is not None, f"{png} is not on the rendered page"


def test_compare_refuses_an_unknown_revision_and_writes_nothing(sweep, tmp_path):
    out = tmp_path / "report"
    done = subprocess.run(["lorasent", "compare", "r4", "no-such-rev", "--out", str(out)],
                          cwd=sweep, env=env(), capture_output=True, text=True)
    assert done.returncode == 1
    assert "no-such-rev" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


WORKFLOW = REPO / ".github" / "workflows" / "metrics-diff.yml"


# The stand-in for GitHub's CLI: the pull request's comments live in $FAKE_GH_STATE (JSON),
# each `gh` call the workflow makes is recorded there; one comment per page, as
# `gh api --paginate` prints pages.
FAKE_GH = """\
import json, os, sys
path = os.environ["FAKE_GH_STATE"]
with open(path, encoding="utf-8") as f:
    state = json.load(f)
args = sys.argv[1:]
if args[:2] == ["api", "--paginate"] and args[2] == "repos/owner/repo/issues/7/comments":
    sys.stdout.write("".join(json.dumps([c]) + "\\n" for c in state["comments"]))
    sys.exit(0)
comments_url = "repos/owner/repo/issues/comments/"
if args[:3] == ["api", "--method", "PATCH"] and args[3].startswith(comments_url) \\
        and args[4] == "-F" and args[5].startswith("body=@"):
    found = int(args[3][len(comments_url):])
    with open(args[5][6:], encoding="utf-8") as f:
        next(c for c in state["comments"] if c["id"] == found)["body"] = f.read()
    state["calls"].append(["edit", found])
elif args[:5] == ["pr", "comment", "7", "--repo", "owner/repo"] and args[5] == "--body-file":
    found = max(c["id"] for c in state["comments"]) + 1
    with open(args[6], encoding="utf-8") as f:
        state["comments"].append({"id": found, "body": f.read(),
                                  "user": {"login": "github-actions[bot]", "type": "Bot"}})
    state["calls"].append(["create", found])
else:
    sys.exit(f"stand-in gh: unexpected call {args}")
with open(path, "w", encoding="utf-8") as f:
    json.dump(state, f)
"""
# The values GitHub gives the workflow's ${{ }} expressions, for the stand-in run
GITHUB = {"github.token": "token", "github.base_ref": "base",
          "github.event.pull_request.number": "7", "github.repository": "owner/repo",
          "github.server_url": "https://github.example", "github.run_id": "99",
          "github.api_url": "https://api.github.example",
          "github.event.pull_request.head.repo.full_name": "owner/repo"}  # not a fork's


def _runs(step: dict[str, Any]) -> bool:
    """Whether GitHub runs ``step`` for this pull request: its ``if``, of the form
    ``<context> == <context>`` or ``!=``, on :data:`GITHUB`'s values."""
    if "if" not in step:
        return True
    left, op, right = step["if"].split()
    assert op in ("==", "!=")
    return (GITHUB[left] == GITHUB[right]) == (op == "==")


def _pull_request(root: Path, tmp_path: Path, base: str, heads: list[str]) -> dict[str, Any]:
    """Run the workflow's steps as written, on a clone of ``root`` whose `origin` has
    branch ``base`` (a revision of ``root``), once for each push of ``heads``: after each,
    the state of the stand-in `gh` (comments and calls)."""
    flow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    steps = [s for job in ("compare", "comment") for s in flow["jobs"][job]["steps"]
             if "run" in s and "pip install" not in s["run"] and _runs(s)]  # the artifact:
    # the same folder; a step with `shell: python` runs as GitHub runs it, `python {0}`
    clone = tmp_path / "pull-request"
    run(tmp_path, "git", "clone", "-q", str(root), str(clone))
    run(clone, "git", "fetch", "-q", "origin", "+refs/exps/*:refs/exps/*",
        "+refs/tags/*:refs/tags/*")
    run(clone, "git", "update-ref", "refs/remotes/origin/base",
        run(root, "git", "rev-parse", f"{_ref(root, base)}^{{commit}}").strip())
    fake = tmp_path / "fake-gh"
    fake.mkdir()
    (fake / "gh").write_text(f"#!{sys.executable}\n{FAKE_GH}", encoding="utf-8")
    (fake / "gh").chmod(0o755)
    state_file = tmp_path / "gh-state.json"
    state_file.write_text(json.dumps({"comments": [
        {"id": 1, "body": "LGTM, one question", "user": {"login": "octocat", "type": "User"}}],
        "calls": []}), encoding="utf-8")
    environ = {**env(), "FAKE_GH_STATE": str(state_file),
               "PATH": f"{fake}{os.pathsep}{env()['PATH']}"}
    states = []
    for head in heads:
        run(clone, "git", "checkout", "-q", "--detach", _ref(root, head))
        for step in steps:
            step_env = {key: re.sub(r"\$\{\{ *([\w.]+) *\}\}", lambda m: GITHUB[m[1]], value)
                        for key, value in (step.get("env") or {}).items()}
            shell = ([sys.executable, "-c"] if step.get("shell") == "python"
                     else ["bash", "-euo", "pipefail", "-c"])
            done = subprocess.run([*shell, step["run"]], cwd=clone,
                                  env={**environ, **step_env}, capture_output=True, text=True,
                                  timeout=300)
            assert done.returncode == 0, f"{step['name']}:\n{done.stdout}\n{done.stderr}"
        states.append(json.loads(state_file.read_text(encoding="utf-8")))
    return {"states": states, "clone": clone}


def _folded(comment: str) -> str:
    return comment[comment.index("<details>"):comment.index("</details>")]


def test_two_pushes_of_a_pull_request_give_one_comment_edited_with_both_verdicts(sweep,
                                                                               tmp_path):
    """The pull request: base the committed tiny run; push 1 the r16-lr experiment (LoRA
    rank and learning rate changed), push 2 r16 (the learning rate back)."""
    from markdown_it import MarkdownIt

    flow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert set(flow[True]) == {"pull_request"}  # YAML 1.1 reads the key `on` as True
    scripts = "\n".join(step.get("run", "") for step in flow["jobs"]["compare"]["steps"])
    for retrain in ("dvc repro", "dvc exp run", "make run", "lorasent train",
                    "lorasent evaluate", "lorasent baseline", "dvc pull"):
        assert retrain not in scripts
    found = _pull_request(sweep, tmp_path, run(sweep, "git", "branch", "--show-current").strip(),
                          ["r16-lr", "r16"])
    first, second = found["states"]
    assert first["calls"] == [["create", 2]] and second["calls"] == [["create", 2], ["edit", 2]]
    assert [c["id"] for c in second["comments"]] == [1, 2]  # the reviewer's, and lorasent's
    heads = [run(sweep, "git", "rev-parse", _ref(sweep, name)).strip()
             for name in ("r16-lr", "r16")]
    one, two = first["comments"][1]["body"], second["comments"][1]["body"]
    assert one.startswith(f"<!-- lorasent-pr-comment head={heads[0]} -->\n### lorasent: B, "
                          f"this pull request's head ({heads[0][:7]}), against A, `base` (")
    assert two.startswith(f"<!-- lorasent-pr-comment head={heads[1]} -->\n")
    assert "### This push" not in one
    assert [one.count("\n**"), two.count("\n**")] == [1, 2]  # a verdict per comparison
    assert (f"### This push: B, the head ({heads[1][:7]}), against A, the previous head "
            f"({heads[0][:7]})") in two
    # each verdict and its params, old -> new; the base's paired table and flips
    assert "Params that differ (base → head): `train.learning_rate` 0.0002 → 0.001; " \
           "`train.lora.r` 8 → 16." in one
    assert "Params that differ (previous head → head): `train.learning_rate` 0.001 → 0.0002." \
        in two
    for comment in (one, two):
        assert "| Δ accuracy |" in comment and "McNemar's exact test on the 24 rows" in comment
        assert "| actual class | rows B fixed (A wrong, B right) | rows B broke (A right, B " \
               "wrong) |" in comment
        # the fold: changed metrics only, none of the keys no reviewer reads
        metrics = [row.split(" | ")[1] for row in _folded(comment).splitlines()
                   if row.startswith("| metrics/")]
        assert "accuracy" in metrics or "loss" in metrics
        assert not [m for m in metrics if re.search(
            r"learning_rate|grad_norm|runtime|per_second|_ci95_|confusion_matrix|epoch", m)]
        # valid GitHub Markdown: the table inside the fold renders as a table
        html = MarkdownIt("commonmark", {"html": True}).enable("table").render(comment)
        fold = html[html.index("<details>"):html.index("</details>")]
        assert "<summary>" in fold and "<table>" in fold and "<td>metrics/" in fold
    assert one.endswith("(`base` as compared here).\n")
    assert two.endswith(f"(`base` as compared here); this push: `make compare "
                        f"A={heads[0][:7]} B={heads[1][:7]}`.\n")
    # the footer compares what the comment compared
    base_commit = run(sweep, "git", "rev-parse", "--short", "HEAD").strip()
    assert (f"`git fetch origin pull/7/head`, then `make compare A={base_commit} "
            f"B={heads[1][:7]}`") in two
    report = found["clone"] / "pr-report"
    assert sorted(p.name for p in report.iterdir()) == [
        ".lorasent-output", "base-vs-head", "comment-id", "comment.md", "previous-vs-head"]
    assert (report / "base-vs-head" / "report.html").is_file()
    assert (report / "comment.md").read_text(encoding="utf-8") == two


def _lorasent_compare(root: Path, a: str, b: str, out: Path) -> tuple[str, str]:
    """`lorasent compare A B --out out`: its output, and report.md."""
    printed = run(root, "lorasent", "compare", a, b, "--out", str(out))
    return printed, (out / "report.md").read_text(encoding="utf-8")


def test_a_revision_against_itself_is_no_detectable_difference(sweep, tmp_path):
    printed, text = _lorasent_compare(sweep, "r4", "r4", tmp_path / "same")
    # the terminal gets the verdict as plain text (verdict.md keeps GitHub's bold)
    assert printed.startswith("No detectable difference: accuracy +0.000 [+0.000, +0.000], "
                              "McNemar p = 1; macro-F1 +0.000 [+0.000, +0.000]. A and B are "
                              "right on exactly the same rows.\n")
    assert "0 right only in B, 0 right only in A, p = 1." in text


def _revision(root: Path, name: str, base: str, files: dict[str, str]) -> None:
    """Tag ``name``: a commit of ``base``'s tree with ``files`` replaced, made with git's
    plumbing so that the workspace, the index and the branch stay as they are."""
    index = root.parent / f"index-{name}"
    environ = {**env(), "GIT_INDEX_FILE": str(index)}

    def git(*argv: str, stdin: str | None = None) -> str:
        return subprocess.run([*GIT, *argv], cwd=root, env=environ, input=stdin, text=True,
                              capture_output=True, check=True).stdout.strip()

    commit = git("rev-parse", f"{_ref(root, base)}^{{commit}}")
    git("read-tree", commit)
    for path, text in files.items():
        blob = git("hash-object", "-w", "--stdin", stdin=text)
        git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
    new = git("commit-tree", git("write-tree"), "-p", commit, "-m", name)
    git("tag", "-f", name, new)


def _ref(root: Path, rev: str) -> str:
    """An experiment's commit (refs/exps/...), or ``rev`` itself."""
    found = run(root, "git", "for-each-ref", "--format=%(objectname)", f"refs/exps/*/*/{rev}")
    return found.split()[0] if found.strip() else rev


def _show(root: Path, rev: str, path: str) -> str:
    return run(root, "git", "show", f"{_ref(root, rev)}:{path}")


def test_revisions_scored_on_other_rows_get_no_paired_test(sweep, tmp_path):
    from lorasent.review.markup import md_text  # the ids: hex digits cut every 6

    predictions = _show(sweep, "r4", "metrics/predictions.csv").splitlines()
    other = [predictions[0], *(f"other{i:012d}" + line[line.index(","):]
                               for i, line in enumerate(predictions[1:]))]
    _revision(sweep, "other-rows", "r4", {"metrics/predictions.csv": "\n".join(other) + "\n"})
    printed, text = _lorasent_compare(sweep, "r4", "other-rows", tmp_path / "other")
    assert printed.startswith("No paired test: A and B were scored on different test rows")
    a_ids = sorted(line.split(",")[0] for line in predictions[1:])
    assert ("A and B were scored on different test rows (24 rows only in A, 24 only in B; "
            f"only in A: {', '.join(map(md_text, a_ids[:5]))}, … (19 more); only in B: "
            f"{', '.join(f'other{i:012d}' for i in range(5))}, … (19 more))" in text)
    # the test split's part: no paired test (the second test set's rows still pair)
    split_part, _, reviews = text.partition("## Test set reviews-zh")
    assert "## Is the difference real?" not in split_part
    # no McNemar between A and B there (each side's adapter against its own references,
    # and the warning of it, keep theirs)
    metrics_part = split_part.partition("## Metrics (test split)")[2]
    assert "McNemar" not in metrics_part.partition("## References trained on the same rows")[0]
    assert "A 95% interval" in split_part  # each side's own interval instead
    assert "McNemar" in reviews


def test_warnings_a_reviewer_cannot_miss_are_in_the_report_and_the_comment(sweep, tmp_path):
    """B: an adapter that says the rarest class for every row (below the majority class,
    two classes never predicted), measured against a reference below the majority class,
    trained on a busy machine. A warning of a kind A has too is one note; the busy
    machine is said once, beside the training times, and not in the comment."""
    from lorasent.metrics import classification_metrics, read_predictions, warnings_by_kind
    from lorasent.review.verdict import alike

    text = _show(sweep, "r4", "metrics/predictions.csv")
    rows = read_predictions(text, "r4")
    evals = json.loads(_show(sweep, "r4", "metrics/eval.json"))
    rarest = int(np.argmin(np.bincount(rows.actual, minlength=3)))
    lines = text.splitlines()
    one_class = [lines[0]] + [",".join([line.split(",")[0], line.split(",")[1], LABELS[rarest],
                                        *("1.000000" if k == rarest else "0.000000"
                                          for k in range(3))]) for line in lines[1:]]
    collapsed = {**evals, **classification_metrics(rows.actual, [rarest] * len(rows.ids),
                                                   LABELS),
                 "reference_accuracy": 0.1, "reference": "zero_shot"}
    assert collapsed["accuracy"] < evals["baseline"]["majority_accuracy"]
    train = json.loads(_show(sweep, "r4", "metrics/provenance/train.json"))
    train["machine_load"] = {"load_average": 5.2, "window_s": 300, "cpu_cores": 2,
                             "busy": True}
    _revision(sweep, "collapsed", "r4", {
        "metrics/predictions.csv": "\n".join(one_class) + "\n",
        "metrics/eval.json": json.dumps(collapsed),
        "metrics/provenance/train.json": json.dumps(train)})
    in_b, in_a = warnings_by_kind(collapsed), warnings_by_kind(evals)
    others = ",".join(label for k, label in enumerate(LABELS) if k != rarest)
    # no_temperature: the tiny run keeps none (its fit is at scikit-learn's bound), A too
    assert list(in_b) == ["below_majority", f"never_predicted:{others}",
                          f"collapsed:{LABELS[rarest]}", "weak_reference:zero_shot:0.100",
                          "not_better:tfidf_lr", "no_temperature"]
    assert "no_temperature" in in_a
    expected = [f"- ⚠ B: {w}\n" if kind not in in_a else
                f"- Note: A and B alike, so not this change: {alike(in_a[kind], w)}\n"
                for kind, w in in_b.items()]
    _, report = _lorasent_compare(sweep, "r4", "collapsed", tmp_path / "collapsed")
    comment = _pull_request(sweep, tmp_path, "r4", ["collapsed"])["states"][0]["comments"][1]
    for line in expected:
        assert line in report and line in comment["body"], line
    busy = [line for line in report.splitlines() if "busy machine" in line]
    # A's real training may have shared the CPU with this test suite too
    assert len(busy) in (1, 2) and busy[-1] == (
        "B (collapsed) trained on a busy machine (load 5.2 on 2 cores): its training time "
        "and examples per second are not comparable; that affects runtimes only, not the "
        "metrics.")
    assert report.index("## Training (dvclive)") < report.index(busy[0]) < report.index("## Plots")
    assert "busy" not in comment["body"]
    # the report's confusion matrix is K x K, the never-predicted classes' cells drawn as 0
    table = report[report.index("B (collapsed), adapter:"):].split("\n\n")[1].splitlines()
    assert table[0] == "| actual \\ predicted | negative | neutral | positive |"
    cells = [[int(n) for n in row.strip("| ").split(" | ")[1:]] for row in table[2:]]
    assert [row[rarest] for row in cells] == np.bincount(rows.actual, minlength=3).tolist()
    assert sum(map(sum, cells)) == 24 and len(cells) == 3 and {len(r) for r in cells} == {3}


def test_seeds_runs_the_params_over_seeds_in_dvcs_queue(sweep):
    """`lorasent seeds` with a params change (2 seeds, in DVC's queue, 2 workers): mean ±
    sd. Both runs train (seed 42 too: DVC keeps no run cache of a stage with `persist`
    outputs, as train's metrics are). Two groups compared over seeds:
    tests/test_sweep_ray.py, on the sweep's runs."""
    run(sweep, "git", "checkout", "--", ".")  # from the committed run, not r4's workspace
    try:
        printed = run(sweep, "lorasent", "seeds", "-n", "2", "-j", "2", "--name", "b",
                      "-S", "train.lora.r=4")
    finally:
        _stop_workers(sweep)
    assert "b-seed42" in printed and "b-seed43" in printed
    assert "accuracy over seeds: " in printed and " ± " in printed
    assert "Compare with another group: lorasent compare 'b-seed*' '<other>-seed*'" in printed
    shown = json.loads(run(sweep, "dvc", "exp", "show", "--json"))
    params = next(exp_named(shown, "b-seed43"))["data"]["params"]["params.yaml"]["data"]
    assert (params["base"]["seed"], params["train"]["lora"]["r"]) == (43, 4)
    # a group against one revision is refused, saying what to do
    done = subprocess.run(["lorasent", "compare", "b-seed*", "r16"], cwd=sweep, env=env(),
                          capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "side B is one revision (r16)" in done.stderr and "make seeds" in done.stderr
