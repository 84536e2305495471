"""References that keep moving: streamed samples, filtered within the actuators' limits.

A target that keeps moving (an operator dragging it, a tracker, another program streaming
``set/reference``) is not planned sample by sample: the per-cycle IK on E tracks it
directly, with feedforward of its velocity. That is the closed-loop IK of seeds 000 and 003,

    q̄̇a = J⁺ (ẋ_d + Γ e),      e = x_d − h(q)    (fb: the measured q; ff: q̄)

through the held Jacobian ``J = Ja − Ju Huu⁻¹ Hua`` of Algorithm 1. The steppers integrate
``Δt Γ J⁺ (x̄ − h)`` for an aim ``x̄``, so the loop aims them at the *lead* point

    x̄ = x_d + ẋ_d / Γ

which gives exactly ``Δt J⁺ (ẋ_d + Γ e)`` for the pseudo-inverse, damped and inverse updates
(Algorithm 2's task rate ``ΓZ`` likewise): a reference moving at constant speed is followed
without the lag ``ẋ_d / Γ`` that aiming at ``x_d`` alone leaves (with Γ ≈ 1 /s, a 0.1 m, 0.25 Hz
sine would lag by ~0.15 m).

Two objects, both pure (no clock, no threads; the caller passes the loop's time):

* :class:`StreamedReference`: the samples ``(t, x)`` [s of loop time, task units] as they
  arrive, possibly with velocities; :meth:`~StreamedReference.at` interpolates linearly
  between them (the slope is the velocity) and, past the newest, extrapolates along the last
  slope (over :data:`SLOPE_SPAN_S` for samples stamped on arrival) for at most
  :data:`EXTRAPOLATE_S`, then holds. Thread-safe between one writer (the
  command thread) and one reader (the loop).
* :class:`ReferenceFilter`: a critically damped second-order tracker of ``(x_d, ẋ_d)`` in
  task space, with the reference's velocity fed forward (no lag on a ramp; ``ẍ_d / ω²`` on a
  curve), its velocity and acceleration scaled down as a whole so that the actuators'
  share, ``J⁺ ẋ`` and ``J⁺ ẍ``, stays within their rate and acceleration limits
  (:class:`~poise.motion.safety.SafetyLimits`), and its bandwidth ω set from the arm's
  slowest structural mode: a step of the stream (a dragged target let go, a late sample) is
  smoothed over about one period of that mode instead of kicking it.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Callable, Sequence

import numpy as np

from poise.models.base import FloatArray

#: Past the newest sample, the reference goes on along the last slope for at most this long,
#: then holds [s]: a stream of samples every 20 ms (50 Hz) is followed without waiting for the
#: next one, and a stream that stops halts the arm within this.
EXTRAPOLATE_S = 0.1
#: Past a newest sample stamped on arrival, the slope extrapolated along is taken over at
#: least this span of samples [s] (:func:`_recent_slope`): more than two intervals of a 50 Hz
#: stream (0.1 s followed a 0.1 m, 0.25 Hz sine 6.0 mm RMS, 0.05 s 4.9 mm).
SLOPE_SPAN_S = 0.05
#: A cycle later than this many periods advances the reference filter in sub-steps of at most
#: one period (its explicit step stays stable, ω Δt ≤ 2π · 5 Hz · Δt), and at most this many.
MAX_FILTER_SUBSTEPS = 100
#: Samples kept (the older are dropped).
KEPT_SAMPLES = 4096
#: The filter's bandwidth: this multiple of the slowest structural mode's ω, within
#: [:data:`MIN_BANDWIDTH`, :data:`MAX_BANDWIDTH`] rad/s.
BANDWIDTH_PER_MODE = 2.0
MIN_BANDWIDTH = 2.0 * math.pi * 0.5
MAX_BANDWIDTH = 2.0 * math.pi * 5.0


class StreamedReference:
    """Time-stamped task-space samples, interpolated (see the module docstring).

    Args:
        x0: where the reference starts (task_dim,) [task units]: its value before the
            first sample (the arm's task value when streaming began).
        t0: the loop time of ``x0`` [s].
    """

    def __init__(self, x0: FloatArray, t0: float = 0.0) -> None:
        x0 = np.array(x0, dtype=float).reshape(-1)
        self.task_dim = x0.size
        self._times: list[float] = [float(t0)]
        self._points: list[FloatArray] = [x0]
        self._velocities: list[FloatArray | None] = [None]
        self._lock = threading.Lock()
        self._newest_on_arrival = False  # the newest sample's stamp is its arrival
        #: Samples received, and those refused as older than the newest.
        self.received = 0
        self.out_of_order = 0

    @property
    def newest(self) -> tuple[float, FloatArray]:
        """The newest sample's time [s] and point."""
        with self._lock:
            return self._times[-1], self._points[-1]

    def push(self, t: float, x: Sequence[float] | FloatArray,
             v: Sequence[float] | FloatArray | None = None, *, on_arrival: bool = False
             ) -> bool:
        """Add the sample ``x`` at loop time ``t`` [s] (with its velocity ``v``
        [task units/s] when the sender knows it). One at the newest sample's time replaces
        it; one older is dropped (False): samples are never reordered. ``on_arrival``: ``t``
        is when it arrived, not when it was sent (its interval to the one before carries the
        network's jitter: past it, the slope is taken over :data:`SLOPE_SPAN_S`).

        Raises:
            ValueError: a point or velocity of the wrong size, or not finite.
        """
        point = np.array(x, dtype=float).reshape(-1)
        vel = None if v is None else np.array(v, dtype=float).reshape(-1)
        for name, a in (("x", point), ("v", vel)):
            if a is None:
                continue
            if a.size != self.task_dim or not np.all(np.isfinite(a)):
                raise ValueError(f"reference sample {name} = {a.tolist()}: must be "
                                 f"{self.task_dim} finite numbers")
        with self._lock:
            if t == self._times[-1] and len(self._times) > 1:  # the same instant: it wins
                self.received += 1
                self._newest_on_arrival = on_arrival
                self._points[-1], self._velocities[-1] = point, vel
                return True
            if not t > self._times[-1]:
                self.out_of_order += 1
                return False
            self._newest_on_arrival = on_arrival
            self.received += 1
            self._times.append(float(t))
            self._points.append(point)
            self._velocities.append(vel)
            if len(self._times) > KEPT_SAMPLES:
                drop = len(self._times) - KEPT_SAMPLES
                del self._times[:drop], self._points[:drop], self._velocities[:drop]
        return True

    def at(self, t: float) -> tuple[FloatArray, FloatArray]:
        """The reference ``(x_d, ẋ_d)`` at loop time ``t`` [s] (new arrays)."""
        with self._lock:
            times, points, vels = self._times, self._points, self._velocities
            k = bisect.bisect_right(times, t) - 1
            if k < 0:
                return points[0].copy(), np.zeros(self.task_dim)
            if k < len(times) - 1:  # between samples k and k+1
                t0, t1 = times[k], times[k + 1]
                slope = (points[k + 1] - points[k]) / (t1 - t0)
                v0, v1 = vels[k], vels[k + 1]
                if v0 is not None and v1 is not None:  # the sender's velocities: Hermite
                    return _hermite(points[k], points[k + 1], v0, v1, t0, t1, t)
                return points[k] + slope * (t - t0), slope
            # past the newest: along its slope (or its own velocity) for a while, then hold
            last, vlast = points[-1], vels[-1]
            if vlast is None:
                vlast = np.zeros(self.task_dim) if len(times) < 2 else \
                    _recent_slope(times, points) if self._newest_on_arrival else \
                    (points[-1] - points[-2]) / (times[-1] - times[-2])
            ahead = t - times[-1]
            if ahead < EXTRAPOLATE_S:
                return last + vlast * ahead, vlast.copy()
            return last + vlast * EXTRAPOLATE_S, np.zeros(self.task_dim)


def _recent_slope(times: list[float], points: list[FloatArray]) -> FloatArray:
    """The newest sample's slope over at least :data:`SLOPE_SPAN_S` (or every sample kept):
    the secant from the newest sample back to the last one at least that much older. Two
    samples that arrived together (stamped on arrival, a burst after a network stall) are
    close in time but a whole sample interval apart in space: their own slope is many times
    the reference's speed, and the reference extrapolated along it ran ahead of the sender."""
    j = bisect.bisect_right(times, times[-1] - SLOPE_SPAN_S) - 1
    j = min(max(j, 0), len(times) - 2)
    return (points[-1] - points[j]) / (times[-1] - times[j])


def _hermite(x0: FloatArray, x1: FloatArray, v0: FloatArray, v1: FloatArray, t0: float,
             t1: float, t: float) -> tuple[FloatArray, FloatArray]:
    """The cubic Hermite segment through ``(t0, x0, v0)`` and ``(t1, x1, v1)`` at ``t``."""
    h = t1 - t0
    s = (t - t0) / h
    h00, h10, h01, h11 = (2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s, -2 * s**3 + 3 * s**2,
                          s**3 - s**2)
    d00, d10, d01, d11 = (6 * s**2 - 6 * s, 3 * s**2 - 4 * s + 1, -6 * s**2 + 6 * s,
                          3 * s**2 - 2 * s)
    x = h00 * x0 + h10 * h * v0 + h01 * x1 + h11 * h * v1
    v = (d00 * x0 + d01 * x1) / h + d10 * v0 + d11 * v1
    return x, v


def bandwidth(slowest_mode: float | None) -> float:
    """The reference filter's ω [rad/s] for a slowest structural mode of ``slowest_mode``
    rad/s (None: no mode known): :data:`BANDWIDTH_PER_MODE` × it, within
    [:data:`MIN_BANDWIDTH`, :data:`MAX_BANDWIDTH`]."""
    if slowest_mode is None or not slowest_mode > 0:
        return MAX_BANDWIDTH
    return min(MAX_BANDWIDTH, max(MIN_BANDWIDTH, BANDWIDTH_PER_MODE * slowest_mode))


class ReferenceFilter:
    """The reference the IK follows: ``(x_d, ẋ_d)`` tracked by a critically damped
    second-order filter within the actuators' limits (see the module docstring).

    Per step of ``dt``::

        a = ω² (x_d − x_f) + 2ω (ẋ_d − v_f)            task acceleration wanted
        a ← a · min(1, min_i accel_i / |J⁺ a|_i)         actuators within their acceleration
        v_f ← v_f + a dt;  v_f ← v_f · min(1, min_i rate_i / |J⁺ v_f|_i)
        x_f ← x_f + v_f dt

    Args:
        x0: the filter's start (task_dim,) [task units], at rest.
        omega: bandwidth ω [rad/s] (:func:`bandwidth`).
        rate: the actuators' rate limits (m,) [actuator units/s] (inf: none).
        accel: their acceleration limits (m,) [actuator units/s²] (inf: none).
        margin: the fraction of the limits the filter keeps to (the safety layer's rate
            limit then never clips what it lets through).
    """

    def __init__(self, x0: FloatArray, omega: float, rate: FloatArray, accel: FloatArray,
                 margin: float = 0.95) -> None:
        self.x = np.array(x0, dtype=float).reshape(-1)
        self.v = np.zeros_like(self.x)
        self.omega = float(omega)
        self.rate = margin * np.asarray(rate, dtype=float)
        self.accel = margin * np.asarray(accel, dtype=float)
        #: Their reciprocals (0 where a limit is infinite; a zero limit: a huge one), so that
        #: a step divides nothing (it runs every cycle).
        self._per_rate = 1.0 / np.maximum(self.rate, 1e-300)
        self._per_accel = 1.0 / np.maximum(self.accel, 1e-300)
        #: ``J⁺`` (m, task_dim): actuator motion per task motion (None: no limits applied).
        self.actuator_map: FloatArray | None = None
        #: Steps in which a limit scaled the filter down.
        self.limited = 0

    def set_actuator_map(self, pinv: FloatArray | None) -> None:
        """The held Jacobian's pseudo-inverse ``J⁺`` at the arm's configuration (m,
        task_dim), refreshed by the caller as the arm moves (None: no limits applied)."""
        self.actuator_map = None if pinv is None else np.array(pinv, dtype=float)

    def reset(self, x: FloatArray, v: FloatArray | None = None) -> None:
        """Start again from ``x`` (moving at ``v``, default at rest)."""
        self.x = np.array(x, dtype=float).reshape(-1)
        self.v = np.zeros_like(self.x) if v is None else np.array(v, dtype=float).reshape(-1)

    def step(self, x_d: FloatArray, v_d: FloatArray, dt: float) -> tuple[FloatArray, FloatArray]:
        """Advance by ``dt`` [s] towards ``(x_d, ẋ_d)``; the filtered ``(x, ẋ)`` (its own
        arrays: copy them to keep them)."""
        w = self.omega
        a = w * w * (x_d - self.x) + 2.0 * w * (v_d - self.v)
        a *= self._scale(a, self._per_accel)
        v = self.v + a * dt
        v *= self._scale(v, self._per_rate)
        self.v = v
        self.x = self.x + v * dt
        return self.x, self.v

    def _scale(self, task: FloatArray, per_limit: FloatArray) -> float:
        """The factor ≤ 1 that keeps ``|J⁺ task|`` within the limits whose reciprocals are
        ``per_limit``, for every actuator."""
        jmap = self.actuator_map
        if jmap is None:
            return 1.0
        worst = float(np.max(np.abs(jmap @ task) * per_limit))
        if worst > 1.0:
            self.limited += 1
            return 1.0 / worst
        return 1.0



class ReferenceSource:
    """What :class:`Following` reads each cycle: ``at(t) -> (x_d, ẋ_d)`` at ``t`` seconds
    since the following began, and ``duration`` [s] (``inf``: until replaced).
    :class:`StreamedReference` and the trajectories (:mod:`poise.motion.trajectory`) are
    sources."""

    duration: float = math.inf

    def at(self, t: float) -> tuple[FloatArray, FloatArray]:  # pragma: no cover - protocol
        raise NotImplementedError


class Following:
    """A reference the control step follows cycle by cycle (:meth:`ControlStep.follow_source
    <poise.motion.step.ControlStep.follow_source>`): its source, read at the cycle's time
    since the following began, through the filter (streams; a trajectory is checked and
    shaped beforehand and needs none), and the IK aimed at the lead point
    ``x_d + ẋ_d / Γ`` (the module docstring).

    Args:
        source: the stream or trajectory (``at(t)``, ``duration``).
        kind: ``"stream"`` or ``"trajectory"`` (the events and the state say it).
        period: the loop period Δt [s].
        filter: the reference filter (None: the source as it is).
        ident: the command id that began it ('' if none).
    """

    def __init__(self, source: ReferenceSource | StreamedReference, kind: str, period: float,
                 filter: ReferenceFilter | None = None, ident: str = "") -> None:
        self.source = source
        self.kind = kind
        self.period = period
        self.filter = filter
        self.ident = ident
        #: The control step's cycle at which the following began (t = 0 at the next one).
        self.start_cycle = 0
        #: The wall clock [s] the time base runs on (None: cycles × Δt, simulated time), and
        #: its reading at t = 0.
        self.clock: Callable[[], float] | None = None
        self.origin = 0.0
        self._cycle = -1
        self._t_read = 0.0
        #: The tenths of the duration reported so far (a trajectory's progress events).
        self.reported = 0
        #: The reference of the last cycle read (x_d, ẋ_d) [task units, task units/s].
        self.x_d = np.zeros(0)
        self.v_d = np.zeros(0)

    @property
    def duration(self) -> float:
        """How long the source lasts [s] (inf: a stream)."""
        return float(getattr(self.source, "duration", math.inf))

    def begin(self, cycle: int, clock: Callable[[], float] | None = None) -> None:
        """Start the time base: t = 0 at the cycle after ``cycle``. With ``clock`` (e.g.
        ``time.monotonic``, a real-time loop), the source is read at the clock's time since
        then, so a loop that runs late or slower than its nominal rate (a device that
        delivers fewer samples) neither lags nor drifts from a stream stamped on arrival or
        by its sender; without, at ``(cycle − start − 1) Δt`` (simulated time)."""
        self.start_cycle = cycle
        self.clock = clock
        self.origin = clock() + self.period if clock is not None else 0.0
        self._cycle, self._t_read = -1, 0.0

    def time(self, cycle: int) -> float:
        """The source's time at the control step's cycle ``cycle`` [s] (with a clock:
        the clock's time now, since the start, for the cycle under way or the next)."""
        if self.clock is not None:
            return max(0.0, self.clock() - self.origin)
        return (cycle - self.start_cycle - 1) * self.period

    def done(self, cycle: int) -> bool:
        """The source has ended by cycle ``cycle`` (a trajectory past its end)."""
        return self.time(cycle) >= self.duration

    def aim(self, cycle: int, gain: float, out: FloatArray) -> None:
        """Write the aim of cycle ``cycle`` into ``out``: ``x_d + ẋ_d / gain`` (``gain`` the
        IK's task rate Γ [1/s]). Read once per cycle: asked again for the same cycle (the
        wire path's fallback), it repeats itself without stepping the filter again."""
        if cycle != self._cycle:
            t = self.time(cycle)
            if self.filter is None:
                x_d, v_d = self.source.at(t)
            else:
                dt = self.period if self.clock is None or self._cycle < 0 else t - self._t_read
                x_d, v_d = self._filtered(t, dt)
            # new arrays each time (the source's and the filter's steps make them): kept as
            # they are, not copied
            self.x_d, self.v_d = x_d, v_d
            self._cycle, self._t_read = cycle, t
        np.multiply(self.v_d, 1.0 / gain if gain > 0 else 0.0, out=out)
        np.add(out, self.x_d, out=out)

    def _filtered(self, t: float, dt: float) -> tuple[FloatArray, FloatArray]:
        """The filter advanced by ``dt`` [s] to time ``t`` [s]: in one step towards the source
        at ``t`` for a period or less, else in equal sub-steps of at most one period
        (:data:`MAX_FILTER_SUBSTEPS` at most), each towards the source at its own time."""
        filt = self.filter
        assert filt is not None
        if not dt > 0:
            return filt.x, filt.v
        n = min(MAX_FILTER_SUBSTEPS, max(1, math.ceil(dt / self.period - 1e-9)))
        for i in range(n, 0, -1):
            x_d, v_d = self.source.at(t - (i - 1) * dt / n)
            x_f, v_f = filt.step(x_d, v_d, dt / n)
        return x_f, v_f


#: The IK's task rate Γ [1/s] of each algorithm's live parameters, for the lead point.
LEAD_GAIN = {"alg1": "gamma", "alg2": "gamma_z", "plain": "gamma"}


__all__ = ["BANDWIDTH_PER_MODE", "EXTRAPOLATE_S", "LEAD_GAIN", "MAX_BANDWIDTH",
           "MAX_FILTER_SUBSTEPS", "MIN_BANDWIDTH", "Following", "ReferenceFilter",
           "ReferenceSource", "StreamedReference", "bandwidth"]
