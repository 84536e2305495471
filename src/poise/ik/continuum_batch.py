"""Vectorised batch engine for the continuum solvers: many targets at once.

Runs exactly the iteration of :func:`poise.ik.continuum.solve` (same kernels
:func:`~poise.ik.continuum.evaluate` and :func:`~poise.ik.continuum.step`, stacked over targets:
``(B, 6, k)`` Jacobians, batched Gram eigen-decompositions), keeping only the still-running
targets in the arrays. Besides the final state it records, for several tolerances at once, the
first iteration at which ``e_k < tol`` and whether some segment was coiled then, so one run to the
largest cap with the smallest tolerance answers every (cap, tolerance) pair of a benchmark:
success within cap c at tolerance τ ⇔ ``0 ≤ first_hit[τ] ≤ c``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from poise.ik.continuum import (
    ContinuumOptions,
    augment,
    evaluate,
    initial_state,
    restoring_phase,
    split_state,
    step,
    to_q,
)
from poise.ik.result import FloatArray, InvalidInputError, Status
from poise.models.cc3d import CC3D


@dataclass(frozen=True)
class BatchResult:
    """Per-target outcome of :func:`solve_batch` (B targets, T tolerances).

    Attributes:
        q: final ``(κ, φ)`` per target (B, 2N).
        iterations: updates applied when the target stopped (B,).
        status: :class:`Status` value per target (B,) (same rules as the single solver).
        success: tolerance met with every ``|κ_i L_i| ≤ 2π`` (B,).
        converged: stopping tolerance met, coiled or not (B,).
        coiled: some segment coiled past 2π at the final iterate (B,).
        metric: final ``e`` (B,).
        length_error: VVL: ``max_i |l_i − L_i|`` of the final virtual lengths; else 0 (B,).
        tols: the recorded tolerances (T,).
        first_hit: first k with ``e_k < tols[j]`` (B, T); −1 if never.
        coiled_at_hit: coil flag at that iterate (B, T).
        history: ``e_k`` (B, max_iter + 1), NaN after the stop (only when requested).
    """

    q: FloatArray
    iterations: NDArray[np.int64]
    status: NDArray[np.str_]
    success: NDArray[np.bool_]
    converged: NDArray[np.bool_]
    coiled: NDArray[np.bool_]
    metric: FloatArray
    length_error: FloatArray
    tols: FloatArray
    first_hit: NDArray[np.int64]
    coiled_at_hit: NDArray[np.bool_]
    history: FloatArray | None = None


def solve_batch(
    model: CC3D,
    targets: ArrayLike,
    q0: ArrayLike | None = None,
    options: ContinuumOptions | None = None,
    tols: ArrayLike | None = None,
    record_history: bool = False,
    **overrides,
) -> BatchResult:
    """Solve ``T_e(q) = T_D`` for B targets ``(B, 4, 4)`` with one method.

    Args:
        model: the arm.
        targets: desired tip poses (B, 4, 4).
        q0: start, (2N,) for all or (B, 2N); default the neutral configuration.
        options: as for the single solver; the stopping tolerance is ``min(options.tol, tols)``.
        tols: extra tolerances whose first-hit iteration is recorded.
        record_history: keep every ``e_k`` (B, max_iter + 1).
    """
    opts = options or ContinuumOptions()
    if overrides:
        opts = ContinuumOptions(**{**opts.__dict__, **overrides})
    T_D, start = _checked(model, targets, q0)
    B = T_D.shape[0]
    x_all = initial_state(np.broadcast_to(start, (B, model.n)), opts.method, model.L,
                          opts.start_length_ratio)
    tol_arr = np.array(sorted({opts.tol, *([] if tols is None else np.ravel(tols).tolist())}),
                       dtype=float)
    rec = _Record.empty(x_all, tol_arr, opts.max_iter, record_history)
    _iterate(model, T_D, opts, rec)
    return rec.result(opts, model.L)


def _checked(model: CC3D, targets: ArrayLike,
             q0: ArrayLike | None) -> tuple[FloatArray, FloatArray]:
    """The targets (B, 4, 4) and the start, (2N,) or (B, 2N); InvalidInputError if not."""
    T_D = np.asarray(targets, dtype=float)
    if T_D.ndim != 3 or T_D.shape[1:] != (4, 4) or not np.all(np.isfinite(T_D)):
        raise InvalidInputError(f"targets: expected finite (B, 4, 4), got {T_D.shape}")
    B = T_D.shape[0]
    start = np.zeros(model.n) if q0 is None else np.asarray(q0, dtype=float)
    if start.shape not in ((model.n,), (B, model.n)) or not np.all(np.isfinite(start)):
        raise InvalidInputError(f"q0: expected finite ({model.n},) or ({B}, {model.n})")
    return T_D, start


@dataclass
class _Record:
    """Per-target records of a batch run (fields as in :class:`BatchResult`); ``x_all`` holds
    the start, then each target's state when it stops."""

    x_all: FloatArray
    tols: FloatArray
    first_hit: NDArray[np.int64]
    coiled_at_hit: NDArray[np.bool_]
    iterations: NDArray[np.int64]
    metric: FloatArray
    coiled: NDArray[np.bool_]
    stalled: NDArray[np.bool_]
    history: FloatArray | None

    @classmethod
    def empty(cls, x_all: FloatArray, tols: FloatArray, max_iter: int,
              record_history: bool) -> _Record:
        B = x_all.shape[0]
        return cls(x_all=x_all, tols=tols,
                   first_hit=np.full((B, tols.size), -1, dtype=np.int64),
                   coiled_at_hit=np.zeros((B, tols.size), dtype=bool),
                   iterations=np.zeros(B, dtype=np.int64), metric=np.full(B, np.nan),
                   coiled=np.zeros(B, dtype=bool), stalled=np.zeros(B, dtype=bool),
                   history=np.full((B, max_iter + 1), np.nan) if record_history else None)

    def iterate(self, idx: NDArray[np.intp], k: int, e: FloatArray,
                coiled: NDArray[np.bool_]) -> None:
        """Iterate ``k`` of the running targets ``idx``: history and first hits."""
        if self.history is not None:
            self.history[idx, k] = e
        hit = (e[:, None] < self.tols) & (self.first_hit[idx] < 0)
        rows, cols = np.nonzero(hit)
        self.first_hit[idx[rows], cols] = k
        self.coiled_at_hit[idx[rows], cols] = coiled[rows]

    def stop(self, fin: NDArray[np.intp], k: int, x: FloatArray, e: FloatArray,
             coiled: NDArray[np.bool_]) -> None:
        """The targets ``fin`` stop at iterate ``k`` with state ``x``, error ``e``."""
        self.x_all[fin] = x
        self.iterations[fin] = k
        self.metric[fin] = e
        self.coiled[fin] = coiled

    def result(self, opts: ContinuumOptions, L: FloatArray) -> BatchResult:
        """The statuses (same rules as the single solver) and the final states."""
        B = self.x_all.shape[0]
        converged = self.first_hit[:, 0] >= 0
        converged &= self.metric < self.tols[0]
        status = np.full(B, Status.ITERATION_CAP.value, dtype=object)
        status[self.stalled] = Status.STALLED.value
        status[converged] = Status.CONVERGED.value
        status[self.coiled] = Status.DEADLOCK.value
        _, _, length = split_state(self.x_all, opts.method, L)
        length_error = (np.max(np.abs(length - L), axis=-1) if opts.method == "vvl"
                        else np.zeros(B))
        return BatchResult(
            q=to_q(self.x_all, opts.method),
            iterations=self.iterations,
            status=status.astype(str),
            success=converged & ~self.coiled,
            converged=converged,
            coiled=self.coiled,
            metric=self.metric,
            length_error=length_error,
            tols=self.tols,
            first_hit=self.first_hit,
            coiled_at_hit=self.coiled_at_hit,
            history=self.history,
        )


