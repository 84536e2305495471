"""Held-configuration IK (seed 000): the claims the paper makes, shown on the reference models."""

from __future__ import annotations

import numpy as np
import pytest

from poise.ik.held import (
    HeldOptions,
    algorithm1,
    algorithm2,
    algorithm2_rates,
    held_jacobian,
    limited_rates,
    plain,
)
from poise.ik.result import InvalidInputError, Status
from poise.ik.statics import release, solve_statics
from poise.models import load_model, model_from_dict
from poise.models.actuation import Gu, blocks, join, split

RNG = np.random.default_rng(20261130)


def held_target(model, qa, qu0=None):
    """A reachable target: the task value of the held configuration at ``qa``."""
    qu0 = np.zeros(model.n - model.m) if qu0 is None else qu0
    sol = solve_statics(model, np.asarray(qa, dtype=float), qu0)
    assert sol.converged
    return model.fk(sol.q), sol


# ----------------------------------------------------------------------------- statics


def test_statics_solution_has_zero_residual_and_stability_verdict():
    model = load_model("double_pendulum")
    sol = solve_statics(model, np.array([0.05]), np.zeros(1))
    assert sol.converged and sol.residual < 1e-10
    assert np.linalg.norm(Gu(model, sol.q)) < 1e-10
    assert sol.verdict == "stable" and sol.min_eig > 0
    np.testing.assert_allclose(split(model, sol.q)[0], [0.05], atol=1e-14)


def test_statics_nearest_branch_finds_unstable_equilibrium_and_says_so():
    model = load_model("dancer")
    # Upright, gesture leg raised above the hip: centre of mass above k0/(m g).
    qa = np.array([0.0, np.pi, 0.0])
    sol = solve_statics(model, qa, np.zeros(1), branch="nearest")
    assert sol.converged
    assert sol.verdict == "unstable" and sol.min_eig < 0
    stable = solve_statics(model, qa, np.zeros(1), branch="stable")
    assert stable.converged and stable.verdict == "stable"
    assert abs(stable.qu[0]) > 0.05  # it leaned over to a stable pose


# ----------------------------------------------------------------------------- claim 1


def test_plain_ik_reaches_target_but_sags_when_released():
    model = load_model("double_pendulum")
    target = np.array([0.6])
    res = plain(model, target, q0=[0.3, 0.3])
    assert res.success and res.position_error < 1e-6
    assert res.statics_residual > 0.5  # |G_u| far from 0 [N·m]
    settled = release(model, res.q)
    assert settled.converged
    sag = abs(model.fk(settled.q)[0] - target[0])
    assert sag > 0.05, f"released tip moved only {sag:.4f} m"


# ----------------------------------------------------------------------------- claim 2


def test_alg1_iterates_stay_on_held_set_and_task_error_converges():
    model = load_model("double_pendulum")
    target = np.array([0.6])
    res = algorithm1(model, target, q0=[0.0, 0.0], record_path=True)
    assert res.success and res.status == Status.CONVERGED
    assert res.position_error < 1e-6
    for q in res.path:
        assert np.linalg.norm(Gu(model, q)) < 1e-9
    assert res.statics_residual < 1e-9 and res.stable


@pytest.mark.parametrize("name", ["double_pendulum", "tendon_3link", "soft_arm", "dancer"])
def test_alg1_jacobian_equals_finite_difference_through_statics(name):
    model = load_model(name)
    qa = 0.3 * (model.qa_min + (model.qa_max - model.qa_min) * RNG.random(model.m)) * 0.5
    sol = solve_statics(model, qa, np.zeros(model.n - model.m), tol=1e-13)
    jac = held_jacobian(blocks(model, sol.q))
    h = 1e-6 * max(1.0, float(np.max(np.abs(model.qa_max))))
    fd = np.zeros_like(jac)
    for k in range(model.m):
        dq = np.zeros(model.m)
        dq[k] = h
        plus = solve_statics(model, qa + dq, sol.qu, tol=1e-13)
        minus = solve_statics(model, qa - dq, sol.qu, tol=1e-13)
        fd[:, k] = (model.fk(plus.q) - model.fk(minus.q)) / (2 * h)
    scale = np.max(np.abs(jac))
    assert np.max(np.abs(jac - fd)) < 1e-6 * scale


