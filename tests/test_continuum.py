"""cc3d_N kinematics, the continuum solvers (Jacobian / DLS / VVL) and the batch engine."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poise.ik import se3
from poise.ik.continuum import (
    COIL_LIMIT,
    ContinuumOptions,
    random_targets,
    solve,
    solve_dls,
    solve_jacobian,
    solve_vvl,
)
from poise.ik.continuum_batch import solve_batch
from poise.ik.result import InvalidInputError, Status
from poise.models.cc3d import F3_SWITCH, SINC_SWITCH, cc3d, f2, f3, segment_transforms, sinc


def _interleave(q, lengths):
    n = len(lengths)
    x = np.empty(3 * n)
    x[0::3], x[1::3], x[2::3] = q[0::2], q[1::2], lengths
    return x


def _spatial_fd(model, x, h=1e-6):
    """Central differences of (dT T⁻¹)^∨ w.r.t. x = (κ, φ, l) per segment."""

    def pose(x):
        q = np.c_[x[0::3], x[1::3]].ravel()
        return model.pose(q, x[2::3])

    J = np.zeros((6, x.size))
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = h
        M = (pose(x + e) - pose(x - e)) / (2 * h) @ se3.inverse(pose(x))
        J[:, j] = np.r_[se3.vee(M[:3, :3]), M[:3, 3]]
    return J


# --------------------------------------------------------------------------------- kinematics


def test_quarter_circle_segment_ends_at_2_over_pi_with_tangent_x():
    T = cc3d(1).pose([math.pi / 2, 0.0])
    np.testing.assert_allclose(T[:3, 3], [2 / math.pi, 0, 2 / math.pi], atol=1e-15)
    np.testing.assert_allclose(T[:3, 2], [1, 0, 0], atol=1e-15)  # tangent (local z) along +x


def test_straight_arm_tip_on_z_axis_at_total_length():
    model = cc3d(5)
    q = model.join(np.zeros(5), np.random.default_rng(0).uniform(-3, 3, 5))
    T = model.pose(q)
    np.testing.assert_allclose(T[:3, 3], [0, 0, 5], atol=1e-15)
    np.testing.assert_allclose(T[:3, :3], np.eye(3), atol=1e-15)


@given(st.floats(0.05, 6.0), st.floats(-math.pi, math.pi), st.floats(0.2, 2.0))
@settings(max_examples=60, deadline=None)
def test_one_segment_matches_circular_arc_in_its_bending_plane(kappa, phi, length):
    R, p = segment_transforms(np.array([kappa]), np.array([phi]), np.array([length]))
    th, r = kappa * length, 1.0 / kappa
    # arc of radius r in the plane spanned by e_z and u = (cos φ, sin φ, 0)
    u = np.array([math.cos(phi), math.sin(phi), 0.0])
    expected = r * (1 - math.cos(th)) * u + r * math.sin(th) * np.array([0, 0, 1.0])
    np.testing.assert_allclose(p[0], expected, atol=1e-12)
    np.testing.assert_allclose(R[0][:, 2], math.sin(th) * u + math.cos(th) * np.eye(3)[2],
                               atol=1e-12)


def test_segment_equals_matrix_exponential_of_its_twist():
    from scipy.linalg import expm

    kappa, phi, length = 1.3, 0.7, 0.9
    w = kappa * np.array([-math.sin(phi), math.cos(phi), 0.0])
    Vh = np.zeros((4, 4))
    Vh[:3, :3], Vh[:3, 3] = se3.hat(w), [0, 0, 1]
    R, p = segment_transforms(np.array([kappa]), np.array([phi]), np.array([length]))
    np.testing.assert_allclose(se3.transform(R[0], p[0]), expm(length * Vh), atol=1e-13)


def test_two_segments_compose_as_matrix_product():
    rng = np.random.default_rng(3)
    q, L = rng.uniform(-2, 2, 4), np.array([0.8, 1.3])
    R, p = segment_transforms(q[0::2], q[1::2], L)
    direct = se3.transform(R[0], p[0]) @ se3.transform(R[1], p[1])
    model = cc3d(2)
    np.testing.assert_allclose(model.pose(q, L), direct, atol=1e-14)


def test_kinematics_smooth_at_zero_curvature():
    model = cc3d(2)
    T0 = model.pose([0.0, 0.4, 0.0, -1.0])
    T12 = model.pose([1e-12, 0.4, 0.0, -1.0])
    assert np.abs(T12 - T0).max() < 1e-11
    # κ = 1e-12 against the first-order expansion: p_x ≈ κ l²/2 cos φ
    assert T12[0, 3] == pytest.approx(0.5e-12 * math.cos(0.4), rel=1e-9)


@pytest.mark.parametrize("fn,switch", [(sinc, SINC_SWITCH), (f2, 2 * SINC_SWITCH),
                                       (f3, F3_SWITCH)])
def test_series_and_closed_form_agree_at_switch_point(fn, switch):
    below = fn(np.nextafter(switch, 0.0))
    above = fn(switch)
    # the two branches meet to rounding: the jump is at most a few ulps plus the slope × 1 ulp
    assert abs(float(above - below)) < 1e-14
    x = np.linspace(0.0, 2 * switch, 2001)
    assert np.all(np.abs(np.diff(fn(x), 3)) < 1e-12)  # no jump or kink anywhere


def test_smooth_ratios_match_definitions_away_from_zero():
    x = np.array([0.7, 1.5, 3.0, -2.2])
    np.testing.assert_allclose(sinc(x), np.sin(x) / x, rtol=1e-15)
    np.testing.assert_allclose(f2(x), (1 - np.cos(x)) / x**2, rtol=1e-14)
    np.testing.assert_allclose(f3(x), (x - np.sin(x)) / x**3, rtol=1e-13)


@pytest.mark.parametrize("n_seg", [2, 3, 5])
def test_spatial_jacobian_kappa_phi_matches_central_differences(n_seg):
    model = cc3d(n_seg)
    rng = np.random.default_rng(n_seg)
    for scale in (2.0, 1e-4):  # generic and nearly straight
        q = model.join(rng.uniform(-scale, scale, n_seg), rng.uniform(-3, 3, n_seg))
        J = model.spatial_jacobian(q)
        Jn = _spatial_fd(model, _interleave(q, model.L))
        keep = np.array([j % 3 != 2 for j in range(3 * n_seg)])
        np.testing.assert_allclose(J, Jn[:, keep], atol=1e-8)


@pytest.mark.parametrize("n_seg", [2, 4])
def test_spatial_jacobian_kappa_phi_length_matches_central_differences(n_seg):
    model = cc3d(n_seg)
    rng = np.random.default_rng(10 + n_seg)
    q = model.join(rng.uniform(-3, 3, n_seg), rng.uniform(-3, 3, n_seg))
    L = rng.uniform(0.3, 1.5, n_seg)
    J = model.spatial_jacobian(q, L, with_length=True)
    np.testing.assert_allclose(J, _spatial_fd(model, _interleave(q, L)), atol=1e-8)


def test_geometric_task_jacobian_is_tip_velocity_and_angular_velocity():
    model = cc3d(3)
    q = np.random.default_rng(5).uniform(-2, 2, 6)
    J = model.task_jacobian(q)
    h = 1e-6
    for j in range(6):
        e = np.zeros(6)
        e[j] = h
        dp = (model.fk(q + e) - model.fk(q - e)) / (2 * h)
        np.testing.assert_allclose(J[:3, j], dp, atol=1e-8)


@given(st.lists(st.floats(-1, 1), min_size=3, max_size=3),
       st.lists(st.floats(-2, 2), min_size=3, max_size=3),
       st.floats(0.0, math.pi - 1e-6))
@settings(max_examples=100, deadline=None)
def test_se3_log_inverts_exp(axis, v, angle):
    a = np.array(axis)
    if np.linalg.norm(a) < 1e-3:
        a = np.array([0.0, 0.0, 1.0])
    V = np.r_[angle * a / np.linalg.norm(a), v]
    np.testing.assert_allclose(se3.log(se3.exp(V)), V, atol=1e-9)
    T = se3.exp(V)
    np.testing.assert_allclose(se3.exp(se3.log(T)), T, atol=1e-12)


# ------------------------------------------------------------------------------------ solvers


@pytest.fixture(scope="module")
def reachable():
    model = cc3d(3)
    q = model.join([0.9, 0.6, 0.5], [0.3, -0.8, 1.5])  # a moderate, uncoiled pose
    return model, model.pose(q)


@pytest.mark.parametrize("solver", [solve_jacobian, solve_dls, solve_vvl])
def test_each_solver_converges_from_neutral_on_reachable_target(solver, reachable):
    model, T_D = reachable
    res = solver(model, T_D, tol=1e-10, max_iter=200)
    assert res.success, res.message
    assert res.status is Status.CONVERGED
    assert res.residual_history[-1] < 1e-10
    assert res.task_error**2 == pytest.approx(res.residual_history[-1], rel=1e-6)
    np.testing.assert_allclose(model.pose(res.q), T_D, atol=1e-4)  # nominal lengths
    assert res.iterations == len(res.residual_history) - 1


def test_vvl_solution_has_nominal_lengths_and_reports_length_error(reachable):
    model, T_D = reachable
    res = solve_vvl(model, T_D, tol=1e-12, max_iter=300)
    assert res.success
    # q holds (κ, φ) only; the pose at the NOMINAL lengths meets the tolerance
    assert res.q.shape == (model.n,)
    V = se3.log(T_D @ se3.inverse(model.pose(res.q)))
    assert float(V @ V) < 1e-12
    err = float(res.message.split("max|l − L| = ")[1])
    assert err < 1e-6


def test_deadlock_reported_for_coiled_configuration():
    model = cc3d(2)
    coiled_q = model.join([7.5, 0.3], [0.2, 0.0])  # segment 1 bent 7.5 rad > 2π
    T_D = model.pose(model.join([0.5, 0.4], [0.1, 1.0]))
    res = solve_jacobian(model, T_D, q0=coiled_q, max_iter=0)
    assert res.status is Status.DEADLOCK and not res.success
    assert "segment(s) [1]" in res.message
    assert model.coiled(coiled_q) and not model.coiled(np.zeros(4))
    assert abs(7.5) > COIL_LIMIT


def test_tolerance_met_while_coiled_is_deadlock_not_success():
    model = cc3d(2)
    q = model.join([2 * math.pi + 0.5, 0.4], [0.1, 1.0])
    res = solve_jacobian(model, model.pose(q), q0=q, max_iter=5)
    assert res.residual_history[0] < 1e-20
    assert res.status is Status.DEADLOCK and not res.success


def test_iteration_cap_status():
    model = cc3d(4)
    _, T = random_targets(model, 1, np.random.default_rng(2))
    res = solve_dls(model, T[0], max_iter=1, tol=1e-14)
    assert res.status in (Status.ITERATION_CAP, Status.DEADLOCK) and not res.success
    assert res.iterations == 1


def test_batch_engine_equals_single_target_solver():
    rng = np.random.default_rng(7)
    for n_seg, method, count in [(2, "jacobian", 80), (3, "dls", 80), (4, "vvl", 100),
                                 (6, "jacobian", 40)]:
        model = cc3d(n_seg)
        _, T = random_targets(model, count, rng)
        opts = ContinuumOptions(method=method, tol=1e-8, max_iter=60)
        batch = solve_batch(model, T, options=opts)
        for i in range(count):
            single = solve(model, T[i], options=opts)
            assert single.iterations == batch.iterations[i]
            assert single.success == batch.success[i]
            assert single.status.value == batch.status[i]
            np.testing.assert_allclose(single.q, batch.q[i], atol=1e-9)


def test_batch_first_hit_matches_single_runs_at_each_tolerance():
    model = cc3d(3)
    _, T = random_targets(model, 30, np.random.default_rng(11))
    batch = solve_batch(model, T, options=ContinuumOptions(method="jacobian", tol=1e-8,
                                                          max_iter=40), tols=[1e-4])
    j = int(np.flatnonzero(batch.tols == 1e-4)[0])
    for i in range(30):
        single = solve_jacobian(model, T[i], tol=1e-4, max_iter=40)
        assert (single.residual_history[-1] < 1e-4) == (batch.first_hit[i, j] >= 0)
        if batch.first_hit[i, j] >= 0:
            assert single.iterations == batch.first_hit[i, j]


@pytest.mark.parametrize("bad", [
    dict(target=np.full((4, 4), np.nan)),
    dict(target=np.eye(3)),
    dict(target=np.diag([1.0, 1.0, -1.0, 1.0])),
    dict(q0=np.zeros(3)),
    dict(q0=[0, 0, np.inf, 0]),
    dict(method="newton"),
    dict(beta=0.0),
    dict(tol=-1.0),
    dict(max_step=0.0),
])
def test_invalid_input_raises_invalid_input_error(bad):
    model = cc3d(2)
    kw = {"target": np.eye(4), **bad}
    target = kw.pop("target")
    with pytest.raises(InvalidInputError):
        solve(model, target, **kw)


def test_batch_invalid_targets_raise():
    with pytest.raises(InvalidInputError):
        solve_batch(cc3d(2), np.zeros((3, 3, 3)))


def test_pinv_solve_equals_numpy_pinv_including_exact_rank_loss():
    from poise.ik.continuum import pinv_solve

    rng = np.random.default_rng(4)
    for m, k in [(6, 4), (6, 6), (6, 14), (9, 9), (8, 6)]:
        J = rng.standard_normal((40, m, k))
        J[:10, :, -1] = 0.0  # exactly rank deficient: the cut-off must drop it
        V = rng.standard_normal((40, m))
        ref = np.einsum("bij,bj->bi", np.linalg.pinv(J, rtol=1e-7), V)
        got = pinv_solve(J, V)
        scale = np.linalg.norm(ref, axis=-1, keepdims=True)
        np.testing.assert_allclose(got / scale, ref / scale, atol=1e-8)


def test_neutral_start_jacobian_has_exactly_zero_phi_columns():
    model = cc3d(4)
    J = model.spatial_jacobian(np.zeros(8))
    assert np.all(J[:, 1::2] == 0.0)  # φ does nothing on a straight segment
    assert np.linalg.matrix_rank(J) == 2  # all bending in the x–z plane


def test_robust_preset_reaches_uncoiled_solution():
    from poise.ik.continuum import ROBUST

    model = cc3d(5)
    T_D = model.pose(model.join([1.0, 2.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0, -1.0]))
    res = solve(model, T_D, options=ROBUST, tol=1e-10)
    assert res.success and not model.coiled(res.q)


def test_max_step_clips_every_update():
    model = cc3d(4)
    _, T = random_targets(model, 1, np.random.default_rng(9))
    res = solve_jacobian(model, T[0], max_iter=15, max_step=0.1, record_path=True)
    assert np.max(np.abs(np.diff(res.path, axis=0))) <= 0.1 + 1e-12


def test_bench_vvl_command_runs_a_tiny_protocol(tmp_path, capsys):
    from poise.cli import main

    out = tmp_path / "v.json"
    code = main(["bench", "vvl", "--segments", "2", "--size", "20", "--groups", "2",
                 "--workers", "1", "--json", str(out)])
    assert code == 0
    import json

    summary = json.loads(out.read_text())
    cell = summary["results"]["2|vvl"]["500|0.0001"]
    assert 0.0 <= cell["success_valid"] <= cell["success"] <= 1.0
    assert "| 2 | jacobian |" in capsys.readouterr().out


def test_cc3d_models_implement_pose_model_protocol_and_broadcast():
    from poise.models.base import PoseModel

    for n_seg in range(2, 8):
        model = cc3d(n_seg)
        assert isinstance(model, PoseModel) and model.name == f"cc3d_{n_seg}"
    model = cc3d(3)
    q = np.random.default_rng(1).uniform(-2, 2, (5, 6))
    np.testing.assert_array_equal(model.pose(q)[2], model.pose(q[2]))
    assert model.spatial_jacobian(q, with_length=True).shape == (5, 6, 9)


@pytest.mark.parametrize("segments", [2, 7])
def test_cc3d_models_are_registered_and_round_trip(segments):
    from poise.models import check_derivatives, load_model, model_from_dict

    model = load_model(f"cc3d_{segments}")
    assert model.n == 2 * segments and model.task_dim == 6
    again = model_from_dict(model.describe(), source="describe")
    q = np.random.default_rng(segments).normal(size=model.n)
    np.testing.assert_array_equal(model.pose(q), again.pose(q))
    assert check_derivatives(model, samples=3).ok
