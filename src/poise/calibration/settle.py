"""Settle detection: has the robot stopped moving after an actuator command?

The robot's unactuated coordinates keep swinging after the actuators reach their references
(only joint damping slows them), so a pose is recorded only once **every** measured coordinate
has come to rest. Over a sliding window of the last ``window`` seconds of samples:

* velocity test: the least-squares slope of each coordinate over the window is below
  ``velocity_tol`` [rad/s] — a slope over many samples, not a finite difference, so encoder
  noise and quantisation do not trigger it (slope σ ≈ σ_q / (T √(k/12)) for k samples over T);
* change test: the window is cut into ``blocks`` equal blocks and the block means (noise
  averaged out) of every coordinate span less than ``change_tol`` [rad] — this catches a
  residual oscillation whose slope over the window happens to be zero (a window centred on a
  turning point) and a slow drift. The limit never falls below the noise floor of the block
  means, :data:`NOISE_SPAN` σ̂_b with σ̂_b = σ̂ / √(samples per block) and σ̂ the sensor noise
  estimated from first differences (``RMS(Δq) / √2``, blind to a smooth motion; not their
  median, which is 0 for a quantised reading that mostly repeats its count): a
  noisy or coarse encoder (``[plant] noise``, ``counts_per_rev``) would otherwise keep a
  resting arm from ever settling;
* tracking test: every actuator is within ``qa_tol`` of its reference (a saturated or blocked
  actuator never settles: it times out).

All three must hold continuously for ``hold`` seconds (longer than a turning point of the slow
swing lasts); ``timeout`` after the command the pose is
recorded anyway and flagged ``settled = False`` (the fit leaves it out by default).
:func:`settle_timeout` sizes the timeout for a robot: a slow, lightly damped sway (the dancer
on its pointe, 1 rad/s upright) needs longer than :data:`TIMEOUT_MIN` to die out, and a pose
that times out is a pose lost to the fit. The recorded
values are the means over a further ``average`` seconds.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from poise.models.base import FloatArray

#: The shortest settle timeout [s] (:func:`settle_timeout`).
TIMEOUT_MIN = 15.0
#: :func:`settle_timeout` allows this many decay times of the slowest mode; a decay time is
#: the time its amplitude takes to fall by :data:`DECAY_RATIO`.
DECAYS = 2.0
DECAY_RATIO = 150.0
#: The longest settle timeout [s].
TIMEOUT_MAX = 120.0

#: The change test's noise floor: block means of white noise span this many σ_b rarely
#: (the expected span of 8 normal samples is 2.85 σ; 4.5 σ is exceeded in about 3 % of windows).
NOISE_SPAN = 4.5


@dataclass(frozen=True)
class SettleConfig:
    """Thresholds of the settle test (see the module docstring).

    Attributes:
        window: sliding window [s].
        velocity_tol: |slope| limit per coordinate [rad/s].
        change_tol: span limit of the block means [rad].
        blocks: number of blocks the window is cut into for the change test.
        qa_tol: actuator tracking limit [actuator units]; ``None``: 5 % of each safe range
            (a position loop under load keeps a steady error; the measured ``qa`` is what is
            recorded, so this only catches a blocked or saturated actuator).
        check_every: evaluate the tests at most this often [s] (cheap on a fast stream).
        hold: how long the tests must pass without interruption [s].
        timeout: give up waiting after this long [s] (the pose is flagged unsettled);
            ``None``: sized for the robot by :func:`settle_timeout` (``poise calibrate``'s
            workflow), :data:`TIMEOUT_MIN` where no model is at hand.
        average: averaging time after the settle decision [s].
        min_time: never decide earlier than this after the command [s].
    """

    window: float = 0.4
    velocity_tol: float = 2e-3
    change_tol: float = 3e-4
    blocks: int = 8
    qa_tol: float | None = None
    hold: float = 0.3
    check_every: float = 0.02
    timeout: float | None = None
    average: float = 0.3
    min_time: float = 0.2

    def to_dict(self) -> dict[str, float | int | None]:
        return dict(self.__dict__)


class SettleDetector:
    """Feed samples with :meth:`add`; :attr:`settled` turns true once the tests hold."""

    def __init__(self, config: SettleConfig, qa_tol: FloatArray) -> None:
        self.config = config
        self.qa_tol = np.asarray(qa_tol, dtype=float)
        self._t: deque[float] = deque()
        self._q: deque[FloatArray] = deque()
        self._since: float | None = None
        self._last_check = -np.inf
        self._ok = False
        self.settled = False
        self.last_velocity = np.inf
        self.last_change = np.inf

    def reset(self) -> None:
        self._t.clear()
        self._q.clear()
        self._since = None
        self._last_check = -np.inf
        self._ok = False
        self.settled = False

    def add(self, t: float, q: FloatArray, qa: FloatArray, qa_ref: FloatArray) -> bool:
        """Add one sample (time [s], measured q, actuator positions, references)."""
        self._t.append(float(t))
        self._q.append(np.asarray(q, dtype=float))
        while self._t and self._t[-1] - self._t[0] > self.config.window:
            self._t.popleft()
            self._q.popleft()
        if float(t) - self._last_check >= self.config.check_every:
            self._last_check = float(t)
            self._ok = self._test(np.asarray(qa, dtype=float), np.asarray(qa_ref, dtype=float))
        ok = self._ok
        if not ok:
            self._since = None
        elif self._since is None:
            self._since = float(t)
        self.settled = self._since is not None and float(t) - self._since >= self.config.hold
        return self.settled

    def _test(self, qa: FloatArray, qa_ref: FloatArray) -> bool:
        k = len(self._t)
        nb = max(2, int(self.config.blocks))
        if k < 3 * nb or self._t[-1] - self._t[0] < 0.9 * self.config.window:
            return False
        t = np.fromiter(self._t, float, k)
        Q = np.stack(self._q)
        tc = t - t.mean()
        slope = tc @ (Q - Q.mean(axis=0)) / (tc @ tc)
        means = np.stack([b.mean(axis=0) for b in np.array_split(Q, nb)])
        self.last_velocity = float(np.max(np.abs(slope)))
        span = means.max(axis=0) - means.min(axis=0)
        self.last_change = float(np.max(span))
        return (self.last_velocity < self.config.velocity_tol
                and bool(np.all(span < np.maximum(self.config.change_tol,
                                                  self.noise_floor(Q, nb))))
                and bool(np.all(np.abs(qa - qa_ref) <= self.qa_tol)))


    @staticmethod
    def noise_floor(Q: FloatArray, blocks: int) -> FloatArray:
        """Per coordinate, the span [rad] that the means of ``blocks`` blocks of white sensor
        noise stay below: :data:`NOISE_SPAN` σ̂ / √(k / blocks), σ̂ = RMS of the first differences
        of the ``k`` samples ``Q`` (k × n) over √2."""
        diffs = np.diff(Q, axis=0)
        sigma = np.sqrt(np.mean(diffs**2, axis=0) / 2.0)
        return NOISE_SPAN * sigma / np.sqrt(len(Q) / blocks)


def settle_timeout(model: Any) -> float:
    """A settle timeout [s] for ``model``: :data:`DECAYS` times the time the amplitude of its
    slowest structural mode at rest takes to fall by :data:`DECAY_RATIO`
    (``ln(DECAY_RATIO) / (ζ ω)``), within [:data:`TIMEOUT_MIN`, :data:`TIMEOUT_MAX`]
    (double pendulum 15 s, dancer 37 s)."""
    from poise.motion.stability import structural_modes

    try:
        modes = structural_modes(model, np.zeros(model.n))
    except (ValueError, np.linalg.LinAlgError, AttributeError):
        return TIMEOUT_MIN
    decay = max((math.log(DECAY_RATIO) / (m.zeta * m.omega) for m in modes
                 if m.zeta > 0 and m.omega > 0), default=0.0)
    return float(min(max(TIMEOUT_MIN, DECAYS * decay), TIMEOUT_MAX))


__all__ = ["NOISE_SPAN", "SettleConfig", "SettleDetector", "settle_timeout"]
