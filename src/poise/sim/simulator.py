"""The in-process simulator: state, actuator control and a fixed-step integrator.

    M(q) q̈ + C(q, q̇) q̇ + D q̇ + G(q) = Aᵀ τ,    τ = clip(τ_ff + K_P (q̄a − qa) − K_D q̇a)

Integrators (fixed step ``h = 1/rate``, default 5 kHz; :meth:`Simulator.step` sub-steps):

* ``"euler"`` (default) — semi-implicit (symplectic) Euler: ``q̇ += h q̈(q, q̇)``, then
  ``q += h q̇``. One evaluation of ``M``, ``C q̇``, ``G`` per step, so the cheapest; first order,
  but its energy error stays bounded (no drift) for conservative systems, and it is stable for
  oscillations with ``ω h < 2``: the default actuator loop has ``ω h ≤ 0.2``. This is the
  real-time plant's integrator.
* ``"rk4"`` — classic Runge–Kutta 4 (four evaluations per step, τ re-evaluated at each stage):
  fourth order, energy drift ~1e-10 relative over 10 s at 5 kHz; used where accuracy matters
  more than speed (the energy-conservation test, reference runs).

Two implementations of the same step: for families with kernels (planar_tree, planar_pcc) the
default is compiled (:mod:`poise.sim.compiled`: all ``k`` internal steps of :meth:`step` in
one call, compiled or loaded from Numba's cache when the simulator is made); the numpy loops
here are the reference (``compiled=False``, and the fallback for other families).

Example::

    from poise.models import load_model
    from poise.sim import Simulator
    sim = Simulator(load_model("double_pendulum"))
    sim.reset(q=[0.3, -0.2])
    sim.command([0.01], tau_ff=None); sim.set_mode("position")
    traj = sim.run(2.0, record_every=0.01)   # traj.t, traj.q, traj.qd, traj.tau
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from poise.models.base import FloatArray, MechanicalModel
from poise.sim.actuators import ActuatorController, ActuatorGains, default_gains
from poise.sim.dynamics import Dynamics, solve_spd
from poise.sim.imperfections import FRICTION_SWEEPS, SWEEP_TOL, PlantEffects

if TYPE_CHECKING:
    from poise.sim.compiled import CompiledPlant

INTEGRATORS: tuple[str, ...] = ("euler", "rk4")
#: Default internal rate [Hz].
DEFAULT_RATE = 5000.0
#: Lowest internal rate accepted [Hz].
MIN_RATE = 5000.0


@dataclass(frozen=True)
class Trajectory:
    """Samples of a run: times (k,) [s], q and q̇ (k, n), actuator efforts τ (k, m)."""

    t: FloatArray
    q: FloatArray
    qd: FloatArray
    tau: FloatArray


class Simulator:
    """A simulated robot: true state, device-side actuator control, fixed-step integration.

    Args:
        model: the (physical) robot model.
        rate: internal integration rate [Hz], ≥ 5 kHz.
        integrator: ``"euler"`` (semi-implicit, default) or ``"rk4"``.
        gains: actuator PD gains and effort limits (default :func:`default_gains` at ``rate``).
        q0: initial configuration (n,) (default: zeros, an equilibrium of every reference
            model); q̇ starts at zero.
        name: model name for the default effort-limit table (default ``model.name``).
        compiled: step with the compiled kernels when the model's family has them
            (:attr:`compiled` says whether it does); ``False``: the numpy reference.
        effects: the plant's imperfections (:mod:`poise.sim.imperfections`; friction,
            dead band, tendons, hysteresis act here, sensors and delays in
            :class:`~poise.sim.SimPlant`); ``None`` or none present: exactly the model.
            Dynamic effects need the ``"euler"`` integrator.
    """

    def __init__(self, model: MechanicalModel, *, rate: float = DEFAULT_RATE,
                 integrator: str = "euler", gains: ActuatorGains | None = None,
                 q0: Sequence[float] | FloatArray | None = None, name: str | None = None,
                 compiled: bool = True, effects: PlantEffects | None = None) -> None:
        rate = float(rate)
        if not (rate >= MIN_RATE and math.isfinite(rate)):
            raise ValueError(f"simulator rate = {rate:g} Hz: must be >= {MIN_RATE:g} Hz")
        if integrator not in INTEGRATORS:
            raise ValueError(f"integrator {integrator!r}: must be one of {', '.join(INTEGRATORS)}")
        self.model = model
        self.dynamics = Dynamics(model, compiled=False)  # the reference terms and energy
        self.n, self.m = self.dynamics.n, self.dynamics.m
        self.rate = rate
        self.integrator = integrator
        self.actuators = ActuatorController(gains or default_gains(model, rate, name=name),
                                            self.m)
        self._q = np.zeros(self.n)
        self._qd = np.zeros(self.n)
        self._tau = np.zeros(self.m)
        self._finite: bool | None = True  # None: not known since the last numpy step
        self.time = 0.0
        self.steps = 0
        #: The compiled step (:class:`poise.sim.compiled.CompiledPlant`), or ``None``.
        self.kernels = _compiled_plant(model) if compiled else None
        #: The imperfections acting on the dynamics, or ``None`` (exactly the model).
        self.effects = effects if effects is not None and effects.dynamic else None
        if self.effects is not None:
            if integrator != "euler":
                raise ValueError(f"integrator {integrator!r}: the plant's imperfections "
                                 f"({effects.source or 'plant table'}: friction, dead band, "
                                 "tendons, hysteresis) need the 'euler' integrator")
            if (effects.n, effects.m) != (self.n, self.m):
                raise ValueError(f"plant effects for n = {effects.n}, m = {effects.m}; the "
                                 f"model has n = {self.n}, m = {self.m}")
            J, fc, fs = self.effects.friction_rows(self.dynamics.A)
            self._rows = (np.ascontiguousarray(J), fc, fs)
            if self.kernels is not None:
                from poise.sim.effects_kernel import advance_effects

                self._advance_effects = advance_effects
        self.reset(q0)
        if self.effects is not None and self.kernels is not None:
            self._step_effects(0, 1.0 / rate)  # compile (or load) now, never in a step

    @property
    def compiled(self) -> bool:
        """Whether :meth:`step` runs the compiled kernels (else the numpy reference)."""
        return self.kernels is not None

    # ------------------------------------------------------------------ state

    @property
    def q(self) -> FloatArray:
        """True configuration (n,) [rad] (a copy)."""
        return self._q.copy()

    @property
    def qd(self) -> FloatArray:
        """True velocity (n,) [rad/s] (a copy)."""
        return self._qd.copy()

    @property
    def qa(self) -> FloatArray:
        """True actuator positions ``A q`` (m,)."""
        return self.dynamics.A @ self._q

    @property
    def qad(self) -> FloatArray:
        """True actuator velocities ``A q̇`` (m,)."""
        return self.dynamics.A @ self._qd

    @property
    def tau(self) -> FloatArray:
        """Actuator efforts applied in the last internal step (m,) [N or N·m]."""
        return self._tau.copy()

    @property
    def mode(self) -> str:
        return self.actuators.mode

    @property
    def gains(self) -> ActuatorGains:
        return self.actuators.gains

    def reset(self, q: Sequence[float] | FloatArray | None = None,
              qd: Sequence[float] | FloatArray | None = None, time: float = 0.0) -> None:
        """Set the state (``None``: zeros) and the clock; the actuator mode is kept."""
        self._q = self._vector(q, self.n, "q")
        self._qd = self._vector(qd, self.n, "qd")
        self._finite = True
        self.time = float(time)
        if self.effects is not None:
            y = self.effects.hyst_yield
            #: Bouc–Wen state z (n,) [rad], friction forces λ and stick flags per row (K,).
            self.hysteresis_z = np.clip(self._q, -y, y)
            self.friction_force = np.zeros(self._rows[1].size)
            self.stuck = np.ones(self._rows[1].size)
        self._tau = self._effort(self._q, self._qd)

    def push(self, dqd: Sequence[float] | FloatArray) -> None:
        """A velocity impulse: ``q̇ += dqd`` [rad/s] (a push of ``M dqd`` N·m·s)."""
        self._qd = self._qd + self._vector(dqd, self.n, "dqd")
        self._finite = None

    @staticmethod
    def _vector(value: Sequence[float] | FloatArray | None, size: int, what: str) -> FloatArray:
        if value is None:
            return np.zeros(size)
        arr = np.array(value, dtype=float).reshape(-1)
        if arr.size != size or not np.all(np.isfinite(arr)):
            raise ValueError(f"{what} = {arr.tolist()}: must be {size} finite numbers")
        return arr

    def energy(self) -> float:
        """Mechanical energy ``½ q̇ᵀ M q̇ + U(q)`` [J] of the true state."""
        return self.dynamics.energy(self._q, self._qd)

    # ------------------------------------------------------------------ control

    def set_mode(self, mode: str) -> None:
        """``"position"``, ``"hold"`` (latch q̄a = current qa) or ``"disabled"`` (τ = 0)."""
        self.actuators.set_mode(mode, self.qa)

    def command(self, qa_ref: Sequence[float] | FloatArray,
                tau_ff: Sequence[float] | FloatArray | None = None) -> None:
        """Actuator references q̄a (m,) and optional effort feed-forward τ_ff (m,)."""
        self.actuators.command(qa_ref, tau_ff)

    def _effort(self, q: FloatArray, qd: FloatArray) -> FloatArray:
        A = self.dynamics.A
        if self.effects is not None:
            return self._effort_effects(A @ q, A @ qd)
        return self.actuators.effort(A @ q, A @ qd)

    def _effort_effects(self, qa: FloatArray, qad: FloatArray) -> FloatArray:
        """The actuators' effort through the dead band, clip and tendon sign (numpy)."""
        ctl, e = self.actuators, self.effects
        assert e is not None
        if ctl.mode == "disabled":
            return np.zeros(self.m)
        g = ctl.gains
        u = ctl.tau_ff + g.kp * (ctl.ref - qa)
        half = 0.5 * g.kp * e.dead_band
        engaged = (e.dead_band <= 0) | (np.abs(u) > half)
        tau = np.where(engaged, u - np.sign(u) * np.where(e.dead_band > 0, half, 0.0)
                       - g.kd * qad, 0.0)
        tau = np.clip(tau, -g.effort_limit, g.effort_limit)
        return np.where(e.tendon > 0, np.maximum(tau, 0.0),
                        np.where(e.tendon < 0, np.minimum(tau, 0.0), tau))

    # ------------------------------------------------------------------ integration

    def step(self, dt: float) -> None:
        """Advance by ``dt`` [s] in ``ceil(dt · rate)`` equal internal steps (each ≤ 1/rate)."""
        dt = float(dt)
        if not dt > 0:
            return
        k = max(1, math.ceil(dt * self.rate - 1e-9))
        h = dt / k
        if self.effects is not None:
            self._step_effects(k, h)
        elif self.kernels is not None:
            ctl = self.actuators
            self._finite = self.kernels.advance(self._q, self._qd, self._tau, ctl.drive, ctl.on,
                                                k, h, self.integrator)
        else:
            self._finite = None  # unknown until asked
            if self.integrator == "euler":
                self._euler(k, h)
            else:
                self._rk4(k, h)
        self.time += dt
        self.steps += k

    @property
    def finite(self) -> bool:
        """Whether the true state ``q``, ``q̇`` is finite (not blown up)."""
        if self._finite is None:
            self._finite = bool(np.isfinite(self._q).all() and np.isfinite(self._qd).all())
        return self._finite

    def run(self, duration: float, *, record_every: float | None = None) -> Trajectory:
        """Simulate ``duration`` seconds; record the state every ``record_every`` seconds
        (default: only the start and the end)."""
        duration = float(duration)
        every = duration if record_every is None else float(record_every)
        if not every > 0:
            raise ValueError(f"record_every = {record_every}: must be > 0")
        count = max(1, round(duration / every))
        chunk = duration / count
        ts, qs, qds, taus = [self.time], [self.q], [self.qd], [self.tau]
        for _ in range(count):
            self.step(chunk)
            ts.append(self.time)
            qs.append(self.q)
            qds.append(self.qd)
            taus.append(self.tau)
        return Trajectory(np.array(ts), np.array(qs), np.array(qds), np.array(taus))

    def _euler(self, k: int, h: float) -> None:
        """``k`` semi-implicit Euler steps of size ``h`` (the hot loop: locals only)."""
        q, qd = self._q, self._qd
        dyn, ctl = self.dynamics, self.actuators
        terms, A, AT, damping = dyn.terms, dyn.A, dyn.AT, dyn.damping
        solve, minimum, maximum = solve_spd, np.minimum, np.maximum
        tau = np.zeros(self.m)
        if ctl.mode == "disabled":
            for _ in range(k):
                M, bias, G = terms(q, qd)
                qd = qd + h * solve(M, -(bias + G + damping * qd))
                q = q + h * qd
        else:
            # τ = τ_ff + K_P (q̄a − A q) − K_D A q̇ = u0 − (K_P A) q − (K_D A) q̇, then clipped.
            g = ctl.gains
            u0 = ctl.tau_ff + g.kp * ctl.ref
            kpA, kdA = g.kp[:, None] * A, g.kd[:, None] * A
            hi = g.effort_limit
            lo = -hi
            for _ in range(k):
                M, bias, G = terms(q, qd)
                tau = minimum(maximum(u0 - kpA @ q - kdA @ qd, lo), hi)
                qd = qd + h * solve(M, AT @ tau - bias - G - damping * qd)
                q = q + h * qd
        self._q, self._qd, self._tau = q, qd, tau

    def _step_effects(self, k: int, h: float) -> None:
        """``k`` Euler steps with the imperfections: compiled, or :meth:`_euler_effects`."""
        e, ctl = self.effects, self.actuators
        assert e is not None
        if self.kernels is not None:
            J, fc, fs = self._rows
            self._finite = self._advance_effects(
                self.kernels.args, self._q, self._qd, self._tau, ctl.drive, ctl.on, k, h,
                e.joint_viscous, e.act_viscous, e.dead_band, e.tendon, e.hyst_stiffness,
                e.hyst_yield, self.hysteresis_z, J, fc, fs, self.friction_force, self.stuck,
                FRICTION_SWEEPS)
        else:
            self._finite = None
            self._euler_effects(k, h)

    def _euler_effects(self, k: int, h: float) -> None:
        """The numpy reference of :func:`poise.sim.effects_kernel.advance_effects`."""
        e = self.effects
        assert e is not None
        q, qd, z = self._q.copy(), self._qd.copy(), self.hysteresis_z
        dyn = self.dynamics
        A, AT = dyn.A, dyn.AT
        J, fc, fs = self._rows
        lam, stuck = self.friction_force, self.stuck
        beta = np.where(e.hyst_yield > 0, 0.5 / np.where(e.hyst_yield > 0, e.hyst_yield, 1.0),
                        0.0)
        tau = np.zeros(self.m)
        for _ in range(k):
            tau = self._effort_effects(A @ q, A @ qd)
            M, bias, G = dyn.terms(q, qd)
            f = (AT @ tau - bias - (dyn.damping + e.joint_viscous) * qd - G
                 - e.hyst_stiffness * z - AT @ (e.act_viscous * (A @ qd)))
            v = qd + h * solve_spd(M, f)
            if fc.size:
                Y = np.linalg.solve(M, J.T)  # (n, K)
                W = np.einsum("rj,jr->r", J, Y)
                bound = np.where(stuck > 0, fs, fc)
                lam[:] = np.clip(lam, -bound, bound)
                v = v + h * Y @ lam
                for _sweep in range(FRICTION_SWEEPS):
                    change = 0.0
                    for r in range(fc.size):
                        new = min(max(lam[r] - (J[r] @ v) / (h * W[r]), -bound[r]), bound[r])
                        if new != lam[r]:
                            v = v + h * Y[:, r] * (new - lam[r])
                            change = max(change, abs(new - lam[r]) / max(bound[r], 1e-300))
                            lam[r] = new
                    if change < SWEEP_TOL:
                        break
                stuck[:] = np.abs(lam) < bound * (1.0 - 1e-9)
            qd = v
            z[:] = np.clip(z + h * (qd - beta * np.abs(qd) * z - beta * qd * np.abs(z)),
                           -e.hyst_yield, e.hyst_yield)
            q = q + h * qd
        self._q, self._qd, self._tau = q, qd, tau

    def _rk4(self, k: int, h: float) -> None:
        """``k`` classic Runge–Kutta steps of size ``h`` (τ re-evaluated at every stage)."""
        q, qd = self._q, self._qd
        dyn, ctl = self.dynamics, self.actuators
        terms, A, AT, damping, solve = dyn.terms, dyn.A, dyn.AT, dyn.damping, solve_spd
        disabled = ctl.mode == "disabled"

        def f(q: FloatArray, qd: FloatArray) -> FloatArray:
            M, bias, G = terms(q, qd)
            force = -(bias + G + damping * qd)
            if not disabled:
                force = force + AT @ ctl.effort(A @ q, A @ qd)
            return solve(M, force)

        for _ in range(k):
            a1 = f(q, qd)
            q2, qd2 = q + 0.5 * h * qd, qd + 0.5 * h * a1
            a2 = f(q2, qd2)
            q3, qd3 = q + 0.5 * h * qd2, qd + 0.5 * h * a2
            a3 = f(q3, qd3)
            q4, qd4 = q + h * qd3, qd + h * a3
            a4 = f(q4, qd4)
            q = q + (h / 6.0) * (qd + 2.0 * qd2 + 2.0 * qd3 + qd4)
            qd = qd + (h / 6.0) * (a1 + 2.0 * a2 + 2.0 * a3 + a4)
        self._q, self._qd = q, qd
        self._tau = self._effort(q, qd)


def _compiled_plant(model: MechanicalModel) -> CompiledPlant | None:
    """The compiled step of ``model`` (compiled or loaded now), ``None`` without kernels."""
    from poise.kernels import has_kernels

    if not has_kernels(model):
        return None
    from poise.sim.compiled import CompiledPlant

    return CompiledPlant(model)


__all__ = ["DEFAULT_RATE", "INTEGRATORS", "MIN_RATE", "Simulator", "Trajectory"]