# ----------------------------------------------------------------------------- claim 3


def _log_slope(values):
    k = np.arange(len(values))
    return np.polyfit(k, np.log(values), 1)[0]


def test_alg2_from_far_off_E_both_errors_decay_at_the_set_rates():
    model = load_model("double_pendulum")
    dt, gz, ge = 0.01, 2.0, 5.0
    q0 = np.array([0.8, -1.2])  # far from E
    assert np.linalg.norm(Gu(model, q0)) > 1.0
    target = np.array([0.4])
    res = algorithm2(model, target, q0, gamma_z=gz, gamma_e=ge, dt=dt,
                     options=HeldOptions(max_iter=60), record_path=True)
    path = res.path[:40]
    ex = [abs(target[0] - model.fk(q)[0]) for q in path]
    gu = [np.linalg.norm(Gu(model, q)) for q in path]
    # Discrete decay per step is (1 - Δt Γ) to first order in Δt.
    assert _log_slope(ex) == pytest.approx(np.log(1 - dt * gz), rel=0.05)
    assert _log_slope(gu) == pytest.approx(np.log(1 - dt * ge), rel=0.05)


def test_alg2_started_on_E_stays_on_E():
    """Started on E, eE = 0 and Ġu = 0 to first order: the explicit step drifts off E only by
    O(Δt²) per step (then ΓE pulls it back), so the drift vanishes as Δt → 0."""
    model = load_model("double_pendulum")
    _, start = held_target(model, [0.02])
    drifts = []
    for dt in (0.04, 0.02, 0.01):
        res = algorithm2(model, [0.5], start.q, dt=dt, record_path=True, max_step=None,
                         options=HeldOptions(max_iter=int(20 / dt)))
        assert res.success
        drifts.append(max(np.linalg.norm(Gu(model, q)) for q in res.path))
    assert drifts[0] > drifts[1] > drifts[2]
    assert drifts[1] / drifts[2] > 1.7  # at least first order in Δt per unit time
    # Off-E starts sit at |G_u| ~ 10 N·m; the finest step stays within 1e-3 of E.
    assert drifts[2] < 1e-3


# ----------------------------------------------------------------------------- claims 4, 5


def test_alg1_and_alg2_reach_the_same_held_configuration():
    model = load_model("double_pendulum")
    _, start = held_target(model, [0.01])
    target = np.array([0.5])
    r1 = algorithm1(model, target, start.q, options=HeldOptions(tol=1e-10))
    r2 = algorithm2(model, target, start.q, dt=0.5,
                    options=HeldOptions(tol=1e-10, statics_tol=1e-10, max_iter=2000))
    assert r1.success and r2.success
    np.testing.assert_allclose(r1.q, r2.q, atol=1e-7)


@pytest.mark.parametrize("name", ["double_pendulum", "tendon_3link", "soft_arm"])
def test_projector_form_and_stacked_solve_agree(name):
    model = load_model(name)
    for _ in range(5):
        q = 0.4 * RNG.standard_normal(model.n)
        b = blocks(model, q)
        ex = RNG.standard_normal(model.task_dim)
        e_e = RNG.standard_normal(model.n - model.m)
        p = algorithm2_rates(b, ex, e_e, 1.3, 0.7, form="projector")
        s = algorithm2_rates(b, ex, e_e, 1.3, 0.7, form="stacked")
        assert np.max(np.abs(p - s)) < 1e-10 * max(1.0, np.max(np.abs(s)))


