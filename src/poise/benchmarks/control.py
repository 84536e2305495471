"""Closed-loop control on every reference robot with actuation (``poise bench control``).

Protocol (issue 14): for each model of :data:`MODELS`, each mode (``ff``, ``fb``) and each
algorithm (``alg1``, ``alg2``), the bundled example configuration with its default (automatic)
gains runs the service's own control step (:class:`~poise.controller.simulate.SimulatedLoop`)
against the in-process plant in simulated time — deterministic, as fast as the computer
allows. The arm starts at rest and is sent to :data:`TARGETS` reachable held targets in turn,
each commanded from where the previous one left it. A target is a task value ``h(q)`` of a
stable held configuration ``q`` (``G_u = 0``, ``H_uu ≻ 0``) of the simulated robot whose
actuators lie in the inner 80 % of their range, drawn with a fixed seed; the same targets
serve every mode and algorithm. With ``--plant`` they are the plant's (its true parameters:
a target the robot cannot hold within its actuator limits is no test of the controller), so
the controller's model, nominal or calibrated, is asked for the same reachable targets.

A target the controller's model refuses (its held configuration unstable on the model,
though the plant holds it) is a failure with the reason (``refused``), not the end of the run.

Per target, from the moment it is commanded (task error measured on the true state with the
plant's own task function — the dancer's centre of mass moves with its true masses — not the
noisy sensors):

* **success**: the error enters the band ``ε = min(3 mm, 0.5 % of the reach)`` and stays in it
  for :data:`HOLD` s, within the time limit ``2 s + max(10 s, 6 T) + the move``;
* **settling time**: when the error entered the band for good;
* **3 T**: three periods ``2π/ω`` of the slowest structural mode of the move — at its start
  or at the target, whichever is slower (the dancer's ankle sways at 1 rad/s upright and at
  2 rad/s crouched; the arm passes through both) — the goal is settling within 3 T of the end
  of the fastest move the actuator limits allow (issue 33: counted from the command, two
  tendon_3link targets could not meet it whatever the controller did); the JSON also has 3 T
  at the target alone and the share within 3 T of the command; **move**: the unshaped move's
  duration at the allowed actuator speed (no controller can be faster than the rate limits
  allow);
* **overshoot**: the largest excursion past the target along the direction of the move, in %
  of the distance moved;
* **peak actuator rate**: the largest ``|Δq̄a| / Δt`` of the setpoints, as a fraction of the
  rate limit;
* **statics residual**: ``‖G_u(q̄)‖`` at the end.

Results: a table and JSON (every target's record). ``figure`` draws the README's "feedback that
settles" plot.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from poise.benchmarks.benchout import run_each
from poise.benchmarks.calibrated import weigh
from poise.benchmarks.control_protocol import (
    ALGORITHMS,
    GOAL_PERIODS,
    HOLD,
    INNER,
    MODELS,
    MODES,
    SEED,
    SUCCESS_ABS,
    SUCCESS_REL,
    TARGETS,
)
from poise.controller.config import Config, load_config
from poise.controller.simulate import SimulatedLoop
from poise.examples import resolve_config
from poise.ik.statics import solve_statics
from poise.models.actuation import split
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.stability import structural_modes
from poise.sim.params import load_physical
from poise.sim.plant import plant_effects


@dataclass(frozen=True)
class TargetResult:
    """One target of one case (see the module docstring); times in s."""

    index: int
    target: list[float]
    success: bool
    settle_s: float | None
    goal_s: float
    goal_at_target_s: float
    move_s: float
    error_m: float
    overshoot_pct: float
    overshoot_m: float
    peak_rate: float
    residual: float
    refused: str = ""


def config_for(name: str, mode: str, algorithm: str, plant: str | None = None, *,
               example_target: bool = False, target: Sequence[float] | None = None,
               calibration: str | None = None, total_mass: float | None = None) -> Config:
    """The bundled example of ``name`` in ``mode`` with ``algorithm``, default gains, no
    target (the arm starts holding its rest pose; ``example_target``: the example's target;
    ``target``: this one), no MQTT; ``plant``: the simulated robot's true parameters (a model
    file, ``device.sim_params``; None: as the model says); ``calibration``: a calibration
    file the controller uses as its statics model (``model.calibration``); ``total_mass``:
    the robot's weighed total mass [kg] (``model.total_mass``)."""
    keys: dict[str, tuple[Any, str]] = {
        "loop.mode": (mode, "bench"), "algorithm.name": (algorithm, "bench"),
        "mqtt.enabled": (False, "bench"),
        "algorithm.gamma": ("auto", "bench"), "algorithm.gamma_z": ("auto", "bench"),
        "algorithm.gamma_e": ("auto", "bench")}
    if target is not None:
        keys["algorithm.target"] = (list(target), "bench")
    elif not example_target:
        keys["algorithm.target"] = (None, "bench")
    if plant is not None:
        keys["device.sim_params"] = (os.path.abspath(plant), "bench")
    if calibration is not None:
        keys["model.calibration"] = (os.path.abspath(calibration), "bench")
    if total_mass is not None:
        keys["model.total_mass"] = (total_mass, "bench")
    return load_config(resolve_config(name), keys)


