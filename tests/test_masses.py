"""The plant's masses from the efforts that hold it (issue 35): the estimate of the first
mass moments (:mod:`poise.motion.masses`), the task bias it gives a centre-of-mass task, the
plans aimed for the plant it describes (:func:`~poise.motion.planner.for_plant`), and what
they do for the dancer whose masses are off body by body (``mixed15``)."""

from __future__ import annotations

import numpy as np
import pytest

from poise.benchmarks.calibrated import weigh
from poise.benchmarks.control import SEED, band, config_for, reachable_targets
from poise.controller.simulate import SimulatedLoop
from poise.ik.held_common import held_jacobian
from poise.ik.statics import solve_statics
from poise.models.actuation import blocks, join, split
from poise.models.registry import load_model
from poise.motion.masses import PASSIVE_FRICTION, MassEstimate, mass_task
from poise.motion.planner import for_plant, plan_target
from poise.motion.retarget import (
    BIAS_LEAD,
    BIAS_SIGMA,
    BIAS_SIGNIFICANCE,
    BIAS_THRESHOLD,
    Retargeting,
    pinned_basis,
    static_trend,
)
from poise.sim.named import write_named

TOL = 2e-3


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """The dancer's ``mixed15`` plant: its file and its true model."""
    path = write_named("dancer", "mixed15", tmp_path_factory.mktemp("plant"))
    return path, load_model(path)


def held_poses(plant, count, seed=1):
    """``count`` stable configurations where ``plant`` rests, actuators drawn in the middle
    of their range, with the efforts that hold each: ``Aᵀ τ = G(q)`` (statics, seed 000)."""
    rng = np.random.default_rng(seed)
    lo, hi = np.asarray(plant.qa_min, float), np.asarray(plant.qa_max, float)
    A = np.asarray(plant.C, float)[:plant.m]
    out = []
    while len(out) < count:
        sol = solve_statics(plant, lo + (hi - lo) * rng.uniform(0.2, 0.8, plant.m),
                            np.zeros(plant.n - plant.m))
        if sol.converged and sol.stable:
            tau = np.linalg.lstsq(A.T, plant.G(sol.q), rcond=None)[0]
            assert np.allclose(A.T @ tau, plant.G(sol.q), atol=1e-9)  # held: G ∈ range(Aᵀ)
            out.append((sol.q, tau))
    return out


def test_the_plants_centre_of_mass_is_found_from_the_efforts_that_hold_it(mixed):
    """Masses 5–15 % off body by body and the pointe's spring 8 % stiffer: from the efforts
    holding the plant at rest in one configuration, with its weighed mass, the estimated
    centre of mass is within 0.5 mm of the plant's everywhere (the model's is up to ~5 cm
    off); after several configurations the moments are the plant's to 0.1 %, and so is the
    plant model they make (its held configuration and task at the same actuators)."""
    _, plant = mixed
    model = load_model("dancer")
    poses = held_poses(plant, 8)
    estimate = MassEstimate(model, total_mass=plant.total_mass)
    assert not estimate.bias(poses[0][0]).any()  # nothing seen yet: no bias
    model_off = max(np.linalg.norm(model.fk(q) - plant.fk(q)) for q, _ in poses)
    assert model_off > 0.02
    for count, (q, tau) in enumerate(poses, start=1):
        estimate.add(q, tau)
        allowed = 5e-4 if count == 1 else 1e-4
        worst = max(np.linalg.norm(estimate.com(p) - plant.fk(p)) for p, _ in poses)
        assert worst < allowed
        # the bias is what the model's task value gets wrong there
        assert np.linalg.norm(estimate.bias(q) - (model.fk(q) - plant.fk(q))) < allowed
    assert np.allclose(estimate.moments, plant.a_w, rtol=1e-3)
    assert estimate.windows == len(poses)
    estimated = estimate.plant_model()
    assert np.allclose(estimated.masses, plant.masses, rtol=2e-3)
    assert estimated.stiffness[0] == pytest.approx(plant.stiffness[0], rel=2e-3)
    for q, _ in poses:
        qa, qu = split(plant, q)
        there = solve_statics(estimated, qa, qu)
        assert np.linalg.norm(estimated.fk(there.q) - plant.fk(q)) < 5e-4


