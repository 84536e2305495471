"""Classic CLIK on the planar 2-link arm and the Panda: seed 002's numbers, quaternion CLIK
(seed 003), task priority, limits, failure reporting, invalid input, the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poise.cli import main
from poise.ik import (
    InvalidInputError,
    JointLimitAvoidance,
    Posture,
    Status,
    nullspace_step,
    orientation_error,
    quat_from_matrix,
    quaternion_error,
    solve,
    two_link_solutions,
)
from poise.models import load_model

ARM = load_model("planar_2link")
PANDA = load_model("panda")
TARGET = np.array([0.6, 0.3])


# ----------------------------------------------------------------------------- seed 002


def test_analytic_two_link_gives_seed_002_elbows():
    up, down = two_link_solutions(TARGET, 0.5, 0.4)
    assert np.allclose(np.degrees(up.q), [-9.8, 84.3], atol=0.05)
    assert np.allclose(np.degrees(down.q), [63.0, -84.3], atol=0.05)
    for r in (up, down):
        assert r.success and np.linalg.norm(ARM.fk(r.q) - TARGET) < 1e-12


def test_dls_from_seed_002_start_reaches_elbow_up_in_exactly_5_iterations():
    r = solve(ARM, TARGET, method="dls", q0=[0.1, 0.1], damping=0.05, tol=1e-5)
    assert r.success and r.status == Status.CONVERGED
    assert r.iterations == 5
    assert np.allclose(np.degrees(r.q), [-9.8, 84.3], atol=0.05)
    assert r.residual_history.size == 6 and r.residual_history[-1] < 1e-5


def test_analytic_two_link_outside_reach_is_unreachable_and_stretched():
    up, _ = two_link_solutions([1.2, 0.0], 0.5, 0.4)
    assert not up.success and up.status == Status.UNREACHABLE
    assert abs(up.q[1]) < 1e-12 and abs(up.q[0]) < 1e-12


@pytest.mark.parametrize("method", ["pinv", "dls", "lm", "transpose"])
def test_every_method_converges_on_planar_2link(method):
    r = solve(ARM, TARGET, method=method, q0=[0.3, 1.0])
    assert r.success, r.message
    assert np.linalg.norm(ARM.fk(r.q) - TARGET) <= 1e-6


@settings(max_examples=40, deadline=None)
@given(q1=st.floats(-math.pi, math.pi), q2=st.floats(0.15, 3.0), flip=st.booleans(),
       noise=st.floats(-0.5, 0.5))
def test_fk_ik_fk_round_trip_planar_2link(q1, q2, flip, noise):
    q = np.array([q1, -q2 if flip else q2])
    x = ARM.fk(q)
    r = solve(ARM, x, method="dls", q0=q + noise, restarts=3)
    assert r.success
    assert np.linalg.norm(ARM.fk(r.q) - x) < 1e-6


def test_unreachable_planar_target_returns_closest_stretched_configuration():
    target = np.array([1.2 * math.cos(0.7), 1.2 * math.sin(0.7)])  # 1.2 m > reach 0.9 m
    r = solve(ARM, target, q0=[0.1, 0.4], restarts=2)
    assert not r.success and r.status == Status.UNREACHABLE
    tip = ARM.fk(r.q)
    assert abs(math.atan2(tip[1], tip[0]) - 0.7) < 1e-3  # points toward the target
    assert abs(np.linalg.norm(tip) - 0.9) < 1e-6  # fully stretched
    assert abs(r.position_error - 0.3) < 1e-6


# ----------------------------------------------------------------------------- seed 003


def test_quaternion_error_is_vector_part_of_qd_times_qe_inverse():
    rng = np.random.default_rng(3)
    for _ in range(20):
        Rd, Re = (PANDA.pose(rng.uniform(PANDA.q_min, PANDA.q_max))[:3, :3] for _ in "de")
        eps, angle = orientation_error(Rd, Re)
        assert np.allclose(eps, quaternion_error(quat_from_matrix(Rd), quat_from_matrix(Re)))
        Rerr = Rd @ Re.T
        assert math.isclose(angle, math.acos(np.clip((np.trace(Rerr) - 1) / 2, -1, 1)),
                            abs_tol=1e-7)


def test_quaternion_clik_position_error_decays_at_rate_kp_and_orientation_converges():
    rng = np.random.default_rng(7)
    q_goal = PANDA.q_home + rng.uniform(-0.3, 0.3, 7)
    target = PANDA.pose(q_goal)
    k_pp, k_po, dt = 2.0, 2.0, 0.01
    r = solve(PANDA, target, method="pinv", q0=PANDA.q_home, gain=(k_pp, k_po), step=dt,
              max_iter=3000, record_path=True, line_search=False)
    assert r.success and r.orientation_error < 1e-6
    pos_err = np.array([np.linalg.norm(target[:3, 3] - PANDA.fk(q)) for q in r.path[:60]])
    slope = np.polyfit(np.arange(pos_err.size), np.log(pos_err), 1)[0]
    assert slope == pytest.approx(-k_pp * dt, rel=0.03)


# ----------------------------------------------------------------------------- task priority


def test_secondary_motion_does_not_move_the_primary_task():
    rng = np.random.default_rng(11)
    for _ in range(10):
        q = rng.uniform(PANDA.q_min, PANDA.q_max)
        J = PANDA.task_jacobian(q)
        dq = nullspace_step(PANDA, q, J, JointLimitAvoidance(gain=10.0))
        assert np.linalg.norm(dq) > 1e-4  # a real motion …
        assert np.linalg.norm(J @ dq) < 1e-10  # … invisible to the task
        dq = nullspace_step(PANDA, q, J[:3], Posture(PANDA.q_home, gain=0.5))
        assert np.linalg.norm(J[:3] @ dq) < 1e-10


def test_secondary_objective_improves_while_primary_task_is_held():
    target = PANDA.pose(np.array([1.5, 0.8, -1.5, -1.2, 1.0, 2.9, -1.0]))
    start = np.array([1.4, 0.7, -1.4, -1.3, 1.1, 2.8, -0.9])
    plain = solve(PANDA, target, method="dls", q0=start)
    objective = JointLimitAvoidance(gain=20.0)
    shaped = solve(PANDA, target, method="dls", q0=start, secondary=objective, max_iter=500)
    assert plain.success and shaped.success
    assert shaped.task_error < 1e-6
    assert objective.cost(PANDA, shaped.q) < 0.5 * objective.cost(PANDA, plain.q)


# ----------------------------------------------------------------------------- limits


def test_iterates_respect_joint_limits():
    rng = np.random.default_rng(5)
    for i in range(10):
        target = PANDA.pose(rng.uniform(PANDA.q_min, PANDA.q_max))
        r = solve(PANDA, target, method="lm", q0=rng.uniform(PANDA.q_min, PANDA.q_max),
                  restarts=3, seed=i, record_path=True)
        assert np.all(r.path >= PANDA.q_min) and np.all(r.path <= PANDA.q_max)
        assert np.all(r.q >= PANDA.q_min) and np.all(r.q <= PANDA.q_max)


def test_start_outside_limits_is_clamped():
    q0 = PANDA.q_max + 1.0
    r = solve(PANDA, PANDA.pose(PANDA.q_home), q0=q0, max_iter=0)
    assert np.all(r.q <= PANDA.q_max)


def test_panda_position_beyond_reach_is_unreachable():
    r = solve(PANDA, [2.0, 0.0, 0.5], method="lm")
    assert not r.success and r.status == Status.UNREACHABLE


# ----------------------------------------------------------------------------- invalid input


@pytest.mark.parametrize(
    ("target", "kwargs", "match"),
    [
        ([0.6, 0.3, 0.1], {}, "target: expected 2"),
        ([math.nan, 0.3], {}, "non-finite"),
        ([0.6, math.inf], {}, "non-finite"),
        ([0.6, 0.3], {"q0": [0.1]}, "q0: expected 2"),
        ([0.6, 0.3], {"q0": [0.1, math.nan]}, "q0: non-finite"),
        ([0.6, 0.3], {"method": "newton"}, "method = 'newton'"),
        ([0.6, 0.3], {"tol": -1.0}, "tol"),
        ([0.6, 0.3], {"max_iter": 2.5}, "max_iter"),
        ([0.6, 0.3], {"method": "pinv", "damping": 0.1}, "damping applies"),
        ([0.6, 0.3], {"gain": (1.0, 2.0, 3.0)}, "gain"),
    ],
)
def test_invalid_input_raises(target, kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        solve(ARM, target, **kwargs)


@pytest.mark.parametrize("target", [[0.1] * 5, np.eye(4) * 2, [0.3, 0, 0.5, 0, 0, 0, 0]])
def test_invalid_pose_target_raises(target):
    with pytest.raises(InvalidInputError, match="target"):
        solve(PANDA, target)


# ----------------------------------------------------------------------------- CLI


def test_cli_solve_json_reports_converged_result(capsys):
    code = main(["solve", "--model", "planar_2link", "--algorithm", "dls", "--target", "0.6",
                 "0.3", "--start", "0.1", "0.1", "--damping", "0.05", "--tol", "1e-5", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["success"] is True and out["status"] == "converged" and out["iterations"] == 5
    assert np.allclose(np.degrees(out["q"]), [-9.8, 84.3], atol=0.05)
    assert out["task_error"] < 1e-5 and np.allclose(out["x"], [0.6, 0.3], atol=1e-5)


def test_cli_solve_bad_input_exits_2_with_invalid_input_status(capsys):
    code = main(["solve", "--model", "planar_2link", "--target", "0.6", "0.3", "0.1", "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert json.loads(captured.out)["status"] == "invalid_input"
    assert "expected 2 values" in captured.err


def test_cli_solve_unreachable_exits_1(capsys):
    code = main(["solve", "--model", "planar_2link", "--target", "1.2", "0.0"])
    assert code == 1
    assert "unreachable" in capsys.readouterr().out
