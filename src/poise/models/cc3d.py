"""``cc3d_N``: spatial piecewise-constant-curvature arm with N segments (seed 001, II-A).

Segment i has curvature ``κ_i`` [1/m], bending-plane angle ``φ_i`` [rad] and length ``l_i`` [m]
(nominal ``L = 1``). In its base frame the segment leaves along +z and bends in the plane at angle
``φ`` from +x. Its transform is the exponential of a constant twist (seed 001, eq. 1–2)::

    T_seg = exp(l · V̂'),   V' = [κ ω'; e_z],   ω' = R_z(φ) [0, 1, 0] = (−sin φ, cos φ, 0),

and the tip pose is the product ``T_e = T_1 T_2 ⋯ T_N``. With ``θ = κ l`` and
``u = (cos φ, sin φ, 0)``::

    R = I + sin θ ω̂' + (1 − cos θ) ω̂'²
    p = l (θ f2(θ) u + sinc(θ) e_z),   f2(θ) = (1 − cos θ)/θ²,  sinc(θ) = sin θ / θ

so nothing divides by κ: the ratios are smooth functions of θ, evaluated by series below a
switch point (``SINC_SWITCH``, ``F3_SWITCH``). Check: κ = π/2, φ = 0, l = 1 ends at
(2/π, 0, 2/π) with tangent +x.

**Twists of the partial derivatives** (spatial, in the segment's base frame, ``[ω; v]``):
``V^q = (∂T_seg/∂q T_seg⁻¹)^∨``, worked out in closed form::

    V^κ = [l ω';  l² (−f2(θ) u + θ f3(θ) e_z)]       f3(θ) = (θ − sin θ)/θ³
    V^φ = [−sin θ u + (1 − cos θ) e_z;  −l θ f2(θ) ω']   (= Z − Ad_T Z, Z = [e_z; 0])
    V^l = [κ ω';  e_z]                                    (= V' exactly)

**Spatial Jacobian** (seed 001, eq. 7–9 and 14): ``dV_e = (dT_e T_e⁻¹)^∨`` in the **base frame**::

    J = [V_1^κ  V_1^φ  Ad_{T_1} V_2^κ  Ad_{T_1} V_2^φ  ⋯  Ad_{T_1⋯T_{N−1}} V_N^φ]

(with ``V_i^l`` columns after each ``V_i^φ`` for the VVL Jacobian ``J'``). This is the frame of
the pose error ``log(T_D T_e⁻¹)`` used by the solvers (``T_D = exp(V̂_D) T_e``).

Configuration ``q = (κ_1, φ_1, κ_2, φ_2, …, κ_N, φ_N)`` (2N); lengths are a separate argument.
All module functions broadcast over leading (batch) dimensions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from poise.models.spec import Key, common_keys

FloatArray = NDArray[np.float64]

COIL_ANGLE = 2.0 * math.pi
"""``|κ l|`` beyond which a segment is coiled (a full turn): infeasible under CC (seed 001)."""

#: A ``cc3d`` model file.
KEYS: dict[str, Key] = {
    **common_keys("cc3d", name_default="cc3d_<n_segments>"),
    "n_segments": Key("integer", "number of constant-curvature segments N", required=True,
                      ge=1),
    "lengths": Key("vector", "nominal segment lengths [m], N entries (default: 1.0 each)",
                   gt=0),
    "max_bending": Key("vector", "optional bending limits |kappa_i L_i| <= max_bending_i "
                       "[rad], N entries in (0, 2 pi] (default: 2 pi, the coil limit)", gt=0),
}

# ---------------------------------------------------------------------------------------------
# Smooth ratios of θ (series below a switch point; also used by poise.ik.se3)
# ---------------------------------------------------------------------------------------------

SINC_SWITCH = 1e-2
"""|θ| below which ``sinc`` uses its series (the closed form is exact except at θ = 0)."""
F3_SWITCH = 0.5
"""|θ| below which ``f3`` uses its series (the closed form loses ~6·eps/θ² to cancellation)."""

# Taylor coefficients in powers of θ², through θ¹⁰: truncation error < 2e-16 relative below
# the switch points.
_SINC = (1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800)
_F3 = (1 / 6, -1 / 120, 1 / 5040, -1 / 362880, 1 / 39916800, -1 / 6227020800)


def series(x2: FloatArray, coefficients: tuple[float, ...]) -> FloatArray:
    """``Σ_k c_k (x²)^k`` by Horner's rule."""
    out = np.full(np.shape(x2), coefficients[-1])
    for c in coefficients[-2::-1]:
        out = out * x2 + c
    return out


