"""A trajectory's waypoints read and validated at the edge (:mod:`poise.motion.trajectory`).

Three JSON-like shapes and CSV text give times ``t_k`` [s] and points ``x_k`` [task units];
:func:`check_waypoints` is the one validation every trajectory passes. Every error is a
:class:`TrajectoryError` that names where it is: the JSON item (``points[3].x``, ``t[3]``,
``row [3]``) or the CSV line; :meth:`~poise.motion.trajectory.Trajectory.from_file` adds the
file.
"""

from __future__ import annotations

import csv
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from poise.models.base import FloatArray

#: At most this many waypoints.
MAX_WAYPOINTS = 10_000
#: The longest trajectory [s].
MAX_DURATION_S = 3600.0

#: Times, points and the name of waypoint k's item (``points[3]``, ``line 7``).
Parsed = tuple[list[float], list[list[float]], Callable[[int], str]]


class TrajectoryError(ValueError):
    """A trajectory that cannot be used as given; the message says what and where."""


def parse_payload(value: Any, task_dim: int) -> Parsed:
    """Waypoints from a JSON-like value (the shapes of
    :meth:`~poise.motion.trajectory.Trajectory.from_payload`), not yet
    :func:`checked <check_waypoints>`.

    Raises:
        TrajectoryError: another shape, a missing or unknown key, a value that is not a
            number, a point of the wrong dimension, more than :data:`MAX_WAYPOINTS` items.
    """
    if isinstance(value, dict) and "points" in value:
        _keys(value, {"points"}, "trajectory")
        times, points = [], []
        for k, item in enumerate(_items(value["points"], "points")):
            if not isinstance(item, dict):
                raise TrajectoryError(f'points[{k}]: expected {{"t": …, "x": …}}, got {item!r}')
            _keys(item, {"t", "x"}, f"points[{k}]")
            times.append(_number(item["t"], f"points[{k}].t"))
            points.append(_point(item["x"], task_dim, f"points[{k}].x"))
        return times, points, lambda k: f"points[{k}]"
    if isinstance(value, dict):
        _keys(value, {"t", "x"}, "trajectory")
        t_items, x_items = _items(value["t"], "t"), _items(value["x"], "x")
        if len(t_items) != len(x_items):
            raise TrajectoryError(f"{len(t_items)} times (t) but {len(x_items)} points (x)")
        times = [_number(v, f"t[{k}]") for k, v in enumerate(t_items)]
        points = [_point(v, task_dim, f"x[{k}]") for k, v in enumerate(x_items)]
        return times, points, lambda k: f"t[{k}]"
    if isinstance(value, list | tuple):
        times, points = [], []
        for k, row in enumerate(_items(value, "rows")):
            if not isinstance(row, list | tuple) or len(row) != task_dim + 1:
                raise TrajectoryError(f"row [{k}]: expected [t, x0 … x{task_dim - 1}] "
                                      f"({task_dim + 1} numbers), got {row!r}")
            times.append(_number(row[0], f"row [{k}] t"))
            points.append([_number(v, f"row [{k}] x{i}") for i, v in enumerate(row[1:])])
        return times, points, lambda k: f"row [{k}]"
    raise TrajectoryError('trajectory: expected {"points": [...]}, {"t": [...], "x": [...]} '
                          f"or a list of [t, x0, x1, …] rows, got {type(value).__name__}")


