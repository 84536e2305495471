"""The identifiability stage of a statics identification: what the data do not determine,
and what would.

A calibration is refused when a direction of the scaled regressor is numerically rank
deficient (``σ_i < rcond · σ_max``) or so weakly excited that its relative standard error
``σ̂ / σ_i`` exceeds ``max_rel_se``, or when an actuator barely moved (its measured range <
``min_coverage`` of its safe range). :func:`diagnose` names the undetermined parameters (the
largest components of the weak directions) and the excitation that would determine them;
:func:`verdict` says it in one paragraph.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from poise.calibration.grouping import Group
from poise.calibration.lsq import StaticsFit
from poise.calibration.poses import Pose, safe_range
from poise.calibration.regressor import StaticsRegressor
from poise.models.base import FloatArray


@dataclass(frozen=True)
class Diagnosis:
    """Attributes:
        identifiable: no weak direction and every actuator covered.
        undetermined: names of the groups (and offsets) the data do not determine.
        advice: what excitation (or extra known quantity) would fix it.
        coverage: per actuator, measured range / safe range.
    """

    identifiable: bool
    undetermined: list[str]
    advice: list[str]
    coverage: FloatArray


def diagnose(reg: StaticsRegressor, model: Any, fit: StaticsFit, poses: Sequence[Pose],
             groups: list[Group], fixed_group: str, ties: tuple[str, ...], *,
             max_rel_se: float, min_coverage: float) -> Diagnosis:
    """Weak directions of ``fit`` and uncovered actuators, with the advice that fixes them."""
    sv, sigma = fit.singular_values, fit.sigma
    weak_dirs: list[FloatArray] = []
    for i in range(sv.size):
        rel_se = sigma / sv[i] if sv[i] > 0 else math.inf
        if i >= fit.rank or rel_se > max_rel_se:
            weak_dirs.append(fit.directions[i])
    undetermined: list[str] = []
    for v in weak_dirs:
        big = np.argsort(-np.abs(v))
        top = float(np.abs(v[big[0]]))
        for k in big:
            if abs(v[k]) >= 0.3 * top and abs(v[k]) >= 0.2:
                name = fit.column_names[k]
                if name not in undetermined:
                    undetermined.append(name)
    coverage = _coverage(model, poses)
    uncovered = [j for j in range(reg.m) if coverage[j] < min_coverage]
    for j in uncovered:
        for name in _actuator_parameters(reg, j, groups):
            if name not in undetermined and name != fixed_group:
                undetermined.append(name)
    advice = _advice(reg, model, coverage, uncovered, undetermined, weak_dirs, poses, groups,
                     ties)
    return Diagnosis(not weak_dirs and not uncovered, undetermined, advice, coverage)


def _coverage(model: Any, poses: Sequence[Pose]) -> FloatArray:
    qa = np.array([p.qa for p in poses])
    spread = qa.max(axis=0) - qa.min(axis=0)
    try:
        lo, hi = safe_range(model, 0.0)
        width = hi - lo
    except ValueError:
        width = np.full(model.m, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = np.where(np.isfinite(width) & (width > 0), spread / width, 1.0)
    return cov


def _actuator_parameters(reg: StaticsRegressor, j: int, groups: list[Group]) -> list[str]:
    """Groups that only the motion of actuator ``j`` excites: its moment arms and the
    parameters of the coordinates it crosses."""
    coords = {i for (jj, i) in reg.arm_index if jj == j}
    members = {k for k, p in enumerate(reg.params)
               if (p.kind == "moment_arm" and p.actuator == j)
               or (p.kind != "moment_arm" and p.coordinate in coords)}
    return [g.name for g in groups if members & set(g.members)]


def _advice(reg: StaticsRegressor, model: Any, coverage: FloatArray, uncovered: list[int],
            undetermined: list[str], weak_dirs: list[FloatArray], poses: Sequence[Pose],
            groups: list[Group], ties: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    try:
        lo, hi = safe_range(model, 0.0)
    except ValueError:
        lo = hi = np.full(reg.m, np.nan)
    for j in uncovered:
        out.append(f"move actuator {j} over its safe range [{lo[j]:.4g}, {hi[j]:.4g}] "
                   f"(it moved over {100 * coverage[j]:.1f} % of it)")
    if weak_dirs and not uncovered:
        names = set(undetermined)
        members = {k for g in groups if g.name in names for k in g.members}
        weak = [reg.params[k] for k in sorted(members)]
        acts = sorted({p.actuator for p in weak if p.actuator >= 0}
                      | {j for (j, i) in reg.arm_index if any(p.coordinate == i for p in weak)})
        if acts:
            out.append("excite actuator(s) " + ", ".join(map(str, acts)) + " over their whole "
                       "safe range with more levels (a finer grid, both directions) and average "
                       "longer at each pose, so that the gravity load changes between poses")
        kinds = sorted({p.kind for p in weak if p.kind in ("mass", "mass_moment", "stiffness")
                        and p.kind not in ties})
        if kinds:
            out.append("or, if the design justifies it, tie them (" + ", ".join(
                f"--tie {k}" for k in kinds) + ": one value for all, nominal proportions kept)")
        if getattr(model, "gravity", 0.0) == 0.0 and any(
                p.kind in ("stiffness", "k_rest") for p in weak):
            out.append("without gravity each joint's equation has its own scale: fix one known "
                       "quantity per actuated section (e.g. each tendon radius)")
        if len(poses) * reg.n < 2 * len(groups):
            out.append(f"use more poses (now {len(poses)} poses for {len(groups)} parameters)")
        out.append("or keep what the data cannot determine near the nominal model (--prior "
                   "0.2: within ±20 %; the weak directions matter least for the statics)")
    return out



def verdict(model: Any, ok: bool, rank: int, n_free: int, cond: float, undetermined: list[str],
            advice: list[str], problems: list[str], fix_name: str, fix_value: float,
            fix_unit: str, groups: list[Group], validated: bool = True,
            validation: str = "", *, total_mass: float | None = None,
            total_mass_constrained: bool = False, total_mass_sd: float | None = None) -> str:
    """The verdict for people: identified (and validated or not), or why not and what to
    change (:attr:`~poise.calibration.identify.Identification.message`)."""
    scale = f"scale fixed by {fix_name} = {fix_value:g} {fix_unit}"
    if total_mass is not None and total_mass_sd is not None:
        scale += (f"; weighed total mass {total_mass:g} ± {total_mass_sd:g} kg"
                  + ("" if total_mass_constrained else
                     " (implied by the scale alone within its precision, adds nothing)"))
    elif total_mass is not None:
        scale += (f"; total mass {total_mass:g} kg (weighed, held exactly)"
                  if total_mass_constrained else
                  f"; total mass {total_mass:g} kg (weighed; implied by the scale alone, "
                  "adds nothing)")
    tied = [g.name for g in groups if len(g.members) > 1]
    if tied:
        scale += "; tied: " + ", ".join(tied)
    if ok and validated:
        return (f"{model.name}: all {n_free} free parameters identified (rank {rank}, "
                f"condition number {cond:.3g}; {scale}); {validation}")
    if ok:
        return (f"{model.name}: all {n_free} free parameters fitted (rank {rank}, "
                f"condition number {cond:.3g}; {scale}) but NOT validated, {validation}; "
                "the values are unchecked")
    parts = [f"{model.name}: not identifiable (rank {rank} of {n_free}, condition number "
             f"{cond:.3g}; {scale})"]
    parts += problems
    if undetermined:
        parts.append("not determined by the data: " + ", ".join(undetermined))
    if advice:
        parts.append("to fix: " + "; ".join(advice))
    return ". ".join(parts)


__all__ = ["Diagnosis", "diagnose", "verdict"]