def test_statics_hold_the_weight_spread_but_the_total_mass_must_be_weighed(mixed):
    """The pointe's spring and the stance leg's moment enter the one passive equation with
    nearly the same column, so the total mass is whatever the estimate is held to: the
    model's (54 kg) leaves the estimated centre of mass more than 5 mm off on this plant
    (55.6 kg); the scale's reading (3 digits) brings it within a millimetre."""
    _, plant = mixed
    model = load_model("dancer")
    poses = held_poses(plant, 6)
    reading = weigh("dancer", mixed[0])[0]
    for mass in (None, reading):
        estimate = MassEstimate(model, total_mass=mass)
        for q, tau in poses:
            estimate.add(q, tau)
        masses = np.linalg.solve(np.asarray(model.W_com).T, estimate.moments)
        held_to = model.total_mass if mass is None else mass
        assert masses.sum() == pytest.approx(held_to, rel=1e-3)
        worst = max(np.linalg.norm(estimate.com(q) - plant.fk(q)) for q, _ in poses)
        assert (worst > 5e-3) if mass is None else (worst < 1e-3)


def test_an_actuator_that_moves_reads_more_effort_in_proportion_to_its_speed(mixed):
    """A servo's effort read while its setpoint ramps lags statics by ``c q̇a`` (the dancer's
    arm: −61 N·m·s/rad). With the rate of each window given, one coefficient per actuator
    is estimated with the masses and the centre of mass comes out right; taking the efforts
    as static instead leaves it off by more than the tolerance."""
    _, plant = mixed
    model = load_model("dancer")
    lag = np.array([-180.0, -200.0, -61.0])
    rng = np.random.default_rng(7)
    with_rate, without = (MassEstimate(model, plant.total_mass) for _ in range(2))
    poses = held_poses(plant, 10, seed=3)
    for q, tau in poses:
        rate = 0.02 * rng.standard_normal(3)
        read = tau + lag * rate
        with_rate.add(q, read, rate)
        without.add(q, read)
    err_with = max(np.linalg.norm(with_rate.com(q) - plant.fk(q)) for q, _ in poses)
    err_without = max(np.linalg.norm(without.com(q) - plant.fk(q)) for q, _ in poses)
    assert err_with < 2e-4 < TOL < err_without


def held_with_passive_friction(plant, q, friction):
    """``plant`` at rest near ``q`` with its passive joint holding ``friction`` [N·m] that no
    effort shows: its passive coordinates moved until ``G_u(q) = friction`` (Newton), the
    actuators' efforts those holding the rest (``Aᵀ τ = G`` on their rows). ``(q, τ)``."""
    A = np.asarray(plant.C, float)[:plant.m]
    passive = np.flatnonzero(~np.any(A != 0.0, axis=0))
    q = np.array(q, dtype=float)
    for _ in range(30):
        q[passive] -= np.linalg.solve(plant.dG(q)[np.ix_(passive, passive)],
                                      plant.G(q)[passive] - friction)
    tau = np.linalg.lstsq(A.T, plant.G(q), rcond=None)[0]
    assert np.allclose((plant.G(q) - A.T @ tau)[passive], friction, atol=1e-9)
    return q, tau