def _iterate(model: CC3D, T_D: FloatArray, opts: ContinuumOptions, rec: _Record) -> None:
    """The iteration of the single solver, stacked over the still-running targets (stopping
    at ``e < min(tols)``, the cap, or a non-finite step)."""
    L = model.L
    stop_tol = rec.tols[0]
    B = T_D.shape[0]
    idx = np.arange(B)  # the running targets
    x = rec.x_all.copy()
    T = T_D
    restoring = np.full(B, opts.method != "vvl")
    for k in range(opts.max_iter + 1):
        V, J, e, coiled, e_virtual = evaluate(x, T, opts, L)
        restoring = restoring_phase(restoring, e_virtual, k, opts)
        rec.iterate(idx, k, e, coiled)
        done = e < stop_tol
        if k == opts.max_iter:
            done[:] = True
        x_next = x.copy()
        run = ~done
        if np.any(run):
            Jr, Vr = J[run], V[run]
            if opts.method == "vvl":
                Jr, Vr = augment(x[run], Jr, Vr, L, restoring[run])
            x_next[run] = step(x[run], Jr, Vr, opts, L)
            bad = run & ~np.all(np.isfinite(x_next), axis=-1)
            rec.stalled[idx[bad]] = True
            done |= bad
        if np.any(done):
            rec.stop(idx[done], k, x[done], e[done], coiled[done])
            keep = ~done
            idx, T, x_next, restoring = idx[keep], T[keep], x_next[keep], restoring[keep]
        if idx.size == 0:
            break
        x = x_next
