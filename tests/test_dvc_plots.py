"""DVC's own confusion plots draw what the report draws (issue 28, item 5): actual classes
on the rows, predicted on the columns, every cell with its count, a class never predicted
kept, the classes in base.labels order.

On a throwaway git + DVC repo holding this repo's confusion plot definitions (dvc.yaml) and
template (.dvc/plots/), with plot files written by lorasent.metrics: no training."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from lorasent.metrics import classification_metrics, confusion_records
from lorasent.params import read_yaml

LABELS = ["positive", "negative", "neutral"]  # not sorted: the params' order is the plot's
FILES = {"Confusion matrix, adapter (test split)": "metrics/confusion.json",
         "Confusion matrix, baseline (test split)": "metrics/baseline_confusion.json"}
# v1: 8 test rows, `neutral` never predicted by the adapter; the baseline always `negative`
ACTUAL = [0, 0, 0, 1, 1, 2, 2, 2]
V1 = {"adapter": [0, 0, 1, 1, 1, 0, 1, 1], "baseline": [1] * 8}
WORKSPACE = {"adapter": [0, 0, 2, 1, 1, 2, 2, 1], "baseline": [1] * 8}
# what v1's adapter cells must be: actual -> predicted -> count
V1_ADAPTER = {"positive": {"positive": 2, "negative": 1, "neutral": 0},
              "negative": {"positive": 0, "negative": 2, "neutral": 0},
              "neutral": {"positive": 1, "negative": 2, "neutral": 0}}


def _run(root: Path, *argv: str) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    program = (["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
                "-c", "commit.gpgsign=false"] if argv[0] == "git"
               else [str(Path(sys.executable).parent / "dvc")])
    return subprocess.run([*program, *argv[1:]], cwd=root, env=env, check=True,
                          capture_output=True, text=True).stdout


def _write(root: Path, predicted: dict[str, list[int]]) -> None:
    for who, file in (("adapter", "metrics/confusion.json"),
                      ("baseline", "metrics/baseline_confusion.json")):
        matrix = classification_metrics(ACTUAL, predicted[who], LABELS)["confusion_matrix"]
        (root / file).write_text(json.dumps(confusion_records(matrix, LABELS), indent=2),
                                 encoding="utf-8")


@pytest.fixture(scope="module")
def plots_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """v1 committed, the workspace changed: this repo's confusion plots and template."""
    root = tmp_path_factory.mktemp("plots")
    _run(root, "git", "init", "-q")
    _run(root, "dvc", "init", "-q")
    dvc_yaml = read_yaml((REPO / "dvc.yaml").read_text(encoding="utf-8"), "dvc.yaml")
    plots = [plot for plot in dvc_yaml["plots"] if next(iter(plot)) in FILES]
    assert len(plots) == 2
    (root / "dvc.yaml").write_text(json.dumps({"plots": plots}), encoding="utf-8")  # YAML too
    (root / ".dvc" / "plots").mkdir()
    for template in (REPO / ".dvc" / "plots").iterdir():
        (root / ".dvc" / "plots" / template.name).write_bytes(template.read_bytes())
    (root / "metrics").mkdir()
    _write(root, V1)
    _run(root, "git", "add", "-A")
    _run(root, "git", "commit", "-q", "-m", "v1")
    _run(root, "git", "tag", "v1")
    _write(root, WORKSPACE)
    return root


def _specs(root: Path, *argv: str) -> dict[str, dict[str, Any]]:
    out = json.loads(_run(root, "dvc", "plots", *argv, "--json"))
    assert "errors" not in out, out
    return {title: specs[0]["content"] for title, specs in out["data"].items()}


def _cells(spec: dict[str, Any], rev: str) -> dict[str, dict[str, int]]:
    cells: dict[str, dict[str, int]] = {}
    for v in spec["data"]["values"]:
        if v["rev"] == rev:
            cells.setdefault(v["actual"], {})[v["predicted"]] = v["count"]
    return cells


def test_the_confusion_plots_use_the_projects_template_which_compare_skips():
    from lorasent.review.render import own_plot_titles

    dvc_yaml = read_yaml((REPO / "dvc.yaml").read_text(encoding="utf-8"), "dvc.yaml")
    defs = {title: spec for plot in dvc_yaml["plots"] for title, spec in plot.items()}
    for title, file in FILES.items():
        assert defs[title] == {"template": "confusion_counts", "x": "predicted",
                               "y": {file: "actual"}}
    assert (REPO / ".dvc" / "plots" / "confusion_counts.json").is_file()
    # compare draws these itself, and the reliability diagram
    assert own_plot_titles(REPO) == {*FILES, "Reliability diagram, adapter (test split)"}