def test_with_friction_shown_the_passive_joints_unseen_friction_is_allowed_for(mixed):
    """``real``'s pointe (passive) holds up to 2.1 N·m of friction at rest (its breakaway),
    which no effort measures: its equation is off by that much, window by window. Trusted
    to the effort floor (0.43 N·m), ten such windows on ``mixed15`` leave the estimated
    centre of mass 0.3–1.2 mm off; once friction was shown (:meth:`MassEstimate.restart`
    with ``friction``) the equation counts with :data:`PASSIVE_FRICTION` × the largest
    gravity torque (2.2 N·m) and the actuators' exact efforts pin it at least five times
    closer (0.01–0.1 mm).
    The allowance stays for later restarts."""
    _, plant = mixed
    model = load_model("dancer")
    rng = np.random.default_rng(3)
    poses = held_poses(plant, 10)
    ratios = []
    for _ in range(5):
        windows = [held_with_passive_friction(plant, q, rng.uniform(-2.1, 2.1))
                   for q, _ in poses]
        worst = []
        for friction in (False, True):
            estimate = MassEstimate(model, total_mass=plant.total_mass)
            estimate.restart(friction=friction)
            assert estimate.passive_floor == pytest.approx(
                PASSIVE_FRICTION * model.gravity * float(np.max(np.abs(model.a_w)))
                if friction else estimate.effort_floor)
            for q, tau in windows:
                estimate.add(q, tau)
            worst.append(max(np.linalg.norm(estimate.com(q) - plant.fk(q))
                             for q, _ in windows))
        assert worst[0] > 2.5e-4 and worst[1] < 1.5e-4
        ratios.append(worst[0] / worst[1])
    assert min(ratios) > 5.0
    kept = estimate.passive_floor
    estimate.restart()
    assert estimate.passive_floor == kept and estimate.windows == 0


def test_what_the_windows_do_not_show_is_uncertain_and_not_used():
    """A body whose gravity torque no window has shown (the dancer's limbs hanging straight
    down at the rest pose: ``cos ψ = 0``) keeps the prior's 30 % and the centre of mass its
    centimetres of sigma, so :meth:`Retargeting.bias_at` uses no bias; efforts scattered by
    1 % of the largest gravity torque (told as their spread) stray the bias within 3 sigma;
    the sensors' own noise averaged over a window leaves it far below the threshold."""
    model = load_model("dancer")
    retarget = Retargeting(model, 0.004, TOL)
    rest = solve_statics(model, np.zeros(3), np.zeros(1)).q
    retarget.masses.add(rest, np.zeros(3))
    assert retarget.masses.com_sigma(rest) > 10 * BIAS_SIGMA * TOL
    rng = np.random.default_rng(5)
    torque = model.gravity * float(np.max(model.a_w))
    exact, noisy, quiet = MassEstimate(model), MassEstimate(model), MassEstimate(model)
    retarget.masses = noisy
    for q, tau in held_poses(model, 6, seed=2):
        exact.add(q, tau)
        scatter = 0.01 * torque
        noisy.add(q, tau + scatter * rng.standard_normal(3), error=np.full(3, scatter))
        quiet.add(q, tau + 0.05 / np.sqrt(1000) * rng.standard_normal(3))
        assert np.linalg.norm(exact.bias(q)) < 1e-9  # the model's own efforts: no bias
        assert np.linalg.norm(noisy.bias(q)) < 3 * noisy.com_sigma(q)
        assert noisy.com_sigma(q) > BIAS_SIGMA * TOL and not retarget.bias_at(q).any()
        assert np.linalg.norm(quiet.bias(q)) < 0.1 * BIAS_THRESHOLD * TOL
    assert np.allclose(exact.moments, model.a_w, rtol=1e-12)


