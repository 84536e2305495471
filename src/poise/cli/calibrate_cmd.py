"""``poise calibrate``: excite the robot, record settled poses, identify its statics, write a
calibration file (see ``docs/calibration.md``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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
    st.add_argument("--timeout", type=float, default=15.0, metavar="S",
                    help="settle timeout per pose (default 15)")
    fit = p.add_argument_group("fit")
    fit.add_argument("--fix", metavar="NAME[=VALUE]",
                     help="the known quantity that fixes the scale (default: the first tendon "
                     "moment arm at its nominal value)")
    fit.add_argument("--tie", nargs="*", metavar="KIND[:section]",
                     help="parameter kinds estimated as one (default: the family's; 'none' "
                     "for no ties)")
    fit.add_argument("--holdout", type=float, default=0.2,
                     help="fraction of poses held out for validation (default 0.2)")
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
    from poise.calibration import (
        CalibrationError,
        SettleConfig,
        calibration_document,
        excitation,
        identify,
        plot_report,
        safe_range,
        write_calibration,
    )
    from poise.cli.outpaths import check_image, check_output
    from poise.models import ModelError, load_model

    try:
        model = load_model(args.model)
    except ModelError as exc:
        return _fail(str(exc), EXIT_USAGE, args)
    if not str(args.out).endswith(".json"):
        return _fail(f"--out {args.out}: a calibration file must end in .json", EXIT_USAGE, args)
    if args.from_poses is None and args.device is None:
        return _fail("give --device PORT|sim|inprocess (or --from-poses FILE)", EXIT_USAGE, args)
    poses_path = _poses_path(args.out)
    # every file we will write, checked before the routine: measured work is never lost to a
    # typo in an output path
    problem = (check_output(args.out, "--out")
               or (check_image(args.report, "--report") if args.report else None)
               or (None if args.from_poses else check_output(poses_path, "poses file")))
    if problem:
        return _fail(f"{problem} (nothing was run)", EXIT_USAGE, args)
    tie = None if args.tie is None else [t for t in args.tie if t != "none"]
    settle = SettleConfig(window=args.settle_window, velocity_tol=args.velocity_tol,
                          change_tol=args.change_tol, hold=args.hold, average=args.average,
                          timeout=args.timeout)
    routine_info: dict[str, Any] = {}
    device_info: dict[str, Any] = {}
    status = "complete"
    if args.from_poses:
        try:
            poses, device_info, routine_info = _load_poses(args.from_poses)
        except (OSError, ValueError, KeyError) as exc:
            return _fail(f"--from-poses {args.from_poses}: {exc}", EXIT_USAGE, args)
    else:
        try:
            levels = args.levels[0] if len(args.levels) == 1 else tuple(args.levels)
            refs = excitation(model, kind=args.kind, levels=levels, count=args.count,
                              margin=args.margin, seed=args.seed, frozen=tuple(args.freeze))
            lo, hi = safe_range(model, args.margin)
        except (ValueError, IndexError) as exc:
            return _fail(f"excitation: {exc}", EXIT_USAGE, args)
        routine_info = {"kind": args.kind, "levels": args.levels, "count": args.count,
                        "margin": args.margin, "speed": args.speed, "seed": args.seed,
                        "frozen": args.freeze, "settle": settle.to_dict(), "planned": len(refs)}
        saver = _PoseSaver(poses_path, routine_info)
        _say(args, f"measured poses are saved to {poses_path} as they are recorded "
             "(refit with --from-poses)")
        try:
            result = _run_routine(args, model, refs, settle, (lo, hi), saver)
        except _DeviceError as exc:
            return _fail(str(exc), EXIT_DEVICE, args)
        poses, status, device_info = result.poses, result.status, result.device
        routine_info.update(status=result.status, reason=result.reason,
                            duration=result.duration, recorded=len(poses))
        try:
            saver.finish(poses, device_info)
        except OSError as exc:  # checked above; a full disk or a folder removed meanwhile
            _say(args, f"poise calibrate: could not save the poses to {poses_path}: {exc}")
        if result.status != "complete":
            _say(args, f"routine stopped ({result.status}: {result.reason}); "
                 f"{len(poses)} of {len(refs)} poses kept in {poses_path}")
            code = EXIT_ABORTED if result.status == "aborted" else EXIT_DEVICE
            if args.json:
                print(json.dumps({"ok": False, "status": result.status, "reason": result.reason,
                                  "poses": len(poses), "partial": str(poses_path)}, indent=1))
            return code
        _say(args, f"{len(poses)} poses saved to {poses_path}")
    kept = "" if args.from_poses else f" (the poses are kept in {poses_path})"
    try:
        ident = identify(model, poses, fix=args.fix, tie=tie, holdout=args.holdout,
                         kinematics=not args.no_kinematics)
    except CalibrationError as exc:
        return _fail(f"{exc}{kept}", EXIT_NOT_IDENTIFIABLE, args)
    if args.report:
        try:
            plot_report(ident, poses, args.report, title=f"statics calibration of {model.name} "
                        f"({device_info.get('device', '')})")
        except (OSError, ValueError) as exc:  # checked before; the disk may still fill up
            _say(args, f"poise calibrate: could not write the report {args.report}: {exc}")
    summary = _summary(ident, args, status, len(poses))
    if not args.from_poses:
        summary["poses_file"] = str(poses_path)
    if not ident.identifiable:
        # the data are kept (poses file) so that a better excitation can be added, but no
        # calibration is written
        if args.json:
            print(json.dumps(summary, indent=1))
        print(f"poise calibrate: {ident.message}", file=sys.stderr)
        print("poise calibrate: no calibration written", file=sys.stderr)
        return EXIT_NOT_IDENTIFIABLE
    doc = calibration_document(ident, poses, model_name=str(args.model), device=device_info,
                               routine=routine_info)
    try:
        write_calibration(args.out, doc)
    except (OSError, CalibrationError) as exc:
        return _fail(f"cannot write {args.out}: {exc}{kept}", EXIT_USAGE, args)
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
    print(f"wrote {args.out}" + (f" and {args.report}" if args.report else ""))


def _poses_path(out: str) -> pathlib.Path:
    """Where the measured poses go: ``cal.json`` → ``cal.poses.json`` (what --from-poses reads)."""
    return pathlib.Path(str(out)[: -len(".json")] + ".poses.json")


def _save_poses(path: pathlib.Path, poses, device: dict, routine: dict) -> None:
    """Write the poses file atomically (a crash mid-write leaves the previous version)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"poses": [p.to_dict() for p in poses], "device": device,
                               "routine": routine}, indent=1) + "\n")
    os.replace(tmp, path)


