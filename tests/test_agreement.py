"""Feedback integrates only along the task directions whose answer the stated uncertainty
cannot reverse (:mod:`poise.motion.agreement`): near a fold of the soft arm's held map a plant
with its springs 20 % stiffer answers the weak direction with the opposite sign; the error is
projected off that direction, and the linearised loop on that plant, unstable at every gain
without the projection, is stable with it."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import plant_with_springs

from poise.benchmarks.control import config_for
from poise.cli.run_cmd import stability_lines
from poise.controller.simulate import SimulatedLoop
from poise.ik.held import held_jacobian
from poise.ik.statics import solve_statics
from poise.models import load_model
from poise.models.actuation import blocks, join, split
from poise.motion.agreement import agreed_projection, direction_gains
from poise.motion.bounds import StabilityReport
from poise.motion.stability import IKGains, LoopLinearisation

#: The soft arm's actuators near its fold (the S-bend whose tip points along the arm, where
#: the held Jacobian's smallest singular value nearly vanishes), and well away from it.
NEAR_FOLD = (0.026, -0.010)
BENT = (0.03, 0.03)
UNCERTAINTY = 0.2


def _held(model, qa) -> np.ndarray:
    sol = solve_statics(model, np.asarray(qa, dtype=float), split(model, np.zeros(model.n))[1],
                        tol=1e-12, max_iter=200)
    assert sol.converged and sol.stable
    return np.asarray(sol.q, dtype=float)


@pytest.fixture(scope="module")
def arm():
    return load_model("soft_arm_stiff")


def _finite_difference_gains(model, plant, q, h=1e-6) -> np.ndarray:
    """``u_iᵀ J* v_i / σ_i`` (``u_i``, ``σ_i``, ``v_i`` the model's held Jacobian's) with the
    plant's held Jacobian ``J*`` at ``q`` by central differences of the plant's held map
    through ``q``: its task value where ``G*_u`` keeps the value it has at ``q`` (Newton on
    ``q_u``) with the actuators at ``qa ± h v_i`` (the plant linearised at the model's
    configuration, as the gain bound's variants are)."""
    U, s, Vt = np.linalg.svd(held_jacobian(blocks(model, q)), full_matrices=False)
    qa, qu = split(model, q)
    offset = blocks(plant, q).Gu

    def held_x(qa_: np.ndarray) -> np.ndarray:
        u = qu.copy()
        for _ in range(50):
            b = blocks(plant, join(plant, qa_, u))
            r = b.Gu - offset
            if np.linalg.norm(r) < 1e-13:
                break
            u = u - np.linalg.solve(b.Huu, r)
        return np.asarray(plant.fk(join(plant, qa_, u)), dtype=float)

    return np.array([float(U[:, i] @ (held_x(qa + h * Vt[i]) - held_x(qa - h * Vt[i])))
                     / (2 * h * s[i]) for i in range(s.size)])


def test_near_the_fold_a_plant_20_percent_off_answers_the_weak_direction_reversed(arm,
                                                                                  tmp_path):
    """The loop gains of :func:`direction_gains` are the least over the plants with springs
    0.8 and 1.2 × the model's, each checked against a finite difference of that plant's held
    map: the strong direction answers within 2 % of the model, the weak one (σ under 1 % of
    the strong) ten times as strongly, with the opposite sign on the softer plant."""
    q = _held(arm, NEAR_FOLD)
    sigma = np.linalg.svd(held_jacobian(blocks(arm, q)), compute_uv=False)
    assert sigma[1] < 0.01 * sigma[0]
    per_plant = []
    for i, scale in enumerate((1.0 - UNCERTAINTY, 1.0 + UNCERTAINTY)):
        (tmp_path / str(i)).mkdir()
        plant = load_model(plant_with_springs("soft_arm_stiff", scale, tmp_path / str(i)))
        per_plant.append(_finite_difference_gains(arm, plant, q))
    _, gains = direction_gains(arm, q, UNCERTAINTY)
    np.testing.assert_allclose(gains, np.minimum(*per_plant), rtol=1e-6)
    assert np.all(np.abs(np.array(per_plant)[:, 0] - 1.0) < 0.02)
    assert per_plant[0][1] < -5.0 and per_plant[1][1] > 5.0  # reversed on the softer one


def test_the_projection_drops_only_the_disputed_direction(arm):
    q = _held(arm, NEAR_FOLD)
    U, _ = direction_gains(arm, q, UNCERTAINTY)
    P = agreed_projection(arm, q, UNCERTAINTY)
    assert P is not None
    np.testing.assert_allclose(P, P.T, atol=1e-12)
    np.testing.assert_allclose(P @ P, P, atol=1e-12)
    np.testing.assert_allclose(P @ U[:, 0], U[:, 0], atol=1e-12)  # the strong one kept
    np.testing.assert_allclose(P @ U[:, 1], 0.0, atol=1e-12)  # the weak one dropped
    assert P.flags.c_contiguous and P.dtype == np.float64  # as the cycle kernel takes it


def test_away_from_the_fold_or_without_an_uncertainty_nothing_is_projected(arm):
    bent = _held(arm, BENT)
    _, gains = direction_gains(arm, bent, UNCERTAINTY)
    assert np.all(gains > 0.5)
    assert agreed_projection(arm, bent, UNCERTAINTY) is None
    assert agreed_projection(arm, _held(arm, NEAR_FOLD), 0.0) is None


def test_projected_feedback_is_stable_on_the_plant_that_reverses_the_weak_direction(arm):
    """The linearised loop (plant, actuators, Algorithm 2 in feedback, 1 kHz) on the softer
    variant: without the projection no gain is stable (an integrator of negative gain along
    the weak direction), and on the model the weak direction's gain 1/σ leaves a bound of
    0.05 /s; with it every plant of the uncertainty has a bound like the model's (about 2 /s,
    counted in the robust bound), and at half that bound all of them are stable."""
    q = _held(arm, NEAR_FOLD)
    loop = LoopLinearisation(arm, q, 1e-3, uncertainty=UNCERTAINTY)
    assert loop.projection is not None
    g = IKGains("alg2", "fb", "dls", 0.02, 0.0, 1.0, 10.0)
    softer = loop.variants()[0]
    assert softer.stiffness_scale == pytest.approx(1.0 - UNCERTAINTY)
    bare = LoopLinearisation(arm, q, 1e-3, uncertainty=UNCERTAINTY, projection=None)
    assert bare.variants()[0].nominal_bound("gamma_z", g) == 0.0
    assert bare.nominal_bound("gamma_z", g) < 0.1
    bounds = [lin.nominal_bound("gamma_z", g) for lin in (loop, *loop.variants())]
    assert min(bounds) > 1.0
    bound = loop.bound("gamma_z", g)
    assert bound == min(bounds)
    half = g.with_gain("gamma_z", 0.5 * bound)
    for plant in (loop, *loop.variants()):
        assert plant.spectral_radius(half) < 1.0


#: The first target of ``poise bench control --plant real`` on ``soft_arm_stiff`` [m]: from
#: rest the model reaches it only near its fold (σ_min/σ_max = 4e-4 at the plan's goal).
FOLD_TARGET = (0.5055465058483466, -0.8047140205619208)


def _hold_at_the_fold(plant, projected: bool) -> tuple[np.ndarray, int]:
    """The task error [m] over 8 s of simulated time of ``soft_arm_stiff`` in feedback
    (Algorithm 2, automatic gains) against ``plant``, sent to :data:`FOLD_TARGET`, and the
    ring watch's back-offs; ``projected`` False integrates the whole error at the gains the
    projected loop was given (the counterfactual)."""
    loop = SimulatedLoop(config_for("soft_arm_stiff", "fb", "alg2", str(plant)), seed=1)
    loop.start()
    target = np.array(FOLD_TARGET)
    loop.set_target(target)
    plan_loop = loop.step.plan.loop
    assert plan_loop.projection is not None  # the plan is at the fold
    report = loop.params.stability
    assert report.left_out == 1 and "feedback leaves out 1 of 2 task directions" in report.why()
    again = StabilityReport.from_dict(report.as_dict())
    assert (again.left_out, again.task_dim) == (1, 2)
    assert any(line.startswith("left out") and "±20 %" in line
               for line in stability_lines(loop.params.as_dict()))
    if not projected:
        plan_loop.__dict__["projection"] = None  # the cached property, overridden
    truth = loop.plant.physical
    errors = []
    for _ in range(round(8.0 / loop.period)):
        loop.cycle()
        errors.append(float(np.linalg.norm(target - truth.fk(loop.plant.q))))
    return np.array(errors), loop.step.ring.rings


def test_feedback_holds_a_target_planned_at_the_fold_where_the_whole_error_rings(tmp_path):
    """Against a plant with springs 1.2 × the model's, the arm sent to a target the model
    reaches only near its fold comes to rest within 1 mm of it with the error projected off
    the disputed direction (no ring); integrating the whole error at the same gains rings
    (the ring watch backs the gain off) and ends several millimetres off."""
    plant = plant_with_springs("soft_arm_stiff", 1.0 + UNCERTAINTY, tmp_path)
    errors, rings = _hold_at_the_fold(plant, projected=True)
    last = errors[-len(errors) // 4:]  # the last 2 s
    assert rings == 0 and last.max() < 1e-3
    errors, rings = _hold_at_the_fold(plant, projected=False)
    assert rings >= 1 and errors[-len(errors) // 4:].max() > 3e-3
