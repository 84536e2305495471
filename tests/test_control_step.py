"""The control step against the in-process plant in simulated time: deterministic, no pty, no
clock (what the service computes, without what it waits for)."""

from __future__ import annotations

import numpy as np
import pytest

from poise.controller.config import load_config
from poise.controller.simulate import SimulatedLoop
from poise.examples import EXAMPLES_DIR as EXAMPLES  # bundled run configurations
from poise.motion.params import LiveParams
from poise.motion.step import StepFault

#: A target counts as reached when the measured task error stays below this [m].
TOL = 3e-3


def loop_for(model: str, **keys) -> SimulatedLoop:
    over = {"mqtt.enabled": (False, "test")}
    over.update({k.replace("__", "."): (v, "test") for k, v in keys.items()})
    return SimulatedLoop(load_config(EXAMPLES / f"{model}.toml", over))


def settled_at(errors: np.ndarray, period: float, hold: float = 1.0) -> float | None:
    """First time [s] from which the error stays below TOL for ``hold`` s (None: never)."""
    n = round(hold / period)
    below = errors < TOL
    for i in range(len(errors) - n):
        if below[i:i + n].all():
            return i * period
    return None


@pytest.mark.parametrize(("model", "target"), [
    ("soft_arm_stiff", [0.2, -0.9]),
    ("soft_arm_soft", [0.2, -0.9]),
])
def test_feedback_reaches_target_and_the_configuration_is_held_when_disarmed(model, target):
    loop = loop_for(model, loop__mode="fb", algorithm__target=target)
    loop.start()
    errors = loop.run(20.0)
    assert settled_at(errors, loop.period) is not None, errors[::250]
    assert loop.last.residual < 1e-6  # q̄ on the held set E
    x_running = np.mean([loop.cycle().x_meas for _ in range(round(1 / loop.period))], axis=0)
    loop.stop()  # the device's safe state: actuators hold their last setpoint
    tips = loop.hold(3.0)
    drift = float(np.linalg.norm(tips[-round(1 / loop.period):].mean(axis=0) - x_running))
    assert drift < 1e-3, f"tip moved {drift * 1e3:.2f} mm after the loop stopped"


def test_gravity_free_statics_model_ff_leaves_error_fb_removes_it():
    """Seed 000's experiment: the controller's statics neglect gravity, the robot has it."""
    loop = loop_for("soft_arm_soft", loop__mode="ff", model__gravity=0.0,
                    algorithm__target=[0.2, -0.9], algorithm__gamma=2.0)
    loop.start()
    errors = loop.run(8.0)
    predicted = float(np.linalg.norm(loop.params.target - loop.step.stepper.x_bar))
    assert predicted < 1e-3  # the model thinks it is there
    ff_error = float(np.mean(errors[-250:]))
    assert ff_error > 0.02, ff_error
    # feedback with a gain below the sway mode's stability bound (docs/controller.md)
    p = loop.params
    loop.params = LiveParams(p.algorithm, p.update, 0.5, p.gamma_z, p.gamma_e, p.damping,
                             p.target, "fb")
    errors = loop.run(25.0)
    assert settled_at(errors, loop.period) is not None, errors[::250]
    assert errors[-1] < ff_error / 5


def test_unreachable_then_reachable_target_through_the_step_and_the_plant():
    """The service's own step and planner against the simulated double pendulum: x̄ = 2.5 m
    (reach 2 m) parks it as close as it can; 0.45 m is then reached from there."""
    loop = loop_for("double_pendulum", loop__mode="ff")
    loop.start()
    note = loop.set_target(np.array([2.5]))
    assert note.startswith("unreachable")
    errors = loop.run(10.0)
    assert abs(errors[-1] - loop.step.plan.error) < 0.02  # as close as the plan said
    assert loop.set_target(np.array([0.45])) == ""
    assert loop.step.goal is not None  # approach the planned shape first
    errors = loop.run(15.0)
    assert loop.step.goal is None and errors[-1] < TOL, errors[::500]


def test_non_finite_output_is_a_fault_not_a_setpoint():
    loop = loop_for("double_pendulum")
    loop.start()
    loop.cycle()
    p = loop.params
    bad = LiveParams(p.algorithm, p.update, p.gamma, p.gamma_z, p.gamma_e, p.damping,
                     np.array([np.nan]), p.mode)
    with pytest.raises(StepFault, match="non-finite"):
        loop.step.update(loop.measured(), bad)


