"""Whether the arm can follow a trajectory, checked before it starts
(:mod:`poise.motion.trajectory`): the held configuration along the reference, and the
actuator speeds and accelerations it needs, against the safety limits.

The solvers (:mod:`poise.ik.held`) are imported when a check runs, not with this module.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from poise.models.base import FloatArray
from poise.motion.waypoints import TrajectoryError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from poise.ik.result import IKResult
    from poise.models.base import MechanicalModel
    from poise.motion.safety import SafetyLimits
    from poise.motion.trajectory import Previewed, Trajectory

#: The feasibility check samples the path at least this often [s].
CHECK_STEP = 0.02
#: The check's held solves meet this fraction of the task tolerance: the speeds and
#: accelerations are finite differences of their actuators, which amplify a solve's error by
#: up to 4/Δt² (the stiff soft arm's circle of tests/test_trajectory.py, solved to a tenth of
#: the tolerance, shows 1.8 times its true peak acceleration; to 1e-3 of it, within 0.2 %),
#: and a warm-started solve gets there in the same one or two iterations.
CHECK_TOL = 1e-3
#: Iteration cap of each held solve of the check.
CHECK_MAX_ITER = 300
#: Waypoints closer than this fraction of the check's step to the previous sample are not
#: solved: a finite difference over a shorter time amplifies the solver's error.
MIN_GAP = 0.5
#: Two times this close [s] are the same (a sample on a waypoint).
SAME_TIME = 1e-9


class TrajectoryRefused(TrajectoryError):
    """A trajectory the arm cannot follow (:func:`check_trajectory`).

    Attributes:
        reason: ``unreachable``, ``unstable`` or ``too_fast``.
        t: when the fault is [s, trajectory time].
        waypoint: the first waypoint at fault: the one at ``t``, else the one that starts
            the segment containing ``t`` (0 before the start).
    """

    def __init__(self, message: str, reason: str, t: float, waypoint: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.t = t
        self.waypoint = waypoint


@dataclass(frozen=True)
class FeasiblePath:
    """The held configurations along a trajectory that :func:`check_trajectory` accepted.

    Attributes:
        times: the sample times (N,) [s, trajectory time].
        x: the reference there (N, task_dim) [task units].
        q: the held configuration reaching it (N, n).
        qa: its actuators (N, m) [actuator units].
        peak_rate: the largest actuator speed needed (m,) [actuator units/s] (finite
            differences between samples).
        peak_accel: the largest actuator acceleration needed (m,) [actuator units/s²] (second
            divided differences).
    """

    times: FloatArray
    x: FloatArray
    q: FloatArray
    qa: FloatArray
    peak_rate: FloatArray
    peak_accel: FloatArray


def check_trajectory(trajectory: Trajectory | Previewed, model: MechanicalModel,
                     limits: SafetyLimits, *, period: float, tolerance: float,
                     q_start: ArrayLike) -> FeasiblePath:
    """Whether the arm can follow ``trajectory`` (or its shaped preview), checked before it
    starts: its held configurations, and the actuator speeds and accelerations between them.

    The reference is sampled from its :attr:`~Trajectory.start` to its
    :attr:`~Trajectory.duration` at every waypoint and at most :data:`CHECK_STEP` apart, or
    one loop period where that is longer: the safety layer limits each setpoint's step
    (:func:`sample_times`). At each sample Algorithm 1 (:func:`~poise.ik.held.algorithm1`, to
    :data:`CHECK_TOL` × ``tolerance``) is warm-started from the previous sample's held
    configuration, the first from ``q_start``. The trajectory is refused

    * **unreachable**: the task error stays above ``tolerance``, or the configuration needs
      an actuator outside ``limits.qa_min`` … ``limits.qa_max``;
    * **unstable**: the held configuration reaching it is unstable (``H_uu`` not ≻ 0):
      Algorithm 1 stops short of it (its statics keep to the stable branch) and Algorithm 2
      (:func:`~poise.ik.held.algorithm2`, from the same start) reaches it, as in
      :func:`~poise.motion.planner.plan_target`;
    * **too fast**: an actuator's speed (``Δqa / Δt`` between samples) exceeds
      ``limits.qa_rate``, or its acceleration (the second divided difference) exceeds
      ``limits.accel``.

    The first sample it cannot hold is the fault; if it can hold them all, the first speed or
    acceleration over the limits. (A path to the edge of the held workspace needs speeds that
    grow without bound where ``dqa/dx`` does, at a fold: what is refused is the waypoint out
    of reach, not the speed on the way.) A fault on a waypoint names it (``at waypoint 3 (t =
    1.5 s)``), one between waypoints names the segment (``between waypoint 2 (t = 1 s) and
    waypoint 3 (t = 1.5 s)``); :attr:`TrajectoryRefused.waypoint` is the waypoint at fault or
    the segment's first.

    Cost: one warm-started solve per sample (0.1–0.3 ms): 0.1–0.3 s for a 20 s trajectory
    (about 1000 samples) on the stiff soft arm, the double pendulum or the dancer, measured on
    a busy 2-core machine; the first solve of a process adds the compiled kernels' loading
    (about 1 s).

    Args:
        trajectory: the waypoints' spline, or the shaped reference the loop follows.
        model: the controller's statics model.
        limits: the safety limits (positions, rates, accelerations).
        period: the loop period Δt [s].
        tolerance: the task tolerance [task units].
        q_start: the held configuration the first solve starts from (n,): the arm's.

    Raises:
        TrajectoryRefused: the first fault (see above); the message says where and why.
        ValueError: ``period`` or ``tolerance`` not positive.
    """
    from poise.ik.held import HeldOptions, algorithm1, algorithm2  # the solvers, when checking

    if not (period > 0 and tolerance > 0):
        raise ValueError(f"period = {period}, tolerance = {tolerance}: both must be > 0")
    wp_times = trajectory.waypoints[0].tolist()
    times = sample_times(trajectory, max(CHECK_STEP, period))
    options = HeldOptions(tol=CHECK_TOL * tolerance, max_iter=CHECK_MAX_ITER)
    q = np.asarray(q_start, dtype=float)
    xs, qs, qas = [], [], []
    for j, t in enumerate(times):
        x = trajectory.at(t)[0]
        result = algorithm1(model, x, q, options=options)
        if result.position_error > tolerance and result.stable is not False:
            # Algorithm 1 keeps to stable held configurations: is the one beyond unstable?
            beyond = algorithm2(model, x, q, options=options)
            if beyond.position_error <= tolerance and beyond.stable is False:
                result = beyond
        _check_held(result, x, t, limits, tolerance, wp_times,
                    "from q_start" if j == 0 else "continuing from the previous sample")
        q = np.asarray(result.q, dtype=float)
        xs.append(x)
        qs.append(q)
        qas.append(np.asarray(result.qa, dtype=float))
    qa = np.array(qas)
    rate = np.abs(np.diff(qa, axis=0)) / np.diff(times)[:, None]
    accel = np.abs(_accel(times, qa))
    _check_rates(times, rate, accel, limits, wp_times)
    return FeasiblePath(times, np.array(xs), np.array(qs), qa, rate.max(axis=0),
                        accel.max(axis=0, initial=0.0))


def sample_times(trajectory: Trajectory | Previewed, step: float) -> FloatArray:
    """Where :func:`check_trajectory` solves [s]: the reference's start and end, every
    waypoint between them, and between each two of those as few evenly spaced times as keep
    the samples at most ``step`` apart.

    A waypoint closer than ``MIN_GAP · step`` to the previous one kept, or to the end, is
    not a sample of its own (a finite difference over a shorter time amplifies the solver's
    error): samples are ``MIN_GAP · step`` to ``step`` apart, unless the whole reference is
    shorter.
    """
    start, end = trajectory.start, trajectory.duration
    gap = MIN_GAP * step - SAME_TIME
    fixed = [start]
    for t in trajectory.waypoints[0].tolist():
        if t - fixed[-1] >= gap and end - t >= gap:
            fixed.append(t)
    fixed.append(end)
    out = [np.array([start])]
    for a, b in itertools.pairwise(fixed):
        pieces = max(1, int(np.ceil((b - a) / step - 1e-9)))
        out.append(a + (b - a) * np.arange(1, pieces + 1) / pieces)
        out[-1][-1] = b  # exactly the waypoint
    return np.concatenate(out)


def _where(t: float, wp: list[float]) -> tuple[str, int]:
    """The waypoint at ``t`` or the segment containing it, and its (first) waypoint."""
    k = bisect.bisect_right(wp, t + SAME_TIME) - 1
    if k >= 0 and abs(t - wp[k]) <= SAME_TIME:
        return f"at waypoint {k} (t = {wp[k]:g} s)", k
    if k < 0:
        return f"before waypoint 0 (t = {t:.3f} s: the shaped reference's lead)", 0
    if k >= len(wp) - 1:
        return f"after the last waypoint {k} (t = {t:.3f} s: the shaped reference's tail)", k
    return (f"between waypoint {k} (t = {wp[k]:g} s) and waypoint {k + 1} "
            f"(t = {wp[k + 1]:g} s)", k)


def _check_held(result: IKResult, x: FloatArray, t: float, limits: SafetyLimits,
                tolerance: float, wp: list[float], start: str) -> None:
    """Refuse an unstable or unreached held configuration at sample time ``t`` (solved
    ``start``: from where)."""
    where, k = _where(t, wp)
    target = f"x = {np.round(x, 6).tolist()} (t = {t:.3f} s)"
    if result.stable is False:
        raise TrajectoryRefused(
            f"unstable {where}: the held configuration reaching {target} is unstable "
            f"(min eig H_uu = {result.min_eig_Huu:.3g} ≤ 0): a collocated controller cannot "
            "hold it", "unstable", t, k)
    qa = np.asarray(result.qa, dtype=float)
    outside = np.flatnonzero((qa < limits.qa_min - 1e-12) | (qa > limits.qa_max + 1e-12))
    if result.position_error > tolerance or outside.size:
        detail = (f"task error {result.position_error:.3g} > tolerance {tolerance:g}"
                  if not outside.size else
                  f"actuator {int(outside[0])} would be at {qa[outside[0]]:.4g}, outside "
                  f"[{limits.qa_min[outside[0]]:g}, {limits.qa_max[outside[0]]:g}]")
        raise TrajectoryRefused(f"unreachable {where}: {target} is out of reach within the "
                                f"actuator limits, {start} ({detail})", "unreachable", t, k)


def _check_rates(times: FloatArray, rate: FloatArray, accel: FloatArray,
                 limits: SafetyLimits, wp: list[float]) -> None:
    """Refuse the first speed (``rate[j]``: between samples j and j+1) or acceleration
    (``accel[j]``: at sample j+1) over its limit; an acceleration first when both start at
    the same sample (it involves the interval before)."""
    over_rate = np.flatnonzero((rate > limits.qa_rate).any(axis=1))
    over_accel = np.flatnonzero((accel > limits.accel).any(axis=1)) + 1
    if over_accel.size and (not over_rate.size or over_accel[0] <= over_rate[0]):
        j = int(over_accel[0])
        where, k = _where(float(times[j]), wp)
        _refuse_over(accel[j - 1], limits.accel, "accelerate at", "units/s²", "acceleration",
                     where, float(times[j]), k, f"t = {times[j]:.3f} s")
    if over_rate.size:
        j = int(over_rate[0])
        t0, t1 = float(times[j]), float(times[j + 1])
        where, k = _where(0.5 * (t0 + t1), wp)
        _refuse_over(rate[j], limits.qa_rate, "move at", "units/s", "rate", where, t0, k,
                     f"t = {t0:.3f}–{t1:.3f} s")


def _refuse_over(needed: FloatArray, allowed: FloatArray, verb: str, unit: str, limit: str,
                 where: str, t: float, k: int, when: str) -> None:
    """Refuse for the actuator furthest over its limit (relative)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(needed > allowed, needed / allowed, 0.0)
    i = int(np.argmax(ratio))
    raise TrajectoryRefused(
        f"too fast {where}: actuator {i} must {verb} {needed[i]:.3g} actuator {unit} "
        f"({when}); its {limit} limit is {allowed[i]:.3g}", "too_fast", t, k)


def _accel(times: FloatArray, qa: FloatArray) -> FloatArray:
    """Second divided differences ``2 (v_{j+½} − v_{j−½}) / (t_{j+1} − t_{j−1})`` at the
    interior samples (N−2, m)."""
    v = np.diff(qa, axis=0) / np.diff(times)[:, None]
    return 2 * np.diff(v, axis=0) / (times[2:] - times[:-2])[:, None]


__all__ = ["CHECK_MAX_ITER", "CHECK_STEP", "CHECK_TOL", "MIN_GAP", "SAME_TIME", "FeasiblePath",
           "TrajectoryRefused", "check_trajectory", "sample_times"]