def band(model: MechanicalModel) -> float:
    """The success band ε [task units]."""
    reach = getattr(model, "reach", None)
    return min(SUCCESS_ABS, SUCCESS_REL * reach) if reach else SUCCESS_ABS


def reachable_targets(model: MechanicalModel, qa_min: FloatArray, qa_max: FloatArray,
                      count: int = TARGETS, seed: int = SEED) -> list[FloatArray]:
    """``count`` task values of stable held configurations with actuators in the inner
    :data:`INNER` of ``[qa_min, qa_max]`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    lo, hi = np.asarray(qa_min, float), np.asarray(qa_max, float)
    mid, half = 0.5 * (lo + hi), 0.5 * INNER * (hi - lo)
    qu0 = split(model, np.zeros(model.n))[1]
    out: list[FloatArray] = []
    for _ in range(200 * count):
        if len(out) == count:
            break
        qa = mid + half * rng.uniform(-1.0, 1.0, model.m)
        sol = solve_statics(model, qa, qu0)
        if sol.converged and sol.stable and sol.min_eig > 1e-3:
            out.append(np.asarray(model.fk(sol.q), dtype=float))
    if len(out) < count:
        raise RuntimeError(f"{model.name}: only {len(out)} of {count} held targets found")
    return out


def run_case(name: str, mode: str, algorithm: str, targets: Sequence[FloatArray] | None = None,
             *, count: int = TARGETS, seed: int = SEED, plant: str | None = None,
             calibration: str | None = None) -> dict[str, Any]:
    """One model, mode and algorithm over the targets (default: :func:`reachable_targets` of
    the simulated robot, so that a nominal and a calibrated run meet the same reachable
    targets), against the plant ``plant`` describes, the controller using ``calibration``
    (:func:`config_for`). Against a plant the nominal controller is given the robot's
    weighed total mass (:func:`~poise.benchmarks.calibrated.weigh`, as the calibration is):
    feedback on a task through the masses needs it (:mod:`poise.motion.masses`)."""
    weighed = weigh(name, plant)[0] if plant is not None and calibration is None else None
    loop = SimulatedLoop(config_for(name, mode, algorithm, plant, calibration=calibration,
                                    total_mass=weighed), seed=seed)
    truth = loop.plant.physical
    if targets is None:
        targets = reachable_targets(truth, loop.limits.qa_min, loop.limits.qa_max, count,
                                    seed)
    eps = band(truth)
    loop.start()
    results = [_one_target(loop, i, np.asarray(x, float), eps) for i, x in enumerate(targets)]
    p = loop.params
    retarget = loop.step.retarget
    return {"model": name, "mode": mode, "algorithm": algorithm, "band_m": eps,
            # sampled re-targeting (fb, poise.motion.retarget): corrections made, re-plans
            "corrections": retarget.total if retarget is not None else 0,
            # the ring watch (fb, poise.motion.ringwatch): automatic gains backed off
            "rings": loop.step.ring.rings if loop.step.ring is not None else 0,
            # ... and plans whose automatic gains it stopped, feedback alone driving the
            # error away (poise.motion.ringwatch)
            "halts": loop.step.ring.halts if loop.step.ring is not None else 0,
            # ... and windows whose static error feedback barely moved (the gains doubled)
            "raises": loop.step.ring.raises if loop.step.ring is not None else 0,
            # the detuning of the plant's modes its sway after moves showed (fb,
            # poise.motion.sway), which the moves chosen later allowed for
            "detuning": loop.step.detuning,
            # the plant's stiffness scale the resting windows showed (fb, poise.motion.springs)
            "spring_scale": retarget.springs.scale if retarget is not None else 0.0,
            # the weighed total mass the nominal controller was given, and the task bias
            # the held efforts showed last (fb, poise.motion.masses)
            "total_mass": weighed,
            "task_bias": retarget.task_bias.tolist() if retarget is not None else [],
            # the resting windows showed friction, and the setpoints were dithered since
            # (fb, poise.motion.dither)
            "friction": retarget.friction if retarget is not None else False,
            "replans": loop.replans,
            # commits Algorithm 1 held at a fold of the model's held configurations while
            # integrating (poise.motion.stepper.snaps_through)
            "fold_holds": getattr(loop.step.stepper, "fold_holds", 0),
            # times Algorithm 2's q̄ was started again from the measured configuration, far
            # off it at rest in feedback (poise.motion.step.ControlStep._rebranch)
            "rebranches": loop.step.rebranches,
            # error maps feedback used where the plant's measured springs reversed the
            # model's answer, and the cycles that used one (fb, poise.motion.plantmap)
            "springs_maps": loop.step.springs_maps,
            # the balance controller by state feedback (fb, poise.motion.balance)
            "balance": loop.step.balance.summary() if loop.step.balance is not None else None,
            "plant_differs": loop.plant.differences,
            "calibration": calibration,
            "rate_hz": loop.config.loop.rate,
            "gains": {"gamma": p.gamma, "gamma_z": p.gamma_z, "gamma_e": p.gamma_e},
            "targets": [asdict(r) for r in results], **summarise(results)}


def _one_target(loop: SimulatedLoop, index: int, target: FloatArray, eps: float
                ) -> TargetResult:
    model, dt = loop.model, loop.period
    truth = loop.plant.physical  # the task point is where the true robot is
    x0 = np.asarray(truth.fk(loop.plant.q), dtype=float)
    here = structural_modes(model, loop.step.stepper.q_bar) if loop.step.stepper else []
    try:
        loop.set_target(target)
    except ValueError as exc:  # held by the plant, refused by the controller's model
        err = float(np.linalg.norm(target - x0))
        goal = GOAL_PERIODS * here[0].period if here else 0.0
        return TargetResult(index, target.tolist(), False, None, goal, goal, 0.0, err, 0.0,
                            0.0, 0.0, 0.0, refused=str(exc))
    report = loop.params.stability
    slow = report.slowest if report is not None else None
    at_target = GOAL_PERIODS * slow.period if slow is not None else math.inf
    goal = max(at_target, GOAL_PERIODS * here[0].period if here else 0.0)
    rate_limit = loop.limits.qa_rate
    direction = target - x0
    distance = float(np.linalg.norm(direction))
    direction = direction / distance if distance > 0 else direction
    qa_prev = np.asarray(loop.step.stepper.qa, dtype=float).copy() if loop.step.stepper \
        else None
    t, inside_since, peak_rate, overshoot = 0.0, None, 0.0, 0.0
    move_s = 0.0
    limit = None
    err = math.inf
    while True:
        out = loop.cycle()
        t += dt
        if limit is None:  # the move is made at its first cycle
            move = loop.step.move
            move_s = move.move_time if move is not None else 0.0
            limit = 2.0 + max(10.0, 2 * goal if math.isfinite(goal) else 10.0) + move_s \
                + (move.shaper.duration if move is not None else 0.0)
        x = np.asarray(truth.fk(loop.plant.q), dtype=float)
        err = float(np.linalg.norm(target - x))
        if qa_prev is not None:
            ratio = np.abs(out.qa - qa_prev) / dt / rate_limit
            peak_rate = max(peak_rate, float(np.max(ratio)))
        qa_prev = np.array(out.qa, dtype=float)
        overshoot = max(overshoot, float((x - target) @ direction))
        if err <= eps:
            inside_since = t if inside_since is None else inside_since
            if t - inside_since >= HOLD:
                break
        else:
            inside_since = None
        if t >= limit:
            break
    success = inside_since is not None and t - inside_since >= HOLD - 1e-9
    return TargetResult(
        index, target.tolist(), success, inside_since if success else None, goal, at_target,
        move_s,
        err, 100.0 * overshoot / distance if distance > 0 else 0.0, overshoot, peak_rate,
        float(out.residual))


def summarise(results: Sequence[TargetResult]) -> dict[str, Any]:
    """Success rate, settling times (and against 3 T), worst overshoot, peak rate, residual."""
    ok = [r for r in results if r.success]
    settle = np.array([r.settle_s for r in ok], dtype=float)
    ratio = np.array([r.settle_s / r.goal_s for r in ok if math.isfinite(r.goal_s)])
    after = np.array([(r.settle_s - r.move_s) / r.goal_s for r in ok
                      if math.isfinite(r.goal_s)])
    final = np.array([r.error_m for r in results], dtype=float)

    def pct(a: np.ndarray, q: float) -> float | None:
        return float(np.percentile(a, q)) if a.size else None

    return {
        "success_pct": 100.0 * len(ok) / len(results) if results else 0.0,
        # targets the plant holds that the controller's model refused (unstable there)
        "refused": [r.index for r in results if r.refused],
        # the task error at the end of each target's run (on the true state) [task units]
        "final_error": {"p50": pct(final, 50), "p95": pct(final, 95), "max": pct(final, 100)},
        "settle_s": {"p50": pct(settle, 50), "p90": pct(settle, 90), "max": pct(settle, 100)},
        "settle_over_3T": {"p50": pct(ratio, 50), "max": pct(ratio, 100)},
        "within_3T_pct": 100.0 * float(np.mean(ratio <= 1.0)) if ratio.size else None,
        # the goal: within 3 T of the end of the fastest move the actuator limits allow
        "within_3T_after_move_pct": 100.0 * float(np.mean(after <= 1.0)) if after.size
        else None,
        "after_move_over_3T_max": pct(after, 100),
        "goal_3T_s": {"min": min(r.goal_s for r in results), "max":
                      max(r.goal_s for r in results)} if results else None,
        "overshoot_pct_max": max((r.overshoot_pct for r in results), default=0.0),
        "overshoot_m_max": max((r.overshoot_m for r in results), default=0.0),
        "peak_rate_max": max((r.peak_rate for r in results), default=0.0),
        "residual_max": max((r.residual for r in results), default=0.0),
    }


def _case(args: tuple[str, str, str, list[list[float]] | None, int, int, str | None,
                      str | None]) -> dict[str, Any]:
    name, mode, algorithm, targets, count, seed, plant, calibration = args
    t0 = time.perf_counter()
    arrays = None if targets is None else [np.asarray(x, float) for x in targets]
    out = run_case(name, mode, algorithm, arrays, count=count, seed=seed, plant=plant,
                   calibration=calibration)
    out["wall_s"] = time.perf_counter() - t0
    return out


def run(models: Sequence[str] = MODELS, modes: Sequence[str] = MODES,
        algorithms: Sequence[str] = ALGORITHMS, *, count: int = TARGETS, seed: int = SEED,
        workers: int = 1, progress: Callable[[int], Any] | None = None,
        plants: Mapping[str, str] | None = None,
        calibrations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every case (model × mode × algorithm), in ``workers`` processes; JSON-ready.

    ``plants``: per model name, a model file of the simulated robot's true parameters
    (``device.sim_params``), the controller keeping its own model: how the defaults cope
    with a model that is off. The others are simulated as the model says.
    ``calibrations``: per model name, a calibration file the controller uses instead of its
    nominal statics (``model.calibration``; :mod:`poise.benchmarks.calibrated` makes them on
    the plant); the targets stay the nominal model's.

    Raises:
        ValueError: a plant for a model not run, or a plant file that does not match its
            model (the message says what).
    """
    plants = dict(plants or {})
    unknown = sorted(set(plants) - set(models))
    if unknown:
        raise ValueError(f"plant given for {', '.join(unknown)}, not among the models run "
                         f"({', '.join(models)})")
    for name, path in plants.items():  # refused here, before any case runs
        _, physical, _ = load_physical(name, path)
        plant_effects(name, path, physical.n, physical.m)
    t0 = time.perf_counter()
    calibrations = dict(calibrations or {})
    jobs = [(name, mode, alg, None, count, seed, plants.get(name), calibrations.get(name))
            for name in models for mode in modes for alg in algorithms]
    cases: list[dict[str, Any]] = []
    cases.extend(run_each(_case, jobs, workers, progress))
    return {"benchmark": "control", "targets_per_case": count, "seed": seed, "hold_s": HOLD,
            "band": f"min({SUCCESS_ABS * 1e3:g} mm, {SUCCESS_REL * 100:g} % of the reach)",
            "goal": f"settling <= {GOAL_PERIODS:g} periods of the slowest structural mode",
            "plants": plants, "calibrations": calibrations,
            "wall_s": time.perf_counter() - t0, "workers": workers,
            "load_avg": list(os.getloadavg()), "python": platform.python_version(),
            "numpy": np.__version__, "machine": platform.machine(), "cases": cases}


