"""The learning curve's track record on runs it did not see (issue 52, deliverable 3).

Reads a ``learning_curve.json`` whose fractions reach past the ones a projection was
fitted on, and for each held-out size asks every form of lorasent.review.learning_curve
(a − b·n^(−c), 1 − b·n^(−c), the last observation) to forecast its mean accuracy from the
smaller sizes only, with the 95% bootstrap interval the learning curve itself reports
(``backtest``: refits over the seeds, no run added). Prints one Markdown table row per
(fitted sizes, held-out size, form): forecast, interval, measured mean, error, whether
the interval held the measured mean.

    python docs/learning-curve-study/track_record.py \
        docs/learning-curve-study/all/learning_curve.json --fit-up-to 1600

``--fit-up-to N``: the checks whose fit uses only sizes up to N rows (the projection
the curve of those sizes would have made), and, as a control, every smaller check the
same runs allow (fit on the sizes below each one).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lorasent.review.learning_curve import FORMS, backtest, record_points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path, help="learning_curve.json of every size")
    parser.add_argument("--fit-up-to", type=int, required=True,
                        help="the largest training rows the projection was fitted on")
    args = parser.parse_args()
    record = json.loads(args.record.read_text(encoding="utf-8"))
    points = sorted(record_points(record))
    print("| fitted on (rows) | forecast of (rows) | form | forecast [95% interval] "
          "| measured mean (seeds) | error | held |")
    print("|---|---|---|---|---|---|---|")
    held = total = 0
    for k, target in enumerate(points):
        # fit on every size below the target up to --fit-up-to, or on all sizes below it
        # when the target is itself within the fitted range (the curve's own backtests)
        below = [p for p in points[:k] if p[0] <= args.fit_up_to or target[0] <= args.fit_up_to]
        check = backtest([*below, target])
        if check is None:  # too few sizes below it
            continue
        for form in FORMS:
            if form not in check.forecasts:
                continue
            f = check.forecasts[form]
            inside = check.inside(form)
            held, total = held + inside, total + 1
            print(f"| {', '.join(f'{n:,}' for n in check.fitted_on)} | {check.rows:,} | "
                  f"{FORMS[form]} | {f.predicted:.3f} [{f.interval[0]:.3f}, "
                  f"{f.interval[1]:.3f}] | {check.measured:.3f} ({len(target[1])}) | "
                  f"{check.error(form):+.3f} | {'yes' if inside else 'no'} |")
    print(f"\n{held} of {total} intervals held the measured mean.")


if __name__ == "__main__":
    main()
