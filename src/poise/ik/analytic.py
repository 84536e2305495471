"""Closed-form inverse kinematics of the planar two-link arm (seed 002).

Links ``l1``, ``l2`` [m], angles from +x, ``q2`` relative to link 1, tip ``(x, y)``:

    cos q2 = (x² + y² − l1² − l2²) / (2 l1 l2),      q2 = ± arccos(cos q2)
    q1 = atan2(y, x) − atan2(l2 sin q2, l1 + l2 cos q2)

``elbow = +1`` gives ``q2 ≥ 0`` (seed 002's "elbow +1", e.g. (−9.8°, 84.3°) for (0.6, 0.3)),
``elbow = −1`` the mirror solution. A target outside the annulus ``|l1 − l2| ≤ r ≤ l1 + l2``
returns the closest configuration (arm stretched or folded toward the target) with
``success=False`` and status ``unreachable``.
"""

from __future__ import annotations

import math
import time

import numpy as np
from numpy.typing import ArrayLike

from poise.ik.result import IKResult, InvalidInputError, Status, as_vector


def two_link_ik(target: ArrayLike, l1: float = 0.5, l2: float = 0.4, elbow: int = 1,
                tol: float = 1e-9) -> IKResult:
    """Analytic IK of the planar 2-link arm for one elbow (``+1`` or ``−1``)."""
    t0 = time.perf_counter()
    x, y = as_vector(target, 2, "target")
    if elbow not in (1, -1):
        raise InvalidInputError(f"elbow = {elbow!r}: must be +1 or -1")
    if not (l1 > 0 and l2 > 0 and math.isfinite(l1 + l2)):
        raise InvalidInputError(f"link lengths ({l1!r}, {l2!r}): must be finite and > 0")
    c2 = (x * x + y * y - l1 * l1 - l2 * l2) / (2 * l1 * l2)
    q2 = elbow * math.acos(min(1.0, max(-1.0, c2)))
    q1 = math.atan2(y, x) - math.atan2(l2 * math.sin(q2), l1 + l2 * math.cos(q2))
    q = np.array([q1, q2])
    tip = np.array([l1 * math.cos(q1) + l2 * math.cos(q1 + q2),
                    l1 * math.sin(q1) + l2 * math.sin(q1 + q2)])
    err = float(np.hypot(*(np.array([x, y]) - tip)))
    ok = err <= tol
    s1, s12 = math.sin(q1), math.sin(q1 + q2)
    c1, c12 = math.cos(q1), math.cos(q1 + q2)
    J = np.array([[-l1 * s1 - l2 * s12, -l2 * s12], [l1 * c1 + l2 * c12, l2 * c12]])
    return IKResult(
        q=q, success=ok, status=Status.CONVERGED if ok else Status.UNREACHABLE,
        position_error=err, residual_history=np.array([err]),
        sigma_min=float(np.linalg.svd(J, compute_uv=False)[-1]),
        wall_time=time.perf_counter() - t0, x=tip,
        message="closed form" if ok else "target outside the annulus |l1 − l2| ≤ r ≤ l1 + l2; "
        "q is the closest configuration",
    )


def two_link_solutions(target: ArrayLike, l1: float = 0.5,
                       l2: float = 0.4) -> tuple[IKResult, IKResult]:
    """Both elbows: ``(elbow +1, elbow −1)``."""
    return two_link_ik(target, l1, l2, 1), two_link_ik(target, l1, l2, -1)