def test_the_bias_is_used_in_the_directions_the_windows_pin_down(mixed):
    """The ``mixed15`` dancer resting where its first bench target took it, its gesture leg
    near straight down (no gravity torque to show that leg's moment): one window pins the
    centre of mass across to about a millimetre and leaves it a centimetre uncertain up and
    down, too uncertain for the bias as a whole; :meth:`Retargeting.bias_at` uses it across,
    where it is the plant's offset from the model to within its sigma, and not along the
    uncertain direction; what it leaves is what the model gets wrong along that one (a
    tenth of a millimetre here, against 28 mm without it). Only once the friction test has
    found no friction: with friction the windows may disagree more than a few of them show."""
    _, plant = mixed
    model = load_model("dancer")
    q = solve_statics(plant, np.array([1.193, 2.574, -1.456]), np.zeros(1)).q
    A = np.asarray(plant.C, float)[:plant.m]
    retarget = Retargeting(model, 0.004, TOL, total_mass=plant.total_mass)
    retarget.masses.add(q, np.linalg.lstsq(A.T, plant.G(q), rcond=None)[0])
    assert not retarget.bias_at(q).any()  # not before the friction test has found none
    retarget.friction_test = "done"
    variances, directions = np.linalg.eigh(retarget.masses.com_covariance(q))
    pinned, loose = directions.T
    sigma = np.sqrt(variances)
    assert sigma[0] < 0.75 * BIAS_SIGMA * TOL < 2 * BIAS_SIGMA * TOL < sigma[1]
    assert retarget.masses.com_sigma(q) > BIAS_SIGMA * TOL  # too loose as a whole
    offset = model.fk(q) - plant.fk(q)
    used = retarget.bias_at(q)
    assert abs(offset @ pinned) > 10 * TOL
    assert abs(used @ pinned - offset @ pinned) < 3 * sigma[0]
    assert abs(used @ loose) < 1e-12
    assert np.linalg.norm(offset - used) == pytest.approx(abs(offset @ loose), abs=3 * sigma[0])
    assert np.linalg.norm(offset - used) < 0.1 * np.linalg.norm(offset)
    retarget.friction = True  # friction shown: only an estimate pinned as a whole is used
    assert not retarget.bias_at(q).any()


def test_with_friction_a_bias_many_sigmas_large_is_used_before_it_is_pinned_down(mixed):
    """With friction shown, only dithered windows teach the masses, and no direction alone is
    trusted: the ``mixed15`` dancer's bias of 44 mm, its windows' efforts scattered by 0.3 %
    of the largest gravity torque, is pinned to 10 mm by the first window and to under 3 mm
    by the seventh, never to the tolerance's 2 mm. :meth:`Retargeting.bias_at` uses it, in full,
    from :data:`BIAS_LEAD` sigmas on, and what it leaves then is within three sigmas, a
    fraction of the bias; below that, and before friction was shown, none. A bias already
    in use is kept while it is :data:`BIAS_SIGNIFICANCE` sigmas or more."""
    _, plant = mixed
    model = load_model("dancer")
    torque = model.gravity * float(np.max(model.a_w))
    scatter = 0.003 * torque
    (here, _), *windows = held_poses(plant, 8, seed=3)
    offset = model.fk(here) - plant.fk(here)
    retarget = Retargeting(model, 0.004, TOL, total_mass=plant.total_mass)
    rng = np.random.default_rng(7)
    used_from, kept_only = None, 0
    for count, (q, tau) in enumerate(windows, start=1):
        retarget.masses.add(q, tau + scatter * rng.standard_normal(3),
                            error=np.full(3, scatter))
        sigma = retarget.masses.com_sigma(here)
        ratio = np.linalg.norm(retarget.masses.bias(here)) / sigma
        assert sigma > BIAS_SIGMA * TOL  # never pinned down to the tolerance
        retarget.task_bias[:] = 0.0  # none in use
        retarget.friction, retarget.friction_test = False, ""
        assert not retarget.bias_at(here).any()  # before friction was shown (or its test)
        retarget.friction, retarget.friction_test = True, "done"
        used = retarget.bias_at(here)
        assert used.any() == (ratio >= BIAS_LEAD)
        if used.any():
            used_from = used_from or count
            assert np.linalg.norm(used - offset) < 3 * sigma
            assert np.linalg.norm(used - offset) < 0.1 * np.linalg.norm(offset)
        retarget.task_bias = offset.copy()  # one in use: kept from fewer sigmas on
        assert retarget.bias_at(here).any() == (ratio >= BIAS_SIGNIFICANCE)
        kept_only += BIAS_SIGNIFICANCE <= ratio < BIAS_LEAD
    assert used_from is not None and used_from < len(windows)  # used, and not at once
    assert kept_only  # a window whose bias is kept in use but not taken up
    assert np.linalg.norm(offset) > 10 * TOL


