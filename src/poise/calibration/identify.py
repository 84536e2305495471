"""Statics identification: least squares on the stacked regressor, with identifiability checks.

Stacking N settled poses gives ``Y π = 0`` (:mod:`poise.calibration.regressor`). The equations
are homogeneous, so one parameter ``π_f`` is fixed to a known value (the *scale*, by default the
first tendon's moment arm on the first coordinate it crosses, as on the drawing) and the rest
solve ``Y_r π_r = −y_f π_f`` by least squares.

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
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poise.calibration.poses import Pose, safe_range
from poise.calibration.regressor import CalibrationError, StaticsRegressor, statics_regressor
from poise.ik.statics import solve_statics
from poise.models.actuation import split
from poise.models.base import FloatArray

#: Defaults of the identifiability tests.
RCOND = 1e-8
MAX_REL_SE = 0.1
MIN_COVERAGE = 0.1
HOLDOUT = 0.2


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
        n_free: number of free parameters.
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
            "units": {"residual": "N*m", "equilibrium": "rad"},
        }


def _num(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


# ----------------------------------------------------------------------------- scale


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


#: Fewest poses from which any is held out (fewer: all are needed for the fit).
MIN_POSES_HOLDOUT = 4


def holdout_split(count: int, fraction: float) -> tuple[list[int], list[int]]:
    """Every k-th pose (k = round(1/fraction), starting at k // 2) is held out."""
    if fraction <= 0 or count < MIN_POSES_HOLDOUT:
        return list(range(count)), []
    k = max(2, round(1.0 / fraction))
    hold = list(range(k // 2, count, k))
    return [i for i in range(count) if i not in hold], hold


def _holdout_fits(count: int, fraction: float, rows_per_pose: int, n_free: int) -> bool:
    """Whether :func:`identify` holds poses out of ``count``: some are, and the rest still
    give more statics rows than free parameters."""
    fit, hold = holdout_split(count, fraction)
    return bool(hold) and len(fit) * rows_per_pose >= n_free + 1


def poses_for_holdout(fraction: float, rows_per_pose: int, n_free: int) -> int | None:
    """Fewest settled poses with which :func:`identify` holds some out for validation (it needs
    more rows than free parameters in the rest); None when ``fraction`` ≤ 0 (validation off)."""
    if fraction <= 0:
        return None
    count = MIN_POSES_HOLDOUT
    while not _holdout_fits(count, fraction, rows_per_pose, n_free):
        count += 1
    return count


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
) -> Identification:
    """Identify the statics parameters of ``model`` from settled ``poses``.

    Args:
        model: the nominal model (its geometry is trusted; its parameters are the start).
        poses: settled measurements (see :class:`~poise.calibration.poses.Pose`).
        fix: the known quantity that fixes the scale (see :func:`parse_fix`).
        tie: parameter kinds estimated as one group (see :func:`parameter_groups`);
            ``None``: the family's default (:data:`DEFAULT_TIES`: the segment masses of a
            ``planar_pcc`` arm).
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

    Raises:
        CalibrationError: no usable poses, bad ``fix`` or ``tie``, unsupported model family.
    """
    reg = statics_regressor(model)
    pose_list = [p for p in poses if use_unsettled or p.settled]
    if not pose_list:
        raise CalibrationError("no settled poses to fit (every pose timed out?)")
    k_fix, v_fix = parse_fix(reg, fix)
    ties = DEFAULT_TIES.get(reg.family, ()) if tie is None else tuple(tie)
    groups = parameter_groups(reg, ties)
    T = np.zeros((reg.p, len(groups)))
    for g, grp in enumerate(groups):
        T[list(grp.members), g] = grp.ratios
    g_fix = next(g for g, grp in enumerate(groups) if k_fix in grp.members)
    theta_fix = v_fix / T[k_fix, g_fix]
    free = [g for g in range(len(groups)) if g != g_fix]
    if isinstance(holdout, (int, float)):
        fit_idx, hold_idx = holdout_split(len(pose_list), float(holdout))
    else:
        hold_idx = sorted(set(int(i) for i in holdout))
        fit_idx = [i for i in range(len(pose_list)) if i not in hold_idx]
    if len(fit_idx) * reg.n < len(free) + 1 and hold_idx:
        fit_idx, hold_idx = list(range(len(pose_list))), []
    needed = (poses_for_holdout(float(holdout), reg.n, len(free))
              if isinstance(holdout, (int, float)) else None)

    qs = np.array([p.q for p in pose_list])
    taus = np.array([p.tau for p in pose_list])
    Y_all = np.stack([reg.rows(q, t) for q, t in zip(qs, taus, strict=True)])  # (N, n, p)
    Yt = Y_all[fit_idx].reshape(-1, reg.p) @ T  # grouped columns
    Yr = Yt[:, free]
    b_s = -Yt[:, g_fix] * theta_fix
    s = np.array([reg.scales[groups[g].members[0]] for g in free])
    n_off = reg.m if kinematics else 0
    if kinematics:
        # qa_j = Σ_i A_ji q_i + o_j: moment-arm columns get q_i, the offset column 1
        K = np.zeros((len(fit_idx), reg.m, reg.p))
        for col, (j, i) in enumerate(reg.arm_index):
            K[:, j, reg._a0 + col] = qs[fit_idx, i]
        Kt = K.reshape(-1, reg.p) @ T
        Kr = np.hstack([Kt[:, free], np.tile(np.eye(reg.m), (len(fit_idx), 1))])
        b_k = np.array([pose_list[i].qa for i in fit_idx]).reshape(-1) - Kt[:, g_fix] * theta_fix
        width = _actuator_widths(model)
        s_all = np.concatenate([s, width])
        # block weights 1/σ from each block's own fit (floors keep noise-free data exact)
        w_s = 1.0 / _block_sigma(np.hstack([Yr, np.zeros((Yr.shape[0], n_off))]) * s_all, b_s)
        w_k = 1.0 / _block_sigma(Kr * s_all, b_k)
        A_w = np.vstack([np.hstack([Yr, np.zeros((Yr.shape[0], n_off))]) * w_s, Kr * w_k])
        b_w = np.concatenate([b_s * w_s, b_k * w_k])
    else:
        s_all = s
        w_s, w_k = 1.0, 0.0
        A_w, b_w = Yr, b_s
    Ys = A_w * s_all
    U, sv_r, Vt = np.linalg.svd(Ys, full_matrices=True)  # Vt: all directions, also unseen ones
    U = U[:, : sv_r.size]
    sv = np.zeros(Ys.shape[1])
    sv[: sv_r.size] = sv_r
    smax = float(sv[0]) if sv.size else 0.0
    rank = int(np.sum(sv > rcond * smax)) if smax > 0 else 0
    cond = float(smax / sv[-1]) if sv.size and sv[-1] > 0 else math.inf
    sv_raw = np.linalg.svd(Yr, compute_uv=False)
    cond_raw = float(sv_raw[0] / sv_raw[-1]) if sv_raw[-1] > 0 else math.inf

    # least squares in the scaled coordinates on the numerical range (minimum norm if deficient)
    inv = np.where(np.arange(sv.size) < rank, 1.0 / np.where(sv > 0, sv, 1.0), 0.0)
    x = s_all * (Vt.T @ (inv * np.concatenate([U.T @ b_w, np.zeros(sv.size - sv_r.size)])))
    theta = np.empty(len(groups))
    theta[g_fix] = theta_fix
    theta[free] = x[: len(free)]
    offsets = x[len(free):]
    pi = T @ theta
    r_w = b_w - A_w @ x
    dof = max(A_w.shape[0] - x.size, 1)
    sigma = float(np.linalg.norm(r_w) / math.sqrt(dof))
    r = b_s - Yr @ theta[free]
    residual_rms = float(np.sqrt(np.mean(r**2))) if r.size else math.nan
    cov_x = ((Vt.T * (inv**2)) @ Vt * sigma**2) * np.outer(s_all, s_all)
    Tf = T[:, free]
    cov = Tf @ cov_x[: len(free), : len(free)] @ Tf.T  # (p, p), zero for the fixed group
    se = np.sqrt(np.maximum(np.diag(cov), 0.0))
    offset_se = np.sqrt(np.maximum(np.diag(cov_x)[len(free):], 0.0))
    col_names = [groups[g].name for g in free] + [f"qa_offset[{j}]" for j in range(n_off)]

    # held-out equation residual
    if hold_idx:
        Yh = Y_all[hold_idx].reshape(-1, reg.p)
        holdout_rms = float(np.sqrt(np.mean((Yh @ pi) ** 2)))
    else:
        holdout_rms = math.nan
    residuals = np.einsum("knp,p->kn", Y_all, pi)

    # identifiability
    undetermined: list[str] = []
    weak_dirs: list[FloatArray] = []
    for i in range(sv.size):
        rel_se = sigma / sv[i] if sv[i] > 0 else math.inf
        if i >= rank or rel_se > max_rel_se:
            weak_dirs.append(Vt[i])
    for v in weak_dirs:
        big = np.argsort(-np.abs(v))
        top = float(np.abs(v[big[0]]))
        for k in big:
            if abs(v[k]) >= 0.3 * top and abs(v[k]) >= 0.2:
                name = col_names[k]
                if name not in undetermined:
                    undetermined.append(name)
    coverage = _coverage(model, pose_list)
    uncovered = [j for j in range(reg.m) if coverage[j] < min_coverage]
    for j in uncovered:
        for name in _actuator_parameters(reg, j, groups):
            if name not in undetermined and name != groups[g_fix].name:
                undetermined.append(name)
    identifiable = not weak_dirs and not uncovered
    advice = _advice(reg, model, coverage, uncovered, undetermined, weak_dirs, pose_list,
                     groups, ties)

    estimates = tuple(
        ParameterEstimate(p.name, p.kind, p.unit, p.nominal, float(pi[i]), float(se[i]),
                          fixed=i in groups[g_fix].members)
        for i, p in enumerate(reg.params))
    description = None
    calibrated = None
    problems: list[str] = []
    if identifiable:
        try:
            description = reg.describe_with(pi)
            calibrated = reg.model_with(pi)
        except CalibrationError as exc:
            identifiable = False
            problems.append(str(exc))
    g_idx = [reg._g0 + i for i in range(reg.n)]
    M = reg.mass_map()
    mass_se = np.sqrt(np.maximum(np.diag(M @ cov[np.ix_(g_idx, g_idx)] @ M.T), 0.0))

    # equilibrium predictions
    eval_model = calibrated if calibrated is not None else model
    n_pose = len(pose_list)
    predicted = np.full((n_pose, reg.n), np.nan)
    eq_fit = eq_hold = eq_nom = math.nan
    if predict:
        predicted = np.array([_equilibrium(eval_model, p) for p in pose_list])
        err = predicted - qs
        eq_fit = _rms(err[fit_idx])
        eq_hold = _rms(err[hold_idx]) if hold_idx else math.nan
        nominal_pred = np.array([_equilibrium(model, p) for p in pose_list])
        eq_nom = _rms(nominal_pred - qs)
    A_hat = reg.A_of(pi)
    qa_meas = np.array([p.qa for p in pose_list])
    kin = np.sqrt(np.mean((qa_meas - qs @ A_hat.T) ** 2, axis=0))

    validated = bool(hold_idx) and math.isfinite(holdout_rms)
    validation = _validation(len(pose_list), hold_idx, holdout_rms, holdout, needed)
    message = _message(model, identifiable, rank, int(x.size), cond, undetermined, advice,
                       problems, reg.names[k_fix], v_fix, reg.params[k_fix].unit, groups,
                       validated, validation)
    result = Identification(
        identifiable=identifiable, message=message, parameters=estimates, pi=pi,
        fixed=(reg.names[k_fix], v_fix), rank=rank, n_free=int(x.size), cond=cond,
        cond_raw=cond_raw, singular_values=sv, sigma=sigma, residual_rms=residual_rms,
        holdout_rms=holdout_rms, equilibrium_rms=eq_fit, equilibrium_rms_holdout=eq_hold,
        nominal_equilibrium_rms=eq_nom, kinematic_rms=kin, fit_index=tuple(fit_idx),
        holdout_index=tuple(hold_idx), undetermined=tuple(undetermined), advice=tuple(advice),
        coverage=coverage, predicted_q=predicted, residuals=residuals, covariance=cov,
        description=description, mass_std_error=mass_se, ties=ties,
        groups=tuple(g.name for g in groups), qa_offset=offsets, qa_offset_std_error=offset_se,
        weights=(float(w_s), float(w_k)), validated=validated, validation=validation,
    )
    if raise_on_failure and not identifiable:
        raise NotIdentifiableError(result)
    return result


def _actuator_widths(model: Any) -> FloatArray:
    lo = np.asarray(model.qa_min, dtype=float)
    hi = np.asarray(model.qa_max, dtype=float)
    w = hi - lo
    return np.where(np.isfinite(w) & (w > 0), w, 1.0)


def _block_sigma(A: FloatArray, b: FloatArray) -> float:
    """Residual standard deviation of one block's own least-squares fit, floored at 1e-6 of
    the block's RMS right-hand side (or of its matrix) so that exact data stay exact."""
    x, *_ = np.linalg.lstsq(A, b, rcond=None)
    r = b - A @ x
    dof = max(A.shape[0] - np.linalg.matrix_rank(A), 1)
    sigma = float(np.linalg.norm(r) / math.sqrt(dof))
    scale = float(np.sqrt(np.mean(b**2))) or float(np.sqrt(np.mean(A**2))) or 1.0
    return max(sigma, 1e-6 * scale)


def _rms(x: FloatArray) -> float:
    return float(np.sqrt(np.mean(np.asarray(x) ** 2))) if np.size(x) else math.nan


def _equilibrium(model: Any, pose: Pose) -> FloatArray:
    """The model's held configuration at the pose's measured actuator positions, warm-started
    at the measured configuration (so it picks the branch the robot was on)."""
    _, qu = split(model, pose.q)
    sol = solve_statics(model, np.asarray(pose.qa, dtype=float), qu, tol=1e-10, max_iter=100)
    return sol.q


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
    return out


def _validation(count: int, hold_idx: Sequence[int], holdout_rms: float,
                holdout: float | Sequence[int], needed: int | None) -> str:
    """The held-out check in one sentence (see :attr:`Identification.validation`)."""
    if hold_idx and math.isfinite(holdout_rms):
        return (f"validated on {len(hold_idx)} held-out pose(s) of {count}: residual RMS "
                f"{holdout_rms:.3g} N·m")
    if hold_idx:
        return (f"no held-out validation: the residual on the {len(hold_idx)} held-out "
                "pose(s) is undefined (non-finite data?)")
    if not isinstance(holdout, (int, float)):
        return "no held-out validation: no poses were held out"
    if needed is None:
        return "no held-out validation: switched off (holdout 0)"
    return (f"no held-out validation: {count} settled pose(s) are too few to hold any out "
            f"(validation needs at least {needed} at holdout {float(holdout):g})")


def _message(model: Any, ok: bool, rank: int, n_free: int, cond: float, undetermined: list[str],
             advice: list[str], problems: list[str], fix_name: str, fix_value: float,
             fix_unit: str, groups: list[Group], validated: bool = True,
             validation: str = "") -> str:
    scale = f"scale fixed by {fix_name} = {fix_value:g} {fix_unit}"
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
    "holdout_split",
    "identify",
    "parameter_groups",
    "parse_fix",
    "poses_for_holdout",
]
