"""The references of ``poise bench tracking`` and what is measured against them.

A :class:`Reference` is a task-space path ``x_r(t)`` [task units] of time ``t`` [s] since it
began, in three pieces:

* a **lead-in** ``[0, L)``, ``L =`` :data:`~poise.benchmarks.tracking_protocol.LEAD_IN_S`:
  minimum jerk, ``s(τ) = 10τ³ − 15τ⁴ + 6τ⁵``, from where the arm stands to the first point;
* the **reference** from ``L`` on, centred on ``c`` with amplitude ``A``, ``ω = 2πf``,
  ``t' = t − L``:

  - ``sine``: ``c + A sin(ωt') e₀`` (one coordinate; the first point is ``c``);
  - ``circle``: ``c + A (cos ωt', sin ωt', 0, …)`` (first point ``c + A e₀``);
  - ``steps``: ``c + A sₖ e₀`` after the k-th step at ``t' = k·S`` (``S`` =
    :data:`~poise.benchmarks.tracking_protocol.STEP_S`), ``sₖ = +1, 0, −1, 0, +1 …``:
    every step is of the amplitude;

* the **window** measured: the second of two periods, ``[L + P, L + 2P]``; for steps, from
  the last step to ``S`` after it.

:func:`steady_lag` is the time shift τ that best explains the arm's task values ``x(t)`` as
the reference delayed, ``argmin_τ RMS_t ‖x(t) − x_r(t − τ)‖`` for ``|τ| ≤ τ_max``
(positive: the arm lags). :func:`quasi_static` is what a mode of the arm leaves of a sine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from poise.benchmarks.tracking_protocol import LEAD_IN_S, MAX_LAG_S, STEP_S, STEPS
from poise.models.base import FloatArray

#: The step sequence's levels, in amplitudes along the first task coordinate.
LEVELS = (1.0, 0.0, -1.0, 0.0)


@dataclass(frozen=True)
class Reference:
    """A lead-in from ``start`` then a ``kind`` reference about ``centre`` (see the module
    docstring).

    Attributes:
        kind: ``sine``, ``circle`` or ``steps``.
        start: where the arm stands at ``t = 0`` (task_dim,) [task units].
        centre: the reference's centre ``c`` (task_dim,) [task units].
        amplitude: ``A`` [task units]: a sine's amplitude, a circle's radius, a step.
        freq: ``f`` [Hz] of a sine or circle (ignored for steps).
        lead_in: ``L`` [s].
    """

    kind: str
    start: FloatArray
    centre: FloatArray
    amplitude: float
    freq: float = 0.0
    lead_in: float = LEAD_IN_S

    def __post_init__(self) -> None:
        if self.kind not in ("sine", "circle", "steps"):
            raise ValueError(f"reference kind {self.kind!r}: sine, circle or steps")
        if self.kind == "circle" and np.size(self.centre) < 2:
            raise ValueError("a circle needs a task of two coordinates or more")
        if self.kind != "steps" and not self.freq > 0:
            raise ValueError(f"a {self.kind} needs a frequency > 0 (got {self.freq})")

    @property
    def period(self) -> float:
        """``P`` [s]: ``1/f``; for steps, the time between two steps."""
        return STEP_S if self.kind == "steps" else 1.0 / self.freq

    @property
    def first(self) -> FloatArray:
        """The reference's first point (where the lead-in ends)."""
        c = np.array(self.centre, dtype=float).reshape(-1)
        if self.kind == "circle":
            c[0] += self.amplitude
        elif self.kind == "steps":
            c[0] += self.amplitude * LEVELS[0]
        return c

    @property
    def window(self) -> tuple[float, float]:
        """The measured window ``(t₀, t₁)`` [s since the reference began]."""
        if self.kind == "steps":
            last = self.lead_in + (STEPS - 1) * STEP_S
            return last, last + STEP_S
        return self.lead_in + self.period, self.lead_in + 2.0 * self.period

    def values(self, t: FloatArray) -> FloatArray:
        """``x_r`` at the times ``t`` (k,) [s]: (k, task_dim)."""
        t = np.asarray(t, dtype=float).reshape(-1)
        c = np.asarray(self.centre, dtype=float).reshape(-1)
        e0 = np.zeros_like(c)
        e0[0] = 1.0
        tp = t - self.lead_in
        out = np.tile(c, (t.size, 1))
        if self.kind == "sine":
            out += self.amplitude * np.sin(2 * math.pi * self.freq * tp)[:, None] * e0
        elif self.kind == "circle":
            w = 2 * math.pi * self.freq
            out[:, 0] += self.amplitude * np.cos(w * tp)
            out[:, 1] += self.amplitude * np.sin(w * tp)
        else:
            k = np.floor(tp / STEP_S + 1e-9).astype(int)
            level = np.where(k >= 0, np.take(LEVELS, np.maximum(k, 0) % len(LEVELS)), 0.0)
            out += self.amplitude * level[:, None] * e0
        lead = t < self.lead_in
        if np.any(lead):
            tau = np.clip(t[lead] / self.lead_in, 0.0, 1.0) if self.lead_in > 0 else 1.0
            s = tau**3 * (10.0 - 15.0 * tau + 6.0 * tau**2)
            start = np.asarray(self.start, dtype=float).reshape(-1)
            out[lead] = start + np.outer(s, self.first - start)
        return out

    def at(self, t: float) -> FloatArray:
        """``x_r(t)`` (task_dim,)."""
        return self.values(np.array([t]))[0]