class _PoseSaver:
    """Saves the poses measured so far after each one, so that nothing measured is lost to a
    crash, a kill or a failure later on (identification, report, calibration file)."""

    def __init__(self, path: pathlib.Path, routine: dict[str, Any]) -> None:
        self.path = path
        self.routine = routine
        self.device: dict[str, Any] = {}
        self.poses: list[Any] = []
        self._warned = False

    def add(self, pose: Any) -> None:
        self.poses.append(pose)
        try:
            _save_poses(self.path, self.poses, self.device,
                        {**self.routine, "status": "running", "recorded": len(self.poses)})
        except OSError as exc:  # keep measuring (the poses are in memory); say it once
            if not self._warned:
                self._warned = True
                print(f"poise calibrate: cannot save the poses to {self.path}: {exc}",
                      file=sys.stderr)

    def finish(self, poses, device: dict[str, Any]) -> None:
        """The final file, with the routine's status and the device description."""
        self.poses = list(poses)
        _save_poses(self.path, self.poses, device, self.routine)


def _load_poses(path: str):
    from poise.calibration import Pose

    data = json.loads(pathlib.Path(path).read_text())
    table = data.get("calibration", data)
    poses = [Pose.from_dict(d) for d in table["poses"]]
    device = table.get("device", table.get("provenance", {}).get("device_info", {}))
    return poses, device, table.get("routine", {})


class _DeviceError(Exception):
    pass


def _run_routine(args, model, refs, settle, qa_range, saver: _PoseSaver):
    from poise.calibration import PlantDevice, RoutineDevice, run_excitation

    abort, estop = threading.Event(), threading.Event()
    speed = args.speed * (qa_range[1] - qa_range[0])
    bar = _PoseBar(len(refs), quiet=args.quiet)

    def progress(done: int, total: int, pose, phase: str) -> None:
        bar.show(done, total, pose, phase)
        if pose is not None:
            saver.add(pose)
    old_quit = None
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGQUIT"):
        old_quit = signal.signal(signal.SIGQUIT, lambda *_: estop.set())
    try:
        if args.device == "inprocess":
            from poise.sim import make_plant

            try:
                plant = make_plant(args.model, args.sim_params, seed=args.seed)
            except (ValueError, OSError) as exc:
                raise _DeviceError(f"cannot build the simulated plant: {exc}") from None
            device = PlantDevice(plant)
            saver.device = device.info()
            return run_excitation(device, refs, settle=settle, speed=speed,
                                  qa_range=qa_range, progress=progress, abort=abort,
                                  estop=estop)
        with _open_device(args, model) as (opened, port):
            device = RoutineDevice(opened, port=port)
            saver.device = device.info()
            return run_excitation(device, refs, settle=settle, speed=speed,
                                  qa_range=qa_range, progress=progress, abort=abort,
                                  estop=estop)
    finally:
        bar.close()
        if old_quit is not None:
            signal.signal(signal.SIGQUIT, old_quit)


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


#: Status-packet timeout of a servo bus during calibration [ms]: the routine is quasi-static,
#: so a slow answer (a busy host, a virtual bus) is waited for rather than called a fault.
BUS_TIMEOUT_MS = 200.0
#: Sync reads repeated before a failed one is a fault, during calibration (as above).
BUS_RETRIES = 5


@contextlib.contextmanager
def _open_device(args, model):
    """The device of ``--device`` / ``--sensors`` (:func:`poise.devices.factory.open_device`,
    as ``poise run`` opens it); closed (and a virtual device stopped) on exit."""
    from poise.api.rules import split_device
    from poise.controller.config import DeviceConfig
    from poise.devices.base import DeviceError
    from poise.devices.factory import open_device

    protocol, port = split_device(args.device)
    if args.sensors and protocol != "dynamixel":
        raise _DeviceError("--sensors goes with --device dynamixel:PORT (a servo bus)")
    cfg = DeviceConfig(port=port, protocol=protocol, sensors=args.sensors, timeout=3.0,
                       sim_params=args.sim_params, timeout_ms=BUS_TIMEOUT_MS,
                       retries=BUS_RETRIES)
    try:
        opened = open_device(cfg, model=args.model, m=model.m, rate=500.0, reconnect=False,
                             qa_min=model.qa_min, qa_max=model.qa_max)
    except DeviceError as exc:
        raise _DeviceError(f"cannot connect to {args.device}: {exc}") from None
    try:
        sim = opened.sim
        yield opened.device, (f"sim:{getattr(sim, 'pty', '') or opened.port}" if sim is not None
                              else args.device)
    finally:
        with contextlib.suppress(DeviceError):
            opened.device.close()