@pytest.mark.slow
def test_dvc_plots_show_puts_actual_on_the_rows_with_every_count(plots_repo):
    specs = _specs(plots_repo, "show")
    assert sorted(specs) == sorted(FILES)
    for spec in specs.values():
        enc = spec["spec"]["encoding"]
        assert (enc["y"]["field"], enc["x"]["field"]) == ("actual", "predicted")
        assert enc["x"]["sort"] is None and enc["y"]["sort"] is None  # data order: base.labels
        texts = [layer for layer in spec["spec"]["layer"]
                 if isinstance(layer["mark"], dict) and layer["mark"]["type"] == "text"]
        assert [t["encoding"]["text"]["field"] for t in texts] == ["count"]
        assert spec["facet"]["column"]["field"] == "rev"
        assert "params" not in spec  # no checkbox hides the counts
    adapter = specs["Confusion matrix, adapter (test split)"]
    assert [(v["actual"], v["predicted"]) for v in adapter["data"]["values"]] == [
        (a, p) for a in LABELS for p in LABELS]
    baseline = _cells(specs["Confusion matrix, baseline (test split)"], "workspace")
    assert baseline == {a: {"positive": 0, "negative": n, "neutral": 0}
                        for a, n in zip(LABELS, [3, 2, 3], strict=True)}


def _drawn(spec: dict[str, Any]) -> tuple[dict[str, list[str]], dict[str, dict[str, int]]]:
    """What vl-convert draws of a one-panel spec: each axis's title and classes (y top to
    bottom, x left to right), and each cell's count text read back by where it is drawn:
    row (actual) -> column (predicted) -> count."""
    import vl_convert

    png = vl_convert.vegalite_to_png(spec, vl_version="5.8", scale=1)
    assert png.startswith(b"\x89PNG") and len(png) > 1000
    svg = vl_convert.vegalite_to_svg(spec, vl_version="5.8")
    axes = {f"{axis} {title}": values.split(", ") for axis, title, values in re.findall(
        r'aria-label="([XY])-axis titled \'(\w+)\' for a discrete scale with \d+ values: '
        r'([^"]*)"', svg)}
    rows, columns = axes["Y actual"], axes["X predicted"]
    step = spec["spec"]["width"]["step"]
    assert spec["spec"]["height"]["step"] == step
    counts: dict[str, dict[str, int]] = {}
    for x, y, n in re.findall(r'<text[^>]*translate\(([\d.]+),([\d.]+)\)[^>]*'
                              r'font-size="14px"[^>]*>(\d+)</text>', svg):
        row, col = rows[int(float(y) // step)], columns[int(float(x) // step)]
        assert col not in counts.get(row, {})
        counts.setdefault(row, {})[col] = int(n)
    return axes, counts


@pytest.mark.slow
def test_the_spec_draws_a_k_by_k_matrix_with_the_never_predicted_class(plots_repo):
    spec = _specs(plots_repo, "diff", "v1")["Confusion matrix, adapter (test split)"]
    assert _cells(spec, "v1") == V1_ADAPTER
    one = {**spec, "data": {"values": [v for v in spec["data"]["values"] if v["rev"] == "v1"]}}
    axes, counts = _drawn(one)
    # actual on the rows, predicted on the columns; `neutral`, never predicted, has its column
    assert axes == {"Y actual": LABELS, "X predicted": LABELS}
    assert counts == V1_ADAPTER  # every cell's count drawn in its cell, zeros too


@pytest.mark.slow
def test_dvc_plots_diff_draws_both_revisions_and_its_html_needs_a_cdn(plots_repo, tmp_path):
    spec = _specs(plots_repo, "diff", "v1")["Confusion matrix, adapter (test split)"]
    assert {v["rev"] for v in spec["data"]["values"]} == {"v1", "workspace"}
    assert _cells(spec, "workspace")["neutral"] == {"positive": 0, "negative": 1, "neutral": 2}
    _run(plots_repo, "dvc", "plots", "diff", "v1", "-o", str(tmp_path / "html"))
    html = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    assert re.findall(r'<script src="https://cdn\.jsdelivr\.net/npm/(vega[\w-]*)@', html) == [
        "vega", "vega-lite", "vega-embed"]  # docs/experiments.md: it needs network
