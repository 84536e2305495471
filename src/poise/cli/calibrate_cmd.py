"""``poise calibrate``: excite the robot, record settled poses, identify its statics, write a
calibration file (see ``docs/calibration.md``)."""

from __future__ import annotations

import argparse
import json
import pathlib
import signal
import sys
import threading
from typing import Any

#: Exit codes.
EXIT_OK, EXIT_NOT_IDENTIFIABLE, EXIT_USAGE, EXIT_DEVICE, EXIT_ABORTED = 0, 1, 2, 3, 130


def register(commands, groups) -> None:
    p = commands.add_parser(
        "calibrate", help="identify the statics of a robot from settled poses",
        description="Drive the actuators through an excitation set inside the safe limits "
        "(each pose in loading and unloading order), wait for the robot to settle, record q, "
        "qa and efforts, fit K(q - q0) + G_grav(q) = A^T tau by least squares and write a "
        "calibration file (a model file plus a 'calibration' table). Ctrl-C stops cleanly "
        "(the device is disarmed, the poses so far are kept); Ctrl-\\ (SIGQUIT) e-stops.")
    p.add_argument("--model", required=True, metavar="NAME",
                   help="nominal model (built-in name or model file)")
    p.add_argument("--device", metavar="PORT|sim|inprocess|dynamixel:PORT",
                   help="serial port of the robot (poise protocol); 'dynamixel:PORT' a "
                   "Dynamixel servo bus (with --sensors); 'sim' runs 'poise device sim' as a "
                   "subprocess and talks to it over its pty; 'inprocess' drives the simulator "
                   "in this process (fast, no real time)")
    p.add_argument("--sensors", metavar="PORT",
                   help="the poise-protocol joint-sensor board beside a Dynamixel bus")
    p.add_argument("--sim-params", metavar="FILE",
                   help="physical parameter file of the simulated robot (with --device sim or "
                   "inprocess)")
    p.add_argument("--from-poses", metavar="FILE",
                   help="fit poses recorded earlier (a calibration file or a .poses.json) "
                   "instead of running the routine")
    p.add_argument("--out", required=True, metavar="FILE.json", help="calibration file to write")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--report", metavar="FILE.png",
                   help="write the report figure (needs matplotlib: pip install 'poise[plot]')")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar (there is none either when stderr is not a terminal)")
    ex = p.add_argument_group("excitation")
    ex.add_argument("--kind", choices=("grid", "random"), default="grid")
    ex.add_argument("--levels", type=int, nargs="+", default=[5], metavar="N",
                    help="grid levels per actuator (one value for all; default 5)")
    ex.add_argument("--count", type=int, default=20, help="random poses (default 20)")
    ex.add_argument("--margin", type=float, default=0.05,
                    help="fraction of each actuator range kept free at both ends (default 0.05)")
    ex.add_argument("--speed", type=float, default=1.0, metavar="F",
                    help="move speed in safe ranges per second (default 1)")
    ex.add_argument("--seed", type=int, default=0, help="random excitation seed")
    ex.add_argument("--freeze", type=int, nargs="*", default=[], metavar="J",
                    help="hold actuator J at mid-range (demonstrates a poor excitation)")
    st = p.add_argument_group("settle detection")
    st.add_argument("--settle-window", type=float, default=0.4, metavar="S")
    st.add_argument("--velocity-tol", type=float, default=2e-3, metavar="RAD_S")
    st.add_argument("--change-tol", type=float, default=3e-4, metavar="RAD")
    st.add_argument("--hold", type=float, default=0.3, metavar="S")
    st.add_argument("--average", type=float, default=0.3, metavar="S")
    st.add_argument("--timeout", type=float, default=None, metavar="S",
                    help="settle timeout per pose (default: two decay times of the robot's "
                    "slowest mode, at least 15 s: the dancer's sway needs 37 s)")
    fit = p.add_argument_group("fit")
    fit.add_argument("--fix", metavar="NAME[=VALUE]",
                     help="the known quantity that fixes the scale (default: the first tendon "
                     "moment arm at its nominal value)")
    fit.add_argument("--tie", nargs="*", metavar="KIND[:section]",
                     help="parameter kinds estimated as one (default: the family's; 'none' "
                     "for no ties)")
    fit.add_argument("--holdout", type=float, default=0.2,
                     help="fraction of poses held out for validation (default 0.2)")
    fit.add_argument("--prior", type=float, metavar="F",
                     help="where the data do not determine every parameter, keep the weak "
                     "ones near their nominal values (a Gaussian prior, relative standard "
                     "deviation F, e.g. 0.2) instead of refusing; no default tie then")
    fit.add_argument("--total-mass", type=float, metavar="KG",
                     help="the robot's weighed total mass: a second known quantity, held "
                     "exactly (the sum of the identified masses; planar_tree and planar_pcc)")
    fit.add_argument("--total-mass-sd", type=float, metavar="KG",
                     help="the standard deviation of the weighed total mass (the scale's "
                     "precision): the total mass is then one measurement weighed against the "
                     "data instead of held exactly (needs --total-mass)")
    fit.add_argument("--no-kinematics", action="store_true",
                     help="do not fit the actuator kinematics qa = A q + o")
    p.set_defaults(func=run_calibrate)


