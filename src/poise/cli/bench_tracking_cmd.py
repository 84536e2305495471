"""``poise bench tracking``: moving references followed by every reference robot (issue 33)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable

from poise.benchmarks.benchout import add_json_option, add_quiet_option, emit


def _listed(choices: tuple[str, ...] | None, kind: type = str) -> Callable[[str], list]:
    """An argparse type for ``a,b`` or ``a b`` lists: each item checked against
    ``choices``."""

    def parse(text: str) -> list:
        items = [kind(v) for v in text.split(",") if v]
        bad = [v for v in items if choices is not None and v not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected one or more of {', '.join(choices or ())}, comma-separated")
        return items

    return parse


def register(commands: argparse._SubParsersAction, groups: dict) -> None:
    """Add ``poise bench tracking``."""
    from poise.benchmarks import tracking_protocol as tp

    p = groups["bench"].add_parser(
        "tracking", help="moving references (sine, circle, steps; streamed or as "
        "trajectories) on every reference robot: RMS, max, lag (simulated time); --live: "
        "end to end through poise run and MQTT",
        description=tp.DESCRIPTION)
    p.add_argument("--robots", nargs="+", type=_listed(None), default=[list(tp.ROBOTS)],
                   metavar="NAME", help="robots (default: the five with actuation)")
    p.add_argument("--modes", nargs="+", type=_listed(tp.MODES), metavar="MODE",
                   help=f"{', '.join(tp.MODES)} (default both; --quick: fb)")
    p.add_argument("--algorithms", nargs="+", type=_listed(tp.ALGORITHMS), metavar="ALG",
                   help=f"{', '.join(tp.ALGORITHMS)} (default both; --quick: alg1)")
    p.add_argument("--freqs", nargs="+", type=_listed(None, float), metavar="HZ",
                   help="sine and circle frequencies [Hz] (default "
                   f"{','.join(f'{f:g}' for f in tp.FREQS)}; --quick: 0.1)")
    p.add_argument("--kinds", nargs="+", type=_listed(tp.KINDS), default=[list(tp.KINDS)],
                   metavar="KIND", help="sine (1-D tasks), circle (2-D tasks), steps "
                   "(default all)")
    p.add_argument("--as", dest="how", nargs="+", type=_listed(tp.AS),
                   default=[list(tp.AS)], metavar="HOW",
                   help="stream (50 Hz samples) and/or trajectory (waypoints; skipped while "
                   "the simulated loop has no run_trajectory) (default both)")
    p.add_argument("--amplitude", type=float, default=tp.AMPLITUDE, metavar="FRACTION",
                   help=f"amplitude, radius and step as a fraction of the reach (default "
                   f"{tp.AMPLITUDE:g})")
    p.add_argument("--centre", nargs="+", type=float, metavar="X",
                   help="the references' centre [task units] (default: each example's "
                   "target), e.g. where a robot holds the whole circle")
    p.add_argument("--plant", action="append", default=[], metavar="NAME[=FILE]",
                   help="also run robot NAME's cases on a simulated robot that differs from "
                   "the controller's model: the true parameters of the model file FILE, or "
                   f"without FILE its built-in model with every spring "
                   f"{(tp.PLANT_STIFFER - 1) * 100:.0f} %% stiffer (repeatable, one per robot); "
                   "or a named plant (stiff10, mixed15, friction, hysteresis, slack+noise, "
                   "real; docs/simulator.md): alone for every robot of the run, NAME=PLANT for "
                   "one")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: fb, alg1, 0.1 Hz (unless given)")
    p.add_argument("--seed", type=int, default=tp.SEED)
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="processes (one case each at a time; default 1)")
    p.add_argument("--figure", metavar="PATH",
                   help="one PNG per robot, reference against arm for one case (streamed, "
                   "fb, alg1, nearest 0.1 Hz where run): PATH.png → PATH_<robot>.png, else a "
                   "folder; needs matplotlib, an optional extra: pip install 'poise[plot]'")
    live = p.add_argument_group("end to end (--live)")
    live.add_argument("--live", action="store_true",
                      help="instead of the simulated cases: poise run as a subprocess per "
                      "robot on an MQTT broker, command-to-motion latency of set/target and "
                      "two references streamed over MQTT (wall time: about 2 min per robot)")
    live.add_argument("--mqtt", metavar="URL",
                      help="broker (default: Mosquitto on 127.0.0.1:1883 if it listens, else "
                      "an embedded one)")
    live.add_argument("--commands", type=int, default=30, metavar="N",
                      help="set/target commands per robot (default 30)")
    live.add_argument("--stream-seconds", type=float, default=20.0, metavar="S",
                      help="length of each streamed reference (default 20)")
    add_json_option(p)
    add_quiet_option(p)
    p.set_defaults(func=run)


def _flat(values: list[list] | None) -> list | None:
    return None if values is None else [v for vs in values for v in vs]


def run(args: argparse.Namespace) -> int:
    from poise.benchmarks import tracking_protocol as tp

    if args.workers < 1 or not 0 < args.amplitude <= 1 or args.commands < 1:
        print("poise bench tracking: --workers and --commands must be >= 1, --amplitude in "
              "(0, 1]", file=sys.stderr)
        return 2
    if args.figure:
        from poise.api.extras import require

        require("plot", "--figure")
    robots = _flat(args.robots)
    if args.live:
        return _live(args, robots)
    quick = tp.QUICK if args.quick else {}
    modes = _flat(args.modes) or list(quick.get("modes", tp.MODES))
    algorithms = _flat(args.algorithms) or list(quick.get("algorithms", tp.ALGORITHMS))
    freqs = _flat(args.freqs) or list(quick.get("freqs", tp.FREQS))
    if not all(f > 0 for f in freqs):
        print("poise bench tracking: --freqs must be > 0", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="poise-tracking-") as folder:
        return _simulated(args, robots, modes, algorithms, freqs, folder)


def _simulated(args: argparse.Namespace, robots: list[str], modes: list[str],
               algorithms: list[str], freqs: list[float], folder: str) -> int:
    from poise.benchmarks import tracking
    from poise.benchmarks import tracking_protocol as tp
    from poise.benchmarks.plants import named_writer, parse_plants, stiffer
    from poise.progress import progress_bar

    made: dict[str, str] = {}  # a plant written here → what it is (the file goes with the run)

    named = named_writer(folder, made)

    def make(name: str) -> str:
        path = stiffer(name, tp.PLANT_STIFFER, folder)
        made[path] = (f"{name} with every spring {(tp.PLANT_STIFFER - 1) * 100:.0f} % "
                      "stiffer (built in)")
        return path

    try:
        plants = parse_plants(args.plant, make, named=named, robots=robots)
        cases = tracking.cases_for(robots, modes, algorithms, freqs, _flat(args.kinds),
                                   _flat(args.how), plants, args.seed, args.amplitude,
                                   args.centre)
        if args.figure:
            cases = tracking.with_traces(cases)
        with progress_bar(len(cases), "bench tracking", unit="case", quiet=args.quiet) as bar:
            result = tracking.run(cases, workers=args.workers, plants=plants,
                                  progress=bar.update)
    except (ValueError, RuntimeError) as exc:
        print(f"poise bench tracking: {exc}", file=sys.stderr)
        return 2
    result["plants"] = {k: made.get(v, v) for k, v in result["plants"].items()}
    for case in result["cases"]:
        case["plant"] = made.get(case["plant"], case["plant"])
    from poise.benchmarks.tracking_figure import draw, take_traces

    traces = take_traces(result)
    if args.figure:
        result["figures"] = draw(traces, args.figure)
    from poise.benchmarks.tracking_report import table

    return emit(result, table(result), args.json)


def _live(args: argparse.Namespace, robots: list[str]) -> int:
    from poise.benchmarks import tracking_live
    from poise.progress import progress_bar

    try:
        with progress_bar(None, "bench tracking --live", unit="step",
                          quiet=args.quiet) as bar:
            result = tracking_live.run(robots, url=args.mqtt, commands=args.commands,
                                       stream_seconds=args.stream_seconds,
                                       progress=bar.set_postfix_str)
    except (ValueError, RuntimeError) as exc:
        print(f"poise bench tracking: {exc}", file=sys.stderr)
        return 2
    return emit(result, tracking_live.table(result), args.json)
