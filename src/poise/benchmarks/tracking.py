"""Moving references on every reference robot with actuation (``poise bench tracking``).

Protocol (issue 33): for each robot of :data:`~poise.benchmarks.tracking_protocol.ROBOTS`,
each mode (``ff``, ``fb``) and each algorithm (``alg1``, ``alg2``), the bundled example
configuration with its default (automatic) gains runs the service's own control step
(:class:`~poise.controller.simulate.SimulatedLoop`) against the in-process plant in simulated
time — deterministic, as fast as the computer allows. The arm starts at rest, settles at the
example's target ``c`` for :data:`SETTLE_S`, then follows a reference
(:class:`~poise.benchmarks.tracking_refs.Reference`) centred on ``c`` with the amplitude
``A =`` 10 % of the robot's reach (``model.reach``): a **sine** (1-D tasks) or a **circle**
(2-D tasks) at 0.05, 0.1 and 0.25 Hz, and a **step sequence** (4 steps of ``A``, 3 s apart),
each after a 2 s lead-in from where the arm stands. Each reference is

* **streamed**: one sample ``x_r(t)`` every 20 ms (50 Hz, positions only, as an operator's
  device or a tracker sends them) through :meth:`SimulatedLoop.stream
  <poise.controller.simulate.SimulatedLoop.stream>`, the loop following it cycle by cycle;
* sent as a **trajectory**: the same 50 Hz samples, 1 s more, as waypoints ``{"t", "x"}`` to
  ``SimulatedLoop.run_trajectory`` (issue 33, part 3), timed from the trajectory's own time 0. A
  refusal (``TrajectoryRefused``) is reported as such.

Measured over the window (the second of two periods; steps: from the last step to 3 s after
it), on the true state (the sensors' noise is the controller's problem, not the figure's):
the task error ``‖h(q) − x_r(t)‖`` — **RMS** and **max** [% of A] — and the **steady lag**
(:func:`~poise.benchmarks.tracking_refs.steady_lag`, within ±1 s). Flags, so that the table
does not mix tracking with references the arm cannot follow: **C** the loop says the arm is
held back from the reference (:func:`poise.motion.live.clamp_status`, the service's
``clamped``) on ≥ 1 % of the window's cycles (steps: on any cycle of its last third),
**L** an actuator sat at its position limit, **R** rate-bound: a setpoint moved at ≥ 94 %
of its rate limit (the stream's filter keeps to 95 %), or the stream's filter slowed the
reference to keep the actuators within their rate and acceleration limits (mapped through
``J⁺``) on ≥ 1 % of the window: the reference asks for more than the actuators give (near a
singular held configuration ``J⁺`` grows and the filter all but stops the reference).

The physics each robot's figures meet: its slowest structural mode ``ω_n``, ``ζ`` at the
target (``plan.loop.structural_modes()[0]``). A loop that moves the actuators
quasi-statically (the IK is a statics model) drives the arm through that mode,
``H(iω) = 1 / (1 − r² + 2iζr)``, ``r = ω/ω_n``: the arm's task value lags and is amplified
by ``H``, the error of a sine is ``A |1 − H|`` in amplitude. In fb the IK's task rate Γ
(:data:`~poise.motion.streaming.LEAD_GAIN`) removes the part of it below its bandwidth,
``S(iω) = iω / (iω + Γ)``; the estimate is ``A |1 − H| |S| / √2`` RMS
(:func:`quasi_static`). Where the automatic Γ is held low by that very mode (its stability
bound), a goal below the estimate is out of reach without a model of the dynamics, and the
goal check says so.

Goals (:data:`~poise.benchmarks.tracking_protocol.GOALS`): streamed RMS ≤ 10 % of ``A`` at
0.1 Hz and ≤ 15 % at 0.25 Hz in fb; trajectory RMS ≤ 3 % at 0.1 Hz in ff on the model and
≤ 5 % in fb on a plant 10 % off (``--plant NAME``).
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poise.benchmarks.benchout import run_each
from poise.benchmarks.control import config_for
from poise.benchmarks.tracking_protocol import (
    AMPLITUDE,
    CLAMPED_SHARE,
    FILTER_SHARE,
    MAX_LAG_S,
    RATE_BOUND,
    SEED,
    SETTLE_S,
    STREAM_HZ,
    TRAJECTORY_TAIL_S,
)
from poise.benchmarks.tracking_refs import Reference, quasi_static, steady_lag
from poise.benchmarks.tracking_report import check_goals, protocol, robot_physics
from poise.controller.simulate import SimulatedLoop
from poise.motion.live import clamp_status
from poise.motion.streaming import LEAD_GAIN
from poise.sim.params import load_physical


@dataclass(frozen=True)
class Case:
    """One case: a robot, mode, algorithm, kind, frequency [Hz] (0 for steps), how the
    reference is sent, the plant (a model file; None: the model), the sensor-noise seed,
    the amplitude [fraction of the reach] and the centre [task units] (None: the example's
    target); ``trace``: keep the window's samples (a figure)."""

    robot: str
    mode: str
    algorithm: str
    kind: str
    freq: float
    how: str
    plant: str | None = None
    seed: int = SEED
    amplitude: float = AMPLITUDE
    centre: tuple[float, ...] | None = None
    trace: bool = field(default=False, compare=False)

    @property
    def ident(self) -> str:
        f = "-" if self.kind == "steps" else f"{self.freq:g}Hz"
        return (f"{self.robot}/{self.mode}/{self.algorithm}/{'plant' if self.plant else 'model'}"
                f"/{self.kind}/{f}/{self.how}")


