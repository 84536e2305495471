"""The ``robust`` continuum method: its Numba kernels against the numpy reference, and the
invariants of its answers (error checked with independent kinematics, limits, honest status)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poise.ik import continuum_kernels as kernels
from poise.ik import se3
from poise.ik.continuum import (
    ALL_METHODS,
    METHODS,
    ROBUST_METHOD,
    ContinuumOptions,
    random_targets,
    solve,
)
from poise.ik.continuum_robust import (
    RobustOptions,
    from_curvature_vectors,
    solve_robust,
    to_curvature_vectors,
)
from poise.ik.result import InvalidInputError, Status
from poise.models.cc3d import CC3D, cc3d, pose_and_jacobian, tip_pose


def _kernel_pose(b, L):
    T, J = np.empty((4, 4)), np.empty((6, b.size))
    kernels.pose_jacobian(b, L, T, J, True)
    return T, J


def _reference_error(model, T_D, q):
    """``e = ‖log(T_D T_e⁻¹)‖²`` with the numpy kinematics at the nominal lengths."""
    V = se3.log(T_D @ se3.inverse(model.pose(q)))
    return float(V @ V)


def _assert_valid_answer(model, T_D, res, tol):
    """The invariants of a successful robust solve, checked independently of the kernels."""
    assert res.success and res.status is Status.CONVERGED, res.message
    assert _reference_error(model, T_D, res.q) <= tol
    assert np.all(np.abs(model.bending_angles(res.q)) <= model.bending_limits())
    assert not model.coiled(res.q)
    np.testing.assert_allclose(res.x, model.pose(res.q), atol=1e-12)  # nominal lengths
    assert res.iterations == len(res.residual_history) - 1
    assert res.task_error**2 == pytest.approx(_reference_error(model, T_D, res.q), rel=1e-6)


# ------------------------------------------------------------------------------------ kernels


@pytest.mark.parametrize("scale", [0.0, 1e-9, 1e-3, 0.3, 3.0])
def test_kernel_pose_matches_reference_kinematics_to_1e_12(scale):
    rng = np.random.default_rng(1)
    for n in range(1, 8):
        L = rng.uniform(0.3, 1.5, n)
        for _ in range(20):
            b = scale * rng.normal(size=2 * n)
            q = from_curvature_vectors(b)
            T, _ = _kernel_pose(b, L)
            np.testing.assert_allclose(T, tip_pose(q[0::2], q[1::2], L), rtol=0, atol=1e-12)


def test_kernel_jacobian_is_reference_jacobian_in_curvature_coordinates_to_1e_12():
    """``∂/∂b_x = c ∂/∂κ − (s/κ) ∂/∂φ``, ``∂/∂b_y = s ∂/∂κ + (c/κ) ∂/∂φ`` of the (κ, φ)
    Jacobian of :mod:`poise.models.cc3d` (κ away from 0, where the chain rule is exact)."""
    rng = np.random.default_rng(2)
    for n in range(1, 8):
        L = rng.uniform(0.3, 1.5, n)
        for _ in range(20):
            kappa = rng.uniform(0.05, 6.0, n) / L
            phi = rng.uniform(-math.pi, math.pi, n)
            _, Jq = pose_and_jacobian(kappa, phi, L)
            c, s = np.cos(phi), np.sin(phi)
            Jk, Jp = Jq[:, 0::2], Jq[:, 1::2] / kappa
            expected = np.empty_like(Jq)
            expected[:, 0::2] = c * Jk - s * Jp
            expected[:, 1::2] = s * Jk + c * Jp
            b = to_curvature_vectors(np.c_[kappa, phi].ravel())
            _, J = _kernel_pose(b, L)
            np.testing.assert_allclose(J, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("scale", [0.0, 1e-7, 0.5, 4.0])
def test_kernel_jacobian_matches_central_differences_including_straight_arm(scale):
    rng = np.random.default_rng(3)
    h = 1e-6
    for n in (1, 3, 6):
        L = rng.uniform(0.5, 1.5, n)
        b = scale * rng.normal(size=2 * n)
        T, J = _kernel_pose(b, L)
        for j in range(2 * n):
            d = np.zeros(2 * n)
            d[j] = h
            M = (_kernel_pose(b + d, L)[0] - _kernel_pose(b - d, L)[0]) / (2 * h) @ se3.inverse(T)
            np.testing.assert_allclose(J[:, j], np.r_[se3.vee(M[:3, :3]), M[:3, 3]], atol=2e-8)


def test_straight_arm_jacobian_has_full_bending_rank():
    """Unlike the (κ, φ) Jacobian (rank 2 at κ = 0), the curvature-vector one has rank 4 at
    the straight arm: only the twist about and the stretch along the backbone are missing."""
    _, J = _kernel_pose(np.zeros(8), np.ones(4))
    assert np.linalg.matrix_rank(J) == 4


def test_kernel_error_twist_matches_se3_log_to_1e_12_including_half_turns():
    rng = np.random.default_rng(4)
    for k in range(300):
        T = se3.exp(rng.normal(size=6))
        angle = math.pi - 10.0 ** -rng.uniform(0, 8) if k % 3 == 0 else rng.uniform(0, 3)
        axis = rng.normal(size=3)
        w = angle * axis / np.linalg.norm(axis)
        T_D = se3.exp(np.r_[w, rng.normal(size=3)]) @ T
        V = np.empty(6)
        e = kernels.error_twist(T_D, T, V)
        ref = se3.log(T_D @ se3.inverse(T))
        np.testing.assert_allclose(V, ref, rtol=0, atol=1e-12)
        assert e == pytest.approx(float(ref @ ref), rel=1e-12)


def test_projection_keeps_every_curvature_vector_in_its_disc():
    b = np.array([3.0, 4.0, 0.1, 0.0, -6.0, 8.0])
    kernels.project(b, np.array([2.5, 1.0, 20.0]))
    np.testing.assert_allclose(np.hypot(b[0::2], b[1::2]), [2.5, 0.1, 10.0])
    np.testing.assert_allclose(b[4:], [-6.0, 8.0])


# ------------------------------------------------------------------------------------ solver


@pytest.mark.parametrize("n_seg", [2, 3, 4, 5, 6, 7])
def test_robust_answers_meet_tolerance_by_independent_kinematics_and_stay_uncoiled(n_seg):
    model = cc3d(n_seg)
    _, targets = random_targets(model, 40, np.random.default_rng([5, n_seg]))
    for T_D in targets:
        res = solve_robust(model, T_D, tol=1e-6)
        _assert_valid_answer(model, T_D, res, 1e-6)
        assert res.iterations <= 500


def _limited_case(n_seg: int, seed: int):
    """A model with random per-segment bending limits and a target reachable within them."""
    rng = np.random.default_rng(seed)
    lengths = tuple(rng.uniform(0.4, 1.6, n_seg))
    limits = tuple(rng.uniform(0.5, 2 * math.pi, n_seg))
    model = CC3D(n_seg, lengths, max_bending=limits)
    kappa = rng.uniform(0.0, 0.9, n_seg) * np.array(limits) / model.L  # within the limits
    T_D = model.pose(model.join(kappa, rng.uniform(-math.pi, math.pi, n_seg)))
    return model, np.array(limits), T_D


@given(st.integers(2, 7), st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_robust_never_leaves_the_bending_limits(n_seg, seed):
    model, limits, T_D = _limited_case(n_seg, seed)
    res = solve_robust(model, T_D, tol=1e-8)
    # whatever the outcome, the returned arm respects the limits, and a success is one
    assert np.all(model.bending_angles(res.q) <= limits)
    if res.success:
        _assert_valid_answer(model, T_D, res, 1e-8)
    else:  # a failure says why (the method solves ~99.99 %, not all: docs/continuum.md)
        assert res.status in (Status.DEADLOCK, Status.ITERATION_CAP) and res.message


@pytest.mark.parametrize("n_seg", [2, 3, 4, 5, 6, 7])
def test_robust_solves_targets_reachable_within_the_limits(n_seg):
    """A fixed, seeded set (deterministic): every target is solved within the limits."""
    for seed in range(8):
        model, limits, T_D = _limited_case(n_seg, 1000 * n_seg + seed)
        res = solve_robust(model, T_D, tol=1e-8)
        assert np.all(model.bending_angles(res.q) <= limits)
        _assert_valid_answer(model, T_D, res, 1e-8)


def test_unreachable_target_is_not_solved_and_says_why():
    model = cc3d(3)
    T_D = np.eye(4)
    T_D[:3, 3] = [0.5, 0.2, 3.4]  # 3.44 m from the base; the arm is 3 m long
    res = solve_robust(model, T_D)
    assert not res.success and res.status is Status.UNREACHABLE
    assert "unreachable" in res.message and "3 m long" in res.message
    assert res.iterations == 500 and not model.coiled(res.q)


def test_target_that_needs_more_bending_than_allowed_is_a_deadlock_not_a_success():
    free, limited = cc3d(3), CC3D(3, (1.0, 1.0, 1.0), max_bending=(1.0, 1.0, 1.0))
    T_D = free.pose(free.join([2.5, 2.5, 2.5], [0.3, 1.0, -0.5]))
    res = solve_robust(limited, T_D)
    assert not res.success and res.status is Status.DEADLOCK
    assert "deadlock" in res.message and "against the limit" in res.message
    assert np.all(limited.bending_angles(res.q) <= 1.0)


def test_iteration_cap_counts_every_iteration_of_every_restart():
    model = cc3d(3)
    T_D = np.eye(4)
    T_D[:3, 3] = [0.0, 0.0, 3.5]  # unreachable: restarts until the cap
    for cap in (0, 1, 7, 40, 123):
        res = solve_robust(model, T_D, max_iter=cap)
        assert res.iterations == cap and len(res.residual_history) == cap + 1
        assert not res.success
    assert solve_robust(model, T_D, max_iter=123).restarts > 3


def test_stopping_earlier_is_a_prefix_of_the_long_run():
    """What bench/vvl.py relies on: success within cap c at tolerance τ, read from one run to
    (500, 1e-8), equals a run with max_iter = c and tol = τ (restarts do not depend on either)."""
    model = cc3d(2)
    _, targets = random_targets(model, 60, np.random.default_rng(8))
    long_runs = [solve_robust(model, T_D, tol=1e-8) for T_D in targets]
    assert sum(r.restarts > 0 for r in long_runs) >= 5  # the check covers restarts
    for T_D, long in zip(targets, long_runs, strict=True):
        for tol in (1e-4, 1e-6):
            below = np.flatnonzero(long.residual_history < tol)
            first = int(below[0])
            for cap in (first - 1, first, 30):
                if cap < 0:
                    continue
                short = solve_robust(model, T_D, tol=tol, max_iter=cap)
                assert short.success == (first <= cap)
                if short.success:
                    assert short.iterations == first
                    np.testing.assert_array_equal(short.residual_history,
                                                  long.residual_history[:first + 1])


def test_same_target_same_answer():
    model = cc3d(2)
    _, targets = random_targets(model, 30, np.random.default_rng(9))
    for T_D in targets:
        a, b = solve_robust(model, T_D), solve_robust(model, T_D)
        np.testing.assert_array_equal(a.q, b.q)
        assert a.iterations == b.iterations


def test_start_q0_is_tried_first():
    model = cc3d(4)
    q, T = random_targets(model, 1, np.random.default_rng(10))
    res = solve_robust(model, T[0], q0=q[0])
    assert res.success and res.iterations == 0 and res.restarts == 0


def test_method_is_selectable_through_the_continuum_api():
    assert (*METHODS, ROBUST_METHOD) == ALL_METHODS and ROBUST_METHOD not in METHODS
    model = cc3d(4)
    _, T = random_targets(model, 1, np.random.default_rng(11))
    by_name = solve(model, T[0], method="robust", tol=1e-9)
    by_options = solve(model, T[0], options=RobustOptions(tol=1e-9))
    direct = solve_robust(model, T[0], tol=1e-9)
    for res in (by_name, by_options):
        np.testing.assert_array_equal(res.q, direct.q)
        assert res.iterations == direct.iterations


@pytest.mark.parametrize("bad", [
    dict(method="robust", options=ContinuumOptions()),
    dict(method="robust", record_path=True),
    dict(method="robust", beta=0.5),
    dict(method="robust", tol=0.0),
    dict(method="robust", stall_ratio=1.0),
    dict(method="robust", candidates=0),
    dict(method="robust", q0=[0.0, 0.0, np.nan, 0.0]),
    dict(method="robust", target=np.diag([1.0, 1.0, -1.0, 1.0])),
    dict(options="robust"),
])
def test_invalid_robust_input_raises_invalid_input_error(bad):
    kw = {"target": np.eye(4), **bad}
    target = kw.pop("target")
    with pytest.raises(InvalidInputError):
        solve(cc3d(2), target, **kw)


# ------------------------------------------------------------------------ model file and CLI


def test_model_file_carries_optional_bending_limits():
    from poise.models import ModelError, model_from_dict

    model = model_from_dict({"family": "cc3d", "n_segments": 2, "lengths": [0.5, 1.0],
                             "max_bending": [1.0, 6.0]})
    assert model.max_bending == (1.0, 6.0)
    np.testing.assert_allclose(model.q_max, [2.0, np.inf, 6.0, np.inf])
    again = model_from_dict(model.describe())
    assert again.max_bending == model.max_bending
    assert "max_bending" not in cc3d(3).describe()  # absent: the 2π coil limit
    np.testing.assert_allclose(cc3d(3).bending_limits(), 2 * math.pi)
    for bad in ([1.0, 7.0], [1.0, 0.0], [1.0]):
        with pytest.raises(ModelError):
            model_from_dict({"family": "cc3d", "n_segments": 2, "max_bending": bad})


def test_poise_solve_robust_reports_success_and_unreachable(capsys):
    from poise.cli import main

    model = cc3d(3)
    _, T = random_targets(model, 1, np.random.default_rng(12))
    from poise.ik.orientation import quat_from_matrix

    target = [*T[0][:3, 3], *quat_from_matrix(T[0][:3, :3])]
    code = main(["solve", "--model", "cc3d_3", "--algorithm", "robust", "--json",
                 "--target", *map(str, target)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["success"] and out["status"] == "converged"
    assert _reference_error(model, T[0], np.array(out["q"])) < 1e-6
    code = main(["solve", "--model", "cc3d_3", "--algorithm", "robust", "--json",
                 "--target", "0", "0", "3.5", "1", "0", "0", "0"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and not out["success"] and out["status"] == "unreachable"
    code = main(["solve", "--model", "cc3d_3", "--algorithm", "robust", "--target", "1", "0",
                 "2"])
    assert code == 2 and "full pose" in capsys.readouterr().err


def test_bench_vvl_runs_robust_next_to_the_paper_methods(tmp_path, capsys):
    from poise.cli import main

    out = tmp_path / "v.json"
    code = main(["bench", "vvl", "--segments", "2", "--size", "15", "--groups", "1",
                 "--workers", "1", "--methods", "jacobian", "robust", "--json", str(out)])
    assert code == 0
    summary = json.loads(out.read_text())
    cell = summary["results"]["2|robust"]["500|1e-06"]
    assert 0.0 <= cell["success_valid"] <= cell["success"] <= 1.0
    assert summary["results"]["2|robust"]["timing"]["median_us"] > 0
    assert "2|jacobian" in summary["results"]
    text = capsys.readouterr().out
    assert "| 2 | robust |" in text and "## robust: tol 1e-6" in text
