"""The offline held-IK solves on the kernels, as :func:`poise.ik.held.algorithm1` and
:func:`~poise.ik.held.algorithm2` call them.

``held_kernels(model)`` packs a model once (kept while the model object lives) and returns a
:class:`HeldKernels` whose methods run one attempt of a solver in compiled code
(:mod:`poise.kernels.held_solve`) and hand back the same
:class:`~poise.ik.held.Attempt` as the numpy loops, with the final blocks already evaluated;
``None`` for a family without kernels. Compile first (:func:`poise.kernels.warm_up`), or the
first solve compiles (or loads from Numba's cache).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from poise.ik import statics as ref_statics
from poise.ik.held_common import Attempt, HeldOptions
from poise.ik.result import Status
from poise.kernels import held_solve, steps
from poise.kernels.blocks import Layout
from poise.kernels.packed import PackedModel, f64, has_kernels, pack
from poise.models.base import FloatArray, MechanicalModel

#: Attempt status codes of :mod:`~poise.kernels.held_solve` → :class:`Status`.
STATUSES = {held_solve.CONVERGED: Status.CONVERGED,
            held_solve.ITERATION_CAP: Status.ITERATION_CAP,
            held_solve.STALLED: Status.STALLED}

_BY_MODEL: weakref.WeakKeyDictionary[Any, HeldKernels] = weakref.WeakKeyDictionary()


class HeldKernels:
    """The compiled offline solves of one model (see the module docstring)."""

    def __init__(self, model: MechanicalModel, packed: PackedModel | None = None) -> None:
        self.model = model
        self.packed = packed if packed is not None else pack(model)
        self.args = self.packed.args
        self.layout = Layout(model.n, model.m, model.task_dim)
        self._cut = self.layout.slices()  # q, qa, qu, x, Ga, Gu
        self.qa_min = f64(model.qa_min).copy()
        self.qa_max = f64(model.qa_max).copy()

    def statics(self, qa: FloatArray, qu0: FloatArray, tol: float
                ) -> tuple[FloatArray, FloatArray, int, bool]:
        """:func:`~poise.kernels.held_solve.statics_solve` with the reference's defaults:
        ``(state, qu, iterations, converged)``."""
        return held_solve.statics_solve(  # type: ignore[no-any-return]
            self.args, f64(qa), f64(qu0), float(tol), ref_statics.MAX_ITER,
            ref_statics.MIN_CURVATURE, ref_statics.NEGATIVE_CURVATURE_STEP)

    def statics_at(self, tol: float):  # type: ignore[no-untyped-def]
        """``(qa, qu0) -> (q, h(q), converged)`` for
        :func:`poise.ik.held_limits.restart_starts`."""
        n, cut = self.model.n, self.layout.slices()["x"]

        def statics(qa: FloatArray, qu0: FloatArray) -> tuple[FloatArray, FloatArray, bool]:
            state, _, _, converged = self.statics(qa, qu0, tol)
            return state[:n].copy(), state[cut].copy(), bool(converged)

        return statics

    def algorithm1(self, target: FloatArray, q0: FloatArray, *, update: str, damping: float,
                   gain: float, dt: float, options: HeldOptions,
                   record_path: bool) -> Attempt:
        """One attempt of Algorithm 1 (``update`` already checked by the caller)."""
        out = held_solve.alg1_attempt(
            self.args, f64(target), f64(q0), self.qa_min, self.qa_max,
            steps.UPDATE_CODES[update], float(damping), float(gain), float(dt),
            float(options.tol), float(options.statics_tol), ref_statics.MAX_ITER,
            ref_statics.MIN_CURVATURE, ref_statics.NEGATIVE_CURVATURE_STEP,
            int(options.max_iter), int(options.stall_window), bool(record_path))
        return self._attempt(out, record_path)

    def algorithm2(self, target: FloatArray, q0: FloatArray, *, gamma_z: float,
                   gamma_e: float, dt: float, damping: float, max_step: float | None,
                   options: HeldOptions, record_path: bool) -> Attempt:
        """One attempt of Algorithm 2 (projector form, scalar gains)."""
        out = held_solve.alg2_attempt(
            self.args, f64(target), f64(q0), self.qa_min, self.qa_max, float(gamma_z),
            float(gamma_e), float(dt), float(damping),
            math.inf if max_step is None else float(max_step), float(options.tol),
            float(options.statics_tol), int(options.max_iter), int(options.stall_window),
            bool(record_path))
        return self._attempt(out, record_path)

    def _attempt(self, out: tuple[Any, ...], record_path: bool) -> Attempt:
        state, code, iterations, history, sigma, eig, path = out
        if code == held_solve.SINGULAR:
            raise np.linalg.LinAlgError("Singular matrix")
        cut = self._cut
        fields = {key: state[cut[key]] for key in ("qa", "qu", "x", "Gu")}
        fields["eig_Huu"] = eig
        return Attempt(state[cut["q"]], STATUSES[int(code)], int(iterations), history,
                       float(sigma), path if record_path else None, fields)


def held_kernels(model: MechanicalModel) -> HeldKernels | None:
    """The compiled solves of ``model`` (packed once per model object), or None when its
    family has no kernels."""
    if not has_kernels(model):
        return None
    found = _BY_MODEL.get(model)
    if found is None:
        found = _BY_MODEL[model] = HeldKernels(model)
    return found


__all__ = ["STATUSES", "HeldKernels", "held_kernels"]