def trajectories_available() -> bool:
    """Whether the simulated loop runs trajectories (issue 33, part 3)."""
    return hasattr(SimulatedLoop, "run_trajectory")


def run_case(case: Case) -> dict[str, Any]:
    """One case (see the module docstring): the figures, the flags and the physics."""
    t_wall = time.perf_counter()
    loop = SimulatedLoop(config_for(case.robot, case.mode, case.algorithm, case.plant,
                                    example_target=True, target=case.centre), seed=case.seed)
    model = loop.model
    loop.start()
    loop.run(SETTLE_S)
    plan = loop.step.plan
    modes = plan.loop.structural_modes() if plan is not None and plan.loop is not None else []
    reach = float(getattr(model, "reach", 0.0) or 0.0)
    if not reach > 0:
        raise ValueError(f"{case.robot}: no reach (model.reach) to scale the reference by")
    stepper = loop.step.stepper
    assert stepper is not None  # the loop has started
    ref = Reference(case.kind, np.asarray(model.fk(stepper.q_bar), dtype=float),
                    np.asarray(loop.params.target, dtype=float), case.amplitude * reach,
                    case.freq)
    gain = float(getattr(loop.params, LEAD_GAIN.get(case.algorithm, "gamma")))
    out: dict[str, Any] = {
        "id": case.ident, "robot": case.robot, "mode": case.mode, "algorithm": case.algorithm,
        "plant": case.plant or "model", "plant_differs": loop.plant.differences,
        "kind": case.kind, "freq_hz": case.freq if case.kind != "steps" else None,
        "as": case.how, "amplitude": ref.amplitude, "amplitude_of_reach": case.amplitude,
        "centre": ref.centre.tolist(),
        "window_s": list(ref.window), "rate_hz": loop.config.loop.rate,
        "gains": {"gamma": loop.params.gamma, "gamma_z": loop.params.gamma_z, "lead": gain},
        "slowest_mode": ({"omega": modes[0].omega, "zeta": modes[0].zeta,
                          "hz": modes[0].omega / (2 * math.pi)} if modes else None),
        "quasi_static": (quasi_static(case.freq, modes[0].omega, modes[0].zeta,
                                      gain if case.mode == "fb" else None)
                         if modes and case.kind != "steps" else None)}
    origin = 0.0
    if case.how == "trajectory":
        refused, origin = _send_trajectory(loop, ref)
        if refused:
            return {**out, "status": "refused", "reason": refused,
                    "wall_s": time.perf_counter() - t_wall}
    measured, trace = _follow(loop, ref, case.how == "stream", origin)
    out.update(status="ok", reason="", **measured)
    out["wall_s"] = time.perf_counter() - t_wall
    if case.trace:
        out["_trace"] = trace
    return out