def test_redundant_projectors_satisfy_both_decay_laws():
    """Dancer (2-D task, 3 actuators): the pseudo-inverse projectors give ḟ = ΓZ ex, Ġu = ΓE eE."""
    model = load_model("dancer")
    for _ in range(5):
        q = 0.3 * RNG.standard_normal(model.n)
        b = blocks(model, q)
        ex, e_e = RNG.standard_normal(2), RNG.standard_normal(1)
        rates = algorithm2_rates(b, ex, e_e, 2.0, 3.0)
        qa_dot, qu_dot = rates[: model.m], rates[model.m :]
        np.testing.assert_allclose(b.Ja @ qa_dot + b.Ju @ qu_dot, 2.0 * ex, atol=1e-9)
        np.testing.assert_allclose(b.Hua @ qa_dot + b.Huu @ qu_dot, 3.0 * e_e, atol=1e-9)


def _held_at(model, qa):
    sol = solve_statics(model, np.asarray(qa, float), np.zeros(model.n - model.m))
    assert sol.converged and sol.stable
    return blocks(model, join(model, np.asarray(qa, float), sol.qu))


def test_damping_bounds_algorithm_2s_task_step_near_a_fold_of_the_held_map():
    """With a square ``Ja`` and ``λ > 0`` the task part of Algorithm 2 is the held Jacobian's
    damped least squares, as Algorithm 1's ``dls``: near the soft arm's straight-arm fold
    (σ_min 0.016) the step along the weak direction is at most ``‖ΓZ ex‖ / 2λ`` instead of
    ``‖ΓZ ex‖ / σ_min``; the task rate is ``J J⁺_λ ΓZ ex`` and the statics law stays exact.
    Away from the fold the rates are the undamped ones to ``(λ/σ_min)²``."""
    model = load_model("soft_arm_stiff")
    lam, gz, ge = 0.02, 0.3, 20.0
    b = _held_at(model, [0.0274, -0.0105])
    J = held_jacobian(b)
    U, sv, _ = np.linalg.svd(J)
    assert sv[-1] < 0.02 < 1.0 < sv[0]  # near the fold
    weak = U[:, -1] * 1e-3  # a 1 mm error along the weak direction
    no_statics = np.zeros(model.n - model.m)
    undamped = algorithm2_rates(b, weak, no_statics, gz, ge)
    damped = algorithm2_rates(b, weak, no_statics, gz, ge, damping=lam)
    m = model.m
    step = np.linalg.norm
    assert step(undamped[:m]) > 0.9 * gz * 1e-3 / sv[-1]  # as 1/σ_min
    assert step(damped[:m]) <= gz * 1e-3 / (2 * lam) * (1 + 1e-9)
    assert step(damped[:m]) < 0.5 * step(undamped[:m])
    task_rate = b.Ja @ damped[:m] + b.Ju @ damped[m:]
    J_lam = J.T @ np.linalg.inv(J @ J.T + lam**2 * np.eye(len(J)))
    np.testing.assert_allclose(task_rate, J @ J_lam @ (gz * weak), rtol=1e-9, atol=1e-15)
    e_e = np.array([1e-3] * (model.n - model.m))  # the statics law holds exactly
    both = algorithm2_rates(b, weak, e_e, gz, ge, damping=lam)
    np.testing.assert_allclose(b.Hua @ both[:m] + b.Huu @ both[m:], ge * e_e, rtol=1e-9,
                               atol=1e-12)
    # away from the fold: the undamped rates, to (λ/σ_min)²
    b = _held_at(model, [0.02, 0.0])
    sv_min = np.linalg.svd(held_jacobian(b), compute_uv=False)[-1]
    ex = np.array([1e-3, -2e-3])
    plain_rates = algorithm2_rates(b, ex, no_statics, gz, ge)
    damped = algorithm2_rates(b, ex, no_statics, gz, ge, damping=lam)
    assert step(damped - plain_rates) <= 2 * (lam / sv_min) ** 2 * step(plain_rates)


# ----------------------------------------------------------------------------- claim 6


