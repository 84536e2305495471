"""``poise solve``: one inverse-kinematics solve from the command line.

    poise solve --model planar_2link --algorithm dls --target 0.6 0.3 --start 0.1 0.1 --json
    poise solve --model panda --algorithm lm --target 0.4 0.1 0.5 0 1 0 0 --restarts 5
    poise solve --model double_pendulum --algorithm alg1 --target 0.6 --start 0.3 -1.0
    poise solve --model dancer --algorithm alg2 --target 0 1.0889 --reject-unstable --json
    poise solve --model cc3d_3 --algorithm robust --target 1.2 0.4 2.1 0.9 0.1 0.3 0.2

Angles in radians, lengths in metres. Pose targets: 7 numbers ``x y z qw qx qy qz`` or 3
numbers ``x y z`` (position only). Exit codes: 0 converged, 1 not converged (the closest
configuration is printed), 2 invalid input (with ``--json``: a result with status
``invalid_input``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the parser is built without the IK package (poise.cli)
    from poise.ik.result import IKResult

Solver = Callable[[Any, np.ndarray, "np.ndarray | None", argparse.Namespace], "IKResult"]


def _classic(method: str) -> Solver:
    def run(model: Any, target: np.ndarray, q0: np.ndarray | None,
            args: argparse.Namespace) -> IKResult:
        from poise.ik.clik import solve

        gain: Any = args.gain
        if gain is not None and len(gain) == 1:
            gain = gain[0]
        elif gain is not None:
            gain = tuple(gain)
        return solve(model, target, method=method, q0=q0, tol=args.tol, max_iter=args.max_iter,
                     restarts=args.restarts, seed=args.seed, damping=args.damping, gain=gain,
                     orientation_weight=args.orientation_weight, step=args.step)

    return run


def _held(name: str) -> Solver:
    """Held-configuration solvers (seed 000): ``plain``, ``alg1``, ``alg2``."""

    def run(model: Any, target: np.ndarray, q0: np.ndarray | None,
            args: argparse.Namespace) -> IKResult:
        from poise.ik.held import HeldOptions, solve_held
        from poise.ik.result import InvalidInputError

        if not hasattr(model, "C"):
            raise InvalidInputError(
                f"--algorithm {name}: model {model.name} has no statics (no actuation split); "
                "use pinv, dls, transpose or lm")
        options = HeldOptions(tol=args.tol, max_iter=args.max_iter or 500,
                              reject_unstable=args.reject_unstable)
        kwargs: dict[str, Any] = {"options": options}
        if name == "alg2":
            kwargs.update(gamma_z=args.gamma_z, gamma_e=args.gamma_e, dt=args.dt)
            if args.damping is not None:
                kwargs["damping"] = args.damping
        elif args.damping is not None:
            kwargs["damping"] = args.damping
        return solve_held(model, name, target, q0, **kwargs)

    return run


def _continuum(method: str) -> Solver:
    """Continuum IK on ``cc3d`` arms (``robust``, docs/continuum.md): a full pose target;
    ``--tol`` bounds the seed-001 metric ``e = task_error²``; ``--max-iter`` (default 500)
    caps every iteration of every restart, which the method makes itself (``--seed``)."""

    def run(model: Any, target: np.ndarray, q0: np.ndarray | None,
            args: argparse.Namespace) -> IKResult:
        from poise.ik.continuum import solve as solve_continuum
        from poise.ik.result import InvalidInputError
        from poise.ik.targets import parse_target

        if not hasattr(model, "bending_limits"):
            raise InvalidInputError(f"--algorithm {method}: model {model.name} is not a "
                                    "constant-curvature arm (cc3d_N)")
        goal = parse_target(model, target)
        if not goal.is_pose:
            raise InvalidInputError(f"--algorithm {method}: needs a full pose target "
                                    "(x y z qw qx qy qz)")
        T = np.eye(4)
        T[:3, :3], T[:3, 3] = goal.rotation, goal.position
        kwargs: dict[str, Any] = {"tol": args.tol, "seed": args.seed}
        if args.max_iter is not None:
            kwargs["max_iter"] = args.max_iter
        return solve_continuum(model, T, q0, method=method, **kwargs)

    return run


#: ``--algorithm`` name → solver ``(model, target, q0, args) -> IKResult``.
ALGORITHMS: dict[str, Solver] = {
    "pinv": _classic("pinv"),
    "dls": _classic("dls"),
    "transpose": _classic("transpose"),
    "lm": _classic("lm"),
    "plain": _held("plain"),
    "alg1": _held("alg1"),
    "alg2": _held("alg2"),
    "robust": _continuum("robust"),
}


def register(commands: argparse._SubParsersAction, groups: dict[str, Any]) -> None:
    p = commands.add_parser("solve", help="solve inverse kinematics for one target",
                            description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="built-in model name or .toml path")
    p.add_argument("--algorithm", default="dls", choices=sorted(ALGORITHMS),
                   help="solver (default dls)")
    p.add_argument("--target", required=True, nargs="+", type=float, metavar="X",
                   help="task vector; pose models: x y z qw qx qy qz, or x y z")
    p.add_argument("--start", nargs="+", type=float, metavar="Q",
                   help="start configuration [rad] (default: the model's home)")
    p.add_argument("--tol", type=float, default=1e-6, help="tolerance on the task error")
    p.add_argument("--max-iter", type=int, default=None, help="iterations per attempt")
    p.add_argument("--restarts", type=int, default=0, help="random restarts")
    p.add_argument("--seed", type=int, default=0, help="seed of the restarts")
    p.add_argument("--damping", type=float, default=None,
                   help="fixed damping λ (dls, lm); default: adaptive")
    p.add_argument("--gain", type=float, nargs="+", default=None, metavar="K",
                   help="k_P, or k_Pp k_Po")
    p.add_argument("--orientation-weight", type=float, default=1.0,
                   help="w_o in W = diag(I, w_o I)")
    p.add_argument("--step", type=float, default=1.0, help="step Δt")
    p.add_argument("--gravity", type=float, default=None,
                   help="gravity g [m/s²] for models with statics (default: the model's)")
    p.add_argument("--reject-unstable", action="store_true",
                   help="alg1/alg2: an unstable held configuration is a failure (status "
                        "unstable)")
    p.add_argument("--gamma-z", type=float, default=1.0, help="alg2: task gain ΓZ")
    p.add_argument("--gamma-e", type=float, default=1.0, help="alg2: statics gain ΓE")
    p.add_argument("--dt", type=float, default=0.5, help="alg2: step Δt")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--history", action="store_true", help="include the residual history (JSON)")
    p.set_defaults(func=cmd_solve)


def cmd_solve(args: argparse.Namespace) -> int:
    from poise.ik.result import IKResult, InvalidInputError
    from poise.models import load_model

    target = np.array(args.target, dtype=float)
    q0 = None if args.start is None else np.array(args.start, dtype=float)
    try:
        model = load_model(args.model, gravity=args.gravity)
        result = ALGORITHMS[args.algorithm](model, target, q0, args)
    except (InvalidInputError, ValueError) as exc:  # ModelError is a ValueError
        if args.json:
            print(json.dumps(IKResult.refused(q0, str(exc)).to_dict(), indent=2))
        print(f"poise solve: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(include_history=args.history), indent=2))
    else:
        _print_human(result)
    return 0 if result.success else 1


def _print_human(r: IKResult) -> None:
    fmt = np.array2string
    print(f"status      {r.status.value} ({'success' if r.success else 'FAILED'})")
    print(f"q [rad]     {fmt(r.q, precision=6, separator=', ')}")
    if r.x is not None:
        print(f"x           {fmt(r.x, precision=6, separator=', ')}")
    print(f"task error  {r.task_error:.3e}  (position {r.position_error:.3e}, "
          f"orientation {r.orientation_error:.3e} rad)")
    print(f"iterations  {r.iterations}  restarts {r.restarts}  σ_min {r.sigma_min:.3g}  "
          f"time {r.wall_time * 1e3:.2f} ms")
    if r.statics_residual is not None:
        print(f"qa          {fmt(r.qa, precision=6, separator=', ')}")
        print(f"qu          {fmt(r.qu, precision=6, separator=', ')}")
        print(f"|G_u|       {r.statics_residual:.3e}  min eig H_uu {r.min_eig_Huu:.4g}  "
              f"({'stable' if r.stable else 'UNSTABLE'})")
    if r.message:
        print(f"message     {r.message}")