def test_the_bias_in_use_follows_the_configuration_the_arm_is_in(mixed):
    """The task bias is a function of the configuration, ``b(q) = h(q) − ĥ(q)``. Taken up
    where a window rested (:meth:`Retargeting.take_bias`) and held there, it is off the
    plant's offset by as much as the arm moves it; followed to where the arm is now
    (:meth:`Retargeting.follow_bias`) it is the plant's offset there to within the estimate.
    None in use stays none (a bias is taken up or dropped only where a window ends); one
    used only across (pinned there alone) is followed across only."""
    _, plant = mixed
    model = load_model("dancer")
    poses = held_poses(plant, 6)
    retarget = Retargeting(model, 0.004, TOL, total_mass=plant.total_mass)
    retarget.friction_test = "done"
    assert not retarget.follow_bias(poses[1][0]).any()  # none in use: none followed
    for q, tau in poses[2:]:
        retarget.masses.add(q, tau)
    (rest, _), (now, _) = poses[:2]
    shift = retarget.take_bias(rest)
    taken = retarget.task_bias.copy()
    assert np.array_equal(shift, taken)  # from none
    offset = model.fk(now) - plant.fk(now)  # what the model's task gets wrong at ``now``
    stale = np.linalg.norm(taken - offset)
    assert stale > 2 * TOL
    followed = retarget.follow_bias(now)
    assert np.linalg.norm(followed - offset) < 1e-4 < 0.01 * stale  # as the estimate is
    assert np.array_equal(retarget.task_bias, followed)
    assert np.allclose(retarget.take_bias(now), 0.0, atol=1e-12)  # the window agrees

    # pinned across only (one window where the gesture leg hangs straight down; see
    # test_the_bias_is_used_in_the_directions_the_windows_pin_down)
    A = np.asarray(plant.C, float)[:plant.m]
    across = Retargeting(model, 0.004, TOL, total_mass=plant.total_mass)
    across.friction_test = "done"
    q = solve_statics(plant, np.array([1.193, 2.574, -1.456]), np.zeros(1)).q
    across.masses.add(q, np.linalg.lstsq(A.T, plant.G(q), rcond=None)[0])
    across.take_bias(q)
    _, directions = np.linalg.eigh(across.masses.com_covariance(q))
    pinned, loose = directions.T
    there = q + np.array([0.02, -0.05, 0.04, 0.03])
    followed = across.follow_bias(there)
    assert abs(followed @ loose) < 1e-12
    assert followed @ pinned == pytest.approx(across.masses.bias(there) @ pinned, abs=1e-12)
    assert abs(followed @ pinned - across.bias_at(q) @ pinned) > 1e-4  # it moved


def test_the_pinned_part_keeps_the_most_certain_directions_within_the_limit():
    """:func:`pinned_basis`: the principal directions of the covariance from the most
    certain on while their variances sum to at most the limit², the bias projected on them
    and their sigma; nothing where even the most certain is looser than the limit."""
    turn = np.array([[np.cos(0.4), -np.sin(0.4)], [np.sin(0.4), np.cos(0.4)]])
    bias = np.array([0.02, -0.01])
    for sigmas, kept in (((1e-3, 1e-2), 1), ((2e-3, 2.5e-3), 1), ((1e-3, 2e-3), 2),
                         ((4e-3, 5e-3), 0)):
        covariance = turn @ np.diag(np.square(sigmas)) @ turn.T
        pinned, sigma = pinned_basis(covariance, 3e-3)
        part = pinned @ (pinned.T @ bias)
        basis = turn[:, :kept]
        assert np.allclose(part, basis @ (basis.T @ bias), atol=1e-15)
        assert sigma == pytest.approx(float(np.sqrt(np.sum(np.square(sigmas[:kept])))))


@pytest.mark.parametrize("robot", ["double_pendulum", "soft_arm_stiff", "tendon_3link"])
def test_a_task_not_through_the_masses_is_left_alone(robot):
    """A tip task does not depend on the masses: no estimate, no bias, no plant model."""
    model = load_model(robot)
    estimate = MassEstimate(model, total_mass=1.0)
    assert not mass_task(model) and not estimate.enabled
    q = np.zeros(model.n)
    estimate.add(q, np.ones(model.m))
    assert estimate.windows == 0 and not estimate.bias(q).any()
    with pytest.raises(ValueError, match="not its centre of mass"):
        estimate.plant_model()


