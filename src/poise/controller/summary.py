"""What a run achieved, JSON-ready: the service's ``summary`` and ``final_summary``.

:func:`summary` reads the service (:class:`~poise.controller.service.Controller`): its last
cycle (or, once stopped, the run's last cycle before the disarmed device moved), its live
parameters and plan, the timing, the device and its link; NaN and inf become None (strict
JSON).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from poise.api.state import LATCHED, State
from poise.devices.base import DeviceInfo
from poise.motion.stability import ALGORITHM_GAINS

if TYPE_CHECKING:
    from poise.controller.service import Controller


def summary(ctl: Controller) -> dict[str, Any]:
    """:meth:`Controller.summary <poise.controller.service.Controller.summary>`: ``reached``,
    ``task_error`` (measured), ``statics_residual``, ``state``, ``timing`` (µs percentiles,
    missed cycles) and more. Once stopped, the values are those of the run's last cycle."""
    cycle, step = ctl.cycle, ctl.step
    last = cycle.last if ctl._at_stop is None else ctl._at_stop
    p = cycle.params
    err = last.get("task_error", math.nan)
    st = step.stepper
    wire, pacer = cycle.wire, ctl.pacer
    out = {
        # a latched fault or e-stop has stopped the control: not "reached", however
        # close the arm stood when it latched
        "reached": bool(err <= ctl.config.algorithm.tolerance) and ctl.state not in LATCHED,
        "task_error": err,
        "task_error_predicted": float(np.linalg.norm(p.target - st.x_bar)) if st else None,
        "statics_residual": st.residual if st is not None else math.nan,
        "state": ctl.state.value,
        "reason": ctl.reason,
        "model": ctl.model.name,
        "calibration": ctl.model_info.calibration,
        "algorithm": p.algorithm,
        "mode": p.mode,
        "params": p.as_dict(),
        "rate_hz": ctl.config.loop.rate,
        "pacing": ctl.pacing,
        "target": p.target.tolist(),
        "target_status": ctl.target_status,
        "target_note": ctl.target_note,
        "x": _list(last.get("x")),
        "q": _list(last.get("q")),
        "q_bar": _list(last.get("q_bar")),
        "qa_ref": list(last.get("qa_ref") or ()),
        "qa": list(last.get("qa") or ()),
        "tau_ff": list(last.get("tau") or ()),
        "duration_s": (time.monotonic() - ctl._started_at) if ctl._started_at else 0.0,
        "timing": ctl.timing(),
        "limits": ctl.limits.as_dict(),
        "events": dict(collections.Counter(e.kind for e in ctl.history())),
        "statics_fallbacks": getattr(st, "fallbacks", 0),
        # commits Algorithm 1 held at a fold of the model's held configurations
        "fold_holds": getattr(st, "fold_holds", 0),
        "reference_s": step.reference_seconds,
        "move": step.move_summary,
        "feedback": feedback_summary(ctl),
        "dispatch": dataclasses.asdict(ctl.dispatcher.stats),
        "realtime": {**pacer.realtime, "gc_between_cycles": list(pacer.gc.collections)},
        "wire": {} if wire is None else {"answered": wire.answered, "passed": wire.passed},
    }
    out.update(device_summary(ctl))
    return clean(out)


def feedback_summary(ctl: Controller) -> dict[str, Any]:
    """What feedback did to the current plan: ``gains``, the rate gains the IK steps with
    now (the automatic ones × ``gain_scale`` of the ring watch, :mod:`poise.motion.ringwatch`;
    ``rings`` over the run) and ``retarget``, the sampled corrections of the current plan
    (:mod:`poise.motion.retarget`), with ``springs_maps``, the error maps its measured
    springs called for (:mod:`poise.motion.plantmap`); ``sway``, the plant's sway after moves
    and the detuning of its modes it showed (:mod:`poise.motion.sway`); ``balance``, the
    balance controller by state feedback (:mod:`poise.motion.balance`); ``{}`` without any
    (no tolerance set)."""
    step, p = ctl.step, ctl.cycle.params
    out: dict[str, Any] = {}
    ring, retarget = step.ring, step.retarget
    if ring is not None:
        used = step.backed_off(p)
        out.update(ring.summary())
        out["gains"] = {k: float(getattr(used, k)) for k in ALGORITHM_GAINS.get(p.algorithm, ())}
    if retarget is not None:
        out["retarget"] = retarget.summary()
        out["springs_maps"] = step.springs_maps
    if step.sway is not None:
        out["sway"] = step.sway.summary()
    if step.balance is not None:
        out["balance"] = step.balance.summary()
    return out


def final_summary(ctl: Controller) -> dict[str, Any]:
    """:func:`summary` with the state the run ended in: ``fault``, ``estop`` or
    ``stopped``."""
    out = summary(ctl)
    if out["state"] not in (State.FAULT.value, State.ESTOP.value):
        out["state"] = "stopped"
    return out


def device_summary(ctl: Controller) -> dict[str, Any]:
    """``device`` (what it is), ``link`` (the poise-protocol stream's statistics) and
    ``bus_rtt_us`` (a polled servo bus's round trip), where they apply."""
    out: dict[str, Any] = {}
    info, device = ctl.device_info, ctl.device
    if info is not None:
        out["device"] = device_dict(info)
    sim = ctl.sim
    if sim is not None:
        out["device"] = {**out.get("device", {}), "port": "sim",
                         "model": getattr(sim, "model", ""), "pty": getattr(sim, "pty", "")}
    if device is None:
        return out
    stats = device.stats()
    parts = [stats.get("sensors"), stats.get("actuators"), stats]
    for part in parts:
        if isinstance(part, dict) and "sensor_frames" in part and "link" not in out:
            out["link"] = part
        if isinstance(part, dict) and "bus_rtt_us" in part and "bus_rtt_us" not in out:
            out["bus_rtt_us"] = part["bus_rtt_us"]
    return out


def device_dict(info: DeviceInfo) -> dict[str, Any]:
    """What a device is, JSON-ready (the ``device`` of the summary and the ``info`` event)."""
    return {"name": info.name, "n_q": info.n_q, "n_a": info.n_a, "polled": info.polled,
            "rate_hz": info.rate_hz, "ids": list(info.ids), **info.extra}


def _list(a: Any) -> list[float] | None:
    return None if a is None else [float(x) for x in np.asarray(a).ravel()]


def clean(v: Any) -> Any:
    """NaN/inf → None, recursively (strict JSON)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    return v


__all__ = ["clean", "device_dict", "device_summary", "feedback_summary", "final_summary",
           "summary"]
