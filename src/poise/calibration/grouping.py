"""The known quantities and the parameter groups of a statics identification.

The stacked equations ``Y π = 0`` are homogeneous: one parameter ``π_f`` is fixed to a known
value (:func:`parse_fix`). A weighed total mass is a second known quantity, the linear equality
``cᵀ π = M`` with ``cᵀ π = Σ masses_of(π)`` (:func:`total_mass_row`,
:func:`total_mass_constraint`), held exactly or, given the scale's standard deviation ``σ_M``
(:func:`check_total_mass_sd`), a measurement of ``cᵀ π``. Parameters of one kind may be *tied*
into one group estimated as one (:func:`parameter_groups`), ``π = T θ`` with the group matrix
``T`` (:func:`group_matrix`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from poise.calibration.regressor import CalibrationError, StaticsRegressor
from poise.models.base import FloatArray


def parse_fix(reg: StaticsRegressor, fix: str | tuple[str, float] | None) -> tuple[int, float]:
    """The scale parameter: its index and value.

    ``None``: the first moment arm at its nominal value (a tendon radius from the drawing).
    ``"NAME"``: that parameter at its nominal value. ``"NAME=VALUE"`` or ``(NAME, VALUE)``:
    that parameter at the given value.
    """
    if fix is None:
        k = next(i for i, p in enumerate(reg.params) if p.kind == "moment_arm")
        return k, float(reg.nominal[k])
    if isinstance(fix, tuple):
        name, value = fix
        return reg.index(name), float(value)
    match = re.fullmatch(r"\s*([^=\s]+)\s*(?:=\s*(\S+))?\s*", fix)
    if not match:
        raise CalibrationError(f"fix = {fix!r}: expected NAME or NAME=VALUE")
    k = reg.index(match.group(1))
    if match.group(2) is None:
        return k, float(reg.nominal[k])
    try:
        value = float(match.group(2))
    except ValueError:
        raise CalibrationError(f"fix = {fix!r}: {match.group(2)!r} is not a number") from None
    if not math.isfinite(value) or value == 0.0:
        raise CalibrationError(f"fix = {fix!r}: the known value must be finite and non-zero")
    return k, value


def check_total_mass(model: Any, total_mass: float | None, *,
                     label: str | None = None) -> float | None:
    """The weighed total mass [kg] of ``model`` as a float (None: not given). ``label`` names
    it in the messages (default ``total_mass = VALUE``; the CLI's ``--total-mass VALUE``).

    Raises:
        CalibrationError: not a finite number > 0, or a model family whose statics parameters
            hold no masses (only ``planar_tree`` and ``planar_pcc`` have them).
    """
    if total_mass is None:
        return None
    label = label or f"total_mass = {total_mass!r}"
    value = _positive_kg(total_mass, label, "the weighed total mass")
    family = getattr(model, "family", None)
    if family not in MASS_FAMILIES:
        raise CalibrationError(
            f"{label}: model {getattr(model, 'name', '?')!r} (family {family!r}) has no "
            f"masses among its statics parameters; a total mass applies to "
            f"{' and '.join(MASS_FAMILIES)} models")
    return value


def check_total_mass_sd(total_mass: float | None, total_mass_sd: float | None, *,
                        label: str | None = None, needs: str = "total_mass") -> float | None:
    """The standard deviation ``σ_M`` [kg] of the weighed total mass as a float (None: not
    given, the total mass is held exactly). ``label`` names it in the messages (default
    ``total_mass_sd = VALUE``; the CLI's ``--total-mass-sd VALUE``), ``needs`` the total mass
    it belongs to (the CLI's ``--total-mass KG``).

    Raises:
        CalibrationError: given without a total mass, or not a finite number > 0.
    """
    if total_mass_sd is None:
        return None
    label = label or f"total_mass_sd = {total_mass_sd!r}"
    value = _positive_kg(total_mass_sd, label,
                         "the standard deviation of the weighed total mass")
    if total_mass is None:
        raise CalibrationError(f"{label}: a standard deviation of the weighed total mass "
                               f"needs the weighed total mass ({needs})")
    return value


def _positive_kg(value: Any, label: str, what: str) -> float:
    """``value`` as a finite float > 0 [kg]; else a :class:`CalibrationError` naming
    ``label`` and ``what`` it is."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CalibrationError(f"{label}: {what} must be a number [kg]") from None
    if not math.isfinite(number) or number <= 0.0:
        raise CalibrationError(f"{label}: {what} must be finite and > 0 [kg]")
    return number


#: A weighed total mass with a standard deviation ``σ_M`` that the scale alone implies agrees
#: with the scale within this many ``σ_M`` (:func:`total_mass_constraint`).
TOTAL_MASS_SIGMAS = 3.0


def total_mass_row(reg: StaticsRegressor) -> FloatArray:
    """``c`` (p,) with ``cᵀ π = Σ masses_of(π)`` (the masses are linear in the gravity
    parameters: ``planar_tree`` ``m = W_com⁻ᵀ a``, ``planar_pcc`` the masses themselves)."""
    c = np.zeros(reg.p)
    c[reg._g0:reg._g0 + reg.n] = np.ones(reg.n) @ reg.mass_map()
    return c


def total_mass_constraint(reg: StaticsRegressor, T: FloatArray, g_fix: int, theta_fix: float,
                          total_mass: float, total_mass_sd: float | None = None
                          ) -> tuple[FloatArray, float] | None:
    """The total mass as an equality on the groups other than the scale group:
    ``(d, e)`` with ``d · θ_free = e`` (d over all groups, zero at ``g_fix``).

    Returns None when the total mass depends on the scale group alone (e.g. ``planar_pcc``
    with the masses tied and one of them fixed): the scale then implies it, and it agrees
    with ``total_mass`` (to 1e-9 relative, or with a standard deviation ``total_mass_sd``
    within :data:`TOTAL_MASS_SIGMAS` of it: a scale reading that agrees within its precision),
    so it adds nothing.

    Raises:
        CalibrationError: the scale group alone implies a different total mass (with a
            standard deviation: more than :data:`TOTAL_MASS_SIGMAS` of it away).
    """
    row = total_mass_row(reg) @ T
    implied = float(row[g_fix] * theta_fix)
    e = total_mass - implied
    d = row.copy()
    d[g_fix] = 0.0
    if np.max(np.abs(d)) > 1e-12 * np.max(np.abs(row)):
        return d, e
    tol = 1e-9 * total_mass
    if total_mass_sd is not None:
        tol = max(tol, TOTAL_MASS_SIGMAS * total_mass_sd)
    if abs(e) <= tol:
        return None
    fixed = next(reg.names[k] for k in np.nonzero(T[:, g_fix])[0])
    weighed = (f"{total_mass:g} kg" if total_mass_sd is None else
               f"{total_mass:g} ± {total_mass_sd:g} kg")
    apart = ("" if total_mass_sd is None else
             f" ({abs(e) / total_mass_sd:.3g} standard deviations apart)")
    raise CalibrationError(
        f"total_mass = {weighed}: the total mass depends only on the scale "
        f"({fixed} fixed), which implies {implied:.6g} kg{apart}; give one of the two, or "
        "values that agree")


#: Families whose statics parameters hold the masses (:func:`check_total_mass`).
MASS_FAMILIES = ("planar_tree", "planar_pcc")

#: Parameter kinds tied by default, per family (see :func:`parameter_groups`).
DEFAULT_TIES = {"planar_tree": (), "planar_pcc": ("mass",)}


@dataclass(frozen=True)
class Group:
    """Parameters estimated as one: ``π[members] = ratios · θ``.

    ``ratios`` keep the nominal proportions (1 for the first member); ``name`` is the first
    member's name with the coordinate replaced by ``*`` (``mass[*]``) when several are tied.
    """

    name: str
    members: tuple[int, ...]
    ratios: tuple[float, ...]


def parameter_groups(reg: StaticsRegressor, tie: Sequence[str] = ()) -> list[Group]:
    """One group per parameter, except that every parameter of a kind listed in ``tie``
    (``stiffness``, ``k_rest``, ``mass``, ``mass_moment``, ``moment_arm``) joins one group
    whose members keep their nominal ratios, or one group per actuated section with
    ``KIND:section`` (coordinates crossed by the same actuators).

    Tying states a modelling assumption ("the arm is cast from one material: every segment has
    the same mass") that removes directions the data cannot resolve.
    """
    kinds = {"stiffness", "k_rest", "mass", "mass_moment", "moment_arm"}
    spec: dict[str, str] = {}
    for t in tie:
        kind, _, how = t.partition(":")
        if kind not in kinds or how not in ("", "section"):
            raise CalibrationError(f"tie = {t!r}: expected KIND or KIND:section with KIND one "
                                   f"of {', '.join(sorted(kinds))}")
        if not any(p.kind == kind for p in reg.params):
            raise CalibrationError(f"tie = {t!r}: {reg.model.name} has no {kind} parameters")
        spec[kind] = how or "all"
    A = reg.A_nominal
    section = {i: tuple(np.nonzero(A[:, i])[0]) for i in range(reg.n)}
    groups: list[Group] = []
    done: set[int] = set()
    for k, p in enumerate(reg.params):
        if k in done:
            continue
        how = spec.get(p.kind)
        if how is None:
            groups.append(Group(p.name, (k,), (1.0,)))
            done.add(k)
            continue
        members = [i for i, q in enumerate(reg.params) if q.kind == p.kind and i not in done
                   and (how == "all" or section[q.coordinate] == section[p.coordinate])]
        ref = reg.nominal[members[0]]
        ratios = tuple(float(reg.nominal[i] / ref) if ref != 0 else 1.0 for i in members)
        if len(members) == 1:
            name = p.name
        elif how == "all":
            name = p.name.split("[")[0] + "[*]"
        else:
            name = p.name.split("[")[0] + "[" + "+".join(
                reg.coordinate_names[reg.params[i].coordinate] for i in members) + "]"
        groups.append(Group(name, tuple(members), ratios))
        done.update(members)
    return groups



def group_matrix(reg: StaticsRegressor, groups: Sequence[Group]) -> FloatArray:
    """``T`` (p, g) with ``π = T θ``: column g holds group g's ratios at its members' rows."""
    T = np.zeros((reg.p, len(groups)))
    for g, grp in enumerate(groups):
        T[list(grp.members), g] = grp.ratios
    return T


__all__ = ["DEFAULT_TIES", "MASS_FAMILIES", "TOTAL_MASS_SIGMAS", "Group", "check_total_mass",
           "check_total_mass_sd", "group_matrix", "parameter_groups", "parse_fix",
           "total_mass_constraint", "total_mass_row"]
