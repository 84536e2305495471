"""Family ``planar_pcc``: planar piecewise-constant-curvature (soft) arm.

Segment k has length ``L_k`` and bending angle ``θ_k = q_k`` (curvature × length,
counter-clockwise). Its start direction is ``ψ_k = ψ_base + Σ_{j<k} θ_j``. In complex notation
(``x + i y``) the point at arc fraction ``s`` of segment k, relative to the segment's start, is

    T_k(s) = L_k s e^{iψ_k} f₀(i θ_k s),      f_d(z) = ∫₀¹ tᵈ e^{zt} dt,

and a point at fraction ``s`` of segment i is ``p = base + Σ_{k<i} T_k(1) + T_i(s)``. The
``f_d`` are entire (no ``sin θ / θ`` singularity): evaluated by their Taylor series for small
``|z|`` and by the recurrence ``f_d = (e^z − d f_{d−1}) / z`` otherwise. With ``f_d' = f_{d+1}``:

* ``∂T_k/∂θ_j = i T_k`` (j < k),  ``∂T_k/∂θ_k = D_k = i L s² e^{iψ} f₁(iθs)``;
* ``∂²T_k/∂θ_j∂θ_l = −T_k`` (j, l < k), ``i D_k`` (j < k = l), ``D2_k = −L s³ e^{iψ} f₂(iθs)``
  (j = l = k).

The mass of each segment sits on ``mass_points_per_segment`` points at the midpoints of equal
sub-arcs (``s = (2j + 1) / (2P)``); the same points give the gravity potential
``U_g = g Σ m_p y_p``, the mass matrix ``M = Σ m_p J_pᵀ J_p`` (point masses: no rotational
terms) and the bias ``Σ m_p J_pᵀ a_p`` with ``a_p = Σ_jl ∂²p/∂q_j∂q_l q̇_j q̇_l``, so
statics and dynamics are consistent. Elastic energy ``½ Σ k_i (θ_i − θ_rest,i)²``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from poise.models import planar
from poise.models.base import FloatArray
from poise.models.spec import (
    ACTUATION_KEYS,
    PLANAR_KEYS,
    Key,
    common_keys,
    limit_keys,
)

_SERIES_RADIUS = 1.0
_SERIES_TERMS = 22  # |z|^22 / 22! < 1e-21 for |z| < 1

#: One ``[[segments]]`` table.
SEGMENT_KEYS: dict[str, Key] = {
    "length": Key("number", "arc length [m]", required=True, gt=0),
    "mass": Key("number", "mass [kg] (spread over mass_points_per_segment points)",
                required=True, gt=0),
    "stiffness": Key("number", "bending stiffness [N·m/rad]", required=True, ge=0),
    "rest": Key("number", "rest bending angle [rad]", default=0.0),
    "damping": Key("number", "bending viscous damping [N·m·s/rad]", default=0.0, ge=0),
    **limit_keys("rad"),
}

#: A ``planar_pcc`` model file.
KEYS: dict[str, Key] = {
    **common_keys("planar_pcc"),
    **PLANAR_KEYS,
    "mass_points_per_segment": Key("integer", "point masses per segment (sub-arc midpoints)",
                                   default=5, ge=1),
    "segments": Key("tables", "one table per segment, from the base; q_i is the bending "
                    "angle of segment i", required=True, table=SEGMENT_KEYS),
    "actuation": Key("table", "actuators: [qa; qu] = C q", required=True, table=ACTUATION_KEYS),
    "task": Key("table", "the task (the only one: the tip position)", default={"kind": "tip_xy"},
                table={"kind": Key("string", "tip (x, y) [m]", default="tip_xy",
                                   choices=("tip_xy",))}),
}
DRAW_POINTS_PER_SEGMENT = 12
_DYN_TERMS = 40  # (2π)^40 / 40! ≈ 1e-16
_DYN_THETA_MAX = 2 * math.pi
_Fractions = tuple[FloatArray, FloatArray, np.ndarray]  # (frac, distinct values, flat index)


def f_funcs(z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``f₀, f₁, f₂`` at complex ``z`` (any shape), with ``f_d(z) = ∫₀¹ tᵈ e^{zt} dt``.

    Taylor series ``f_d = Σ_k zᵏ / (k! (k + d + 1))`` for ``|z| < 1``; elsewhere the
    recurrence ``f₀ = (e^z − 1)/z``, ``f_d = (e^z − d f_{d−1})/z``, whose cancellation is
    harmless for ``|z| ≥ 1`` (absolute error ~1e-15 on both sides of the switch).
    """
    z = np.asarray(z, dtype=complex)
    small = np.abs(z) < _SERIES_RADIUS
    zs = np.where(small, z, 0.0)
    powers = np.cumprod(np.broadcast_to(zs[..., None], (*zs.shape, _SERIES_TERMS)), axis=-1)
    series = _SERIES_COEFFS[0] + powers @ _SERIES_COEFFS[1:]  # (..., 3)
    zl = np.where(small, 1.0, z)
    ez = np.exp(zl)
    f0 = (ez - 1.0) / zl
    f1 = (ez - f0) / zl
    f2 = (ez - 2.0 * f1) / zl
    return (np.where(small, series[..., 0], f0), np.where(small, series[..., 1], f1),
            np.where(small, series[..., 2], f2))


