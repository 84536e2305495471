"""The compiled path of :func:`poise.ik.clik.solve`: Levenberg–Marquardt IK of ``dh_chain``
models (the Panda) with every iteration and restart inside one Numba call.

``solve(model, target, method="lm")`` takes this path when the model is a
:class:`~poise.models.dh.DHChain` and the call uses only options it implements
(:func:`unavailable_reason`); ``compiled=False`` forces the numpy reference of
:mod:`poise.ik.clik`, ``compiled=True`` refuses to fall back. The iteration is that of
:mod:`poise.kernels.dh_ik`:

    e  = [p_d − p_e ; √w_o ϑ u]       (angle-axis ϑ u of R_d R_eᵀ)
    Δq = J_wᵀ (J_w J_wᵀ + μ I)⁻¹ e,  μ = w_e ½‖e‖² + w_n      (Sugihara)
    q  ← Π(q + Δq)                    (whole turns back into the limits, else joint
                                       clamping as in the reference, then clamped)

What it shares with the reference: the target forms and their validation, the start
(``q0``, else ``q_home``, clamped into the limits), the converged test on the task error
``√(‖p_d − p_e‖² + ϑ²) ≤ tol`` (same ϑ), the iteration cap, the stall rule
(``r_k > (1 − stall_rtol) r_{k − stall_window}``), ``restarts`` random attempts uniform within
the limits, the best-attempt choice, every iterate within the limits, and the statuses and
messages (:func:`poise.ik.clik.outcome`). What differs, and why:

* no line search: every step is taken (after joint clamping, one round, as the reference's);
  an attempt that stops converging fast is abandoned by the stall rule and restarted, which
  costs a few µs here. A joint that leaves its limits is first moved by whole turns when that
  lands inside (the same pose). When no attempt converged, the best one is *polished*: up to
  ``max_iter`` more steps from its end with the reference's line search (a step that raises
  the error is halved) and its patient stall rule (10 steps, 1e-4), so that an unreachable
  target still gets the closest configuration, as from the reference; ``unreachable`` is the
  reference's own singular-stationary test at that polished end (the reference asks it of
  every attempt's end);
* the stall rule defaults to ``stall_window = 6``, ``stall_rtol = 0.1`` (abandon an attempt
  whose error fell by less than 10 % in 6 steps), not the reference's 10 and 1e-4;
* the default damping is ``ErrorDamping(w_e=0.1, w_n=1e-6)``, not ``w_n = 1e-5``: at a
  solution near a singularity (σ_min ~ 1e-3) the error along the weak direction shrinks by
  ``w_n / (σ_min² + w_n)`` per step, 0.9 with 1e-5 (a crawl the stall rule abandons) and 0.5
  with 1e-6 (on 3 × 10,000 benchmark targets: ~10 % fewer steps in all, and no target that
  needed all 51 attempts);
* the orientation error is the angle-axis vector ``ϑ u`` (gain 1), the reference's default is
  ``k_Po ε_de = 2 sin(ϑ/2) u``: the same to first order; ``ϑ u`` is the exact logarithm of
  the rotation error, where ``2 sin(ϑ/2)`` saturates as ϑ → π;
* restart configurations come from Numba's generator seeded with ``seed`` (reproducible, but
  not the numpy ``default_rng(seed)`` sequence of the reference);
* ``sigma_min`` is computed from the eigenvalues of ``J Jᵀ`` (exact to ~1e-8 σ_max at a
  singularity, where the SVD is exact to ~1e-16 σ_max).

The kernels compile on the first call (seconds) or load from Numba's on-disk cache; call
:func:`warm_up` before timing or before a control loop.
"""

from __future__ import annotations

import math
import random
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from poise.ik.clik import (
    DEFAULT_STALL_RTOL,
    DEFAULT_STALL_WINDOW,
    _Attempt,
    _evaluator,
    _singular_stationary,
    outcome,
)
from poise.ik.clik_options import DEFAULT_MAX_ITER, damping_rule, integer, positive, resolve
from poise.ik.damping import ErrorDamping, FixedDamping
from poise.ik.result import FloatArray, IKResult, Status
from poise.ik.targets import Target
from poise.models.dh import DHChain

DEFAULT_DAMPING = ErrorDamping(w_e=0.1, w_n=1e-6)
"""``μ = 0.1 · ½‖e‖² + 1e-6`` (module docstring)."""
STALL_WINDOW = 6
STALL_RTOL = 0.1
"""Abandon an attempt whose task error fell by less than 10 % over 6 steps."""

_STATUS = (Status.CONVERGED, Status.ITERATION_CAP, Status.STALLED, Status.SINGULAR)
"""Kernel outcome code → status (:mod:`poise.kernels.dh_ik`)."""


def unavailable_reason(model: Any, *, method: str, damping: Any = None, gain: Any = None,
                       secondary: Any = None, step: float = 1.0, line_search: bool = True,
                       record_path: bool = False) -> str | None:
    """Why the compiled solver does not apply to this call of :func:`poise.ik.clik.solve`
    (None when it does)."""
    if not isinstance(model, DHChain):
        return (f"model {getattr(model, 'name', model)!r} is not a dh_chain (the compiled "
                "solver is for serial chains)")
    if method != "lm":
        return f"method {method!r}: the compiled solver implements 'lm' only"
    if (secondary is None and gain is None and step == 1.0 and line_search and not record_path
            and (damping is None or _compiled_damping(damping))):
        return None
    reasons = [name for name, used in (
        ("a secondary objective", secondary is not None), ("gain", gain is not None),
        ("step != 1", step != 1.0), ("line_search=False", not line_search),
        ("record_path", record_path),
        ("a damping rule other than ErrorDamping or a fixed λ > 0",
         damping is not None and not _compiled_damping(damping))) if used]
    return "the compiled solver does not implement " + ", ".join(reasons)


