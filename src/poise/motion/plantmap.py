"""Feedback's error map where the plant's springs, as measured, reverse the model's answer.

In feedback a held algorithm integrates the measured task error through the model's held
Jacobian ``J`` at q̄ (seed 000), and the plant answers through its own, ``J*``: the loop gain
is ``Γ J* J⁺`` (:mod:`poise.motion.agreement`). Once the resting windows have measured the
plant's springs (``K* = (1 + ŝ) K``, :class:`~poise.motion.springs.SpringScale`), ``J*`` is
the held Jacobian of the model so scaled where it rests at the setpoint q̄a. Where ``J* J⁺``
has an eigenvalue whose real part is below :data:`AGREES`, the integrator is unstable (or
nearly so) at every Γ, and no gain or robust bound helps: the error is mapped instead,

    e ← Π e,   Π = (J* J⁺)⁻¹,

so that the loop gain is ``Γ I``. This is the ``error_map`` a plan aimed for the plant's
masses carries (:func:`~poise.motion.planner.for_plant`), made at the current state rather
than the goal: on the dancer whose springs are 10 % stiffer (``stiff10``, ``poise bench
control`` target 16) the model holds the setpoint on either side of its pointe (q̄₀ = ±0.37)
while the stiffer plant stands upright (q₀ ≈ 0), and on both of the model's branches
``eig(J* J⁺) = −0.20 ± 0.80i``: the arm circled the target with a growing amplitude (15 → 33
mm over a minute). Where the model's map agrees (every eigenvalue's real part at least
:data:`AGREES`) or ``J* J⁺`` is ill-conditioned (above :data:`~poise.motion.planner.
MAP_CONDITION`) there is no map and nothing changes.

The map is remade every :data:`REFRESH_S` while it is asked for (a Newton solve of the scaled
model's rest and two held Jacobians, 0.28 ms on the dancer), after the cycle's setpoint went
out (:class:`SpringsErrorMap`).
"""

from __future__ import annotations

import math

import numpy as np

from poise.ik.held_common import held_jacobian
from poise.models.actuation import blocks, split
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.planner import loop_inverse
from poise.motion.springs import SpringScale

#: The least real part of ``eig(J* J⁺)`` at which the model's map is kept (1 on the exact
#: model; the gains' robust bound allows for springs ±20 %, whose answers stay well above it
#: away from folds).
AGREES = 0.3
#: How often the map is remade while it is asked for [s].
REFRESH_S = 0.1


def springs_map(model: MechanicalModel, springs: SpringScale, q_bar: FloatArray,
                qu_guess: FloatArray) -> tuple[FloatArray | None, FloatArray]:
    """``(Π, q*)``: the error map ``(J* J⁺)⁻¹`` at the model's held configuration ``q_bar``
    (None where the model's map agrees, :data:`AGREES`, the plant would not rest stably there
    or Newton did not find where it rests, or ``J* J⁺`` is ill-conditioned), and ``q*``
    (n,), where the model with springs ``1 + ŝ`` rests at q̄a (Newton from ``qu_guess``, the
    unactuated coordinates)."""
    q_bar = np.asarray(q_bar, dtype=float)
    qa = split(model, q_bar)[0]
    rest = springs.resting(qa, np.asarray(qu_guess, dtype=float))
    if not springs.rests_stably(qa, split(model, rest)[1]):  # Newton converged, stable
        return None, rest
    rest_blocks = blocks(model, rest)
    loop = springs.jacobian_at(rest_blocks) @ np.linalg.pinv(held_jacobian(blocks(model, q_bar)))
    if float(np.min(np.linalg.eigvals(loop).real, initial=math.inf)) >= AGREES:
        return None, rest
    return loop_inverse(loop), rest


class SpringsErrorMap:
    """:func:`springs_map` kept for the feedback cycles: a cycle takes the map made last
    (:meth:`at`), which is remade after the cycle's setpoint went out (:meth:`refresh`,
    from :meth:`ControlStep.look_ahead <poise.motion.step.ControlStep.look_ahead>`), every
    :data:`REFRESH_S` while asked for, so that the sensor-to-setpoint time never includes
    it; forgotten when not asked for (:meth:`forget`)."""

    def __init__(self, model: MechanicalModel, period: float) -> None:
        self.model = model
        self._every = max(1, round(REFRESH_S / period))
        self._age = 0
        self._scale = math.nan
        self._qu: FloatArray | None = None
        self._springs: SpringScale | None = None
        self._measured: FloatArray | None = None
        self.map: FloatArray | None = None
        #: A cycle asked for the map to be remade (:meth:`refresh`).
        self.due = False
        #: Maps made, and cycles that used one (what the bench reports).
        self.made = 0
        self.cycles = 0

    def forget(self) -> None:
        """Not asked for this cycle: the map is dropped, and made afresh when asked again."""
        self._qu = None
        self.map = None
        self.due = False

    def at(self, springs: SpringScale, q_measured: FloatArray | None) -> FloatArray | None:
        """The map this cycle (None until one is made), due to be remade when
        :data:`REFRESH_S` has passed, ``ŝ`` changed, or none was made since :meth:`forget`;
        ``q_measured``: this cycle's measured configuration (where the first solve of the
        plant's rest starts; None: from q̄)."""
        self._age += 1
        if self._qu is None or self._age >= self._every or springs.scale != self._scale:
            self.due, self._springs = True, springs
            self._measured = None if q_measured is None else np.array(q_measured, dtype=float)
        self.cycles += self.map is not None
        return self.map

    def refresh(self, q_bar: FloatArray) -> None:
        """Remake the map at the model's held configuration ``q_bar`` (:func:`springs_map`)
        where a cycle asked for it (:attr:`due`)."""
        springs = self._springs
        if not self.due or springs is None:
            return
        guess = self._qu
        if guess is None:
            start = q_bar if self._measured is None or not len(self._measured) \
                else self._measured
            guess = split(self.model, np.asarray(start, dtype=float))[1]
        self.map, rest = springs_map(self.model, springs, q_bar, guess)
        self._qu = split(self.model, rest)[1]
        self._age, self._scale, self.due, self._measured = 0, springs.scale, False, None
        self.made += self.map is not None


__all__ = ["AGREES", "REFRESH_S", "SpringsErrorMap", "springs_map"]
