"""The supervised references, one entry each: the one place that names them.

A supervised reference is a classifier a user could have had instead of the adapter,
trained by the baseline stage on exactly the rows the adapter trains on
(:mod:`lorasent.references`). Everything that lists them reads :data:`SUPERVISED`: the
params (``baseline.<name>``, ``evaluate.reference``'s choices), the contracts
(``eval.json``'s ``references``), the baseline stage (which fits each), evaluate (which
reads each one's predictions from ``metrics/references/<name>/``), the verdict sentences,
the tables, ``make metrics``, ``lorasent compare`` and ``lorasent seeds``. Adding one is
one entry here, its params class in :mod:`lorasent.params` (a field of
``BaselineParams`` named as the entry) and its fit function (docs/architecture.md).

This module imports nothing, so that the params and the contracts can read it without
the fit code (a stage's DVC deps are its import closure: a change to how a reference is
fitted reruns the baseline stage, not the training). The fit function is therefore named
as ``"module:function"``; the baseline stage imports those modules and resolves it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SupervisedReference:
    """One supervised reference.

    Attributes:
        name: its key everywhere: ``baseline.<name>`` (its params), ``evaluate.reference:
            <name>``, ``references.<name>`` in the metrics, ``metrics/references/<name>/``.
        short: how a table's cell names it (``TF-IDF + LR``).
        described: how a sentence names it, before "trained on the same N rows".
        fit: ``"module:function"``, called ``function(rows, params, seed)`` with
            :class:`lorasent.references.FitRows`, its ``baseline.<name>`` params and
            ``base.seed``, returning :class:`lorasent.references.Fitted` or raising
            :class:`lorasent.references.ReferenceNotFitted`.
        seeded: it moves with ``base.seed`` (a fine-tune's initialisation, batch order,
            dropout), so that it is a group over seeds like the adapter; the others give
            the same fit whatever the seed (the rows aside, which ``train.fraction`` < 1
            draws with the seed for every reference and the adapter alike).
        optional: its params have ``enabled`` (false leaves it out); the others are
            always fitted.
    """

    name: str
    short: str
    described: str
    fit: str
    seeded: bool
    optional: bool


# In the order sentences and tables list them (the cheapest first): on a tie of accuracy
# the earlier one is eval.json's ``strongest_supervised``, and the verdict says they tie
# (``lorasent.metrics.strongest_verdict``).
SUPERVISED: tuple[SupervisedReference, ...] = (
    SupervisedReference("tfidf_lr", "TF-IDF + LR", "TF-IDF + logistic regression",
                        "lorasent.references:fit_tfidf_reference", seeded=False,
                        optional=False),
    SupervisedReference("encoder", "encoder + LR", "a frozen encoder + logistic regression",
                        "lorasent.references:fit_encoder_reference", seeded=False,
                        optional=True),
    SupervisedReference("encoder_ft", "fine-tuned encoder", "a fine-tuned encoder",
                        "lorasent.finetuned_encoder:fit_encoder_ft_reference", seeded=True,
                        optional=True),
)
BY_NAME: dict[str, SupervisedReference] = {r.name: r for r in SUPERVISED}
NAMES: tuple[str, ...] = tuple(BY_NAME)
