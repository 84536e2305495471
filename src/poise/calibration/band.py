"""What the statics model cannot explain: the friction band and the hysteresis of settled poses.

``K (q − q0) + G_grav(q) = Aᵀ τ`` has one equilibrium per actuator command; a real arm rests
anywhere inside a band around it. Coulomb friction and stiction in the joints and sheaths stop
it wherever its last swing died inside the breakaway torque, and a hysteretic spring
(Bouc–Wen) keeps a torque that remembers the way in. Neither is a parameter of the statics: a
swinging arm comes to rest on either side of the equilibrium whatever side it came from (a
per-direction offset fitted beside the parameters does not describe it and was measured to
bias them more than it helps), and the excitation's loading and unloading passes cancel it in
the least-squares fit. What the calibration does is *report* it (:func:`static_residuals`):

* **the band**: per coordinate ``c``, the widest static residual ``2 max_i |r_ic|`` [N·m]
  with ``r_i = Y(q_i, τ_i) π̂`` (the torque the statics cannot account for at a settled pose),
  its RMS, and the band as an angle ``/ k_c`` [rad] for a coordinate with a spring — where
  the arm may rest for one command;
* **the hysteresis**: every actuator reference is visited loading and unloading
  (:func:`pair_spread`): the two visits' configurations differ by ``|q_load − q_unload|``
  [rad], the task point by ``‖Δh‖``, and the residual by ``r_unload − r_load`` [N·m] (its
  mean over the pairs is the loop's height: zero for a band that does not remember the way
  in). What the same command does depending on the way in, which no statics model, and no
  feed-forward, can remove: feedback has to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from poise.calibration.poses import Pose
from poise.models.base import FloatArray


def pair_spread(model: Any, poses: Sequence[Pose],
                residuals: FloatArray | None = None) -> dict[str, Any]:
    """The hysteresis the routine saw: over the settled actuator references visited both
    loading and unloading, per coordinate the RMS and largest ``|q_load − q_unload|`` [rad],
    the largest and RMS distance between the two task points [task units] and, given the
    poses' ``residuals`` (N, n) [N·m], the mean ``r_unload − r_load`` per coordinate
    (``loop_Nm``); ``pairs`` 0 (and Nones) without any pair."""
    first: dict[tuple[float, ...], int] = {}
    dq, dh, dr = [], [], []
    for i, p in enumerate(poses):
        if not p.settled:
            continue
        key = tuple(np.round(np.asarray(p.qa_ref, dtype=float), 9))
        j = first.setdefault(key, i)
        other = poses[j]
        if j == i or other.direction == p.direction:
            continue
        dq.append(np.abs(np.asarray(p.q) - np.asarray(other.q)))
        dh.append(float(np.linalg.norm(np.asarray(model.fk(p.q))
                                       - np.asarray(model.fk(other.q)))))
        if residuals is not None:
            load, unload = (j, i) if other.direction == "loading" else (i, j)
            dr.append(np.asarray(residuals[unload]) - np.asarray(residuals[load]))
    if not dq:
        return {"pairs": 0, "q_rms_rad": None, "q_max_rad": None, "task_max": None,
                "task_rms": None, "loop_Nm": None}
    D = np.array(dq)
    return {"pairs": len(dq), "q_rms_rad": np.sqrt(np.mean(D**2, axis=0)).tolist(),
            "q_max_rad": D.max(axis=0).tolist(), "task_max": max(dh),
            "task_rms": float(np.sqrt(np.mean(np.square(dh)))),
            "loop_Nm": np.mean(dr, axis=0).tolist() if dr else None}


def static_residuals(model: Any, coordinates: Sequence[str], residuals: FloatArray,
                     stiffness: FloatArray, poses: Sequence[Pose], *,
                     sprung: Sequence[bool] | None = None) -> dict[str, Any]:
    """The report of what the statics cannot explain (see the module docstring), JSON-ready.

    Args:
        coordinates: the coordinates' names.
        residuals: the static residuals ``Y π̂`` of ``poses`` (N, n) [N·m].
        stiffness: the identified springs ``k_c`` [N·m/rad].
        poses: the settled poses the residuals belong to, in the routine's order.
        sprung: which coordinates have a spring (the band as an angle only for those);
            default: where ``k_c > 0``.
    """
    R = np.asarray(residuals, dtype=float).reshape(len(poses), len(coordinates))
    rows = []
    for c, name in enumerate(coordinates):
        k = float(stiffness[c]) if sprung is None or sprung[c] else 0.0
        width = 2.0 * float(np.max(np.abs(R[:, c]))) if len(R) else math.nan
        rows.append({"coordinate": name, "band_Nm": width,
                     "rms_Nm": float(np.sqrt(np.mean(R[:, c] ** 2))) if len(R) else math.nan,
                     "band_rad": width / k if k > 0 else None})
    return {"band": rows, "hysteresis": pair_spread(model, poses, R),
            "units": {"band": "N*m (full width: twice the largest residual), rad (over the "
                              "identified stiffness)",
                      "hysteresis": "rad; task: the model's task units; loop: N*m"}}


def describe(report: dict[str, Any]) -> str:
    """One line for people: the bands and the loading/unloading spread."""
    parts = []
    for row in report["band"]:
        angle = f" = {row['band_rad'] * 1e3:.2g} mrad" if row["band_rad"] is not None else ""
        parts.append(f"{row['coordinate']} {row['band_Nm']:.2g} N·m{angle}")
    text = "static band (what the statics cannot explain: friction, hysteresis, noise): " \
        + ", ".join(parts)
    hyst = report["hysteresis"]
    if hyst["pairs"]:
        text += (f"; loading vs unloading at the same command ({hyst['pairs']} pairs): up to "
                 f"{max(hyst['q_max_rad']) * 1e3:.2g} mrad apart, the task point up to "
                 f"{hyst['task_max'] * 1e3:.3g} mm")
    return text


__all__ = ["describe", "pair_spread", "static_residuals"]
