"""What the held-configuration solvers share: options, one attempt's outcome, the result, the
stopping rules, and the dispatch to the compiled kernels (:mod:`poise.ik.held`)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from poise.ik.held_limits import at_limits
from poise.ik.result import FloatArray, IKResult, Status, as_vector
from poise.ik.statics import classify
from poise.models.actuation import ActuationBlocks, blocks, split
from poise.models.base import MechanicalModel


def held_jacobian(b: ActuationBlocks) -> FloatArray:
    """Jacobian of the actuators-to-task map on E: ``J = Ja − Ju Huu⁻¹ Hua`` (seed 000, Alg. 1).

    From ``G_u(qa, q̄u(qa)) = 0``: ``∂q̄u/∂qa = −Huu⁻¹ Hua``, and the chain rule.
    """
    if b.Huu.size == 0:
        return b.Ja
    return b.Ja - b.Ju @ np.linalg.solve(b.Huu, b.Hua)


def norm2(v: FloatArray) -> float:
    """‖v‖₂ of a short vector (``numpy.linalg.norm`` costs ~10 µs of call overhead)."""
    return math.sqrt(float(v @ v))


def smallest_singular(a: FloatArray) -> float:
    """``σ_min(a)`` (NaN for an empty matrix)."""
    return float(np.linalg.svd(a, compute_uv=False).min()) if a.size else math.nan


def held_fields(b: ActuationBlocks) -> dict[str, Any]:
    """What a result reports of the blocks at its configuration (``eig_Huu``: eigenvalues of
    ``½ (H_uu + H_uuᵀ)``, ascending)."""
    huu = b.Huu
    eig = np.linalg.eigvalsh(0.5 * (huu + huu.T)) if huu.size else np.zeros(0)
    return {"qa": b.qa, "qu": b.qu, "x": b.x, "Gu": b.Gu, "eig_Huu": eig}


def check_target(model: MechanicalModel, target: ArrayLike) -> FloatArray:
    """``target`` validated (``task_dim`` finite numbers).

    Raises:
        poise.ik.result.InvalidInputError: wrong size or non-finite values.
    """
    return as_vector(target, model.task_dim, "target")


def start_configuration(model: MechanicalModel, q0: ArrayLike | None) -> FloatArray:
    """``q0`` validated (``n`` finite numbers; ``None``: zero)."""
    if q0 is None:
        return np.zeros(model.n)
    return as_vector(q0, model.n, "start configuration q0")


def begin(
    model: MechanicalModel, target: ArrayLike, q0: ArrayLike | None, record_path: bool,
) -> tuple[float, FloatArray, FloatArray, list[float], list[FloatArray] | None]:
    """Start a solve: clock, validated target and start, empty history, path (if recorded)."""
    t0 = time.perf_counter()
    checked = check_target(model, target)
    q = start_configuration(model, q0)
    return t0, checked, q, [], ([q] if record_path else None)


@dataclass(frozen=True)
class HeldOptions:
    """Stopping rules shared by the held-configuration solvers.

    Attributes:
        tol: task tolerance εx [task units, m].
        statics_tol: statics tolerance εE on ``‖G_u‖`` [N·m].
        max_iter: iteration cap (of each attempt).
        stall_window: iterations without a 1e-3 relative improvement of the residual that
            count as a stall.
        reject_unstable: a converged but unstable configuration gets status ``unstable`` and
            ``success = False``.
        restarts: Algorithm 2 only: further attempts, from the held configurations of
            :func:`poise.ik.held_limits.restart_starts`, after an attempt that did not converge
            (0: the paper's single run).
    """

    tol: float = 1e-6
    statics_tol: float = 1e-9
    max_iter: int = 500
    stall_window: int = 50
    reject_unstable: bool = False
    restarts: int = 4


@dataclass(frozen=True)
class Attempt:
    """One run of a held solver's iteration from one start (numpy loop or compiled kernel).

    Attributes:
        q: the last iterate (n,).
        status: converged, iteration cap or stalled (the caller decides ``unreachable``).
        iterations: iterations run.
        history: task error per iteration [task units].
        sigma_min: smallest singular value of the method's Jacobian at ``q`` (Algorithm 1:
            the held Jacobian ``J``; Algorithm 2: ``Ja``).
        path: the iterates (k, n) when recorded.
        fields: ``qa, qu, x, Gu, eig_Huu`` at ``q`` (:func:`_held_fields`; None: evaluate
            them when the result is made).
    """

    q: FloatArray
    status: Status
    iterations: int
    history: FloatArray
    sigma_min: float
    path: FloatArray | None = None
    fields: dict[str, Any] | None = None

    def qa(self, model: MechanicalModel) -> FloatArray:
        """The actuated coordinates of ``q`` (m,)."""
        return self.fields["qa"] if self.fields is not None else split(model, self.q)[0]

    @property
    def error(self) -> float:
        """The last task error [task units]."""
        return float(self.history[-1]) if self.history.size else math.inf


def finish(
    model: MechanicalModel,
    attempt: Attempt,
    target: FloatArray,
    options: HeldOptions,
    t0: float,
    message: str = "",
    *,
    status: Status | None = None,
    restarts: int = 0,
) -> IKResult:
    """The result of a solve from its returned attempt: the held-configuration fields at its
    ``q`` (stability verdict of ``H_uu``), ``status`` (default: the attempt's) turned into
    ``unstable`` when ``options.reject_unstable`` refuses an unstable equilibrium, and a message
    for every failure; ``wall_time`` from ``t0`` [s]."""
    fields = (attempt.fields if attempt.fields is not None
              else held_fields(blocks(model, attempt.q)))
    eig = fields["eig_Huu"]
    min_eig = float(eig[0]) if eig.size else math.inf
    stable = classify(eig) == "stable"
    status = attempt.status if status is None else status
    position_error = norm2(target - fields["x"])
    success = status == Status.CONVERGED
    if success and options.reject_unstable and not stable:
        status, success = Status.UNSTABLE, False
        message = message or (
            f"held configuration is unstable (min eig H_uu = {min_eig:.3g})")
    if not success and not message:
        message = (f"{status.value}: task error {position_error:.3g} after "
                   f"{attempt.iterations} iterations")
    return IKResult(
        q=attempt.q, success=success, status=status, iterations=attempt.iterations,
        restarts=restarts, position_error=position_error,
        residual_history=attempt.history, sigma_min=attempt.sigma_min,
        wall_time=time.perf_counter() - t0, message=message, path=attempt.path,
        qa=fields["qa"], qu=fields["qu"], x=fields["x"],
        statics_residual=norm2(fields["Gu"]), min_eig_Huu=min_eig,
        stable=stable,
    )


def stop_rule(history: list[float], iterations: int, options: HeldOptions, converged: bool,
              may_stall: bool = True) -> Status | None:
    """The stopping rules after ``history`` got this iteration's residual: converged, the
    iteration cap (``ITERATION_CAP``), a stall, or ``None`` to go on."""
    if converged:
        return Status.CONVERGED
    if iterations == options.max_iter:
        return Status.ITERATION_CAP
    if may_stall and _stalled(history, options.stall_window):
        return Status.STALLED
    return None


def _stalled(history: list[float], window: int) -> bool:
    """The residual fell by less than 1e-3 relative over the last ``window`` iterations."""
    if len(history) <= window:
        return False
    return history[-1] > (1.0 - 1e-3) * min(history[:-window])


def compiled_solvers(model: MechanicalModel, compiled: bool) -> Any:
    """The compiled solvers of ``model`` (:class:`poise.ik.held_kernels.HeldKernels`), or None
    when not asked for or the model's family has no kernels."""
    if not compiled:
        return None
    from poise.ik.held_kernels import held_kernels

    return held_kernels(model)


def at_actuator_limit(model: MechanicalModel, qa: FloatArray) -> bool:
    upper, lower = at_limits(qa, model.qa_min, model.qa_max)
    return bool(np.any(upper | lower))


def limited_actuators(model: MechanicalModel, qa: FloatArray) -> list[int]:
    upper, lower = at_limits(qa, model.qa_min, model.qa_max)
    return [int(i) for i in np.flatnonzero(upper | lower)]
