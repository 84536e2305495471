"""Statics identification: least squares on the stacked regressor, with identifiability checks.

Stacking N settled poses gives ``Y π = 0`` (:mod:`poise.calibration.regressor`). The equations
are homogeneous, so one parameter ``π_f`` is fixed to a known value (the *scale*, by default the
first tendon's moment arm on the first coordinate it crosses, as on the drawing) and the rest
solve ``Y_r π_r = −y_f π_f`` by least squares. A weighed total mass (``total_mass``) is a second
known quantity: ``Σ masses_of(π) = M`` holds exactly (an equality eliminated from the least
squares, :mod:`~poise.calibration.lsq`), and the statistics are those of the constrained fit;
with the scale's standard deviation (``total_mass_sd``, ``σ_M``) it is instead one measurement
row ``M ± σ_M`` of the sum, and the statistics are those of the augmented fit.

Columns are scaled by each parameter's typical magnitude before the SVD, so the rank, the
condition number and the null-space directions compare *relative* changes of parameters with
different units. A calibration is refused (``identifiable = False``) when

* the scaled regressor is numerically rank deficient (``σ_i < rcond · σ_max``), or
* a direction is so weakly excited that its relative standard error ``σ̂ / σ_i`` exceeds
  ``max_rel_se`` (the data cannot tell the parameters apart at the noise level), or
* an actuator barely moved (its measured range < ``min_coverage`` of its safe range);

the result then names the undetermined parameters (the largest components of the weak
directions) and the excitation that would determine them.

An identification is *validated* only when poses were held out and their residual is defined
(``Identification.validated``). With too few poses to hold any out (fewer than
:func:`poses_for_holdout`) the fit may still be exact, but nothing checks it: the message says
so and how many poses validation needs, instead of claiming the parameters identified.

Statistics: ``σ̂² = ‖r‖² / (N·n − p)``, ``cov(π) = σ̂² (YᵀY)⁻¹`` (in the scaled coordinates
``σ̂² V Σ⁻² Vᵀ``), standard errors ``√diag``; residuals on the fit poses and on held-out poses
(every k-th pose, not used in the fit); and the equilibrium prediction error: the calibrated
model's held configuration at the measured actuator positions vs the measured ``q``.

Stages, one module each: :mod:`~poise.calibration.grouping` (scale and tied groups),
:mod:`~poise.calibration.holdout` (validation poses), :mod:`~poise.calibration.lsq` (the scaled
SVD solve and its statistics), :mod:`~poise.calibration.diagnosis` (identifiability and
advice); this module runs them (:func:`identify`) and predicts the equilibria.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poise.calibration.band import static_residuals
from poise.calibration.diagnosis import Diagnosis, diagnose, verdict
from poise.calibration.grouping import (
    DEFAULT_TIES,
    Group,
    check_total_mass,
    check_total_mass_sd,
    group_matrix,
    parameter_groups,
    parse_fix,
    total_mass_constraint,
    total_mass_row,
)
from poise.calibration.holdout import (
    MIN_POSES_HOLDOUT,
    choose_holdout,
    holdout_split,
    poses_for_holdout,
    validation_sentence,
)
from poise.calibration.lsq import fit_statics
from poise.calibration.poses import Pose
from poise.calibration.regressor import CalibrationError, StaticsRegressor, statics_regressor
from poise.ik.statics import solve_statics
from poise.models.actuation import split
from poise.models.base import FloatArray

#: Defaults of the identifiability tests.
RCOND = 1e-8
MAX_REL_SE = 0.1
MIN_COVERAGE = 0.1
HOLDOUT = 0.2
#: A negative stiffness within this many standard errors of zero is no spring (zero).
SPRING_SIGMAS = 3.0


class NotIdentifiableError(CalibrationError):
    """The data do not determine every parameter; ``.result`` holds the diagnosis."""

    def __init__(self, result: Identification) -> None:
        super().__init__(result.message)
        self.result = result


@dataclass(frozen=True)
class ParameterEstimate:
    """One identified parameter (``std_error`` 0 for the fixed one)."""

    name: str
    kind: str
    unit: str
    nominal: float
    value: float
    std_error: float
    fixed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "unit": self.unit,
                "nominal": self.nominal, "value": self.value, "std_error": self.std_error,
                "fixed": self.fixed}


@dataclass(frozen=True)
class Identification:
    """Everything the fit found out.

    Attributes:
        identifiable: every parameter is determined (the calibration may be written).
        message: one paragraph for people: verdict, and if refused what to change.
        parameters: estimates in regressor order (the fixed one included).
        pi: the parameter vector (p,) — the least-squares solution (minimum-norm if refused).
        fixed: ``(name, value)`` of the scale parameter.
        rank: numerical rank of the scaled regressor of the free parameters.
        n_free: number of free parameters (one less with a total mass held exactly; a
            total mass with a standard deviation is a measurement and removes none).
        cond: condition number of the column-scaled regressor (relative parameters).
        cond_raw: condition number of the unscaled regressor (SI units; for reference).
        singular_values: of the scaled regressor, descending.
        sigma: residual standard deviation ``σ̂`` [N·m].
        residual_rms: RMS of the fit residual over the fit rows [N·m].
        holdout_rms: RMS residual on the held-out poses [N·m] (NaN without held-out poses).
        validated: poses were held out and their residual is defined; False means the fit
            was not checked on poses it did not see (``validation`` says why).
        validation: one sentence on the held-out check: what it found, or why there was none
            and how many poses it needs.
        equilibrium_rms: RMS of ``q_predicted − q_measured`` over the fit poses [rad].
        equilibrium_rms_holdout: the same over the held-out poses [rad].
        nominal_equilibrium_rms: the nominal model's equilibrium error on all poses [rad].
        kinematic_rms: per actuator, RMS of ``qa_measured − A q_measured`` [actuator units].
        fit_index, holdout_index: which poses were used for what.
        undetermined: parameter names that the data do not determine.
        advice: what excitation (or extra known quantity) would fix it.
        coverage: per actuator, measured range / safe range.
        predicted_q: the calibrated (or, if refused, nominal) model's equilibria at the
            measured actuator positions, one per pose (N, n).
        residuals: per pose, the n statics residuals ``Y π`` [N·m] (N, n).
        covariance: of the free parameters (p_free, p_free), in SI units.
        description: the calibrated model description (``None`` if refused).
        static_residuals: what the statics cannot explain, for the report
            (:func:`~poise.calibration.band.static_residuals`).
        prior, prior_held: the prior's relative standard deviation and the parameters it
            holds near nominal (None and empty when the data determined every parameter).
        total_mass: the weighed total mass [kg] given (None: not given);
            ``Σ masses_of(pi) = total_mass`` exactly, or within the data's and the scale's
            precision with ``total_mass_sd``. total_mass_constrained: it entered the fit, as
            a constraint or a measurement (False when the scale alone implies it: it then
            adds nothing).
        total_mass_sd: the weighed total mass's standard deviation ``σ_M`` [kg] given (None:
            held exactly). mass_sum_std_error: the standard error of the identified
            ``Σ masses_of(pi)`` [kg] (≈ 0 when held exactly, ≲ ``σ_M`` when measured).
    """

    identifiable: bool
    message: str
    parameters: tuple[ParameterEstimate, ...]
    pi: FloatArray
    fixed: tuple[str, float]
    rank: int
    n_free: int
    cond: float
    cond_raw: float
    singular_values: FloatArray
    sigma: float
    residual_rms: float
    holdout_rms: float
    equilibrium_rms: float
    equilibrium_rms_holdout: float
    nominal_equilibrium_rms: float
    kinematic_rms: FloatArray
    fit_index: tuple[int, ...]
    holdout_index: tuple[int, ...]
    undetermined: tuple[str, ...]
    advice: tuple[str, ...]
    coverage: FloatArray
    predicted_q: FloatArray
    residuals: FloatArray
    covariance: FloatArray
    description: dict[str, Any] | None = None
    mass_std_error: FloatArray = field(default_factory=lambda: np.zeros(0))
    ties: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    qa_offset: FloatArray = field(default_factory=lambda: np.zeros(0))
    qa_offset_std_error: FloatArray = field(default_factory=lambda: np.zeros(0))
    weights: tuple[float, float] = (1.0, 0.0)
    validated: bool = False
    validation: str = ""
    static_residuals: dict[str, Any] = field(default_factory=dict)
    prior: float | None = None
    prior_held: tuple[str, ...] = ()
    total_mass: float | None = None
    total_mass_constrained: bool = False
    total_mass_sd: float | None = None
    mass_sum_std_error: float = math.nan

    def value(self, name: str) -> float:
        """Identified value of a parameter by name."""
        for p in self.parameters:
            if p.name == name:
                return p.value
        raise KeyError(name)

    def statistics(self) -> dict[str, Any]:
        """The fit statistics, JSON-ready."""
        return {
            "identifiable": self.identifiable,
            "rank": self.rank, "n_free": self.n_free,
            "cond": _num(self.cond), "cond_raw": _num(self.cond_raw),
            "singular_values": [_num(s) for s in self.singular_values],
            "sigma": _num(self.sigma),
            "residual_rms": _num(self.residual_rms),
            "holdout_rms": _num(self.holdout_rms),
            "equilibrium_rms": _num(self.equilibrium_rms),
            "equilibrium_rms_holdout": _num(self.equilibrium_rms_holdout),
            "nominal_equilibrium_rms": _num(self.nominal_equilibrium_rms),
            "kinematic_rms": [_num(x) for x in self.kinematic_rms],
            "coverage": [_num(x) for x in self.coverage],
            "n_fit": len(self.fit_index), "n_holdout": len(self.holdout_index),
            "validated": self.validated, "validation": self.validation,
            "holdout_index": list(self.holdout_index),
            "static_residuals": self.static_residuals,
            "prior": self.prior, "prior_held": list(self.prior_held),
            "total_mass": self.total_mass,
            "total_mass_constrained": self.total_mass_constrained,
            "total_mass_sd": self.total_mass_sd,
            "mass_sum_std_error": _num(self.mass_sum_std_error),
            "units": {"residual": "N*m", "equilibrium": "rad"},
        }


def _num(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None



# ----------------------------------------------------------------------------- the fit


def identify(
    model: Any,
    poses: Sequence[Pose],
    *,
    fix: str | tuple[str, float] | None = None,
    tie: Sequence[str] | None = None,
    holdout: float | Sequence[int] = HOLDOUT,
    rcond: float = RCOND,
    max_rel_se: float = MAX_REL_SE,
    min_coverage: float = MIN_COVERAGE,
    kinematics: bool = True,
    use_unsettled: bool = False,
    raise_on_failure: bool = False,
    predict: bool = True,
    prior: float | None = None,
    total_mass: float | None = None,
    total_mass_sd: float | None = None,
) -> Identification:
    """Identify the statics parameters of ``model`` from settled ``poses``.

    Args:
        model: the nominal model (its geometry is trusted; its parameters are the start).
        poses: settled measurements (see :class:`~poise.calibration.poses.Pose`).
        fix: the known quantity that fixes the scale (see :func:`parse_fix`).
        tie: parameter kinds estimated as one group (see :func:`parameter_groups`);
            ``None``: the family's default (:data:`DEFAULT_TIES`: the segment masses of a
            ``planar_pcc`` arm), none with a ``prior``.
        holdout: fraction of poses held out for validation, or their indices.
        rcond: relative singular-value threshold of numerical rank.
        max_rel_se: largest acceptable relative standard error along any parameter direction.
        min_coverage: smallest acceptable measured range of each actuator, as a fraction of its
            safe range.
        kinematics: also fit the actuator kinematics ``qa = A q + o`` (one row per actuator
            and pose, offsets ``o`` as nuisance parameters; both blocks weighted by ``1/σ̂``
            of their own fits). The moment arms are then pinned by the actuator position
            sensors as well as by the statics.
        use_unsettled: also fit poses whose settle test timed out.
        raise_on_failure: raise :class:`NotIdentifiableError` instead of returning a refusal.
        predict: compute the equilibrium prediction errors (one statics solve per pose).
        prior: where the data alone do not determine every parameter (weak directions, every
            actuator moved), refit with a Gaussian prior of this relative standard deviation
            at the nominal values (:func:`~poise.calibration.lsq.fit_statics`) and accept the
            result, naming the parameters the prior holds (``prior_held``). None: refuse.
        total_mass: the robot's weighed total mass [kg], a second known quantity beside the
            scale: the fit holds ``Σ masses_of(π) = total_mass`` exactly (``planar_tree``:
            ``m = W_com⁻ᵀ a``; ``planar_pcc``: the segment masses). Where the scale alone
            implies the total mass (``planar_pcc`` with the masses tied and one fixed), it
            adds nothing if they agree (``total_mass_constrained`` False) and is refused if
            they do not. None: not known.
        total_mass_sd: the standard deviation ``σ_M`` of the weighed total mass [kg] (the
            scale's precision): the fit then does not hold the total exactly but takes it as
            one measurement ``Σ masses_of(π) = total_mass ± σ_M``, weighted against the data
            (:func:`~poise.calibration.lsq.fit_statics`); where the scale alone implies the
            total mass, values within :data:`~poise.calibration.grouping.TOTAL_MASS_SIGMAS`
            ``σ_M`` of it agree. None: held exactly.

    Raises:
        CalibrationError: no usable poses, bad ``fix``, ``tie``, ``total_mass`` or
            ``total_mass_sd``, a total mass the scale contradicts, unsupported model family.

    One pipeline over the stage modules (group → hold out → fit → diagnose → calibrated model
    → equilibria → result); kept in one function so the order of the stages reads in one place.
    """
    total_mass = check_total_mass(model, total_mass)
    total_mass_sd = check_total_mass_sd(total_mass, total_mass_sd)
    reg, k_fix, v_fix, ties, groups, T, g_fix, constrained = _known_quantities(
        model, fix, tie, prior, total_mass, total_mass_sd)
    pose_list = [p for p in poses if use_unsettled or p.settled]
    if not pose_list:
        raise CalibrationError("no settled poses to fit (every pose timed out?)")
    fit_idx, hold_idx, needed = choose_holdout(len(pose_list), holdout, reg.n, len(groups) - 1)
    qs = np.array([p.q for p in pose_list])
    qa = np.array([p.qa for p in pose_list])
    taus = np.array([p.tau for p in pose_list])
    Y_all = np.stack([reg.rows(q, t) for q, t in zip(qs, taus, strict=True)])  # (N, n, p)
    fit = fit_statics(reg, model, Y_all[fit_idx], qs[fit_idx], qa[fit_idx], groups, T, g_fix,
                      v_fix / T[k_fix, g_fix], kinematics=kinematics, rcond=rcond,
                      total_mass=total_mass, total_mass_sd=total_mass_sd)
    diag = diagnose(reg, model, fit, pose_list, groups, groups[g_fix].name, ties,
                    max_rel_se=max_rel_se, min_coverage=min_coverage)
    held: tuple[str, ...] = ()
    if (prior is not None and not diag.identifiable
            and bool(np.all(diag.coverage >= min_coverage))):
        held = tuple(diag.undetermined)
        fit = fit_statics(reg, model, Y_all[fit_idx], qs[fit_idx], qa[fit_idx], groups, T,
                          g_fix, v_fix / T[k_fix, g_fix], kinematics=kinematics, rcond=rcond,
                          prior=prior, total_mass=total_mass, total_mass_sd=total_mass_sd)
        # the prior determines the weak directions: nothing is left undetermined
        diag = Diagnosis(True, [], [], diag.coverage)
    pi = _no_spring_within_noise(reg, fit.pi, fit.std_error)
    holdout_rms = _rms(Y_all[hold_idx].reshape(-1, reg.p) @ pi) if hold_idx else math.nan
    description, calibrated, problems = _calibrated(reg, pi) if diag.identifiable else (
        None, None, [])
    identifiable = diag.identifiable and not problems
    predicted, eq_fit, eq_hold, eq_nom = _equilibria(
        model, calibrated if calibrated is not None else model, pose_list, qs, fit_idx,
        hold_idx, predict)
    validated = bool(hold_idx) and math.isfinite(holdout_rms)
    residuals = np.einsum("knp,p->kn", Y_all, pi)
    validation = validation_sentence(len(pose_list), hold_idx, holdout_rms, holdout, needed)
    result = Identification(
        identifiable=identifiable,
        message=verdict(model, identifiable, fit.rank, fit.n_free, fit.cond, diag.undetermined,
                        diag.advice, problems, reg.names[k_fix], v_fix,
                        reg.params[k_fix].unit, groups, validated, validation,
                        total_mass=total_mass, total_mass_constrained=constrained,
                        total_mass_sd=total_mass_sd)
        + (f"; held near their nominal values by the prior (±{prior:.0%}), the data do not "
           f"determine them: {', '.join(held)}" if held else ""),
        parameters=tuple(
            ParameterEstimate(p.name, p.kind, p.unit, p.nominal, float(pi[i]),
                              float(fit.std_error[i]), fixed=i in groups[g_fix].members)
            for i, p in enumerate(reg.params)),
        pi=pi, fixed=(reg.names[k_fix], v_fix), rank=fit.rank, n_free=fit.n_free,
        cond=fit.cond, cond_raw=fit.cond_raw, singular_values=fit.singular_values,
        sigma=fit.sigma, residual_rms=fit.residual_rms, holdout_rms=holdout_rms,
        equilibrium_rms=eq_fit, equilibrium_rms_holdout=eq_hold, nominal_equilibrium_rms=eq_nom,
        kinematic_rms=np.sqrt(np.mean((qa - qs @ reg.A_of(pi).T) ** 2, axis=0)),
        fit_index=tuple(fit_idx), holdout_index=tuple(hold_idx),
        undetermined=tuple(diag.undetermined), advice=tuple(diag.advice),
        coverage=diag.coverage, predicted_q=predicted,
        residuals=residuals, covariance=fit.covariance,
        description=description, mass_std_error=_mass_std_error(reg, fit.covariance), ties=ties,
        groups=tuple(g.name for g in groups), qa_offset=fit.offsets,
        qa_offset_std_error=fit.offset_std_error, weights=fit.weights, validated=validated,
        validation=validation, prior=prior if held else None, prior_held=held,
        total_mass=total_mass, total_mass_constrained=constrained,
        total_mass_sd=total_mass_sd, mass_sum_std_error=_mass_sum_std_error(reg, fit.covariance),
        static_residuals=static_residuals(model, reg.coordinate_names, residuals, pi[: reg.n],
                                          pose_list,
                                          sprung=[p.nominal > 0 for p in reg.params[: reg.n]]),
    )
    if raise_on_failure and not identifiable:
        raise NotIdentifiableError(result)
    return result


def check_options(model: Any, *, fix: str | tuple[str, float] | None = None,
                  tie: Sequence[str] | None = None, prior: float | None = None,
                  total_mass: float | None = None,
                  total_mass_sd: float | None = None) -> None:
    """Check the known quantities and ties of :func:`identify` before any pose is measured
    (the same checks, without data).

    Raises:
        CalibrationError: what :func:`identify` would refuse them for.
    """
    _known_quantities(model, fix, tie, prior, total_mass, total_mass_sd)


def _known_quantities(model: Any, fix: str | tuple[str, float] | None,
                      tie: Sequence[str] | None, prior: float | None,
                      total_mass: float | None, total_mass_sd: float | None = None) -> tuple[
        StaticsRegressor, int, float, tuple[str, ...], list[Group], FloatArray, int, bool]:
    """``(regressor, k_fix, v_fix, ties, groups, T, g_fix, total mass constrained)``, checked."""
    if prior is not None and not 0.0 < prior < math.inf:
        raise CalibrationError(f"prior = {prior}: a relative standard deviation > 0 (e.g. 0.2)")
    total_mass = check_total_mass(model, total_mass)
    total_mass_sd = check_total_mass_sd(total_mass, total_mass_sd)
    reg = statics_regressor(model)
    k_fix, v_fix = parse_fix(reg, fix)
    # a prior resolves what a default tie would, without assuming equal segments
    ties = (DEFAULT_TIES.get(reg.family, ()) if prior is None else ()) if tie is None \
        else tuple(tie)
    groups = parameter_groups(reg, ties)
    T = group_matrix(reg, groups)
    g_fix = next(g for g, grp in enumerate(groups) if k_fix in grp.members)
    constrained = total_mass is not None and total_mass_constraint(
        reg, T, g_fix, v_fix / T[k_fix, g_fix], total_mass, total_mass_sd) is not None
    return reg, k_fix, v_fix, ties, groups, T, g_fix, constrained


def _no_spring_within_noise(reg: StaticsRegressor, pi: FloatArray,
                            std_error: FloatArray) -> FloatArray:
    """``π`` with a negative stiffness that is zero within :data:`SPRING_SIGMAS` standard errors
    set to zero: a joint without a spring (the dancer's arm) comes out at ``0 ± noise``, and
    the noise must not make it unphysical."""
    k = pi[: reg.n]
    none = (k < 0) & (k > -SPRING_SIGMAS * std_error[: reg.n])
    if not np.any(none):
        return pi
    out = pi.copy()
    out[: reg.n][none] = 0.0
    # its rest torque k·q0 goes with it (no spring, no rest angle)
    out[reg.n: 2 * reg.n][none] = 0.0
    return out


def _calibrated(reg: StaticsRegressor, pi: FloatArray) -> tuple[
        dict[str, Any] | None, Any, list[str]]:
    """``(description, model, problems)`` of the calibrated model; ``problems`` says why the
    parameters make no valid model (then the first two are None)."""
    try:
        return reg.describe_with(pi), reg.model_with(pi), []
    except CalibrationError as exc:
        return None, None, [str(exc)]


def _mass_std_error(reg: StaticsRegressor, cov: FloatArray) -> FloatArray:
    """Standard errors of the segment masses from the covariance of the gravity parameters."""
    g_idx = [reg._g0 + i for i in range(reg.n)]
    M = reg.mass_map()
    return np.sqrt(np.maximum(np.diag(M @ cov[np.ix_(g_idx, g_idx)] @ M.T), 0.0))


def _mass_sum_std_error(reg: StaticsRegressor, cov: FloatArray) -> float:
    """Standard error of the identified ``Σ masses_of(π)`` [kg]: ``√(cᵀ cov c)``."""
    c = total_mass_row(reg)
    return math.sqrt(max(float(c @ cov @ c), 0.0))


def _rms(x: FloatArray) -> float:
    return float(np.sqrt(np.mean(np.asarray(x) ** 2))) if np.size(x) else math.nan


def _equilibria(nominal: Any, model: Any, poses: Sequence[Pose], qs: FloatArray,
                fit_idx: list[int], hold_idx: list[int],
                predict: bool) -> tuple[FloatArray, float, float, float]:
    """``(predicted q (N, n), RMS error on the fit poses, on the held-out poses, of the nominal
    model on all)`` [rad]; NaN without ``predict``."""
    if not predict:
        return np.full(qs.shape, np.nan), math.nan, math.nan, math.nan
    predicted = np.array([_equilibrium(model, p) for p in poses])
    err = predicted - qs
    nominal_pred = np.array([_equilibrium(nominal, p) for p in poses])
    return (predicted, _rms(err[fit_idx]), _rms(err[hold_idx]) if hold_idx else math.nan,
            _rms(nominal_pred - qs))


def _equilibrium(model: Any, pose: Pose) -> FloatArray:
    """The model's held configuration at the pose's measured actuator positions, warm-started
    at the measured configuration (so it picks the branch the robot was on)."""
    _, qu = split(model, pose.q)
    sol = solve_statics(model, np.asarray(pose.qa, dtype=float), qu, tol=1e-10, max_iter=100)
    return sol.q


__all__ = [
    "DEFAULT_TIES",
    "HOLDOUT",
    "MAX_REL_SE",
    "MIN_COVERAGE",
    "MIN_POSES_HOLDOUT",
    "RCOND",
    "Group",
    "Identification",
    "NotIdentifiableError",
    "ParameterEstimate",
    "check_options",
    "holdout_split",
    "identify",
    "parameter_groups",
    "parse_fix",
    "poses_for_holdout",
]
