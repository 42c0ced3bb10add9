"""The default-recipe study's table, read from the experiments it landed (issue 59).

Usage: python docs/default-recipe-study/collect.py REPO [--logs DIR] [--out runs.json]

REPO is the study's clone (its experiments are git refs under refs/exps). For each
experiment: the params the study varies, the test accuracy with its 95% interval, the paired verdict
against TF-IDF + LR trained on the same rows, and the training steps. Prints a Markdown
table; --out writes the same as JSON (small: the study's record). --logs: the folder of the
sweeps' output, whose ``sweep: <experiment> succeeded in N s`` lines give each run's time
(clone, the five stages and the experiment's commit, on the sweep's CPUs).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

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
    args = parser.parse_args(argv)
    refs = git(args.repo, "for-each-ref", "refs/exps", "--format=%(refname)").split()
    rows = sorted((record(args.repo, ref) for ref in refs), key=lambda r: r["experiment"])
    times = seconds(args.logs)
    for r in rows:
        r["run_seconds"] = times.get(r["experiment"])
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


if __name__ == "__main__":
    sys.exit(main())
