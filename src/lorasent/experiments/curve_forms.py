"""The forms a learning curve is fitted in, one object each (:data:`FORMS`), compared by the
backtest (:mod:`lorasent.experiments.projection`).

Each form is written as accuracy = a − b·n^(−c), n the training rows (:class:`Fit`):

- :class:`Saturating` (:data:`SATURATING`): a − b·n^(−c), a saturating power law
  (Hestness et al. 2017, "Deep Learning Scaling is Predictable, Empirically",
  arXiv:1712.00409; Figueroa et al. 2012, "Predicting sample size required for
  classification performance", BMC Medical Informatics and Decision Making 12:8);
- :class:`ErrorPowerLaw` (:data:`POWER`): the error rate's power law 1 − accuracy =
  b·n^(−c), two parameters (a = 1);
- :class:`LastObservation` (:data:`LAST`): the largest fraction's mean, no further gain
  (b = 0), the forecast that is hard to beat (Kielhöfer et al. 2024; Jain et al. 2023 and
  Mahmood et al. 2022 on how a 3-parameter fit on few points overstates the gains; Viering
  & Loog 2022 survey when power laws fit at all).

A form says its name (its key in ``learning_curve.json``), how the report and the record
write it, how many distinct fractions it needs, how it is fitted (with the parameters
that end at a bound of the fit) and how the report describes a fit of it. Adding a form
is a class here and its entry in :data:`FORMS`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

# The forms' names: their keys in learning_curve.json.
SATURATING, POWER, LAST = "saturating", "power", "last_observation"
A_MAX = 1.0           # the fit's bound on its ceiling a: accuracy cannot pass 1
C_MIN, C_MAX = 1e-6, 10.0  # the fits' bounds on the exponent c


def power_law(n: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    """a − b·n^(−c), for ``n`` > 0 (float array, any shape)."""
    return a - b * np.power(n, -c)


def _error_power_law(n: np.ndarray, b: float, c: float) -> np.ndarray:
    """1 − b·n^(−c): the error rate b·n^(−c) as accuracy."""
    return power_law(n, A_MAX, b, c)


@dataclass(frozen=True)
class Fit:
    """A form fitted to the runs, as accuracy = a − b·n^(−c), n the training rows:
    :data:`SATURATING` fits a, b and c; :data:`POWER` fits b and c, a being 1 (the error
    rate's power law); :data:`LAST` is the largest fraction's mean (a; b = 0: no further
    gain). ``form``: the form's name (:data:`FORMS`). ``bounds``: the fitted parameters
    that sit at a bound of the fit, e.g. ``("a = 1",)``: the data do not fix them."""

    a: float
    b: float
    c: float
    form: str = SATURATING
    bounds: tuple[str, ...] = ()

    def at(self, n: float) -> float:
        return float(power_law(np.asarray(float(n)), self.a, self.b, self.c))

    @property
    def at_bound(self) -> bool:
        """The fit's ceiling a at its bound :data:`A_MAX` (to 1e-6; only a form that fits
        a has one: :meth:`Form.ceiling_at_bound`): the runs show no levelling off, and
        the bound, not the data, limits the projected gains."""
        return FORMS[self.form].ceiling_at_bound(self)


def _bounds(a: float | None, b: float, c: float) -> tuple[str, ...]:
    """The parameters at a bound of the fit (``b`` as fitted, on rows scaled by their
    largest value; ``a`` None: not fitted), to 1e-6."""
    return tuple(name for name, at in (
        (f"a = {A_MAX:g}", a is not None and a >= A_MAX - 1e-6), ("b = 0", b <= 1e-9),
        ("c = 0", c <= C_MIN + 1e-6), (f"c = {C_MAX:g}", c >= C_MAX - 1e-6)) if at)


def _least_squares(model: Callable[..., np.ndarray], x: np.ndarray, y: np.ndarray,
                   p0: Sequence[float], bounds: tuple[list[float], list[float]]
                   ) -> Any | None:
    """``scipy.optimize.curve_fit``'s parameters of ``model`` (trust-region reflective,
    within ``bounds``); None when it does not converge."""
    from scipy.optimize import OptimizeWarning, curve_fit

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            found, _ = curve_fit(model, x, y, p0=p0, bounds=bounds, method="trf",
                                 maxfev=20_000)
    except (RuntimeError, ValueError):
        return None
    return found


class Form:
    """One form a curve is fitted in: its name, how it is written, the distinct fractions
    (parameters) it needs, its fit and its description in the report."""

    name: ClassVar[str]
    written: ClassVar[str]   # as the report writes it: "a − b·n^(−c)"
    model: ClassVar[str]     # as learning_curve.json states it
    fractions: ClassVar[int]  # distinct fractions (parameters) it needs
    gains: ClassVar[bool] = True  # False: it projects no further gain

    def fit(self, n: np.ndarray, y: np.ndarray) -> Fit | None:
        """The least-squares fit to runs ``(n[i], y[i])`` (training rows, accuracy), given
        at least :attr:`fractions` distinct row counts; None when it does not converge."""
        raise NotImplementedError

    def ceiling_at_bound(self, fit: Fit) -> bool:
        """The fit's ceiling a at :data:`A_MAX` (the bound, not the data, limits its
        gains); False for a form that does not fit a."""
        return False

    def described(self, fit: dict[str, Any], how: str, refits: str) -> str:
        """The report's line of the fit ``fit`` (``learning_curve.json``'s): its form,
        ``how`` it was chosen, its parameters, its bootstrap (``refits``), its bounds."""
        bound = (f"; at a bound: {', '.join(fit['at_bound'])} (the runs do not fix "
                 f"{'it' if len(fit['at_bound']) == 1 else 'them'})" if fit["at_bound"] else "")
        return (f"Fit ({self.written}, {how}): accuracy = {fit['a']:.4f} − "
                f"{fit['b']:.4g}·n^(−{fit['c']:.4f}) (n: training rows; {refits}{bound}); "
                f"projected to {fit['project_to']:g}× {fit['full_train_rows']:,} rows.")


def _scaled(n: np.ndarray, y: np.ndarray, a0: float) -> tuple[float, np.ndarray, float]:
    """``(scale, x, b0)``: the rows scaled by their largest value (the same curve, better
    conditioned) and a start for b from the smallest rows' mean and the ceiling ``a0``."""
    scale = float(n.max())
    x = n / scale
    b0 = max(a0 - float(y[x == x.min()].mean()), 1e-3) * float(x.min()) ** 0.5
    return scale, x, b0