def test_gravity_off_alg1_path_of_double_pendulum_lies_on_a_straight_line():
    model = load_model("double_pendulum", gravity=0.0)
    res = algorithm1(model, [0.3], q0=[0.0, 0.0], record_path=True)
    assert res.success
    path = np.asarray(res.path)
    # E is a line through the origin: all iterates are collinear with it.
    direction = path[-1] / np.linalg.norm(path[-1])
    normal = np.array([-direction[1], direction[0]])
    assert np.max(np.abs(path @ normal)) < 1e-9


def test_gravity_off_soft_arm_held_configurations_are_the_flat_set():
    model = load_model("soft_arm", gravity=0.0)
    for _ in range(5):
        qa = RNG.uniform(model.qa_min, model.qa_max)
        sol = solve_statics(model, qa, RNG.standard_normal(3))
        t = sol.q
        assert sol.converged
        assert np.allclose([t[0] - t[1], t[1] - t[2], t[3] - t[4]], 0.0, atol=1e-10)


# ----------------------------------------------------------------------------- claim 7


def test_tendon_3link_held_set_is_a_two_dimensional_surface():
    model = load_model("tendon_3link")
    for _ in range(20):
        qa = RNG.uniform(model.qa_min, model.qa_max)
        sol = solve_statics(model, qa, np.zeros(1))
        assert sol.converged
        b = blocks(model, sol.q)
        # E = {G_u = 0}; its tangent space is the null space of dG_u/d(qa, qu).
        grad = np.hstack([b.Hua, b.Huu])
        sv = np.linalg.svd(grad, compute_uv=False)
        tangent_dim = model.n - int(np.sum(sv > 1e-9 * max(1.0, sv.max())))
        assert tangent_dim == 2


# ----------------------------------------------------------------------------- claim 8


@pytest.mark.parametrize("name", ["soft_arm_stiff", "soft_arm_soft"])
def test_both_algorithms_reach_soft_arm_targets_across_the_workspace(name):
    model = load_model(name)
    rng = np.random.default_rng(7)
    for _ in range(6):
        qa = rng.uniform(0.8 * model.qa_min, 0.8 * model.qa_max)
        target, _ = held_target(model, qa)
        r1 = algorithm1(model, target)
        r2 = algorithm2(model, target, dt=0.5, options=HeldOptions(max_iter=3000))
        for res in (r1, r2):
            assert res.success, res.message
            assert res.position_error < 1e-6 and res.statics_residual < 1e-9


# ----------------------------------------------------------------------------- claim 9


def _scaled_masses(model, factor):
    data = model.describe()
    for body in data.get("bodies", []):
        body["mass"] = body["mass"] * factor
    return model_from_dict(data, source="scaled")


def test_dancer_tracks_centre_of_mass_target_with_both_algorithms():
    model = load_model("dancer")
    target, _ = held_target(model, [0.3, -0.4, 0.5])
    r1 = algorithm1(model, target)
    r2 = algorithm2(model, target, dt=0.5, options=HeldOptions(max_iter=3000))
    for res in (r1, r2):
        assert res.success, res.message
        assert res.stable


def test_dancer_with_masses_20_percent_off_leaves_a_steady_state_offset():
    truth = load_model("dancer")
    wrong = _scaled_masses(truth, 0.8)
    target, _ = held_target(truth, [0.3, -0.4, 0.5])
    res = algorithm1(wrong, target)
    assert res.success
    held_by_truth = solve_statics(truth, res.qa, res.qu)
    offset = np.linalg.norm(truth.fk(held_by_truth.q) - target)
    # The model error shows as a clear offset of the centre of mass (reported in docs).
    assert 1e-3 < offset < 0.5, offset


def test_dancer_unstable_target_is_flagged():
    model = load_model("dancer")
    q_up = join(model, np.array([0.0, np.pi, 0.0]), np.zeros(1))
    target = model.fk(q_up)
    res = algorithm2(model, target, q_up + 0.01, dt=0.5,
                     options=HeldOptions(reject_unstable=True, max_iter=2000))
    assert not res.success
    assert res.status == Status.UNSTABLE and res.stable is False
    assert res.min_eig_Huu < 0