def test_the_static_part_of_a_window_with_a_moving_setpoint_and_a_sway():
    """:func:`static_trend` on a line plus a decaying sway at the slowest mode plus noise:
    the value at the window's middle and the slope are the line's, the spread the noise's,
    and the value's error the noise's averaged over the window's samples, ``σ / √N``."""
    period, n = 0.004, 1000
    t = np.arange(n) * period
    sigma, omega = 0.2, 1.9
    rng = np.random.default_rng(2)
    noise = 0.01 * rng.standard_normal(n)
    samples = (3.0 + 0.5 * (t - 0.5 * t[-1]) + 0.8 * np.exp(-sigma * t) * np.cos(omega * t + 1)
               + noise)[:, None]
    value, rate, spread, error = static_trend(samples, period, sigma, omega)
    assert value[0] == pytest.approx(3.0, abs=2e-3)
    assert rate[0] == pytest.approx(0.5, abs=3e-3)
    assert spread[0] == pytest.approx(0.01, rel=0.1)
    assert error[0] == pytest.approx(0.01 / np.sqrt(n), rel=0.1)


def test_a_plan_aimed_for_the_plant_lands_where_the_plant_holds_the_target(mixed):
    """:func:`for_plant` with the plant itself: at the plan's actuator goal the plant rests
    with its centre of mass at the target (the model's plan leaves it centimetres off), the
    plan carries the model's task value there minus the target as its task bias, and its
    error map inverts ``J* J⁺``. Also where at the model's goal the plant rests on the other
    side of its pointe (bench target 16), via the plant's own held configuration."""
    path, plant = mixed
    model = load_model("dancer")
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1", path), seed=SEED)
    targets = reachable_targets(plant, loop.limits.qa_min, loop.limits.qa_max, 17, SEED)
    for index in (2, 16):
        target = np.asarray(targets[index], dtype=float)
        plan = plan_target(model, target, [np.zeros(4)], TOL)
        qa, qu = split(model, plan.q_goal)
        off = plant.fk(solve_statics(plant, qa, qu).q) - target
        assert np.linalg.norm(off) > 10 * TOL
        aimed = for_plant(model, plan, plant, TOL, loop.limits.qa_min, loop.limits.qa_max)
        assert aimed is not plan and np.array_equal(aimed.serves, target)
        rest = solve_statics(plant, aimed.qa_goal, split(model, aimed.q_goal)[1])
        assert rest.converged and rest.stable
        assert np.linalg.norm(plant.fk(rest.q) - target) < TOL
        assert np.allclose(aimed.task_bias, model.fk(rest.q) - target, atol=1e-6)
        assert np.allclose(aimed.plant_rest, rest.q, atol=1e-6)
        answer = held_jacobian(blocks(plant, rest.q)) @ np.linalg.pinv(
            held_jacobian(blocks(model, aimed.q_goal)))
        assert np.allclose(aimed.error_map @ answer, np.eye(2), atol=1e-9)
        assert np.allclose(aimed.target, model.fk(aimed.q_goal))
        assert np.allclose(join(model, *split(model, aimed.q_goal)), aimed.q_goal)


def run_targets(path, indices, *, estimate=True, seconds=30.0):
    """The dancer's nominal controller in feedback on the plant ``path``, given the weighed
    mass, from rest through bench targets ``indices`` (``seconds`` each): per target the
    plant's true task error [m] at the end and the corrections made; and the loop."""
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1", path,
                                    total_mass=weigh("dancer", path)[0]), seed=SEED)
    truth = loop.plant.physical
    targets = reachable_targets(truth, loop.limits.qa_min, loop.limits.qa_max,
                                max(indices) + 1, SEED)
    retarget = loop.step.retarget
    retarget.masses.enabled = estimate
    loop.start()
    out = []
    for index in indices:
        loop.set_target(targets[index])
        loop.run(seconds)
        out.append((float(np.linalg.norm(truth.fk(loop.plant.q) - targets[index])),
                    len(retarget.corrections)))
    return out, loop


