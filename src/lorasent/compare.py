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

A and B are anything DVC takes as a revision: a commit, a branch, a tag, an experiment
name (``dvc exp show``), and ``workspace`` for B (the files as they are now). The
report is a folder, written whole or not at all:

- ``report.md``: the tables and links to the PNGs, for a pull request;
- ``report.html``: the same page with the PNGs inside it (``data:`` URIs); it opens
  offline, in any browser, alone;
- one PNG per plot, named after the plot.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lorasent.artifacts import atomic_dir
from lorasent.errors import LorasentError
from lorasent.paths import EVAL_METRICS

WORKSPACE = "workspace"  # DVC's name for the files as they are, uncommitted changes too
REPORT_MD = "report.md"
REPORT_HTML = "report.html"

# (key in metrics/eval.json, name in the report): the headline rows, in this order.
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


def compare(rev_a: str = "HEAD", rev_b: str = WORKSPACE, out_dir: str | Path | None = None,
            repo: str | Path = ".") -> Path:
    """Write the report comparing revision ``rev_b`` against ``rev_a``; returns its folder.

    Deltas are B minus A. ``out_dir`` defaults to ``reports/<A>-vs-<B>`` in ``repo``.

    Raises:
        LorasentError: ``rev_a`` is ``workspace``; DVC cannot read a revision (the
            message is DVC's); neither revision has ``metrics/eval.json``.
    """
    repo = Path(repo)
    if rev_a == WORKSPACE:
        raise LorasentError("compare: A must be a revision (a commit, branch, tag or "
                            "experiment); only B may be 'workspace'")
    out = Path(out_dir) if out_dir else repo / "reports" / f"{_slug(rev_a)}-vs-{_slug(rev_b)}"
    revs = [rev_a] + ([] if rev_b == WORKSPACE else [rev_b])
    metrics = _dvc(repo, "metrics", "diff", *revs, "--all", "--json")
    params = _dvc(repo, "params", "diff", *revs, "--all", "--json")
    plots = _dvc(repo, "plots", "diff", *revs, "--json")["data"]
    metrics_md = _dvc(repo, "metrics", "diff", *revs, "--all", "--md", as_json=False)
    evals = metrics.get(str(EVAL_METRICS), {})
    if not evals:
        raise LorasentError(f"compare: neither {rev_a} nor {rev_b} has {EVAL_METRICS}; "
                            "run the pipeline (dvc repro) and commit its metrics first")

    with atomic_dir(out) as tmp:
        images = {title: _render_png(specs, tmp) for title, specs in plots.items()}
        text = _markdown(rev_a, rev_b, _commits(repo, rev_a, rev_b), params, metrics,
                         images, metrics_md)
        (tmp / REPORT_MD).write_text(text, encoding="utf-8")
        (tmp / REPORT_HTML).write_text(_html(text, tmp, f"lorasent: {rev_a} vs {rev_b}"),
                                       encoding="utf-8")
    return out


# --------------------------------------------------------------------------- DVC and git