def _compiled_damping(damping: Any) -> bool:
    if isinstance(damping, ErrorDamping):
        return True
    if isinstance(damping, FixedDamping):
        return damping.lam > 0.0
    return (isinstance(damping, (int, float, np.floating)) and not isinstance(damping, bool)
            and damping > 0.0)


def _damping_terms(damping: Any) -> tuple[float, float]:
    """``(w_e, w_n)`` of ``μ = w_e ½‖e‖² + w_n`` (a fixed λ: ``(0, λ²)``)."""
    rule = DEFAULT_DAMPING if damping is None else damping_rule("lm", damping)
    if isinstance(rule, ErrorDamping):
        return rule.w_e, rule.w_n
    assert isinstance(rule, FixedDamping)
    return 0.0, rule.lam * rule.lam


@dataclass(frozen=True)
class _Kernels:
    args: tuple[Any, ...]
    solve: Any


_PACKED: weakref.WeakKeyDictionary[Any, _Kernels] = weakref.WeakKeyDictionary()


def _kernels(model: Any) -> _Kernels:
    """The packed model and the solver kernel (imports Numba on first use). A ``DHChain`` is
    frozen, so each model object is packed once (and forgotten with it)."""
    found = _PACKED.get(model)
    if found is None:
        from poise.kernels import dh_chain, dh_ik

        found = _PACKED[model] = _Kernels(tuple(dh_chain.pack_dh(model)), dh_ik.solve)
    return found


def solve(model: Any, tgt: Target, start: FloatArray, *, tol: float, max_iter: int | None,
          restarts: int, seed: int | None, damping: Any, orientation_weight: float,
          stall_window: int | None, stall_rtol: float | None, beyond_reach: bool,
          t_start: float) -> IKResult:
    """Solve on the kernel; the arguments are those of :func:`poise.ik.clik.solve`
    (``tgt`` parsed, ``start`` (n,) checked; the kernel clamps it into the limits), validated
    the same way."""
    tol = positive("tol", tol)
    max_iter = DEFAULT_MAX_ITER["lm"] if max_iter is None else integer("max_iter", max_iter, 0)
    restarts = integer("restarts", restarts, 0)
    window = STALL_WINDOW if stall_window is None else integer(
        "stall_window", stall_window, 1)
    rtol = STALL_RTOL if stall_rtol is None else positive(
        "stall_rtol", stall_rtol, allow_zero=True)
    sw = math.sqrt(positive("orientation_weight", orientation_weight))
    w_e, w_n = _damping_terms(damping)
    seed = random.getrandbits(32) if seed is None else integer("seed", seed, 0) % 2**32
    k = _kernels(model)
    full = tgt.rotation is not None
    Rd = tgt.rotation if full else np.eye(3)
    q, code, iterations, attempts, total, pe, oe, sigma_min, history, x = k.solve(
        k.args, np.ascontiguousarray(Rd, dtype=np.float64), tgt.position, full,
        np.ascontiguousarray(start, dtype=np.float64), tol, sw, w_e, w_n, max_iter,
        0 if beyond_reach else restarts, seed, window, rtol, DEFAULT_STALL_WINDOW,
        DEFAULT_STALL_RTOL)

    def stationary() -> bool:
        """The reference's test (:func:`poise.ik.clik._singular_stationary`) at the returned
        configuration: the end of the best attempt, polished (only for a failed solve)."""
        opts = resolve("lm", damping, None, orientation_weight, tol, max_iter, 0, 1.0, 1,
                        0.0, 1.0, tgt)
        att = _Attempt()
        att.q = q
        att.e, _, _, att.J = _evaluator(model, tgt)(q)
        return _singular_stationary(att, opts, np.asarray(model.q_min, dtype=float),
                                    np.asarray(model.q_max, dtype=float))

    status, message = outcome(_STATUS[code], iterations, math.hypot(pe, oe), attempts, total,
                              max_iter, beyond_reach, stationary,
                              "the best attempt, polished,")
    return IKResult(
        q=q, success=status == Status.CONVERGED, status=status, iterations=iterations,
        restarts=attempts - 1, position_error=pe, orientation_error=oe,
        residual_history=history, sigma_min=sigma_min,
        wall_time=time.perf_counter() - t_start, x=x, message=message)


def warm_up(model: Any) -> Any:
    """Compile (or load from Numba's cache) the solver for ``model`` before the first timed
    or real-time solve: one pose and one position target through
    :func:`poise.ik.clik.solve`, i.e. with exactly the argument types it passes. Returns a
    :class:`poise.kernels.warmup.WarmUpReport` (seconds per target kind)."""
    from poise.ik.clik import solve as clik_solve
    from poise.kernels.warmup import WarmUpReport

    times = {}
    t_start = time.perf_counter()
    q = np.asarray(model.q_home, dtype=float)
    for name, target in (("lm pose", model.pose(q)), ("lm position", model.fk(q))):
        t0 = time.perf_counter()
        clik_solve(model, target, method="lm", compiled=True)
        times[name] = time.perf_counter() - t0
    return WarmUpReport(str(model.name), time.perf_counter() - t_start, times)
