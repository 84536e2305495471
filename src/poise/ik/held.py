"""Inverse kinematics restricted to configurations the robot can hold (seed 000).

* :func:`algorithm1` — statics solved beforehand: closed-loop IK on the actuators-to-task map
  ``f(qa) = h(c⁻¹(qa, q̄u(qa)))`` with Jacobian ``J = Ja − Ju Huu⁻¹ Hua``. Every iterate lies on
  the held set E.
* :func:`algorithm2` — statics solved online: the task error and ``G_u`` are both asked to decay
  exponentially, ``ḟ = ΓZ ex`` and ``Ġu = ΓE eE`` with ``eE = −Gu``; one step solves that linear
  system, by the projectors ``PE``/``PZ`` of the pseudocode or by a direct (stacked) solve;
  within the actuator limits by :func:`limited_rates` (:mod:`poise.ik.held_limits`), with
  restarts from a grid of held configurations when an attempt stalls at a limit.
* :func:`plain` — classic IK that treats the robot as fully actuated (the baseline that sags).

Every function returns :class:`~poise.ik.result.IKResult` with the held-configuration fields
filled (``qa``, ``qu``, ``statics_residual``, ``min_eig_Huu``, ``stable``).

The algorithms live in :mod:`~poise.ik.held_alg1`, :mod:`~poise.ik.held_alg2` and
:mod:`~poise.ik.held_common` (options, result, stopping rules); this module is the one users
import from. Their numpy loops are the reference: ``algorithm1`` and ``algorithm2`` run the same
iterations on the compiled kernels (:mod:`poise.kernels.held_solve`) when the model's family has
them (``compiled=True``, the default), and ``tests/test_kernels.py`` compares the two.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from poise.ik.dls import damped_pinv
from poise.ik.held_alg1 import UPDATES, Update, algorithm1, algorithm1_step, check_update
from poise.ik.held_alg2 import algorithm2, algorithm2_rates, follow_statics, limited_rates
from poise.ik.held_common import (
    Attempt,
    HeldOptions,
    begin,
    finish,
    held_jacobian,
    smallest_singular,
    stop_rule,
)
from poise.ik.result import IKResult, InvalidInputError, Status
from poise.models.base import MechanicalModel


def plain(
    model: MechanicalModel,
    target: ArrayLike,
    q0: ArrayLike | None = None,
    *,
    damping: float = 1e-3,
    options: HeldOptions | None = None,
    record_path: bool = False,
) -> IKResult:
    """Classic IK that ignores statics (treats every coordinate as actuated): the baseline.

    Damped-least-squares CLIK on ``h(q)`` over all of ``q``. The result reaches ``x̄`` but in
    general ``‖G_u‖ ≠ 0``: released (actuators locked, statics solved) the robot sags away.
    """
    options = options or HeldOptions()
    t0, target, q, history, path = begin(model, target, q0, record_path)
    status = Status.ITERATION_CAP
    sigma = math.nan
    iterations = 0
    for iterations in range(options.max_iter + 1):
        err = target - model.fk(q)
        history.append(float(np.linalg.norm(err)))
        stop = stop_rule(history, iterations, options, history[-1] < options.tol)
        if stop is not None:
            status = stop
            break
        jac = model.task_jacobian(q)
        sigma = smallest_singular(jac)
        q = q + damped_pinv(jac, damping) @ err
        if path is not None:
            path.append(q)
    # Plain IK ignores statics: its success is the task alone.
    attempt = Attempt(q, status, iterations, np.asarray(history), sigma,
                      None if path is None else np.asarray(path))
    return finish(model, attempt, target, HeldOptions(reject_unstable=False), t0)


ALGORITHMS = {"plain": plain, "alg1": algorithm1, "alg2": algorithm2}


def solve_held(
    model: MechanicalModel, algorithm: str, target: ArrayLike, q0: ArrayLike | None = None,
    **kwargs: object,
) -> IKResult:
    """Dispatch to ``plain``, ``alg1`` or ``alg2`` by name."""
    try:
        fn = ALGORITHMS[algorithm]
    except KeyError:
        raise InvalidInputError(
            f"algorithm: unknown '{algorithm}' (allowed: {', '.join(ALGORITHMS)})") from None
    return fn(model, target, q0, **kwargs)  # type: ignore[operator]


__all__ = [
    "ALGORITHMS",
    "UPDATES",
    "Attempt",
    "HeldOptions",
    "Update",
    "algorithm1",
    "algorithm1_step",
    "algorithm2",
    "algorithm2_rates",
    "check_update",
    "damped_pinv",
    "follow_statics",
    "held_jacobian",
    "limited_rates",
    "plain",
    "solve_held",
]
