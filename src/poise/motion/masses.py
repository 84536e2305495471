"""The plant's masses as its held efforts show them, for a task that is its centre of mass.

A task computed through the masses (the dancer's centre of mass, ``com_xy``) is not seen by
feedback where the plant's masses differ from the model's: ``h(q)`` at the measured ``q`` is
the *model's* centre of mass there, and feedback drives that to the target (on ``mixed15``,
masses off by 5–15 % body by body, the dancer's targets ended 24–50 mm off; two fell).
What a resting plant does show is the effort each actuator holds it with: at rest (seed
000, statics)

    g Sᵀ(a ∘ cos ψ) + K (q − q_rest) = Aᵀ τ,        ψ = S q + ψ₀,

linear in the bodies' first mass moments ``a = W_comᵀ m`` [kg·m] and the springs ``k``
[N·m/rad] (the regressor of :mod:`poise.calibration.regressor`, ``planar_tree``, with the
geometry and the actuation ``A`` from the drawing). Each resting window (the static part of
``q`` and of the measured efforts ``τ``) adds ``n`` such rows; :class:`MassEstimate` solves
them in least squares with the robot's total mass ``M = 1ᵀ W_com⁻ᵀ a`` (weighed, or the
model's) as one more row and a weak prior at the model's values (a body whose gravity torque
the poses seen do not reveal, one hanging straight down, keeps the model's moment), each
window's rows weighted by how much its efforts still ring (:meth:`MassEstimate.add`), with
one coefficient per actuator for the effort a moving setpoint adds. The total mass is
needed: the pointe's spring and the stance leg's moment enter its one equation with nearly
the same column (``k₀ q₀`` against ``g a₀ sin q₀``), so statics alone cannot tell how heavy
the body is, only how its weight is spread.

The centre of mass is then ``ĥ(q) = base + Σ_b (â_b / M̂) (cos ψ_b, sin ψ_b)`` and the model's
task value is off by the *task bias* ``b(q) = h(q) − ĥ(q)`` (:meth:`MassEstimate.bias`);
feedback aims the model's task at ``target + b`` (:mod:`poise.motion.step`), so the estimated
true centre of mass goes to the target, once the estimate pins it down
(:meth:`MassEstimate.com_sigma`: its covariance, grown where the windows disagree beyond
their errors, as friction makes them). Plans are then aimed for the plant the estimate
describes (:meth:`MassEstimate.plant_model`, :func:`poise.motion.planner.for_plant`). On
the exact model the efforts are the model's own, ``â`` is the model's ``a`` up to the effort
noise and the bias stays far below its threshold, so nothing changes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poise.models.base import FloatArray, MechanicalModel
from poise.models.planar_tree import with_bodies

#: Prior: each moment and spring within this fraction of the model's value (one sigma).
PRIOR = 0.3
#: The efforts are trusted to this fraction of the largest gravity torque (one sigma).
EFFORT_SIGMA = 1e-3
#: Once the windows showed friction: a passive coordinate's equation (no effort measures it)
#: is trusted to no better than this fraction of the largest gravity torque (one sigma), the
#: friction its joint may hold unseen. The dancer: 2.2 N·m at the pointe (``real``'s pointe
#: holds 1.4 N·m sliding, 2.1 N·m breakaway, and its hysteresis). Trusted to the effort floor
#: instead, its windows taught the estimate friction's bias: on ``real`` (16 cases, 320
#: targets) the estimated centre of mass ended 0.86 mm off at p50 against 0.56 mm so, and
#: 271 targets were reached against 278.
PASSIVE_FRICTION = 5e-3
#: The total mass is held to this fraction (a scale's precision, one sigma).
MASS_SIGMA = 1e-3
#: The speed [actuator units/s] at which an actuator's speed-proportional effort is guessed
#: (prior, one sigma) to be as large as the largest gravity torque.
SPEED = 0.1


def mass_task(model: MechanicalModel) -> bool:
    """Whether ``model``'s task is its centre of mass, computed through its masses (a
    ``planar_tree`` with the ``com_xy`` task)."""
    spec = getattr(model, "spec", None)
    return getattr(spec, "task_kind", "") == "com_xy" and hasattr(model, "a_w")


class MassEstimate:
    """The plant's first mass moments ``â`` and springs ``k̂`` over the resting windows seen,
    and the task bias they imply (see the module docstring); kept over targets.

    Args:
        model: the controller's statics model (a ``planar_tree``; else :attr:`enabled` is
            False and :meth:`bias` is 0).
        total_mass: the robot's weighed total mass [kg]; None: the model's.
    """

    def __init__(self, model: MechanicalModel, total_mass: float | None = None) -> None:
        self.model = model
        self.enabled = mass_task(model)
        n, m = model.n, model.m
        self.total_mass = float(total_mass) if total_mass is not None else \
            float(getattr(model, "total_mass", 0.0))
        self.windows = 0
        #: The least error a passive coordinate's equation counts with [N·m]: the effort
        #: floor, or :data:`PASSIVE_FRICTION` × the largest gravity torque once friction
        #: was shown (:meth:`restart`).
        self.passive_floor = 0.0
        self._plant: MechanicalModel | None = None
        if not self.enabled:
            return
        M: Any = model  # a planar_tree (mass_task): its arrays by name
        self._S = np.asarray(M.S, dtype=float)
        self._psi0 = np.asarray(M.psi0, dtype=float)
        self._g = float(M.gravity)
        self._base = np.asarray(M.base, dtype=float)
        a0 = np.asarray(M.a_w, dtype=float)
        k0 = np.asarray(M.stiffness, dtype=float)
        self._rest = np.asarray(M.q_rest, dtype=float)
        self._A = np.asarray(model.C, dtype=float)[:m]
        #: Springs estimated: the coordinates that have one.
        self._springs = np.flatnonzero(k0 > 0.0)
        self._torque = max(self._g * float(np.max(np.abs(a0))), 1e-9)
        #: unknowns: a (n), the springs k, the speed coefficients c (m) [effort·s/unit]
        self._c0 = n + self._springs.size
        self.nominal = np.concatenate([a0, k0[self._springs], np.zeros(m)])
        scale = np.maximum(np.abs(self.nominal), 1e-3 * float(np.max(np.abs(a0))))
        scale[self._c0:] = self._torque / SPEED
        self._scale = scale  # unknowns are relative changes x = (p − p₀) / scale
        # normal equations of the prior and the total mass (rows in relative units)
        p = self.nominal.size
        self._N = np.eye(p) / PRIOR**2
        self._r = np.zeros(p)
        mass_row = np.zeros(p)
        W_com = np.asarray(M.W_com, dtype=float)
        mass_row[:n] = np.linalg.solve(W_com, np.ones(n)) * scale[:n]  # 1ᵀ W_com⁻ᵀ a
        model_mass = float(np.sum(np.asarray(M.masses, dtype=float)))
        w = 1.0 / (MASS_SIGMA * max(self.total_mass, 1e-9))
        self._N += np.outer(mass_row, mass_row) * w * w
        self._r += mass_row * (self.total_mass - model_mass) * w * w
        self._prior = (self._N, self._r)
        self.restart()

    def restart(self, friction: bool = False) -> None:
        """Forget every window: the estimate is the model's (with the total mass) again.
        Windows that friction biased are dropped so (:mod:`poise.motion.dither`).

        ``friction``: the windows showed friction; from now on a passive coordinate's
        equation counts with at least :data:`PASSIVE_FRICTION` × the largest gravity torque
        (a dither that moves the actuators through their friction need not move a passive
        joint through its own, and no effort shows it)."""
        if not self.enabled:
            return
        self.passive_floor = max(self.passive_floor, self.effort_floor,
                                 PASSIVE_FRICTION * self._torque if friction else 0.0)
        self._N, self._r = (a.copy() for a in self._prior)
        self._x = np.linalg.solve(self._N, self._r)
        # the windows' weighted equations alone, summed (for their agreement, scatter):
        # Σ YᵀY, Σ Yᵀe, Σ eᵀe and the number of rows
        self._data = (np.zeros_like(self._N), np.zeros_like(self._r), 0.0, 0)
        self.windows = 0
        self._plant = None

    def add(self, q: FloatArray, efforts: FloatArray, rate: FloatArray | None = None,
            error: FloatArray | None = None, q_error: FloatArray | None = None) -> None:
        """One resting window: the static part of the measured ``q`` (n,) and of the
        measured efforts ``τ`` (m,) [N or N·m], and how fast the actuators moved through it
        ``q̇a`` (m,) [units/s] (the integrator moves them while an error is left).

        An actuator that moves reads more effort than statics says, in proportion to its
        speed (viscous friction in its transmission, its servo's lag behind a moving
        setpoint: the dancer's arm moving at 0.025 rad/s read 1.5–2 N·m above ``G``, 15 %
        of its gravity torque); one coefficient per actuator ``c`` [effort·s/unit] is
        estimated with the masses: ``G(q) + Aᵀ(c ∘ q̇a) = Aᵀτ``.

        ``error`` (m,) [N or N·m]: the error of each static effort
        (:func:`~poise.motion.retarget.static_trend`: faster modes still ringing after a
        move, 2–11 N·m at the dancer's hips, in full; white noise averaged); each actuator's
        equation counts with ``1 / max(error, σ)²`` (σ = :data:`EFFORT_SIGMA` × the largest
        gravity torque), so a window still ringing teaches little; a passive coordinate's
        (no effort in it) with its stiffness ``|∂G_i/∂q_i|`` times ``q_error`` (n,), that of
        the static ``q``, and at least :attr:`passive_floor`.
        What these errors do not tell (friction holding an actuator anywhere in its band)
        shows as the windows disagreeing with each other (:meth:`com_sigma`)."""
        if not self.enabled:
            return
        q = np.asarray(q, dtype=float)
        tau = np.asarray(efforts, dtype=float)
        if tau.shape != (self.model.m,) or not (np.all(np.isfinite(q))
                                                and np.all(np.isfinite(tau))):
            return
        Y = self._regressor(q)
        speed = np.zeros(self.model.m) if rate is None else np.asarray(rate, dtype=float)
        if np.all(np.isfinite(speed)):
            Y[:, self._c0:] = self._A.T * speed[None, :]
        # residual of the model's own parameters: Aᵀτ − Y p₀; rows weighted by the
        # errors of the efforts that enter them
        e = self._A.T @ tau - Y @ self.nominal
        Yx = Y * self._scale[None, :]
        floor = self.effort_floor
        sigma = np.full(self.model.m, floor) if error is None else \
            np.maximum(np.nan_to_num(np.asarray(error, dtype=float), nan=np.inf), floor)
        passive_sigma = self.passive_floor if q_error is None else np.maximum(
            np.abs(np.diag(self.model.dG(q))) * np.nan_to_num(
                np.asarray(q_error, dtype=float), nan=np.inf), self.passive_floor)
        row_sigma = np.where(np.any(self._A != 0.0, axis=0),
                             np.sqrt((self._A.T ** 2) @ sigma ** 2), passive_sigma)
        w = 1.0 / row_sigma
        Yw, ew = Yx * w[:, None], e * w
        self._N += Yw.T @ Yw
        self._r += Yw.T @ ew
        self._x = np.linalg.solve(self._N, self._r)
        N_d, r_d, e_d, rows = self._data
        self._data = (N_d + Yw.T @ Yw, r_d + Yw.T @ ew, e_d + float(ew @ ew), rows + ew.size)
        self.windows += 1
        self._plant = None

    def _regressor(self, q: FloatArray) -> FloatArray:
        """``Y(q)`` (n, parameters): the statics ``G(q) = Y(q) p`` at rest, linear in the
        moments and springs ``p`` (the speed columns zero; :meth:`add` fills them)."""
        n = self.model.n
        psi = self._S @ q + self._psi0
        Y = np.zeros((n, self.nominal.size))
        Y[:, :n] = self._g * (self._S.T * np.cos(psi)[None, :])
        dq = q - self._rest
        for col, i in enumerate(self._springs):
            Y[i, n + col] = dq[i]
        return Y

    def effort_change(self, q_from: FloatArray, q_to: FloatArray
                      ) -> tuple[FloatArray, FloatArray]:
        """How the static efforts that hold the plant at rest change from ``q_from`` to
        ``q_to`` (n,) as the estimate says, ``Δτ = (Aᵀ)⁺ (Y(q_to) − Y(q_from)) p̂`` (m,)
        [N or N·m], and its one-sigma error (m,) from the estimate's covariance (grown by
        :meth:`scatter`): a small move changes them by little, and knows that change well
        (zeros when not :attr:`enabled`)."""
        m = self.model.m
        if not self.enabled:
            return np.zeros(m), np.zeros(m)
        dY = self._regressor(np.asarray(q_to, dtype=float)) - \
            self._regressor(np.asarray(q_from, dtype=float))
        to_efforts = np.linalg.pinv(self._A.T)  # (m, n): Aᵀτ = G
        p = self.nominal + self._x * self._scale
        D = to_efforts @ (dY * self._scale[None, :])
        covariance = D @ np.linalg.solve(self._N, D.T) * self.scatter()
        return to_efforts @ (dY @ p), np.sqrt(np.maximum(np.diag(covariance), 0.0))

    @property
    def effort_floor(self) -> float:
        """The least error any static effort counts with [N or N·m]: :data:`EFFORT_SIGMA`
        × the largest gravity torque."""
        return EFFORT_SIGMA * self._torque

    @property
    def moments(self) -> FloatArray:
        """``â`` (n,) [kg·m]: the first mass moments (the model's before any window)."""
        n = self.model.n
        p = self.nominal + self._x * self._scale if self.enabled else np.zeros(n)
        return p[:n]

    def bodies(self) -> tuple[FloatArray, FloatArray]:
        """The bodies as the windows so far show them: masses ``m̂ = W_com⁻ᵀ â`` (n,) [kg]
        and joint stiffnesses (n,) [N·m/rad], ``k̂`` where the model has a spring, else the
        model's (what :meth:`plant_model` is made of, and what the service announces to a
        real-time parent: ``plant_estimate``).

        Raises:
            ValueError: not :attr:`enabled`.
        """
        if not self.enabled:
            raise ValueError(f"{self.model.name}: no estimate of its masses (its task is not "
                             "its centre of mass)")
        M: Any = self.model
        masses = np.linalg.solve(np.asarray(M.W_com, dtype=float).T, self.moments)
        stiffness = np.array(M.stiffness, dtype=float)
        stiffness[self._springs] = self.nominal[self.model.n:self._c0] + \
            self._x[self.model.n:self._c0] * self._scale[self.model.n:self._c0]
        return masses, stiffness

    def plant_model(self) -> MechanicalModel:
        """The model with the estimated bodies (:meth:`bodies`; each inertia scaled with its
        mass, the bodies' shapes kept): the plant as the windows so far show it (its task
        value is :meth:`com`; made once per window seen).

        Raises:
            ValueError: not :attr:`enabled`, or an estimated mass not > 0.
        """
        if self._plant is None:
            masses, stiffness = self.bodies()
            if not np.all(masses > 0.0):
                raise ValueError(f"estimated masses not > 0: {masses.tolist()}")
            self._plant = with_bodies(self.model, masses,  # type: ignore[arg-type]
                                      stiffness=stiffness, source="<estimated plant>")
        return self._plant

    def com(self, q: FloatArray) -> FloatArray:
        """``ĥ(q)`` (2,) [m]: the estimated centre of mass at ``q``."""
        psi = self._S @ np.asarray(q, dtype=float) + self._psi0
        rows = self.moments / self.total_mass
        return self._base + np.array([rows @ np.cos(psi), rows @ np.sin(psi)])

    def scatter(self) -> float:
        """How much more the windows disagree with the estimate than their stated errors
        allow: the reduced χ² of their weighted equations (``Σ r² / (rows − parameters)``),
        at least 1. Friction holds a resting actuator anywhere within its band, a static
        offset no window's own error shows (on ``real`` the dancer's hips ±6 N·m); the
        windows then disagree, and the estimate's covariance grows by this factor (the
        Birge ratio squared)."""
        N_d, r_d, e_d, rows = self._data
        if not rows:
            return 1.0
        x = self._x
        residual = e_d - 2.0 * float(x @ r_d) + float(x @ N_d @ x)  # Σ ‖e − Y x‖²
        return max(1.0, residual / max(rows - self.nominal.size, 1))

    def com_covariance(self, q: FloatArray) -> FloatArray:
        """The covariance of ``ĥ(q)`` (2, 2) [m²]: ``J N⁻¹ Jᵀ`` × :meth:`scatter` (``N`` the
        normal matrix of the prior, the total mass and every window's equations weighted by
        their errors; ``J = ∂ĥ/∂p``); zeros when not :attr:`enabled`. A body no window has
        seen hold its moment is only as certain as the prior (30 %), and only in the
        directions its moment moves the centre of mass at ``q`` (one hanging straight down:
        up and down)."""
        if not self.enabled:
            return np.zeros((2, 2))
        psi = self._S @ np.asarray(q, dtype=float) + self._psi0
        n = self.model.n
        J = np.zeros((2, self.nominal.size))
        J[0, :n], J[1, :n] = np.cos(psi), np.sin(psi)
        J = J * (self._scale / self.total_mass)[None, :]
        return np.asarray(J @ np.linalg.solve(self._N, J.T) * self.scatter(), dtype=float)

    def com_sigma(self, q: FloatArray) -> float:
        """How well the windows so far pin ``ĥ(q)`` down [m]: the square root of the trace
        of :meth:`com_covariance`."""
        return float(np.sqrt(np.trace(self.com_covariance(q))))

    def bias(self, q: FloatArray) -> FloatArray:
        """``b(q) = h(q) − ĥ(q)`` (task_dim,) [m]: how far the model's task value at ``q``
        is from the estimated true one (zeros when not :attr:`enabled` or before any
        window)."""
        if not self.enabled or self.windows == 0:
            return np.zeros(self.model.task_dim)
        q = np.asarray(q, dtype=float)
        return np.asarray(self.model.fk(q), dtype=float) - self.com(q)


__all__ = ["EFFORT_SIGMA", "MASS_SIGMA", "PRIOR", "SPEED", "MassEstimate", "mass_task"]
