"""Moves that do not ring: a rate-limited straight line in actuator space, input-shaped.

A lightly damped arm rings for tens of seconds after a quick tendon move, whatever the
integrator does afterwards. What the model knows prevents it: the structural modes of the
linearised plant (:mod:`poise.motion.stability`). A zero-vibration shaper (Singer and
Seering, 1990) convolves the commanded motion with impulses timed and scaled so that the
vibration each one starts is cancelled by the next: for a mode ``(ω, ζ)`` with
``ω_d = ω √(1 − ζ²)`` and ``K = exp(−ζπ / √(1 − ζ²))``

* **ZV**: amplitudes ``(1, K) / (1 + K)`` at ``t = (0, π/ω_d)``: zero residual vibration of
  the modelled mode, half a damped period longer;
* **ZVD**: ``(1, 2K, K²) / (1 + K)²`` at ``t = (0, π/ω_d, 2π/ω_d)``: also zero slope with
  respect to ω, so a frequency off by ±15 % still leaves little vibration, one damped period
  longer;
* **ZVDD**: ZV convolved three times, ``(1, 3K, 3K², K³) / (1 + K)³`` at
  ``t = (0, 1, 2, 3) π/ω_d``: zero second derivative too (±25 %), 1.5 damped periods long.

The slowest structural mode gets a ZVDD shaper when it is lightly damped (``ζ <``
:data:`ZETA_SHAPED`):
its frequency moves as the arm does over a long move (the stiff soft arm crossing its
workspace leaves 0.4 % of the move ringing after a ZVD-shaped move, 0.2 % after ZVDD, 17 %
unshaped; the dancer crouching 0.77 m, 4 % and 0.9 %), and what is left rings for long.
The next one, and any mode damped less than :data:`ZETA_DAMPED`, gets a ZV shaper (at most
:data:`MAX_SHAPED_MODES`); the shapers are convolved. The shaped move is then::

    qa(t) = start + (goal − start) · Σ_i A_i · clip((t − t_i) / T_move, 0, 1)

with ``T_move`` the straight line's duration at the allowed actuator speeds: the speed never
exceeds the unshaped one (the amplitudes are positive and sum to 1), so the safety layer's rate
limit never distorts it. A :class:`Warp` ``w`` replaces the progress ``p`` by ``w(p)`` and
``T_move`` by ``T_move · max w′``: the same path, slower where the arm's equilibrium moves
fast (:mod:`poise.motion.warp`). It is evaluated in closed form, with no buffer of past
commands: one scalar per cycle, written into a preallocated vector.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from poise.api.rules import SHAPERS, ZETA_SHAPED
from poise.models.base import FloatArray
from poise.motion.stability import Mode

#: Modes damped up to this still get a ZV shaper (half a damped period): a slow one rings
#: long and far even so (the dancer with a leg raised sways at 0.54 rad/s, ζ = 0.4).
ZETA_DAMPED = 0.6
#: At most this many modes are shaped (the slowest ones).
MAX_SHAPED_MODES = 2


@dataclass(frozen=True)
class Shaper:
    """An impulse sequence: ``times`` [s] (ascending, from 0) and ``amplitudes`` (sum 1)."""

    times: tuple[float, ...] = (0.0,)
    amplitudes: tuple[float, ...] = (1.0,)

    @classmethod
    def zv(cls, mode: Mode) -> Shaper:
        """Zero vibration of ``mode``: two impulses half a damped period apart."""
        k, half = _k_and_half_period(mode)
        return cls((0.0, half), (1 / (1 + k), k / (1 + k)))

    @classmethod
    def zvd(cls, mode: Mode) -> Shaper:
        """Zero vibration and zero derivative (robust to the frequency): three impulses."""
        k, half = _k_and_half_period(mode)
        s = (1 + k) ** 2
        return cls((0.0, half, 2 * half), (1 / s, 2 * k / s, k * k / s))

    def then(self, other: Shaper) -> Shaper:
        """The convolution of two shapers (both modes cancelled)."""
        pairs = sorted((t1 + t2, a1 * a2)
                       for t1, a1 in zip(self.times, self.amplitudes, strict=True)
                       for t2, a2 in zip(other.times, other.amplitudes, strict=True))
        times: list[float] = []
        amps: list[float] = []
        for t, a in pairs:  # impulses at the same time (to rounding) are one
            if times and t - times[-1] <= 1e-9 * (1.0 + t):
                amps[-1] += a
            else:
                times.append(t)
                amps.append(a)
        return Shaper(tuple(times), tuple(amps))

    @classmethod
    def zvdd(cls, mode: Mode) -> Shaper:
        """ZV convolved three times (robust to ±25 % in the frequency): four impulses."""
        zv = cls.zv(mode)
        return zv.then(zv).then(zv)

    @property
    def duration(self) -> float:
        """Time from the first to the last impulse [s]: how much longer a shaped move is."""
        return self.times[-1]

    def as_dict(self) -> dict[str, list[float]]:
        return {"times_s": list(self.times), "amplitudes": list(self.amplitudes)}


@dataclass(frozen=True)
class Warp:
    """Where along the straight line a move is, as a function of its shaped progress: line
    progress ``s = w(f)`` at knots ``f`` (both ascending from 0 to 1), linear in between.

    The identity is the straight line at constant speed. A warp slows the line where the
    arm's equilibrium moves fast (:func:`poise.motion.warp.equilibrium_warp`); a move
    under it lasts :attr:`steepest` times longer, so that no actuator moves faster than it
    would on the unwarped line.
    """

    f: tuple[float, ...] = (0.0, 1.0)
    s: tuple[float, ...] = (0.0, 1.0)

    @property
    def steepest(self) -> float:
        """The largest ``ds/df``: how much longer the move must be for the same top speed."""
        return max((s1 - s0) / (f1 - f0) for f0, f1, s0, s1
                   in zip(self.f, self.f[1:], self.s, self.s[1:], strict=False) if f1 > f0)

    @property
    def pauses(self) -> list[tuple[float, float]]:
        """Where the line holds still: ``(s, Δf)`` per flat piece, its line progress and its
        share of the shaped progress (a dwell move, :mod:`poise.motion.dwell`)."""
        return [(s0, f1 - f0) for f0, f1, s0, s1
                in zip(self.f, self.f[1:], self.s, self.s[1:], strict=False)
                if f1 > f0 and s1 == s0]

    def __call__(self, f: float) -> float:
        """Line progress at shaped progress ``f`` (clipped to [0, 1])."""
        knots = self.f
        k = bisect.bisect_right(knots, f) - 1
        if k < 0:
            return 0.0
        if k >= len(knots) - 1:
            return 1.0
        w = (f - knots[k]) / (knots[k + 1] - knots[k])
        return self.s[k] + w * (self.s[k + 1] - self.s[k])


def _k_and_half_period(mode: Mode) -> tuple[float, float]:
    zeta = min(max(mode.zeta, 0.0), 0.99)
    root = math.sqrt(1 - zeta * zeta)
    return math.exp(-zeta * math.pi / root), math.pi / (mode.omega * root)


def shaper_for(modes: Sequence[Mode], kind: str = "auto") -> Shaper:
    """The shaper of a plant's structural ``modes`` (slowest first): of the modes damped
    below :data:`ZETA_DAMPED` (at most :data:`MAX_SHAPED_MODES`, the slowest), the first gets
    ``kind`` (``[loop] shaper``, :data:`~poise.api.rules.SHAPERS`): with ``"auto"``
    ZVDD when it is lightly damped (ζ < :data:`ZETA_SHAPED`), else ZV; the others ZV. The
    identity if every mode is well damped, or with ``"off"``.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in SHAPERS:
        raise ValueError(f"shaper {kind!r}: must be one of {', '.join(SHAPERS)}")
    shaped = [mo for mo in modes if mo.zeta < ZETA_DAMPED and mo.omega > 0]
    shaper = Shaper()
    if kind == "off":
        return shaper
    for i, mode in enumerate(shaped[:MAX_SHAPED_MODES]):
        name = "zv" if i > 0 else kind if kind != "auto" else \
            "zvdd" if mode.zeta < ZETA_SHAPED else "zv"
        shaper = shaper.then(getattr(Shaper, name)(mode))
    return shaper


