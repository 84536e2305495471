"""Feedback's error map where the plant's measured springs reverse the model's answer (issue
35, :mod:`poise.motion.plantmap`): the dancer on a pointe 10 % stiffer (``stiff10``) at the
setpoint of ``poise bench control``'s target 16, where the model holds on either side of its
pointe while the plant stands upright."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from poise.benchmarks.control import SEED, config_for, reachable_targets, weigh
from poise.controller.simulate import SimulatedLoop
from poise.ik.held_common import held_jacobian
from poise.ik.statics import solve_statics
from poise.models.actuation import blocks, split
from poise.models.registry import load_model
from poise.motion import plantmap
from poise.motion.params import LiveParams
from poise.motion.plantmap import SpringsErrorMap, springs_map
from poise.motion.springs import SpringScale
from poise.motion.stepper import Alg1Stepper, Alg2Stepper
from poise.sim.named import write_named

#: The setpoint the dancer rested at in ``stiff10``'s target 16 [rad], and the model's two
#: held lean angles of its pointe there [rad].
SETPOINT = np.array([0.265, 2.456, -0.14])
BRANCHES = (-0.375, 0.328)


@pytest.fixture(scope="module")
def dancer():
    return load_model("dancer")


@pytest.fixture(scope="module")
def stiff10(tmp_path_factory):
    return load_model(write_named("dancer", "stiff10", tmp_path_factory.mktemp("plant")))


def rest(plant, qa, qu):
    """Where ``plant`` rests at the actuators ``qa`` (its stable held configuration)."""
    sol = solve_statics(plant, np.asarray(qa, float), np.asarray(qu, float))
    assert sol.converged and sol.stable
    return sol.q


def held(model, qa, lean):
    """The model's held configuration at ``qa`` on the branch of pointe angle ``lean``."""
    q = rest(model, qa, [lean])
    assert q[0] == pytest.approx(lean, abs=0.05)
    return q


@pytest.mark.parametrize("lean", BRANCHES)
def test_the_map_restores_the_loop_where_the_model_answers_backwards(dancer, stiff10, lean):
    """On either of the model's branches ``J* J⁺`` has eigenvalues of negative real part (an
    integrator unstable at every gain); the map makes the loop exactly ``I``, and ``q*`` is
    where the true plant rests (upright, ``q₀ ≈ 0``)."""
    q_bar = held(dancer, SETPOINT, lean)
    springs = SpringScale.fixed(dancer, 0.1)
    truth = rest(stiff10, SETPOINT, [0.0])
    loop = held_jacobian(blocks(stiff10, truth)) @ np.linalg.pinv(
        held_jacobian(blocks(dancer, q_bar)))
    assert np.max(np.linalg.eigvals(loop).real) < -0.1
    mapped, q_star = springs_map(dancer, springs, q_bar, split(dancer, q_bar)[1])
    assert mapped is not None
    assert np.allclose(q_star, truth, atol=1e-7)
    assert abs(q_star[0]) < 0.01
    assert np.allclose(loop @ mapped, np.eye(2), atol=1e-9)


def test_no_map_where_the_model_answers_as_the_plant(dancer):
    """Away from the pointe's folds (``test_springs``'s resting setpoint) the stiffer pointe
    answers nearly as the model's
    (every eigenvalue's real part well above :data:`~poise.motion.plantmap.AGREES`); with no
    spring scale the loop is the model's own, and where the scaled plant would not rest
    stably there is no answer to map: no map in each case."""
    q_bar = rest(dancer, [0.3, -0.4, 0.5], [0.0])
    springs = SpringScale.fixed(dancer, 0.1)
    J = held_jacobian(blocks(dancer, q_bar))
    loop = springs.held_jacobian(q_bar) @ np.linalg.pinv(J)
    assert np.min(np.linalg.eigvals(loop).real) > 2 * plantmap.AGREES
    assert springs_map(dancer, springs, q_bar, split(dancer, q_bar)[1])[0] is None
    q_bar = held(dancer, SETPOINT, BRANCHES[0])
    assert springs_map(dancer, SpringScale.fixed(dancer, 0.0), q_bar,
                       split(dancer, q_bar)[1])[0] is None
    # a pointe 20 % softer cannot stand upright there: Newton finds the upright equilibrium
    # (q₀ ≈ 0), where such a plant would fall over, so there is no map of its answer
    softer = SpringScale.fixed(dancer, -0.2)
    mapped, q_star = springs_map(dancer, softer, q_bar, np.zeros(1))
    assert abs(q_star[0]) < 0.01 and not softer.holds_stably(blocks(dancer, q_star))
    assert mapped is None


