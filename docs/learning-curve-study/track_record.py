"""The learning curve's track record on runs it did not see (issue 52, deliverable 3).

Reads a ``learning_curve.json`` whose fractions reach past the ones a projection was
fitted on. For each held-out size it asks what ``lorasent learning-curve`` would have
said from the smaller sizes only (lorasent.experiments.curve_report's ``analyse``, projected
to that size: the form the backtest chose, or the untested power law when the smaller
sizes are too few for a backtest), and compares the forecast with the measured mean:
both intervals the curve reports, the seeds' spread alone and that spread widened by the
backtest's error, and the last observation's error beside it. Prints one Markdown table
row per (fitted sizes, held-out size).

    python docs/learning-curve-study/track_record.py \
        docs/learning-curve-study/all/learning_curve.json --fit-up-to 1601

``--fit-up-to N``: the checks whose fit uses only sizes up to N rows (the projection
the curve of those sizes would have made), and, as a control, every smaller check the
same runs allow (fit on the sizes below each one).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lorasent.experiments.curve_forms import FORMS
from lorasent.experiments.curve_report import analyse
from lorasent.experiments.learning_curve import record_points


def _interval(low: float, high: float, measured: float) -> str:
    held = "yes" if low <= measured <= high else "no"
    return f"[{low:.3f}, {high:.3f}] | {held}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path, help="learning_curve.json of every size")
    parser.add_argument("--fit-up-to", type=int, required=True,
                        help="the largest training rows the projection was fitted on")
    args = parser.parse_args()
    record = json.loads(args.record.read_text(encoding="utf-8"))
    points = sorted(record_points(record))
    print("| fitted on (rows) | forecast of (rows) | form | forecast | seeds' interval | held "
          "| widened interval | held | measured mean (seeds) | error | last observation's "
          "error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    held = widened_held = total = 0
    for k, (rows, accuracies) in enumerate(points):
        # fit on every size below the target up to --fit-up-to, or on all sizes below it
        # when the target is itself within the fitted range (the curve's own backtests)
        below = [p for p in points[:k] if p[0] <= args.fit_up_to or rows <= args.fit_up_to]
        if len(below) < 2:  # the power law needs 2 sizes
            continue
        largest = below[-1][0]
        found = analyse(below, to=rows / largest)
        p = found.projection
        if p is None or found.sentence.startswith("accuracy falls"):
            continue
        measured = float(np.mean(accuracies))
        predicted = p.fit.at(rows)
        (_, seeds_low, seeds_high), (_, low, high) = p.seed_band[-1], p.band[-1]
        held += seeds_low <= measured <= seeds_high
        widened_held += low <= measured <= high
        total += 1
        # untested (no backtest: too few sizes): nothing to widen by, the seeds' interval
        form = FORMS[p.fit.form].written + ("" if found.backtest else " (untested)")
        last = float(np.mean(below[-1][1]))
        print(f"| {', '.join(f'{n:,}' for n, _ in below)} | {rows:,} | {form} | "
              f"{predicted:.3f} | {_interval(seeds_low, seeds_high, measured)} | "
              f"{_interval(low, high, measured)} | "
              f"{measured:.3f} ({len(accuracies)}) | {predicted - measured:+.3f} | "
              f"{last - measured:+.3f} |")
    print(f"\nThe seeds' intervals held the measured mean in {held} of {total} checks; the "
          f"intervals widened by the backtest's error, in {widened_held} of {total}.")


if __name__ == "__main__":
    main()