def _say(args: argparse.Namespace, text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _fail(text: str, code: int, args: argparse.Namespace, extra: dict | None = None) -> int:
    if args.json:
        print(json.dumps({"ok": False, "error": text, **(extra or {})}, indent=1))
    print(f"poise calibrate: {text}", file=sys.stderr)
    return code


def run_calibrate(args: argparse.Namespace) -> int:
    from poise.calibration.posefile import poses_path
    from poise.calibration.workflow import WorkflowError, calibrate
    from poise.cli.outpaths import check_image, check_output
    from poise.models import ModelError, load_model

    try:
        model = load_model(args.model)
    except ModelError as exc:
        return _fail(str(exc), EXIT_USAGE, args)
    if not str(args.out).endswith(".json"):
        return _fail(f"--out {args.out}: a calibration file must end in .json", EXIT_USAGE, args)
    if args.prior is not None and not 0.0 < args.prior < float("inf"):
        return _fail(f"--prior {args.prior}: a relative standard deviation > 0 (e.g. 0.2)",
                     EXIT_USAGE, args)
    if args.total_mass is not None:
        from poise.calibration.grouping import check_total_mass
        from poise.calibration.regressor import CalibrationError

        try:
            check_total_mass(model, args.total_mass, label=f"--total-mass {args.total_mass:g}")
        except CalibrationError as exc:
            return _fail(str(exc), EXIT_USAGE, args)
    if args.total_mass_sd is not None:
        from poise.calibration.grouping import check_total_mass_sd
        from poise.calibration.regressor import CalibrationError

        try:
            check_total_mass_sd(args.total_mass, args.total_mass_sd,
                                label=f"--total-mass-sd {args.total_mass_sd:g}",
                                needs="--total-mass KG")
        except CalibrationError as exc:
            return _fail(str(exc), EXIT_USAGE, args)
    if args.from_poses is None and args.device is None:
        return _fail("give --device PORT|sim|inprocess (or --from-poses FILE)", EXIT_USAGE, args)
    # every file we will write, checked before the routine: measured work is never lost to a
    # typo in an output path
    problem = (check_output(args.out, "--out")
               or (check_image(args.report, "--report") if args.report else None)
               or (None if args.from_poses else check_output(poses_path(args.out),
                                                              "poses file")))
    if problem:
        return _fail(f"{problem} (nothing was run)", EXIT_USAGE, args)
    request = _request(args)
    bar = _LazyPoseBar(quiet=args.quiet)
    estop = threading.Event()
    old_quit = None
    if (request.measures and threading.current_thread() is threading.main_thread()
            and hasattr(signal, "SIGQUIT")):
        old_quit = signal.signal(signal.SIGQUIT, lambda *_: estop.set())
    try:
        outcome = calibrate(model, request, say=lambda text: _say(args, text),
                            warn=lambda text: _say(args, f"poise calibrate: {text}"),
                            progress=bar.show, estop=estop)
    except WorkflowError as exc:
        return _fail(str(exc), _EXIT_OF_STAGE[exc.stage], args)
    finally:
        bar.close()
        if old_quit is not None:
            signal.signal(signal.SIGQUIT, old_quit)
    return _print_outcome(outcome, args)


#: Exit code of a workflow stage that could not go on.
_EXIT_OF_STAGE = {"input": EXIT_USAGE, "device": EXIT_DEVICE, "fit": EXIT_NOT_IDENTIFIABLE}


def _request(args: argparse.Namespace):
    """The :class:`~poise.calibration.workflow.CalibrationRequest` of the options."""
    from poise.calibration import SettleConfig
    from poise.calibration.workflow import (
        CalibrationRequest,
        DeviceSpec,
        ExcitationPlan,
        FitOptions,
    )

    source = (pathlib.Path(args.from_poses) if args.from_poses else
              DeviceSpec(device=args.device, model=str(args.model), sensors=args.sensors,
                         sim_params=args.sim_params, seed=args.seed))
    return CalibrationRequest(
        model_name=str(args.model), out=pathlib.Path(args.out), source=source,
        report=pathlib.Path(args.report) if args.report else None,
        excitation=ExcitationPlan(kind=args.kind, levels=tuple(args.levels), count=args.count,
                                  margin=args.margin, speed=args.speed, seed=args.seed,
                                  frozen=tuple(args.freeze)),
        settle=SettleConfig(window=args.settle_window, velocity_tol=args.velocity_tol,
                            change_tol=args.change_tol, hold=args.hold, average=args.average,
                            timeout=args.timeout),
        fit=FitOptions(fix=args.fix,
                       tie=None if args.tie is None else [t for t in args.tie if t != "none"],
                       holdout=args.holdout, kinematics=not args.no_kinematics,
                       prior=args.prior, total_mass=args.total_mass,
                       total_mass_sd=args.total_mass_sd))


def _print_outcome(outcome, args: argparse.Namespace) -> int:
    """Print what the calibration did; its exit code."""
    if not outcome.complete:
        if args.json:
            print(json.dumps({"ok": False, "status": outcome.status, "reason": outcome.reason,
                              "poses": len(outcome.poses), "partial": str(outcome.poses_file)},
                             indent=1))
        return EXIT_ABORTED if outcome.status == "aborted" else EXIT_DEVICE
    ident = outcome.identification
    summary = _summary(ident, args, outcome.status, len(outcome.poses))
    if outcome.poses_file is not None:
        summary["poses_file"] = str(outcome.poses_file)
    if not outcome.written:
        if args.json:
            print(json.dumps(summary, indent=1))
        print(f"poise calibrate: {ident.message}", file=sys.stderr)
        print("poise calibrate: no calibration written", file=sys.stderr)
        return EXIT_NOT_IDENTIFIABLE
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        _print_table(ident, args)
    return EXIT_OK


def _summary(ident, args, status: str, count: int) -> dict[str, Any]:
    return {"ok": ident.identifiable, "status": status, "message": ident.message,
            "out": str(args.out) if ident.identifiable else None, "report": args.report,
            "poses": count, "parameters": [p.to_dict() for p in ident.parameters],
            "statistics": ident.statistics(), "undetermined": list(ident.undetermined),
            "advice": list(ident.advice)}


def _print_table(ident, args) -> None:
    print(ident.message)
    print(f"{'parameter':<22} {'unit':<8} {'nominal':>11} {'identified':>11} {'std.err':>9}")
    for p in ident.parameters:
        se = "fixed" if p.fixed else f"{p.std_error:.2g}"
        print(f"{p.name:<22} {p.unit:<8} {p.nominal:>11.5g} {p.value:>11.5g} {se:>9}")
    if ident.total_mass is not None and ident.description is not None:
        d = ident.description
        masses = [float(b["mass"]) for b in d.get("bodies", d.get("segments", []))]
        print("masses [kg]: " + ", ".join(
            f"{m:.4g} ± {se:.2g}" for m, se in zip(masses, ident.mass_std_error, strict=False))
            + f"; sum {sum(masses):.6g}" + _weighed(ident))
    s = ident.statistics()
    if ident.validated:
        print(f"residual RMS {ident.residual_rms:.3g} N·m (held out {ident.holdout_rms:.3g}); "
              f"equilibrium RMS {ident.equilibrium_rms:.3g} rad (held out "
              f"{ident.equilibrium_rms_holdout:.3g}; nominal model "
              f"{ident.nominal_equilibrium_rms:.3g})")
    else:
        print(f"residual RMS {ident.residual_rms:.3g} N·m; equilibrium RMS "
              f"{ident.equilibrium_rms:.3g} rad (nominal model "
              f"{ident.nominal_equilibrium_rms:.3g}) — on the fitted poses only")
        print(ident.validation[:1].upper() + ident.validation[1:])
    print(f"rank {s['rank']}/{s['n_free']}, condition number {ident.cond:.3g}")
    if ident.static_residuals:
        from poise.calibration.band import describe

        print(describe(ident.static_residuals))
    print(f"wrote {args.out}" + (f" and {args.report}" if args.report else ""))


def _weighed(ident) -> str:
    """The weighed total mass after the sum of the masses: held exactly, or ``M ± σ_M``."""
    if ident.total_mass_sd is None:
        return (f" (weighed total mass {ident.total_mass:g}"
                + (", held exactly)" if ident.total_mass_constrained else
                   ", implied by the scale alone)"))
    return (f" ± {ident.mass_sum_std_error:.2g} (weighed total mass {ident.total_mass:g} ± "
            f"{ident.total_mass_sd:g} kg"
            + (")" if ident.total_mass_constrained else ", implied by the scale alone)"))


class _PoseBar:
    """The routine's progress as a bar on stderr (:mod:`poise.progress`: none when stderr is
    not a terminal or with ``--quiet``): poses done, elapsed and remaining time, and the last
    pose (actuator reference, direction, how it settled)."""

    def __init__(self, total: int, *, quiet: bool) -> None:
        from poise.progress import progress_bar

        self.bar = progress_bar(total, "calibration", unit="pose", quiet=quiet)

    def show(self, done: int, total: int, pose, phase: str) -> None:
        """The routine's progress callback ``(done, total, pose, phase)``."""
        self.bar.total = total
        self.bar.update(done - self.bar.n)
        if pose is not None:
            qa = " ".join(f"{v:.4g}" for v in pose.qa_ref)
            self.bar.set_postfix_str(f"qa=[{qa}] {pose.direction} {phase} in "
                                     f"{pose.settle_time:.2f} s")

    def close(self) -> None:
        self.bar.close()


class _LazyPoseBar:
    """A :class:`_PoseBar` drawn from the routine's first progress call (which knows the
    number of poses); none when the poses are read from a file."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet
        self.bar: _PoseBar | None = None

    def show(self, done: int, total: int, pose, phase: str) -> None:
        if self.bar is None:
            self.bar = _PoseBar(total, quiet=self.quiet)
        self.bar.show(done, total, pose, phase)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