class Saturating(Form):
    """accuracy = a − b·n^(−c), bounds 0 < a ≤ 1, b ≥ 0, 0 < c ≤ 10."""

    name = SATURATING
    written = "a − b·n^(−c)"
    model = "accuracy = a - b * n^(-c), n = training rows"
    fractions = 3

    def fit(self, n: np.ndarray, y: np.ndarray) -> Fit | None:
        a0 = min(A_MAX, float(y.max()) + 0.01)
        scale, x, b0 = _scaled(n, y, a0)
        found = _least_squares(power_law, x, y, (a0, b0, 0.5),
                               ([1e-9, 0.0, C_MIN], [A_MAX, np.inf, C_MAX]))
        if found is None:
            return None
        a, b, c = (float(v) for v in found)
        # back to rows: b' x^-c = b' scale^c n^-c
        return Fit(a, b * scale ** c, c, self.name, _bounds(a, b, c))

    def ceiling_at_bound(self, fit: Fit) -> bool:
        return fit.a >= A_MAX - 1e-6


class ErrorPowerLaw(Form):
    """The error rate 1 − accuracy = b·n^(−c), bounds b ≥ 0, 0 < c ≤ 10 (a = 1)."""

    name = POWER
    written = "1 − b·n^(−c)"
    model = "error rate = 1 - accuracy = b * n^(-c), n = training rows"
    fractions = 2

    def fit(self, n: np.ndarray, y: np.ndarray) -> Fit | None:
        scale, x, b0 = _scaled(n, y, A_MAX)
        found = _least_squares(_error_power_law, x, y, (b0, 0.5),
                               ([0.0, C_MIN], [np.inf, C_MAX]))
        if found is None:
            return None
        b, c = (float(v) for v in found)
        return Fit(A_MAX, b * scale ** c, c, self.name, _bounds(None, b, c))


class LastObservation(Form):
    """No fit: the largest row count's mean accuracy (Kielhöfer et al. 2024's "last
    observation" forecast), no further gain."""

    name = LAST
    written = "the last observation"
    model = "accuracy = the largest fraction's mean accuracy (no further gain)"
    fractions = 1
    gains = False

    def fit(self, n: np.ndarray, y: np.ndarray) -> Fit | None:
        return Fit(float(y[n == n.max()].mean()), 0.0, 1.0, self.name)

    def described(self, fit: dict[str, Any], how: str, refits: str) -> str:
        return (f"Forecast ({self.written}, {how}): accuracy stays {fit['a']:.4f} beyond "
                f"{fit['full_train_rows']:,} rows ({refits}).")


# Every form, by name, in the order the backtest fits them (and learning_curve.json lists
# their forecasts).
FORMS: dict[str, Form] = {form.name: form for form in (Saturating(), ErrorPowerLaw(),
                                                       LastObservation())}


def fit_power_law(rows: Sequence[float], accuracy: Sequence[float],
                  form: str = SATURATING) -> Fit | None:
    """The fit of the form named ``form`` (:data:`FORMS`) to runs ``(rows[i],
    accuracy[i])``: :meth:`Form.fit`. None when it does not converge or fewer distinct
    row counts are given than the form needs (:attr:`Form.fractions`)."""
    n, y = np.asarray(rows, dtype=float), np.asarray(accuracy, dtype=float)
    chosen = FORMS[form]
    if len(set(n.tolist())) < chosen.fractions:
        return None
    return chosen.fit(n, y)
