"""Compile (or load from the cache) every kernel a model uses, before the first cycle.

A kernel compiles on its first call for a new argument type: seconds on the reference
machine, never acceptable inside a control cycle. :func:`warm_up` calls each kernel once with
a packed model and arguments of exactly the types the steppers and the simulator pass
(float64 C-contiguous arrays, Python floats and ints), so that afterwards no call compiles.
With ``cache=True`` a later process loads the compiled code from disk instead (see
:mod:`poise.kernels.cache`); the report says how long each kernel took either way.

The warm-up is a list of named steps (:func:`warm_up_steps`), run one after the other by
:func:`run_steps`, which reports each as it starts (:class:`KernelProgress`): ``poise run``
and ``poise warmup`` show that progress while a first start compiles (about a minute and a
half on the 2-core reference machine; loading from the cache takes under a second).
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poise.kernels import blocks, guard, held_solve, steps, wire
from poise.kernels import cycle as one_call
from poise.kernels.packed import PackedModel

#: One step of a warm-up: its name (a kernel, or what it loads) and the call that compiles
#: or loads it.
WarmUpStep = tuple[str, Callable[[], object]]


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


@dataclass(frozen=True)
class KernelProgress:
    """Where a warm-up is (plain values: it crosses from the real-time process to ``poise
    run``).

    Attributes:
        model: the model's name.
        done: steps finished.
        total: steps in all.
        name: the step starting now ('' once all are done).
        cached: whether the kernels are expected to load from the cache (this model family's
            kernels were prepared before from the same sources, :func:`cache.prepared`);
            False: a first start, which compiles.
        seconds: time since the warm-up began [s].
        cache_dir: where Numba keeps the compiled kernels.
    """

    model: str
    done: int
    total: int
    name: str
    cached: bool
    seconds: float
    cache_dir: str = ""


#: Called when each step starts, and once more when all are done.
WarmUpProgress = Callable[[KernelProgress], Any]


def cache_dir() -> pathlib.Path:
    """The directory Numba caches this package's kernels in (``__pycache__`` next to the
    sources when writable, else a per-user directory, or ``$NUMBA_CACHE_DIR``)."""
    return pathlib.Path(steps.fk.stats.cache_path)


def run_steps(model: str, todo: Sequence[WarmUpStep], *, progress: WarmUpProgress | None = None,
              cached: bool = False) -> WarmUpReport:
    """Run the steps ``todo`` in order, timing each; ``progress`` hears of each as it starts
    and once more at the end (``cached``: see :class:`KernelProgress`)."""
    times: dict[str, float] = {}
    t_start = time.perf_counter()
    where = str(cache_dir()) if progress is not None else ""

    def tell(done: int, name: str) -> None:
        if progress is not None:
            progress(KernelProgress(model, done, len(todo), name, cached,
                                    time.perf_counter() - t_start, where))

    for done, (name, call) in enumerate(todo):
        tell(done, name)
        t0 = time.perf_counter()
        call()
        times[name] = time.perf_counter() - t0
    tell(len(todo), "")
    return WarmUpReport(model, time.perf_counter() - t_start, times)


def warm_up(packed: PackedModel, *, dynamics: bool = True, solvers: bool = True,
            stepwise: bool = True, progress: WarmUpProgress | None = None) -> WarmUpReport:
    """Call every kernel a run uses once for ``packed`` (:func:`warm_up_steps`), reporting
    each step to ``progress``."""
    return run_steps(packed.name, warm_up_steps(packed, dynamics=dynamics, solvers=solvers,
                                                stepwise=stepwise), progress=progress)


def warm_up_steps(packed: PackedModel, *, dynamics: bool = True, solvers: bool = True,
                  stepwise: bool = True) -> list[WarmUpStep]:
    """The steps that call every kernel a run uses once for ``packed``: ``fk`` and ``G``,
    the stepper kernels (``blocks``, the one-call ``cycle`` and ``wire_cycle`` of each
    algorithm), with ``stepwise`` also ``propose``, ``commit`` and the guard's kernels that
    the compiled steppers' step-by-step API calls (benchmarks, tests; the controller runs the
    one-call cycle only, whose compiled code holds its callees', so it passes False: 0.27 s
    less of its start-up on the 2-core machine), with ``solvers`` the offline solves
    (:mod:`poise.kernels.held_solve`: statics, Algorithm 1 and 2 attempts, which the planner
    runs when a target arrives) and, with ``dynamics``, the simulator's right-hand side.
    Run them in order (:func:`run_steps`): later steps use what ``blocks`` returned."""
    n, m, k = packed.n, packed.m, packed.task_dim
    args = packed.args
    q = np.zeros(n)
    x = np.zeros(k)
    made: dict[str, np.ndarray] = {}  # the state vector "blocks" returns, for later steps
    C, C_inv = packed.arrays.C, packed.arrays.C_inv
    qa_min, qa_max = np.full(m, -1.0), np.full(m, 1.0)
    limits = (np.full(m, 0.1), qa_min, qa_max, np.full(m, 1.0))

    def kernel(name: str, fn, *a) -> WarmUpStep:  # type: ignore[no-untyped-def]
        return name, lambda: fn(args, *a)

    def blocks_state() -> None:
        made["state"] = steps.blocks(args, q)

    def offsets() -> None:  # called from Python too (blocks.Layout, the steppers' views)
        blocks.offsets(n, m, k)
        blocks.state_size(n, m, k)

    todo: list[WarmUpStep] = [kernel("fk", steps.fk, q), kernel("G", steps.G, q),
                              ("blocks", blocks_state), ("offsets", offsets)]
    if stepwise:
        for name, code in steps.ALGORITHM_CODES.items():
            todo += _stepwise_steps(name, code, made, args, C, C_inv, m, k, x, qa_min, qa_max)

        def guarded() -> None:  # the types ControlStep passes: arrays, bools, a float
            guard.guard(qa_min, qa_max, np.zeros(0), np.ascontiguousarray(C[:m]), q,
                        limits[0], True, False, *limits[1:], 1e-3)
            guard.finite_prefix(made["state"], 1)

        todo.append(("guard", guarded))
    layout = blocks.Layout(n, m, k).slices()
    knobs = np.zeros(one_call.KNOBS)
    for at, value in ((one_call.K_X_LO, layout["x"].start), (one_call.K_X_HI, layout["x"].stop),
                      (one_call.K_QA_LO, layout["qa"].start), (one_call.K_DT, 1e-3),
                      (one_call.K_UPDATE, steps.UPDATE_CODES["dls"]), (one_call.K_GAMMA, 1.0),
                      (one_call.K_DAMPING, 1e-2), (one_call.K_MAX_STEP, 0.05),
                      (one_call.K_TOL, 1e-8), (one_call.K_NEWTON, 4),
                      (one_call.K_FINITE_END, 1)):
        knobs[at] = value
    stacked = np.vstack([qa_min, qa_max, *limits])
    A = np.ascontiguousarray(C[:m])

    def cycle(code: int) -> None:  # as CompiledStepper.cycle calls it
        knobs[one_call.K_ALGORITHM] = code
        for fb in (1.0, 0.0):
            knobs[one_call.K_FB] = fb
            for projection in (np.zeros((0, 0)), np.eye(k)):  # none, and one
                one_call.cycle(args, made["state"], q, x, np.zeros(0), A, projection, stacked,
                               knobs, np.zeros(n + m))

    def wire_cycle() -> None:  # the wire cycle, on the read-only bytes of a read
        buffers = wire.WireBuffers(n, m, version=1, sensors_type=0, setpoint_type=0,
                                   feedforward=True, qa_lo=layout["qa"].start,
                                   ga_lo=layout["Ga"].start, armed_bit=1, saturated_bit=0)
        wire.wire_cycle(np.frombuffer(b"\x01\x00", np.uint8), 2, buffers.raw, buffers.f32,
                        buffers.io, args, made["state"], x, np.zeros(0), A, np.zeros((0, 0)),
                        stacked, knobs, np.zeros(n + m), buffers.out)

    todo += [(f"cycle {name}", lambda code=code: cycle(code))
             for name, code in steps.ALGORITHM_CODES.items()]
    todo.append(("wire cycle", wire_cycle))
    if solvers:
        todo += solver_steps(packed)
    if dynamics:
        todo.append(kernel("acceleration", steps.acceleration, q, q, np.zeros(m)))
    return todo


def _stepwise_steps(name: str, code: int, made: dict[str, np.ndarray], args: tuple,
                    C: np.ndarray, C_inv: np.ndarray, m: int, k: int, x: np.ndarray,
                    qa_min: np.ndarray, qa_max: np.ndarray) -> list[WarmUpStep]:
    """``propose`` and ``commit`` of one algorithm (``made["state"]``: the state vector)."""
    out: list[np.ndarray] = []

    def propose() -> None:
        out.append(steps.propose(C, C_inv, m, k, code, made["state"], x, x,
                                 steps.UPDATE_CODES["dls"], 1.0, 1.0, 1.0, 1e-2, 1e-3, 0.05,
                                 qa_min, qa_max)[0])

    def commit() -> None:
        steps.commit(args, code, made["state"], out[-1][:m], out[-1], 1e-8, 4)

    return [(f"propose {name}", propose), (f"commit {name}", commit)]


def solver_steps(packed: PackedModel) -> list[WarmUpStep]:
    """The offline solves' kernels, with the argument types :mod:`poise.ik.held_kernels`
    passes (one iteration each: compiling is what takes time)."""
    from poise.api import numerics as ref

    n, m, k = packed.n, packed.m, packed.task_dim
    args = packed.args
    q, x = np.zeros(n), np.zeros(k)
    lo, hi = np.full(m, -1.0), np.full(m, 1.0)
    return [
        ("statics solve", lambda: held_solve.statics_solve(
            args, np.zeros(m), np.zeros(n - m), 1e-9, ref.MAX_ITER, ref.MIN_CURVATURE,
            ref.NEGATIVE_CURVATURE_STEP)),
        ("algorithm 1 attempt", lambda: held_solve.alg1_attempt(
            args, x, q, lo, hi, steps.UPDATE_CODES["dls"], 1e-3, 1.0, 1.0, 1e-6, 1e-9,
            ref.MAX_ITER, ref.MIN_CURVATURE, ref.NEGATIVE_CURVATURE_STEP, 1, 50, False)),
        ("algorithm 2 attempt", lambda: held_solve.alg2_attempt(
            args, x, q, lo, hi, 1.0, 1.0, 0.5, 0.0, 0.1, 1e-6, 1e-9, 1, 50, False)),
    ]
