"""``poise bench stress``: e-stop behind a command flood, signals, SIGKILL (issue 17)."""

from __future__ import annotations

import argparse

from poise.benchmarks.benchout import add_json_option, emit


def register(commands, groups) -> None:
    p = groups["bench"].add_parser(
        "stress", help="e-stop latency behind 2,000 commands, a command flood, SIGINT/SIGTERM "
        "at random moments, SIGKILL orphans")
    p.add_argument("--mqtt", metavar="URL",
                   help="broker (default: Mosquitto on 127.0.0.1:1883, else an embedded one)")
    p.add_argument("--rounds", type=int, default=10, help="e-stop rounds (0: skip)")
    p.add_argument("--flood", type=int, default=2000, help="commands per flood (0: skip)")
    p.add_argument("--signals", type=int, default=100,
                   help="SIGINT/SIGTERM runs of poise run (0: skip)")
    p.add_argument("--kills", type=int, default=20, help="SIGKILL runs of poise run (0: skip)")
    p.add_argument("--behind", type=int, default=100, metavar="N",
                   help="floods of targets, clear and run start with the e-stop behind them "
                   "on one connection (0: skip)")
    p.add_argument("--retained", type=int, default=20, metavar="N",
                   help="commands published retained while running (0: skip)")
    p.add_argument("--disk-full", type=int, default=3, metavar="N",
                   help="runs of poise run whose log hits a full file system (0: skip)")
    p.add_argument("--truncate", type=int, default=50, metavar="N",
                   help="offsets a real log is cut at and read back (0: skip)")
    p.add_argument("--priority", type=int, default=None, metavar="P",
                   help="the service's loop.priority (SCHED_FIFO where the OS grants it; 0: "
                   "the normal scheduler; default: the configuration's, 20)")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.cli import main
    from poise.telemetry import stress

    result = stress.run(args.mqtt, rounds=args.rounds, flood=args.flood,
                        signals=args.signals, kills=args.kills, priority=args.priority,
                        behind=args.behind, retained=args.retained,
                        disk_full=args.disk_full, truncate=args.truncate, poise=main)
    return emit(result, stress.table(result), args.json)
