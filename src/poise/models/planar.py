"""What the two planar families (``planar_tree``, ``planar_pcc``) share.

Both describe a robot in the x–y plane with one elastic, damped, limited coordinate ``q_i`` per
body (rigid rod or constant-curvature segment), gravity ``g`` along −y, a base point and a zero
direction, and the linear actuation split ``[qa; qu] = C q`` (:mod:`poise.models.base`). Here,
once:

* :class:`PlanarJoint` / :class:`PlanarSpec`: the per-coordinate and the top-level fields of a
  validated model file (each family's body and spec dataclasses extend them);
* :class:`PlanarModel`: the attributes built from them (limits, ``K``, ``D``, ``q_rest``,
  ``C``, ``C⁻¹``), :meth:`~PlanarModel.with_gravity` and the common part of ``describe``;
* :func:`read_header`, :func:`read_joint`, :func:`read_actuation`: the common part of
  ``from_dict``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from poise.models.base import FloatArray
from poise.models.registry import Fields, actuation_matrix, limit_list, limits
from poise.models.spec import DIRECTIONS, Key


@dataclass(frozen=True)
class PlanarJoint:
    """The elastic coordinate of one body: ``K`` (stiffness), ``q_rest``, ``D`` and limits."""

    stiffness: float  # [N·m/rad]
    rest: float  # [rad]
    damping: float  # [N·m·s/rad]
    q_min: float  # [rad]
    q_max: float  # [rad]


@dataclass(frozen=True)
class PlanarSpec:
    """The top level of a planar model file (validated); families add their bodies."""

    name: str
    description: str
    aliases: tuple[str, ...]
    gravity: float  # g [m/s²] along −y
    base: tuple[float, float]  # [m]
    zero_direction: str | float  # a name of DIRECTIONS or an angle from +x [rad]
    m: int
    C: FloatArray  # (n, n)
    qa_min: FloatArray  # (m,) [m or rad]
    qa_max: FloatArray  # (m,)


class PlanarModel:
    """The attributes and methods the planar families build the same way.

    Attributes (set by :meth:`_init_planar`): ``name``, ``n``, ``m``, ``gravity`` [m/s²],
    ``C``, ``C_inv``, ``qa_min``/``qa_max``, ``q_min``/``q_max`` [rad], ``damping`` ``D``
    [N·m·s/rad], ``stiffness`` ``K`` [N·m/rad], ``q_rest`` [rad] (n,) each, ``base_angle``
    [rad from +x] (the zero direction).
    """

    family: str
    spec: Any  # the family's PlanarSpec subclass

    def _init_planar(self, spec: PlanarSpec, joints: Sequence[PlanarJoint]) -> None:
        """Set the common attributes from the spec and its bodies' joints."""
        self.spec = spec
        self.name = spec.name
        self.n = len(joints)
        self.m = spec.m
        self.gravity = spec.gravity
        self.C = spec.C.copy()
        self.C_inv = np.linalg.inv(self.C)
        self.qa_min = spec.qa_min.copy()
        self.qa_max = spec.qa_max.copy()
        self.q_min = np.array([j.q_min for j in joints])
        self.q_max = np.array([j.q_max for j in joints])
        self.damping = np.array([j.damping for j in joints])
        self.stiffness = np.array([j.stiffness for j in joints])
        self.q_rest = np.array([j.rest for j in joints])
        self.base_angle = spec.zero_direction if isinstance(spec.zero_direction, float) \
            else DIRECTIONS[spec.zero_direction]

    def with_gravity(self, g: float) -> Self:
        """The same robot under gravity magnitude ``g`` [m/s²]."""
        return type(self)(dataclasses.replace(self.spec, gravity=float(g)))  # type: ignore[call-arg]

    def _describe_planar(self, bodies: Mapping[str, Any], task: dict[str, Any]) -> dict[str, Any]:
        """The file schema of the model: the common keys around the family's ``bodies``."""
        sp = self.spec
        return {
            "family": self.family,
            "name": sp.name,
            "description": sp.description,
            "aliases": list(sp.aliases),
            "gravity": sp.gravity,
            "base": list(sp.base),
            "zero_direction": sp.zero_direction,
            **bodies,
            "actuation": {"m": sp.m, "C": sp.C.tolist(), "qa_min": limit_list(sp.qa_min),
                          "qa_max": limit_list(sp.qa_max)},
            "task": task,
        }


def describe_joint(joint: PlanarJoint) -> dict[str, float]:
    """``stiffness``, ``rest``, ``damping`` and the finite limits of a joint (file schema)."""
    d = {"stiffness": joint.stiffness, "rest": joint.rest, "damping": joint.damping}
    if math.isfinite(joint.q_min):
        d["q_min"] = joint.q_min
    if math.isfinite(joint.q_max):
        d["q_max"] = joint.q_max
    return d


def read_header(data: Mapping[str, Any], source: str,
                keys: Mapping[str, Key]) -> tuple[Fields, dict[str, Any]]:
    """The top-level table (keys checked) and its common fields, as :class:`PlanarSpec`
    keywords (without the actuation: :func:`read_actuation`)."""
    top = Fields(data, source, keys=keys)
    top.check_keys()
    header = {"name": top.get("name"), "zero_direction": top.get("zero_direction")}
    base = top.get("base")
    header.update(base=(float(base[0]), float(base[1])), description=top.get("description"),
                  aliases=tuple(top.get("aliases")), gravity=top.get("gravity"))
    return top, header


def read_joint(f: Fields) -> dict[str, float]:
    """The :class:`PlanarJoint` keywords of one body's table; ``q_min ≤ q_max`` checked."""
    q_lo, q_hi = f.get("q_min"), f.get("q_max")
    if q_lo > q_hi:
        raise f.error("q_max", q_hi, f"must be >= q_min = {q_lo}")
    return {"stiffness": f.get("stiffness"), "rest": f.get("rest"),
            "damping": f.get("damping"), "q_min": q_lo, "q_max": q_hi}


def read_actuation(top: Fields, n: int) -> dict[str, Any]:
    """``[actuation]`` as :class:`PlanarSpec` keywords ``m, C, qa_min, qa_max``."""
    act = top.get("actuation")
    act.check_keys()
    m, C, _ = actuation_matrix(act, n)
    qa_min, qa_max = limits(act, "qa_min", "qa_max", m)
    return {"m": m, "C": C, "qa_min": qa_min, "qa_max": qa_max}


__all__ = ["PlanarJoint", "PlanarModel", "PlanarSpec", "describe_joint", "read_actuation",
           "read_header", "read_joint"]