def table(result: dict[str, Any]) -> str:
    """The results as a text table."""
    head = (f"{'model':16} {'mode':4} {'alg':4} {'ok %':>5} {'settle p50':>10} {'max':>6} "
            f"{'3T':>11} {'max/3T':>7} {'≤3T %':>6} {'ovs %':>6} {'rate':>5} {'resid':>8} "
            f"{'err p95':>7}")
    lines = [head, "-" * len(head)]

    def f(v: float | None, fmt: str) -> str:
        """``v`` in ``fmt``; ``-`` as wide where there is none (no target succeeded)."""
        return format(v, fmt) if v is not None else "-".rjust(int(fmt.split(".")[0] or 0))

    for c in result["cases"]:
        g = c["goal_3T_s"] or {}
        goal = f"{g.get('min', 0):.2f}-{g.get('max', 0):.2f}" if g else "-"
        lines.append(
            f"{c['model']:16} {c['mode']:4} {c['algorithm']:4} {c['success_pct']:5.0f} "
            f"{f(c['settle_s']['p50'], '10.2f')} {f(c['settle_s']['max'], '6.2f')} "
            f"{goal:>11} {f(c['settle_over_3T']['max'], '7.2f')} "
            f"{f(c.get('within_3T_after_move_pct'), '6.0f')} "
            f"{c['overshoot_pct_max']:6.1f} {c['peak_rate_max']:5.2f} "
            f"{c['residual_max']:8.1e} {f(_mm(c['final_error']['p95']), '7.2f')}")
    lines.append(
        f"{result['targets_per_case']} targets per case, band {result['band']} held "
        f"{result['hold_s']:g} s; settle [s] from the command; 3T: three periods of the slowest "
        "structural mode (range over the targets); ≤3T %: settled within 3T of the end of the "
        "fastest move the rate limits allow (the goal); ovs: overshoot along the move; rate: peak "
        "setpoint rate / rate limit; resid: max ‖G_u(q̄)‖ [N·m]; err p95: task error at the end "
        "of a target's run [mm], 95th percentile; "
        f"wall {result['wall_s']:.0f} s, load {result['load_avg'][0]:.1f}")
    for c in result["cases"]:
        if c.get("refused"):
            lines.append(f"{c['model']} {c['mode']} {c['algorithm']}: target(s) "
                         f"{', '.join(map(str, c['refused']))} refused by the controller's "
                         "model (unstable there), though the plant holds them")
    for name, path in (result.get("plants") or {}).items():
        differs = next((c["plant_differs"] for c in result["cases"] if c["model"] == name), [])
        cal = (result.get("calibrations") or {}).get(name)
        lines.append(f"{name}: the simulated robot is {path} ({'; '.join(differs) or 'the same'}),"
                     + (" the controller uses the model calibrated on it" if cal else
                        " the controller keeps its model"))
    return "\n".join(lines)


