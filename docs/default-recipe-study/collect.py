"""The default-recipe study's record and tables (issue 69): each candidate recipe over
seeds, chosen on the validation split.

Usage:
    python docs/default-recipe-study/collect.py record REPO --logs DIR [--runs runs.json]
    python docs/default-recipe-study/collect.py report [--runs runs.json]

``record`` reads every experiment of the study's clone REPO (its git refs under
refs/exps, as ``lorasent sweep`` and ``lorasent seeds`` land them) and adds it to
``runs.json`` (the study's record, kept in git): its candidate (the experiment's name
less ``-seed<S>``), seed, steps, CPU, run time (from DIR's sweep and seeds output), and
its ``metrics/validation.json`` and ``metrics/eval.json`` whole, so that the report is
recomputed from the record alone. An experiment already in the record keeps its entry:
runs made on other machines add up.

``report`` prints the study's Markdown tables from the record, one row per candidate in
:data:`CANDIDATES` order (cheapest first): mean ± sd over its seeds of the validation
accuracy (what chooses), then of the test accuracy and macro-F1 (reported), steps and run
time. The rule, fixed before any run landed (:func:`choose`), is the one-standard-error
rule (Hastie, Tibshirani & Friedman, *The Elements of Statistical Learning*, 2nd ed.,
§7.10): the highest mean validation accuracy among the candidates within the budget,
``m``, with its standard error over seeds ``se = sd / sqrt(n)``; the choice is the
cheapest candidate within the budget whose mean is at least ``m - se``. The candidates
score the same validation rows, so the seeds' spread is the noise between them. Then the
chosen candidate's runs against each supervised reference over the seeds
(:func:`lorasent.experiments.seeds.references_over_seeds`, as ``lorasent seeds`` ends),
and every candidate against the chosen one on the validation split (Welch's t-test,
:func:`lorasent.statistics.group_comparison`).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from lorasent.contracts import EvalMetrics, ValidationMetrics, parse
from lorasent.experiments.seeds import references_over_seeds
from lorasent.experiments.selection import choose_on_validation
from lorasent.statistics import GroupComparison, group_comparison

# The candidates, cheapest first (training steps on the default's 8-example batches):
# name -> (what it changes from the committed params, within the make run budget).
# The budget: make run from a fresh clone under 25 minutes on 2 idle cores of the
# committed run's CPU (params.yaml). 3 epochs adds 200 steps, about 6.5 minutes there
# (1.95 s a step), and 3,200 rows doubles the fine-tuned encoder's 203 s: both outside it.
CANDIDATES = {
    "epochs1": ("1 epoch (the default until issue 59)", True),
    "epochs2": ("2 epochs (the committed default)", True),
    "rows3200": ("1 epoch over 3,200 rows", False),
    "epochs3": ("3 epochs", False),
}
MIN_SEEDS = 3


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def shown(repo: Path, ref: str, path: str) -> dict:
    return json.loads(git(repo, "show", f"{ref}:{path}"))


def run_seconds(logs: Path) -> dict[str, float]:
    """Each experiment's run time in seconds: a sweep's ``sweep: <name> succeeded in N s``;
    for ``lorasent seeds`` (one run at a time), the gap between two ``Success`` lines."""
    found: dict[str, float] = {}
    for log in sorted(logs.glob("*.log")):
        text = log.read_text(encoding="utf-8", errors="replace")
        for name, secs in re.findall(r"^sweep: (\S+) succeeded in (\d+) s", text, re.M):
            found[name] = float(secs)
        last = 0.0
        for name, secs in re.findall(r"^seeds: (\S+) Success \((\d+) s\)", text, re.M):
            found[name], last = float(secs) - last, float(secs)
    return found


def record(repo: Path, logs: Path, runs_path: Path) -> None:
    """Add REPO's experiments that the record lacks to ``runs_path``."""
    runs = json.loads(runs_path.read_text(encoding="utf-8")) if runs_path.exists() else []
    known = {r["experiment"] for r in runs}
    seconds = run_seconds(logs)
    for ref in git(repo, "for-each-ref", "refs/exps", "--format=%(refname)").split():
        name = ref.rsplit("/", 1)[1]
        group, _, seed = name.rpartition("-seed")
        if name in known or group not in CANDIDATES:
            continue
        params = yaml.safe_load(git(repo, "show", f"{ref}:params.yaml"))
        train = shown(repo, ref, "metrics/provenance/train.json")
        runs.append({
            "experiment": name, "candidate": group, "seed": int(seed),
            "commit": git(repo, "rev-parse", ref).strip(),
            "train_size": params["split"]["train_size"],
            "num_train_epochs": params["train"]["num_train_epochs"],
            "steps": train["steps"], "cpu": train["device"]["name"],
            "run_seconds": seconds.get(name),
            "validation": shown(repo, ref, "metrics/validation.json"),
            "eval": shown(repo, ref, "metrics/eval.json"),
        })
    runs.sort(key=lambda r: (list(CANDIDATES).index(r["candidate"]), r["seed"]))
    runs_path.write_text(json.dumps(runs, indent=1, ensure_ascii=False) + "\n",
                         encoding="utf-8")
    print(f"{runs_path}: {len(runs)} runs ({len(runs) - len(known)} added)")


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f} (1 seed)"
    return f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}"