# ----------------------------------------------------------------------------- errors


def test_invalid_target_is_refused_with_a_clear_error():
    model = load_model("double_pendulum")
    with pytest.raises(InvalidInputError, match="target"):
        algorithm1(model, [0.1, 0.2])
    with pytest.raises(InvalidInputError, match="non-finite"):
        algorithm2(model, [float("nan")])


def test_unreachable_target_returns_closest_held_configuration_not_success():
    model = load_model("double_pendulum")
    res = algorithm1(model, [2.5])  # beyond the reach l1 + l2 = 2 m
    assert not res.success
    assert res.status in (Status.UNREACHABLE, Status.STALLED)
    assert res.statics_residual < 1e-9  # still a held configuration


# ----------------------------------------------------------------------------- limits (issue 15)

#: Targets of the held-IK benchmark (seed 0, 20 per model: ``poise bench held-ik``) on which
#: Algorithm 2 used to stall with an actuator at its limit while Algorithm 1 solved them.
STALLED_BEFORE = [("tendon_3link", 1), ("tendon_3link", 10), ("soft_arm_stiff", 2),
                  ("soft_arm_stiff", 13), ("soft_arm_soft", 2), ("soft_arm_soft", 13),
                  ("dancer", 15), ("dancer", 16), ("dancer", 19)]
ALG2_BENCH = {"dt": 0.5, "options": HeldOptions(max_iter=3000)}
_BENCH_TARGETS: dict[str, list] = {}


def bench_target(name: str, index: int):
    """The benchmark's target ``index`` of ``name`` (seed 0, 20 targets)."""
    from poise.benchmarks.held_ik import reachable_targets

    model = load_model(name)
    if name not in _BENCH_TARGETS:
        _BENCH_TARGETS[name] = reachable_targets(model, 20, np.random.default_rng(0))
    return model, _BENCH_TARGETS[name][index]


def assert_held_within_limits(model, res, tol=1e-6):
    assert res.success and res.status == Status.CONVERGED, res.message
    assert res.position_error < tol and res.statics_residual < 1e-9
    assert np.linalg.norm(Gu(model, res.q)) < 1e-9  # re-evaluated, not the reported field
    for q in res.path:  # every iterate of the returned attempt respects the limits
        qa = split(model, q)[0]
        assert np.all(qa >= model.qa_min - 1e-12) and np.all(qa <= model.qa_max + 1e-12)


@pytest.mark.parametrize(("name", "index"), STALLED_BEFORE)
def test_alg2_solves_the_bench_targets_where_it_stalled_at_a_limit(name, index):
    model, target = bench_target(name, index)
    assert algorithm1(model, target).success
    res = algorithm2(model, target, record_path=True, **ALG2_BENCH)
    assert_held_within_limits(model, res)
    if name != "dancer":  # the numpy reference too (the dancer's takes seconds in numpy)
        ref = algorithm2(model, target, record_path=True, compiled=False, **ALG2_BENCH)
        assert_held_within_limits(model, ref)


def test_alg2_limit_aware_transient_alone_reaches_a_target_the_old_one_stalled_on():
    """soft_arm_stiff target 13: the bounded least-squares rates get there in one attempt."""
    model, target = bench_target("soft_arm_stiff", 13)
    options = HeldOptions(max_iter=3000, restarts=0)
    for compiled in (True, False):
        res = algorithm2(model, target, dt=0.5, options=options, record_path=True,
                         compiled=compiled)
        assert_held_within_limits(model, res)
        assert res.restarts == 0
        touched = [np.any(np.isclose(split(model, q)[0], model.qa_max, atol=1e-10)
                          | np.isclose(split(model, q)[0], model.qa_min, atol=1e-10))
                   for q in res.path]
        assert any(touched)  # it did run into a limit on the way


