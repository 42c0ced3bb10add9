"""A learning curve's answer in one sentence (:func:`sentence`): would more labels help?

From the trend (accuracy falls: :func:`falling`), the backtest (a form that projects no
gain predicted best: :func:`favours_last`; how far the projection can be trusted:
:func:`trust`) and the projection (what doubling the labels is expected to add, or that
the curve is flat, or too noisy to tell: :func:`answer`).
"""

from __future__ import annotations

import math

from lorasent.experiments.curve_forms import A_MAX, FORMS, Fit
from lorasent.experiments.projection import BACKTEST_FRACTIONS, Backtest, Projection, Trend

# A backtest error (accuracy, absolute) above this calls the projection rough. A choice of
# lorasent's: two accuracy points, twice FLAT_GAIN.
ROUGH_ERROR = 0.02
# A projected gain whose upper bound is below this (accuracy, absolute: one point) is
# "flat": more labels like these are not expected to help. A choice of lorasent's.
FLAT_GAIN = 0.01
# The fit's b ≥ 0 makes every projected gain ≥ 0; a lower bound under half the last
# printed digit (+0.000) is 0, not a gain.
ZERO_GAIN = 0.0005


def falling(t: Trend) -> str:
    """The sentence of a curve whose accuracy falls (:attr:`Trend.falls`): no projection,
    the power law only rises."""
    said = (f"accuracy falls as the training rows grow: {t.first[1]:.3f} at {t.first[0]:,} rows, "
            f"{t.last[1]:.3f} at {t.last[0]:,}")
    if t.seeds < 2:
        return (f"{said}, but a fraction with one run has no spread over seeds to tell a fall "
                f"from noise; {3 - t.seeds} more seeds per fraction would (--seeds 3); no "
                "projection")
    return (f"{said} ({_signed(t.slope)} [{_signed(t.interval[0])}, {_signed(t.interval[1])}] "
            "per doubling of the rows); no projection (a − b·n^(−c) only rises): more labels "
            "will not help until that is understood; look at what the larger fractions add: "
            "their training loss (more rows are more steps at one learning rate), their "
            "labels, and the test-label audit (metrics/label_issues.csv)")


def _signed(x: float) -> str:
    return f"{x:+.3f}"


def _gain_text(p: Projection, k: float) -> str:
    low, high = p.interval[k]
    return f"{_signed(p.gain[k])} [{_signed(low)}, {_signed(high)}]"


def sentence(p: Projection | None, fractions: int, t: Trend | None = None,
             check: Backtest | str | None = None) -> str:
    """The answer in one sentence.

    - accuracy falls with more rows (``t``, :attr:`Trend.falls`): it says so
      (:func:`falling`), with no projection;
    - the backtest (``check``) found no fitted form closer than the last observation (a
      form that projects no gain, :attr:`~lorasent.experiments.curve_forms.Form.gains`):
      more labels are not shown to help (:func:`favours_last`);
    - no projection (one fraction with runs, or no fit converged): no number;
    - else :func:`answer`, then what the backtest says of the projection
      (:func:`trust`), or why it has none (``check`` a string:
      :func:`~lorasent.experiments.projection.no_backtest`).
    """
    if t is not None and t.falls:
        return falling(t)
    if isinstance(check, Backtest) and not FORMS[check.chosen].gains and p is not None:
        return favours_last(check, p)
    if p is None:  # one fraction, or a fit that did not converge
        return (f"no projection: no curve could be fitted to {fractions} "
                f"fraction{'s' * (fractions != 1)} with runs"
                + (f"; give at least {BACKTEST_FRACTIONS} (--fractions) for a projection and "
                   "its backtest" if fractions < BACKTEST_FRACTIONS else ""))
    said = answer(p) + p.clipped_note()
    if isinstance(check, Backtest):
        return f"{said}; {trust(check)}"
    return f"{said}; {check}" if check else said


