"""Compiled steppers: the interface of :mod:`poise.motion.stepper` on the step kernels.

``make_compiled_stepper(name, model)`` returns an object with the reference steppers' methods
and properties (``reset``, ``propose``, ``commit``; ``q_bar``, ``qa``, ``tau``, ``residual``,
``x_bar``, ``name``), or ``None`` when the model's family has no kernels, so a caller can
switch with ``make_compiled_stepper(name, model) or make_stepper(name, model)``.

The state lives in one float64 vector (:mod:`poise.kernels.blocks`) that every commit replaces
by a new one; the properties are views of it, so an array a caller got from one cycle is never
changed by the next. Start-up work stays in Python: ``reset`` of Algorithm 1 and its rare
fallback (Newton re-solve not converged, or ``H_uu`` not positive definite) run the numpy
statics solver :func:`poise.ik.statics.solve_statics`, exactly as the reference does.

The per-cycle constants (statics tolerance, Newton iterations, largest step) are read from
:mod:`poise.motion.stepper`, their one owner, when a stepper is made (not at import:
the controller imports this module).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from poise.ik.result import InvalidInputError
from poise.ik.statics import solve_statics
from poise.kernels import cycle as one_call
from poise.kernels import guard, steps
from poise.kernels import wire as wire_kernel
from poise.kernels.blocks import Layout
from poise.kernels.packed import PackedModel, f64, has_kernels, pack
from poise.models.actuation import join, split
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.stepper import FoldHold

if TYPE_CHECKING:
    from poise.motion.params import LiveParams

_NO_MOVE = np.zeros(0)
#: No projection of the feedback error (the kernels' empty (0, 0) array).
_NO_PROJECTION = np.zeros((0, 0))


#: The knobs of the live parameters, in the order of ``_values()[1:]``.
_PARAM_KNOBS = (one_call.K_UPDATE, one_call.K_GAMMA, one_call.K_GAMMA_Z, one_call.K_GAMMA_E,
                one_call.K_DAMPING)


class CompiledStepper:
    """Common state of the compiled steppers (see :class:`poise.motion.stepper.Stepper`)."""

    name = ""
    #: Status bits of :meth:`guard`.
    NONFINITE, HELD = guard.NONFINITE, guard.HELD
    #: A planned move set the actuators of the last cycle (:meth:`cycle`; as
    #: :attr:`poise.motion.stepper.Stepper.moving`).
    moving = False
    #: The outcome of :meth:`wire` that committed a cycle and made its setpoint frame.
    WIRE_OK = wire_kernel.WIRE_OK

    def __init__(self, model: MechanicalModel, packed: PackedModel | None = None) -> None:
        from poise.motion import stepper as reference  # the constants' owner

        self.model = model
        self.packed = packed if packed is not None else pack(model)
        self.statics_tol = float(reference.STATICS_TOL)
        self.newton_iter = int(reference.NEWTON_ITER)
        self.max_step = float(reference.MAX_STEP)
        self._args = self.packed.args
        self.layout = Layout(model.n, model.m, model.task_dim)
        cut = self.layout.slices()
        self._q, self._qa, self._qu = cut["q"], cut["qa"], cut["qu"]
        self._x, self._ga, self._gu = cut["x"], cut["Ga"], cut["Gu"]
        self._m, self._k = int(model.m), int(model.task_dim)
        self._C, self._C_inv = self.packed.arrays.C, self.packed.arrays.C_inv
        self._A = np.ascontiguousarray(self._C[: self._m])  # qa = A q
        self._finite_end = int(self._gu.stop)  # q | qa | qu | x | Ga | Gu
        self._state: FloatArray = steps.blocks(self._args, np.zeros(model.n))
        self._p: object = None  # the live parameters converted last, and their conversion
        self._pv: tuple[Any, ...] = ()
        self._code = steps.ALGORITHM_CODES[self.name]
        self._qa_min = f64(model.qa_min)
        self._qa_max = f64(model.qa_max)
        #: ``[qa; qu]`` last proposed (the state's own until the first ``propose``)
        self._proposed = np.concatenate([self._state[self._qa], self._state[self._qu]])
        self._knobs = np.zeros(one_call.KNOBS)  # what cycle() passes the kernel
        for at, value in ((one_call.K_ALGORITHM, self._code), (one_call.K_X_LO, self._x.start),
                          (one_call.K_X_HI, self._x.stop), (one_call.K_QA_LO, self._qa.start),
                          (one_call.K_FINITE_END, self._finite_end)):
            self._knobs[at] = value
        #: The LiveParams the knobs hold (with the per-cycle constants read when it changes).
        self._knobs_of: object = None
        self._limit_rows = np.zeros((one_call.LIMIT_ROWS, self._m))
        self._limit_rows_of: tuple[Any, ...] = (None, None, None)  # the arrays they hold
        self._scratch = np.zeros(model.n + self._m)  # the kernel's proposal and q̄a sent
        self.cycle_finite = True

    def _propose(self, p: LiveParams, x: FloatArray | None, dt: float) -> FloatArray:
        target, update, gamma, gamma_z, gamma_e, damping = (
            self._pv if p is self._p else self._values(p))
        state = self._state
        out, status = steps.propose(self._C, self._C_inv, self._m, self._k, self._code, state,
                                    state[self._x] if x is None else f64(x), target, update,
                                    gamma, gamma_z, gamma_e, damping, float(dt), self.max_step,
                                    self._qa_min, self._qa_max)
        if status != steps.OK:
            raise np.linalg.LinAlgError(f"{self.name} step: singular matrix")
        self._proposed = out
        return out[:self._m]

    def _commit(self, qa: FloatArray) -> None:
        new, status = steps.commit(self._args, self._code, self._state, qa, self._proposed,
                                   self.statics_tol, self.newton_iter)
        self._accept(new, int(status), qa)

    def _accept(self, new: FloatArray, status: int, qa: FloatArray) -> None:
        """The state after a commit of ``qa`` that returned ``new`` and ``status``."""
        self._state = new

    def _check(self, p: LiveParams, update: int) -> None:
        """Refuse parameters the algorithm cannot step with (before any kernel runs)."""

    def cycle(self, p: LiveParams, q: FloatArray, fb: bool, move_qa: FloatArray | None,
              windup: bool, saturated: bool, arrays: tuple[FloatArray, ...], dt: float,
              projection: FloatArray | None = None) -> tuple[FloatArray, FloatArray, int]:
        """One whole cycle in one kernel call (:func:`poise.kernels.cycle.cycle`): ``h(q)``,
        :meth:`propose` (``x`` the measured ``h(q)`` in feedback mode ``fb``, else x̄), the
        guard (the approach move ``move_qa`` or, with ``windup``, the anti-windup; the safety
        layer; ``arrays``: the anti-windup band, ``qa_min``, ``qa_max`` and the rate limits
        as float64 arrays), :meth:`commit` of what the guard let through. ``projection``:
        ``Π`` (k, k, float64, C order) of the measured error in feedback
        (:mod:`poise.motion.agreement`), None: none.

        Returns:
            ``(h(q), x used by the IK (h(q) in feedback, whose error the IK takes
            projected when ``projection`` is given), guard status)``. With the status bit
            :data:`NONFINITE` nothing is committed (the caller faults); else
            :attr:`cycle_finite` tells whether the new state is finite.

        Raises:
            numpy.linalg.LinAlgError: a singular matrix in the update (as :meth:`propose`).
            InvalidInputError: parameters the algorithm refuses (as :meth:`propose`).
        """
        knobs, limits = self._load(p, fb, windup, saturated, arrays, dt)
        old = self._state
        scratch = self._scratch
        new, x_meas, p_status, g_status, c_status, finite = one_call.cycle(
            self._args, old, f64(q), self._pv[0],
            _NO_MOVE if move_qa is None else f64(move_qa), self._A,
            _NO_PROJECTION if projection is None else projection, limits, knobs, scratch)
        if p_status != steps.OK:
            raise np.linalg.LinAlgError(f"{self.name} step: singular matrix")
        if not g_status & self.NONFINITE:
            self.moving = move_qa is not None
            self._took(new, int(c_status), finite)
        return x_meas, x_meas if fb else old[self._x], int(g_status)

    def _load(self, p: LiveParams, fb: bool, windup: bool, saturated: bool,
              arrays: tuple[FloatArray, ...], dt: float) -> tuple[FloatArray, FloatArray]:
        """The ``knobs`` and ``limits`` a cycle kernel takes, updated for this cycle (the
        live parameters and limits converted only when they changed)."""
        knobs = self._knobs
        if p is not self._knobs_of or p is not self._p:  # new parameters: convert once
            values = self._values(p)
            self._check(p, values[1])
            for at, value in zip(_PARAM_KNOBS, values[1:], strict=True):
                knobs[at] = value
            knobs[one_call.K_MAX_STEP] = self.max_step
            knobs[one_call.K_TOL] = self.statics_tol
            knobs[one_call.K_NEWTON] = self.newton_iter
            self._knobs_of = p
        knobs[one_call.K_FB] = fb
        knobs[one_call.K_WINDUP] = windup
        knobs[one_call.K_SATURATED] = saturated
        knobs[one_call.K_DT] = dt
        limits = self._limit_rows
        held = self._limit_rows_of
        if arrays is not held[0] or self._qa_min is not held[1] or self._qa_max is not held[2]:
            band, qa_min, qa_max, rate = arrays
            for row, values in ((one_call.L_ALG_MIN, self._qa_min),
                                (one_call.L_ALG_MAX, self._qa_max), (one_call.L_BAND, band),
                                (one_call.L_MIN, qa_min), (one_call.L_MAX, qa_max),
                                (one_call.L_RATE, rate)):
                limits[row] = values
            self._limit_rows_of = (arrays, self._qa_min, self._qa_max)
        return knobs, limits

    def _took(self, new: FloatArray, c_status: int, finite: bool) -> None:
        """Accept a cycle kernel's committed state (its proposal and q̄a sent are in the
        scratch array)."""
        scratch = self._scratch
        n = scratch.size - self._m
        self._proposed = scratch[:n]
        self._accept(new, c_status, scratch[n:])
        #: Whether the state after the last cycle is finite (:meth:`finite`).
        self.cycle_finite = finite if self._state is new else self.finite()

    def wire(self, p: LiveParams, fb: bool, move_qa: FloatArray | None, windup: bool,
             arrays: tuple[FloatArray, ...], dt: float, buffers: wire_kernel.WireBuffers,
             data: bytes, projection: FloatArray | None = None
             ) -> tuple[int, FloatArray, FloatArray, int]:
        """:meth:`cycle` from the bytes of one read to the bytes of its setpoint
        (:func:`poise.kernels.wire.wire_cycle`; ``buffers`` holds its scratch, ``io`` and
        output; the effort saturation comes from the frame's status; ``projection`` as
        :meth:`cycle` takes it).

        Returns:
            ``(outcome, h(q), x used by the IK, guard status)``. With
            :data:`~poise.kernels.wire.WIRE_OK` the
            state is committed and the setpoint frame is in ``buffers.out``; with any other
            outcome nothing changed (the caller runs :meth:`cycle` on the decoded frame).
        """
        knobs, limits = self._load(p, fb, windup, False, arrays, dt)
        b = buffers
        old = self._state
        outcome, new, x_meas, g_status = wire_kernel.wire_cycle(
            np.frombuffer(data, np.uint8), len(data), b.raw, b.f32, b.io, self._args, old,
            self._pv[0], _NO_MOVE if move_qa is None else f64(move_qa), self._A,
            _NO_PROJECTION if projection is None else projection, limits,
            knobs, self._scratch, b.out)
        if outcome == wire_kernel.WIRE_OK:
            self._took(new, steps.OK, True)
        return int(outcome), x_meas, x_meas if fb else old[self._x], int(g_status)

    def wire_buffers(self, *, version: int, sensors_type: int, setpoint_type: int,
                     feedforward: bool, armed_bit: int, saturated_bit: int
                     ) -> wire_kernel.WireBuffers:
        """The buffers :meth:`wire` works in for this stepper's layout (a link's protocol
        version, message types and status bits; ``feedforward``: τ_ff goes out)."""
        return wire_kernel.WireBuffers(
            self.model.n, self._m, version=version, sensors_type=sensors_type,
            setpoint_type=setpoint_type, feedforward=feedforward, qa_lo=self._qa.start,
            ga_lo=self._ga.start, armed_bit=armed_bit, saturated_bit=saturated_bit)

    def finite(self) -> bool:
        """Whether q̄, q̄a, τ_ff (and q̄u, x̄, G_u between them) are all finite."""
        return bool(guard.finite_prefix(self._state, self._finite_end))

    @property
    def q_bar(self) -> FloatArray:
        """Predicted configuration ``q̄`` (n,)."""
        return self._state[self._q]

    @property
    def qa(self) -> FloatArray:
        """``q̄a`` (m,): the actuator setpoint."""
        return self._state[self._qa]

    @property
    def tau(self) -> FloatArray:
        """Effort feed-forward ``τ_ff = G_a(q̄)`` (m,)."""
        return self._state[self._ga]

    @property
    def x_bar(self) -> FloatArray:
        """Predicted task value ``h(q̄)``."""
        return self._state[self._x]

    @property
    def residual(self) -> float:
        """Statics residual ``‖G_u(q̄)‖``."""
        return math.hypot(*self._state[self._gu].tolist())  # no BLAS call in a cycle

    @property
    def state(self) -> FloatArray:
        """The whole state vector (layout: :class:`~poise.kernels.blocks.Layout`)."""
        return self._state

    def _set(self, q: FloatArray) -> None:
        self._state = steps.blocks(self._args, f64(q))
        self._proposed = np.concatenate([self._state[self._qa], self._state[self._qu]])

    def reset(self, q: FloatArray, qa_min: FloatArray, qa_max: FloatArray) -> None:
        """Start from the measured configuration ``q`` (bumpless start / algorithm switch);
        ``qa_min``, ``qa_max``: the actuator limits Algorithm 2's rates respect."""
        qa, qu = split(self.model, q)
        self._limits(qa_min, qa_max)
        self._set(join(self.model, np.clip(qa, qa_min, qa_max), qu))

    def _limits(self, qa_min: FloatArray, qa_max: FloatArray) -> None:
        self._qa_min = np.array(qa_min, dtype=np.float64)
        self._qa_max = np.array(qa_max, dtype=np.float64)

    def _values(self, p: LiveParams) -> tuple[Any, ...]:
        """``(target, update code, γ, γ_Z, γ_E, λ)`` as the kernels take them, converted once
        per :class:`~poise.motion.params.LiveParams` object (commands replace the object,
        never change it)."""
        if p is not self._p:
            code = steps.UPDATE_CODES.get(p.update, -1)  # only Algorithm 1 reads it
            self._pv = (f64(p.target), code, float(p.gamma), float(p.gamma_z),
                        float(p.gamma_e), float(p.damping))
            self._p = p
        return self._pv

    def propose(self, p: LiveParams, x: FloatArray | None, dt: float) -> FloatArray:
        """The IK update of q̄a; ``x`` is the task value the error uses (``None``: h(q̄))."""
        self._check(p, (self._pv if p is self._p else self._values(p))[1])
        return self._propose(p, x, dt)

    def commit(self, qa: FloatArray) -> None:
        """Accept ``qa`` (after the safety layer) and make q̄ consistent with it."""
        self._commit(f64(qa))


