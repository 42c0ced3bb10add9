"""Nested stratified subsets of the training split (``train.fraction``), for learning curves.

A fraction ``f`` of the training split keeps, of each class ``k`` with ``n_k`` training
rows, the first ``ceil(f * n_k)`` rows of a per-class order drawn once from the training
seed (``base.seed``; the split itself is drawn by ``split.seed``, so runs over training
seeds share one split and differ in which of its rows a fraction keeps). The order does
not depend on ``f``, so the
rows of a smaller fraction are among those of every larger one (nested), and each class
keeps its share of the rows (stratified, rounded up: every class of the split keeps at
least one row). The rows kept stay in the split's order, so ``f = 1`` is the split itself,
row for row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lorasent.errors import LorasentError

# f * n is rounded to this many decimals before ceil, so that a float product such as
# 0.1 * 30 = 3.0000000000000004 counts as the 3 rows it means, not 4.
_DECIMALS = 9


def class_rows(fraction: float, n: int) -> int:
    """The rows a class of ``n`` training rows keeps at ``fraction``: ``ceil(fraction * n)``
    (``n`` when ``fraction`` is 1, 0 when ``n`` is 0)."""
    return min(n, math.ceil(round(fraction * n, _DECIMALS)))


def subset_counts(class_counts: Mapping[str, int], fraction: float) -> dict[str, int]:
    """Training rows per class at ``fraction`` from the split's ``class_counts`` (label ->
    rows, e.g. ``metrics/data.json``'s ``class_counts.train``), in their order.

    Raises:
        LorasentError: ``fraction`` outside (0, 1], or a class with no training rows: one
            line naming the fraction and the class.
    """
    if not 0 < fraction <= 1:
        raise LorasentError(f"train.fraction: {fraction:g} is not in (0, 1]; give the share "
                            "of each class's training rows to train on, e.g. 0.25")
    empty = [label for label, n in class_counts.items() if n < 1]
    if empty:
        raise LorasentError(
            f"train.fraction {fraction:g}: class {empty[0]!r} has no training rows in the "
            "split, so no subset of it has one of each class; add rows of that class or "
            "change split.train_size")
    return {label: class_rows(fraction, n) for label, n in class_counts.items()}


def training_subset(rows: Sequence[dict[str, Any]], fraction: float, seed: int,
                    labels: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of the training split (``{"label_id": int, ...}`` each, as
    ``data/split/train.jsonl`` holds them) that ``fraction`` keeps (the module's rule),
    in their order. The per-class order is ``numpy.random.default_rng([seed, k])``'s
    permutation of class ``k``'s rows (k: the class id).

    Raises:
        LorasentError: ``fraction`` outside (0, 1], or a class of ``labels`` with no
            training rows while ``fraction`` < 1 (:func:`subset_counts`).
    """
    if fraction == 1:
        return list(rows)
    by_class: dict[int, list[int]] = {k: [] for k in range(len(labels))}
    for i, row in enumerate(rows):
        by_class.setdefault(int(row["label_id"]), []).append(i)
    counts = subset_counts({labels[k]: len(ids) for k, ids in by_class.items()}, fraction)
    kept: list[int] = []
    for k, ids in by_class.items():
        order = np.random.default_rng([seed, k]).permutation(len(ids))
        kept += [ids[j] for j in order[:counts[labels[k]]]]
    return [rows[i] for i in sorted(kept)]