@pytest.mark.parametrize("stepper", [Alg1Stepper, Alg2Stepper])
def test_feedback_through_the_map_removes_the_error_the_models_map_grows(
        dancer, stiff10, stepper):
    """Feedback quasi-statically (the plant at rest at each setpoint) from 15 mm off at the
    target-16 setpoint, Γ = 0.5 /s: on the model's map the error grows (past 30 mm in 10 s,
    the integrator's negative gain); through the map it decays as ``e^{−Γ t}`` (the loop is
    ``Γ I``), to 10 µm in 15 s."""
    target = stiff10.fk(rest(stiff10, SETPOINT + np.array([0.01, -0.01, 0.005]), [0.0]))
    springs = SpringScale.fixed(dancer, 0.1)
    gain, dt = 0.5, 0.02
    errors = {}
    for mapped in (False, True):
        st = stepper(dancer)
        st.reset(held(dancer, SETPOINT, BRANCHES[0]), dancer.qa_min, dancer.qa_max)
        p = LiveParams(algorithm=st.name, update="dls", gamma=gain, gamma_z=gain,
                       gamma_e=gain, damping=1e-3, target=target, mode="fb")
        qu, trace = np.zeros(1), []
        for _ in range(751):
            q = rest(stiff10, st.qa, qu)
            qu = split(stiff10, q)[1]
            x = stiff10.fk(q)
            trace.append(float(np.linalg.norm(target - x)))
            pi = springs_map(dancer, springs, st.q_bar, qu)[0] if mapped else None
            st.commit(st.propose(p, x if pi is None else target - pi @ (target - x), dt))
        errors[mapped] = trace
    start = errors[False][0]
    assert start > 0.01
    assert errors[False][500] > 2 * start  # 10 s on the model's map
    decay = errors[True][250] / start  # 5 s through the map: e^{−2.5} = 0.082
    assert decay == pytest.approx(math.exp(-gain * 5.0), rel=0.3)
    assert errors[True][-1] / start == pytest.approx(math.exp(-gain * 15.0), rel=0.3)


def test_the_map_is_remade_every_refresh_and_after_forget(dancer):
    """Asked for every cycle (:meth:`at`), it is due once every
    :data:`~poise.motion.plantmap.REFRESH_S` and made after the cycle (:meth:`refresh`); the
    cycles between take the last one; again at once after :meth:`forget` or a new ``ŝ``."""
    period = 0.004
    every = round(plantmap.REFRESH_S / period)
    keeper = SpringsErrorMap(dancer, period)
    q_bar = held(dancer, SETPOINT, BRANCHES[0])
    springs = SpringScale.fixed(dancer, 0.1)
    assert keeper.at(springs, None) is None and keeper.due  # none yet: made after
    keeper.refresh(q_bar)
    assert keeper.made == 1 and not keeper.due
    expected = springs_map(dancer, springs, q_bar, split(dancer, q_bar)[1])[0]
    for cycle in range(1, 3 * every + 1):
        assert np.allclose(keeper.at(springs, None), expected)
        assert keeper.due == (cycle % every == 0)
        keeper.refresh(q_bar)
    assert keeper.made == 4 and keeper.cycles == 3 * every
    keeper.forget()
    assert keeper.map is None and not keeper.due
    keeper.refresh(q_bar)  # not asked for: nothing made
    assert keeper.made == 4
    assert keeper.at(springs, q_bar) is None and keeper.due
    keeper.refresh(q_bar)
    keeper.at(SpringScale.fixed(dancer, 0.11), None)
    assert keeper.due
    keeper.refresh(q_bar)
    assert keeper.made == 6


def test_the_control_step_maps_the_error_only_at_rest_in_feedback(tmp_path):
    """The dancer on ``stiff10`` with its springs known (ŝ = 0.1) moves to the bench's
    target 16; during the move there is no map, and after it, resting on the plan in
    feedback, the step maps the error with :func:`springs_map` at q̄, made after the cycle
    before (in ff: none)."""
    plant = write_named("dancer", "stiff10", tmp_path)
    loop = SimulatedLoop(config_for("dancer", "fb", "alg1", plant,
                                    total_mass=weigh("dancer", plant)[0]), seed=SEED)
    targets = reachable_targets(loop.plant.physical, loop.limits.qa_min, loop.limits.qa_max,
                                20, SEED)
    loop.start()
    step = loop.step
    step.retarget.springs = SpringScale.fixed(loop.model, 0.1)
    loop.set_target(targets[16])
    loop.cycle()
    assert step.goal is not None and step.springs_maps["made"] == 0
    for _ in range(int(30.0 / loop.period)):
        if step.goal is None and step._aimed(loop.params, True, False) is loop.params:
            break
        loop.cycle()
    else:
        pytest.fail("the move and its reference did not end in 30 s")
    for _ in range(3):
        loop.cycle()
    made = step.springs_maps["made"]
    assert made >= 1
    step._plant_map.forget()  # made afresh after the next cycle, at its q̄
    loop.cycle()
    q = loop.measured()
    assert step.springs_maps["made"] == made + 1
    mapped = step._projection(loop.params, loop.params, q)
    assert step.springs_maps["active"]
    expected = springs_map(loop.model, step.retarget.springs, step.stepper.q_bar,
                           split(loop.model, q)[1])[0]
    assert mapped is not None and np.allclose(mapped, expected, atol=1e-6)
    ff = replace(loop.params, mode="ff")
    assert step._projection(ff, ff, q) is None
    assert not step.springs_maps["active"]  # forgotten when not asked for