def test_algorithm_switch_is_bumpless_and_reported():
    loop = loop_for("double_pendulum", loop__mode="ff")
    loop.start()
    loop.run(1.0)
    q_bar = loop.step.stepper.q_bar.copy()
    p = loop.params
    loop.params = LiveParams("alg2", p.update, p.gamma, p.gamma_z, p.gamma_e, p.damping,
                             p.target, p.mode)
    out = loop.cycle()
    assert out.switched_from == "alg1" and loop.step.stepper.name == "alg2"
    assert np.max(np.abs(out.q_bar - q_bar)) < 0.05  # one bounded step from where it was


@pytest.mark.parametrize("compiled", [True, False])
def test_the_move_setpoint_made_ahead_is_the_one_the_cycle_would_make(compiled, monkeypatch):
    """After each write the loop makes the next cycle's setpoint of the approach move
    (``ControlStep.look_ahead``), so that the next cycle only picks it up. The commands are
    the same numbers as without it, and while the move lasts the cycle never evaluates it.
    On the double pendulum: its uncompiled plans take 2 s (the soft arm's 12 s, so this test
    ran past the 300 s timeout with two suites at once on 2 cores)."""
    def run(ahead: bool) -> np.ndarray:
        loop = loop_for("double_pendulum", loop__mode="fb", loop__compiled=compiled)
        if not ahead:
            monkeypatch.setattr(loop.step, "look_ahead", lambda: None)
        loop.start()
        loop.set_target(np.array([0.3]))
        commands, in_cycle = [], 0
        while True:
            move = loop.step.move
            if move is not None and ahead:  # count evaluations inside the cycle only
                with monkeypatch.context() as m:
                    def counted(t, out=None, _at=move.at):
                        nonlocal in_cycle
                        in_cycle += out is None
                        return _at(t, out)
                    m.setattr(move, "at", counted)
                    out = loop.step.update(np.asarray(loop.device.read().q, dtype=float),
                                           loop.params, False)
                loop.device.write(out.qa, out.tau)
                loop.step.look_ahead()
            else:
                out = loop.cycle()
            commands.append(np.array(out.qa))
            if loop.step.goal is None and len(commands) > 10:
                break
        assert len(commands) > 100  # a move of many cycles
        if ahead:  # every cycle after the move's first found its setpoint made
            assert in_cycle == 0
        return np.array(commands)

    np.testing.assert_array_equal(run(True), run(False))


@pytest.mark.parametrize("compiled", [True, False])
def test_algorithm_2_off_every_branch_starts_again_from_the_measured_configuration(compiled):
    """Algorithm 2 integrates its own q̄u; one thrown off every branch (here set 2 rad from
    the plant's) is started again, in feedback at rest, from its setpoint and the measured
    qu: q̄u then within one bounded step of the plant's, the setpoint where it was, counted in
    ``rebranches``; the plant keeps holding the target. Within :data:`REBRANCH` of the plant,
    or in ff, q̄ is left as the algorithm has it."""
    from poise.models.actuation import join, split
    from poise.motion.step import REBRANCH

    def settled(mode: str) -> SimulatedLoop:
        loop = loop_for("double_pendulum", loop__mode=mode, loop__compiled=compiled)
        p = loop.params
        loop.params = LiveParams("alg2", p.update, p.gamma, p.gamma_z, p.gamma_e, p.damping,
                                 p.target, p.mode)
        loop.start()
        loop.run(6.0)
        return loop

    def thrown(loop: SimulatedLoop, by: float) -> tuple[np.ndarray, np.ndarray]:
        step, model = loop.step, loop.model
        qa_bar, qu_bar = split(model, step.stepper.q_bar)
        step.stepper.reset(join(model, qa_bar, qu_bar + by), loop.limits.qa_min,
                           loop.limits.qa_max)
        return qa_bar, split(model, loop.plant.q)[1]

    loop = settled("fb")
    model, step = loop.model, loop.step
    error = float(np.linalg.norm(loop.params.target - model.fk(loop.plant.q)))
    assert error < TOL and step.rebranches == 0 and step.goal is None
    qa_bar, qu = thrown(loop, 2.0)
    loop.cycle()
    assert step.rebranches == 1
    assert np.max(np.abs(split(model, step.stepper.q_bar)[1] - qu)) < 0.05
    assert np.max(np.abs(step.stepper.qa - qa_bar)) < 0.05
    errors = loop.run(2.0)
    assert np.max(errors) < TOL and step.rebranches == 1, np.max(errors)

    thrown(loop, 0.9 * REBRANCH)  # within the bound: the algorithm's own
    loop.cycle()
    assert step.rebranches == 1
    assert abs(split(model, step.stepper.q_bar)[1][0] - split(model, loop.plant.q)[1][0]) > \
        0.8 * REBRANCH

    ff = settled("ff")
    thrown(ff, 2.0)
    ff.cycle()
    assert ff.step.rebranches == 0