@pytest.mark.parametrize("compiled", [True, False])
def test_alg2_stalled_at_a_local_minimum_of_the_limits_says_so_and_a_restart_solves_it(
        compiled):
    """soft_arm_stiff target 2, from the held shape at qa = −0.1 qa_max: the transient slides
    into a corner of the actuator box where every admissible direction raises the error;
    without restarts it says where it stopped, with them it is solved and the restart is
    counted."""
    model, target = bench_target("soft_arm_stiff", 2)
    _, start = held_target(model, -0.1 * model.qa_max)
    stuck = algorithm2(model, target, start.q, dt=0.5, compiled=compiled,
                       options=HeldOptions(max_iter=3000, restarts=0))
    assert not stuck.success and stuck.status == Status.STALLED
    assert "at their limit" in stuck.message and stuck.restarts == 0
    assert stuck.statics_residual < 1e-9  # stalled on E, not off it
    qa = stuck.qa
    assert np.all((qa >= model.qa_max - 1e-10) | (qa <= model.qa_min + 1e-10))  # a corner
    res = algorithm2(model, target, start.q, compiled=compiled, **ALG2_BENCH)
    assert res.success and res.restarts >= 1


def _at_limit_with_outward_push(name: str, actuator: int):
    """A held configuration with ``actuator`` at its upper limit and a target that the
    unconstrained rates reach by pushing it further out."""
    model = load_model(name)
    qa = 0.3 * model.qa_max
    qa[actuator] = model.qa_max[actuator]
    sol = solve_statics(model, qa, np.zeros(model.n - model.m))
    beyond = qa.copy()
    beyond[actuator] = 1.3 * model.qa_max[actuator]
    far = solve_statics(model, beyond, sol.qu)
    b = blocks(model, sol.q)
    target = model.fk(far.q)
    free = algorithm2_rates(b, target - b.x, -b.Gu, 2.0, 5.0)
    assert free[actuator] > 0  # the paper's rates push it out
    return model, b, target


def test_limited_rates_equal_the_paper_rates_away_from_the_limits():
    for name in ("tendon_3link", "soft_arm_stiff", "dancer"):
        model = load_model(name)
        for _ in range(5):
            qa = RNG.uniform(0.5 * model.qa_min, 0.5 * model.qa_max)
            b = blocks(model, join(model, qa, 0.2 * RNG.standard_normal(model.n - model.m)))
            ex, e_e = RNG.standard_normal(model.task_dim), RNG.standard_normal(model.n - model.m)
            np.testing.assert_array_equal(
                limited_rates(b, ex, e_e, 2.0, 5.0, model.qa_min, model.qa_max),
                algorithm2_rates(b, ex, e_e, 2.0, 5.0))


@pytest.mark.parametrize("name", ["tendon_3link", "soft_arm_stiff", "dancer"])
def test_limited_rates_hold_the_blocked_actuator_and_solve_the_rest_in_least_squares(name):
    model, b, target = _at_limit_with_outward_push(name, 0)
    ex, e_e, gz, ge = target - b.x, -b.Gu, 2.0, 5.0
    rates = limited_rates(b, ex, e_e, gz, ge, model.qa_min, model.qa_max)
    qa_dot, qu_dot = rates[: model.m], rates[model.m :]
    assert qa_dot[0] == 0.0  # held at its limit
    # the statics law holds exactly
    np.testing.assert_allclose(b.Hua @ qa_dot + b.Huu @ qu_dot, ge * e_e, atol=1e-9)
    # the task law in least squares over the free actuators (first-order optimality), and
    # moving the held actuator inward would not help (its multiplier points outward)
    jac = held_jacobian(b)
    r = gz * ex - b.Ju @ np.linalg.solve(b.Huu, ge * e_e)
    residual = r - jac @ qa_dot
    multiplier = jac.T @ residual
    scale = np.linalg.norm(jac) * np.linalg.norm(r)
    assert np.all(np.abs(multiplier[1:]) < 1e-9 * scale)
    assert multiplier[0] > -1e-9 * scale  # 0 when the free actuators meet the task law
    if model.m - 1 >= model.task_dim:  # enough free actuators (dancer): the task law exactly
        assert np.linalg.norm(residual) < 1e-9 * np.linalg.norm(r)


