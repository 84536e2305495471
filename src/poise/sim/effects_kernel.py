"""The simulator's semi-implicit Euler step with the plant's imperfections, compiled (Numba).

Used only when a plant file has dynamic effects (:class:`poise.sim.imperfections.PlantEffects`);
the exact plant keeps :func:`poise.sim.compiled.advance` untouched. The numpy reference is
:meth:`poise.sim.Simulator._euler_effects`; the equations are in ``docs/simulator.md``
("Imperfections"). Per internal step of size ``h``:

1. the transmission's effort ``τ`` (:func:`effort_effects`): the motor driver's PD law through
   a dead band of total width ``w`` (the servo force ``u = τ_ff + K_P (q̄a − qa)`` passes only
   beyond ``±K_P w / 2``, shifted by it; ``K_D`` acts while engaged), clipped to ``±τ_max``,
   then to ``τ >= 0`` (``<= 0``) for a single tendon;
2. the smooth forces ``f = Aᵀ τ − C q̇ − (D + b) q̇ − Aᵀ b_a A q̇ − G − κ z`` and the free
   velocity ``v* = q̇ + h M⁻¹ f``;
3. dry friction as impulses (Karnopp, implicit): rows ``J_k`` (joints ``e_i``, transmissions
   ``A_j``) with forces ``λ_k`` bounded by ``F_s`` if the row stuck in the previous step, else
   ``F_c``, such that the row velocity ``J_k (v* + h M⁻¹ Jᵀ λ)`` is zero where the bound
   allows; projected Gauss–Seidel, warm-started from the previous step's ``λ``, until a
   sweep changes no ``λ_k`` by more than :data:`~poise.sim.imperfections.SWEEP_TOL` of its
   bound (at most ``sweeps``);
4. ``q̇ = v* + h M⁻¹ Jᵀ λ``, ``z += h (q̇ − β |q̇| z − γ q̇ |z|)`` clipped to ``±y``
   (``β = γ = 1/(2y)``), ``q += h q̇``.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from numba import njit

from poise.kernels import cache, family
from poise.kernels.linalg import cho_solve, cholesky, solve_vec
from poise.sim.actuators import KD, KP, LIMIT, REF, TAU_FF
from poise.sim.imperfections import SWEEP_TOL


@njit(cache=True)
def effort_effects(C, m, drive, on, q, qd, dead_band, tendon, tau):  # type: ignore[no-untyped-def]
    """``τ`` (m,) through the dead band, clip and tendon sign (step 1 of the module docstring)."""
    n = q.size
    for i in range(m):
        if not on:
            tau[i] = 0.0
            continue
        qa = 0.0
        qad = 0.0
        for j in range(n):
            qa += C[i, j] * q[j]
            qad += C[i, j] * qd[j]
        kp = drive[KP, i]
        u = drive[TAU_FF, i] + kp * (drive[REF, i] - qa)
        half = 0.5 * kp * dead_band[i]
        if dead_band[i] > 0.0:
            if u > half:
                t = u - half - drive[KD, i] * qad
            elif u < -half:
                t = u + half - drive[KD, i] * qad
            else:
                t = 0.0
        else:
            t = u - drive[KD, i] * qad
        hi = drive[LIMIT, i]
        if t > hi:
            t = hi
        elif t < -hi:
            t = -hi
        if (tendon[i] > 0.0 and t < 0.0) or (tendon[i] < 0.0 and t > 0.0):
            t = 0.0
        tau[i] = t


@njit(cache=True)
def _solve(M, low, ok, b):  # type: ignore[no-untyped-def]
    if ok:
        return cho_solve(low, b)
    x, _ = solve_vec(M, b)
    return x


@njit(cache=True)
def advance_effects(args, q, qd, tau, drive, on, k, h, viscous, act_viscous, dead_band,
                    tendon, hyst_k, hyst_y, z, J, fc, fs, lam, stuck, sweeps
                    ):  # type: ignore[no-untyped-def]
    """``k`` semi-implicit Euler steps with the imperfections, in place on ``q``, ``q̇``,
    ``τ``, the Bouc–Wen state ``z`` (n,), the friction forces ``λ`` (K,) and the rows' stick
    flags ``stuck`` (K,) (1.0: stuck). Returns whether ``q`` and ``q̇`` are finite.

    Args:
        viscous: (n,) joint viscous friction b [N·m·s/rad] (on top of the model's D).
        act_viscous: (m,) transmission viscous friction b_a along ``A q``.
        dead_band, tendon: (m,) see :func:`effort_effects`.
        hyst_k, hyst_y: (n,) Bouc–Wen κ and y (y = 0: none).
        J, fc, fs: (K, n), (K,), (K,) the dry-friction rows and their bounds.
        sweeps: projected Gauss–Seidel sweeps per step.
    """
    P = family.as_arrays(args)
    C, m = P.C, P.m
    n = q.size
    K = fc.size
    f = np.empty(n)
    Y = np.empty((n, K))
    W = np.empty(K)
    v = np.empty(n)
    for _ in range(k):
        effort_effects(C, m, drive, on, q, qd, dead_band, tendon, tau)
        M, bias, g = family.dynamics_terms(P, q, qd)
        for j in range(n):
            acc = 0.0
            for i in range(m):
                acc += C[i, j] * tau[i]
            f[j] = acc - bias[j] - (P.damping[j] + viscous[j]) * qd[j] - g[j] \
                - hyst_k[j] * z[j]
        for i in range(m):
            if act_viscous[i] > 0.0:
                qad = 0.0
                for j in range(n):
                    qad += C[i, j] * qd[j]
                for j in range(n):
                    f[j] -= C[i, j] * act_viscous[i] * qad
        low, ok = cholesky(M)
        a = _solve(M, low, ok, f)
        for j in range(n):
            v[j] = qd[j] + h * a[j]
        if K > 0:
            for r in range(K):
                y = _solve(M, low, ok, J[r].copy())
                w = 0.0
                for j in range(n):
                    Y[j, r] = y[j]
                    w += J[r, j] * y[j]
                W[r] = w
            for r in range(K):  # warm start within this step's bounds
                bound = fs[r] if stuck[r] > 0.0 else fc[r]
                lam[r] = min(max(lam[r], -bound), bound)
                for j in range(n):
                    v[j] += h * Y[j, r] * lam[r]
            for _sweep in range(sweeps):
                change = 0.0
                for r in range(K):
                    bound = fs[r] if stuck[r] > 0.0 else fc[r]
                    vr = 0.0
                    for j in range(n):
                        vr += J[r, j] * v[j]
                    new = lam[r] - vr / (h * W[r])
                    new = min(max(new, -bound), bound)
                    d = new - lam[r]
                    if d != 0.0:
                        lam[r] = new
                        for j in range(n):
                            v[j] += h * Y[j, r] * d
                        change = max(change, abs(d) / max(bound, 1e-300))
                if change < SWEEP_TOL:
                    break
            for r in range(K):
                bound = fs[r] if stuck[r] > 0.0 else fc[r]
                stuck[r] = 1.0 if abs(lam[r]) < bound * (1.0 - 1e-9) else 0.0
        for j in range(n):
            qd[j] = v[j]
            y = hyst_y[j]
            if y > 0.0:
                zj = z[j]
                beta = 0.5 / y
                zj += h * (v[j] - beta * abs(v[j]) * zj - beta * v[j] * abs(zj))
                z[j] = min(max(zj, -y), y)
            q[j] = q[j] + h * v[j]
    finite = True
    for i in range(n):
        finite = finite and math.isfinite(q[i]) and math.isfinite(qd[i])
    return finite


cache.ensure_fresh(cache.dispatchers([sys.modules[__name__]]))

__all__ = ["advance_effects", "effort_effects"]