def test_feedback_brings_the_plants_centre_of_mass_to_the_target(mixed):
    """End to end in simulated time, the dancer's model with the nominal masses, the plant
    those of ``mixed15``, bench targets 0–2 from rest (45 s each). Feedback on the model's
    centre of mass alone ends where the model's is at the target, the plant's centimetres
    away. With the masses estimated from the held efforts: target 0, where the gesture leg
    hangs near straight down and its mass shows only across, ends within the bench's band
    by the bias across (it ended 29 mm off with the bias used only where pinned as a whole);
    so does target 1; target 2, planned once the estimate is pinned down, is aimed for the
    plant and its first move lands there, with no correction."""
    path, plant = mixed
    eps = band(plant)
    [(blind, _)], _ = run_targets(path, [2], estimate=False)
    assert blind > 10 * eps
    seen, loop = run_targets(path, [0, 1, 2], seconds=45.0)
    (first, _), (second, _), (third, corrections) = seen
    assert first < eps and second < eps and third < eps
    assert corrections == 0
    plan = loop.step.plan
    assert plan.task_bias is not None and plan.error_map is not None
    retarget = loop.step.retarget
    assert np.linalg.norm(retarget.task_bias) > 10 * TOL
    # the bias in use is the estimate's where the arm rests now (followed, 0 here), not
    # the plan's where it ended (12 µm off when it is not followed)
    here = loop.measured()
    assert np.linalg.norm(retarget.task_bias - retarget.masses.bias(here)) < 1e-3 * TOL
    assert np.linalg.norm(retarget.task_bias - (loop.model.fk(here) - plant.fk(here))) < 0.5 * TOL


def test_the_real_time_parent_plans_for_the_plant_its_child_estimated(mixed):
    """The child's ``plant_estimate`` event (the bodies its held efforts show) reaches the
    parent's mirror; the parent makes that plant (:func:`with_bodies`, once per estimate)
    and aims its plans for it, as the child's own step does: at the plan's actuator goal
    the plant rests with its centre of mass at the target. When the child drops the
    estimate (``masses`` None) the parent plans on the model again, centimetres off."""
    from poise.api.bus import CycleSample, Event
    from poise.controller.realtime.messages import EventBatch
    from poise.controller.realtime.mirror import ChildMirror
    from poise.controller.realtime.planning import ParentPlanner
    from poise.models.planar_tree import with_bodies
    from poise.motion.params import LiveParams

    path, plant = mixed
    model = load_model("dancer")
    estimate = MassEstimate(model, total_mass=plant.total_mass)
    for q, tau in held_poses(plant, 8):
        estimate.add(q, tau)
    masses, stiffness = estimate.bodies()
    made = with_bodies(model, masses, stiffness=stiffness)
    assert np.allclose(made.masses, estimate.plant_model().masses, rtol=1e-12)
    assert np.allclose(np.asarray(made.inertias) / made.masses,
                       np.asarray(model.inertias) / model.masses)  # the same shapes
    config = config_for("dancer", "fb", "alg1", path)
    loop = SimulatedLoop(config, seed=SEED)
    target = np.asarray(reachable_targets(plant, loop.limits.qa_min, loop.limits.qa_max,
                                          3, SEED)[2], dtype=float)
    mirror = ChildMirror()
    mirror._params = LiveParams.from_config(config, target)
    parent = ParentPlanner(mirror, config, model, None)
    q_bar = tuple(held_poses(model, 1)[0][0].tolist())
    sample = CycleSample(t=0.0, seq=1, state="running", q=q_bar, q_bar=q_bar, qa_ref=(),
                         tau_ff=(), target=tuple(target), x=(0.0, 0.0), task_error=0.0,
                         statics_residual=0.0, period_us=0.0, lateness_us=0.0,
                         compute_us=0.0, latency_us=0.0)

    def lands(plan) -> float:
        rest = solve_statics(plant, plan.qa_goal, split(model, plan.q_goal)[1])
        assert rest.converged and rest.stable
        return float(np.linalg.norm(plant.fk(rest.q) - target))

    def hear(masses, stiffness) -> None:
        mirror._on_events(EventBatch([Event(1.0, "info", {
            "code": "plant_estimate", "masses": masses, "stiffness": stiffness})]))

    assert mirror.plant_bodies is None and parent._state(sample).plant is None
    hear(masses.tolist(), stiffness.tolist())
    assert np.allclose(mirror.plant_bodies[0], masses)
    heard = parent._plant()
    assert heard is parent._plant()  # made once per estimate
    assert np.allclose(heard.masses, plant.masses, rtol=2e-3)
    state = parent._state(sample)
    assert state.plant is heard
    aimed = parent._motion().target_plan(target, state)
    assert aimed.task_bias is not None and lands(aimed) < TOL
    hear(None, None)
    assert mirror.plant_bodies is None and parent._plant() is None
    blind = parent._motion().target_plan(target, parent._state(sample))
    assert blind.task_bias is None and lands(blind) > 10 * TOL


