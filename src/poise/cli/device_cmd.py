"""``poise device sim`` (a virtual device on a pty) and ``poise device probe`` (handshake + link
statistics of any device)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
from typing import Any


def register(commands, groups) -> None:
    dev = groups["device"]
    sim = dev.add_parser("sim", help="run a simulated device on a pseudo-terminal",
                         description="Open a pseudo-terminal, print 'PTY <path>' on the first "
                         "line, run the model's plant in real time and speak the poise protocol.")
    sim.add_argument("--model", required=True, metavar="NAME", help="robot model to simulate")
    sim.add_argument("--protocol", choices=("poise", "dynamixel"), default="poise",
                     help="poise: the poise wire protocol (default); dynamixel: a virtual "
                     "Dynamixel X-series bus (first line 'PTY <path>') plus a poise-protocol "
                     "joint-sensor board (second line 'SENSORS <path>'), docs/devices.md")
    sim.add_argument("--servos", metavar="FILE",
                     help="with --protocol dynamixel: a TOML file whose [[device.servos]] "
                     "tables set IDs and conversion (default: IDs 1 … m, docs/devices.md)")
    sim.add_argument("--rate", type=int, default=500, metavar="HZ",
                     help="sensor stream rate [Hz] (default 500)")
    sim.add_argument("--params", metavar="FILE", help="plant parameter file for the simulator")
    sim.add_argument("--watchdog-ms", type=int, default=100, metavar="MS",
                     help="watchdog timeout [ms] (default 100)")
    sim.add_argument("--drop", type=float, default=0.0, metavar="P",
                     help="probability of dropping a device→host frame")
    sim.add_argument("--corrupt", type=float, default=0.0, metavar="P",
                     help="probability of corrupting a device→host frame")
    sim.add_argument("--delay", type=float, default=0.0, metavar="MS",
                     help="extra latency of device→host frames [ms]")
    sim.add_argument("--disconnect-after", type=float, metavar="S",
                     help="close the pty S seconds after opening it (simulated unplug)")
    sim.add_argument("--reopen-after", type=float, default=1.0, metavar="S",
                     help="after a disconnect, open a new pty S seconds later (prints a new "
                     "'PTY <path>' line; default 1; negative: exit)")
    sim.add_argument("--link", metavar="PATH",
                     help="also keep a symlink PATH pointing at the current pty")
    sim.add_argument("--own-link-dir", action="store_true",
                     help="the directory holding --link was made for this device: remove it "
                     "(once empty) on exit, whatever ends the device")
    sim.add_argument("--parent-pid", type=int, metavar="PID",
                     help="exit when process PID (the one that started this device) dies, "
                     "even if it is killed with SIGKILL")
    sim.add_argument("--fifo-priority", type=int, metavar="P",
                     help="run the device's threads at SCHED_FIFO priority P, set once the "
                     "device has started (a controller that launches it early; refused: the "
                     "normal scheduler, said on stderr). Default: one below the inherited "
                     "real-time priority; with --protocol dynamixel one below a controller's "
                     "default loop.priority (19), where the OS grants it")
    sim.add_argument("--cpus", type=_cpu_list, metavar="LIST",
                     help="run the device on these CPUs (comma-separated numbers), set once it "
                     "has built its plant: a controller keeps its loop's CPU apart (loop.cpu)")
    sim.add_argument("--seed", type=int, help="random seed of the fault injection")
    sim.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    sim.set_defaults(func=run_sim)

    probe = dev.add_parser("probe", help="handshake with a device and measure the link",
                           description="Connect, do the handshake, print the device "
                           "description and link statistics over S seconds.")
    probe.add_argument("port", metavar="PORT")
    probe.add_argument("--seconds", type=float, default=2.0, metavar="S",
                       help="how long to measure (default 2)")
    probe.add_argument("--timeout", type=float, default=2.0, metavar="S",
                       help="handshake timeout (default 2)")
    probe.add_argument("--json", action="store_true", help="print JSON")
    probe.set_defaults(func=run_probe)


def _fail(cmd: str, msg: str) -> int:
    print(f"poise device {cmd}: {msg}", file=sys.stderr)
    return 2


def run_sim(args: argparse.Namespace) -> int:
    from poise.firmware_bridge.lifetime import yield_to_parent

    yield_to_parent()  # before any thread starts: never an equal of the control loop
    if args.protocol == "dynamixel":
        return _run_dynamixel_sim(args)
    if args.servos:
        return _fail("sim", "--servos goes with --protocol dynamixel")
    if args.own_link_dir and not args.link:
        return _fail("sim", "--own-link-dir needs --link PATH")
    try:
        code = _run_sim(args)
    finally:
        if args.own_link_dir:
            _remove_link_dir(args.link)
    if args.parent_pid is not None:  # a managed child: the pty and link are gone, nothing
        sys.stdout.flush()           # else to finalize; skip the interpreter's teardown
        sys.stderr.flush()           # (~0.5-1 s with numpy, scipy and numba loaded), which
        os._exit(code)               # would hold up the parent's exit
    return code


def _run_dynamixel_sim(args: argparse.Namespace) -> int:
    """The virtual Dynamixel bus and its joint-sensor board (poise.devices.dynamixel_sim)."""
    unsupported = [flag for flag, used in (
        ("--drop", args.drop), ("--corrupt", args.corrupt), ("--delay", args.delay),
        ("--disconnect-after", args.disconnect_after), ("--link", args.link),
        ("--watchdog-ms", args.watchdog_ms != 100)) if used]
    if unsupported:
        return _fail("sim", f"{', '.join(unsupported)}: not available with --protocol "
                     "dynamixel (the poise wire protocol's fault injection)")
    from poise.devices.dynamixel_sim import main

    if args.cpus is not None:  # before the bus's threads start: they inherit it
        _pin(args.cpus)
    argv = ["--model", args.model, "--sensor-rate", str(args.rate)]
    for flag, value in (("--params", args.params), ("--config", args.servos),
                        ("--parent-pid", args.parent_pid), ("--duration", args.duration),
                        ("--fifo-priority", args.fifo_priority)):
        if value is not None:
            argv += [flag, str(value)]
    return main(argv)


def _remove_link_dir(link: str) -> None:
    """Remove the ``--link`` symlink and its directory (only if empty: never a tree)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(link)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(os.path.abspath(link)))