def _mm(value: float | None) -> float | None:
    return None if value is None else 1e3 * value


def dumps(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1) + "\n"


def figure(path: str, seconds: float = 20.0) -> str:
    """The README figure: the issue's run (``soft_arm_soft``, target (0.2, −0.95), fb) with
    the old default gain Γ = 2 and an unshaped move, against the automatic gain and the
    shaped move; task error [m] against time, log scale, with the band and 3 T. Needs
    matplotlib (``pip install 'poise[plot]'``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from poise.motion.shaping import Shaper

    target = np.array([0.2, -0.95])
    runs = {}
    for label, old in (("Γ = 2 (old default, above the bound), unshaped move", True),
                       ("automatic Γ (0.3 × bound), shaped move (ZVDD)", False)):
        loop = SimulatedLoop(config_for("soft_arm_soft", "fb", "alg1"), seed=SEED)
        loop.start()
        loop.set_target(target)
        report = loop.params.stability
        if old:  # what the service did before issue 14 (the bound check bypassed)
            loop.params = replace(loop.params, gamma=2.0, auto=frozenset())
            plan = loop.step.plan
            loop.step.plan = replace(plan, shaper=Shaper())
        errors = loop.run(seconds)
        runs[label] = (errors, report, loop.period)
    fig, ax = plt.subplots(figsize=(7.5, 3.6), dpi=120)
    for label, (errors, _, dt) in runs.items():
        ax.semilogy(np.arange(1, errors.size + 1) * dt, np.maximum(errors, 1e-5), lw=1,
                    label=label)
    report = next(iter(runs.values()))[1]
    ax.axhline(SUCCESS_ABS, color="k", ls=":", lw=0.8, label="3 mm")
    if report is not None and report.slowest is not None:
        ax.axvline(GOAL_PERIODS * report.slowest.period, color="g", ls="--", lw=0.8,
                   label=f"3 T (ω = {report.slowest.omega:.2f} rad/s, "
                         f"ζ = {report.slowest.zeta:.2f})")
    ax.set_xlabel("time since the target command [s]")
    ax.set_ylabel("task error [m]")
    ax.set_title("soft_arm_soft, target (0.2, −0.95) m, feedback mode")
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


__all__ = ["ALGORITHMS", "MODELS", "MODES", "TARGETS", "TargetResult", "band", "config_for",
           "dumps", "figure", "reachable_targets", "run", "run_case", "summarise", "table"]
