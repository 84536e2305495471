"""``poise bench control``: every reference robot with actuation reaches and holds targets."""

from __future__ import annotations

import argparse
import sys
import tempfile

from poise.benchmarks.benchout import add_json_option, add_quiet_option, emit


def register(commands: argparse._SubParsersAction, groups: dict) -> None:
    """Add ``poise bench control``."""
    from poise.benchmarks import control_protocol as control  # light: the constants only

    p = groups["bench"].add_parser(
        "control", help="closed-loop control on every reference robot: success, settling "
        "time against 3 periods of the slowest mode, overshoot, peak rate (simulated time)",
        description=control.DESCRIPTION)
    p.add_argument("--models", nargs="+", default=list(control.MODELS), metavar="NAME")
    p.add_argument("--modes", nargs="+", default=list(control.MODES), choices=control.MODES)
    p.add_argument("--algorithms", nargs="+", default=list(control.ALGORITHMS),
                   choices=control.ALGORITHMS)
    p.add_argument("--targets", type=int, default=control.TARGETS, metavar="N",
                   help=f"held targets per model (default {control.TARGETS})")
    p.add_argument("--seed", type=int, default=control.SEED)
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="processes (one case each at a time; default 1)")
    p.add_argument("--plant", action="append", default=[], metavar="[NAME=]PLANT",
                   help="simulate robot NAME with the true parameters of the model file PLANT "
                   "(e.g. poise model show NAME --json, its spring 10 %% stiffer, with an "
                   "optional [plant] table of imperfections) while the controller keeps its "
                   "own model, given only the robot's weighed total mass (model.total_mass: "
                   "the plant's to 3 significant digits): how the defaults cope with a model "
                   "that is off. PLANT may be "
                   "a named plant (stiff10, mixed15, friction, hysteresis, slack+noise, real; "
                   "docs/simulator.md): alone it applies to every robot of the run "
                   "(repeatable; a later value for a robot wins)")
    p.add_argument("--calibrated", action="store_true",
                   help="with --plant: first calibrate each robot on its plant (poise "
                   "calibrate's routine and fit, in simulated time, the plant weighed: its true "
                   "total mass to 3 significant digits as --total-mass), then run the targets with "
                   "the identified model as the controller's statics (model.calibration); the "
                   "report states each calibration and the friction band and hysteresis it saw")
    p.add_argument("--figure", metavar="PNG",
                   help="also draw the README figure (soft_arm_soft, old gain vs automatic "
                   "gain and shaped move); needs pip install 'poise[plot]'")
    add_json_option(p)
    add_quiet_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.targets < 1 or args.workers < 1:
        print("poise bench control: --targets and --workers must be >= 1", file=sys.stderr)
        return 2
    if args.figure:
        from poise.api.extras import require

        require("plot", "--figure")
    with tempfile.TemporaryDirectory(prefix="poise-control-") as folder:
        return _run(args, folder)


def _run(args: argparse.Namespace, folder: str) -> int:
    from poise.benchmarks import control
    from poise.benchmarks.plants import named_writer, parse_plants
    from poise.progress import progress_bar

    made: dict[str, str] = {}  # a plant written here → what it is (the file goes with the run)

    named = named_writer(folder, made)

    try:
        plants = parse_plants(args.plant, named=named, robots=args.models)
    except ValueError as exc:
        print(f"poise bench control: {exc}", file=sys.stderr)
        return 2
    if args.calibrated and not plants:
        print("poise bench control: --calibrated calibrates on the plant: give --plant",
              file=sys.stderr)
        return 2
    models = list(args.models)
    calibrations: dict = {}
    try:
        if args.calibrated:
            from poise.benchmarks.calibrated import calibrate_plants

            with progress_bar(len(plants), "calibration", unit="robot",
                              quiet=args.quiet) as bar:
                calibrations = calibrate_plants(plants, folder, seed=args.seed,
                                                workers=args.workers, progress=bar.update)
            models = [m for m in models if m not in calibrations or calibrations[m]["file"]]
            plants = {k: v for k, v in plants.items() if k in models}
        cases = len(models) * len(args.modes) * len(args.algorithms)
        with progress_bar(cases, "bench control", unit="case", quiet=args.quiet) as bar:
            result = control.run(models, args.modes, args.algorithms, count=args.targets,
                                 seed=args.seed, workers=args.workers, progress=bar.update,
                                 plants=plants, calibrations={
                                     k: v["file"] for k, v in calibrations.items() if v["file"]})
    except (ValueError, RuntimeError) as exc:
        print(f"poise bench control: {exc}", file=sys.stderr)
        return 2
    result["plants"] = {k: made.get(v, v) for k, v in result["plants"].items()}
    if args.calibrated:
        from poise.benchmarks.calibrated import table as calibration_table

        result["calibrations"] = calibrations  # the records (their files go with the folder)
        return emit(result, control.table(result) + "\n" + calibration_table(calibrations),
                    args.json)
    if args.figure:
        result["figure"] = control.figure(args.figure)
    return emit(result, control.table(result), args.json)