class _StopNow(BaseException):
    """A stop (SIGTERM, the parent's death) while the device is still starting: raised from
    the signal handler, it abandons the imports and the plant's kernels at once (the device
    has opened nothing yet). A BaseException, so that no ``except Exception`` on the way
    (a compiler's) swallows it."""


def _run_sim(args: argparse.Namespace) -> int:
    from poise.firmware_bridge.lifetime import parent_alive, watch_parent

    stop = threading.Event()
    starting = True

    def request_stop() -> None:
        stop.set()
        if starting:
            raise _StopNow

    # SIGTERM (SimDevice.stop, kill) ends the device through its normal shutdown below
    with contextlib.suppress(ValueError):  # ValueError: not the main thread (embedded use)
        signal.signal(signal.SIGTERM, lambda *_: request_stop())
    parent = args.parent_pid
    try:
        if parent is not None and not watch_parent(parent, request_stop):
            print(f"poise device sim: parent process {parent} is gone; not starting",
                  file=sys.stderr)
            return 1
        device = _make_device(args)
        if isinstance(device, int):
            return device
        starting = False  # from here a stop request only sets ``stop``
    except _StopNow:
        return 0
    if stop.is_set():
        return 0
    device.start()
    try:
        t_end = math.inf if args.duration is None else time.monotonic() + args.duration
        while time.monotonic() < t_end and device._thread is not None and \
                device._thread.is_alive() and not stop.is_set():
            if parent is not None and not parent_alive(parent):
                break  # the parent died (the portable check; Linux also signals us)
            stop.wait(min(0.1, max(0.0, t_end - time.monotonic())))
    finally:
        device.stop()
    return 0


