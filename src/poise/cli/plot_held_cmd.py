"""``poise plot held-set``: the configuration plane with E and the paths of the three methods.

    poise plot held-set --model double_pendulum --target 0.6 --start 0.3 -0.4 --out held.png
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

import numpy as np


def register(commands: argparse._SubParsersAction, groups: dict[str, Any]) -> None:
    p = groups["plot"].add_parser(
        "held-set", help="configuration plane with E, target set and IK paths (PNG)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="double_pendulum", help="a model with 2 coordinates")
    p.add_argument("--target", type=float, nargs="+", default=[0.6], metavar="X",
                   help="task target x̄ (default 0.6 m)")
    p.add_argument("--start", type=float, nargs="+", default=None, metavar="Q",
                   help="start configuration q [rad] (default 0.3 -1.0)")
    p.add_argument("--gravity", type=float, default=None, help="gravity g [m/s²]")
    p.add_argument("--span", type=float, default=np.pi, help="plane half-width [rad]")
    p.add_argument("--out", type=pathlib.Path, required=True, help="PNG file to write")
    p.set_defaults(func=cmd_held_set)


def cmd_held_set(args: argparse.Namespace) -> int:
    from poise.api.extras import require

    require("plot", "poise plot held-set")
    from poise.ik.result import InvalidInputError, as_vector
    from poise.models import ModelError, load_model
    from poise.viz.held_set import plot_held_set, run_all

    try:
        model = load_model(args.model, gravity=args.gravity)
        if model.n != 2:
            raise ValueError(f"the configuration-plane figure needs a model with 2 "
                             f"coordinates; {model.name} has {model.n}")
        target = as_vector(args.target, model.task_dim, "--target")
        start = as_vector(args.start if args.start is not None else [0.3, -1.0][: model.n],
                          model.n, "--start")
        runs = run_all(model, target, start)
        out = plot_held_set(model, runs, args.out, span=args.span)
    except (ModelError, InvalidInputError, ValueError) as exc:
        print(f"poise plot held-set: {exc}", file=sys.stderr)
        return 2
    print(f"plain IK:    task error {runs.plain.position_error:.2e}, "
          f"|G_u| = {runs.plain.statics_residual:.3f}; released, the tip moves "
          f"{abs(model.fk(runs.released.q)[0] - target[0]):.3f} m")
    for name, res in (("Algorithm 1", runs.alg1), ("Algorithm 2", runs.alg2)):
        print(f"{name}: {res.status.value}, task error {res.position_error:.2e}, "
              f"|G_u| = {res.statics_residual:.1e}, {res.iterations} iterations, "
              f"{'stable' if res.stable else 'UNSTABLE'}")
    print(f"figure written to {out}")
    return 0