def test_a_move_aimed_for_the_plant_is_chosen_by_simulating_the_plant(mixed):
    """Bench target 5 from the bench's start, aimed for the ``mixed15`` plant itself (the
    plan carries where the plant rests and its modes there): the
    move :func:`choose_move` picks by simulating the plant (``plant``) brings the plant to
    rest within the tolerance in under half the time the move picked on the model (whose
    masses are off) does, both simulated on the plant; the plant ends on the target, and the
    prediction ends at the model's task where the plant rests (target + task bias), a held
    equilibrium of the plant."""
    from poise.motion.motion_planner import MotionState
    from poise.motion.params import with_plan
    from poise.motion.reference import Prediction, choose_move, settle_time
    from poise.motion.stability import structural_modes

    path, plant = mixed
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1", path), seed=SEED)
    model, planner = loop.model, loop.planner
    planner.stepper_factory = loop.step.stepper_factory
    target = reachable_targets(plant, loop.limits.qa_min, loop.limits.qa_max, 6, SEED)[5]
    loop.start()
    q_bar = np.array(loop.step.stepper.q_bar)
    plan = planner.target_plan(target, MotionState(loop.params, q_bar=q_bar, plant=plant))
    assert plan.task_bias is not None
    # its structural modes are the plant's where it rests (the window, the sway watch and
    # the shapers use them), 12 % slower than the model's at the aim
    assert np.linalg.norm(split(plant, plant.G(plan.plant_rest))[1]) < 1e-6
    assert np.linalg.norm(plant.fk(plan.plant_rest) - target) < 0.5 * TOL
    slow = structural_modes(plant, plan.plant_rest, plan.loop.actuators)[0]
    assert plan.slowest_mode().omega == pytest.approx(slow.omega, rel=1e-9)
    assert slow.period > 1.1 * plan.loop.slowest_mode().period
    params, o = with_plan(loop.params, plan), planner.options

    def on_plant(chosen):
        prediction = Prediction(model, chosen, q_bar, params, period=o.period,
                                limits=planner.limits, effort_feedforward=o.effort_feedforward,
                                shaper=o.shaper, stepper_factory=planner.stepper_factory,
                                plant=plant)
        prediction.run(o.tolerance)
        return prediction, settle_time(prediction.rows, prediction.goal, o.tolerance, o.period)

    settle = {}
    for name, body in (("model", None), ("plant", plant)):
        chosen = choose_move(plan, q_bar, params, o, model, planner.limits,
                             planner.stepper_factory, plant=body)
        prediction, settle[name] = on_plant(chosen)
        assert np.allclose(prediction.goal, plan.serves + plan.task_bias, atol=1e-6)
        q_end = prediction.state[0]
        assert np.linalg.norm(plant.fk(q_end) - target) < 0.5 * TOL
        g_u = split(plant, plant.G(prediction.q_rest))[1]
        assert np.linalg.norm(g_u) < 1e-6  # G_u = 0 where it rests: held
    assert settle["plant"] < 0.5 * settle["model"], settle