def parse_csv(text: str, task_dim: int) -> Parsed:
    """Waypoints from CSV text: rows ``t, x0, x1, …``; before the first, optionally one
    header row (no cell a number); blank lines and ``#`` comments (whole or trailing) are
    skipped.

    Raises:
        TrajectoryError: a row with the wrong number of columns or a cell that is not a
            number (the message names its line and column), more than :data:`MAX_WAYPOINTS`
            rows.
    """
    times: list[float] = []
    points: list[list[float]] = []
    lines: list[int] = []
    columns = task_dim + 1
    header_allowed = True
    for number, raw in enumerate(text.splitlines(), start=1):
        content = raw.split("#", 1)[0].strip()
        if not content:
            continue
        cells = [c.strip() for c in next(csv.reader([content]))]
        if len(cells) != columns:
            raise TrajectoryError(f"line {number}: {len(cells)} columns; expected {columns} "
                                  f"(t and {task_dim} task coordinate(s))")
        values = [_float(c) for c in cells]
        if header_allowed and all(v is None for v in values):
            header_allowed = False
            continue
        header_allowed = False
        bad = next((i for i, v in enumerate(values) if v is None), None)
        if bad is not None:
            raise TrajectoryError(f"line {number}, column {bad + 1}: {cells[bad]!r} is not "
                                  "a number")
        if len(times) >= MAX_WAYPOINTS:
            raise TrajectoryError(f"line {number}: more than {MAX_WAYPOINTS} waypoints")
        row = [v for v in values if v is not None]
        times.append(row[0])
        points.append(row[1:])
        lines.append(number)
    return times, points, lambda k: f"line {lines[k]}"


def check_waypoints(times: Sequence[float], points: FloatArray,
                    where: Callable[[int], str]) -> None:
    """Refuse waypoints no trajectory can have: fewer than 2 or more than
    :data:`MAX_WAYPOINTS`, a non-finite time or coordinate, times not strictly increasing,
    longer than :data:`MAX_DURATION_S`; ``points`` (K, task_dim), ``where(k)`` names
    waypoint k in the message.

    Raises:
        TrajectoryError: the first waypoint at fault.
    """
    if len(times) < 2:
        raise TrajectoryError(f"{len(times)} waypoint(s): a trajectory needs at least 2")
    if len(times) > MAX_WAYPOINTS:
        raise TrajectoryError(f"{len(times)} waypoints: at most {MAX_WAYPOINTS}")
    for k, t in enumerate(times):
        if not math.isfinite(t):
            raise TrajectoryError(f"{where(k)}: time {t} is not finite")
        bad = ~np.isfinite(points[k])
        if bad.any():
            i = int(np.argmax(bad))
            raise TrajectoryError(f"{where(k)}: x{i} = {points[k][i]} is not finite")
        if k and not t > times[k - 1]:
            raise TrajectoryError(f"{where(k)}: time {t:g} s is not after {where(k - 1)}'s "
                                  f"{times[k - 1]:g} s (times must increase strictly)")
    if times[-1] - times[0] > MAX_DURATION_S:
        raise TrajectoryError(f"{where(len(times) - 1)}: the trajectory lasts "
                              f"{times[-1] - times[0]:g} s; at most {MAX_DURATION_S:g} s")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TrajectoryError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _float(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _point(value: Any, task_dim: int, where: str) -> list[float]:
    if task_dim == 1 and not isinstance(value, list | tuple):
        return [_number(value, where)]
    if not isinstance(value, list | tuple):
        raise TrajectoryError(f"{where}: expected a list of {task_dim} numbers, got {value!r}")
    if len(value) != task_dim:
        raise TrajectoryError(f"{where}: expected {task_dim} numbers (the task dimension), "
                              f"got {len(value)}")
    return [_number(v, f"{where}[{i}]") for i, v in enumerate(value)]


def _items(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise TrajectoryError(f"{where}: expected a list, got {type(value).__name__}")
    if len(value) > MAX_WAYPOINTS:
        raise TrajectoryError(f"{where}: {len(value)} waypoints; at most {MAX_WAYPOINTS}")
    return list(value)


def _keys(value: dict[str, Any], allowed: set[str], where: str) -> None:
    missing = sorted(allowed - set(value))
    unknown = sorted(set(value) - allowed)
    if missing or unknown:
        detail = "; ".join(s for s in (missing and f"missing {missing}",
                                       unknown and f"unknown {unknown}") if s)
        raise TrajectoryError(f"{where}: expected the keys {sorted(allowed)}; {detail}")


__all__ = ["MAX_DURATION_S", "MAX_WAYPOINTS", "Parsed", "TrajectoryError", "check_waypoints",
           "parse_csv", "parse_payload"]
