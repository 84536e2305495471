"""A time-parametrised task-space trajectory: waypoints, the spline through them, its shaped
preview and the check that the arm can follow it, made before it starts.

A trajectory is waypoints ``(t_k, x_k)``, ``k = 0 … K−1``: ``t`` [s] from the trajectory's
start (the first waypoint's time is subtracted, so ``t_0 = 0``), ``x`` of the robot's task
dimension [task units, m for positions]. The loop runs it as a per-cycle reference: each cycle
it asks :meth:`Trajectory.at` for ``(x_d, ẋ_d)`` and aims its IK at ``x_d + ẋ_d / Γ`` (CLIK
feedforward).

* **Interpolation**: the C² cubic spline through the waypoints with zero velocity at both
  ends (``scipy.interpolate.CubicSpline``, ``bc_type="clamped"``): the arm starts and ends
  at rest. Before ``t = 0`` the reference is ``x_0``, after ``T = t_{K−1}`` it is ``x_{K−1}``,
  both at zero velocity.
* **Preview** (:class:`Previewed`): the whole future is known, so the reference can be input
  shaped (:mod:`poise.motion.shaping`) without its lag. With the shaper's impulses
  ``(A_i, t_i)`` and their centroid ``c = Σ A_i t_i``::

      x_ref(t) = Σ_i A_i · x(t + c − t_i)

  is the shaped version of the trajectory advanced by ``c``: it cancels the modes the shaper
  cancels, and ``x_ref(t) = x(t) + ½ Σ A_i (t_i − c)² ẍ(t) + …`` has no first-order lag.
  The price is that it leaves ``x_0`` at ``t = −c`` (:attr:`Previewed.start`), before the
  trajectory does.
* **Feasibility** (:func:`check_trajectory`, :mod:`poise.motion.trajectory_check`, exported
  here): the held configuration (Algorithm 1) along the path, and the actuator speeds and
  accelerations it needs, against the safety limits.

Loading is validated at the edge (:meth:`Trajectory.from_payload`, :meth:`Trajectory.from_file`):
every error is a :class:`TrajectoryError` that says what is wrong and where (the file, its line
or the JSON item).
"""

from __future__ import annotations

import bisect
import json
import pathlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from poise.models.base import FloatArray
from poise.motion.trajectory_check import (
    SAME_TIME,
    FeasiblePath,
    TrajectoryRefused,
    check_trajectory,
)
from poise.motion.waypoints import (
    MAX_DURATION_S,
    MAX_WAYPOINTS,
    TrajectoryError,
    check_waypoints,
    parse_csv,
    parse_payload,
)

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from poise.motion.shaping import Shaper

class _Cubics:
    """A piecewise cubic ``x(t) = Σ_p c[k, p] (t − b_k)^(3−p)`` on ``[b_k, b_{k+1})``,
    constant (at zero velocity) before ``b_0`` and after ``b_S``.

    Evaluated in plain Python and numpy: ``bisect`` on a list of the breakpoints and one dot
    product of the powers of ``t − b_k`` with the segment's coefficients for ``x`` and one for
    ``ẋ`` (a few µs; nested Horner costs three times as much in numpy's per-call overhead,
    ``CubicSpline.__call__`` four times).
    """

    def __init__(self, breaks: FloatArray, coef: FloatArray, first: FloatArray,
                 last: FloatArray) -> None:
        self.breaks: list[float] = [float(b) for b in breaks]  # (S + 1,) [s]
        self.coef = np.ascontiguousarray(coef, dtype=float)  # (S, 4, d)
        self._dcoef = np.ascontiguousarray(self.coef[:, :3] * np.array([[3.0], [2.0], [1.0]]))
        self._first = np.array(first, dtype=float)  # the value before b_0 and after b_S
        self._last = np.array(last, dtype=float)
        self._rest = np.zeros_like(self._first)

    def at(self, t: float) -> tuple[FloatArray, FloatArray]:
        k = bisect.bisect_right(self.breaks, t) - 1
        if k < 0:
            return self._first.copy(), self._rest.copy()
        if k >= len(self.coef):
            return self._last.copy(), self._rest.copy()
        s = t - self.breaks[k]
        s2 = s * s
        return np.dot((s2 * s, s2, s, 1.0), self.coef[k]), np.dot((s2, s, 1.0), self._dcoef[k])


