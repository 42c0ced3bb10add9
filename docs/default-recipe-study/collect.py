"""The default-recipe study's table, read from the experiments it landed (issue 59).

Usage: python docs/default-recipe-study/collect.py REPO [--logs DIR] [--out runs.json]
       [--encoder metrics/references/encoder/test.csv [--encoder-rows 1600]]

REPO is the study's clone (its experiments are git refs under refs/exps). For each
experiment: the params the study varies, the test accuracy with its 95% interval, the paired verdict
against TF-IDF + LR trained on the same rows, and the training steps. Prints a Markdown
table; --out writes the same as JSON (small: the study's record). --logs: the folder of the
sweeps' output, whose ``sweep: <experiment> succeeded in N s`` lines give each run's time
(clone, the five stages and the experiment's commit, on the sweep's CPUs). --encoder: the
MiniLM encoder reference's test predictions (the committed run's; the encoder does not
depend on the adapter's recipe, and every run here has the same 600 test rows): the paired
verdict against it too (lorasent.statistics.paired_comparison) of each experiment trained
on the same rows as it (--encoder-rows, the committed run's 1,600).
Then each recipe of 3 seeds: the mean and sd of its test accuracy, and Welch's t-test
between the two such recipes (scipy).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml
from scipy.stats import ttest_ind

from lorasent.metrics import Predictions, read_predictions
from lorasent.review.verdict import outcome
from lorasent.statistics import paired_comparison

KEYS = ("split.train_size", "train.num_train_epochs", "train.learning_rate", "train.lora.r",
        "base.seed")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def value(params: dict, key: str):
    for part in key.split("."):
        params = params[part]
    return params


def record(repo: Path, ref: str) -> dict:
    params = yaml.safe_load(git(repo, "show", f"{ref}:params.yaml"))
    evals = json.loads(git(repo, "show", f"{ref}:metrics/eval.json"))
    train = json.loads(git(repo, "show", f"{ref}:metrics/provenance/train.json"))
    tfidf = evals["references"]["tfidf_lr"]
    paired = tfidf["paired"]
    return {
        "experiment": ref.rsplit("/", 1)[1],
        "commit": git(repo, "rev-parse", ref).strip(),
        **{key: value(params, key) for key in KEYS},
        "steps": train["steps"],
        "accuracy": evals["accuracy"],
        "accuracy_ci95": [evals["accuracy_ci95_low"], evals["accuracy_ci95_high"]],
        "macro_f1": evals["macro_f1"],
        "tfidf_lr_accuracy": tfidf["accuracy"],
        "delta_vs_tfidf_lr": paired["delta_accuracy"],
        "delta_vs_tfidf_lr_ci95": [paired["delta_accuracy_ci95_low"],
                                   paired["delta_accuracy_ci95_high"]],
        "mcnemar_p": paired["mcnemar_p"],
        "verdict_vs_tfidf_lr": paired["verdict"],
    }


def versus(repo: Path, r: dict, theirs: Predictions) -> dict:
    """The experiment's paired verdict against a reference's predictions of its test rows."""
    ours = read_predictions(git(repo, "show", f"{r['commit']}:metrics/predictions.csv"),
                            f"{r['experiment']}:metrics/predictions.csv")
    order = {row_id: i for i, row_id in enumerate(theirs.ids)}
    at = np.array([order[row_id] for row_id in ours.ids])
    assert list(theirs.labels) == list(ours.labels)
    assert np.array_equal(theirs.actual[at], ours.actual), "another test set"
    p = paired_comparison(ours.actual, theirs.predicted[at], ours.predicted, ours.labels)
    return {"encoder_accuracy": p.accuracy[0], "delta_vs_encoder": p.delta_accuracy,
            "delta_vs_encoder_ci95": list(p.delta_accuracy_ci), "mcnemar_p_vs_encoder":
            p.p_value, "verdict_vs_encoder": outcome(p)}


def groups(rows: list[dict]) -> None:
    """Each recipe of 3 or more seeds: mean ± sd; Welch's t between the first two."""
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["experiment"].rsplit("-seed", 1)[0], []).append(r["accuracy"])
    full = {name: acc for name, acc in by.items() if len(acc) >= 3}
    print()
    for name, acc in full.items():
        print(f"{name}: test accuracy {np.mean(acc):.4f} ± {np.std(acc, ddof=1):.4f} "
              f"(mean ± sd over {len(acc)} seeds)")
    if len(full) >= 2:
        (a, x), (b, y) = list(full.items())[:2]
        t = ttest_ind(x, y, equal_var=False)
        print(f"{a} minus {b}: {np.mean(x) - np.mean(y):+.4f}, Welch's t p = {t.pvalue:.2f}")


def minutes(secs: float | None) -> str:
    return "–" if secs is None else f"{int(secs // 60)} min {int(secs % 60)} s"


def seconds(logs: Path | None) -> dict[str, float]:
    found: dict[str, float] = {}
    for log in sorted(logs.glob("*.log")) if logs else ():
        for name, secs in re.findall(r"^sweep: (\S+) succeeded in (\d+) s", log.read_text(),
                                     re.MULTILINE):
            found[name] = float(secs)
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path)
    parser.add_argument("--logs", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--encoder", type=Path)
    parser.add_argument("--encoder-rows", type=int, default=1600)
    args = parser.parse_args(argv)
    refs = git(args.repo, "for-each-ref", "refs/exps", "--format=%(refname)").split()
    rows = sorted((record(args.repo, ref) for ref in refs), key=lambda r: r["experiment"])
    times = seconds(args.logs)
    encoder = (read_predictions(args.encoder.read_text(encoding="utf-8"), str(args.encoder))
               if args.encoder else None)
    for r in rows:
        r["run_seconds"] = times.get(r["experiment"])
        if encoder and r["split.train_size"] == args.encoder_rows:
            r.update(versus(args.repo, r, encoder))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    print("| experiment | rows | epochs | lr | r | seed | steps | run time | test acc. "
          "[95%] | TF-IDF + LR | Δ vs it [95%] | McNemar p |")
    print("|---|" + "---|" * 11)
    for r in rows:
        lo, hi = r["accuracy_ci95"]
        dlo, dhi = r["delta_vs_tfidf_lr_ci95"]
        print(f"| {r['experiment']} | {r['split.train_size']} | {r['train.num_train_epochs']} | "
              f"{r['train.learning_rate']:g} | {r['train.lora.r']} | {r['base.seed']} | "
              f"{r['steps']} | {minutes(r['run_seconds'])} | {r['accuracy']:.3f} "
              f"[{lo:.3f}, {hi:.3f}] | {r['tfidf_lr_accuracy']:.3f} | "
              f"{r['delta_vs_tfidf_lr']:+.3f} [{dlo:+.3f}, {dhi:+.3f}] | {r['mcnemar_p']:.2g} |")
    if args.encoder:
        print("\n| experiment | encoder + LR | Δ vs it [95%] | McNemar p | verdict |")
        print("|---|---|---|---|---|")
        for r in (r for r in rows if "delta_vs_encoder" in r):
            lo, hi = r["delta_vs_encoder_ci95"]
            print(f"| {r['experiment']} | {r['encoder_accuracy']:.3f} | "
                  f"{r['delta_vs_encoder']:+.3f} [{lo:+.3f}, {hi:+.3f}] | "
                  f"{r['mcnemar_p_vs_encoder']:.2g} | {r['verdict_vs_encoder']} |")
    groups(rows)


if __name__ == "__main__":
    sys.exit(main())