def _series_coefficients() -> FloatArray:
    """(K + 1, 3): ``1 / (k! (k + d + 1))`` for k = 0…K, d = 0, 1, 2."""
    k = np.arange(_SERIES_TERMS + 1)[:, None]
    fact = np.array([math.factorial(int(i)) for i in k[:, 0]], dtype=float)[:, None]
    return 1.0 / (fact * (k + np.arange(3)[None] + 1))


_SERIES_COEFFS = _series_coefficients()


@dataclass(frozen=True)
class Segment(planar.PlanarJoint):
    """One constant-curvature segment (its bending stiffness, rest angle, damping and limits:
    :class:`~poise.models.planar.PlanarJoint`)."""

    length: float  # [m]
    mass: float  # [kg]


@dataclass(frozen=True)
class PCCSpec(planar.PlanarSpec):
    """Everything a model file says about a planar PCC arm (validated)."""

    points_per_segment: int
    segments: tuple[Segment, ...]


class PlanarPCC(planar.PlanarModel):
    """Planar piecewise-constant-curvature arm with tendons, bending springs and gravity.

    Task: the tip position ``(x, y)`` [m]. See the module docstring for the equations.
    """

    family = "planar_pcc"
    task_kind = "position"
    task_dim = 2
    task_name = "tip_xy"

    spec: PCCSpec

    def __init__(self, spec: PCCSpec) -> None:
        segs = spec.segments
        self._init_planar(spec, segs)
        n = self.n
        P = spec.points_per_segment
        self.lengths = np.array([s.length for s in segs])
        #: Farthest any point can be from the origin [m] (base offset + every segment).
        self.reach = float(np.hypot(*spec.base) + self.lengths.sum())
        self.base = complex(*spec.base)
        self.masses = np.repeat([s.mass / P for s in segs], P)
        self.total_mass = float(self.masses.sum())
        self.strict_lower = np.tril(np.ones((n, n)), -1)  # [k, j] = 1 if j < k
        # Mass points: segment i, fraction s; as a (P·n, n) matrix of fractions per segment.
        mass_seg = np.repeat(np.arange(n), P)
        mass_s = np.tile((2 * np.arange(P) + 1) / (2 * P), n)
        self._frac_mass = self._fractions(mass_seg, mass_s)
        self._frac_tip = self._fractions(np.array([n - 1]), np.array([1.0]))
        self._frac_statics = self._fractions(np.append(mass_seg, n - 1), np.append(mass_s, 1.0))
        draw_s = np.linspace(0.0, 1.0, DRAW_POINTS_PER_SEGMENT + 1)[1:]
        self._frac_draw = self._fractions(np.repeat(np.arange(n), draw_s.size),
                                          np.tile(draw_s, n))

    def _fractions(self, seg: np.ndarray, s: np.ndarray) -> _Fractions:
        """Arc fractions of each segment before each of k points (1 before, s on its own).

        Returns ``(frac (k, n), s_values (U,), flat index (k, n))``: the ``f_d`` are evaluated
        once per distinct fraction and segment (U × n) and gathered, not k × n times.
        """
        k = np.arange(self.n)
        frac = np.where(k[None] < seg[:, None], 1.0,
                        np.where(k[None] == seg[:, None], s[:, None], 0.0))
        values, inverse = np.unique(frac, return_inverse=True)
        return frac, values, inverse.reshape(frac.shape) * self.n + k[None]

    # ------------------------------------------------------------------ core evaluation

    def _terms(self, q: FloatArray, fr: _Fractions, order: int):
        """``T``, ``D``, ``D2`` (k, n) complex: segment terms and their θ-derivatives."""
        frac, values, flat = fr
        psi = self.base_angle + self.strict_lower @ q
        rot = self.lengths * np.exp(1j * psi)  # L e^{iψ} per segment
        f0, f1, f2 = f_funcs(1j * values[:, None] * q[None, :])  # (U, n) each
        T = rot * frac * f0.ravel()[flat]
        if order == 0:
            return T, None, None
        D = 1j * rot * frac**2 * f1.ravel()[flat]
        D2 = -rot * frac**3 * f2.ravel()[flat] if order > 1 else None
        return T, D, D2

    def _jacobian(self, T: np.ndarray, D: np.ndarray) -> np.ndarray:
        """Complex point Jacobians (k, n): ``J[p, j] = i Σ_{k>j} T_pk + D_pj``."""
        return 1j * (T @ self.strict_lower) + D

    def _points_at(self, q: FloatArray, fr: _Fractions) -> FloatArray:
        """Positions (k, 2) [m] of the points described by ``fr`` (see :meth:`_fractions`)."""
        T, _, _ = self._terms(q, fr, 0)
        p = self.base + T.sum(axis=1)
        return np.stack([p.real, p.imag], axis=1)

    def fk(self, q: FloatArray) -> FloatArray:
        """Tip position (2,) [m]."""
        return self._points_at(q, self._frac_tip)[0]

    def task_jacobian(self, q: FloatArray) -> FloatArray:
        """``∂(tip)/∂θ`` (2, n) [m/rad]."""
        T, D, _ = self._terms(q, self._frac_tip, 1)
        j = self._jacobian(T, D)[0]
        return np.stack([j.real, j.imag])

    def mass_points(self, q: FloatArray) -> FloatArray:
        """Positions (n·P, 2) [m] of the point masses :attr:`masses`."""
        return self._points_at(q, self._frac_mass)

    def com(self, q: FloatArray) -> FloatArray:
        """Centre of mass (2,) [m]."""
        return self.masses @ self.mass_points(q) / self.total_mass

    def body_points(self, q: FloatArray) -> list[FloatArray]:
        """One polyline (1 + 12 n, 2) along the backbone [m], for drawing."""
        start = np.array([[self.base.real, self.base.imag]])
        return [np.vstack([start, self._points_at(q, self._frac_draw)])]

    # ------------------------------------------------------------------ statics

    def potential(self, q: FloatArray) -> float:
        """``U = g Σ m_p y_p + ½ Σ k (θ − θ_rest)²`` [J]."""
        y = self.mass_points(q)[:, 1]
        dq = q - self.q_rest
        return float(self.gravity * self.masses @ y + 0.5 * dq @ (self.stiffness * dq))

    def G(self, q: FloatArray) -> FloatArray:
        """``∂U/∂θ = g Σ m_p ∂y_p/∂θ + K (θ − θ_rest)`` (n,) [N·m]."""
        T, D, _ = self._terms(q, self._frac_mass, 1)
        jy = (self.masses @ self._jacobian(T, D)).imag
        return self.gravity * jy + self.stiffness * (q - self.q_rest)

    def dG(self, q: FloatArray) -> FloatArray:
        """``∂²U/∂θ²`` (n, n) [N·m/rad], from the weighted second derivatives of the points."""
        T, D, D2 = self._terms(q, self._frac_mass, 2)
        t, d, d2 = self.masses @ T, self.masses @ D, self.masses @ D2  # (n,) each, per segment
        L = self.strict_lower  # [k, j] = [j < k]
        # Σ_k −t_k [j<k][l<k] + i d_k ([j<k][l=k] + [j=k][l<k]) + d2_k [j=l=k]
        hess = -(L.T * t) @ L
        mixed = (1j * d)[:, None] * L  # [k, j] = i d_k [j<k]; place at (j, l=k) and (k, j)
        hess = hess + mixed + mixed.T + np.diag(d2)
        return self.gravity * hess.imag + np.diag(self.stiffness)

    # ------------------------------------------------------------------ dynamics

    def mass_matrix(self, q: FloatArray) -> FloatArray:
        """``M = Σ_p m_p J_pᵀ J_p`` (n, n) [kg·m²] over the mass points."""
        T, D, _ = self._terms(q, self._frac_mass, 1)
        J = self._jacobian(T, D)
        return (J.conj().T @ (self.masses[:, None] * J)).real

    def bias_forces(self, q: FloatArray, qd: FloatArray) -> FloatArray:
        """``C(q, q̇) q̇ = Σ_p m_p J_pᵀ a_p``, ``a_p = Σ_k −T ω_k² + 2i D ω_k θ̇_k + D2 θ̇_k²``.

        ``ω_k = Σ_{j<k} θ̇_j`` is the rate of the segment's start direction.
        """
        T, D, D2 = self._terms(q, self._frac_mass, 2)
        J = self._jacobian(T, D)
        w = self.strict_lower @ qd
        a = T @ (-(w * w)) + D @ (2j * w * qd) + D2 @ (qd * qd)
        return (J.conj().T @ (self.masses * a)).real

    def dynamics_terms(self, q: FloatArray,
                       qd: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``(M(q), C(q, q̇) q̇, G(q))`` in one pass (the simulator's hot path).

        Equal to :meth:`mass_matrix`, :meth:`bias_forces` and :meth:`G`. The segment terms
        ``T, D, D2`` of all mass points come from one power series in ``θ_k`` per segment,
        ``s f₀(iθs) = Σ_j (iθ)ʲ s^{j+1}/(j+1)!`` (and likewise ``s² f₁``, ``s³ f₂``), evaluated as
        one matrix product for all fractions ``s`` (``_DYN_TERMS`` terms: exact to rounding for
        ``|θ_k| ≤ 2π``; beyond that the general evaluation is used). The point Jacobians are
        then shared by the three terms.
        """
        if np.abs(q).max() > _DYN_THETA_MAX:
            return self.mass_matrix(q), self.bias_forces(q, qd), self.G(q)
        fast = self.__dict__.get("_dyn")
        if fast is None:
            fast = self.__dict__["_dyn"] = self._dynamics_tables()
        coef, index, rot0, psi_i, lower_i, b1, b2, gm, mcol = fast
        n = self.n
        # X = [T | D | D2] (points, 3n): series values × L_k e^{iψ_k}, ψ = ψ_base + Σ_{j<k} θ_j
        X = (np.vander(q, _DYN_TERMS, increasing=True) @ coef).ravel()[index] \
            * (rot0 * np.exp(psi_i @ q))
        J = X[:, :n] @ lower_i + X[:, n:2 * n]  # i Σ_{k>j} T + D
        JH = J.conj().T
        M = (JH @ (mcol * J)).real
        # a_p = Σ_k −T ω_k² + 2i D ω_k θ̇_k + D2 θ̇_k² = X @ ((B1 q̇) ∘ (B2 q̇)), ω = L q̇
        bias = (JH @ (self.masses * (X @ ((b1 @ qd) * (b2 @ qd))))).real
        G = (gm @ J).imag + self.stiffness * (q - self.q_rest)
        return M, bias, G

    def statics_terms(
        self, q: FloatArray,
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """``(h(q), ∂h/∂q, G(q), ∂G/∂q)`` in one pass (the IK hot path).

        Equal to :meth:`fk`, :meth:`task_jacobian`, :meth:`G` and :meth:`dG`, but the segment
        terms of the mass points and the tip are evaluated together, once.
        """
        if np.abs(q).max() > _DYN_THETA_MAX:
            T, D, D2 = self._terms(q, self._frac_statics, 2)
        else:  # the power series of dynamics_terms, for the mass points and the tip
            tables = self.__dict__.get("_statics")
            if tables is None:
                tables = self.__dict__["_statics"] = self._dynamics_tables(self._frac_statics)
            coef, index, rot0, psi_i = tables[:4]
            X = (np.vander(q, _DYN_TERMS, increasing=True) @ coef).ravel()[index] \
                * (rot0 * np.exp(psi_i @ q))
            n = self.n
            T, D, D2 = X[:, :n], X[:, n:2 * n], X[:, 2 * n:]
        tip_T, tip_J = T[-1], 1j * (T[-1] @ self.strict_lower) + D[-1]
        T, D, D2 = T[:-1], D[:-1], D2[:-1]
        x = self.base + tip_T.sum()
        J = 1j * (T @ self.strict_lower) + D
        G = self.gravity * (self.masses @ J).imag + self.stiffness * (q - self.q_rest)
        t, d, d2 = self.masses @ T, self.masses @ D, self.masses @ D2
        L = self.strict_lower
        mixed = (1j * d)[:, None] * L
        hess = -(L.T * t) @ L + mixed + mixed.T + np.diag(d2)
        dG = self.gravity * hess.imag + np.diag(self.stiffness)
        return (np.array([x.real, x.imag]), np.stack([tip_J.real, tip_J.imag]), G, dG)

    def _dynamics_tables(self, fractions: _Fractions | None = None) -> tuple[np.ndarray, ...]:
        """Constant tables of :meth:`dynamics_terms`: series coefficients (K, 3U), gather index
        (points, 3n), ``L e^{iψ_base}`` and ``i·strict_lower`` per column of ``X``, the bilinear
        maps ``B1, B2`` of the point accelerations, ``g m`` and ``m`` as a column. The first
        four also serve :meth:`statics_terms` for the point set ``fractions``."""
        _, values, flat = self._frac_mass if fractions is None else fractions
        n, U = self.n, values.size
        j = np.arange(_DYN_TERMS)[:, None]
        fact = np.array([math.factorial(int(i)) for i in j[:, 0]], dtype=float)[:, None]
        ij = np.array([1, 1j, -1, -1j])[j % 4]  # iʲ, exactly
        s = values[None, :]
        coef = np.hstack([ij * s ** (j + 1) / (fact * (j + 1)),  # s f₀ → T
                          1j * ij * s ** (j + 2) / (fact * (j + 2)),  # i s² f₁ → D
                          -ij * s ** (j + 3) / (fact * (j + 3))])  # −s³ f₂ → D2
        u, k = np.divmod(flat, n)  # distinct-fraction index and segment of each entry
        index = np.hstack([k * 3 * U + d * U + u for d in range(3)])
        seg3 = np.tile(np.arange(n), 3)
        lower = self.strict_lower
        eye = np.eye(n)
        return (coef, index, (self.lengths * np.exp(1j * self.base_angle))[seg3],
                1j * lower[seg3], 1j * lower,
                np.vstack([-lower, 2j * lower, eye]), np.vstack([lower, eye, eye]),
                self.gravity * self.masses, self.masses[:, None])

    # ------------------------------------------------------------------ description

    def describe(self) -> dict[str, Any]:
        """All parameters in the file schema (reloads to an identical model)."""
        sp = self.spec
        segments = [{"length": s.length, "mass": s.mass, **planar.describe_joint(s)}
                    for s in sp.segments]
        return self._describe_planar({"mass_points_per_segment": sp.points_per_segment,
                                      "segments": segments}, {"kind": "tip_xy"})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> PlanarPCC:
        """Validate a description (file schema, see docs/models.md) and build the model."""
        top, header = planar.read_header(data, source, KEYS)
        points = top.get("mass_points_per_segment")
        segments = []
        for f in top.get("segments"):
            f.check_keys()
            joint = planar.read_joint(f)
            segments.append(Segment(length=f.get("length"), mass=f.get("mass"), **joint))
        actuation = planar.read_actuation(top, len(segments))
        task = top.get("task")
        task.check_keys()
        task.get("kind")
        return cls(PCCSpec(**header, **actuation, points_per_segment=points,
                           segments=tuple(segments)))

    def __repr__(self) -> str:
        return f"PlanarPCC({self.name!r}, n={self.n}, m={self.m})"


__all__ = ["KEYS", "PlanarPCC", "f_funcs"]
