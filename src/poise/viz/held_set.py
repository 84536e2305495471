"""The held-set figure of seed 000, as a picture (matplotlib, Agg).

Left: the arm — the start, plain IK's solution and where it settles when released (ghost),
and the configurations Algorithms 1 and 2 reach, with the target. Right: the configuration plane
``(q1, q2)`` with the held set E (``G_u = 0``), the target set ``h(q) = x̄``, lines of constant
actuation (dashed), and the paths of the three methods from the same start.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from poise.ik.held import HeldOptions, algorithm1, algorithm2, plain
from poise.ik.result import IKResult
from poise.ik.statics import StaticsSolution, release
from poise.models.actuation import Gu, split
from poise.models.base import MechanicalModel

COLOURS = {"plain": "tab:blue", "alg1": "tab:green", "alg2": "tab:orange"}


@dataclass(frozen=True)
class HeldSetRuns:
    """The three solves the figure shows, from one start."""

    start: np.ndarray
    target: np.ndarray
    plain: IKResult
    released: StaticsSolution
    alg1: IKResult
    alg2: IKResult


def run_all(model: MechanicalModel, target: np.ndarray, start: np.ndarray) -> HeldSetRuns:
    """Plain IK, its release, Algorithm 1 and Algorithm 2 from ``start`` (paths recorded)."""
    options = HeldOptions(max_iter=4000)
    p = plain(model, target, start, record_path=True)
    return HeldSetRuns(
        start=start, target=target, plain=p, released=release(model, p.q),
        alg1=algorithm1(model, target, start, record_path=True),
        alg2=algorithm2(model, target, start, dt=0.05, max_step=None, options=options,
                        record_path=True),
    )


def plot_held_set(model: MechanicalModel, runs: HeldSetRuns, out: pathlib.Path,
                  span: float = np.pi) -> pathlib.Path:
    """Draw the two panels to ``out`` (PNG). The model must have two coordinates."""
    if model.n != 2:
        raise ValueError(f"the configuration-plane figure needs a model with 2 coordinates; "
                         f"{model.name} has {model.n}")
    fig, (ax_arm, ax_plane) = plt.subplots(1, 2, figsize=(13, 6))
    _draw_arms(ax_arm, model, runs)
    _draw_plane(ax_plane, model, runs, span)
    fig.suptitle(f"{model.name}: held set E and the paths of plain IK, Algorithm 1, "
                 f"Algorithm 2 (target x̄ = {runs.target.tolist()}, g = {model.gravity} m/s²)")
    fig.tight_layout()
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _polyline(model: MechanicalModel, q: np.ndarray) -> np.ndarray:
    return np.vstack(model.body_points(q))


def _draw_arms(ax, model: MechanicalModel, runs: HeldSetRuns) -> None:
    shapes = [
        ("start", runs.start, "0.6", "-"),
        ("plain IK", runs.plain.q, COLOURS["plain"], "-"),
        ("plain IK released (settles)", runs.released.q, COLOURS["plain"], ":"),
        ("Algorithm 1", runs.alg1.q, COLOURS["alg1"], "-"),
        ("Algorithm 2", runs.alg2.q, COLOURS["alg2"], "--"),
    ]
    for label, q, colour, style in shapes:
        pts = _polyline(model, q)
        ax.plot(pts[:, 0], pts[:, 1], style, color=colour, lw=2.5, marker="o", ms=4,
                label=label)
    ax.axvline(runs.target[0], color="red", lw=1, label="target x̄")
    ax.plot(0, 0, "ks", ms=8)
    ax.set_aspect("equal")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.set_title("arm shapes")
    ax.legend(loc="lower left", fontsize=8)
    ax.grid(alpha=0.3)


def _draw_plane(ax, model: MechanicalModel, runs: HeldSetRuns, span: float) -> None:
    grid = np.linspace(-span, span, 241)
    q1, q2 = np.meshgrid(grid, grid)
    flat = np.stack([q1.ravel(), q2.ravel()], axis=1)
    gu = np.array([Gu(model, q)[0] for q in flat]).reshape(q1.shape)
    task = np.array([model.fk(q)[0] for q in flat]).reshape(q1.shape)
    qa = np.array([split(model, q)[0][0] for q in flat]).reshape(q1.shape)
    ax.contour(q1, q2, qa, levels=15, colors="0.75", linestyles="dashed", linewidths=0.7)
    ax.contour(q1, q2, gu, levels=[0.0], colors="black", linewidths=2.5)
    ax.contour(q1, q2, task - runs.target[0], levels=[0.0], colors="red", linewidths=1.5)
    for key, res in (("plain", runs.plain), ("alg1", runs.alg1), ("alg2", runs.alg2)):
        path = np.asarray(res.path)
        ax.plot(path[:, 0], path[:, 1], "-", color=COLOURS[key], lw=2,
                label=f"{key} ({res.iterations} it, |G_u| = {res.statics_residual:.1e})")
        ax.plot(*path[-1], "o", color=COLOURS[key], ms=7)
    ax.plot(*runs.released.q, "x", color=COLOURS["plain"], ms=10, mew=2,
            label="plain IK released")
    ax.plot(*runs.start, "k*", ms=12, label="start")
    ax.plot([], [], color="black", lw=2.5, label="E: G_u = 0 (held)")
    ax.plot([], [], color="red", lw=1.5, label="h(q) = x̄")
    ax.plot([], [], color="0.75", ls="--", label="constant actuation q_a")
    ax.set_xlim(-span, span)
    ax.set_ylim(-span, span)
    ax.set_xlabel("q1 [rad]")
    ax.set_ylabel("q2 [rad]")
    ax.set_title("configuration space")
    ax.legend(loc="lower left", fontsize=7)
