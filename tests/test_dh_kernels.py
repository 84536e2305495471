"""The compiled serial-chain kernels (poise.kernels.dh_chain, poise.kernels.dh_ik) and the
compiled path of ``poise.ik.solve`` (poise.ik.clik_compiled).

Kinematics are compared with the numpy reference (:class:`~poise.models.dh.DHChain`) as in
``tests/test_kernels.py``: ``‖compiled − reference‖ ≤ 1e-12 · max(‖reference‖, reach)``; the
Jacobian is also checked against central differences of the kernel's own pose. Solutions are
checked with the reference's residual definitions (an independent FK and
``poise.ik.orientation``), never against wall time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poise.benchmarks.ik_panda import sample_targets, solved
from poise.ik import ErrorDamping, InvalidInputError, Posture, Status, orientation_error, solve
from poise.ik.clik import _evaluator
from poise.ik.clik_compiled import unavailable_reason, warm_up
from poise.ik.orientation import matrix_from_quat, quat_from_matrix
from poise.ik.targets import parse_target
from poise.kernels import dh_chain, dh_ik
from poise.models import load_model
from poise.models.dh import DHChain

RTOL = 1e-12
PANDA = load_model("panda")
#: Non-special α, offsets, negative lengths and a rotated flange: every term of the kernel.
ODD = DHChain(name="odd", a=[0.0, 0.1, -0.2, 0.05, 0.3], d=[0.3, 0.0, 0.12, -0.07, 0.2],
              alpha=[0.0, 0.7, -math.pi / 2, math.pi, 1.2],
              theta_offset=[0.1, 0.0, -0.3, 0.2, 0.5], q_min=[-3.0] * 5, q_max=[3.0] * 5,
              flange=(0.02, 0.1, 0.4, -0.5))
CHAINS = (PANDA, ODD)


def check(compiled: np.ndarray, reference: np.ndarray, floor: float, what: str) -> None:
    err = float(np.linalg.norm(np.asarray(compiled) - np.asarray(reference)))
    bound = RTOL * max(float(np.linalg.norm(reference)), floor)
    assert err <= bound, f"{what}: |compiled - reference| = {err:.3g} > {bound:.3g}"


# ----------------------------------------------------------------------------- kinematics


@pytest.mark.parametrize("model", CHAINS, ids=lambda m: m.name)
def test_pose_and_jacobian_equal_the_numpy_reference_at_random_configurations(model):
    arrays = dh_chain.pack_dh(model)
    rng = np.random.default_rng(10)
    for _ in range(20):
        q = rng.uniform(model.q_min, model.q_max)
        T, J = dh_chain.pose_jacobian(arrays, q)
        check(T[:3, 3], model.fk(q), model.reach, "position")
        check(T[:3, :3], model.pose(q)[:3, :3], 1.0, "rotation")
        assert T[3].tolist() == [0.0, 0.0, 0.0, 1.0]
        check(J, model.task_jacobian(q), model.reach, "Jacobian")
        check(dh_chain.pose(arrays, q), model.pose(q), model.reach, "pose")
        check(dh_chain.task_jacobian(arrays, q), model.task_jacobian(q), model.reach, "J")


@pytest.mark.parametrize("model", CHAINS, ids=lambda m: m.name)
def test_kernel_jacobian_matches_finite_differences_of_the_kernel_pose(model):
    arrays = dh_chain.pack_dh(model)
    rng = np.random.default_rng(11)
    h = 1e-6
    for _ in range(10):
        q = rng.uniform(model.q_min, model.q_max)
        J = dh_chain.task_jacobian(arrays, q)
        for i in range(model.n):
            dq = np.zeros(model.n)
            dq[i] = h
            Tp, Tm = dh_chain.pose(arrays, q + dq), dh_chain.pose(arrays, q - dq)
            v = (Tp[:3, 3] - Tm[:3, 3]) / (2 * h)
            eps, angle = orientation_error(Tp[:3, :3], Tm[:3, :3])  # R+ R-ᵀ = exp(2h [ω])
            w = eps / np.linalg.norm(eps) * angle / (2 * h)
            # central differences: truncation ~h² ‖∂³p‖, rounding ~1e-16/h
            assert np.linalg.norm(J[:3, i] - v) < 1e-8 * max(1.0, model.reach)
            assert np.linalg.norm(J[3:, i] - w) < 1e-8


def test_rotation_error_is_the_reference_angle_along_the_error_quaternion_axis():
    rng = np.random.default_rng(12)
    eo = np.empty(3)
    pairs = [(PANDA.pose(rng.uniform(PANDA.q_min, PANDA.q_max))[:3, :3],
              PANDA.pose(rng.uniform(PANDA.q_min, PANDA.q_max))[:3, :3]) for _ in range(30)]
    R = PANDA.pose(PANDA.q_home)[:3, :3]
    pairs += [(R, R), (R @ np.diag([1.0, -1.0, -1.0]), R)]  # no error; a half turn
    for Rd, Re in pairs:
        angle = dh_ik.rotation_error(np.ascontiguousarray(Rd), np.ascontiguousarray(Re), eo)
        eps, ref_angle = orientation_error(Rd, Re)
        assert angle == ref_angle  # the same arithmetic, to the last bit
        assert abs(np.linalg.norm(eo) - angle) <= 1e-15
        if np.linalg.norm(eps) > 1e-12:  # ϑ u is ε scaled by ϑ / sin(ϑ/2) > 0
            assert np.linalg.norm(np.cross(eo, eps)) <= 1e-12
            assert eo @ eps > 0.0
        else:
            assert eo.tolist() == [0.0, 0.0, 0.0]


def rotation(axis, angle: float) -> np.ndarray:
    """Rodrigues' formula: the rotation by ``angle`` [rad] about the unit vector along ``axis``."""
    u = np.asarray(axis, dtype=float) / np.linalg.norm(axis)
    S = np.array([[0.0, -u[2], u[1]], [u[2], 0.0, -u[0]], [-u[1], u[0], 0.0]])
    return np.eye(3) + math.sin(angle) * S + (1.0 - math.cos(angle)) * (S @ S)


