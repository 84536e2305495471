"""``poise bench loop``: control-loop timing against the virtual device."""

from __future__ import annotations

import argparse
import tempfile

from poise.benchmarks.benchout import add_json_option, emit


def register(commands, groups) -> None:
    p = groups["bench"].add_parser(
        "loop", help="control-loop lateness/latency/missed cycles at 500 Hz and 1 kHz")
    p.add_argument("--seconds", type=float, default=60.0, help="measured seconds per rate")
    p.add_argument("--rates", type=float, nargs="+", default=[500.0, 1000.0], metavar="HZ")
    p.add_argument("--pacing", choices=("device", "host"), default="device")
    p.add_argument("--no-telemetry", action="store_true",
                   help="measure without MQTT telemetry and the MCAP log")
    p.add_argument("--model", default="double_pendulum", metavar="NAME",
                   help="reference robot (default double_pendulum)")
    p.add_argument("--target", type=float, nargs="+", metavar="X",
                   help="target (default: a reachable one of the model)")
    p.add_argument("--reference", action="store_true",
                   help="also run every rate on the numpy reference cycle in one process "
                   "(the state before the real-time core: before/after)")
    p.add_argument("--process", nargs="+", choices=("own", "shared"), default=["own"],
                   help="the controller in a process of its own (as poise run), in the "
                   "benchmark's process, or both (default own)")
    p.add_argument("--priority", type=int, nargs="+", default=[None], metavar="P",
                   help="loop.priority of each run: SCHED_FIFO priority where the OS grants "
                   "it (the loop and e-stop threads, the virtual device one below), 0: the normal "
                   "scheduler (default: the configuration's, 20; several: one run each)")
    p.add_argument("--busy-poll", nargs="+", choices=("off", "on"), default=["off"],
                   help="loop.busy_poll of each run: on, the loop thread polls the port "
                   "without sleeping (a whole core); several: one run each (default off)")
    p.add_argument("--cpu", type=int, nargs="+", default=[None], metavar="N",
                   help="loop.cpu of each run: the loop thread's CPU (-1: the last one, -2: "
                   "not pinned; default: the configuration's, -1; several: one run each)")
    p.add_argument("--wire", nargs="+", choices=("on", "off"), default=["on"],
                   help="loop.wire of each run: on, each sensor frame is answered on the wire "
                   "path (one compiled call from its bytes to the setpoint's); several: one "
                   "run each (default on)")
    p.add_argument("--follow", nargs="+", choices=("none", "stream"), default=["none"],
                   help="stream: the loop follows a moving reference over the window (a "
                   "sine or circle of 2 %% of the reach at 0.25 Hz, streamed as reference "
                   "commands of 50 Hz samples), so following's per-cycle cost is measured; "
                   "none: the target held (default); several: one run each")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.controller import benchmark
    from poise.telemetry.service import bench_attach

    with tempfile.TemporaryDirectory() as logs:
        attach = None if args.no_telemetry else bench_attach(logs)
        result = benchmark.run(args.seconds, tuple(args.rates), model=args.model,
                               target=tuple(args.target) if args.target else None,
                               pacing=args.pacing, attach=attach, reference=args.reference,
                               processes=tuple(args.process),
                               priorities=tuple(args.priority),
                               busy_polls=tuple(v == "on" for v in args.busy_poll),
                               cpus=tuple(args.cpu),
                               wires=tuple(v == "on" for v in args.wire),
                               follows=tuple(args.follow))
    return emit(result, benchmark.table(result), args.json)
