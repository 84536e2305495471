"""Time-parametrised task-space trajectories (``poise.motion.trajectory``): waypoints load
from every accepted shape and are refused with errors that say where; the spline is SciPy's
clamped cubic spline and its velocity is its derivative; the shaped preview cancels its
shaper's mode without lagging; the check before a trajectory starts accepts what the arm can
follow and names the first waypoint at fault in what it cannot."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp
from scipy.interpolate import CubicSpline

from poise.controller.config import build_model, load_config
from poise.examples import resolve_config
from poise.ik.held_common import held_jacobian
from poise.ik.statics import solve_statics
from poise.models.actuation import blocks, split
from poise.motion.planner import plan_target
from poise.motion.safety import SafetyLimits
from poise.motion.shaping import Shaper
from poise.motion.stability import Mode
from poise.motion.trajectory import (
    MAX_WAYPOINTS,
    Previewed,
    Trajectory,
    TrajectoryError,
    TrajectoryRefused,
    check_trajectory,
)
from poise.motion.trajectory_check import CHECK_STEP, MIN_GAP, sample_times

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
    preview = Previewed(trajectory, shaper, compensate=False)
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


def test_the_compensated_preview_keeps_a_slow_sines_amplitude_and_still_rests_at_its_ends():
    # a ZVD shaper of a 0.83 Hz mode (the soft arm's) takes κω² = 3.5 % off a 0.1 Hz sine;
    # shaping x − κ ẍ instead leaves κ²ω⁴ (0.1 %), and the reference still leaves x_0 and
    # reaches x_{K−1} at rest
    times = np.arange(0.0, 40.01, 0.02)
    trajectory = Trajectory(times, np.sin(2 * math.pi * times / 10)[:, None])
    mode = Mode(2 * math.pi * 0.83, 0.09)
    shaper = Shaper.zvd(mode)
    plain = Previewed(trajectory, shaper, compensate=False)
    preview = Previewed(trajectory, shaper)
    loss = preview.spread * (2 * math.pi / 10) ** 2
    assert 0.03 < loss < 0.04
    inner = np.linspace(10.0, 30.0, 500)
    x = np.array([trajectory.at(t)[0][0] for t in inner])
    err_plain = np.abs(np.array([plain.at(t)[0][0] for t in inner]) - x).max()
    err = np.abs(np.array([preview.at(t)[0][0] for t in inner]) - x).max()
    assert err_plain == pytest.approx(loss, rel=0.1)
    assert err <= 2 * loss**2 + 1e-4
    for t, point in ((preview.start, 0.0), (preview.duration, float(np.sin(8 * math.pi)))):
        xv, v = preview.at(t)
        assert xv[0] == pytest.approx(point, abs=1e-9) and abs(v[0]) < 1e-9
    # shaped, x − κ ẍ still leaves the mode still: no more ringing than the plain preview
    # leaves (both ~0: the shaper cancels the mode for any input)
    ringing = _residual_vibration(preview, preview.duration + 2, mode)
    assert ringing <= max(1e-6, 2 * _residual_vibration(plain, plain.duration + 2, mode))


def test_the_preview_of_a_slow_sine_does_not_lag():
    times = np.arange(0.0, 20.01, 0.1)
    trajectory = Trajectory(times, np.sin(2 * math.pi * times / 10)[:, None])  # 0.1 Hz
    shaper = Shaper.zv(Mode(4 * math.pi, 0.05))  # 2 Hz: impulses 0.25 s apart
    preview = Previewed(trajectory, shaper, compensate=False)
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


# --- the check before a trajectory starts --------------------------------------------------


@pytest.fixture(scope="module")
def robots():
    """``name -> (model, limits, rest q, period [s], tolerance)`` as the examples configure
    them."""
    out = {}
    for name in ("double_pendulum", "soft_arm_stiff", "dancer"):
        cfg = load_config(resolve_config(name))
        model = build_model(cfg.model).model
        limits = SafetyLimits.build(model.m, model.qa_min, model.qa_max, cfg.limits.qa_min,
                                    cfg.limits.qa_max, cfg.limits.qa_rate)
        rest = solve_statics(model, np.zeros(model.m), split(model, np.zeros(model.n))[1]).q
        out[name] = (model, limits, rest, 1.0 / cfg.loop.rate, cfg.algorithm.tolerance)
    return out


def circle(centre, radius, period, turns=2.0, every=0.25):
    """A circle of ``radius`` [m] about ``centre``, ``period`` [s] a turn, from its rightmost
    point; waypoints ``every`` [s]."""
    times = np.arange(0.0, turns * period + 1e-9, every)
    angle = 2 * math.pi * times / period
    return Trajectory(times, np.asarray(centre) + radius * np.stack(
        [np.cos(angle), np.sin(angle)], axis=1))


SOFT_CIRCLE = ((0.2, -0.9), 0.05, 10.0)  # about the example's target: 20 s, 2 turns


def test_a_slow_circle_of_the_soft_arm_is_accepted_on_held_configurations(robots):
    model, limits, rest, period, tol = robots["soft_arm_stiff"]
    trajectory = circle(*SOFT_CIRCLE)
    path = check_trajectory(trajectory, model, limits, period=period, tolerance=tol,
                            q_start=rest)
    gaps = np.diff(path.times)
    assert path.times[0] == 0.0 and path.times[-1] == trajectory.duration
    assert gaps.min() >= MIN_GAP * CHECK_STEP - 1e-9 and gaps.max() <= CHECK_STEP + 1e-9
    assert set(trajectory.waypoints[0].tolist()) <= set(path.times.tolist())
    for t, x, q, qa in zip(path.times, path.x, path.q, path.qa, strict=True):
        assert np.array_equal(x, trajectory.at(t)[0])
        assert np.linalg.norm(model.fk(q) - x) <= tol  # on the path, held
        b = blocks(model, q)
        assert np.linalg.norm(b.Gu) < 1e-6 and np.linalg.eigvalsh(b.Huu).min() > 0
        assert np.abs(qa - blocks(model, q).qa).max() <= 1e-12
        assert np.all(qa >= limits.qa_min) and np.all(qa <= limits.qa_max)
    assert np.all(path.peak_rate <= limits.qa_rate)
    assert np.all(path.peak_accel <= limits.accel)
    # the finite-difference speeds are the path's: q̇a = J⁻¹ ẋ (J the held Jacobian, square)
    for j in range(1, len(path.times) - 1, 37):
        t = path.times[j]
        fd = (path.qa[j + 1] - path.qa[j - 1]) / (path.times[j + 1] - path.times[j - 1])
        exact = np.linalg.solve(held_jacobian(blocks(model, path.q[j])), trajectory.at(t)[1])
        assert np.abs(fd - exact).max() <= 0.02 * np.abs(exact).max() + 1e-5


def test_a_slow_sine_of_the_double_pendulum_is_accepted(robots):
    model, limits, rest, period, tol = robots["double_pendulum"]
    times = np.arange(0.0, 20.01, 0.5)
    trajectory = Trajectory(times, 0.3 * np.sin(2 * math.pi * times / 10)[:, None])
    path = check_trajectory(trajectory, model, limits, period=period, tolerance=tol,
                            q_start=rest)
    assert np.abs(np.array([model.fk(q) for q in path.q]) - path.x).max() <= tol
    assert 0 < path.peak_rate[0] <= limits.qa_rate[0]


@pytest.mark.parametrize(("name", "start", "far"), [
    ("double_pendulum", [0.0], [2.5]),  # its tip reaches 1.96 m
    ("soft_arm_stiff", [0.2, -0.9], [0.8, -0.3]),  # its tendons reach (0.71, −0.22) at most
])
def test_an_unreachable_waypoint_is_refused_naming_the_segment_that_leads_to_it(
        robots, name, start, far):
    model, limits, rest, period, tol = robots[name]
    near = np.array(start) + 0.05
    trajectory = Trajectory([0, 4, 8, 12], [start, near, far, near])
    with pytest.raises(TrajectoryRefused) as refused:
        check_trajectory(trajectory, model, limits, period=period, tolerance=tol, q_start=rest)
    fault = refused.value
    assert fault.reason == "unreachable" and fault.waypoint == 1 and 4 < fault.t < 8
    assert str(fault).startswith("unreachable between waypoint 1 (t = 4 s) and waypoint 2 "
                                 "(t = 8 s): x = ")
    # the waypoint named is out of reach from anywhere (the planner's starts)
    assert not plan_target(model, np.array(far), [rest], tol).reachable


def test_a_configuration_outside_the_configured_actuator_limits_is_unreachable(robots):
    model, limits, rest, period, tol = robots["soft_arm_stiff"]
    narrow = replace(limits, qa_max=np.array([0.04, 0.02]))  # the circle needs 0.038
    with pytest.raises(TrajectoryRefused) as refused:
        check_trajectory(circle(*SOFT_CIRCLE), model, narrow, period=period, tolerance=tol,
                         q_start=rest)
    assert refused.value.reason == "unreachable"
    assert "at waypoint 0 (t = 0 s)" in str(refused.value)
    assert "actuator 1 would be at 0.023" in str(refused.value)
    assert str(refused.value).endswith("outside [-0.04, 0.02])")


def test_an_unreachable_first_waypoint_is_named_itself(robots):
    model, limits, rest, period, tol = robots["soft_arm_stiff"]
    trajectory = Trajectory([0, 4], [[0.8, -0.3], model.fk(rest)])
    with pytest.raises(TrajectoryRefused, match=r"^unreachable at waypoint 0 \(t = 0 s\): "
                       r"x = \[0.8, -0.3\] \(t = 0.000 s\) is out of reach within the "
                       r"actuator limits, from q_start \(task error 0.07"):
        check_trajectory(trajectory, model, limits, period=period, tolerance=tol, q_start=rest)


def _first_over(values, limit):
    return int(np.flatnonzero((values > limit).any(axis=1))[0])


def test_a_path_too_fast_for_the_rate_or_acceleration_limit_is_refused_where_it_first_is(
        robots):
    model, limits, rest, period, tol = robots["soft_arm_stiff"]
    trajectory = circle(*SOFT_CIRCLE)
    free = replace(limits, qa_rate=np.full(2, np.inf), qa_accel=np.full(2, np.inf))
    path = check_trajectory(trajectory, model, free, period=period, tolerance=tol,
                            q_start=rest)
    rate = np.abs(np.diff(path.qa, axis=0)) / np.diff(path.times)[:, None]
    v = np.diff(path.qa, axis=0) / np.diff(path.times)[:, None]
    accel = np.abs(2 * np.diff(v, axis=0) / (path.times[2:] - path.times[:-2])[:, None])
    assert np.array_equal(path.peak_rate, rate.max(axis=0))
    assert np.array_equal(path.peak_accel, accel.max(axis=0))
    for scale in (0.9, 1.1):
        tight = replace(free, qa_rate=scale * path.peak_rate)
        if scale > 1:
            check_trajectory(trajectory, model, tight, period=period, tolerance=tol,
                             q_start=rest)
            continue
        with pytest.raises(TrajectoryRefused) as refused:
            check_trajectory(trajectory, model, tight, period=period, tolerance=tol,
                             q_start=rest)
        j = _first_over(rate, tight.qa_rate)
        assert refused.value.reason == "too_fast" and refused.value.t == path.times[j]
        k = int(np.searchsorted(trajectory.waypoints[0], path.times[j], side="right")) - 1
        assert refused.value.waypoint == k
        assert f"between waypoint {k} (" in str(refused.value)
        assert "its rate limit is" in str(refused.value)
    for scale in (0.9, 1.1):
        tight = replace(free, qa_accel=scale * path.peak_accel)
        if scale > 1:
            check_trajectory(trajectory, model, tight, period=period, tolerance=tol,
                             q_start=rest)
            continue
        with pytest.raises(TrajectoryRefused, match="its acceleration limit is") as refused:
            check_trajectory(trajectory, model, tight, period=period, tolerance=tol,
                             q_start=rest)
        assert refused.value.t == path.times[_first_over(accel, tight.accel) + 1]


def test_the_same_circle_five_times_faster_is_too_fast_for_the_soft_arm(robots):
    model, limits, rest, period, tol = robots["soft_arm_stiff"]
    centre, radius, _ = SOFT_CIRCLE
    with pytest.raises(TrajectoryRefused) as refused:
        check_trajectory(circle(centre, radius, 2.0, every=0.05), model, limits,
                         period=period, tolerance=tol, q_start=rest)
    assert refused.value.reason == "too_fast"
    assert "actuator units/s² (t = " in str(refused.value)  # the acceleration limit first
    assert str(refused.value).endswith(f"its acceleration limit is {limits.accel[0]:.3g}")


def test_the_dancer_is_refused_where_its_held_configuration_turns_unstable(robots):
    model, limits, rest, period, tol = robots["dancer"]
    upright = Trajectory([0, 5], [[0.1, 0.95], [0.0, 1.05]])  # rises past the fold of H_uu
    with pytest.raises(TrajectoryRefused) as refused:
        check_trajectory(upright, model, limits, period=period, tolerance=tol, q_start=rest)
    assert refused.value.reason == "unstable"
    assert str(refused.value).startswith("unstable between waypoint 0 (t = 0 s) and "
                                         "waypoint 1 (t = 5 s)")
    assert "min eig H_uu = -" in str(refused.value)
    # below the fold, the same rise is held
    lower = Trajectory([0, 5], [[0.1, 0.95], [0.1, 1.0]])
    check_trajectory(lower, model, limits, period=period, tolerance=tol, q_start=rest)


def test_the_preview_is_checked_from_its_lead_to_its_tail(robots):
    model, limits, rest, period, tol = robots["double_pendulum"]
    times = np.arange(0.0, 4.01, 0.5)
    trajectory = Trajectory(times, 0.2 * np.sin(2 * math.pi * times / 4)[:, None])
    preview = Previewed(trajectory, Shaper.zvd(Mode(2.0, 0.05)))
    path = check_trajectory(preview, model, limits, period=period, tolerance=tol,
                            q_start=rest)
    assert path.times[0] == preview.start < 0 and path.times[-1] == preview.duration
    assert np.array_equal(path.x[0], preview.at(preview.start)[0])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.001, 2.0), min_size=1, max_size=30), st.floats(0.0, 1.5),
       st.sampled_from([0.004, 0.02, 0.05]))
def test_samples_are_the_waypoints_and_at_most_a_step_apart(gaps, lead, step):
    times = np.concatenate([[0.0], np.cumsum(gaps)])
    trajectory = Trajectory(times, times[:, None])

    class Led:  # a reference that leaves x_0 before t = 0 (a preview's lead)
        start, duration, waypoints = -lead, trajectory.duration + lead, trajectory.waypoints

    for reference in (trajectory, Led):
        samples = sample_times(reference, step)
        assert samples[0] == reference.start and samples[-1] == reference.duration
        spacing = np.diff(samples)
        assert spacing.max() <= step * (1 + 1e-9)
        if reference.duration - reference.start >= MIN_GAP * step:
            assert spacing.min() >= MIN_GAP * step - 1e-9
        # every waypoint is a sample, unless it is closer than the gap to the one before it
        # or to the end
        kept = set(samples.tolist())
        for k, t in enumerate(times):
            if t in (reference.start, reference.duration) or (
                    t - max(times[k - 1] if k else -math.inf, reference.start)
                    >= MIN_GAP * step + 1e-9 and reference.duration - t >= MIN_GAP * step):
                assert float(t) in kept