def steady_lag(t: FloatArray, x: FloatArray, reference: Callable[[FloatArray], FloatArray],
               max_shift: float = MAX_LAG_S, resolution: float = 0.01
               ) -> tuple[float, float, bool]:
    """The steady lag of ``x`` (k, d) at the times ``t`` (k,) [s] behind ``reference``
    (``values(times) -> (k, d)``): ``(τ, RMS at τ, at the bound)``.

    ``τ = argmin_{|τ| ≤ max_shift} RMS_k ‖x_k − x_r(t_k − τ)‖``, on a grid of ``resolution``
    [s] refined by the parabola through the best point and its neighbours; ``at the bound``:
    the best τ is the end of the range (the lag is at least that, or the RMS has no minimum
    inside it).
    """
    t = np.asarray(t, dtype=float).reshape(-1)
    x = np.asarray(x, dtype=float).reshape(t.size, -1)
    steps = max(1, round(max_shift / resolution))
    shifts = np.linspace(-max_shift, max_shift, 2 * steps + 1)

    def rms(tau: float) -> float:
        d = x - reference(t - tau)
        return math.sqrt(float(np.mean(np.sum(d * d, axis=1))))

    errors = np.array([rms(tau) for tau in shifts])
    i = int(np.argmin(errors))
    if i in (0, shifts.size - 1):
        return float(shifts[i]), float(errors[i]), True
    e0, e1, e2 = errors[i - 1], errors[i], errors[i + 1]
    curvature = e0 - 2.0 * e1 + e2
    offset = 0.5 * (e0 - e2) / curvature if curvature > 0 else 0.0
    tau = float(shifts[i] + np.clip(offset, -1.0, 1.0) * (shifts[1] - shifts[0]))
    best = rms(tau)
    if best > e1:  # the parabola missed (a kink): keep the grid's point
        return float(shifts[i]), float(e1), False
    return tau, best, False


def second_order(omega: float, omega_n: float, zeta: float) -> complex:
    """``H(iω) = 1 / (1 − r² + 2iζr)``, ``r = ω/ω_n``: a unit-gain second-order mode
    ``ω_n`` [rad/s], ``ζ`` driven at ``ω`` [rad/s]."""
    r = omega / omega_n
    return 1.0 / complex(1.0 - r * r, 2.0 * zeta * r)


def quasi_static(freq: float, omega_n: float, zeta: float, gain: float | None = None
                 ) -> dict[str, float]:
    """What a quasi-static loop leaves at ``freq`` [Hz] through a mode ``omega_n`` [rad/s],
    ``zeta`` (:mod:`poise.benchmarks.tracking`): ``r = ω/ω_n``, ``|H|``, the mode's phase lag [s],
    the error of a sine ``|1 − H|`` in amplitude [% of A], the feedback's share ``|S|``
    (``gain``: the IK's task rate Γ in fb, ``S = iω / (iω + Γ)``; None, ff: 1) and the RMS
    ``|1 − H| |S| / √2`` [% of A] of a sine along a task direction that drives the mode (a
    circle whose both coordinates drive such modes: up to ``|1 − H| |S|``)."""
    w = 2 * math.pi * freq
    h = second_order(w, omega_n, zeta)
    s = 1.0 if gain is None else abs(1j * w / (1j * w + gain))
    return {"r": w / omega_n, "gain": abs(h), "lag_s": -math.atan2(h.imag, h.real) / w,
            "error_pct": 100 * abs(1 - h), "feedback": s,
            "rms_pct": 100 * abs(1 - h) * s / math.sqrt(2)}


__all__ = ["LEVELS", "Reference", "quasi_static", "second_order", "steady_lag"]