def answer(p: Projection) -> str:
    """What doubling the labels is expected to add:

    - one seed at some fraction: no spread to tell noise from a gain;
    - the 2× gain's upper bound below :data:`FLAT_GAIN`: "the curve is flat: ...";
    - else its interval above 0 (:data:`ZERO_GAIN`): "doubling the labels is expected
      to add ..." (and at ``--project-to``× when asked), saying so when the fit's ceiling
      is at its bound (:attr:`Fit.at_bound`: the gains are then the bound's, and larger
      ones cannot be ruled out) or another parameter is (:attr:`Fit.bounds`);
    - else "too noisy to tell", with the seeds per fraction that would narrow the
      interval to a side (a percentile interval's width shrinks as 1/√seeds:
      ``ceil(seeds · (half width / room)²)``, the room being the distance from the gain to
      0 or to :data:`FLAT_GAIN`, whichever it can reach, less the backtest's
      :attr:`Projection.margin`, which no seed narrows), or that no number of seeds
      would, when the margin alone reaches that far.

    The interval is the seeds' spread widened by the backtest's error
    (:attr:`Projection.margin`), and the sentence says so when it is.
    """
    if p.seeds < 2:
        return (f"too noisy to tell: a fraction with one run has no spread over seeds; "
                f"{3 - p.seeds} more seeds per fraction would measure it (--seeds 3)")
    low, high = p.interval[2]
    widened = (f" (each interval: the seeds' spread widened by the backtest's error, "
               f"±{p.margin_at(2):.3f} at 2×)" if p.margin_at(2) else "")
    doubled = f"doubling the labels is expected to add {_gain_text(p, 2)} accuracy"
    if high < FLAT_GAIN:
        return (f"the curve is flat: {doubled}, under {FLAT_GAIN:g}{widened}; more labels like "
                "these are not expected to help; look at the test-label audit "
                "(metrics/label_issues.csv)")
    if low >= ZERO_GAIN:
        bound = (f"; the fit's ceiling is at its bound, accuracy {A_MAX:g} (and in "
                 f"{p.refits_at_bound:,} of {p.resamples:,} refits): the runs show no levelling "
                 "off yet, so the bound, not the data, limits these gains"
                 if p.fit.at_bound else _bounds_text(p.fit))
        further = "".join(f", {_gain_text(p, k)} at {k:g}×" for k in p.gain if k != 2)
        return f"{doubled}{further}{widened}{bound}"
    seeds_low, seeds_high = p.seed_interval[2]
    half = (seeds_high - seeds_low) / 2
    room = max(p.gain[2], FLAT_GAIN - p.gain[2]) - p.margin_at(2)
    noisy = f"too noisy to tell: {doubled.replace('is expected to add', 'adds')}{widened}"
    if room <= 0:
        return (f"{noisy}; more seeds would not tell: the backtest's error alone spans it; "
                "runs at a larger fraction would")
    more = max(1, math.ceil(p.seeds * (half / room) ** 2) - p.seeds)
    return (f"{noisy}; about {more} more seed{'s' * (more != 1)} per fraction would tell "
            f"(--seeds {p.seeds + more})")


def _bounds_text(fit: Fit) -> str:
    """``; the fit's c = 10 is at the fit's bound: ...`` (:attr:`Fit.bounds`), or empty."""
    if not fit.bounds:
        return ""
    one = len(fit.bounds) == 1
    return (f"; the fit's {' and '.join(fit.bounds)} {'is' if one else 'are'} at the fit's "
            f"bound: the runs do not fix {'it' if one else 'them'}")


def _others(b: Backtest, form: str) -> str:
    """The other forms' errors: ``a − b·n^(−c) missed by 0.021, the last observation by
    0.055``."""
    return ", ".join(f"{FORMS[f].written} {'missed ' if i == 0 else ''}by {abs(b.error(f)):.3f}"
                     for i, f in enumerate(f for f in b.forecasts if f != form))


def _unfitted(b: Backtest) -> str:
    """Why each form without a forecast has none: ``a − b·n^(−c) needs 3 fractions, the
    backtest has 2; 1 − b·n^(−c) did not converge``."""
    fitted_on = len(set(b.fitted_on))
    return "; ".join(
        f"{form.written} needs {form.fractions} fractions, the backtest fits on {fitted_on}"
        if form.fractions > fitted_on else f"{form.written} did not converge"
        for name, form in FORMS.items() if name not in b.forecasts)


def trust(b: Backtest) -> str:
    """How far the projection can be trusted, from the backtest: the chosen form's error
    at the largest fraction, whether the measured mean fell inside its interval, and the
    other forms' errors (the last observation's among them). Within
    :data:`ROUGH_ERROR` and inside: "predicted ... within 0.004"; else "... missed by
    0.050 ...: treat the projection as rough"."""
    form = b.chosen
    error = abs(b.error(form))
    what = (f"the fit ({FORMS[form].written}, the closest of {len(b.forecasts)} forms in the "
            f"backtest) predicted {b.rows:,} rows from the smaller runs")
    inside = b.inside(form)
    where = ("no interval: one seed per fraction has no spread over seeds" if inside is None
             else f"{'inside' if inside else 'outside'} its interval")
    if error <= ROUGH_ERROR and inside is not False:
        return f"{what} within {error:.3f} ({where}; {_others(b, form)})"
    return (f"{what} but missed by {error:.3f} ({where}; {_others(b, form)}): "
            "treat the projection as rough")


def favours_last(b: Backtest, p: Projection) -> str:
    """The sentence when no fitted form predicted the largest fraction from the smaller
    ones better than the last observation did (Kielhöfer et al. 2024: a forecast hard to
    beat): no gain is projected. With one seed at some fraction that cannot be told from
    noise (no spread over seeds to judge the errors by), and the sentence says so."""
    others = _others(b, b.chosen)
    closest = (f"from the smaller runs, no further gain ({FORMS[b.chosen].written}) "
               f"predicted {b.rows:,} rows within {abs(b.error(b.chosen)):.3f}, "
               + (f"closer than the fitted curves ({others})" if others else
                  f"and no curve was fitted to compare with it ({_unfitted(b)})"))
    if p.seeds < 2:
        return (f"one seed cannot tell whether more labels help: {closest}, but "
                "a fraction with one run has no spread over seeds (unknown), so neither a "
                f"gain nor its absence is shown; {3 - p.seeds} more seeds per fraction would "
                "tell (--seeds 3)")
    return (f"more labels like these are not shown to help: {closest}; the projection is "
            f"no gain, accuracy {p.fit.a:.3f} at {p.full_rows:,} rows")