class CompiledAlg1Stepper(CompiledStepper):
    """Algorithm 1 (:class:`poise.motion.stepper.Alg1Stepper`), compiled."""

    name = "alg1"

    def __init__(self, model: MechanicalModel, packed: PackedModel | None = None) -> None:
        super().__init__(model, packed)
        self.fallbacks = 0
        #: Commits held at a fold (:class:`~poise.motion.stepper.FoldHold`).
        self.fold_holds = 0
        self.fold = FoldHold()
        self._statics_qu: FloatArray = self._state[self._qu].copy()  # warm start of fallbacks

    def _solve(self, qa: FloatArray, qu0: FloatArray) -> None:
        sol = solve_statics(self.model, qa, qu0, tol=self.statics_tol)
        self._set(sol.q)
        self._statics_qu = sol.qu

    def reset(self, q: FloatArray, qa_min: FloatArray, qa_max: FloatArray) -> None:
        qa, qu = split(self.model, q)
        self._limits(qa_min, qa_max)
        self.fold = FoldHold()
        self._solve(np.clip(qa, qa_min, qa_max), qu)

    def _check(self, p: LiveParams, update: int) -> None:
        if update < 0:
            raise InvalidInputError(
                f"update: unknown '{p.update}' (inverse, pinv, dls, transpose)")
        if update == steps.UPDATE_CODES["inverse"] and self.model.task_dim != self._m:
            raise InvalidInputError(
                f"update 'inverse' needs a square Jacobian; task {self.model.task_dim} × "
                f"actuators {self._m}: use 'pinv' or 'dls'")

    def _accept(self, new: FloatArray, status: int, qa: FloatArray) -> None:
        """The Newton re-solve's state, or on :data:`~poise.kernels.steps.FALLBACK` the full
        statics solver's from the last converged q̄u (as the reference)."""
        if status == steps.OK:
            self._state = new
            self._statics_qu = new[self._qu]
            return
        self.fallbacks += 1
        sol = self.fold.fallback(self.model, qa, self._statics_qu, self.moving, self.statics_tol)
        if sol is None:
            self.fold_holds += 1  # the state (q̄, the setpoint q̄a) stays at the fold's edge
            return
        self._set(sol.q)
        self._statics_qu = sol.qu


class CompiledAlg2Stepper(CompiledStepper):
    """Algorithm 2 (:class:`poise.motion.stepper.Alg2Stepper`), compiled."""

    name = "alg2"


class CompiledPlainStepper(CompiledStepper):
    """Classic DLS CLIK (:class:`poise.motion.stepper.PlainStepper`), compiled."""

    name = "plain"


COMPILED_STEPPERS: dict[str, type[CompiledStepper]] = {
    "alg1": CompiledAlg1Stepper, "alg2": CompiledAlg2Stepper, "plain": CompiledPlainStepper}


def make_compiled_stepper(name: str, model: MechanicalModel,
                          packed: PackedModel | None = None) -> CompiledStepper | None:
    """A compiled stepper for algorithm ``name`` (``alg1``, ``alg2``, ``plain``), or ``None``
    when ``model``'s family has no kernels. Compile first (:func:`poise.kernels.warm_up`):
    the first call of each kernel otherwise compiles (or loads from the cache) in a cycle."""
    if not has_kernels(model):
        return None
    return COMPILED_STEPPERS[name](model, packed)