#: (axis, angle) → each branch of Shepperd's method: the trace, then r00, r11, r22 largest; the
#: last two have w < 0 before the sign flip (rotations by more than π about +axis).
KNOWN = [((0, 0, 1), math.pi / 2), ((1, 0, 0), math.pi), ((0, 1, 0), math.pi),
         ((0, 0, 1), math.pi), ((1, 0, 0), 190 * math.pi / 180),
         ((1, -2, 0.5), 1.9 * math.pi), ((1, 1, 1), 0.0), ((0.3, -0.2, 0.9), 2.5)]


@pytest.mark.parametrize(("axis", "angle"), KNOWN)
def test_quaternion_of_known_rotations(axis, angle):
    """Q(R(u, ϑ)) = ±(cos ϑ/2, sin ϑ/2 · u), the sign with w ≥ 0 (ground truth, not a copy)."""
    u = np.asarray(axis, dtype=float) / np.linalg.norm(axis)
    expected = np.concatenate([[math.cos(angle / 2)], math.sin(angle / 2) * u])
    if expected[0] < 0.0:
        expected = -expected
    R = rotation(axis, angle)
    for quat in (np.array(dh_ik.quaternion(*R.ravel())), quat_from_matrix(R)):
        assert np.allclose(quat, expected, atol=1e-15, rtol=0.0)
        assert quat[0] >= 0.0
        assert abs(np.linalg.norm(quat) - 1.0) <= 2e-16


def test_quaternion_round_trips_through_the_matrix():
    """matrix → quaternion → matrix is the identity map; quaternion → matrix → quaternion is
    the identity up to the sign (w ≥ 0), for random poses of the Panda."""
    rng = np.random.default_rng(13)
    for _ in range(30):
        R = PANDA.pose(rng.uniform(PANDA.q_min, PANDA.q_max))[:3, :3]
        quat = np.array(dh_ik.quaternion(*R.ravel()))
        assert quat[0] >= 0.0 and abs(np.linalg.norm(quat) - 1.0) <= 4.5e-16  # 2 ulp
        assert np.abs(matrix_from_quat(quat) - R).max() <= 1e-15
        back = rng.normal(size=4)
        again = quat_from_matrix(matrix_from_quat(back))
        assert np.allclose(again, np.sign(back[0]) * back / np.linalg.norm(back), atol=1e-15)


