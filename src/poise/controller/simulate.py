"""The control step against an in-process plant, in simulated time: deterministic and fast.

:class:`SimulatedLoop` is ``read → update → write`` with the same :class:`ControlStep`, planner
and safety limits as the service, against :func:`poise.sim.plant.make_plant` (the simulator and
sensor models behind ``poise device sim``) seen through the device interface
(:class:`poise.devices.inprocess.SimulatedDevice`), one loop period per cycle of simulated
time. No
threads, no clock, no pty: what the service computes, without what it waits for. Tests and
studies use it; the real-time service adds the device, pacing, states and telemetry.

    loop = SimulatedLoop(load_config(resolve_config("soft_arm_soft")))  # poise.examples
    loop.start()                        # arm: bumpless from the measured q, plan the target
    errors = loop.run(20.0)             # measured task error per cycle [task units]
    loop.stream(x, t=loop.time)         # a streamed reference sample (poise.motion.streaming)
    loop.run_trajectory({"t": [0, 4], "x": [[0.5], [0.6]]})  # checked, shaped, followed
    loop.stop()                         # disarm: the actuators hold
    tips = loop.hold(2.0)               # measured task values while held
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from poise.controller.config import Config, ControllerModel, build_model
from poise.devices.base import Status
from poise.devices.inprocess import SimulatedDevice
from poise.ik.branch import OffBranch
from poise.models.base import FloatArray
from poise.motion.live import (
    MAP_REFRESH_S,
    TrajectoryRun,
    actuator_map,
    begin_stream,
    begin_trajectory,
    prepare_trajectory,
)
from poise.motion.motion_planner import MotionPlanner
from poise.motion.options import MotionOptions
from poise.motion.params import LiveParams
from poise.motion.safety import SafetyLimits
from poise.motion.step import ControlStep, StepOutput, stepper_factory
from poise.motion.trajectory import Trajectory
from poise.sim.plant import SimPlant, make_plant


class SimulatedLoop:
    """The service's cycle in simulated time (see the module docstring).

    Args:
        config: the run configuration (model, algorithm, gains, loop rate, limits,
            ``device.sim_model`` / ``device.sim_params`` for the simulated robot).
        model: the controller's statics model (default: built from ``config.model``).
        seed: sensor-noise seed of the plant.
        noise: sensor noise on (quantisation and bias always).
    """

    def __init__(self, config: Config, *, model: ControllerModel | None = None,
                 seed: int = 0, noise: bool = True) -> None:
        self.config = config
        self.model = (model or build_model(config.model)).model
        self.period = 1.0 / config.loop.rate
        self.plant: SimPlant = make_plant(config.device.sim_model or config.model.name,
                                          config.device.sim_params, seed=seed, noise=noise)
        #: The plant as a device: each read advances it one period of simulated time.
        self.device = SimulatedDevice(self.plant, rate=config.loop.rate)
        m = self.model
        lim = config.limits
        self.limits = SafetyLimits.build(m.m, m.qa_min, m.qa_max, lim.qa_min, lim.qa_max,
                                         lim.qa_rate, qa_accel=lim.qa_accel)
        factory, self.kernels = stepper_factory(m, config.loop.compiled)
        # the command written after a sample acts from that sample on: no delay
        self.step = ControlStep(m, self.limits, self.period,
                                effort_feedforward=config.loop.effort_feedforward,
                                stepper_factory=factory, delay=0, shaper=config.loop.shaper,
                                tolerance=config.algorithm.tolerance,
                                ring_watch=config.loop.ring_watch,
                                balance=config.loop.balance,
                                total_mass=config.model.total_mass)
        #: Plans each target as the service does (no delay, as the step).
        self.planner = MotionPlanner(m, self.limits, MotionOptions.from_config(config, delay=0),
                                     factory)
        target = config.algorithm.target
        self.params = LiveParams.from_config(
            config, np.asarray(target if target is not None else m.fk(self.measured())))
        self.time = 0.0
        #: The loop time [s] at which the followed reference's time is 0.
        self.source_origin = 0.0
        self._mapped_at = 0.0  # when the stream's filter limits were last refreshed [s]
        self.last: StepOutput | None = None
        #: Re-plans made when feedback stalled at an actuator limit (:meth:`replan_stall`),
        #: each ``{"t": loop time [s], "target", "aim", "reachable", "moved"}``.
        self.replans: list[dict[str, Any]] = []
        self.device.disarm()

    def measured(self) -> FloatArray:
        """The configuration q the sensors report now."""
        return np.asarray(self.device.latest().q, dtype=float)

    def set_target(self, target: FloatArray) -> str:
        """Plan and adopt ``target`` as the service does (automatic gains follow the new
        stability bound; :class:`~poise.motion.motion_planner.MotionPlanner`); returns the
        plan's note.

        Raises:
            ParamError: an explicit gain above the bound at the new target.
        """
        step = self.step
        stepper = step.stepper
        self.planner.stepper_factory = step.stepper_factory
        move = self.planner.plan(target, step.motion_state(
            self.params, self.measured(), stepper.q_bar if stepper else None))
        step.adopt(move.plan)
        self.params = move.params
        return move.note()

    def stream(self, x: FloatArray, *, t: float | None = None,
               v: FloatArray | None = None) -> bool:
        """A sample of a streamed reference: ``x`` [task units] at simulated time ``t`` [s]
        (default: the next cycle's), with its velocity ``v`` when known. The first sample
        begins the stream where the arm is (:func:`~poise.motion.live.begin_stream`); a
        :meth:`set_target` ends it. False: the sample was older than the newest."""
        step = self.step
        following = step.following
        if following is None or following.kind != "stream":
            following = begin_stream(step)
            self.source_origin = self._mapped_at = self.time
        stamp = self.time if t is None else t
        pushed = following.source.push(stamp - self.source_origin, x, v)  # type: ignore[call-arg]
        # as the service does: the filter's limits kept current as the arm moves
        if self.time - self._mapped_at >= MAP_REFRESH_S and following.filter is not None \
                and step.stepper is not None:
            self._mapped_at = self.time
            following.filter.set_actuator_map(actuator_map(self.model, step.stepper.q_bar))
        return pushed

    def run_trajectory(self, value: Any) -> TrajectoryRun:
        """Check, shape and follow a trajectory from where the arm is (a
        :class:`~poise.motion.trajectory.Trajectory`, or its waypoints as
        :meth:`~poise.motion.trajectory.Trajectory.from_payload` reads them): the cycles
        from the next one on follow it (:func:`~poise.motion.live.prepare_trajectory`;
        :attr:`source_origin` is its time 0).

        Raises:
            TrajectoryError: malformed waypoints.
            TrajectoryRefused: a part the arm cannot follow (the message names it).
        """
        step = self.step
        if step.stepper is None:
            raise ValueError("run_trajectory: start the loop first")
        trajectory = value if isinstance(value, Trajectory) else Trajectory.from_payload(
            value, self.model.task_dim)
        cfg = self.config
        run = prepare_trajectory(self.model, trajectory, step.stepper.q_bar, self.limits,
                                 period=self.period, tolerance=cfg.algorithm.tolerance,
                                 delay=step.delay, shaper=cfg.loop.shaper)
        begin_trajectory(step, run)
        self.source_origin = self.time
        return run

    def start(self) -> None:
        """Arm: the actuators follow setpoints; the step restarts from the measured q and the
        target is planned."""
        q = self.measured()
        self.step.reset(q, self.params.algorithm)
        self.set_target(self.params.target)
        self.device.arm()

    def cycle(self) -> StepOutput:
        """One period: read the sensors, update, write the setpoint (the read advances the
        plant to the next sample)."""
        sample = self.device.read()
        out = self.step.update(np.asarray(sample.q, dtype=float), self.params,
                               bool(sample.status & Status.SATURATED), sample.efforts)
        self.device.write(out.qa, out.tau)
        self.step.look_ahead()  # as the service does after each write
        self.time += self.period
        self.last = out
        retarget = self.step.retarget
        if retarget is not None and retarget.stalled is not None:
            self.replan_stall()
        return out

    def replan_stall(self) -> bool:
        """Feedback stalled with an actuator at its limit (:attr:`~poise.motion.retarget.
        Retargeting.stalled`: the bounded correction cannot remove the mismatch ``m̂``):
        re-plan from the measured state to where the model must go for the plant to reach
        the target, ``x̄ + m̂``: the planner's starts (q̄, the measured q, the rest pose,
        more where none reaches it) find another member of the held family that reaches it
        within the limits, and the loop moves there; feedback then follows the new plan's
        reference shifted to end at the target itself (:meth:`ControlStep.adopt
        <poise.motion.step.ControlStep.adopt>`'s ``serves``). Once per target; returns
        whether a new plan was adopted (the record in :attr:`replans` either way)."""
        step = self.step
        r, plan, stepper = step.retarget, step.plan, step.stepper
        assert r is not None and r.stalled is not None
        mismatch, r.stalled = r.stalled, None
        if plan is None or stepper is None or any(
                np.array_equal(plan.target, e["aim"]) for e in self.replans[-1:]):
            return False
        target = np.asarray(self.params.target, dtype=float)
        aim = np.asarray(plan.live_target, dtype=float) + mismatch
        record: dict[str, Any] = {"t": self.time, "target": target.tolist(),
                                  "aim": aim.tolist(), "reachable": False, "moved": False}
        self.replans.append(record)
        state = step.motion_state(self.params, self.measured(), stepper.q_bar)
        try:  # the goal first (milliseconds); the move, chosen on the model, only if it holds
            new, move = self.planner.replan(aim, state)
        except OffBranch as exc:  # a goal that reaches the aim, which the move misses
            record["reachable"], record["refused"] = True, str(exc)
            return False
        except ValueError as exc:  # UnstableTarget, or a gain refused there
            record["refused"] = str(exc)
            return False
        record["reachable"] = bool(new.reachable)
        if move is None:
            return False
        new = move.plan
        record["moved"] = True
        record["aim"] = np.asarray(new.target, dtype=float).tolist()
        step.adopt(new, serves=target)
        self.params = replace(move.params, target=target)
        return True

    def run(self, seconds: float) -> FloatArray:
        """Cycles for ``seconds`` of simulated time; the measured task error of each."""
        n = round(seconds / self.period)
        target = self.params.target
        return np.array([float(np.linalg.norm(target - self.cycle().x_meas))
                         for _ in range(n)])

    def stop(self) -> None:
        """Disarm: the actuators hold their last setpoint (the device's safe state)."""
        self.device.disarm()

    def hold(self, seconds: float) -> FloatArray:
        """Advance ``seconds`` without the controller; measured task values (k, task_dim)."""
        n = round(seconds / self.period)
        out = []
        for _ in range(n):
            self.time += self.period
            out.append(self.model.fk(np.asarray(self.device.read().q, dtype=float)))
        return np.array(out)


__all__ = ["SimulatedLoop"]