def _staircase(times: tuple[float, ...], cumulative: FloatArray, t: float) -> float:
    """``Σ_{t_i ≤ t} A_i`` from the cumulative amplitudes."""
    k = int(np.searchsorted(times, t + 1e-12, side="right"))
    return float(cumulative[k - 1]) if k > 0 else 0.0


def _no_reversal(start: Shaper, end: Shaper) -> float:
    """The smallest ``T`` with ``Σ_{t_i ≤ t} A_i ≥ Σ_{T + t_j ≤ t} B_j`` for every ``t``: the
    deceleration (``end``'s steps from ``T`` on) never outruns the acceleration (``start``'s
    steps), so the velocity never changes sign (0 for identical shapers)."""
    cum_a = np.cumsum(start.amplitudes)
    cum_b = np.cumsum(end.amplitudes)
    need = 0.0
    for t_j, b in zip(end.times, cum_b, strict=True):
        i = int(np.searchsorted(cum_a, b - 1e-12))
        need = max(need, start.times[min(i, len(start.times) - 1)] - t_j)
    return need


class ShapedMove:
    """A straight, rate-limited, shaped move of the actuators (see the module docstring).

    A straight line at constant speed is two steps of velocity, one at each end; each is
    shaped by the shaper of the modes *there* (the arm's modes change along the way: the
    dancer's ankle sways at 0.9 rad/s upright and at 2 rad/s crouched), so the velocity is::

        v(t) ∝ Σ_i A_i H(t − t_i) − Σ_j B_j H(t − T − t_j)

    (``A``, ``t``: the start's shaper; ``B``, ``t``: the goal's; ``H`` the unit step), and
    ``T`` is chosen so that the move ends exactly at the goal and no actuator exceeds its
    speed. With the same shaper at both ends this is the shaped ramp of the module
    docstring.

    Args:
        start: actuator positions at the start (m,) [actuator units].
        goal: where the move ends (m,).
        speed: the largest speed of each actuator (m,) [actuator units/s], > 0.
        shaper: the input shaper at the goal.
        start_shaper: the input shaper at the start (default: ``shaper``).
        warp: where along the line the shaped progress is (default: the identity).
    """

    def __init__(self, start: FloatArray, goal: FloatArray, speed: FloatArray,
                 shaper: Shaper, start_shaper: Shaper | None = None,
                 warp: Warp | None = None) -> None:
        self.start = np.array(start, dtype=float)
        self.goal = np.array(goal, dtype=float)
        self.delta = self.goal - self.start
        speed = np.asarray(speed, dtype=float)
        if np.any(~(speed > 0)):
            raise ValueError(f"speed = {speed.tolist()}: must be > 0")
        #: duration of the unshaped line [s] (all actuators arrive together)
        self.move_time = float(np.max(np.abs(self.delta) / speed)) if self.delta.size else 0.0
        self.warp = warp
        if warp is not None:
            self.move_time *= warp.steepest
        self.shaper = shaper
        self.start_shaper = start_shaper if start_shaper is not None else shaper
        first = self.start_shaper
        lag = float(np.dot(shaper.amplitudes, shaper.times)
                    - np.dot(first.amplitudes, first.times))
        #: when the deceleration begins [s]: late enough that the velocity never reverses
        #: and that its integral (∝ T + lag) is the whole line at no more than ``speed``
        self.cruise = max(self.move_time - lag, _no_reversal(first, shaper), 0.0)
        # v(t) is piecewise constant: its breakpoints, its value on each piece (≥ 0) and the
        # area up to each breakpoint, so that progress is a sum of non-negative terms (no
        # cancellation, monotone by construction, exactly 1 at the end)
        ups = np.cumsum(first.amplitudes)
        downs = np.cumsum(shaper.amplitudes)
        breaks = np.unique(np.concatenate([first.times, self.cruise + np.array(shaper.times)]))
        value = np.maximum(np.array([_staircase(first.times, ups, b)
                                     - _staircase(shaper.times, downs, b - self.cruise)
                                     for b in breaks]), 0.0)
        area = np.concatenate([[0.0], np.cumsum(value[:-1] * np.diff(breaks))])
        # Python floats: fraction() runs every cycle of a move, and a bisect on a list costs a
        # fraction of numpy's searchsorted and scalar indexing there (the real-time loop's
        # Python runs on cold caches)
        self._breaks: list[float] = breaks.tolist()
        self._value: list[float] = value.tolist()
        self._area: list[float] = area.tolist()
        self._total = float(area[-1])
        self._out = self.start.copy()

    @property
    def duration(self) -> float:
        """Time until the shaped command reaches the goal [s]."""
        return self.cruise + self.shaper.duration

    def fraction(self, t: float) -> float:
        """Shaped progress in [0, 1] at time ``t`` [s] since the start."""
        if self._total <= 0.0:
            return 1.0 if t >= self.duration else 0.0
        k = bisect.bisect_right(self._breaks, t) - 1
        if k < 0:
            return 0.0
        if k >= len(self._breaks) - 1:
            return 1.0
        area = self._area[k] + self._value[k] * (t - self._breaks[k])
        f = min(1.0, area / self._total)
        return f if self.warp is None else self.warp(f)

    def at(self, t: float, out: FloatArray | None = None) -> FloatArray:
        """The actuator command at time ``t`` [s], into ``out`` (m,) when given, else into an
        internal buffer (copy it to keep it)."""
        out = self._out if out is None else out
        np.multiply(self.delta, self.fraction(t), out=out)
        np.add(out, self.start, out=out)
        return out


__all__ = ["MAX_SHAPED_MODES", "ZETA_DAMPED", "ZETA_SHAPED", "ShapedMove", "Shaper", "Warp",
           "shaper_for"]
