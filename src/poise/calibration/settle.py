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
  turning point) and a slow drift;
* tracking test: every actuator is within ``qa_tol`` of its reference (a saturated or blocked
  actuator never settles: it times out).

All three must hold continuously for ``hold`` seconds (longer than a turning point of the slow
swing lasts); ``timeout`` after the command the pose is
recorded anyway and flagged ``settled = False`` (the fit leaves it out by default). The recorded
values are the means over a further ``average`` seconds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from poise.models.base import FloatArray


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
        timeout: give up waiting after this long [s] (the pose is flagged unsettled).
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
    timeout: float = 15.0
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
        self.last_change = float(np.max(means.max(axis=0) - means.min(axis=0)))
        return (self.last_velocity < self.config.velocity_tol
                and self.last_change < self.config.change_tol
                and bool(np.all(np.abs(qa - qa_ref) <= self.qa_tol)))


__all__ = ["SettleConfig", "SettleDetector"]
