"""Family ``planar_tree``: rigid rods in the x–y plane joined by revolute joints in a tree.

Body ``b`` (one joint coordinate ``q_b`` each, in file order) hangs from its parent (or from
the base) at distance ``attach_b`` along the parent's axis. Its absolute direction is

    ψ_b = ψ_parent(b) + sign_b q_b + offset_b,    ψ_root's parent = zero_direction,

so ``ψ = S q + ψ₀`` is linear in ``q`` (``S`` holds the signs along each body's chain). Every
point of interest (centres of mass, tips) is ``p = base + Σ_b w_b u(ψ_b)`` with
``u(ψ) = (cos ψ, sin ψ)`` and constant weights ``w`` [m] (rows of ``W``), hence

* ``∂p/∂q = Σ_b w_b u⊥(ψ_b) S_b`` with ``u⊥ = (−sin ψ, cos ψ)``;
* gravity ``U_g = g Σ_i m_i y_i = g (Wᵀm) · sin ψ`` (+ const), ``G_g = g Sᵀ((Wᵀm) ∘ cos ψ)``,
  ``∂G_g/∂q = −g Sᵀ diag((Wᵀm) ∘ sin ψ) S``;
* mass matrix ``M = Sᵀ (cos(ψ_a − ψ_b) ∘ M_w + diag(I)) S`` with ``M_w = Wᵀ diag(m) W``
  over the centres of mass and ``I`` the rotational inertias about them;
* bias ``C(q, q̇) q̇ = Σ m Jᵀ a_bias`` with ``a_bias = −Σ_b w_b u(ψ_b) ψ̇_b²``, i.e.
  ``−Sᵀ ((sin(ψ_b − ψ_a))_ab ∘ M_w) ψ̇²``.

Elastic joints: ``U_e = ½ (q − q_rest)ᵀ K (q − q_rest)``. Gravity acts along −y.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from poise.models import planar
from poise.models.base import FloatArray
from poise.models.registry import ModelError, model_from_dict
from poise.models.spec import (
    ACTUATION_KEYS,
    DIRECTIONS,  # named zero directions (angle from +x, counter-clockwise) [rad]
    PLANAR_KEYS,
    Key,
    common_keys,
    limit_keys,
)

TASK_KINDS = {"tip_x": 1, "tip_xy": 2, "com_xy": 2}

#: One ``[[bodies]]`` table (defaults that depend on other keys are computed in ``from_dict``).
BODY_KEYS: dict[str, Key] = {
    "name": Key("string", "unique body name, not 'base' (default: body<i>)"),
    "parent": Key("string", "'base' or the name of an earlier body (default: the previous "
                  "body; 'base' for the first)"),
    "attach": Key("number", "distance along the parent from its start [m] (default: the "
                  "parent's length; 0 on the base)", ge=0),
    "length": Key("number", "length [m]", required=True, gt=0),
    "mass": Key("number", "mass [kg]", required=True, gt=0),
    "com": Key("number", "centre of mass along the body [m] (default: length / 2)", ge=0),
    "inertia": Key("number", "rotational inertia about the centre of mass [kg·m²] (default: "
                   "m l² / 12, a uniform rod)", ge=0),
    "sign": Key("integer", "1: q counter-clockwise, -1: clockwise", default=1, choices=(1, -1)),
    "offset": Key("number", "added to the angle [rad] (π: hangs back along the parent at "
                  "q = 0)", default=0.0),
    "stiffness": Key("number", "joint spring [N·m/rad]", default=0.0, ge=0),
    "rest": Key("number", "rest angle of the joint spring [rad]", default=0.0),
    "damping": Key("number", "joint viscous damping [N·m·s/rad]", default=0.0, ge=0),
    **limit_keys("rad"),
}

#: ``[task]``.
TASK_KEYS: dict[str, Key] = {
    "kind": Key("string", "tip_x, tip_xy: the far end of `body`; com_xy: the centre of mass "
                "of the whole robot", required=True, choices=tuple(TASK_KINDS)),
    "body": Key("string", "the body whose far end is the tip (tip kinds only; default: the "
                "last body)"),
}

#: A ``planar_tree`` model file.
KEYS: dict[str, Key] = {
    **common_keys("planar_tree"),
    **PLANAR_KEYS,
    "bodies": Key("tables", "one table per body, in the order of the coordinates q (a parent "
                  "before its children)", required=True, table=BODY_KEYS),
    "actuation": Key("table", "actuators: [qa; qu] = C q", required=True, table=ACTUATION_KEYS),
    "task": Key("table", "the task x = h(q)", required=True, table=TASK_KEYS),
}


@dataclass(frozen=True)
class Body(planar.PlanarJoint):
    """One rigid rod and the joint that connects it to its parent (stiffness, rest, damping
    and limits of the joint: :class:`~poise.models.planar.PlanarJoint`)."""

    name: str
    parent: int  # index of the parent body, −1 for the base
    attach: float  # [m] along the parent's axis from its start
    length: float  # [m]
    mass: float  # [kg]
    com: float  # [m] along the body from its start
    inertia: float  # [kg·m²] about the centre of mass
    sign: int  # +1: q counter-clockwise, −1: clockwise
    offset: float  # [rad] added to the angle (e.g. π for a rod hanging down at q = 0)


@dataclass(frozen=True)
class TreeSpec(planar.PlanarSpec):
    """Everything a model file says about a planar tree (validated)."""

    bodies: tuple[Body, ...]
    task_kind: str
    task_body: int


class PlanarTree(planar.PlanarModel):
    """A planar tree of rigid rods with revolute joints, springs, dampers and gravity.

    Build one with :meth:`from_dict` (or :func:`poise.models.load_model`); see the module
    docstring for the equations and ``docs/models.md`` for the file schema.
    """

    family = "planar_tree"
    task_kind = "position"

    spec: TreeSpec

    def __init__(self, spec: TreeSpec) -> None:
        bodies = spec.bodies
        self._init_planar(spec, bodies)
        n = self.n
        self.masses = np.array([b.mass for b in bodies])
        self.inertias = np.array([b.inertia for b in bodies])
        self.base = np.array(spec.base, dtype=float)
        #: Farthest any point can be from the origin [m] (base offset + every rod).
        self.reach = float(np.hypot(*self.base) + sum(b.length for b in bodies))

        S = np.zeros((n, n))
        psi0 = np.zeros(n)
        start = np.zeros((n, n))  # weights of each body's start point
        for i, b in enumerate(bodies):
            if b.parent >= 0:
                S[i] = S[b.parent]
                psi0[i] = psi0[b.parent]
                start[i] = start[b.parent]
                start[i, b.parent] += b.attach
            else:
                psi0[i] = self.base_angle
            S[i, i] += b.sign
            psi0[i] += b.offset
        eye = np.eye(n)
        self.S = S
        self.psi0 = psi0
        self.W_start = start
        self.W_end = start + eye * np.array([b.length for b in bodies])
        self.W_com = start + eye * np.array([b.com for b in bodies])
        self.M_w = self.W_com.T @ (self.masses[:, None] * self.W_com)
        self.a_w = self.W_com.T @ self.masses  # [kg·m] gravity moment weights per body
        self.total_mass = float(self.masses.sum())
        self._inertia_diag = np.diag(self.inertias)

        if spec.task_kind == "com_xy":
            rows = np.repeat((self.masses @ self.W_com / self.total_mass)[None], 2, axis=0)
            comps = np.array([0, 1])
        else:
            tip = self.W_end[spec.task_body]
            comps = np.array([0]) if spec.task_kind == "tip_x" else np.array([0, 1])
            rows = np.repeat(tip[None], comps.size, axis=0)
        self._task_rows = rows
        self._task_is_y = comps == 1
        self.task_dim = int(comps.size)
        self.task_name = spec.task_kind

    # ------------------------------------------------------------------ kinematics

    def angles(self, q: FloatArray) -> FloatArray:
        """Absolute body directions ``ψ = S q + ψ₀`` (n,) [rad from +x]."""
        return self.S @ q + self.psi0

    def _points(self, W: FloatArray, q: FloatArray) -> FloatArray:
        psi = self.S @ q + self.psi0
        return self.base + np.stack([W @ np.cos(psi), W @ np.sin(psi)], axis=1)

    def fk(self, q: FloatArray) -> FloatArray:
        """Task value: tip x, tip (x, y) or centre of mass (x, y) [m]."""
        psi = self.S @ q + self.psi0
        x = self.base[0] + self._task_rows @ np.cos(psi)
        y = self.base[1] + self._task_rows @ np.sin(psi)
        return np.where(self._task_is_y, y, x)

    def task_jacobian(self, q: FloatArray) -> FloatArray:
        """``∂h/∂q`` (task_dim, n) [m/rad]."""
        psi = self.S @ q + self.psi0
        jx = self._task_rows @ (-np.sin(psi)[:, None] * self.S)
        jy = self._task_rows @ (np.cos(psi)[:, None] * self.S)
        return np.where(self._task_is_y[:, None], jy, jx)

    def mass_points(self, q: FloatArray) -> FloatArray:
        """Centres of mass of the bodies (n, 2) [m]; their masses are :attr:`masses`."""
        return self._points(self.W_com, q)

    def com(self, q: FloatArray) -> FloatArray:
        """Centre of mass of the whole robot (2,) [m]."""
        return self.masses @ self.mass_points(q) / self.total_mass

    def body_points(self, q: FloatArray) -> list[FloatArray]:
        """One (2, 2) polyline (start, end) per body [m], for drawing."""
        a = self._points(self.W_start, q)
        b = self._points(self.W_end, q)
        return [np.stack([a[i], b[i]]) for i in range(self.n)]

    # ------------------------------------------------------------------ statics

    def potential(self, q: FloatArray) -> float:
        """``U = g Σ m_i y_i + ½ (q − q_rest)ᵀ K (q − q_rest)`` [J]."""
        psi = self.S @ q + self.psi0
        dq = q - self.q_rest
        grav = self.gravity * (self.a_w @ np.sin(psi) + self.total_mass * self.base[1])
        return float(grav + 0.5 * dq @ (self.stiffness * dq))

    def G(self, q: FloatArray) -> FloatArray:
        """``∂U/∂q = g Sᵀ((Wᵀm) ∘ cos ψ) + K (q − q_rest)`` (n,) [N·m]."""
        psi = self.S @ q + self.psi0
        return self.gravity * (self.S.T @ (self.a_w * np.cos(psi))) \
            + self.stiffness * (q - self.q_rest)

    def dG(self, q: FloatArray) -> FloatArray:
        """``∂²U/∂q² = −g Sᵀ diag((Wᵀm) ∘ sin ψ) S + K`` (n, n) [N·m/rad]."""
        psi = self.S @ q + self.psi0
        return -self.gravity * (self.S.T @ ((self.a_w * np.sin(psi))[:, None] * self.S)) \
            + np.diag(self.stiffness)

    # ------------------------------------------------------------------ dynamics

    def mass_matrix(self, q: FloatArray) -> FloatArray:
        """``M = Sᵀ (cos(ψ_a − ψ_b) ∘ M_w + diag(I)) S`` (n, n) [kg·m²]."""
        psi = self.S @ q + self.psi0
        c, s = np.cos(psi), np.sin(psi)
        inner = (np.outer(c, c) + np.outer(s, s)) * self.M_w + np.diag(self.inertias)
        return self.S.T @ inner @ self.S

    def bias_forces(self, q: FloatArray, qd: FloatArray) -> FloatArray:
        """Coriolis/centrifugal ``C(q, q̇) q̇ = −Sᵀ ((sin(ψ_b − ψ_a))_ab ∘ M_w) ψ̇²`` [N·m]."""
        psi = self.S @ q + self.psi0
        c, s = np.cos(psi), np.sin(psi)
        psid = self.S @ qd
        sin_diff = np.outer(c, s) - np.outer(s, c)  # [a, b] = sin(ψ_b − ψ_a)
        return -self.S.T @ ((sin_diff * self.M_w) @ (psid * psid))

    def dynamics_terms(self, q: FloatArray,
                       qd: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``(M(q), C(q, q̇) q̇, G(q))`` in one pass (the simulator's hot path).

        Equal to :meth:`mass_matrix`, :meth:`bias_forces` and :meth:`G`; shares
        ``e^{iψ}``: ``e_a ē_b = cos(ψ_a − ψ_b) + i sin(ψ_a − ψ_b)``.
        """
        psi = self.S @ q + self.psi0
        e = np.exp(1j * psi)
        rel = np.outer(e, e.conj())  # [a, b] = e^{i(ψ_a − ψ_b)}
        M = self.S.T @ (rel.real * self.M_w + self._inertia_diag) @ self.S
        psid = self.S @ qd
        bias = self.S.T @ ((rel.imag * self.M_w) @ (psid * psid))
        G = self.gravity * (self.S.T @ (self.a_w * e.real)) + self.stiffness * (q - self.q_rest)
        return M, bias, G

    # ------------------------------------------------------------------ description

    def describe(self) -> dict[str, Any]:
        """All parameters in the file schema (reloads to an identical model)."""
        sp = self.spec
        bodies = [{"name": b.name,
                   "parent": "base" if b.parent < 0 else sp.bodies[b.parent].name,
                   "attach": b.attach, "length": b.length, "mass": b.mass, "com": b.com,
                   "inertia": b.inertia, "sign": b.sign, "offset": b.offset,
                   **planar.describe_joint(b)}
                  for b in sp.bodies]
        task: dict[str, Any] = {"kind": sp.task_kind}
        if sp.task_kind != "com_xy":
            task["body"] = sp.bodies[sp.task_body].name
        return self._describe_planar({"bodies": bodies}, task)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> PlanarTree:
        """Validate a description (file schema, see docs/models.md) and build the model."""
        top, header = planar.read_header(data, source, KEYS)
        bodies: list[Body] = []
        names: dict[str, int] = {}
        for i, f in enumerate(top.get("bodies")):
            f.check_keys()
            bname = f.get("name", f"body{i}")
            if bname in names or bname == "base":
                raise f.error("name", bname, "must be unique and not 'base'")
            parent_name = f.get("parent", "base" if i == 0 else bodies[-1].name)
            if parent_name != "base" and parent_name not in names:
                raise f.error("parent", parent_name,
                              f"must be 'base' or a body listed before: {', '.join(names)}")
            parent = names.get(parent_name, -1)
            length = f.get("length")
            mass = f.get("mass")
            com = f.get("com", length / 2)
            joint = planar.read_joint(f)
            bodies.append(Body(
                name=bname, parent=parent,
                attach=f.get("attach", 0.0 if parent < 0 else bodies[parent].length),
                length=length, mass=mass, com=com,
                inertia=f.get("inertia", mass * length**2 / 12),
                sign=f.get("sign"), offset=f.get("offset"), **joint,
            ))
            names[bname] = i
        actuation = planar.read_actuation(top, len(bodies))
        task = top.get("task")
        task.check_keys()
        kind = task.get("kind")
        body_name = task.get("body", bodies[-1].name)
        if body_name not in names:
            raise task.error("body", body_name, f"must be one of {', '.join(names)}")
        spec = TreeSpec(**header, **actuation, bodies=tuple(bodies), task_kind=kind,
                        task_body=names[body_name])
        if kind == "com_xy" and "body" in task.data:
            raise task.error("body", body_name, "not used by kind = 'com_xy'; remove it")
        return cls(spec)

    def __repr__(self) -> str:
        return f"PlanarTree({self.name!r}, n={self.n}, m={self.m}, task={self.task_name})"