class Trajectory:
    """Waypoints and the clamped cubic spline through them (see the module docstring).

    Args:
        times: ``t_k`` (K,) [s], strictly increasing; shifted so that the first is 0.
        points: ``x_k`` (K, task_dim) [task units].

    Raises:
        TrajectoryError: fewer than 2 or more than :data:`MAX_WAYPOINTS` waypoints, times
            not strictly increasing, longer than :data:`MAX_DURATION_S`, a non-finite value.
    """

    def __init__(self, times: ArrayLike, points: ArrayLike) -> None:
        t = np.array(times, dtype=float).reshape(-1)
        x = np.array(points, dtype=float)  # a copy: made read-only below
        if x.ndim == 1:
            x = x.reshape(-1, 1)
        if x.ndim != 2 or x.shape[0] != t.size:
            raise TrajectoryError(f"waypoints: {t.size} times but points of shape {x.shape}: "
                                  "expected one point (task_dim values) per time")
        check_waypoints(t.tolist(), x, lambda k: f"waypoint {k}")
        self._times = t - t[0]
        self._points = x
        self._times.flags.writeable = False
        self._points.flags.writeable = False
        from scipy.interpolate import CubicSpline  # a second to import: not at module import

        spline = CubicSpline(self._times, x, bc_type="clamped", axis=0)
        self._cubics = _Cubics(self._times, np.transpose(spline.c, (1, 0, 2)), x[0], x[-1])

    @classmethod
    def from_payload(cls, value: Any, task_dim: int) -> Trajectory:
        """A trajectory from a JSON-like value, one of::

            {"points": [{"t": 0.0, "x": [0.1, -0.9]}, ...]}
            {"t": [0.0, ...], "x": [[0.1, -0.9], ...]}
            [[0.0, 0.1, -0.9], ...]                      # rows [t, x0, x1, ...]

        ``x`` may be a bare number when ``task_dim`` is 1.

        Raises:
            TrajectoryError: any other shape, or waypoints :class:`Trajectory` refuses; the
                message names the item (``points[3].x``).
        """
        times, points, where = parse_payload(value, task_dim)
        return cls._checked(times, points, where)

    @classmethod
    def from_file(cls, path: str | pathlib.Path, task_dim: int) -> Trajectory:
        """A trajectory from a ``.json`` file (the shapes of :meth:`from_payload`) or a
        ``.csv`` file: rows ``t, x0, x1, …``, an optional header row, ``#`` comments.

        Raises:
            TrajectoryError: an unreadable file, an unknown suffix or content
                :meth:`from_payload` refuses; the message names the file and the line (CSV)
                or the item (JSON).
        """
        path = pathlib.Path(path)
        suffix = path.suffix.lower()
        if suffix not in (".json", ".csv"):
            raise TrajectoryError(f"{path}: unknown trajectory format {suffix!r} "
                                  "(.json or .csv)")
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise TrajectoryError(f"{path}: cannot read the trajectory ({exc})") from None
        try:
            if suffix == ".csv":
                times, points, where = parse_csv(text, task_dim)
            else:
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise TrajectoryError(f"line {exc.lineno}, column {exc.colno}: not JSON "
                                          f"({exc.msg})") from None
                times, points, where = parse_payload(value, task_dim)
            return cls._checked(times, points, where)
        except TrajectoryError as exc:
            raise TrajectoryError(f"{path}: {exc}") from None

    @classmethod
    def _checked(cls, times: list[float], points: list[list[float]],
                 where: Callable[[int], str]) -> Trajectory:
        check_waypoints(times, np.array(points, dtype=float), where)
        return cls(times, points)

    @property
    def duration(self) -> float:
        """``T = t_{K−1}`` [s]: when the trajectory arrives at its last waypoint, at rest."""
        return float(self._times[-1])

    @property
    def start(self) -> float:
        """When the reference leaves ``x_0`` [s]: 0."""
        return 0.0

    @property
    def task_dim(self) -> int:
        return int(self._points.shape[1])

    @property
    def waypoints(self) -> tuple[FloatArray, FloatArray]:
        """``(t, x)``: the times (K,) [s, from 0] and points (K, task_dim) (read-only)."""
        return self._times, self._points

    def at(self, t: float) -> tuple[FloatArray, FloatArray]:
        """``(x, ẋ)`` at ``t`` [s from the start]: (task_dim,) [task units] and [task
        units/s]; ``(x_0, 0)`` before the start and ``(x_{K−1}, 0)`` after the end."""
        return self._cubics.at(t)


#: Spacing of the samples the compensated trajectory is splined through [s]
#: (:func:`_compensated`).
COMPENSATION_STEP_S = 0.02


