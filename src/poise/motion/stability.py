"""How much feedback gain the loop takes: the linearised closed loop and its stability bound.

In feedback mode the IK integrates the *measured* task error, so the loop closes around the
robot's own dynamics; along the unactuated directions those are passive, lightly damped modes,
and an integrator of gain Γ around a mode of frequency ω and damping ratio ζ is stable only for
Γ below about 2ζω (docs/controller.md). This module computes the bound exactly, for the held
configuration the loop holds, from everything the loop contains:

* the plant linearised at ``q*`` (rest at a held configuration, so ``C(q, q̇) q̇`` drops out)::

      M δq̈ + D δq̇ + K δq = Aᵀ δτ,     K = ∂G/∂q (q*),   D = diag(d)

* the actuators' position loop as the devices run it (:mod:`poise.sim.actuators`)::

      δτ = δτ_ff + K_P (δq̄a − A δq) − K_D A δq̇

  held over each loop period (zero-order hold), discretised exactly: ``expm`` of the
  augmented matrix, so the discrete plant is ``z⁺ = Φ z + Γu u`` with ``z = (δq, δq̇)`` and
  ``u = (δq̄a, δτ_ff)``;
* the IK update with its gain, linear about the equilibrium (``e = 0``) and obtained from the
  steppers' own functions, so the update rule (``dls``, ``pinv``, …) and λ are those of the
  cycle:

  - Algorithm 1: ``δq̄a⁺ = δq̄a + Δt Γ U δe`` with ``U`` the update matrix of
    :func:`~poise.ik.held.algorithm1_step` (``J⁺``, ``J = Ja − Ju Huu⁻¹ Hua``); q̄ stays on
    E, ``δq̄u = −Huu⁻¹ Hua δq̄a``, and ``δτ_ff = (Haa − Hau Huu⁻¹ Hua) δq̄a``;
  - Algorithm 2: ``δq̄c⁺ = δq̄c + Δt (ΓZ Rz δex + ΓE Re δeE)``, ``Rz``, ``Re`` from
    :func:`~poise.ik.held.algorithm2_rates`, ``δeE = −[Hua Huu] δq̄c``;
  - plain CLIK: ``δq̄c⁺ = δq̄c + Δt Γ C J_h⁺ δe``;

  with ``δe = −J_h δq`` measured d periods ago in ``fb`` and ``δe = −J_c δq̄c`` in ``ff``;
  in ``fb`` the held algorithms integrate ``Π δe``, the error on the directions every plant of
  the stated uncertainty answers with the model's sign (:attr:`LoopLinearisation.projection`,
  :mod:`poise.motion.agreement`; the identity almost everywhere);
* the loop period Δt and the sensor-to-setpoint delay d (whole periods: 0 for the in-process
  plant, whose command acts from the sample it answers; the service uses
  :func:`delay_periods` of its measured latency).

What the bounds mean for the live gains (automatic gains, the report the service publishes) is
:mod:`poise.motion.bounds`.

The closed loop is one matrix; it is stable when every eigenvalue lies inside the unit circle,
except the neutral ones at exactly 1 that no gain moves (the null space of a redundant IK, the
dancer's). :meth:`LoopLinearisation.bound` scans the gain on a log grid and bisects the first
crossing: the largest gain below which every gain is stable. The slowest structural mode
``(ω, ζ)`` comes from the continuous plant with the actuator loop closed.

Nothing here runs in the control cycle: a linearisation is built when a target is planned
(:meth:`poise.motion.step.ControlStep.make_plan`), and bounds are computed when a command
is checked.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Literal

import numpy as np

from poise.api.rules import GAIN_UNCERTAINTY
from poise.ik.held import algorithm1_step, algorithm2_rates, damped_pinv, held_jacobian
from poise.ik.statics import StaticsSolution
from poise.models.actuation import ActuationBlocks, blocks
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.agreement import agreed_projection
from poise.sim.actuators import ActuatorGains, default_gains
from poise.sim.simulator import DEFAULT_RATE

#: Eigenvalues this close to 1 are neutral (a direction no gain moves), not unstable.
NEUTRAL_TOL = 1e-7
#: The gain scan: log-spaced from GAIN_FLOOR [1/s] up to SCAN_TOP × the loop rate.
GAIN_FLOOR = 1e-3
SCAN_TOP = 2.0
SCAN_POINTS = 24
#: A local maximum of the spectral radius on the scan within this of 1 is refined.
REFINE_MARGIN = 2e-3
#: Bisection steps after the scan (relative precision (grid ratio)^(2^-steps) ≈ 2e-4).
BISECT_STEPS = 12
#: Structural modes are those slower than this fraction of the actuator loop's frequency.
STRUCTURAL_FRACTION = 0.5
#: The gains each algorithm uses (the keys of :data:`poise.api.rules.RATE_GAINS`).
ALGORITHM_GAINS: dict[str, tuple[str, ...]] = {"alg1": ("gamma",), "plain": ("gamma",),
                                              "alg2": ("gamma_z", "gamma_e")}


@dataclass(frozen=True)
class Mode:
    """A mode of the linearised plant: ``λ = −ζω ± iω√(1−ζ²)``.

    Attributes:
        omega: natural frequency ω = |λ| [rad/s].
        zeta: damping ratio ζ = −Re λ / |λ| (≥ 1: not oscillatory).
    """

    omega: float
    zeta: float

    @property
    def damped_omega(self) -> float:
        """ω_d = ω √(1 − ζ²) [rad/s] (0 when ζ ≥ 1)."""
        return self.omega * math.sqrt(max(0.0, 1.0 - self.zeta**2))

    @property
    def damped_period(self) -> float:
        """2π / ω_d [s]: the time between the mode's swings (its undamped period when it does
        not oscillate)."""
        wd = self.damped_omega
        return 2 * math.pi / wd if wd > 0 else self.period

    @property
    def decay_rate(self) -> float:
        """The faster of the mode's two decay rates ``−Re λ`` [1/s]: ζω when oscillatory,
        ω(ζ + √(ζ² − 1)) when not."""
        return self.omega * (self.zeta + math.sqrt(max(0.0, self.zeta**2 - 1.0)))

    @property
    def period(self) -> float:
        """2π/ω [s], the period that settling times are compared with."""
        return 2 * math.pi / self.omega if self.omega > 0 else math.inf

    def as_dict(self) -> dict[str, float]:
        return {"omega": self.omega, "zeta": self.zeta, "period_s": self.period}


@dataclass(frozen=True)
class IKGains:
    """What of the live parameters the linear loop depends on (see
    :class:`~poise.motion.params.LiveParams`)."""

    algorithm: str
    mode: str
    update: str
    damping: float
    gamma: float
    gamma_z: float
    gamma_e: float

    @classmethod
    def of(cls, p: Any) -> IKGains:
        """From anything with these attributes (a ``LiveParams``)."""
        return cls(p.algorithm, p.mode, p.update, float(p.damping), float(p.gamma),
                   float(p.gamma_z), float(p.gamma_e))

    def with_gain(self, key: str, value: float) -> IKGains:
        return replace(self, **{key: float(value)})

    def relevant(self) -> IKGains:
        """The same, with the gains its algorithm does not use set to 0 (a cache key)."""
        used = ALGORITHM_GAINS.get(self.algorithm, ())
        return replace(self, **{k: 0.0 for k in ("gamma", "gamma_z", "gamma_e")
                                if k not in used})


class LoopLinearisation:
    """The loop linearised at the held configuration ``q_star`` (see the module docstring).

    Args:
        model: the controller's statics model (with mass properties).
        q_star: the held configuration the loop holds (n,).
        period: the loop period Δt [s].
        delay: the sensor-to-setpoint delay d [whole periods].
        actuators: the actuators' PD gains (default: the devices' defaults,
            :func:`poise.sim.actuators.default_gains` at the simulator's rate).
        effort_feedforward: the setpoint carries ``τ_ff = G_a(q̄)``.
        uncertainty: the feedback bound (:meth:`bound` in ``fb``) holds for a plant whose
            springs are within ``1 ± uncertainty`` × the model's (its stiffness matrix
            ``∂G/∂q ± uncertainty · diag(k)``, gravity as modelled): the smallest of the
            bounds at the model and at both ends; 0: the model's alone.
        stiffness_scale: the plant linearised with its springs × this (a variant of the
            robust bound; the controller's own matrices stay the model's).
        projection: the projection ``Π`` of the measured error the controller applies in
            ``fb`` (:mod:`poise.motion.agreement`): ``"agreed"`` computes it at ``q*`` from
            the plants of ``uncertainty`` (:attr:`projection`); a variant is given its
            nominal's, since it runs the model's controller; None: none.
    """

    def __init__(self, model: MechanicalModel, q_star: FloatArray, period: float, *,
                 delay: int = 0, actuators: ActuatorGains | None = None,
                 effort_feedforward: bool = True, uncertainty: float = GAIN_UNCERTAINTY,
                 stiffness_scale: float = 1.0,
                 projection: FloatArray | Literal["agreed"] | None = "agreed") -> None:
        if not period > 0 or not math.isfinite(period):
            raise ValueError(f"period = {period}: must be > 0 s")
        if delay < 0:
            raise ValueError(f"delay = {delay}: must be >= 0 periods")
        if not 0.0 <= uncertainty < 1.0:
            raise ValueError(f"uncertainty = {uncertainty}: must be in [0, 1)")
        self.uncertainty = float(uncertainty)
        self.stiffness_scale = float(stiffness_scale)
        self._projection = projection
        self._variants: list[LoopLinearisation] | None = None
        self.model = model
        self.q_star = np.array(q_star, dtype=float)
        self.period = float(period)
        self.delay = int(delay)
        self.effort_feedforward = effort_feedforward
        n, m = model.n, model.m
        self.n, self.m, self.k = n, m, model.task_dim
        gains = actuators or model_actuators(model)
        self.actuators = gains
        self.b: ActuationBlocks = blocks(model, self.q_star)
        self._C, self._C_inv = np.asarray(model.C, float), np.asarray(model.C_inv, float)
        self.F, self.B = plant_matrices(model, self.q_star, gains, stiffness_scale)
        #: measured task value: δx = J_h δq
        self.Jh = np.asarray(model.task_jacobian(self.q_star), dtype=float)
        self._cache: dict[tuple, float] = {}
        self._ik_cache: dict[tuple, Any] = {}

    @cached_property
    def projection(self) -> FloatArray | None:
        """``Π`` (task_dim, task_dim): feedback integrates ``Π e``, the error along the
        directions on which every plant of the stated uncertainty answers with the model's
        sign at ``q*`` (:func:`~poise.motion.agreement.agreed_projection`); None where all do
        (computed once, where the plan's bounds are)."""
        if isinstance(self._projection, str):
            return agreed_projection(self.model, self.q_star, self.uncertainty)
        return self._projection

    @cached_property
    def _discrete(self) -> tuple[FloatArray, FloatArray]:
        """``(Φ, Γ)``, the plant sampled at Δt (zero-order hold): computed at the first
        use, since a quick plan adopted at once needs only the modes (``expm`` is up to 4 ms
        of a target's answer)."""
        n, m = self.n, self.m
        aug = np.zeros((2 * n + 2 * m, 2 * n + 2 * m))
        aug[: 2 * n, : 2 * n], aug[: 2 * n, 2 * n:] = self.F, self.B
        from scipy.linalg import expm  # here: its import is 0.3 s of every process's start

        E = expm(aug * self.period)
        return E[: 2 * n, : 2 * n], E[: 2 * n, 2 * n:]

    @property
    def Phi(self) -> FloatArray:
        """Φ: the sampled plant's state matrix (2n, 2n)."""
        return self._discrete[0]

    @property
    def Gam(self) -> FloatArray:
        """Γ: the sampled plant's input matrix (2n, 2m)."""
        return self._discrete[1]

    # ------------------------------------------------------------------ the plant's modes

    def modes(self) -> list[Mode]:
        """The plant's modes (actuator loop closed, setpoint fixed), slowest first; one per
        complex pair."""
        return _modes(self.F)

    def structural_modes(self) -> list[Mode]:
        """The modes slower than :data:`STRUCTURAL_FRACTION` × the actuator loop's
        frequency (the robot's own, not the servo's), slowest first; none for a fully
        actuated robot (its modes are the servos')."""
        if self.n == self.m:
            return []
        return _structural(self.modes(), self.actuators)

    def slowest_mode(self) -> Mode | None:
        """The slowest structural mode (None for a robot without one)."""
        modes = self.structural_modes()
        return modes[0] if modes else None

    # ------------------------------------------------------------------ the IK, linearised

    def _ik(self, what: str, update: str, damping: float) -> Any:
        """The IK's linear pieces at q*, computed once per (algorithm, rule, λ)."""
        key = (what, update, damping)
        if key not in self._ik_cache:
            self._ik_cache[key] = (_alg1_update(self.model, self.q_star, update, damping)
                                   if what == "alg1" else
                                   _alg2_rates(self.model, self.q_star, damping))
        return self._ik_cache[key]

    def controller_matrices(self, g: IKGains) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``(Ac, Bc, Dc)``: ``c⁺ = Ac c + Bc y`` (y the measured δx) and ``u = Dc c⁺``."""
        b, dt, m, n, k = self.b, self.period, self.m, self.n, self.k
        fb = g.mode == "fb"
        hc = self._C_inv.T @ np.asarray(self.model.dG(self.q_star)) @ self._C_inv
        if g.algorithm == "alg1":
            U = self._ik("alg1", g.update, g.damping)
            J = held_jacobian(b)
            Ac = np.eye(m) if fb else np.eye(m) - dt * g.gamma * U @ J
            Bc = -dt * g.gamma * self._projected(U) if fb else np.zeros((m, k))
            S = b.Haa - b.Hua.T @ np.linalg.solve(b.Huu, b.Hua) if b.Huu.size else b.Haa
            Dc = np.vstack([np.eye(m), S if self.effort_feedforward else np.zeros((m, m))])
            return Ac, Bc, Dc
        Jc = self.Jh @ self._C_inv
        Hu = hc[m:]
        if g.algorithm == "alg2":
            Rz, Re = self._ik("alg2", "", g.damping)
            rate_x = g.gamma_z * (self._projected(Rz) if fb else Rz)
            Ac = np.eye(n) - dt * g.gamma_e * Re @ Hu
            if not fb:
                Ac = Ac - dt * rate_x @ Jc
        elif g.algorithm == "plain":
            rate_x = g.gamma * self._C @ damped_pinv(self.Jh, g.damping)
            Ac = np.eye(n) if fb else np.eye(n) - dt * rate_x @ Jc
        else:
            raise ValueError(f"algorithm {g.algorithm!r}: must be alg1, alg2 or plain")
        Bc = -dt * rate_x if fb else np.zeros((n, k))
        ff = hc[:m] if self.effort_feedforward else np.zeros((m, n))
        Dc = np.vstack([np.hstack([np.eye(m), np.zeros((m, n - m))]), ff])
        return Ac, Bc, Dc

    def _projected(self, R: FloatArray) -> FloatArray:
        """``R Π``: the update ``R`` of the measured error after its projection."""
        P = self.projection
        return R if P is None else R @ P

    # ------------------------------------------------------------------ the closed loop

    def closed_loop(self, g: IKGains) -> FloatArray:
        """The closed-loop matrix: state ``(z[k], c[k−1], y[k−1], …, y[k−d])``."""
        Ac, Bc, Dc = self.controller_matrices(g)
        Phi, Gam, Cy = self.Phi, self.Gam, self.Jh @ np.hstack(
            [np.eye(self.n), np.zeros((self.n, self.n))])
        nz, nc, k, d = Phi.shape[0], Ac.shape[0], self.k, self.delay
        size = nz + nc + d * k
        T = np.zeros((size, size))
        GD = Gam @ Dc
        zs, cs = slice(0, nz), slice(nz, nz + nc)
        if d == 0:  # c[k] = Ac c[k−1] + Bc Cy z[k]; z[k+1] = Φ z[k] + Γ Dc c[k]
            T[zs, zs] = Phi + GD @ Bc @ Cy
            T[zs, cs] = GD @ Ac
            T[cs, zs] = Bc @ Cy
            T[cs, cs] = Ac
            return T
        last = slice(nz + nc + (d - 1) * k, size)  # y[k−d]
        T[zs, zs] = Phi
        T[zs, cs] = GD @ Ac
        T[zs, last] = GD @ Bc
        T[cs, cs] = Ac
        T[cs, last] = Bc
        first = slice(nz + nc, nz + nc + k)
        T[first, zs] = Cy
        for j in range(1, d):
            T[nz + nc + j * k: nz + nc + (j + 1) * k, nz + nc + (j - 1) * k: nz + nc + j * k] \
                = np.eye(k)
        return T

    def spectral_radius(self, g: IKGains) -> float:
        """Largest |eigenvalue| of the closed loop, neutral ones (exactly 1) left out."""
        lam = np.linalg.eigvals(self.closed_loop(g))
        moving = lam[np.abs(lam - 1.0) > NEUTRAL_TOL]
        return float(np.max(np.abs(moving))) if moving.size else 0.0

    def stable(self, g: IKGains) -> bool:
        """Every non-neutral eigenvalue strictly inside the unit circle."""
        return self.spectral_radius(g) < 1.0

    def variants(self) -> list[LoopLinearisation]:
        """The loop with the plant's springs at ``1 ∓ uncertainty`` × the model's (made
        once; none without an uncertainty or on a robot without springs)."""
        if self._variants is None:
            u = self.uncertainty
            springs = np.asarray(getattr(self.model, "stiffness", np.zeros(0)), dtype=float)
            self._variants = [] if u == 0 or not np.any(springs) else [
                LoopLinearisation(self.model, self.q_star, self.period, delay=self.delay,
                                  actuators=self.actuators,
                                  effort_feedforward=self.effort_feedforward,
                                  uncertainty=0.0, stiffness_scale=scale,
                                  projection=self.projection)
                for scale in (1.0 - u, 1.0 + u)]
        return self._variants

    def bound(self, key: str, g: IKGains) -> float:
        """The robust bound: :meth:`nominal_bound` in ``ff`` (the loop does not close
        around the plant); in ``fb`` the smallest of it at the model and at the plant's
        springs ``1 ± uncertainty`` × the model's (:meth:`variants`). A variant that is
        unstable at every gain does not count: that plant cannot hold the configuration at
        all (the dancer crouched over its pointe with its spring −20 %), so no gain is safer
        there than another."""
        bound = self.nominal_bound(key, g)
        if g.mode != "fb":
            return bound
        for variant in self.variants():
            other = variant.nominal_bound(key, g)
            if other > 0:
                bound = min(bound, other)
        return bound

    def cached(self, key: tuple, compute: Callable[[], float]) -> float:
        """``compute()`` once per ``key`` for this linearisation, as the bounds are: what a
        plan computes ahead (:func:`~poise.motion.bounds.warm`) its adoption finds at once."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def worst_radius(self, key: str, g: IKGains) -> float:
        """The largest spectral radius of the closed loop at ``g`` over the model and, in
        ``fb``, the plants of :meth:`variants` that can hold the configuration at all (a
        stable value of gain ``key``, as :meth:`bound` counts them): how slowly the slowest
        pole of that whole family decays, ``ρ = e^{−Δt/τ}``."""
        worst = self.spectral_radius(g)
        if g.mode == "fb":
            for variant in self.variants():
                if variant.nominal_bound(key, g) > 0:
                    worst = max(worst, variant.spectral_radius(g))
        return worst

    def nominal_bound(self, key: str, g: IKGains) -> float:
        """The largest value of gain ``key`` [1/s] below which the loop is stable for every
        value (the other gains as in ``g``), at this linearisation's plant; ``inf`` if every
        gain up to :data:`SCAN_TOP` × the loop rate is stable; 0 if even :data:`GAIN_FLOOR`
        is not.

        The stable set need not be an interval (``soft_arm_soft`` at some targets is
        unstable for Γ in [3.1, 8.5] 1/s and stable again up to 139 1/s), so the spectral
        radius is scanned on a log grid, each local maximum of it close to 1 is refined
        (golden section) in case a narrow unstable band lies between two grid points, and the
        first crossing is bisected."""
        cache_key = (key, g.with_gain(key, 0.0).relevant())
        if cache_key in self._cache:
            return self._cache[cache_key]
        logs = np.linspace(math.log(GAIN_FLOOR), math.log(SCAN_TOP / self.period), SCAN_POINTS)

        def radius(log_gain: float) -> float:
            return self.spectral_radius(g.with_gain(key, math.exp(log_gain)))

        rho = [radius(x) for x in logs]
        lo, hi = -math.inf, math.inf  # log gains: last stable, first unstable
        for i, r in enumerate(rho):
            if r >= 1.0:
                hi = logs[i]
                break
            peak = 0 < i < len(rho) - 1 and r >= rho[i - 1] and r >= rho[i + 1]
            if peak and r > 1.0 - REFINE_MARGIN:
                x, r_max = _golden_max(radius, logs[i - 1], logs[i + 1])
                if r_max >= 1.0:
                    hi = x
                    break
            lo = logs[i]
        if math.isinf(hi):
            result = math.inf
        elif math.isinf(lo):
            result = 0.0
        else:
            for _ in range(BISECT_STEPS):
                mid = 0.5 * (lo + hi)
                if radius(mid) < 1.0:
                    lo = mid
                else:
                    hi = mid
            result = math.exp(lo)
        self._cache[cache_key] = result
        return result


def _golden_max(f: Any, a: float, b: float, steps: int = 14) -> tuple[float, float]:
    """``(x, f(x))`` at the maximum of the unimodal ``f`` on ``[a, b]`` (golden section)."""
    inv = (math.sqrt(5) - 1) / 2
    c, d = b - inv * (b - a), a + inv * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(steps):
        if fc >= fd:
            b, d, fd = d, c, fc
            c = b - inv * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + inv * (b - a)
            fd = f(d)
    return (c, fc) if fc >= fd else (d, fd)


def plant_matrices(model: MechanicalModel, q: FloatArray, gains: ActuatorGains,
                   stiffness_scale: float = 1.0) -> tuple[FloatArray, FloatArray]:
    """``(F, B)`` of the plant linearised at rest at ``q`` with the actuators' PD loop
    closed: ``ż = F z + B u``, ``z = (δq, δq̇)``, ``u = (δq̄a, δτ_ff)``::

        M δq̈ = −(K + Aᵀ K_P A) δq − (D + Aᵀ K_D A) δq̇ + Aᵀ K_P δq̄a + Aᵀ δτ_ff

    ``stiffness_scale``: the springs × this, ``K = ∂G/∂q + (s − 1) diag(k)``.
    """
    n, m = model.n, model.m
    M = np.asarray(model.mass_matrix(q), dtype=float)
    K = np.asarray(model.dG(q), dtype=float)
    if stiffness_scale != 1.0:
        springs = np.asarray(getattr(model, "stiffness", np.zeros(n)), dtype=float)
        K = K + (stiffness_scale - 1.0) * np.diag(np.broadcast_to(springs, (n,)))
    D = np.diag(np.asarray(model.damping, dtype=float))
    A = np.asarray(model.C, dtype=float)[:m]
    Kp, Kd = np.diag(gains.kp), np.diag(gains.kd)
    Minv = np.linalg.inv(M)
    F = np.block([[np.zeros((n, n)), np.eye(n)],
                  [-Minv @ (K + A.T @ Kp @ A), -Minv @ (D + A.T @ Kd @ A)]])
    B = np.block([[np.zeros((n, 2 * m))], [Minv @ A.T @ Kp, Minv @ A.T]])
    return F, B


def _modes(F: FloatArray) -> list[Mode]:
    out = []
    for x in np.linalg.eigvals(F):
        if x.imag < -1e-12:
            continue
        w = abs(x)
        out.append(Mode(float(w), float(-x.real / w) if w > 0 else 1.0))
    return sorted(out, key=lambda mo: mo.omega)


def _structural(modes: list[Mode], gains: ActuatorGains) -> list[Mode]:
    top = STRUCTURAL_FRACTION * (gains.omega if math.isfinite(gains.omega) else math.inf)
    return [mo for mo in modes if mo.omega < top]


_ACTUATORS: weakref.WeakKeyDictionary[MechanicalModel, ActuatorGains] = \
    weakref.WeakKeyDictionary()


def model_actuators(model: MechanicalModel) -> ActuatorGains:
    """The devices' default actuator gains for ``model`` at the simulator's rate
    (:func:`~poise.sim.actuators.default_gains`), computed once per model (they depend on
    its rest pose only; half a millisecond of every linearisation otherwise)."""
    gains = _ACTUATORS.get(model)
    if gains is None:
        gains = _ACTUATORS[model] = default_gains(model, DEFAULT_RATE)
    return gains


def structural_modes(model: MechanicalModel, q: FloatArray,
                     actuators: ActuatorGains | None = None,
                     stiffness_scale: float = 1.0) -> list[Mode]:
    """The structural modes of the plant at rest at ``q`` (actuator loop closed), slowest
    first: what :meth:`LoopLinearisation.structural_modes` gives, without the discretisation
    and the controller; ``stiffness_scale``: of a plant whose springs are this × the
    model's (:func:`plant_matrices`)."""
    if model.n == model.m:
        return []
    gains = actuators or model_actuators(model)
    F, _ = plant_matrices(model, np.asarray(q, dtype=float), gains, stiffness_scale)
    return _structural(_modes(F), gains)


def _alg1_update(model: MechanicalModel, q: FloatArray, update: str,
                 damping: float) -> FloatArray:
    """``U`` (m, k): Algorithm 1's actuator update is ``Δt Γ U e``; its columns are
    :func:`~poise.ik.held.algorithm1_step` for unit errors (Γ = Δt = 1), so the update rule
    and λ are the cycle's own."""
    b = blocks(model, q)
    statics = StaticsSolution(q=q, qa=b.qa, qu=b.qu, residual=float(np.linalg.norm(b.Gu)),
                              converged=True, iterations=0, eig_Huu=np.zeros(0),
                              verdict="stable")
    cols = []
    for e in np.eye(model.task_dim):
        qa_new, _, _ = algorithm1_step(model, statics, b.x, update=update,  # type: ignore[arg-type]
                                       damping=damping, gain=1.0, dt=1.0, e=e)
        cols.append(qa_new - b.qa)
    return np.column_stack(cols)


def _alg2_rates(model: MechanicalModel, q: FloatArray,
                damping: float) -> tuple[FloatArray, FloatArray]:
    """``(Rz, Re)``: Algorithm 2's rates are ``ΓZ Rz ex + ΓE Re eE`` (actuation coordinates);
    columns from :func:`~poise.ik.held.algorithm2_rates` with unit errors and unit gains."""
    b = blocks(model, q)
    k, nu = model.task_dim, model.n - model.m
    zx, zu = np.zeros(k), np.zeros(nu)
    Rz = np.column_stack([algorithm2_rates(b, e, zu, 1.0, 1.0, damping=damping)
                          for e in np.eye(k)])
    Re = np.column_stack([algorithm2_rates(b, zx, e, 1.0, 1.0, damping=damping)
                          for e in np.eye(nu)]) if nu else np.zeros((model.n, 0))
    return Rz, Re


def delay_periods(latency: float, period: float) -> int:
    """The sensor-to-setpoint delay in whole periods for a measured ``latency`` [s]: a
    setpoint written ``latency`` after the sample acts from then on; rounded up (at least 1
    for any latency > 0), which only ever lowers the bound."""
    if not latency > 0:
        return 0
    return max(1, math.ceil(latency / period - 1e-9))


__all__ = ["ALGORITHM_GAINS", "GAIN_UNCERTAINTY", "IKGains", "LoopLinearisation", "Mode",
           "delay_periods", "plant_matrices", "structural_modes"]

