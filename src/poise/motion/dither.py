"""A small dither of the setpoints while the arm rests, so that its held efforts show the masses
through friction (issue 35).

The estimate of the plant's masses (:mod:`poise.motion.masses`) reads the efforts the
actuators hold a resting arm with. Friction holds a resting actuator anywhere within its band
(the dancer on the ``real`` plant: its hips ±6 N·m, against gravity torques of about 100 N·m),
so each resting window gives efforts off by a different amount, the windows disagree far
beyond their errors (:meth:`MassEstimate.scatter <poise.motion.masses.MassEstimate.scatter>`)
and the estimate never pins the centre of mass down (``real``: 0 % of the dancer's targets).
An actuator that keeps moving has friction of alternating sign, which averages out: a
sinusoid of 1–2 mrad at 0.5 Hz on the dancer's hip setpoints brought the efforts' static part
from up to 7.4 N·m off to 0.07 N·m off (measured on ``real``'s simulator; 2026-12-05), while
the centre of mass moved 1.7 mm peak to peak.

:func:`dither_for` makes the dither of one plan: each actuator's amplitude is
:data:`RANGE_FRACTION` of its range (the dancer: 0.9–1.8 mrad), with signs chosen so that the
held task moves as little as the model's held Jacobian ``J = Ja − Ju Huu⁻¹ Hua`` allows
(``‖J (s ∘ a)‖`` least over the signs ``s``: near the null space of the task on a redundant
arm; the dancer's centre of mass 0.03–0.12 mm statically), scaled down where that still
exceeds :data:`TASK_FRACTION` × the tolerance (but not below :data:`MIN_SCALE` of it,
where that moves the task by at most :data:`WIDE_TASK_FRACTION` × the tolerance; else
none). Its frequency is a whole number ``k ≥ 2`` of
periods in the resting window (one damped period ``T_d`` of the slowest structural mode),
at least :data:`MIN_HZ` (2 Hz made the dancer's backlash rectify it into a bias of up to
29 N·m) and :data:`CLEARANCE` away from every structural mode's frequency. The window's
static fits take its sine and cosine out (:func:`~poise.motion.retarget.static_trend`).

When to dither is the corrector's decision (:class:`~poise.motion.retarget.Retargeting`):
the first resting window, as the friction test (:meth:`Retargeting.teach
<poise.motion.retarget.Retargeting.teach>`; again where a new plan came before the
undithered window it is compared with); then only where the windows showed
friction, and only until the estimate pins the centre of mass down where the arm rests. On
the exact model the test shows none and there is no other dither.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from poise.models.base import FloatArray
from poise.motion.stability import Mode

#: Each actuator's dither amplitude, as a fraction of its range (limits) [1].
RANGE_FRACTION = 3e-4
#: The held task may move statically by at most this fraction of the tolerance.
TASK_FRACTION = 0.1
#: No dither where the task bound would scale the amplitudes below this fraction (near a
#: fold of the held map, where the dancer's held Jacobian is large): one of 0.04–0.09 mrad
#: moved no actuator through its friction, and the windows it made taught the masses
#: friction's bias (the estimated centre of mass 2 → 12 mm off on ``real``).
MIN_SCALE = 0.5
#: ... unless the dither at :data:`MIN_SCALE` moves the held task by at most this fraction
#: of the tolerance: then it is that one (the dancer on ``real``, seed 15: its first
#: targets rest where the full dither moves the centre of mass 0.5–1 mm, so no window was
#: dithered, no friction test made and the masses not learnt there; targets 0, 4 and 6
#: ended 4–39 mm off).
WIDE_TASK_FRACTION = 0.5
#: The dither's lowest frequency [Hz].
MIN_HZ = 0.5
#: The dither's frequency differs from every structural mode's by at least this fraction.
CLEARANCE = 0.3
#: The most periods of the dither in one resting window (a longer search gives up).
MAX_PERIODS = 12


@dataclass(frozen=True)
class Dither:
    """A sinusoidal dither of the actuator setpoints, ``d(t) = a sin(ω t)``.

    Attributes:
        omega: ω [rad/s].
        amplitude: ``a`` (m,) [actuator units], signed (the direction of the dither).
    """

    omega: float
    amplitude: FloatArray

    def offset(self, t: float) -> FloatArray:
        """``d(t)`` (m,) [actuator units] at ``t`` [s] from its start."""
        return self.amplitude * math.sin(self.omega * t)


def dither_frequency(window_s: float, modes: Sequence[Mode]) -> float | None:
    """ω [rad/s] of a dither with a whole number ``k ≥ 2`` of periods in a resting window of
    ``window_s`` [s], at least :data:`MIN_HZ` and :data:`CLEARANCE` away from every mode of
    ``modes``; None where no ``k`` up to :data:`MAX_PERIODS` is."""
    if not (math.isfinite(window_s) and window_s > 0.0):
        return None
    first = max(2, math.ceil(MIN_HZ * window_s - 1e-9))
    for k in range(first, MAX_PERIODS + 1):
        omega = 2.0 * math.pi * k / window_s
        if all(abs(omega - mode.omega) >= CLEARANCE * mode.omega for mode in modes):
            return omega
    return None


def dither_direction(J: FloatArray, amplitude: FloatArray) -> FloatArray:
    """``s ∘ a`` (m,): the signs ``s`` (the first +1) for which the held task moves least,
    ``‖J (s ∘ a)‖`` (``J`` (task_dim, m) the held Jacobian; ``a`` ≥ 0 the amplitudes)."""
    a = np.asarray(amplitude, dtype=float)
    best, best_norm = a, math.inf
    for tail in itertools.product((1.0, -1.0), repeat=max(a.size - 1, 0)):
        d = a * np.array((1.0, *tail))[: a.size]
        norm = float(np.linalg.norm(J @ d))
        if norm < best_norm - 1e-15:
            best, best_norm = d, norm
    return best


def dither_for(J: FloatArray, qa_min: FloatArray, qa_max: FloatArray, tolerance: float,
               window_s: float, modes: Sequence[Mode]) -> Dither | None:
    """The dither of a resting window of ``window_s`` [s] (see the module docstring): ``J``
    the model's held Jacobian where the arm rests, ``[qa_min, qa_max]`` the actuator limits,
    ``tolerance`` the IK's [task units], ``modes`` the structural modes there. None where
    no actuator has a finite range, no frequency fits (:func:`dither_frequency`) or the
    task bound would scale it below :data:`MIN_SCALE` and the dither at that scale would move
    the task by more than :data:`WIDE_TASK_FRACTION` × ``tolerance``."""
    span = np.asarray(qa_max, dtype=float) - np.asarray(qa_min, dtype=float)
    amplitude = RANGE_FRACTION * np.where(np.isfinite(span), span, 0.0)
    omega = dither_frequency(window_s, modes)
    if omega is None or not np.any(amplitude > 0.0):
        return None
    direction = dither_direction(np.asarray(J, dtype=float), amplitude)
    moved = float(np.linalg.norm(J @ direction))
    scale = min(1.0, TASK_FRACTION * tolerance / moved) if moved > 0.0 else 1.0
    if scale < MIN_SCALE:
        if MIN_SCALE * moved > WIDE_TASK_FRACTION * tolerance:
            return None
        scale = MIN_SCALE
    return Dither(omega, direction * scale)


__all__ = ["CLEARANCE", "MIN_HZ", "MIN_SCALE", "RANGE_FRACTION", "TASK_FRACTION",
           "WIDE_TASK_FRACTION", "Dither", "dither_direction", "dither_for", "dither_frequency"]