def sinc(x: ArrayLike) -> FloatArray:
    """``sin x / x`` (1 at x = 0), smooth everywhere."""
    x = np.asarray(x, dtype=float)
    small = np.abs(x) < SINC_SWITCH
    safe = np.where(small, 1.0, x)
    return np.where(small, series(x * x, _SINC), np.sin(safe) / safe)


def f2(x: ArrayLike) -> FloatArray:
    """``(1 − cos x)/x²`` (1/2 at 0), computed as ``½ sinc(x/2)²`` (no cancellation)."""
    s = sinc(0.5 * np.asarray(x, dtype=float))
    return 0.5 * s * s


def f3(x: ArrayLike) -> FloatArray:
    """``(x − sin x)/x³`` (1/6 at 0), smooth everywhere."""
    x = np.asarray(x, dtype=float)
    small = np.abs(x) < F3_SWITCH
    safe = np.where(small, 1.0, x)
    return np.where(small, series(x * x, _F3), (safe - np.sin(safe)) / safe**3)


# ---------------------------------------------------------------------------------------------
# Segment kinematics (broadcast over leading dimensions; last axis = segment)
# ---------------------------------------------------------------------------------------------


def segment_transforms(
    kappa: ArrayLike, phi: ArrayLike, length: ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Rotation ``(..., N, 3, 3)`` and translation ``(..., N, 3)`` of every segment."""
    kappa, phi, length = np.broadcast_arrays(
        np.asarray(kappa, float), np.asarray(phi, float), np.asarray(length, float)
    )
    th = kappa * length
    c, s = np.cos(phi), np.sin(phi)
    S, C = np.sin(th), np.cos(th)
    h = np.sin(0.5 * th)
    D = 2.0 * h * h  # 1 − cos θ without cancellation
    R = np.empty((*th.shape, 3, 3))
    R[..., 0, 0] = 1.0 - D * c * c
    R[..., 0, 1] = -D * s * c
    R[..., 0, 2] = S * c
    R[..., 1, 0] = R[..., 0, 1]
    R[..., 1, 1] = 1.0 - D * s * s
    R[..., 1, 2] = S * s
    R[..., 2, 0] = -S * c
    R[..., 2, 1] = -S * s
    R[..., 2, 2] = C
    a = length * th * f2(th)  # (1 − cos θ)/κ
    p = np.stack([a * c, a * s, length * sinc(th)], axis=-1)  # sin θ / κ along z
    return R, p


def segment_twists(
    kappa: ArrayLike, phi: ArrayLike, length: ArrayLike
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``V^κ, V^φ, V^l (..., N, 6)``: spatial twists ``(∂T/∂q T⁻¹)^∨`` in each segment's base
    frame (formulas in the module docstring)."""
    kappa, phi, length = np.broadcast_arrays(
        np.asarray(kappa, float), np.asarray(phi, float), np.asarray(length, float)
    )
    th = kappa * length
    c, s = np.cos(phi), np.sin(phi)
    S = np.sin(th)
    h = np.sin(0.5 * th)
    D = 2.0 * h * h
    F2 = f2(th)
    zero = np.zeros_like(th)
    one = np.ones_like(th)
    l2 = length * length
    Vk = np.stack(
        [-length * s, length * c, zero, -l2 * F2 * c, -l2 * F2 * s, l2 * th * f3(th)], axis=-1
    )
    g = length * th * F2
    Vphi = np.stack([-S * c, -S * s, D, g * s, -g * c, zero], axis=-1)
    Vl = np.stack([-kappa * s, kappa * c, zero, zero, zero, one], axis=-1)
    return Vk, Vphi, Vl


def chain(R: FloatArray, p: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Cumulative products ``T_1⋯T_i`` for i = 0…N: ``(..., N+1, 3, 3)``, ``(..., N+1, 3)``."""
    n = R.shape[-3]
    Rc = np.empty((*R.shape[:-3], n + 1, 3, 3))
    pc = np.empty((*p.shape[:-2], n + 1, 3))
    Rc[..., 0, :, :] = np.eye(3)
    pc[..., 0, :] = 0.0
    for i in range(n):
        Rc[..., i + 1, :, :] = Rc[..., i, :, :] @ R[..., i, :, :]
        pc[..., i + 1, :] = pc[..., i, :] + np.einsum("...ij,...j->...i", Rc[..., i, :, :],
                                                     p[..., i, :])
    return Rc, pc


def _adjoint_apply(Rc: FloatArray, pc: FloatArray, V: FloatArray) -> FloatArray:
    """``Ad_(R,p) V = [R ω; R v + p × R ω]`` (broadcasting)."""
    Rw = np.einsum("...ij,...j->...i", Rc, V[..., :3])
    Rv = np.einsum("...ij,...j->...i", Rc, V[..., 3:])
    return np.concatenate([Rw, Rv + np.cross(pc, Rw)], axis=-1)


def pose_and_jacobian(
    kappa: ArrayLike, phi: ArrayLike, length: ArrayLike, with_length: bool = False,
    jacobian: bool = True,
) -> tuple[FloatArray, FloatArray | None]:
    """Tip pose ``T_e (..., 4, 4)`` and spatial Jacobian ``(..., 6, 2N)`` (``(..., 6, 3N)``
    with ``with_length``), columns ``(κ_1, φ_1[, l_1], κ_2, …)``, rows ``[ω; v]``."""
    R, p = segment_transforms(kappa, phi, length)
    Rc, pc = chain(R, p)
    T = np.zeros((*R.shape[:-3], 4, 4))
    T[..., :3, :3] = Rc[..., -1, :, :]
    T[..., :3, 3] = pc[..., -1, :]
    T[..., 3, 3] = 1.0
    if not jacobian:
        return T, None
    Vk, Vphi, Vl = segment_twists(kappa, phi, length)
    parts = [Vk, Vphi, Vl] if with_length else [Vk, Vphi]
    V = np.stack(parts, axis=-1)  # (..., N, 6, m)
    Rb, pb = Rc[..., :-1, None, :, :], pc[..., :-1, None, :]
    cols = _adjoint_apply(Rb, pb, np.swapaxes(V, -1, -2))  # (..., N, m, 6)
    n, m = cols.shape[-3], cols.shape[-2]
    J = np.swapaxes(cols.reshape(*cols.shape[:-3], n * m, 6), -1, -2)
    return T, J


def tip_pose(kappa: ArrayLike, phi: ArrayLike, length: ArrayLike) -> FloatArray:
    """Tip pose ``T_e = T_1⋯T_N (..., 4, 4)``."""
    return pose_and_jacobian(kappa, phi, length, jacobian=False)[0]


def backbone(kappa: ArrayLike, phi: ArrayLike, length: ArrayLike, points: int = 20) -> FloatArray:
    """Points along the backbone ``(N·points + 1, 3)`` (for plots)."""
    kappa, phi, length = (np.asarray(a, float) for a in (kappa, phi, length))
    s = np.linspace(0.0, 1.0, points + 1)[1:]
    out = [np.zeros(3)]
    Rb, pb = np.eye(3), np.zeros(3)
    for k, f, ln in zip(kappa, phi, length, strict=True):
        R, p = segment_transforms(k, f, ln * s)
        out.extend(pb + p @ Rb.T)
        pb, Rb = pb + Rb @ p[-1], Rb @ R[-1]
    return np.array(out)


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CC3D:
    """Spatial constant-curvature arm, ``q = (κ_1, φ_1, …, κ_N, φ_N)``, task: tip pose.

    Attributes:
        n_segments: N (2…7 for the reference models; any N ≥ 1 works).
        lengths: nominal segment lengths ``L_i`` [m].
        max_bending: optional per-segment bending limits ``θ_max,i`` [rad], each in (0, 2π]:
            a physical arm keeps ``|κ_i L_i| ≤ θ_max,i``. None: only the constant-curvature
            model's own limit ``|κ_i L_i| ≤ 2π`` (beyond it a segment is coiled). When given,
            ``q_min``/``q_max`` bound κ_i to ``±θ_max,i / L_i`` (φ stays unbounded).
    """

    n_segments: int
    family: ClassVar[str] = "cc3d"  # the model file's family (not a field)
    lengths: tuple[float, ...]
    name: str = ""
    max_bending: tuple[float, ...] | None = None
    task_dim: int = 6
    task_kind: str = "pose"
    n: int = field(init=False)
    q_min: FloatArray = field(init=False, repr=False)
    q_max: FloatArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.n_segments < 1:
            raise ValueError(f"n_segments: must be ≥ 1, got {self.n_segments}")
        lengths = tuple(float(v) for v in self.lengths)
        if len(lengths) != self.n_segments:
            raise ValueError(f"lengths: expected {self.n_segments} values, got {len(lengths)}")
        if not all(math.isfinite(v) and v > 0 for v in lengths):
            raise ValueError(f"lengths: must be finite and > 0, got {lengths}")
        object.__setattr__(self, "lengths", lengths)
        object.__setattr__(self, "n", 2 * self.n_segments)
        if not self.name:
            object.__setattr__(self, "name", f"cc3d_{self.n_segments}")
        q_min, q_max = np.full(self.n, -np.inf), np.full(self.n, np.inf)
        if self.max_bending is not None:
            limits = tuple(float(v) for v in self.max_bending)
            if len(limits) != self.n_segments:
                raise ValueError(f"max_bending: expected {self.n_segments} values, "
                                 f"got {len(limits)}")
            if not all(0.0 < v <= COIL_ANGLE for v in limits):
                raise ValueError(f"max_bending: every limit must be in (0, 2π] rad, got {limits}")
            object.__setattr__(self, "max_bending", limits)
            q_max[0::2] = np.array(limits) / np.array(lengths)
            q_min[0::2] = -q_max[0::2]
        object.__setattr__(self, "q_min", q_min)
        object.__setattr__(self, "q_max", q_max)

    @property
    def L(self) -> FloatArray:
        """Nominal lengths (N,) [m]."""
        return np.array(self.lengths)

    @property
    def reach(self) -> float:
        """Farthest the tip can be from the base [m] (all segments straight)."""
        return float(sum(self.lengths))

    def split(self, q: ArrayLike) -> tuple[FloatArray, FloatArray]:
        """``(κ, φ)`` each (..., N) from ``q (..., 2N)``."""
        q = np.asarray(q, dtype=float)
        if q.shape[-1] != self.n:
            raise ValueError(f"q: expected {self.n} values (κ, φ per segment), got {q.shape}")
        return q[..., 0::2], q[..., 1::2]

    def join(self, kappa: ArrayLike, phi: ArrayLike) -> FloatArray:
        """``q (..., 2N)`` from ``κ, φ (..., N)``."""
        kappa, phi = np.broadcast_arrays(np.asarray(kappa, float), np.asarray(phi, float))
        q = np.empty((*kappa.shape[:-1], self.n))
        q[..., 0::2], q[..., 1::2] = kappa, phi
        return q

    def _lengths(self, lengths: ArrayLike | None) -> FloatArray:
        return self.L if lengths is None else np.asarray(lengths, dtype=float)

    def pose(self, q: ArrayLike, lengths: ArrayLike | None = None) -> FloatArray:
        """Tip pose ``T_e (..., 4, 4)`` in the base frame (nominal lengths unless given)."""
        kappa, phi = self.split(q)
        return tip_pose(kappa, phi, self._lengths(lengths))

    def fk(self, q: ArrayLike) -> FloatArray:
        """Tip position (3,) [m]."""
        return self.pose(q)[..., :3, 3]

    def spatial_jacobian(
        self, q: ArrayLike, lengths: ArrayLike | None = None, with_length: bool = False
    ) -> FloatArray:
        """Spatial Jacobian ``[ω; v]`` in the base frame, (6, 2N) or (6, 3N) with lengths
        (seed 001 eq. 9 / 14; columns ``κ_i, φ_i[, l_i]`` per segment)."""
        kappa, phi = self.split(q)
        return pose_and_jacobian(kappa, phi, self._lengths(lengths), with_length)[1]

    def task_jacobian(self, q: ArrayLike) -> FloatArray:
        """Geometric Jacobian ``[v_tip; ω]`` (6, 2N) in the base frame (the :class:`PoseModel`
        convention): ``v_tip = v + ω × p_tip`` from the spatial one."""
        kappa, phi = self.split(q)
        T, J = pose_and_jacobian(kappa, phi, self.L)
        w, v = J[..., :3, :], J[..., 3:, :]
        p = T[..., :3, 3]
        v_tip = v + np.cross(w, p[..., None, :], axisa=-2, axisb=-1, axisc=-2)
        return np.concatenate([v_tip, w], axis=-2)

    def bending_angles(self, q: ArrayLike, lengths: ArrayLike | None = None) -> FloatArray:
        """``κ_i l_i`` (..., N) [rad]."""
        return self.split(q)[0] * self._lengths(lengths)

    def coiled(self, q: ArrayLike, lengths: ArrayLike | None = None) -> NDArray[np.bool_]:
        """True where some segment is bent past a full turn, ``|κ_i l_i| > 2π`` (deadlock)."""
        return np.any(np.abs(self.bending_angles(q, lengths)) > 2.0 * np.pi, axis=-1)

    def bending_limits(self) -> FloatArray:
        """``θ_max,i`` (N,) [rad]: :attr:`max_bending`, or 2π (the coil limit) when not given."""
        if self.max_bending is None:
            return np.full(self.n_segments, COIL_ANGLE)
        return np.array(self.max_bending)

    def describe(self) -> dict[str, Any]:
        """JSON-ready parameters in the model file schema (reloads with :meth:`from_dict`)."""
        return {
            "name": self.name,
            "family": "cc3d",
            "description": f"spatial constant-curvature arm, {self.n_segments} segments; "
                           "q = (kappa_1, phi_1, ..., kappa_N, phi_N) [1/m, rad], "
                           "task: tip pose in SE(3)",
            "n_segments": self.n_segments,
            "lengths": [float(x) for x in self.lengths],
        } | ({} if self.max_bending is None else {"max_bending": list(self.max_bending)})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> CC3D:
        """Validate a description (``family = "cc3d"``) and build the model."""
        from poise.models.registry import Fields

        fields = Fields(data, source, keys=KEYS)
        fields.check_keys()
        count = fields.get("n_segments")
        lengths = fields.get("lengths", [1.0] * count, size=count)
        limits = None
        if fields.has("max_bending"):
            limits = fields.get("max_bending", size=count)
            if np.any(limits > COIL_ANGLE):
                raise fields.error("max_bending", limits.tolist(),
                                   "every bending limit must be in (0, 2π] rad")
            limits = tuple(float(x) for x in limits)
        return cls(n_segments=count, lengths=tuple(float(x) for x in lengths),
                   name=fields.get("name", f"cc3d_{count}"), max_bending=limits)


def cc3d(n_segments: int, length: float = 1.0) -> CC3D:
    """The reference model ``cc3d_N``: N segments of nominal length ``length`` (1 m)."""
    return CC3D(n_segments=n_segments, lengths=(length,) * n_segments)
