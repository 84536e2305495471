"""Time-parametrised task-space trajectories (``poise.motion.trajectory``): waypoints load
from every accepted shape and are refused with errors that say where; the spline is SciPy's
clamped cubic spline and its velocity is its derivative; the shaped preview cancels its
shaper's mode without lagging."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp
from scipy.interpolate import CubicSpline

from poise.motion.shaping import Shaper
from poise.motion.stability import Mode
from poise.motion.trajectory import (
    MAX_WAYPOINTS,
    Previewed,
    Trajectory,
    TrajectoryError,
)

# --- loading -------------------------------------------------------------------------------

TIMES = [5.0, 5.5, 7.0]  # the first is subtracted
POINTS = [[0.1, -0.9], [0.12, -0.88], [0.1, -0.85]]


@pytest.mark.parametrize("payload", [
    {"points": [{"t": t, "x": x} for t, x in zip(TIMES, POINTS, strict=True)]},
    {"t": TIMES, "x": POINTS},
    [[t, *x] for t, x in zip(TIMES, POINTS, strict=True)],
], ids=["points", "t-and-x", "rows"])
def test_every_payload_shape_gives_the_same_waypoints_from_time_zero(payload):
    times, points = Trajectory.from_payload(payload, 2).waypoints
    assert times.tolist() == [0.0, 0.5, 2.0]
    assert points.tolist() == POINTS
    assert not times.flags.writeable and not points.flags.writeable


def test_a_one_dimensional_task_may_give_bare_numbers():
    for payload in ({"points": [{"t": 0, "x": 0.0}, {"t": 1, "x": 0.5}]},
                    {"t": [0, 1], "x": [0.0, [0.5]]}):
        trajectory = Trajectory.from_payload(payload, 1)
        assert trajectory.waypoints[1].tolist() == [[0.0], [0.5]]
        assert trajectory.task_dim == 1


def test_csv_and_json_files_load_with_or_without_a_header_and_with_comments(tmp_path):
    rows = "\n".join(f"{t}, {x[0]}, {x[1]}" for t, x in zip(TIMES, POINTS, strict=True))
    files = {
        "plain.csv": rows,
        "header.csv": "# a lift\n\nt, x0, x1\n" + rows.replace("5.5,", "5.5,  ") + "  # end\n",
        "quoted.csv": '"t","x","y"\n' + rows,
        "points.json": json.dumps({"points": [{"t": t, "x": x}
                                              for t, x in zip(TIMES, POINTS, strict=True)]}),
        "rows.json": json.dumps([[t, *x] for t, x in zip(TIMES, POINTS, strict=True)]),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        times, points = Trajectory.from_file(tmp_path / name, 2).waypoints
        assert times.tolist() == [0.0, 0.5, 2.0], name
        assert points.tolist() == POINTS, name


ROWS = [[0, 0.0, 0.0], [1, 0.1, 0.0], [2, 0.2, 0.0]]


@pytest.mark.parametrize(("payload", "task_dim", "message"), [
    ({"points": [{"t": 0, "x": [0, 0]}, {"t": 1, "x": [0]}]}, 2,
     "points[1].x: expected 2 numbers (the task dimension), got 1"),
    ({"points": [{"t": 0, "x": [0, 0]}, {"t": "1", "x": [0, 0]}]}, 2,
     "points[1].t: expected a number, got '1'"),
    ({"points": [{"t": 0, "x": [0, 0]}, {"t": True, "x": [0, 0]}]}, 2,
     "points[1].t: expected a number, got True"),
    ({"points": [{"t": 0, "x": [0, 0]}, {"time": 1, "x": [0, 0]}]}, 2,
     "points[1]: expected the keys ['t', 'x']; missing ['t']; unknown ['time']"),
    ({"points": [{"t": 0, "x": [0, None]}, {"t": 1, "x": [0, 0]}]}, 2,
     "points[0].x[1]: expected a number, got None"),
    ({"t": [0, 1], "x": [[0, 0]]}, 2, "2 times (t) but 1 points (x)"),
    ({"t": [0, 1], "x": [[0, 0], [1, 1]], "v": [0, 0]}, 2, "unknown ['v']"),
    ({"t": [0, 1], "x": [0, 1]}, 2, "x[0]: expected a list of 2 numbers, got 0"),
    ([[0, 0, 0], [1, 0]], 2, "row [1]: expected [t, x0 … x1] (3 numbers), got [1, 0]"),
    ([*ROWS[:2], [1, 0.3, 0]], 2,
     "row [2]: time 1 s is not after row [1]'s 1 s (times must increase strictly)"),
    ([*ROWS[:2], [2, math.nan, 0]], 2, "row [2]: x0 = nan is not finite"),
    ([[0, 0, 0], [math.inf, 0, 0]], 2, "row [1]: time inf is not finite"),
    ([[10, 0, 0], [3611, 0, 0]], 2, "row [1]: the trajectory lasts 3601 s; at most 3600 s"),
    (ROWS[:1], 2, "1 waypoint(s): a trajectory needs at least 2"),
    ([[k, 0, 0] for k in range(MAX_WAYPOINTS + 1)], 2, "10001 waypoints; at most 10000"),
    ("lift.csv", 2, "trajectory: expected {\"points\": [...]}"),
    ({"points": "lift"}, 2, "points: expected a list, got str"),
])
def test_payload_errors_say_what_and_where(payload, task_dim, message):
    with pytest.raises(TrajectoryError) as refused:
        Trajectory.from_payload(payload, task_dim)
    assert message in str(refused.value)


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.csv", "t,x0,x1\n0,0,0\n# a comment\n1,0.1,zero\n", "line 4, column 3: 'zero' is not"),
    ("short.csv", "0,0,0\n1,0.1\n", "line 2: 2 columns; expected 3 (t and 2 task"),
    ("order.csv", "0,0,0\n\n2,0.1,0\n1,0.2,0\n",
     "line 4: time 1 s is not after line 3's 2 s"),
    ("header.csv", "0,0,0\nt,x0,x1\n1,0,0\n", "line 2, column 1: 't' is not a number"),
    ("nan.csv", "0,0,0\n1,nan,0\n", "line 2: x0 = nan is not finite"),
    ("one.csv", "t,x0,x1\n0,0,0\n", "1 waypoint(s)"),
    ("broken.json", '{"points": [\n  {"t": 0, "x": [0, 0]},\n]}', "line 3, column 1: not JSON"),
    ("dim.json", '{"points": [{"t": 0, "x": [0, 0]}, {"t": 1, "x": [0, 0, 0]}]}',
     "points[1].x: expected 2 numbers"),
    ("lift.txt", "0,0,0\n1,0,0\n", "unknown trajectory format '.txt' (.json or .csv)"),
])
def test_file_errors_name_the_file_and_the_line_or_item(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TrajectoryError) as refused:
        Trajectory.from_file(path, 2)
    assert str(refused.value).startswith(f"{path}: ")
    assert message in str(refused.value)


def test_a_missing_file_is_a_trajectory_error_naming_it(tmp_path):
    with pytest.raises(TrajectoryError, match="cannot read the trajectory"):
        Trajectory.from_file(tmp_path / "none.csv", 2)


# --- the spline ----------------------------------------------------------------------------

waypoint_sets = st.integers(2, 12).flatmap(lambda k: st.tuples(
    st.lists(st.floats(0.05, 3.0), min_size=k - 1, max_size=k - 1),
    st.lists(st.lists(st.floats(-2.0, 2.0), min_size=2, max_size=2), min_size=k,
             max_size=k)))


def _build(gaps_points):
    gaps, points = gaps_points
    times = np.concatenate([[0.0], np.cumsum(gaps)])
    return Trajectory(times, points), times, np.array(points)


@settings(max_examples=60, deadline=None)
@given(waypoint_sets, st.lists(st.floats(0.0, 1.0), min_size=20, max_size=20))
def test_the_spline_is_scipys_clamped_cubic_spline_through_the_waypoints(gaps_points, where):
    trajectory, times, points = _build(gaps_points)
    reference = CubicSpline(times, points, bc_type="clamped", axis=0)
    scale = 1.0 + float(np.abs(reference.c).max()) * max(1.0, times[-1]) ** 3
    for t in [*times, *(np.array(where) * times[-1])]:
        x, v = trajectory.at(float(t))
        assert np.abs(x - reference(t)).max() <= 1e-12 * scale
        assert np.abs(v - reference(t, 1)).max() <= 1e-12 * scale
    for t, point in zip(times, points, strict=True):  # through every waypoint
        assert np.abs(trajectory.at(float(t))[0] - point).max() <= 1e-12 * scale


@settings(max_examples=60, deadline=None)
@given(waypoint_sets, st.lists(st.floats(0.01, 0.99), min_size=10, max_size=10))
def test_the_velocity_is_the_derivative_of_the_position(gaps_points, where):
    trajectory, times, _ = _build(gaps_points)
    reference = CubicSpline(times, _build(gaps_points)[2], bc_type="clamped", axis=0)
    jerk = float(np.abs(6 * reference.c[0]).max())  # |x'''| on every piece
    h = 1e-5
    for t in np.array(where) * times[-1]:
        if np.min(np.abs(times - t)) < 2 * h:
            continue  # x''' jumps at a waypoint: the central difference's bound needs one piece
        fd = (trajectory.at(t + h)[0] - trajectory.at(t - h)[0]) / (2 * h)
        # central difference: truncation h²/6 |x'''|, rounding ~ 1e-16 |x| / h
        bound = h * h / 6 * jerk + 1e-10 * (1 + np.abs(trajectory.at(t)[0]).max())
        assert np.abs(fd - trajectory.at(t)[1]).max() <= 2 * bound + 1e-12


def test_the_spline_starts_and_ends_at_rest_and_holds_its_ends_outside():
    trajectory = Trajectory.from_payload({"t": TIMES, "x": POINTS}, 2)
    end = trajectory.duration
    assert end == 2.0
    for t, point in ((-1.0, POINTS[0]), (0.0, POINTS[0]), (end, POINTS[-1]),
                     (end + 5.0, POINTS[-1])):
        x, v = trajectory.at(t)
        assert np.abs(x - point).max() < 1e-15
        assert np.abs(v).max() < 1e-12


# --- the preview ---------------------------------------------------------------------------

MODE = Mode(2 * math.pi, 0.05)  # 1 Hz, lightly damped


def _direct(trajectory, shaper, t):
    """``Σ A_i (x, ẋ)(t + c − t_i)`` evaluated from the trajectory itself."""
    c = float(np.dot(shaper.amplitudes, shaper.times))
    parts = [(a, trajectory.at(t + c - ti))
             for a, ti in zip(shaper.amplitudes, shaper.times, strict=True)]
    return sum(a * xv[0] for a, xv in parts), sum(a * xv[1] for a, xv in parts)


@settings(max_examples=30, deadline=None)
@given(waypoint_sets, st.sampled_from(["zv", "zvd", "zvdd", "two"]))
def test_the_preview_is_the_shaped_sum_of_the_advanced_trajectory(gaps_points, kind):
    trajectory, times, points = _build(gaps_points)
    shaper = (Shaper.zv(MODE).then(Shaper.zvd(Mode(9.0, 0.1))) if kind == "two"
              else getattr(Shaper, kind)(MODE))
    preview = Previewed(trajectory, shaper)
    c = float(np.dot(shaper.amplitudes, shaper.times))
    assert preview.start == pytest.approx(-c)
    assert preview.duration == pytest.approx(times[-1] + shaper.times[-1] - c)
    scale = 1.0 + float(np.abs(points).max())
    for t in np.linspace(preview.start - 0.5, preview.duration + 0.5, 157):
        x, v = preview.at(float(t))
        xd, vd = _direct(trajectory, shaper, float(t))
        assert np.abs(x - xd).max() <= 1e-9 * scale
        assert np.abs(v - vd).max() <= 1e-9 * scale / min(1.0, float(np.min(np.diff(times))))
    # at rest at x_0 when it leaves, at x_{K−1} when it arrives
    for t, point in ((preview.start, points[0]), (preview.duration, points[-1])):
        x, v = preview.at(t)
        assert np.abs(x - point).max() <= 1e-12 * scale and np.abs(v).max() <= 1e-9 * scale


def _residual_vibration(reference, end: float, mode: Mode) -> float:
    """The amplitude left ringing in ``y'' + 2ζω y' + ω² y = ω² x_ref`` when the reference
    ``(start, at)`` has come to rest at ``end`` (from rest at its start): the free oscillation's
    envelope ``√(e² + ((ė + ζω e) / ω_d)²)``, ``e = y − x_ref(end)``."""
    w, z, wd = mode.omega, mode.zeta, mode.damped_omega

    def rhs(t, s):
        return [s[1], w * w * (reference.at(t)[0][0] - s[0]) - 2 * z * w * s[1]]

    y0 = reference.at(reference.start)[0][0]
    sol = solve_ivp(rhs, (reference.start, end), [y0, 0.0], rtol=1e-11, atol=1e-13,
                    max_step=0.002)
    e = sol.y[0, -1] - reference.at(end)[0][0]
    return math.hypot(e, (sol.y[1, -1] + z * w * e) / wd)


@pytest.mark.parametrize("kind", ["zv", "zvd"])
def test_the_preview_of_a_fast_move_leaves_its_mode_still(kind):
    # a 0.1 s move of 1 task unit: a step for a 1 s mode
    trajectory = Trajectory([0.0, 0.1], [[0.0], [1.0]])
    preview = Previewed(trajectory, getattr(Shaper, kind)(MODE))
    unshaped = _residual_vibration(trajectory, trajectory.duration, MODE)
    shaped = _residual_vibration(preview, preview.duration, MODE)
    assert unshaped > 0.5  # the bare move rings with most of its size
    assert shaped < 1e-6 * unshaped  # zero vibration, to the integrator's accuracy


def test_the_preview_of_a_slow_sine_does_not_lag():
    times = np.arange(0.0, 20.01, 0.1)
    trajectory = Trajectory(times, np.sin(2 * math.pi * times / 10)[:, None])  # 0.1 Hz
    shaper = Shaper.zv(Mode(4 * math.pi, 0.05))  # 2 Hz: impulses 0.25 s apart
    preview = Previewed(trajectory, shaper)
    c = preview.lead
    inner = np.linspace(2.0, 18.0, 400)
    x = np.array([trajectory.at(t)[0][0] for t in inner])
    previewed = np.array([preview.at(t)[0][0] for t in inner])
    lagging = np.array([preview.at(t - c)[0][0] for t in inner])  # the shaper applied causally
    # x_ref − x = ½ Σ A_i (t_i − c)² ẍ + …: the impulses' variance times the acceleration
    spread = float(np.dot(shaper.amplitudes, (np.array(shaper.times) - c) ** 2))
    second_order = 0.5 * spread * (2 * math.pi / 10) ** 2
    assert np.abs(previewed - x).max() <= 1.1 * second_order
    assert np.abs(previewed - x).max() < 0.005  # of a unit sine
    assert np.abs(lagging - x).max() > 10 * np.abs(previewed - x).max()