def _compensated(trajectory: Trajectory, spread: float, span: float) -> Trajectory:
    """``x − κ w(t) ẍ_W(t)`` splined through samples every :data:`COMPENSATION_STEP_S` and
    at the waypoints: shaped, it is ``x`` to fourth order at low frequencies, so that the
    shaper's second-order term ``κ ẍ`` takes nothing off a slow sine's amplitude (``κ ω²``:
    3.5 % at 0.1 Hz for a ZVD shaper of a 0.83 Hz mode).

    ``ẍ_W`` is the acceleration averaged over ``W = span`` (the shaper's length), the
    difference of the spline's velocities ``W/2`` either side over ``W``: the compensation is
    wanted where the shaper attenuates little (far below the mode), and the spline's own
    ``ẍ`` has a corner at every waypoint (its jerk is piecewise constant) that would become
    a kink of the reference, an acceleration spike. ``w`` rises from 0 to 1 over ``2 W`` at
    the start and falls back over the end, with zero slope at both ends (smoothstep), so
    that it still starts and ends at rest at ``x_0`` and ``x_{K−1}``."""
    times, _ = trajectory.waypoints
    end = float(times[-1])
    step = max(COMPENSATION_STEP_S, end / (MAX_WAYPOINTS // 2))
    grid = np.union1d(times, np.arange(0.0, end, step))
    grid = grid[np.concatenate([[True], np.diff(grid) > 1e-6])]
    grid[-1] = end
    if grid.size > MAX_WAYPOINTS:  # waypoints closer than the step already: theirs
        grid = np.asarray(times, dtype=float)
    half = 0.5 * span
    u = np.clip(np.minimum(grid, end - grid) / (4.0 * half), 0.0, 1.0)
    w = u * u * (3.0 - 2.0 * u)
    x = np.array([trajectory.at(float(t))[0] for t in grid])
    accel = np.array([trajectory.at(float(t) + half)[1] - trajectory.at(float(t) - half)[1]
                      for t in grid]) / span
    return Trajectory(grid, x - spread * w[:, None] * accel)


class Previewed:
    """The trajectory shaped on the robot's structural modes without lag (module docstring):
    ``x_ref(t) = Σ_i A_i · x(t + c − t_i)``, ``c = Σ_i A_i t_i``.

    ``t`` is the trajectory's time: the reference leaves ``x_0`` at :attr:`start` ``= −c``
    and reaches ``x_{K−1}`` at :attr:`duration`, at rest at both. A loop that starts it at
    ``t = 0`` instead steps by ``x_ref(0) − x_0`` (small, since the spline starts at rest,
    but a step the shaper does not cancel).

    ``x_ref`` is again a piecewise cubic (on the union of the waypoint times shifted by each
    ``t_i − c``), built here once: :meth:`at` costs what :meth:`Trajectory.at` does.

    Args:
        trajectory: what to follow.
        shaper: the input shaper (:func:`~poise.motion.shaping.shaper_for` of the loop's
            structural modes; amplitudes positive, summing to 1).
    """

    def __init__(self, trajectory: Trajectory, shaper: Shaper, *,
                 compensate: bool = True) -> None:
        self.trajectory = trajectory
        self.shaper = shaper
        amps = np.asarray(shaper.amplitudes, dtype=float)
        shifts = np.asarray(shaper.times, dtype=float)
        centroid = float(amps @ shifts)
        shifts = shifts - centroid  # x_ref(t) = Σ A_i x(t − shifts_i)
        #: ``c``: how long before the trajectory's start the reference leaves ``x_0`` [s].
        self.lead = centroid
        #: ``κ = ½ Σ A_i (t_i − c)²`` [s²]: the shaped sum is ``x + κ ẍ + …``.
        self.spread = 0.5 * float(amps @ shifts**2)
        span = float(shaper.times[-1] - shaper.times[0])
        shaped = _compensated(trajectory, self.spread, span) \
            if compensate and span > 0 else trajectory
        times, points = shaped.waypoints
        spline = shaped._cubics.coef  # (K−1, 4, d)
        breaks = np.unique(np.concatenate([times + s for s in shifts]))
        breaks = breaks[np.concatenate([[True], np.diff(breaks) > SAME_TIME])]
        left, mid = breaks[:-1], 0.5 * (breaks[:-1] + breaks[1:])
        coef = np.zeros((left.size, 4, points.shape[1]))
        for a, s in zip(amps, shifts, strict=True):
            tau = mid - s  # the trajectory's time of each piece, for this impulse
            k = np.clip(np.searchsorted(times, tau, side="right") - 1, 0, len(times) - 2)
            sigma = (left - s - times[k])[:, None]  # t − b_j = u ↦ τ − t_k = u + σ
            c3, c2, c1, c0 = (spline[k, p] for p in range(4))
            piece = np.stack([c3, c2 + 3 * c3 * sigma,
                              c1 + (2 * c2 + 3 * c3 * sigma) * sigma,
                              c0 + (c1 + (c2 + c3 * sigma) * sigma) * sigma], axis=1)
            before, after = tau < times[0], tau > times[-1]
            piece[before | after, :3] = 0.0
            piece[before, 3] = points[0]
            piece[after, 3] = points[-1]
            coef += a * piece
        self._cubics = _Cubics(breaks, coef, points[0], points[-1])

    @property
    def start(self) -> float:
        """When the reference leaves ``x_0`` [s, trajectory time]: ``−c`` (≤ 0)."""
        return -self.lead

    @property
    def duration(self) -> float:
        """When the reference arrives at ``x_{K−1}``, at rest [s, trajectory time]: ``T`` plus
        the shaper's tail after its centroid, ``t_last − c``."""
        return self.trajectory.duration + self.shaper.times[-1] - self.lead

    @property
    def waypoints(self) -> tuple[FloatArray, FloatArray]:
        """The trajectory's waypoints (:attr:`Trajectory.waypoints`)."""
        return self.trajectory.waypoints

    def at(self, t: float) -> tuple[FloatArray, FloatArray]:
        """``(x_ref, ẋ_ref)`` at ``t`` [s, trajectory time], as :meth:`Trajectory.at`."""
        return self._cubics.at(t)


__all__ = ["MAX_DURATION_S", "MAX_WAYPOINTS", "FeasiblePath", "Previewed", "Trajectory",
           "TrajectoryError", "TrajectoryRefused", "check_trajectory"]
