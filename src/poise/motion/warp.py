"""Moves that slow down where the arm's equilibrium moves fast.

A straight line of the actuators at constant speed moves the arm's held configuration
``q*(s)`` (``G_u = 0`` at the actuators' ``qa(s)``, ``s`` the progress along the line)
unevenly. The dancer crossing upright, where its ankle's stiffness ``H_uu`` nearly vanishes,
swings its stance leg from one side to the other within a second while its actuators barely
change; the ankle, swaying at 0.9 rad/s there, lags its equilibrium by 0.4 rad and rings for
ten seconds after the move, whatever the shapers at the ends do. (The soft arms' equilibria
move evenly: their peak speed along a line is 1.0–1.7 × the mean.)

:func:`equilibrium_warp` solves the statics along the line and makes the
:class:`~poise.motion.shaping.Warp` under which the held task value ``x*(s) = h(q*(s))``
never moves faster than ``cap`` × its mean speed along the unwarped line, and the actuators
never faster than their allowed speed: with the line's own duration ``T`` and the
equilibrium's path length ``L``, the shaped progress grows as ``df ∝ max(ds, |dx*| /
(cap · L))``, so ``|dx*/dt| ≤ cap · L / T`` and ``|dqa/dt|`` at most the unwarped
line's. :func:`~poise.motion.reference.choose_move` tries warped moves beside straight ones
on the model and keeps what settles first.
"""

from __future__ import annotations

import numpy as np

from poise.ik.statics import solve_statics
from poise.models.actuation import join, split
from poise.models.base import FloatArray, MechanicalModel
from poise.motion.shaping import Warp

#: Statics solved along the line (its ends included).
SAMPLES = 81
#: A line is warped only where its equilibrium's peak speed is at least this many times its
#: mean (the dancer's crossings: 2.6–7; the soft arms: at most 1.7).
UNEVEN = 2.0


def equilibrium_path(model: MechanicalModel, q_start: FloatArray, qa_goal: FloatArray,
                     samples: int = SAMPLES) -> FloatArray | None:
    """The held task values ``x*(s)`` (samples, task_dim) at ``samples`` evenly spaced
    points of the straight actuator line from ``q_start``'s actuators to ``qa_goal``, each
    statics solve warm-started at the last; None where one fails."""
    qa0, qu = split(model, np.asarray(q_start, dtype=float))
    delta = np.asarray(qa_goal, dtype=float) - qa0
    out = []
    for s in np.linspace(0.0, 1.0, samples):
        qa = qa0 + s * delta
        sol = solve_statics(model, qa, qu)
        if not sol.converged:
            return None
        qu = split(model, sol.q)[1]
        out.append(np.asarray(model.fk(join(model, qa, qu)), dtype=float))
    return np.array(out)


def equilibrium_warp(model: MechanicalModel, q_start: FloatArray, qa_goal: FloatArray,
                     cap: float, *, uneven: float = UNEVEN, samples: int = SAMPLES
                     ) -> Warp | None:
    """The warp of the straight actuator line from ``q_start`` to ``qa_goal`` under which
    the held task value never moves faster than ``cap`` (> 0) × its mean speed along the
    unwarped line (see the module docstring). None when there is nothing to warp: the
    equilibrium's peak speed along the line is below ``uneven`` × its mean (or it does not
    move), or the statics fail along the way."""
    path = equilibrium_path(model, q_start, qa_goal, samples)
    return None if path is None else path_warp(path, cap, uneven=uneven)


def path_warp(path: FloatArray, cap: float, *, uneven: float = UNEVEN) -> Warp | None:
    """:func:`equilibrium_warp` of an :func:`equilibrium_path` already solved (one path
    serves every cap)."""
    if not cap > 0:
        raise ValueError(f"cap = {cap}: must be > 0")
    seg = np.linalg.norm(np.diff(path, axis=0), axis=1)
    mean = float(seg.mean())
    if not mean > 0.0 or float(seg.max()) < uneven * mean:
        return None
    intervals = len(seg)
    grow = np.maximum(1.0 / intervals, seg / (cap * mean * intervals))
    f = np.concatenate([[0.0], np.cumsum(grow)])
    return Warp(tuple((f / f[-1]).tolist()),
                tuple(np.linspace(0.0, 1.0, intervals + 1).tolist()))


__all__ = ["SAMPLES", "UNEVEN", "equilibrium_path", "equilibrium_warp", "path_warp"]
