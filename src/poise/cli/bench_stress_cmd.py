"""``poise bench stress``: e-stop behind a command flood, signals, SIGKILL (issue 17)."""

from __future__ import annotations

import argparse

from poise.benchmarks.benchout import add_json_option, emit

#: How much of each measurement (:func:`poise.telemetry.stress.run`'s keyword of the same
#: name): flag → (default, what is counted); 0 skips it.
SIZES: dict[str, tuple[int, str]] = {
    "--rounds": (10, "e-stop rounds"),
    "--flood": (2000, "commands per flood"),
    "--signals": (100, "SIGINT/SIGTERM runs of poise run"),
    "--kills": (20, "SIGKILL runs of poise run"),
    "--behind": (100, "floods of targets, clear and run start with the e-stop behind them on "
                 "one connection"),
    "--retained": (20, "commands published retained while running"),
    "--disk-full": (3, "runs of poise run whose log hits a full file system"),
    "--truncate": (50, "offsets a real log is cut at and read back"),
}


def register(commands, groups) -> None:
    p = groups["bench"].add_parser(
        "stress", help="e-stop latency behind 2,000 commands, a command flood, SIGINT/SIGTERM "
        "at random moments, SIGKILL orphans")
    p.add_argument("--mqtt", metavar="URL",
                   help="broker (default: Mosquitto on 127.0.0.1:1883, else an embedded one)")
    for flag, (default, what) in SIZES.items():
        p.add_argument(flag, type=int, default=default, metavar="N", help=f"{what} (0: skip)")
    p.add_argument("--priority", type=int, default=None, metavar="P",
                   help="the service's loop.priority (SCHED_FIFO where the OS grants it; 0: "
                   "the normal scheduler; default: the configuration's, 20)")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.cli import main
    from poise.telemetry import stress

    sizes = {flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_"))
             for flag in SIZES}
    result = stress.run(args.mqtt, priority=args.priority, poise=main, **sizes)
    return emit(result, stress.table(result), args.json)
