"""The metrics contract: what every evaluation reports, in strict JSON.

Per-class scores come from scikit-learn (``precision_recall_fscore_support`` with
``zero_division=0``), always over every configured class in the configured order, so
a class absent from the test set or never predicted still has its row, and the
confusion matrix is always K x K.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support


def classification_metrics(y_true: Sequence[int], y_pred: Sequence[int],
                           labels: Sequence[str]) -> dict[str, Any]:
    """Accuracy, macro-F1, per-class scores and the confusion matrix.

    Args:
        y_true: gold class ids, ints in ``[0, K)``, length N.
        y_pred: predicted class ids, same length.
        labels: the K class names; id ``i`` is ``labels[i]``.

    Returns:
        ``accuracy``, ``macro_f1`` (unweighted mean of the K per-class F1, absent classes
        counting 0), ``per_class.<label>.{precision, recall, f1, support}`` and
        ``confusion_matrix.<actual>.<predicted>`` (counts), all in label order.

    Raises:
        ValueError: empty input, unequal lengths, or an id outside ``[0, K)``.
    """
    y_true = np.asarray(y_true, dtype=np.int64)
    y_pred = np.asarray(y_pred, dtype=np.int64)
    k = len(labels)
    if y_true.size == 0 or y_true.shape != y_pred.shape:
        raise ValueError(f"need equal, non-empty y_true and y_pred; got {y_true.shape} and "
                         f"{y_pred.shape}")
    for name, ids in (("y_true", y_true), ("y_pred", y_pred)):
        if ids.min() < 0 or ids.max() >= k:
            raise ValueError(f"{name} holds ids outside [0, {k}): {sorted(set(ids.tolist()))}")
    ids = list(range(k))
    precision, recall, f1, support = precision_recall_fscore_support(
        y_true, y_pred, labels=ids, zero_division=0)
    cm = confusion_matrix(y_true, y_pred, labels=ids)
    return {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "macro_f1": float(np.mean(f1)),
        "per_class": {
            label: {"precision": float(precision[i]), "recall": float(recall[i]),
                    "f1": float(f1[i]), "support": int(support[i])}
            for i, label in enumerate(labels)
        },
        "confusion_matrix": {
            actual: {predicted: int(cm[i, j]) for j, predicted in enumerate(labels)}
            for i, actual in enumerate(labels)
        },
    }


def relative_error_reduction(accuracy: float, reference: float) -> tuple[float | None, str | None]:
    """``(accuracy - reference) / (1 - reference)``: the share of the reference's errors removed.

    The measure used by seed 000 (0.594 -> 0.734 is a 34.5 % error reduction). It is
    undefined when the reference makes no errors; then the value is ``None`` with a reason,
    never NaN or infinity.

    Returns:
        ``(value, None)``, or ``(None, reason)`` when ``reference == 1``.
    """
    if reference >= 1.0:
        return None, f"reference accuracy is {reference}: it makes no errors to reduce"
    return (accuracy - reference) / (1.0 - reference), None


def majority_baseline(train_labels: Sequence[int], test_labels: Sequence[int],
                      num_labels: int) -> tuple[int, float]:
    """The majority class of the training split and its accuracy on the test split.

    Ties go to the class listed first in the params.

    Returns:
        ``(class id, accuracy)``.
    """
    counts = np.bincount(np.asarray(train_labels, dtype=np.int64), minlength=num_labels)
    majority = int(np.argmax(counts))
    test = np.asarray(test_labels, dtype=np.int64)
    return majority, float(np.mean(test == majority)) if test.size else 0.0


def probabilities(scores: np.ndarray) -> np.ndarray:
    """Softmax over classes of (N, K) label scores (log-probabilities); float64 (N, K)."""
    z = np.asarray(scores, dtype=np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def predictions_csv(y_true: Sequence[int], scores: np.ndarray, labels: Sequence[str]) -> str:
    """One row per test example: ``index, actual, predicted`` and each class's probability.

    The ``actual``/``predicted`` columns feed DVC's ``confusion`` plot template.
    """
    import csv
    import io

    probs = probabilities(scores)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["index", "actual", "predicted", *(f"p_{label}" for label in labels)])
    for i, (gold, row) in enumerate(zip(y_true, probs, strict=True)):
        writer.writerow([i, labels[gold], labels[int(np.argmax(row))],
                         *(f"{p:.6f}" for p in row)])
    return out.getvalue()