PerBody = Mapping[int, float] | Sequence[float] | FloatArray


def _per_body(values: PerBody) -> list[tuple[int, float]]:
    """``(body index, value)`` pairs of a mapping by index or a sequence over every body."""
    items = values.items() if isinstance(values, Mapping) else enumerate(values)
    return [(int(i), float(v)) for i, v in items]


def edit_bodies(description: dict[str, Any], masses: Sequence[float] | FloatArray, *,
                stiffness: PerBody | None = None, rest: PerBody | None = None) -> None:
    """Set the bodies of a ``planar_tree`` description (:meth:`PlanarTree.describe`) in place:
    mass ``m_b`` [kg] of every body, its rotational inertia about its centre of mass scaled
    with it (the same shape, the same material); joint stiffness ``k_b`` [N·m/rad] and rest
    angle ``q_rest,b`` [rad] where given (by body index, or a value for every body). What
    calibration identifies and what the held efforts show (:mod:`poise.motion.masses`) are
    both made into a model this way."""
    bodies = description["bodies"]
    if len(masses) != len(bodies):
        raise ValueError(f"{len(masses)} masses for {len(bodies)} bodies")
    for body, mass in zip(bodies, masses, strict=True):
        body["inertia"] = float(body["inertia"]) * float(mass) / float(body["mass"])
        body["mass"] = float(mass)
    for key, values in (("stiffness", stiffness), ("rest", rest)):
        for i, value in _per_body(values) if values is not None else ():
            bodies[i][key] = value


def with_bodies(model: PlanarTree, masses: Sequence[float] | FloatArray, *,
                stiffness: PerBody | None = None, source: str = "<edited>") -> PlanarTree:
    """``model`` with its bodies' masses [kg] and, where given, joint stiffnesses
    [N·m/rad] replaced (:func:`edit_bodies`), as a new model."""
    d = copy.deepcopy(model.describe())
    edit_bodies(d, masses, stiffness=stiffness)
    return model_from_dict(d, source=source)  # type: ignore[no-any-return]


__all__ = ["DIRECTIONS", "KEYS", "Body", "ModelError", "PlanarTree", "TreeSpec", "edit_bodies",
           "with_bodies"]