def _send_trajectory(loop: SimulatedLoop, ref: Reference) -> tuple[str, float]:
    """Hand the reference to the loop as a trajectory of 50 Hz waypoints; why it was
    refused ('' if it was not), and when its time 0 comes [s after it was handed over]:
    after the lead-in, if any, and the preview's lead (the shaped reference leaves the first
    waypoint that much early, :class:`~poise.motion.trajectory.Previewed`)."""
    from poise.motion.trajectory import TrajectoryRefused

    times = np.arange(0.0, ref.window[1] + TRAJECTORY_TAIL_S + 1e-9, 1.0 / STREAM_HZ)
    try:
        run = loop.run_trajectory({"t": times.tolist(), "x": ref.values(times).tolist()})
    except TrajectoryRefused as exc:
        return str(exc) or type(exc).__name__, 0.0
    return "", float(run.source.begins[-1] + run.source.parts[-1].lead)


def _follow(loop: SimulatedLoop, ref: Reference, stream: bool, origin: float = 0.0
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the loop through ``ref`` (streaming it when ``stream``) to the window's end;
    the window's figures and its trace (times, arm, reference). ``origin``: when the
    reference's time 0 comes [s from now] (a trajectory's lead-in and preview lead)."""
    model, dt, lim = loop.model, loop.period, loop.limits
    lo, hi = ref.window
    t0, due = loop.time + origin, 0.0
    times: list[float] = []
    arm: list[Any] = []
    clamped = late_clamped = at_limit = limited = 0
    peak_rate, qa_prev = 0.0, None
    tolerance, reach = loop.config.algorithm.tolerance, getattr(model, "reach", None)
    for _ in range(round((hi + origin) / dt)):
        t = loop.time - t0
        if stream and t >= due - 1e-9:
            loop.stream(ref.at(t), t=loop.time)
            due += 1.0 / STREAM_HZ
        following = loop.step.following
        filt = following.filter if following is not None else None
        before = filt.limited if filt is not None else 0
        out = loop.cycle()
        t = loop.time - t0
        qa = np.asarray(out.qa, dtype=float)
        if t >= lo - 0.5 * dt:
            times.append(t)
            arm.append(np.asarray(model.fk(loop.plant.q), dtype=float))
            if qa_prev is not None:
                peak_rate = max(peak_rate, float(np.max(np.abs(qa - qa_prev) / dt
                                                        / lim.qa_rate)))
            limited += filt is not None and filt.limited > before
            at_limit += bool(np.any((qa <= lim.qa_min + 1e-9) | (qa >= lim.qa_max - 1e-9)))
            if following is not None and clamp_status(
                    model, following, out.q_bar, qa, lim.qa_min, lim.qa_max, tolerance, reach):
                clamped += 1
                late_clamped += t >= hi - (hi - lo) / 3
        qa_prev = qa
    t_arr, x_arr = np.array(times), np.array(arm)
    r_arr = ref.values(t_arr)
    err = np.linalg.norm(x_arr - r_arr, axis=1)
    rms = math.sqrt(float(np.mean(err**2)))
    lag, rms_shifted, at_bound = steady_lag(t_arr, x_arr, ref.values, MAX_LAG_S)
    n, a = len(times), ref.amplitude
    held = (late_clamped > 0) if ref.kind == "steps" else clamped >= CLAMPED_SHARE * n
    flags = ("C" if held else "") + ("L" if at_limit else "") + \
        ("R" if peak_rate >= RATE_BOUND or limited >= FILTER_SHARE * n else "")
    return ({"rms": rms, "max": float(err.max()), "rms_pct": 100 * rms / a,
             "max_pct": 100 * float(err.max()) / a, "lag_s": lag, "lag_at_bound": at_bound,
             "rms_shifted_pct": 100 * rms_shifted / a, "clamped_pct": 100 * clamped / n,
             "at_limit_pct": 100 * at_limit / n, "filter_limited_pct": 100 * limited / n,
             "peak_rate": peak_rate, "flags": flags, "held_back": bool(held or at_limit),
             "cycles": n},
            {"t": t_arr, "x": x_arr, "ref": r_arr})


def cases_for(robots: Sequence[str], modes: Sequence[str], algorithms: Sequence[str],
              freqs: Sequence[float], kinds: Sequence[str], how: Sequence[str],
              plants: Mapping[str, str] | None = None, seed: int = SEED,
              amplitude: float = AMPLITUDE, centre: Sequence[float] | None = None
              ) -> list[Case]:
    """Every case of the selection: sine on 1-D tasks, circle on 2-D ones, steps on all;
    for a robot with a plant, each case on the model and on the plant; about ``centre``
    (None: each example's target).

    Raises:
        ValueError: a centre whose size is not a robot's task dimension."""
    from poise.models.registry import load_model

    plants = dict(plants or {})
    out = []
    for robot in robots:
        dim = load_model(robot).task_dim
        if centre is not None and len(centre) != dim:
            raise ValueError(f"--centre {' '.join(f'{c:g}' for c in centre)}: {robot}'s task "
                             f"has {dim} coordinates")
        refs = [(k, f) for k in kinds if k != "steps" and (k == "sine") == (dim == 1)
                for f in freqs] + [("steps", 0.0) for k in kinds if k == "steps"]
        for plant in (None, plants.get(robot)) if robot in plants else (None,):
            out += [Case(robot, m, a, k, f, h, plant, seed, amplitude,
                         None if centre is None else tuple(map(float, centre))) for m in modes
                    for a in algorithms for k, f in refs for h in how]
    return out


def with_traces(cases: Sequence[Case]) -> list[Case]:
    """The cases, one per robot drawn (:func:`figure`): streamed, on the model, fb and
    alg1 where run, the sine or circle nearest 0.1 Hz."""
    from dataclasses import replace

    def rank(c: Case) -> tuple[float, ...]:
        return (c.how != "stream", c.plant is not None, c.mode != "fb", c.algorithm != "alg1",
                c.kind == "steps", abs(c.freq - 0.1))

    chosen = {}
    for c in sorted(cases, key=rank):
        chosen.setdefault(c.robot, c)
    return [replace(c, trace=True) if chosen.get(c.robot) is c else c for c in cases]


def run(cases: Sequence[Case], *, workers: int = 1, plants: Mapping[str, str] | None = None,
        progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Every case, in ``workers`` processes; JSON-ready but for the ``_trace`` of the drawn
    cases (:func:`figure` takes them out).

    Raises:
        ValueError: a plant for a robot not run, or a plant file that does not match its
            robot (the message says what).
    """
    plants = dict(plants or {})
    robots = sorted({c.robot for c in cases})
    unknown = sorted(set(plants) - set(robots))
    if unknown:
        raise ValueError(f"plant given for {', '.join(unknown)}, not among the robots run "
                         f"({', '.join(robots)})")
    for name, path in plants.items():
        load_physical(name, path)  # refused here, before any case runs
    t0 = time.perf_counter()
    load_before = list(os.getloadavg())
    results: list[dict[str, Any]] = []
    runnable = [c for c in cases if c.how != "trajectory" or trajectories_available()]
    results.extend(run_each(run_case, runnable, workers, progress))
    skipped = len(cases) - len(runnable)
    return {"benchmark": "tracking", "schema": 1, "seed": cases[0].seed if cases else SEED,
            "protocol": protocol(), "plants": plants,
            "trajectory": ("available" if trajectories_available() else
                           "not available: SimulatedLoop has no run_trajectory yet"
                           + (f" ({skipped} trajectory cases skipped)" if skipped else "")),
            "robots": robot_physics(results), "cases": results, "goals": check_goals(results),
            "wall_s": time.perf_counter() - t0, "workers": workers, "load_avg_before":
            load_before, "load_avg": list(os.getloadavg()),
            "python": platform.python_version(), "numpy": np.__version__,
            "machine": platform.machine()}


def dumps(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1) + "\n"


__all__ = ["Case", "cases_for", "dumps", "run", "run_case", "trajectories_available",
           "with_traces"]
