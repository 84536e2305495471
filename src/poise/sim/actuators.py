"""Device-side actuator control, as motor drivers do it: a PD position loop on ``qa``.

    τ = clip(τ_ff + K_P (q̄a − qa) − K_D q̇a,  −τ_max, τ_max)

``τ_ff`` is the host's optional effort feed-forward (seed 000's low-level law sends
``τ_ff = G_a(q̄)``: ``τ = G_a(q̄) + K_P (q̄a − qa) − K_D q̇a``). Modes:

* ``position`` — track the commanded ``q̄a`` with the feed-forward;
* ``hold`` — freeze ``q̄a`` at the actuator positions at the moment of the switch and keep the
  feed-forward in effect (zero after ``disabled``): a stiff position hold, no jump in effort;
* ``disabled`` — ``τ = 0`` (motors off); also clears the feed-forward.

Default gains (:func:`default_gains`): each actuator's closed loop is a second-order system of
natural frequency ``ω_a`` and damping ratio ``ζ = 1`` on the inertia it moves when everything
else is free, ``m_j = 1 / (A M⁻¹ Aᵀ)_jj`` at the rest configuration (the lightest inertia it can
see, hence the fastest mode): ``K_P = m_j ω_a²``, ``K_D = 2 ζ m_j ω_a``. ``ω_a`` is 10× the
highest structural mode with the actuators locked (the ``q_u`` modes), but at least 2π·50 Hz (a
motor driver's position bandwidth) and at most ``0.2 × rate`` rad/s so that the explicit
integrator resolves it (``ω_a h ≤ 0.2``; semi-implicit Euler is stable up to ``ω h < 2``).
The effort limits are per-model numbers (:data:`EFFORT_LIMITS`), about 2–3× the largest
effort needed to hold a configuration in the actuator range; ``docs/simulator.md`` lists all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from poise.models.base import FloatArray, MechanicalModel

MODES: tuple[str, ...] = ("position", "hold", "disabled")
#: Rows of :attr:`ActuatorController.drive` (5, m): feed-forward τ_ff, reference q̄a, K_P, K_D,
#: effort limit τ_max.
TAU_FF, REF, KP, KD, LIMIT = range(5)

#: Damping ratio of the default actuator loop.
ZETA = 1.0
#: Lower bound of the default actuator loop frequency [rad/s] (50 Hz servo bandwidth).
OMEGA_MIN = 2 * math.pi * 50.0
#: The default loop frequency is at most this fraction of the internal rate [rad/s per Hz].
OMEGA_H_MAX = 0.2
#: ``ω_a`` = this factor × the highest locked-actuator structural mode (before the bounds).
STRUCTURAL_FACTOR = 10.0

#: Default actuator effort limits per reference model [N for tendons, N·m for motors]:
#: about 3× the largest ``|G_a|`` of the held configurations on a grid over the actuator
#: range (``solve_statics``, nearest branch from ``q_u = 0``); the numbers are in the comments.
EFFORT_LIMITS: dict[str, tuple[float, ...]] = {
    "double_pendulum": (250.0,),  # max |G_a| held 72.5 N
    "tendon_3link": (700.0, 1500.0),  # 220.5, 477.0 N
    "soft_arm_stiff": (250.0, 150.0),  # 83.2, 55.9 N
    "soft_arm_soft": (100.0, 30.0),  # 38.3, 10.7 N
    "dancer": (400.0, 150.0, 40.0),  # 123.5, 44.0, 11.8 N·m
    "planar_2link": (20.0, 10.0),  # no gravity: acceleration only [N·m]
}


@dataclass(frozen=True)
class ActuatorGains:
    """Per-actuator PD gains and effort limits.

    Attributes:
        kp: position gains (m,) [effort unit / position unit, e.g. N/m or N·m/rad].
        kd: velocity gains (m,) [effort unit · s / position unit].
        effort_limit: |τ| limits (m,) [N or N·m].
        omega: the design loop frequency [rad/s] (for the record; ``nan`` for custom gains).
    """

    kp: FloatArray
    kd: FloatArray
    effort_limit: FloatArray
    omega: float = math.nan

    def __post_init__(self) -> None:
        for name in ("kp", "kd", "effort_limit"):
            value = np.array(getattr(self, name), dtype=float).reshape(-1)
            if np.any(~np.isfinite(value)) or np.any(value < 0):
                raise ValueError(f"actuator gains: {name} = {value.tolist()}: must be finite "
                                 "and >= 0")
            object.__setattr__(self, name, value)
        if not (self.kp.size == self.kd.size == self.effort_limit.size):
            raise ValueError("actuator gains: kp, kd and effort_limit must have one entry per "
                             "actuator")

    def as_dict(self) -> dict[str, object]:
        return {"kp": self.kp.tolist(), "kd": self.kd.tolist(),
                "effort_limit": self.effort_limit.tolist(), "omega": self.omega}


def structural_modes(model: MechanicalModel, q: FloatArray | None = None) -> FloatArray:
    """Natural frequencies [rad/s] of the ``q_u`` dynamics with the actuators locked at ``q``
    (default: rest, ``q = 0``), from ``M_c,uu`` and ``H_uu``; negative for unstable modes."""
    q = np.zeros(model.n) if q is None else np.asarray(q, dtype=float)
    m = model.m
    if model.n == m:
        return np.zeros(0)
    c_inv = model.C_inv
    M = c_inv.T @ model.mass_matrix(q) @ c_inv
    H = c_inv.T @ model.dG(q) @ c_inv
    lam = np.linalg.eigvals(np.linalg.solve(M[m:, m:], H[m:, m:])).real
    return np.sort(np.sign(lam) * np.sqrt(np.abs(lam)))


def actuator_inertia(model: MechanicalModel, q: FloatArray | None = None) -> FloatArray:
    """``1 / (A M⁻¹ Aᵀ)_jj`` (m,): the inertia actuator j moves with everything else free."""
    q = np.zeros(model.n) if q is None else np.asarray(q, dtype=float)
    A = model.C[: model.m]
    return 1.0 / np.diag(A @ np.linalg.solve(model.mass_matrix(q), A.T))


def default_effort_limit(model: MechanicalModel, name: str | None = None) -> FloatArray:
    """Per-model default effort limits (:data:`EFFORT_LIMITS`); for other models, 1000 per
    actuator (N or N·m)."""
    limits = EFFORT_LIMITS.get(name or model.name)
    if limits is None or len(limits) != model.m:
        return np.full(model.m, 1000.0)
    return np.array(limits, dtype=float)


def default_gains(model: MechanicalModel, rate: float, *, name: str | None = None,
                  omega: float | None = None, zeta: float = ZETA) -> ActuatorGains:
    """The default PD gains at internal rate ``rate`` [Hz] (see the module docstring).

    Args:
        model: the robot (the physical one: gains are tuned on the device).
        rate: internal integration rate [Hz].
        name: model name for the effort-limit table (default ``model.name``).
        omega: override the loop frequency ω_a [rad/s].
        zeta: damping ratio.
    """
    if omega is None:
        modes = structural_modes(model)
        top = float(np.max(np.abs(modes))) if modes.size else 0.0
        omega = min(max(STRUCTURAL_FACTOR * top, OMEGA_MIN), OMEGA_H_MAX * rate)
    inertia = actuator_inertia(model)
    return ActuatorGains(kp=inertia * omega**2, kd=2.0 * zeta * inertia * omega,
                         effort_limit=default_effort_limit(model, name), omega=float(omega))


class ActuatorController:
    """The motor drivers: mode, references, feed-forward and the PD law (see module docstring).

    Attributes:
        mode: ``"position"``, ``"hold"`` or ``"disabled"`` (starts disabled).
        drive: the table (5, m) the compiled step reads: rows :data:`TAU_FF`, :data:`REF`,
            :data:`KP`, :data:`KD`, :data:`LIMIT`; :attr:`tau_ff` and :attr:`ref` are views of
            its rows.
    """

    def __init__(self, gains: ActuatorGains, m: int) -> None:
        if gains.kp.size != m:
            raise ValueError(f"actuator gains have {gains.kp.size} entries, the model has {m} "
                             "actuators")
        self._gains = gains
        self.m = m
        self.mode = "disabled"
        self.drive = np.zeros((5, m))
        self.drive[KP], self.drive[KD], self.drive[LIMIT] = gains.kp, gains.kd, gains.effort_limit
        self._cmd_ref = np.zeros(m)
        self._cmd_ff = np.zeros(m)

    @property
    def gains(self) -> ActuatorGains:
        """PD gains and effort limits (fixed for the controller's life)."""
        return self._gains

    @property
    def tau_ff(self) -> FloatArray:
        """Effort feed-forward in effect (m,) [effort units] (a view of :attr:`drive`)."""
        return self.drive[TAU_FF]

    @property
    def ref(self) -> FloatArray:
        """Position references in effect q̄a (m,) [channel units] (a view of :attr:`drive`)."""
        return self.drive[REF]

    @property
    def on(self) -> bool:
        """Whether the drivers apply effort (``position`` or ``hold``)."""
        return self.mode != "disabled"

    def set_mode(self, mode: str, qa_now: FloatArray) -> None:
        """Switch mode; ``hold`` latches ``q̄a = qa_now``."""
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: must be one of {', '.join(MODES)}")
        if mode == "position":
            self.drive[REF] = self._cmd_ref
            self.drive[TAU_FF] = self._cmd_ff
        elif mode == "hold":
            self.drive[REF] = qa_now
        else:
            self.drive[TAU_FF] = 0.0
        self.mode = mode

    def command(self, qa_ref: Sequence[float] | FloatArray,
                tau_ff: Sequence[float] | FloatArray | None = None) -> None:
        """New references (and feed-forward, ``None`` = 0); applied in ``position`` mode."""
        ref = np.array(qa_ref, dtype=float).reshape(-1)
        ff = np.zeros(self.m) if tau_ff is None else np.array(tau_ff, dtype=float).reshape(-1)
        if ref.size != self.m or ff.size != self.m:
            raise ValueError(f"actuator command: expected {self.m} references and efforts, got "
                             f"{ref.size} and {ff.size}")
        self._cmd_ref, self._cmd_ff = ref, ff
        if self.mode == "position":
            self.drive[REF], self.drive[TAU_FF] = ref, ff

    def effort(self, qa: FloatArray, qad: FloatArray) -> FloatArray:
        """``τ`` (m,) for actuator positions ``qa`` and velocities ``qad`` (clipped)."""
        if self.mode == "disabled":
            return np.zeros(self.m)
        g = self.gains
        tau = self.tau_ff + g.kp * (self.ref - qa) - g.kd * qad
        return np.clip(tau, -g.effort_limit, g.effort_limit)


__all__ = ["EFFORT_LIMITS", "KD", "KP", "LIMIT", "MODES", "REF", "TAU_FF", "ActuatorController",
           "ActuatorGains", "actuator_inertia", "default_effort_limit", "default_gains",
           "structural_modes"]
