"""Compile (or load from the cache) every kernel a model uses, before the first cycle.

A kernel compiles on its first call for a new argument type: seconds on the reference
machine, never acceptable inside a control cycle. :func:`warm_up` calls each kernel once with
a packed model and arguments of exactly the types the steppers and the simulator pass
(float64 C-contiguous arrays, Python floats and ints), so that afterwards no call compiles.
With ``cache=True`` a later process loads the compiled code from disk instead (see
:mod:`poise.kernels.cache`); the report says how long each kernel took either way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from poise.kernels import blocks, guard, held_solve, steps, wire
from poise.kernels import cycle as one_call
from poise.kernels.packed import PackedModel


@dataclass(frozen=True)
class WarmUpReport:
    """What :func:`warm_up` did.

    Attributes:
        model: the model's name.
        seconds: wall time of the whole warm-up [s].
        kernels: wall time of the first call of each kernel [s] (compile or cache load).
    """

    model: str
    seconds: float
    kernels: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for a log."""
        slowest = max(self.kernels, key=self.kernels.__getitem__) if self.kernels else "-"
        return (f"kernels for {self.model}: {len(self.kernels)} ready in {self.seconds:.2f} s "
                f"(slowest {slowest})")


def warm_up(packed: PackedModel, *, dynamics: bool = True, solvers: bool = True,
            stepwise: bool = True) -> WarmUpReport:
    """Call every kernel a run uses once for ``packed``: ``fk`` and ``G``, the stepper
    kernels (``blocks``, the one-call ``cycle`` and ``wire_cycle`` of each algorithm), with
    ``stepwise`` also ``propose``, ``commit`` and the guard's kernels that the compiled
    steppers' step-by-step API calls (benchmarks, tests; the controller runs the one-call
    cycle only, whose compiled code holds its callees', so it passes False: 0.27 s less of
    its start-up on the 2-core machine), with ``solvers`` the offline solves
    (:mod:`poise.kernels.held_solve`: statics, Algorithm 1 and 2 attempts, which the planner
    runs when a target arrives) and, with ``dynamics``, the simulator's right-hand side."""
    n, m, k = packed.n, packed.m, packed.task_dim
    args = packed.args
    q = np.zeros(n)
    x = np.zeros(k)
    times: dict[str, float] = {}
    t_start = time.perf_counter()

    def run(name: str, fn, *a) -> object:  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        out = fn(args, *a)
        times[name] = time.perf_counter() - t0
        return out

    run("fk", steps.fk, q)
    run("G", steps.G, q)
    state = run("blocks", steps.blocks, q)
    t0 = time.perf_counter()  # called from Python too (blocks.Layout, the steppers' views)
    blocks.offsets(n, m, k)
    blocks.state_size(n, m, k)
    times["offsets"] = time.perf_counter() - t0
    C, C_inv = packed.arrays.C, packed.arrays.C_inv
    qa_min, qa_max = np.full(m, -1.0), np.full(m, 1.0)
    limits = (np.full(m, 0.1), qa_min, qa_max, np.full(m, 1.0))
    if stepwise:
        for name, code in steps.ALGORITHM_CODES.items():
            t0 = time.perf_counter()
            out, _ = steps.propose(C, C_inv, m, k, code, state, x, x,
                                   steps.UPDATE_CODES["dls"], 1.0, 1.0, 1.0, 1e-2, 1e-3, 0.05,
                                   qa_min, qa_max)
            times[f"propose {name}"] = time.perf_counter() - t0
            run(f"commit {name}", steps.commit, code, state, out[:m], out, 1e-8, 4)
        t0 = time.perf_counter()  # the types ControlStep passes: arrays, bools, a float
        guard.guard(qa_min, qa_max, np.zeros(0), np.ascontiguousarray(C[:m]), q, limits[0],
                    True, False, *limits[1:], 1e-3)
        guard.finite_prefix(state, 1)
        times["guard"] = time.perf_counter() - t0
    layout = blocks.Layout(n, m, k).slices()
    knobs = np.zeros(one_call.KNOBS)
    for at, value in ((one_call.K_X_LO, layout["x"].start), (one_call.K_X_HI, layout["x"].stop),
                      (one_call.K_QA_LO, layout["qa"].start), (one_call.K_DT, 1e-3),
                      (one_call.K_UPDATE, steps.UPDATE_CODES["dls"]), (one_call.K_GAMMA, 1.0),
                      (one_call.K_DAMPING, 1e-2), (one_call.K_MAX_STEP, 0.05),
                      (one_call.K_TOL, 1e-8), (one_call.K_NEWTON, 4),
                      (one_call.K_FINITE_END, 1)):
        knobs[at] = value
    limits = np.vstack([qa_min, qa_max, *limits])
    for name, code in steps.ALGORITHM_CODES.items():  # as CompiledStepper.cycle calls it
        t0 = time.perf_counter()
        knobs[one_call.K_ALGORITHM] = code
        for fb in (1.0, 0.0):
            knobs[one_call.K_FB] = fb
            one_call.cycle(args, state, q, x, np.zeros(0), np.ascontiguousarray(C[:m]), limits,
                           knobs, np.zeros(n + m))
        times[f"cycle {name}"] = time.perf_counter() - t0
    t0 = time.perf_counter()  # the wire cycle, on the read-only bytes of a read
    buffers = wire.WireBuffers(n, m, version=1, sensors_type=0, setpoint_type=0,
                               feedforward=True, qa_lo=layout["qa"].start,
                               ga_lo=layout["Ga"].start, armed_bit=1, saturated_bit=0)
    wire.wire_cycle(np.frombuffer(b"\x01\x00", np.uint8), 2, buffers.raw, buffers.f32,
                    buffers.io, args, state, x, np.zeros(0), np.ascontiguousarray(C[:m]),
                    limits, knobs, np.zeros(n + m), buffers.out)
    times["wire cycle"] = time.perf_counter() - t0
    if solvers:
        warm_up_solvers(packed, run)
    if dynamics:
        run("acceleration", steps.acceleration, q, q, np.zeros(m))
    return WarmUpReport(packed.name, time.perf_counter() - t_start, times)


def warm_up_solvers(packed: PackedModel, run) -> None:  # type: ignore[no-untyped-def]
    """The offline solves' kernels, with the argument types :mod:`poise.kernels.solvers`
    passes (one iteration each: compiling is what takes time)."""
    from poise.ik import statics as ref

    n, m, k = packed.n, packed.m, packed.task_dim
    q, x = np.zeros(n), np.zeros(k)
    lo, hi = np.full(m, -1.0), np.full(m, 1.0)
    run("statics solve", held_solve.statics_solve, np.zeros(m), np.zeros(n - m), 1e-9,
        ref.MAX_ITER, ref.MIN_CURVATURE, ref.NEGATIVE_CURVATURE_STEP)
    run("algorithm 1 attempt", held_solve.alg1_attempt, x, q, lo, hi, steps.UPDATE_CODES["dls"],
        1e-3, 1.0, 1.0, 1e-6, 1e-9, ref.MAX_ITER, ref.MIN_CURVATURE,
        ref.NEGATIVE_CURVATURE_STEP, 1, 50, False)
    run("algorithm 2 attempt", held_solve.alg2_attempt, x, q, lo, hi, 1.0, 1.0, 0.5, 0.0, 0.1,
        1e-6, 1e-9, 1, 50, False)
