"""The report of ``poise bench tracking`` (:mod:`poise.benchmarks.tracking`): the protocol
for the JSON, each robot's physics, the goal check and the table."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from poise.benchmarks.tracking_protocol import GOALS
from poise.benchmarks.tracking_refs import quasi_static


def protocol() -> dict[str, Any]:
    """The protocol's constants, for the JSON."""
    from poise.benchmarks import tracking_protocol as p

    return {"amplitude": "a fraction of model.reach (each case's amplitude_of_reach; "
            f"default {p.AMPLITUDE:g})", "stream_hz": p.STREAM_HZ,
            "settle_s": p.SETTLE_S, "lead_in_s": p.LEAD_IN_S, "steps": p.STEPS,
            "step_s": p.STEP_S, "trajectory_tail_s": p.TRAJECTORY_TAIL_S,
            "max_lag_s": p.MAX_LAG_S, "rate_bound": p.RATE_BOUND,
            "clamped_share": p.CLAMPED_SHARE, "filter_share": p.FILTER_SHARE,
            "window": "the second of two periods; steps: the last step to 3 s after it",
            "error": "‖h(q) − x_r(t)‖ on the true state",
            "goals": [goal_text(g) for g in GOALS]}


def robot_physics(results: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Per robot: the amplitudes and centre, the slowest mode and, at each frequency run,
    what a quasi-static loop leaves without feedback (:func:`quasi_static`, ff)."""
    out: dict[str, Any] = {}
    for c in results:
        r = out.setdefault(c["robot"], {"amplitudes": [], "centre": c["centre"],
                                        "slowest_mode": c["slowest_mode"], "quasi_static": {}})
        if c["amplitude"] not in r["amplitudes"]:
            r["amplitudes"].append(c["amplitude"])
        mode = c["slowest_mode"]
        if c["freq_hz"] is not None and mode is not None:
            r["quasi_static"][f"{c['freq_hz']:g}"] = quasi_static(c["freq_hz"], mode["omega"],
                                                                  mode["zeta"])
    for r in out.values():
        r["quasi_static"] = dict(sorted(r["quasi_static"].items(), key=lambda i: float(i[0])))
    return out


def goal_text(goal: tuple[str, str, float, str, float]) -> str:
    how, mode, freq, plant, limit = goal
    on = "on the model" if plant == "model" else "on a plant that differs from the model"
    return f"{how} RMS ≤ {limit:g} % of A at {freq:g} Hz in {mode}, {on}"


def check_goals(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each goal against each case it applies to (a sine or circle of its frequency, mode,
    way and plant): ``met`` True / False, or None where the reference left what the arm can
    follow (flag C or L) and missed; ``why`` gives the physics of a miss (the quasi-static
    estimate through the slowest mode) and says what held the arm back. A goal no case
    applies to is listed with its case None."""
    checks = []
    for goal in GOALS:
        how, mode, freq, plant, limit = goal
        hits = [c for c in results if c["as"] == how and c["mode"] == mode
                and c["kind"] != "steps" and math.isclose(c["freq_hz"], freq)
                and (plant == "model") == (not c["plant_differs"])]
        if not hits:
            checks.append({"goal": goal_text(goal), "case": None, "met": None,
                           "why": "not run"})
        for c in hits:
            checks.append({"goal": goal_text(goal), "case": c["id"], "robot": c["robot"],
                           "limit_pct": limit, **_verdict(c, limit)})
    return checks


def _verdict(c: dict[str, Any], limit: float) -> dict[str, Any]:
    """Met, missed (with the physics and the limits that explain it) or not applicable (the
    reference left what the arm can follow; the physics still said when the goal is beyond
    the arm's slowest mode at any amplitude)."""
    if c["status"] != "ok":
        return {"rms_pct": None, "met": False, "why": f"{c['status']}: {c['reason']}"}
    rms = c["rms_pct"]
    if rms <= limit:
        return {"rms_pct": rms, "met": True, "why": ""}
    why = []
    if c["held_back"]:
        why.append(f"the reference leaves what the arm can follow (held back "
                   f"{c['clamped_pct']:.0f} % of the window, an actuator at its limit "
                   f"{c['at_limit_pct']:.0f} %)")
    qs, mode = c["quasi_static"], c["slowest_mode"]
    if qs is not None and mode is not None and (qs["rms_pct"] > limit or not c["held_back"]):
        why.append(f"slowest mode ω_n = {mode['omega']:.2f} rad/s ({mode['hz']:.2f} Hz), "
                   f"ζ = {mode['zeta']:.2f}: ω/ω_n = {qs['r']:.2f}, |1 − H| = "
                   f"{qs['error_pct']:.0f} %, |S| = {qs['feedback']:.2f} (Γ = "
                   f"{c['gains']['lead']:.2g} /s): a quasi-static loop leaves ≈ "
                   f"{qs['rms_pct']:.1f} % RMS"
                   + (", the goal is beyond it at any amplitude" if qs["rms_pct"] > limit
                      else ""))
    if "R" in c["flags"]:
        why.append(f"rate-bound (peak setpoint rate {c['peak_rate']:.2f} of the limit, the "
                   f"stream's filter slowed the reference on {c['filter_limited_pct']:.0f} % "
                   "of the window)")
    return {"rms_pct": rms, "met": None if c["held_back"] else False, "why": "; ".join(why)}


def table(result: dict[str, Any]) -> str:
    """The results as a text table: one row per case, then the physics and the goals."""
    head = (f"{'robot':16} {'mode':4} {'alg':4} {'plant':5} {'kind':6} {'f Hz':>5} "
            f"{'as':10} {'A':>6} {'rms %A':>7} {'max %A':>7} {'lag s':>6} {'rate':>5} "
            f"{'flags':5}")
    lines = [head, "-" * len(head)]
    for c in result["cases"]:
        f = "-" if c["freq_hz"] is None else f"{c['freq_hz']:g}"
        row = (f"{c['robot']:16} {c['mode']:4} {c['algorithm']:4} "
               f"{'model' if c['plant'] == 'model' else 'off':5} {c['kind']:6} {f:>5} "
               f"{c['as']:10} {c['amplitude']:6.3f} ")
        if c["status"] != "ok":
            lines.append(row + f"{c['status']}: {c['reason']}")
            continue
        lag = f"{c['lag_s']:+.2f}" + ("!" if c["lag_at_bound"] else "")
        lines.append(row + f"{c['rms_pct']:7.1f} {c['max_pct']:7.1f} {lag:>6} "
                     f"{c['peak_rate']:5.2f} {c['flags'] or '-':5}")
    fractions = sorted({c["amplitude_of_reach"] for c in result["cases"]})
    lines.append(
        f"A: amplitude / radius / step [task units] = "
        f"{' or '.join(f'{f:.0%}' for f in fractions)} of the reach; rms, max: task error "
        "over the window [% of A]; lag: steady lag [s] (! at the ±1 s bound); rate: peak "
        "setpoint rate / limit; flags: C held back from the reference, L an actuator at its "
        "limit, R rate-bound (setpoint or stream filter at the actuators' limits)")
    for name, r in result["robots"].items():
        m = r["slowest_mode"]
        if m is None:
            lines.append(f"{name}: no structural mode")
            continue
        qs = ", ".join(f"{f} Hz {q['rms_pct']:.1f} %" for f, q in r["quasi_static"].items())
        lines.append(f"{name}: slowest mode {m['omega']:.2f} rad/s ({m['hz']:.2f} Hz), "
                     f"ζ {m['zeta']:.2f}; a quasi-static loop without feedback leaves "
                     f"|1 − H|/√2 RMS of a sine: {qs or '-'}")
    lines.append(f"trajectories: {result['trajectory']}")
    for g in result["goals"]:
        verdict = {True: "met", False: "MISSED", None: "n/a"}[g["met"]]
        rms = "" if g.get("rms_pct") is None else f" {g['rms_pct']:.1f} %"
        why = f" ({g['why']})" if g["why"] else ""
        lines.append(f"goal {g['goal']}: {g['case'] or '-'}{rms} {verdict}{why}")
    for name, path in result["plants"].items():
        differs = next((c["plant_differs"] for c in result["cases"] if c["robot"] == name
                        and c["plant"] != "model"), [])
        lines.append(f"{name}: 'off' is {path} ({'; '.join(differs) or 'the same'}), the "
                     "controller keeps its model")
    lines.append(f"wall {result['wall_s']:.0f} s, load {result['load_avg_before'][0]:.1f} "
                 f"→ {result['load_avg'][0]:.1f}")
    return "\n".join(lines)


__all__ = ["check_goals", "goal_text", "protocol", "robot_physics", "table"]