def _make_device(args: argparse.Namespace) -> Any:
    """The :class:`~poise.firmware_bridge.device.PtyDevice` of ``args`` (not started: no pty
    yet), at its priority and on its CPUs; or the exit code after saying what is wrong."""
    from poise.firmware_bridge.device import DeviceEndpoint, FaultInjection, PtyDevice

    try:
        import poise.sim as sim
    except ImportError as exc:  # pragma: no cover - poise.sim is part of the package
        return _fail("sim", f"the simulator is not available ({exc})")
    make_plant = getattr(sim, "make_plant", None)
    if make_plant is None:
        return _fail("sim", "the simulator is not available in this version of poise "
                     "(poise.sim.make_plant is missing); a real device can be probed with "
                     "'poise device probe PORT'")
    try:
        plant = make_plant(args.model, args.params)
    except (ValueError, KeyError, FileNotFoundError, OSError) as exc:
        return _fail("sim", f"cannot build the plant of model {args.model!r}: {exc}")
    try:
        faults = FaultInjection(drop=args.drop, corrupt=args.corrupt, delay_ms=args.delay,
                                disconnect_after=args.disconnect_after,
                                reopen_after=None if args.reopen_after < 0 else args.reopen_after,
                                seed=args.seed)
        endpoint = DeviceEndpoint(plant, rate_hz=args.rate, watchdog_ms=args.watchdog_ms,
                                  firmware_id=f"poise-sim:{args.model}"[:16])
    except ValueError as exc:
        return _fail("sim", str(exc))

    def announce(path: str) -> None:
        with contextlib.suppress(BrokenPipeError):  # the parent stopped reading: it is going
            print(f"PTY {path}", flush=True)

    device = PtyDevice(endpoint, faults=faults, link=args.link, on_open=announce)
    if args.fifo_priority is not None:  # before the device's threads start: they inherit it
        _realtime_priority(args.fifo_priority)
    if args.cpus is not None:  # likewise
        _pin(args.cpus)
    return device


def _cpu_list(text: str) -> frozenset[int]:
    """argparse type of ``--cpus``."""
    from poise.devices.affinity import parse_cpus

    try:
        return parse_cpus(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pin(cpus: frozenset[int]) -> None:
    """Every thread of this process, and those it starts, on ``cpus`` (once the device has
    imported and built its plant, on every CPU); a refusal is said on stderr."""
    from poise.devices.affinity import pin_process

    refused = pin_process(cpus)
    if refused:
        print(f"poise device sim: {refused}: any CPU", file=sys.stderr)


def _realtime_priority(priority: int) -> None:
    """``SCHED_FIFO`` at ``priority`` for this thread (and the threads it starts); a refusal
    is said on stderr and the device runs at the normal scheduler."""
    from poise.firmware_bridge.lifetime import fifo

    got = fifo(priority)
    if "refused" in got:
        print(f"poise device sim: {got['refused']}: normal scheduler", file=sys.stderr)


def run_probe(args: argparse.Namespace) -> int:
    from poise.firmware_bridge.link import LinkError

    try:
        desc, stats = asyncio.run(_probe(args.port, args.seconds, args.timeout))
    except LinkError as exc:
        print(f"poise device probe: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"port": args.port, "seconds": args.seconds,
                          "device": desc.as_dict(), "link": stats.as_dict()}, indent=1))
        return 0
    d = desc.as_dict()
    s = stats.as_dict()
    print(f"port              {args.port}")
    print(f"protocol version  {d['protocol_version']}")
    print(f"firmware id       {d['firmware_id']}")
    print(f"schema checksum   {d['schema_checksum']}")
    print(f"rate              {d['rate_hz']} Hz announced, {s['frame_rate_hz']:.1f} Hz measured "
          f"over {args.seconds:g} s")
    print(f"watchdog          {d['watchdog_ms']} ms")
    print("channels:")
    for c in d["channels"]:
        effort = (f"  effort ≤ {c['effort_limit']:g} {c['effort_unit']}"
                  if c["kind"] == "actuator" else "")
        print(f"  {c['index']:>2} {c['kind']:<10} {c['name']:<16} [{c['lower']:g}, "
              f"{c['upper']:g}] {c['unit']}{effort}")
    e = s["decode_errors"]
    print(f"frames            {s['rx_frames']} rx, {s['tx_frames']} tx, "
          f"{s['sensor_frames']} sensor frames")
    print(f"errors            crc {e['crc']}, cobs {e['cobs']}, length {e['length']}, "
          f"unknown type {e['unknown_type']}, malformed {e['malformed']}, "
          f"version {e['version']}")
    print(f"sequence gaps     {s['seq_gaps']} ({s['lost_frames']} frames lost)")
    rtt = s["rtt_ms"]
    print(f"round trip        p50 {rtt['p50']:.3f} ms, p95 {rtt['p95']:.3f} ms, "
          f"max {rtt['max']:.3f} ms ({s['rtt_samples']} samples, heartbeat echo)")
    return 0


async def _probe(port: str, seconds: float, timeout: float):
    from poise.firmware_bridge.transport import AsyncLink

    # Heartbeats every 10 ms give the round-trip samples without arming the device.
    async with AsyncLink(port, timeout=timeout, heartbeat=0.01, reconnect=False) as link:
        link.stats.reset_rate()
        await asyncio.sleep(seconds)
        return link.description, link.stats