def choose(groups: dict[str, list[float]]) -> tuple[str | None, str]:
    """The one-standard-error rule over ``{candidate: validation accuracies}`` (cheapest
    first): the chosen candidate (None while no candidate within the budget has
    :data:`MIN_SEEDS` seeds) and the sentence that says why."""
    eligible = {c: v for c, v in groups.items() if CANDIDATES[c][1] and len(v) >= MIN_SEEDS}
    if not eligible:
        return None, "no candidate within the budget has its seeds yet"
    names = list(eligible)
    best = names[choose_on_validation([float(np.mean(v)) for v in eligible.values()])]
    values = eligible[best]
    mean, se = float(np.mean(values)), float(np.std(values, ddof=1)) / math.sqrt(len(values))
    chosen = next(c for c in names if np.mean(eligible[c]) >= mean - se)
    why = (f"the highest mean validation accuracy within the budget is {best}'s, "
           f"{mean:.4f} (standard error over its {len(values)} seeds {se:.4f})")
    if chosen != best:
        why += (f"; {chosen} is cheaper and within one standard error of it "
                f"({np.mean(eligible[chosen]):.4f})")
    return chosen, why


def report(runs: list[dict]) -> list[str]:
    """The study's tables and sentences (Markdown lines) from the record ``runs``."""
    by: dict[str, list[dict]] = {c: [r for r in runs if r["candidate"] == c]
                                 for c in CANDIDATES}
    by = {c: rs for c, rs in by.items() if rs}
    validation = {c: [r["validation"]["accuracy"] for r in rs] for c, rs in by.items()}
    chosen, why = choose(validation)
    out = ["| candidate | within budget | steps | seeds | validation accuracy | "
           "test accuracy | test macro-F1 | run time (min) | CPU |",
           "|---|---|---|---|---|---|---|---|---|"]
    for c, rs in by.items():
        mark = " **← chosen on validation**" if c == chosen else ""
        secs = [r["run_seconds"] for r in rs if r["run_seconds"]]
        minutes = f"{np.mean(secs) / 60:.1f}" if secs else "–"
        out.append(f"| {CANDIDATES[c][0]}{mark} | {'yes' if CANDIDATES[c][1] else 'no'} | "
                   f"{rs[0]['steps']} | {', '.join(str(r['seed']) for r in rs)} | "
                   f"{spread(validation[c])} | {spread([r['eval']['accuracy'] for r in rs])} | "
                   f"{spread([r['eval']['macro_f1'] for r in rs])} | {minutes} | "
                   f"{', '.join(sorted({r['cpu'] for r in rs}))} |")
    out.append(f"\nThe choice: {chosen or 'none yet'}: {why}.")
    if chosen is None:
        return out
    out.append("\nEach candidate against the chosen one, validation accuracy over seeds "
               "(Welch's t-test):")
    for c, values in validation.items():
        if c != chosen and len(values) >= 2:
            test = group_comparison("accuracy", validation[chosen], values)
            p = "–" if test.p_value is None else f"{test.p_value:.2g}"
            out.append(f"- {c}: {np.mean(values) - np.mean(validation[chosen]):+.4f}, "
                       f"p = {p} ({GroupComparison.spread(values)})")
    for r in by[chosen]:
        parse(ValidationMetrics, r["validation"], r["experiment"], "rerun it")
    evals = [(r["seed"], parse(EvalMetrics, r["eval"], r["experiment"], "rerun it"))
             for r in by[chosen]]
    out.append(f"\nThe chosen candidate ({chosen}) against the references over its seeds, "
               "test split:\n")
    return out + references_over_seeds(evals).lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("repo", type=Path)
    rec.add_argument("--logs", type=Path, required=True)
    for p in (rec, sub.add_parser("report")):
        p.add_argument("--runs", type=Path, default=Path(__file__).with_name("runs.json"))
    args = parser.parse_args(argv)
    if args.command == "record":
        record(args.repo, args.logs, args.runs)
    else:
        print("\n".join(report(json.loads(args.runs.read_text(encoding="utf-8")))))


if __name__ == "__main__":
    sys.exit(main())
