"""Targets of classic IK: task vectors, positions and poses, validated at the edge.

Accepted forms:

* a model with a vector task (``task_kind != "pose"``): ``task_dim`` numbers (e.g. ``(x, y)`` [m]);
* a pose model (``task_kind == "pose"``):

  - a 4 × 4 homogeneous transform (or its 16 entries, row-major) — full pose;
  - 7 numbers ``(x, y, z, qw, qx, qy, qz)`` [m, unit quaternion scalar first] — full pose; the
    quaternion is normalised (it must not be zero);
  - 3 numbers ``(x, y, z)`` [m] — position only, orientation free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from poise.ik.orientation import as_rotation, matrix_from_quat, quat_from_matrix
from poise.ik.result import FloatArray, InvalidInputError, as_vector


@dataclass(frozen=True)
class Target:
    """A validated target: ``position`` (task vector for vector tasks) and optional rotation."""

    position: FloatArray
    rotation: FloatArray | None = None

    @property
    def is_pose(self) -> bool:
        return self.rotation is not None

    def as_vector(self) -> FloatArray:
        """``position`` or ``(x, y, z, qw, qx, qy, qz)`` for full poses."""
        if self.rotation is None:
            return self.position.copy()
        return np.concatenate([self.position, quat_from_matrix(self.rotation)])


def parse_target(model: Any, target: ArrayLike) -> Target:
    """Validate ``target`` for ``model`` (see the module docstring); raises InvalidInputError."""
    if getattr(model, "task_kind", "position") != "pose":
        return Target(as_vector(target, int(model.task_dim), "target"))
    try:
        arr = np.asarray(target, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"target: cannot be read as numbers ({exc})") from None
    if arr.shape == (4, 4) or arr.size == 16:
        T = arr.reshape(4, 4)
        last = T[3].tolist()
        if not all(math.isfinite(v) for v in last):
            raise InvalidInputError("target: the 4 × 4 pose has non-finite entries")
        if max(abs(a - b) for a, b in zip(last, (0.0, 0.0, 0.0, 1.0), strict=True)) > 1e-9:
            raise InvalidInputError(f"target: last row of the 4 × 4 pose must be [0, 0, 0, 1], "
                                    f"got {T[3].tolist()}")
        position = T[:3, 3].copy()
        if not all(math.isfinite(v) for v in position.tolist()):
            raise InvalidInputError("target: the 4 × 4 pose has non-finite entries")
        return Target(position, as_rotation(T[:3, :3], "target"))
    vec = as_vector(arr, None, "target")
    if vec.size == 3:
        return Target(vec)
    if vec.size == 7:
        quat = vec[3:]
        norm = float(np.linalg.norm(quat))
        if norm < 1e-9:
            raise InvalidInputError(f"target: quaternion (qw, qx, qy, qz) = {quat.tolist()} "
                                    "has zero norm")
        return Target(vec[:3].copy(), matrix_from_quat(quat / norm))
    raise InvalidInputError(f"target: a pose target is a 4 × 4 matrix, 7 numbers "
                            f"(x, y, z, qw, qx, qy, qz) or 3 numbers (x, y, z); got "
                            f"{vec.size} numbers")
