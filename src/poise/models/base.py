"""The robot-model protocols every kinematic family implements.

Notation follows seed 000 (Della Santina, IJRR): configuration ``q`` (n), actuated coordinates
``qa`` (m), unactuated ``qu`` (n − m), task ``x = h(q)``, potential ``U(q)``, potential forces
``G(q) = ∂U/∂q``. The actuation split is linear, ``[qa; qu] = C q`` with ``C`` an invertible
constant (n × n) matrix whose first m rows are the actuation matrix ``A`` (the actuators'
generalised force is ``Aᵀ τ``). Every reference model has a linear split; the quantities in
actuation coordinates (``G_u``, ``J_a``, ``J_u``, ``H_ua``, ``H_uu``) are derived from these
primitives once, in :mod:`poise.models.actuation`.

Two protocols:

* :class:`TaskModel` — anything with a task map and its Jacobian (enough for classic IK).
  Pose tasks (``task_kind == "pose"``) additionally provide :meth:`PoseModel.pose`, and their
  ``task_jacobian`` is the geometric Jacobian ``[v; ω]`` in the base frame.
* :class:`MechanicalModel` — adds potential, actuation split and mass properties (held-
  configuration IK, simulation, calibration).

A new kinematic family is a class implementing one of these protocols; a new robot of a known
family is a TOML file (see ``docs/models.md``).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


@runtime_checkable
class TaskModel(Protocol):
    """A robot with a task map ``x = h(q)`` (enough for classic closed-loop IK)."""

    name: str
    n: int
    """Number of configuration coordinates."""
    task_dim: int
    """Size of the task vector (6 for pose tasks: 3 position + 3 orientation rows)."""
    task_kind: str
    """``"position"`` (a vector task) or ``"pose"`` (position + orientation)."""
    q_min: FloatArray
    """Lower configuration limits (n,); ``-inf`` where unlimited."""
    q_max: FloatArray
    """Upper configuration limits (n,); ``+inf`` where unlimited."""

    def fk(self, q: FloatArray) -> FloatArray:
        """Task value ``h(q)``; for pose tasks the position (3,) only."""
        ...

    def task_jacobian(self, q: FloatArray) -> FloatArray:
        """``∂h/∂q`` (task_dim, n); geometric Jacobian ``[v; ω]`` for pose tasks."""
        ...

    def describe(self) -> dict[str, Any]:
        """All parameters as a JSON-ready dictionary (the schema of the model files)."""
        ...


@runtime_checkable
class PoseModel(TaskModel, Protocol):
    """A robot whose task is an end-effector pose in SE(3)."""

    def pose(self, q: FloatArray) -> FloatArray:
        """End-effector homogeneous transform (4, 4) in the base frame."""
        ...


@runtime_checkable
class MechanicalModel(TaskModel, Protocol):
    """A robot with statics and mass properties (underactuated in general)."""

    m: int
    """Number of actuators (actuated coordinates)."""
    C: FloatArray
    """Change of coordinates ``[qa; qu] = C q`` (n, n); rows ``:m`` are ``A``."""
    C_inv: FloatArray
    """``C⁻¹`` (n, n), precomputed: ``q = C⁻¹ [qa; qu]``."""
    qa_min: FloatArray
    """Lower actuator limits (m,) [actuator units: m for tendons, rad for motors]."""
    qa_max: FloatArray
    """Upper actuator limits (m,)."""
    damping: FloatArray
    """Joint viscous damping ``D`` (n,) [N·m·s/rad]."""
    gravity: float
    """Gravity magnitude g [m/s²] (direction: −y in the plane)."""

    def potential(self, q: FloatArray) -> float:
        """Potential energy ``U(q)`` (elastic + gravity) [J]."""
        ...

    def G(self, q: FloatArray) -> FloatArray:
        """Potential forces ``G(q) = ∂U/∂q`` (n,) [N·m]."""
        ...

    def dG(self, q: FloatArray) -> FloatArray:
        """Stiffness ``∂G/∂q = ∂²U/∂q²`` (n, n), symmetric."""
        ...

    def mass_matrix(self, q: FloatArray) -> FloatArray:
        """Inertia matrix ``M(q)`` (n, n), symmetric positive definite."""
        ...

    def bias_forces(self, q: FloatArray, qd: FloatArray) -> FloatArray:
        """Coriolis and centrifugal forces ``C(q, q̇) q̇`` (n,), consistent with ``M``."""
        ...

    def with_gravity(self, g: float) -> MechanicalModel:
        """The same robot under a different gravity magnitude."""
        ...