def _dvc(repo: Path, *args: str, as_json: bool = True) -> Any:
    done = subprocess.run(["dvc", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise LorasentError(f"compare: `dvc {' '.join(args)}` failed in {repo.resolve()}: "
                            + " ".join(detail[-3:]))
    return json.loads(done.stdout or "{}") if as_json else done.stdout


def _commits(repo: Path, *revs: str) -> dict[str, str]:
    """``{rev: short commit}`` for the revisions git resolves, experiments included
    (their refs are ``refs/exps/<xx>/<baseline>/<name>``)."""
    found = {}
    for rev in revs:
        for cmd in (["rev-parse", "--short", "--verify", "-q", f"{rev}^{{commit}}"],
                    ["for-each-ref", "--format=%(objectname:short)", f"refs/exps/*/*/{rev}"]):
            done = subprocess.run(["git", *cmd], cwd=repo, capture_output=True, text=True)
            if done.returncode == 0 and done.stdout.strip():
                found[rev] = done.stdout.split()[0]
                break
    return found


# ----------------------------------------------------------------------------- plots


def _render_png(specs: list[dict], folder: Path) -> list[str]:
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


def _static(spec: dict) -> dict:
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


def _vl_version(spec: dict) -> str | None:
    """The newest Vega-Lite vl-convert bundles with the major version of the spec's
    ``$schema`` (DVC writes v5 specs); None (vl-convert's default) when unknown."""
    import vl_convert

    major = re.search(r"/vega-lite/v(\d+)", spec.get("$schema", ""))
    versions = [v for v in vl_convert.get_vegalite_versions()
                if major and v.split(".")[0] == major.group(1)]
    return versions[-1] if versions else None


# ---------------------------------------------------------------------------- report


def _markdown(rev_a: str, rev_b: str, commits: dict[str, str], params: dict, metrics: dict,
              images: dict[str, list[str]], metrics_md: str) -> str:
    evals = metrics.get(str(EVAL_METRICS), {})
    a, b = (f"{rev} ({commits[rev]})" if rev in commits else rev for rev in (rev_a, rev_b))
    lines = [f"# lorasent: {rev_a} vs {rev_b}", "",
             f"A is **{a}**, B is **{b}**; Δ is B − A. From the metrics each revision "
             "committed (`dvc metrics diff`, `dvc params diff`, `dvc plots diff`).", ""]
    for key in ("mode", "reference", "test_rows"):
        if key in evals:
            lines.append(f"- {key.replace('_', ' ')}: {_pair(evals[key])}")
    for key in ("reference_note", "relative_error_reduction_note"):
        for side in ("old", "new"):
            if evals.get(key, {}).get(side):
                lines.append(f"- {key.replace('_', ' ')} ({'A' if side == 'old' else 'B'}): "
                             f"{evals[key][side]}")
    lines += ["", "## Params that differ", ""]
    changed = [(f"{file}: {key}" if file != "params.yaml" else key, v)
               for file, keys in params.items() for key, v in keys.items()
               if v.get("old") != v.get("new")]
    lines += _table(["param", "A", "B"], ([f"`{k}`", _fmt(v.get("old")), _fmt(v.get("new"))]
                                          for k, v in changed)) if changed else ["None."]

    lines += ["", "## Metrics (test split)", ""]
    lines += _table(["metric", "A", "B", "Δ"],
                    ([name, *_row(evals.get(key))] for key, name in HEADLINE if key in evals))
    lines += ["", "## Per class (test split)", ""]
    header = ["class"] + [f"{name} {side}" for _, name, delta in PER_CLASS
                          for side in ("A", "B", "Δ")[:3 if delta else 2]]
    lines += _table(header, ([label, *(cell for key, _, delta in PER_CLASS
                                       for cell in _row(evals.get(f"per_class.{label}.{key}"))
                                       [:3 if delta else 2])]
                             for label in _labels(params, evals)))
    training = [(name, metrics.get(file, {}).get(key)) for file, key, name in TRAINING]
    if any(v for _, v in training):
        lines += ["", "## Training (dvclive)", ""]
        lines += _table(["metric", "A", "B", "Δ"], ([name, *_row(v)] for name, v in training if v))
    lines += ["", "## Plots", ""]
    for title, names in images.items():
        lines += [f"### {title}", ""] + [f"![{title}]({name})" for name in names] + [""]
    lines += ["## Every metric (`dvc metrics diff --all --md`)", "", "<details>",
              "<summary>All keys of every metrics file</summary>", "", metrics_md.strip(), "",
              "</details>", ""]
    return "\n".join(lines)


def _labels(params: dict, evals: dict) -> list[str]:
    """The classes in ``base.labels`` order (A's, then any that only B has); those of
    the per-class metrics when params.yaml has no labels."""
    import yaml

    labels = params.get("params.yaml", {}).get("base.labels", {})
    # DVC writes a list param as its Python repr, which YAML reads back
    ordered = [label for side in ("old", "new") for label in
               (yaml.safe_load(labels[side]) if isinstance(labels.get(side), str)
                else labels.get(side) or [])]
    ordered += [k.split(".")[1] for k in evals if k.startswith("per_class.") and k.endswith(".f1")]
    return list(dict.fromkeys(ordered))


def _row(diff: dict | None) -> list[str]:
    """``[A, B, Δ]`` cells of one ``dvc metrics diff`` entry."""
    if not diff:
        return ["—", "—", "—"]
    return [_fmt(diff.get("old")), _fmt(diff.get("new")), _fmt(diff.get("diff"), signed=True)]


def _pair(diff: dict) -> str:
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


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
                  for row in rows]


def _html(text: str, folder: Path, title: str) -> str:
    """``text`` (CommonMark with tables) as one HTML page, its PNGs embedded."""
    import html

    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True}).enable("table")

    def image(renderer, tokens, idx, options, env):
        token = tokens[idx]
        src = token.attrGet("src")
        if src and (folder / src).is_file():
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