def test_compiled_quaternion_is_its_python_source_to_the_last_bit():
    """quat_from_matrix runs the kernel's Python source (``py_func``), so this compares one
    function with itself on purpose: it checks that Numba's compilation keeps every bit."""
    rng = np.random.default_rng(13)
    for _ in range(30):
        R = PANDA.pose(rng.uniform(PANDA.q_min, PANDA.q_max))[:3, :3]
        assert np.array_equal(np.array(dh_ik.quaternion(*R.ravel())), quat_from_matrix(R))


@pytest.mark.parametrize("rows", [3, 6])
def test_gram_eigenvalues_are_the_squared_singular_values(rows):
    rng = np.random.default_rng(14)
    for k in range(10):
        J = PANDA.task_jacobian(rng.uniform(PANDA.q_min, PANDA.q_max))
        if k == 0:
            J[1] = 2.0 * J[0]  # rank deficient: σ_min = 0
        sv = np.linalg.svd(J[:rows], compute_uv=False)[::-1]
        got = np.sqrt(dh_ik.gram_eigenvalues(np.ascontiguousarray(J), rows))
        # from the Gram matrix σ_i is exact to ~ε σ_max² / σ_i: ~1e-8 σ_max as σ_i → 0
        assert np.all(np.abs(got - sv) <= 1e-7 * sv[-1])
        big = sv > 1e-3 * sv[-1]
        assert np.all(np.abs(got - sv)[big] <= 1e-13 * sv[-1] ** 2 / sv[big])


# ----------------------------------------------------------------------------- the solver


def residuals_by_the_reference(model, target, q):
    """``(‖p_d − p‖, ϑ)`` at ``q`` by the numpy reference's own evaluation."""
    _, pe, oe, _ = _evaluator(model, parse_target(model, target))(np.asarray(q, dtype=float))
    return pe, oe


def test_compiled_solutions_meet_tol_within_limits_on_seeded_reachable_poses():
    """The benchmark protocol's targets (reachable by construction), its start and restarts:
    every one solved to 1e-6 with the joints within their limits, and the errors the result
    reports are the reference's definitions evaluated at its q."""
    _, poses = sample_targets(PANDA, 100, seed=3)
    for i, T in enumerate(poses):
        r = solve(PANDA, T, method="lm", restarts=50, seed=i)
        assert r.success and r.status == Status.CONVERGED, (i, r.message)
        assert solved(PANDA, T, r.q, 1e-6), i
        assert np.all(r.q >= PANDA.q_min) and np.all(r.q <= PANDA.q_max)
        pe, oe = residuals_by_the_reference(PANDA, T, r.q)
        assert abs(r.position_error - pe) <= 1e-15 and abs(r.orientation_error - oe) <= 1e-15
        assert r.task_error <= 1e-6
        assert r.residual_history[-1] == pytest.approx(r.task_error, rel=1e-15)
        assert r.residual_history.size == r.iterations + 1
        assert np.allclose(r.x[:3], T[:3, 3], atol=1e-6)
        assert np.allclose(r.x[3:], quat_from_matrix(PANDA.pose(r.q)[:3, :3]), atol=1e-15)
        assert r.sigma_min == pytest.approx(
            np.linalg.svd(PANDA.task_jacobian(r.q), compute_uv=False)[-1], abs=1e-7)


@settings(max_examples=25, deadline=None)
@given(u=st.lists(st.floats(0.05, 0.95), min_size=5, max_size=5),
       noise=st.lists(st.floats(-0.3, 0.3), min_size=5, max_size=5),
       w_o=st.sampled_from([1.0, 0.25, 4.0]))
def test_compiled_round_trip_on_a_general_chain(u, noise, w_o):
    """FK → IK → FK on a chain with every kind of DH row, from a start near the answer, with
    an orientation weight: the reference's residual at the returned q is below tol. (Five
    joints for a six-dimensional pose: the solutions are isolated points, so the start is near
    one; targets ≥ 5 % inside every range, as in test_panda's round trip, since at a corner
    the only solution may have several joints on their limits.)"""
    q = ODD.q_min + np.array(u) * (ODD.q_max - ODD.q_min)
    T = ODD.pose(q)
    r = solve(ODD, T, method="lm", q0=q + np.array(noise), restarts=30, seed=1,
              orientation_weight=w_o)
    assert r.success, r.message
    pe, oe = residuals_by_the_reference(ODD, T, r.q)
    assert math.hypot(pe, oe) <= 1e-6
    assert np.all(r.q >= ODD.q_min) and np.all(r.q <= ODD.q_max)


