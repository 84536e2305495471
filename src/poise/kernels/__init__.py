"""Compiled (Numba) kernels of the per-cycle numerics (see ``docs/kernels.md``).

The readable numpy implementation (:mod:`poise.models`, :mod:`poise.ik`,
:mod:`poise.motion.stepper`, :mod:`poise.sim.dynamics`) stays the reference; these kernels
compute the same quantities on a model packed into plain arrays, and ``tests/test_kernels.py``
compares the two. Families with kernels: ``planar_tree``, ``planar_pcc``.

    from poise.kernels import pack, warm_up
    from poise.motion import make_compiled_stepper   # the compiled steppers (motion layer)
    packed = pack(model)                     # NoKernelsError for other families
    print(warm_up(packed).summary())         # compile (or load) before the first cycle
    stepper = make_compiled_stepper("alg1", model, packed)   # None without kernels

Modules: :mod:`~poise.kernels.linalg` (small dense solves), :mod:`~poise.kernels.planar_tree`
and :mod:`~poise.kernels.planar_pcc` (model kernels), :mod:`~poise.kernels.family` (dispatch
by family), :mod:`~poise.kernels.packed` (``pack``), :mod:`~poise.kernels.blocks` (actuation
blocks in a state vector), :mod:`~poise.kernels.steps` (the cycle steps and the simulator's
right-hand side), :mod:`~poise.kernels.guard` (a cycle's anti-windup and safety layer),
:mod:`~poise.kernels.cycle` (a whole cycle in one call: h(q), the step, the guard, the commit),
:mod:`~poise.kernels.held_solve` (the offline solves of
:func:`poise.ik.held.algorithm1` and :func:`~poise.ik.held.algorithm2`),
:mod:`~poise.kernels.dh_chain` and :mod:`~poise.kernels.dh_ik` (serial-chain kinematics and
the Levenberg–Marquardt IK solve of :mod:`poise.ik.clik_compiled`),
:mod:`~poise.kernels.warmup`, :mod:`~poise.kernels.cache`.
"""

from poise.kernels import (
    blocks,
    cache,
    cycle,
    dh_chain,
    dh_ik,
    family,
    guard,
    held_solve,
    linalg,
    planar_pcc,
    planar_tree,
    steps,
    wire,
)
from poise.kernels.packed import PACKERS, NoKernelsError, PackedModel, has_kernels, pack
from poise.kernels.warmup import WarmUpReport, warm_up

#: Every module of compiled functions, whose stale cache :func:`cache.ensure_fresh` removes.
KERNEL_MODULES = (blocks, cycle, dh_chain, dh_ik, guard, held_solve, linalg, planar_pcc,
                  planar_tree, steps, wire)
cache.ensure_fresh(cache.dispatchers(KERNEL_MODULES))

__all__ = [
    "KERNEL_MODULES",
    "PACKERS",
    "NoKernelsError",
    "PackedModel",
    "WarmUpReport",
    "family",
    "has_kernels",
    "pack",
    "warm_up",
]