@pytest.mark.parametrize("compiled", [False, True])
def test_alg2_stepper_at_a_limit_keeps_moving_the_other_actuator(compiled):
    """In the loop (the safety layer between propose and commit, 100 Hz, 15 s of simulated
    time): a soft-arm target that needs actuator 1 beyond its limit. Actuator 1 stops at the
    limit; actuator 2 keeps reducing the error until no admissible motion does (first-order
    optimality), inside its range and with q̄ on E. The paper's rates with actuator 1 merely
    clipped left actuator 2 where the error was 1.7× the one at the block, off E
    (‖G_u‖ = 8e-3) and with ``J₂ᵀ ex`` far from 0."""
    from poise.motion.compiled_steppers import make_compiled_stepper
    from poise.motion.params import LiveParams
    from poise.motion.safety import SafetyLimits, limit_setpoint
    from poise.motion.stepper import make_stepper

    model = load_model("soft_arm_stiff")
    target, _ = held_target(model, [0.05, -0.01])  # qa1 = 0.05 > qa_max = 0.04
    limits = SafetyLimits.build(model.m, model.qa_min, model.qa_max, None, None, None)
    stepper = (make_compiled_stepper("alg2", model) if compiled
               else make_stepper("alg2", model))
    _, start = held_target(model, [0.01, 0.01])  # bent: away from the straight singularity
    stepper.reset(start.q, limits.qa_min, limits.qa_max)
    p = LiveParams("alg2", "dls", 2.0, 2.0, 20.0, 0.0, target, "ff")
    dt, errors, blocked_at = 0.01, [], None
    for cycle in range(1500):
        qa, _, _ = limit_setpoint(limits, stepper.qa, stepper.propose(p, None, dt), dt)
        stepper.commit(qa)
        # q̄a = C q̄ after c⁻¹: within the limits up to rounding
        assert np.all(stepper.qa >= limits.qa_min - 1e-15)
        assert np.all(stepper.qa <= limits.qa_max + 1e-15)
        errors.append(float(np.linalg.norm(target - stepper.x_bar)))
        if blocked_at is None and stepper.qa[0] >= limits.qa_max[0] - 1e-15:
            blocked_at = cycle
    assert blocked_at is not None
    assert stepper.qa[0] == pytest.approx(limits.qa_max[0], abs=1e-15)
    assert limits.qa_min[1] + 0.01 < stepper.qa[1] < limits.qa_max[1] - 0.01
    assert errors[-1] < errors[blocked_at]  # it went on reducing the error after the block
    b = blocks(model, stepper.q_bar)
    assert np.linalg.norm(b.Gu) < 1e-8
    jac, ex = held_jacobian(b), target - b.x
    assert abs(jac[:, 1] @ ex) < 1e-8 * np.linalg.norm(jac[:, 1]) * np.linalg.norm(ex)


def test_held_ik_benchmark_runs_from_the_package(tmp_path, capsys):
    """``poise bench held-ik`` runs the packaged protocol (an installed wheel has no bench/):
    one target on the double pendulum, JSON with both implementations' solves."""
    import json

    from poise.cli import main

    out = tmp_path / "held_ik.json"
    assert main(["bench", "held-ik", "--solves", "1", "--models", "double_pendulum",
                 "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    (row,) = report["rows"]
    assert row["model"] == "double_pendulum"
    for label in ("alg1", "alg1_numpy", "alg2", "alg2_numpy"):
        assert row[f"{label}_success_rate"] == 1.0
    assert row["alg2_misses_alg1"] == 0 and row["alg2_solve_ratio"] > 0
    assert "per solve" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="unknown nobody"):
        main(["bench", "held-ik", "--models", "nobody"])