@settings(max_examples=200, deadline=None)
@given(u=st.lists(st.floats(0.0, 1.0), min_size=7, max_size=7),
       dq=st.lists(st.floats(-20.0, 20.0), min_size=7, max_size=7))
def test_projection_keeps_every_iterate_within_the_limits(u, dq):
    """``Π(q + Δq)``: inside the limits; equal to ``q + Δq`` up to whole turns (the same pose)
    where such a value lies within the limits, else clamped to the nearer side it left by."""
    lo, hi = PANDA.q_min, PANDA.q_max
    q = lo + np.array(u) * (hi - lo)
    step = np.array(dq)
    out = np.empty(7)
    dh_ik.project(q, step, lo, hi, out)
    assert np.all(out >= lo) and np.all(out <= hi)
    raw = q + step
    for j in range(7):
        turns = (out[j] - raw[j]) / (2 * math.pi)
        if lo[j] <= raw[j] <= hi[j]:
            assert out[j] == raw[j]
        elif abs(turns - round(turns)) > 1e-9:  # not a whole turn: clamped
            assert out[j] == (lo[j] if raw[j] < lo[j] else hi[j])
            shifted = raw[j] + 2 * math.pi * np.arange(-5, 6)
            assert not np.any((shifted >= lo[j]) & (shifted <= hi[j]))


def test_restarts_are_reproducible_and_stay_within_the_limits():
    _, poses = sample_targets(PANDA, 10, seed=4)
    for i, T in enumerate(poses):
        a = solve(PANDA, T, method="lm", q0=PANDA.q_max + 2.0, restarts=20, seed=i)
        b = solve(PANDA, T, method="lm", q0=PANDA.q_max + 2.0, restarts=20, seed=i)
        assert np.array_equal(a.q, b.q) and a.restarts == b.restarts
        assert np.all(a.q >= PANDA.q_min) and np.all(a.q <= PANDA.q_max)


def test_position_target_and_the_damping_options():
    p = PANDA.fk(PANDA.q_home + 0.3)
    r = solve(PANDA, p, method="lm", damping=0.01, restarts=5)  # fixed λ: μ = λ²
    assert r.success and r.orientation_error == 0.0 and r.x.shape == (3,)
    assert np.linalg.norm(PANDA.fk(r.q) - p) <= 1e-6
    T = PANDA.pose(PANDA.q_home + 0.3)
    for damping in (ErrorDamping(w_e=0.5, w_n=1e-4), ErrorDamping()):
        s = solve(PANDA, T, method="lm", damping=damping, restarts=5)
        assert s.success and solved(PANDA, T, s.q, 1e-6)
    assert r.sigma_min == pytest.approx(
        np.linalg.svd(PANDA.task_jacobian(r.q)[:3], compute_uv=False)[-1], abs=1e-7)


def test_a_failed_solve_says_why_and_returns_its_closest_configuration():
    T = PANDA.pose(np.array([1.0, 1.2, -1.0, -1.0, 1.5, 0.5, 2.0]))
    r = solve(PANDA, T, method="lm", max_iter=2, restarts=3, seed=0)
    assert not r.success and r.status in (Status.ITERATION_CAP, Status.STALLED)
    assert "closest configuration" in r.message and "4 attempt(s)" in r.message
    pe, oe = residuals_by_the_reference(PANDA, T, r.q)
    assert r.task_error == pytest.approx(math.hypot(pe, oe), abs=1e-15) and r.task_error > 1e-6
    far = solve(PANDA, [2.0, 0.0, 0.5], method="lm", restarts=10)
    assert far.status == Status.UNREACHABLE and far.restarts == 0
    assert np.linalg.norm(PANDA.fk(far.q)) < PANDA.reach


