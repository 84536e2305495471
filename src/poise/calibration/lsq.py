"""The least-squares stage of a statics identification: the scaled, weighted SVD solve.

With the scale group fixed (``θ_f``), the free groups solve ``Y_r θ_r = −y_f θ_f``; with
``kinematics`` the actuator kinematics rows ``qa = A q + o`` join them (offsets ``o`` as nuisance
parameters), each block weighted by ``1/σ̂`` of its own fit. A ``prior`` adds one row per free
group that pulls it towards its nominal value (a Gaussian prior, in units of its standard
deviation weighed like one weighted data row: see the units of the weighed total mass below,
which its rows share). Columns are scaled by each
parameter's typical magnitude before the SVD, so rank, condition number and null-space
directions compare *relative* changes of parameters with different units.

A known total mass (``total_mass``) is one exact linear equality ``dᵀ x = e`` on the unknowns
(:func:`~poise.calibration.grouping.total_mass_constraint`), eliminated before the SVD: in the
scaled coordinates ``u = x / s``, ``u = u₀ + N z`` with ``u₀`` the minimum-norm solution of the
constraint and ``N`` an orthonormal basis of its null space, and the least squares solve for
``z``. Rank, condition number, singular values and directions (mapped back, ``Vᵀ Nᵀ``) are
those of the reduced system ``A N``, the degrees of freedom count one unknown less, and the
covariance ``N cov(z) Nᵀ`` has zero variance along the constraint (the total mass).

A weighed total mass with a standard deviation ``σ_M`` (``total_mass_sd``) is no elimination
but one Gaussian measurement row ``(dᵀ x − e) / σ_M`` appended to the weighted system, like the
prior's rows: every unknown stays free (``n_free`` counts them all), and rank, singular values
and covariance are those of the augmented system, so the sum of the masses gets the variance of
the data and the scale combined (at most about ``σ_M²``). Units: the row must weigh like a
weighted statics row. With kinematics the blocks are weighted by ``1/σ̂`` of their own fits,
so a weighted row has standard deviation 1 and the row is ``(dᵀ x − e) / σ_M``; without
kinematics the statics rows carry weight 1 and standard deviation ``σ̂_s`` [N·m] (their own
fit's), so the row is ``(dᵀ x − e) · σ̂_s / σ_M``: one ``σ_M`` off the scale costs as much as
one ``σ̂_s`` off a statics equation. Either way the identified sum is the data's sum and the
weighed value combined by their inverse variances (exactly so without kinematics or a prior),
and the covariance is ``σ̂² (AᵀA)⁻¹`` of the augmented rows as for the data alone. The rank
threshold stays ``rcond`` times the data rows' largest singular value: a scale far more precise
than the data (``σ_M → 0``) tends to the exact constraint, not to a rank-deficient fit.

Statistics: ``σ̂² = ‖r‖² / (rows − p)``, ``cov = σ̂² V Σ⁻² Vᵀ`` in the scaled coordinates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from poise.calibration.grouping import Group, total_mass_constraint
from poise.calibration.regressor import StaticsRegressor
from poise.models.base import FloatArray


@dataclass(frozen=True)
class StaticsFit:
    """The solution and its statistics (groups: ``π = T θ``).

    Attributes:
        theta: group values (g,), the fixed one included.
        pi: parameter vector ``T θ`` (p,).
        offsets: actuator kinematics offsets ``o`` (m,) (empty without kinematics).
        n_free: solved unknowns (free groups + offsets), less one with a total mass held
            exactly (the degrees of freedom the data must determine; a total mass with a
            standard deviation is a measurement and removes none).
        singular_values: of the scaled system, descending (zeros for unseen directions).
        directions: ``Vᵀ`` of the scaled system, one direction per row.
        column_names: the unknowns' names in the order of ``directions``' columns.
        rank: numerical rank (``σ_i > rcond · σ_max``; ``σ_max`` of the rows without a
            weighed total mass's row, which however precise leaves the data's rank alone).
        cond, cond_raw: condition number of the scaled system / of the unscaled statics rows.
        sigma: residual standard deviation ``σ̂`` of the weighted system.
        residual_rms: RMS statics residual on the fit rows [N·m].
        covariance: of the parameters (p, p), zero for the fixed group [SI].
        std_error: of the parameters (p,); offset_std_error: of the offsets (m,).
        weights: ``(w_s, w_k)`` of the statics and kinematics blocks.
        total_mass: the total mass in the fit [kg], held exactly or measured (None: not
            given, or implied by the scale alone and so not in the fit).
        total_mass_sd: its standard deviation [kg] when it entered as a measurement row
            (None: held exactly, or not in the fit).
    """

    theta: FloatArray
    pi: FloatArray
    offsets: FloatArray
    n_free: int
    singular_values: FloatArray
    directions: FloatArray
    column_names: list[str]
    rank: int
    cond: float
    cond_raw: float
    sigma: float
    residual_rms: float
    covariance: FloatArray
    std_error: FloatArray
    offset_std_error: FloatArray
    weights: tuple[float, float]
    total_mass: float | None = None
    total_mass_sd: float | None = None


@dataclass(frozen=True)
class _System:
    """The weighted system ``A_w x ≈ b_w`` with column scales ``s``, and its statics block.
    ``row_sd``: the standard deviation of one weighted statics row, ``w_s σ̂_s`` (1 with the
    blocks weighted by ``1/σ̂``, ``σ̂_s`` [N·m] with the statics rows alone)."""

    A_w: FloatArray
    b_w: FloatArray
    scales: FloatArray
    Y_r: FloatArray
    b_s: FloatArray
    weights: tuple[float, float]
    row_sd: float = 1.0


def fit_statics(reg: StaticsRegressor, model: Any, Y_fit: FloatArray, q_fit: FloatArray,
                qa_fit: FloatArray, groups: Sequence[Group], T: FloatArray, g_fix: int,
                theta_fix: float, *, kinematics: bool, rcond: float,
                prior: float | None = None, total_mass: float | None = None,
                total_mass_sd: float | None = None) -> StaticsFit:
    """Solve for the free groups (and offsets) from the fit poses.

    Args:
        Y_fit: statics rows of the fit poses (N, n, p); q_fit (N, n), qa_fit (N, m) their
            measured coordinates and actuator positions.
        groups, T: the parameter groups and ``π = T θ``; g_fix, theta_fix: the scale group.
        kinematics: add the actuator kinematics rows; rcond: rank threshold.
        prior: relative standard deviation of a Gaussian prior at the nominal values of the
            free groups (one row ``(θ_j − θ_nom,j) / (prior · |θ_nom,j|)`` each, the column
            scale where the nominal is 0): directions the data do not determine stay near
            the nominal model instead of wandering off. None: no prior.
        total_mass: the weighed total mass [kg], held exactly (``Σ masses_of(π) = total_mass``,
            eliminated; see the module's notes). None: not known.
        total_mass_sd: its standard deviation ``σ_M`` [kg]: the total mass is then one
            measurement row ``(Σ masses_of(π) − total_mass) / σ_M`` in the units of the
            weighted statics rows (see the module's notes) instead of an equality. None:
            held exactly.

    Raises:
        CalibrationError: the scale alone implies a different total mass
            (:func:`~poise.calibration.grouping.total_mass_constraint`).
    """
    free = [g for g in range(len(groups)) if g != g_fix]
    system = _stacked_system(reg, model, Y_fit, q_fit, qa_fit, groups, T, free, g_fix,
                             theta_fix, kinematics)
    if prior is not None:
        system = _with_prior(system, reg, groups, free, prior)
    constraint = None
    measured = False
    if total_mass is not None:
        tm = total_mass_constraint(reg, T, g_fix, theta_fix, total_mass, total_mass_sd)
        if tm is not None:
            d_groups, e = tm
            d = np.zeros(system.A_w.shape[1])
            d[: len(free)] = d_groups[free]
            if total_mass_sd is None:
                constraint = (d, e)
            else:
                system = _with_total_mass(system, d, e, total_mass_sd)
                measured = True
    x, sv, Vt, rank, cond, cov_x, sigma = _scaled_lstsq(system, rcond, constraint,
                                                        measured_rows=int(measured))
    Y_raw = system.Y_r
    if constraint is not None:  # the statics rows on the constraint's null space
        Y_raw = Y_raw @ _null_basis(constraint[0][: len(free)])
    sv_raw = np.linalg.svd(Y_raw, compute_uv=False)
    cond_raw = float(sv_raw[0] / sv_raw[-1]) if sv_raw[-1] > 0 else math.inf
    theta = np.empty(len(groups))
    theta[g_fix] = theta_fix
    theta[free] = x[: len(free)]
    r = system.b_s - system.Y_r @ theta[free]
    Tf = T[:, free]
    cov = Tf @ cov_x[: len(free), : len(free)] @ Tf.T  # (p, p), zero for the fixed group
    n_off = x.size - len(free)
    return StaticsFit(
        theta=theta, pi=T @ theta, offsets=x[len(free):],
        n_free=int(x.size) - (constraint is not None),
        singular_values=sv, directions=Vt,
        column_names=[groups[g].name for g in free] + [f"qa_offset[{j}]" for j in range(n_off)],
        rank=rank, cond=cond, cond_raw=cond_raw, sigma=sigma,
        residual_rms=float(np.sqrt(np.mean(r**2))) if r.size else math.nan,
        covariance=cov, std_error=np.sqrt(np.maximum(np.diag(cov), 0.0)),
        offset_std_error=np.sqrt(np.maximum(np.diag(cov_x)[len(free):], 0.0)),
        weights=system.weights,
        total_mass=total_mass if constraint is not None or measured else None,
        total_mass_sd=total_mass_sd if measured else None)


def _with_prior(system: _System, reg: StaticsRegressor, groups: Sequence[Group],
                free: list[int], prior: float) -> _System:
    """``system`` with one prior row per free group (see :func:`fit_statics`), ``(θ_j −
    θ_nom,j) · row_sd / sd_j``: in the units of the weighted statics rows, as the weighed total
    mass's row (see the module's notes), so that one ``sd_j`` off the nominal costs as much as
    one standard deviation off a statics equation, with kinematics or without."""
    rows = np.zeros((len(free), system.A_w.shape[1]))
    rhs = np.zeros(len(free))
    for r, g in enumerate(free):
        first = groups[g].members[0]  # its ratio is 1: the group's value is its nominal
        nominal = float(reg.nominal[first])
        sd = prior * (abs(nominal) if nominal != 0.0 else float(reg.scales[first]))
        rows[r, r] = system.row_sd / sd
        rhs[r] = nominal * system.row_sd / sd
    return _System(np.vstack([system.A_w, rows]), np.concatenate([system.b_w, rhs]),
                   system.scales, system.Y_r, system.b_s, system.weights, system.row_sd)


def _with_total_mass(system: _System, d: FloatArray, e: float, sd: float) -> _System:
    """``system`` with the weighed total mass ``dᵀ x = e ± sd`` as one measurement row,
    ``(dᵀ x − e) · row_sd / sd``: in the units of the weighted statics rows (see the module's
    notes)."""
    w = system.row_sd / sd
    return _System(np.vstack([system.A_w, w * np.asarray(d, dtype=float)[None, :]]),
                   np.append(system.b_w, w * e), system.scales, system.Y_r, system.b_s,
                   system.weights, system.row_sd)


def _stacked_system(reg: StaticsRegressor, model: Any, Y_fit: FloatArray, q_fit: FloatArray,
                    qa_fit: FloatArray, groups: Sequence[Group], T: FloatArray,
                    free: list[int], g_fix: int, theta_fix: float,
                    kinematics: bool) -> _System:
    """The statics rows in grouped columns, with the kinematics rows when asked."""
    Yt = Y_fit.reshape(-1, reg.p) @ T  # grouped columns
    Yr = Yt[:, free]
    b_s = -Yt[:, g_fix] * theta_fix
    s = np.array([reg.scales[groups[g].members[0]] for g in free])
    if not kinematics:  # weight 1: a row's standard deviation is the block's own σ̂ [N·m]
        return _System(Yr, b_s, s, Yr, b_s, (1.0, 0.0), _block_sigma(Yr * s, b_s))
    # qa_j = Σ_i A_ji q_i + o_j: moment-arm columns get q_i, the offset column 1
    n_pose = len(q_fit)
    K = np.zeros((n_pose, reg.m, reg.p))
    for col, (j, i) in enumerate(reg.arm_index):
        K[:, j, reg._a0 + col] = q_fit[:, i]
    Kt = K.reshape(-1, reg.p) @ T
    Kr = np.hstack([Kt[:, free], np.tile(np.eye(reg.m), (n_pose, 1))])
    b_k = qa_fit.reshape(-1) - Kt[:, g_fix] * theta_fix
    s_all = np.concatenate([s, _actuator_widths(model)])
    Ys = np.hstack([Yr, np.zeros((Yr.shape[0], reg.m))])
    # block weights 1/σ from each block's own fit (floors keep noise-free data exact)
    w_s = 1.0 / _block_sigma(Ys * s_all, b_s)
    w_k = 1.0 / _block_sigma(Kr * s_all, b_k)
    A_w = np.vstack([Ys * w_s, Kr * w_k])
    b_w = np.concatenate([b_s * w_s, b_k * w_k])
    return _System(A_w, b_w, s_all, Yr, b_s, (float(w_s), float(w_k)))


def _scaled_lstsq(system: _System, rcond: float,
                  constraint: tuple[FloatArray, float] | None = None, *,
                  measured_rows: int = 0) -> tuple[
        FloatArray, FloatArray, FloatArray, int, float, FloatArray, float]:
    """``(x, σ, Vᵀ, rank, cond, cov(x), σ̂)``: least squares in the scaled coordinates on the
    numerical range (minimum norm if rank deficient). ``constraint`` ``(d, e)``: ``dᵀ x = e``
    exactly, eliminated (``u = u₀ + N z``); ``σ``, ``rank``, ``cond`` are then those of the
    reduced system and the rows of ``Vᵀ`` its directions in the scaled unknowns ``u``.
    ``measured_rows``: the last rows are a weighed total mass's; the rank threshold is
    ``rcond`` times the largest singular value of the other rows (a very precise scale makes
    its own direction's singular value huge, and must not push the data's below the
    threshold: the exact constraint's rank is the limit)."""
    A_w, b_w, s_all = system.A_w, system.b_w, system.scales
    Ys = A_w * s_all
    n_x = Ys.shape[1]
    u0 = np.zeros(n_x)
    N = None
    if constraint is not None:
        d, e = constraint
        ds = np.asarray(d, dtype=float) * s_all  # dᵀ x = dsᵀ u
        u0 = ds * (e / float(ds @ ds))
        N = _null_basis(ds)
        b_w = b_w - Ys @ u0
        Ys = Ys @ N
    U, sv_r, Vt = np.linalg.svd(Ys, full_matrices=True)  # Vt: all directions, also unseen ones
    U = U[:, : sv_r.size]
    sv = np.zeros(Ys.shape[1])
    sv[: sv_r.size] = sv_r
    smax = float(sv[0]) if sv.size else 0.0
    ref = smax
    if measured_rows:
        rest = Ys[: Ys.shape[0] - measured_rows]
        ref = float(np.linalg.norm(rest, 2)) if rest.size else 0.0
    rank = int(np.sum(sv > rcond * ref)) if ref > 0 else 0
    cond = float(smax / sv[-1]) if sv.size and sv[-1] > 0 else math.inf
    inv = np.where(np.arange(sv.size) < rank, 1.0 / np.where(sv > 0, sv, 1.0), 0.0)
    z = Vt.T @ (inv * np.concatenate([U.T @ b_w, np.zeros(sv.size - sv_r.size)]))
    cov_z = (Vt.T * (inv**2)) @ Vt
    if N is not None:
        z, cov_z, Vt = N @ z, N @ cov_z @ N.T, Vt @ N.T
    x = s_all * (u0 + z)
    r_w = system.b_w - A_w @ x
    dof = max(A_w.shape[0] - sv.size, 1)
    sigma = float(np.linalg.norm(r_w) / math.sqrt(dof))
    cov_x = cov_z * sigma**2 * np.outer(s_all, s_all)
    return x, sv, Vt, rank, cond, cov_x, sigma


def _null_basis(d: FloatArray) -> FloatArray:
    """An orthonormal basis (k, k − 1) of the vectors orthogonal to ``d`` (k,), ``d ≠ 0``."""
    _, _, Vt = np.linalg.svd(np.asarray(d, dtype=float)[None, :])
    return Vt[1:].T


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


__all__ = ["StaticsFit", "fit_statics"]
