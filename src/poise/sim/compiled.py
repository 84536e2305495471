"""The simulator's step and sensor readout compiled with Numba (families with kernels).

The numpy :class:`~poise.sim.Simulator` loops and :class:`~poise.sim.Sensors` stay the
reference (``Simulator(..., compiled=False)``; ``tests/test_sim_compiled.py`` compares the
two); these kernels do the same arithmetic on the packed model of :mod:`poise.kernels`:

* :func:`advance` — ``k`` internal steps of size ``h`` in one call, in place on ``q``, ``q̇``,
  ``τ``: the actuators' PD law (:func:`effort`) and the right-hand side
  ``q̈ = M⁻¹ (Aᵀ τ − C q̇ − D q̇ − G)`` (:func:`poise.kernels.steps.acceleration`) inside
  semi-implicit Euler or RK4. The device endpoint steps the plant once per sensor frame
  (``step(1/500)``: 10 internal steps at 5 kHz), so Python is entered once per frame, not
  once per internal step.
* :func:`readout` — the deterministic part of the sensors (bias, encoder quantisation, the
  status bits) on noise drawn in numpy (:meth:`poise.sim.Sensors.normals`, in blocks from the
  seeded generator: the same stream, hence the same readings, as the reference).

:class:`CompiledPlant` holds one model's packed arrays and compiles (or loads from Numba's
cache) both kernels when it is made, never inside a step.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from numba import njit

from poise.kernels import cache, family, pack
from poise.kernels.steps import acceleration
from poise.models.base import FloatArray, MechanicalModel
from poise.sim.actuators import KD, KP, LIMIT, REF, TAU_FF
from poise.sim.sensors import (
    SATURATION_TOL,
    STATUS_NONFINITE,
    STATUS_Q_LIMIT,
    STATUS_QA_LIMIT,
    STATUS_SATURATED,
    Sensors,
)

#: Integrator codes of :func:`advance`, by the names of :data:`poise.sim.INTEGRATORS`.
METHOD_CODES = {"euler": 0, "rk4": 1}


# ----------------------------------------------------------------------------- the step


@njit(cache=True, inline="always")
def effort(C, m, drive, on, q, qd, tau):  # type: ignore[no-untyped-def]
    """``τ = clip(τ_ff + K_P (q̄a − A q) − K_D A q̇, −τ_max, τ_max)`` into ``tau`` (m,)
    [N or N·m]; ``0`` when the actuators are off (``disabled``). ``A`` = the first ``m`` rows
    of ``C``; ``drive`` rows :data:`TAU_FF`, :data:`REF`, :data:`KP`, :data:`KD`,
    :data:`LIMIT` (:meth:`poise.sim.ActuatorController.effort`; NaN passes, as ``np.clip``)."""
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
        t = drive[TAU_FF, i] + drive[KP, i] * (drive[REF, i] - qa) - drive[KD, i] * qad
        hi = drive[LIMIT, i]
        if t > hi:
            t = hi
        elif t < -hi:
            t = -hi
        tau[i] = t


@njit(cache=True, inline="always")
def _rhs(args, C, m, drive, on, q, qd, tau):  # type: ignore[no-untyped-def]
    """``q̈(q, q̇)`` (n,) with ``τ`` (written into ``tau``) from the PD law at ``(q, q̇)``."""
    effort(C, m, drive, on, q, qd, tau)
    return acceleration(args, q, qd, tau)


@njit(cache=True)
def advance(args, q, qd, tau, drive, on, k, h, method):  # type: ignore[no-untyped-def]
    """``k`` internal steps of size ``h`` [s], in place on ``q`` (n,) [rad], ``q̇`` (n,)
    [rad/s] and ``τ`` (m,).

    Args:
        args: the packed model (:attr:`poise.kernels.PackedModel.args`).
        drive: the actuator table (5, m) (:attr:`poise.sim.ActuatorController.drive`).
        on: the actuators apply effort (mode ``position`` or ``hold``).
        method: :data:`METHOD_CODES`: ``0`` semi-implicit Euler ``q̇ += h q̈(q, q̇)``,
            ``q += h q̇`` (``τ`` afterwards: the effort of the last step, evaluated at its
            start); ``1`` classic RK4 with ``τ`` at every stage (``τ`` afterwards: the effort
            at the final state). As :meth:`poise.sim.Simulator._euler` and ``_rk4``.

    Returns:
        Whether the final ``q`` and ``q̇`` are finite.
    """
    P = family.as_arrays(args)
    C, m = P.C, P.m
    n = q.size
    if method == 0:
        for _ in range(k):
            acc = _rhs(args, C, m, drive, on, q, qd, tau)
            for i in range(n):
                qd[i] = qd[i] + h * acc[i]
            for i in range(n):
                q[i] = q[i] + h * qd[i]
    else:
        half = 0.5 * h
        sixth = h / 6.0
        stage_tau = np.empty(m)
        q2, qd2 = np.empty(n), np.empty(n)
        q3, qd3 = np.empty(n), np.empty(n)
        q4, qd4 = np.empty(n), np.empty(n)
        for _ in range(k):
            a1 = _rhs(args, C, m, drive, on, q, qd, stage_tau)
            for i in range(n):
                q2[i] = q[i] + half * qd[i]
                qd2[i] = qd[i] + half * a1[i]
            a2 = _rhs(args, C, m, drive, on, q2, qd2, stage_tau)
            for i in range(n):
                q3[i] = q[i] + half * qd2[i]
                qd3[i] = qd[i] + half * a2[i]
            a3 = _rhs(args, C, m, drive, on, q3, qd3, stage_tau)
            for i in range(n):
                q4[i] = q[i] + h * qd3[i]
                qd4[i] = qd[i] + h * a3[i]
            a4 = _rhs(args, C, m, drive, on, q4, qd4, stage_tau)
            for i in range(n):
                q[i] = q[i] + sixth * (qd[i] + 2.0 * qd2[i] + 2.0 * qd3[i] + qd4[i])
                qd[i] = qd[i] + sixth * (a1[i] + 2.0 * a2[i] + 2.0 * a3[i] + a4[i])
        effort(C, m, drive, on, q, qd, tau)
    finite = True
    for i in range(n):
        finite = finite and math.isfinite(q[i]) and math.isfinite(qd[i])
    return finite


# ----------------------------------------------------------------------------- the sensors


@njit(cache=True)
def readout(A, q, qd, tau, normals, table, counts_per_rad, out):  # type: ignore[no-untyped-def]
    """The sensor readings into ``out`` = ``[q̃ (n) | q̃a (m) | τ̃ (m)]``; returns the status bits.

    ``q̃ = round((q + b + σ ν) c) / c`` (no rounding when ``c = 0``), ``q̃a = A q + b + σ ν``,
    ``τ̃ = τ + b + σ ν`` (:class:`poise.sim.Sensors`), with ``ν`` = ``normals`` (n + 2m,) and
    per channel ``table`` rows ``0`` σ, ``1`` bias ``b``, ``2`` lower and ``3`` upper limit
    (``q_min/q_max``, ``qa_min/qa_max``, ``∓τ_max``). Status (:mod:`poise.sim.sensors`): an
    effort at its limit, an actuator or a coordinate outside its limits, a non-finite state.
    """
    n, m = q.size, tau.size
    status = 0
    for i in range(n):
        v = q[i] + table[1, i] + table[0, i] * normals[i]
        if counts_per_rad > 0.0:
            v = np.rint(v * counts_per_rad) / counts_per_rad
        out[i] = v
        if q[i] < table[2, i] or q[i] > table[3, i]:
            status |= STATUS_Q_LIMIT
        if not (math.isfinite(q[i]) and math.isfinite(qd[i])):
            status |= STATUS_NONFINITE
    for j in range(m):
        a = n + j
        qa = 0.0
        for i in range(n):
            qa += A[j, i] * q[i]
        out[a] = qa + table[1, a] + table[0, a] * normals[a]
        if qa < table[2, a] or qa > table[3, a]:
            status |= STATUS_QA_LIMIT
        e = n + m + j
        out[e] = tau[j] + table[1, e] + table[0, e] * normals[e]
        limit = table[3, e]
        if limit > 0.0 and abs(tau[j]) >= limit * (1.0 - SATURATION_TOL):
            status |= STATUS_SATURATED
    return status


# ----------------------------------------------------------------------------- Python side


class CompiledPlant:
    """One model's compiled step and readout (see the module docstring).

    Args:
        model: the robot; its family must have kernels (:func:`poise.kernels.has_kernels`).

    Raises:
        poise.kernels.NoKernelsError: the family has none.
    """

    def __init__(self, model: MechanicalModel) -> None:
        packed = pack(model)
        self.args = packed.args
        self.n, self.m = packed.n, packed.m
        self.A = np.ascontiguousarray(packed.arrays.C[: self.m], dtype=np.float64)
        self._warm_up()

    def _warm_up(self) -> None:
        """Compile (or load) both kernels with the argument types of a run."""
        n, m = self.n, self.m
        q, qd, tau = np.zeros(n), np.zeros(n), np.zeros(m)
        drive = np.zeros((5, m))
        for code in METHOD_CODES.values():
            advance(self.args, q, qd, tau, drive, True, 1, 1e-4, code)
        readout(self.A, q, qd, tau, np.zeros(n + 2 * m), np.zeros((4, n + 2 * m)), 0.0,
                np.empty(n + 2 * m))

    def advance(self, q: FloatArray, qd: FloatArray, tau: FloatArray, drive: FloatArray,
                on: bool, k: int, h: float, integrator: str) -> bool:
        """:func:`advance` (in place); ``integrator`` a key of :data:`METHOD_CODES`."""
        return advance(self.args, q, qd, tau, drive, on, k, h, METHOD_CODES[integrator])

    def sensor_table(self, sensors: Sensors, q_min: FloatArray, q_max: FloatArray,
                     qa_min: FloatArray, qa_max: FloatArray, effort_limit: FloatArray
                     ) -> FloatArray:
        """The (4, n + 2m) ``table`` of :func:`readout`: σ, bias, lower, upper per channel."""
        return np.ascontiguousarray(np.vstack([
            sensors.noise_scale, sensors.bias,
            np.concatenate([q_min, qa_min, -effort_limit]),
            np.concatenate([q_max, qa_max, effort_limit])]), dtype=np.float64)


cache.ensure_fresh(cache.dispatchers([sys.modules[__name__]]))

__all__ = ["METHOD_CODES", "CompiledPlant", "advance", "effort", "readout"]