def test_an_unreachable_target_ends_at_the_closest_configuration_and_says_so():
    """A planar chain (every axis along z) and a position off its plane but within its reach
    sphere: the closest reachable point is the target's projection onto the plane, where the
    error is orthogonal to every motion of the arm. The polished best attempt ends there
    (error = the height, as from the numpy reference) and the status is unreachable."""
    chain = DHChain(name="planar", a=[0.0, 0.5], d=[0.0, 0.0], alpha=[0.0, 0.0],
                    theta_offset=[0.0, 0.0], q_min=[-3.0, -3.0], q_max=[3.0, 3.0],
                    flange=(0.4, 0.0, 0.0, 0.0))
    for target in ([0.5, 0.0, 0.3], [0.3, 0.4, -0.2]):
        compiled = solve(chain, target, method="lm", restarts=3)
        reference = solve(chain, target, method="lm", restarts=3, compiled=False)
        height = abs(target[2])
        assert not compiled.success and compiled.status == Status.UNREACHABLE
        assert "singular stationary point" in compiled.message
        assert np.allclose(chain.fk(compiled.q), [*target[:2], 0.0], atol=1e-7)
        assert compiled.position_error == pytest.approx(height, abs=1e-12)
        assert reference.position_error == pytest.approx(height, abs=1e-12)


# ----------------------------------------------------------------------------- dispatch


def test_lm_on_a_dh_chain_takes_the_compiled_path_and_compiled_false_the_reference():
    T = PANDA.pose(PANDA.q_home + 0.2)
    auto = solve(PANDA, T, method="lm")
    forced = solve(PANDA, T, method="lm", compiled=True)
    reference = solve(PANDA, T, method="lm", compiled=False)
    assert np.array_equal(auto.q, forced.q) and auto.iterations == forced.iterations
    assert auto.success and reference.success
    # two algorithms: different points of the 7-joint arm's solution set, both within tol
    assert not np.array_equal(auto.q, reference.q)
    for r in (auto, reference):
        assert solved(PANDA, T, r.q, 1e-6)
    # with a secondary objective the numpy path runs (it implements it)
    shaped = solve(PANDA, T, method="lm", secondary=Posture(PANDA.q_home, gain=0.5))
    assert shaped.success


@pytest.mark.parametrize(("model", "kwargs", "match"), [
    ("planar_2link", {"method": "lm"}, "not a dh_chain"),
    ("panda", {"method": "dls"}, "implements 'lm' only"),
    ("panda", {"method": "lm", "gain": 1.0}, "gain"),
    ("panda", {"method": "lm", "record_path": True}, "record_path"),
    ("panda", {"method": "lm", "damping": 0.0}, "damping"),
])
def test_compiled_true_where_it_does_not_apply_says_why(model, kwargs, match):
    m = load_model(model)
    target = m.fk(np.asarray(m.q_home if hasattr(m, "q_home") else np.zeros(m.n)))
    with pytest.raises(InvalidInputError, match=match):
        solve(m, target, compiled=True, **kwargs)
    assert unavailable_reason(m, **kwargs) is not None


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"tol": -1.0}, "tol"), ({"max_iter": 2.5}, "max_iter"), ({"restarts": -1}, "restarts"),
    ({"stall_window": 0}, "stall_window"), ({"orientation_weight": 0.0}, "orientation_weight"),
    ({"q0": [0.1] * 3}, "q0: expected 7"), ({"stall_rtol": -1.0}, "stall_rtol"),
    ({"damping": -0.1}, "damping"), ({"seed": -1}, "seed"),
])
def test_compiled_path_refuses_bad_options_like_the_reference(kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        solve(PANDA, PANDA.pose(PANDA.q_home), method="lm", compiled=True, **kwargs)


def test_warm_up_compiles_one_signature_that_every_call_reuses():
    report = warm_up(PANDA)
    assert set(report.kernels) == {"lm pose", "lm position"}
    signatures = len(dh_ik.solve.signatures)
    T = PANDA.pose(PANDA.q_home + 0.1)
    solve(PANDA, T, method="lm", q0=[0.0] * 7, seed=None, restarts=np.int64(2))
    solve(PANDA, T, method="lm", q0=np.zeros(7, dtype=np.float32), tol=np.float64(1e-5))
    solve(PANDA, T[:3, 3].tolist(), method="lm", max_iter=np.int32(50), damping=1e-3)
    solve(ODD, ODD.pose(np.zeros(5)), method="lm", orientation_weight=2)
    assert len(dh_ik.solve.signatures) == signatures
