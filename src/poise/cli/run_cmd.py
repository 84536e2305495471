"""``poise run``: run the real-time controller against a device (default: the virtual one).

    poise run                                  # demo: virtual double pendulum, Algorithm 1,
                                               # a reachable target, embedded MQTT, 5 s
    poise run --config examples/soft_arm_stiff.toml --duration 20 --json-summary
    poise run --model soft_arm_stiff --target 0.2 -0.9 --mode ff --device /dev/ttyACM0

Flags override the configuration file's keys. Ctrl-C stops cleanly: disarm, close, summary.
Exit codes: 0 the run ended in a non-fault state, 1 it ended in fault/estop (or never ran),
2 invalid configuration.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import signal
import sys
import threading
import time
from typing import Any

#: The embedded demo: a target the double pendulum reaches on E within its tendon limits.
DEMO_TARGET = (0.5,)
DEMO_DURATION = 10.0
#: Where the telemetry layer is attached (the lead's wiring point).


def register(commands, groups) -> None:
    p = commands.add_parser(
        "run", help="run the real-time controller (default: a demo on the virtual device)",
        description="Run the fixed-rate controller. With no arguments: the virtual "
        "double pendulum, Algorithm 1, a reachable target and an embedded MQTT broker for "
        f"{DEMO_DURATION:g} s, then a summary. Flags override configuration keys.")
    p.add_argument("--config", metavar="FILE", help="configuration file (TOML)")
    p.add_argument("--model", metavar="NAME", help="model name or file (model.name)")
    p.add_argument("--algorithm", choices=("alg1", "alg2", "plain"),
                   help="IK algorithm (algorithm.name)")
    p.add_argument("--target", type=float, nargs="+", metavar="X",
                   help="task target [task units] (algorithm.target)")
    p.add_argument("--mode", choices=("ff", "fb"), help="feedforward or feedback (loop.mode)")
    p.add_argument("--device", metavar="PORT|sim", help="serial port or 'sim' (device.port)")
    p.add_argument("--sim-params", metavar="FILE",
                   help="the simulated robot's true parameters (device.sim_params)")
    p.add_argument("--calibration", metavar="FILE",
                   help="calibration file used as the statics model (model.calibration)")
    p.add_argument("--gravity", type=float, metavar="G",
                   help="gravity of the controller's statics model [m/s²] (model.gravity)")
    p.add_argument("--rate", type=float, metavar="HZ", help="loop rate, ≤ 1000 (loop.rate)")
    p.add_argument("--pacing", choices=("device", "host"), help="loop pacing (loop.pacing)")
    p.add_argument("--duration", type=float, metavar="S",
                   help=f"stop after S seconds (default: {DEMO_DURATION:g} for the demo, "
                   "else until Ctrl-C)")
    p.add_argument("--log", metavar="FILE", help="experiment log file (log.path)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any key, e.g. --set limits.qa_rate=0.2 (repeatable)")
    p.add_argument("--no-mqtt", action="store_true", help="no MQTT (mqtt.enabled = false)")
    p.add_argument("--no-log", action="store_true",
                   help="no experiment log (default: [log] path, else runs/<model>-<time>.mcap)")
    # -- telemetry flags (poise.telemetry; see docs/mqtt.md) --
    p.add_argument("--mqtt", metavar="URL",
                   help="MQTT broker, mqtt[s]://[user:pass@]host[:port] (mqtt.url; default: "
                   "an embedded broker on loopback, address printed)")
    p.add_argument("--robot-id", metavar="ID",
                   help="MQTT topic level poise/<ID>/ (mqtt.robot_id)")
    p.add_argument("--json-summary", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


FLAG_KEYS = {
    "model": "model.name", "algorithm": "algorithm.name", "target": "algorithm.target",
    "mode": "loop.mode", "device": "device.port", "sim_params": "device.sim_params",
    "calibration": "model.calibration", "gravity": "model.gravity", "rate": "loop.rate",
    "pacing": "loop.pacing", "log": "log.path",
    "mqtt": "mqtt.url", "robot_id": "mqtt.robot_id",
}


def overrides(args: argparse.Namespace) -> dict[str, tuple[Any, str]]:
    """Configuration overrides from the flags: ``{"loop.rate": (1000.0, "--rate")}``."""
    from poise.controller.config import parse_override

    out: dict[str, tuple[Any, str]] = {}
    for text in args.set:
        key, value = parse_override(text)
        out[key] = (value, f"--set {text}")
    for attr, key in FLAG_KEYS.items():
        value = getattr(args, attr)
        if value is not None:
            out[key] = (list(value) if isinstance(value, list) else value,
                        f"--{attr.replace('_', '-')}")
    if args.no_mqtt:
        out["mqtt.enabled"] = (False, "--no-mqtt")
    if args.config is None and "algorithm.target" not in out and "model.name" not in out:
        out["algorithm.target"] = (list(DEMO_TARGET), "the embedded demo")
    return out


def run(args: argparse.Namespace) -> int:
    from poise.controller.config import ConfigError, load_config
    from poise.controller.loop import Controller

    demo = args.config is None and args.model is None and args.device is None
    try:
        config = load_config(args.config, overrides(args))
        controller = Controller(config)
    except (ConfigError, ValueError) as exc:
        print(f"poise run: {exc}", file=sys.stderr)
        return 2
    duration = args.duration if args.duration is not None else (DEMO_DURATION if demo else None)
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    telemetry = None
    try:
        telemetry = _attach_telemetry(controller, args.quiet, _log_path(config, args))
        if not args.quiet:
            print(f"poise run: {config.model.name}, {config.algorithm.name}, mode "
                  f"{config.loop.mode}, {config.loop.rate:g} Hz, device {config.device.port}"
                  + (f", {duration:g} s" if duration else ", Ctrl-C to stop"), file=sys.stderr)
        resp = controller.start("cli start")
        if not resp.accepted:
            print(f"poise run: cannot start: {resp.reason}", file=sys.stderr)
        else:
            _wait(controller, stop, duration, args.quiet)
    finally:
        signal.signal(signal.SIGINT, previous)
        summary = controller.summary()
        ended_in = summary["state"]
        controller.close()
        if telemetry is not None:
            telemetry.stop()
    summary["state"] = ended_in
    if args.json_summary:
        print(json.dumps(summary, indent=1))
    else:
        print(format_summary(summary))
    return 1 if ended_in in ("fault", "estop", "idle") else 0


def _wait(controller, stop: threading.Event, duration: float | None, quiet: bool) -> None:
    t_end = time.monotonic() + duration if duration else None
    next_print = time.monotonic() + 1.0
    latched: str | None = None
    while not stop.is_set():
        now = time.monotonic()
        if t_end is not None and now >= t_end:
            break
        stop.wait(0.1 if t_end is None else min(0.1, max(0.0, t_end - now)))
        if not quiet and time.monotonic() >= next_print:
            next_print += 1.0
            s = controller.summary()
            err = s["task_error"]
            print(f"  {s['state']:<8} task error {err if err is None else f'{err:.4g}'}"
                  f"  latency p99 {s['timing']['latency_us']['p99']} µs", file=sys.stderr)
        state = controller.state.value
        if state in ("fault", "estop") and state != latched:
            # Stay up, latched: the operator clears it (dashboard, MQTT) or stops with Ctrl-C.
            print(f"poise run: {state}: {controller.reason} (latched until 'clear'; "
                  "Ctrl-C to quit)", file=sys.stderr)
        latched = state if state in ("fault", "estop") else None


def _log_path(config, args: argparse.Namespace) -> str | None:
    """Every run is logged: ``[log] path`` (or ``--log``), else ``runs/<model>-<time>.mcap``
    in the working directory; ``--no-log`` turns it off."""
    if getattr(args, "no_log", False):
        return None
    if config.log.path:
        return str(config.log.path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = pathlib.Path("runs") / f"{config.model.name}-{stamp}.mcap"
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path)


def _attach_telemetry(controller, quiet: bool, log_path: str | None = None):
    """Start the experiment log (``[log] path``) and MQTT (``[mqtt]``; an embedded broker on
    loopback when no url is configured) for the controller: see
    :func:`poise.telemetry.service.attach`. Returns what to ``stop()`` after ``close()``."""
    from poise.telemetry.service import attach

    try:
        return attach(controller, out=None if quiet else sys.stderr, log_path=log_path)
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"poise run: telemetry: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}{unit}"
    return f"{v}{unit}"


def format_summary(s: dict[str, Any]) -> str:
    """The human-readable run summary."""
    t = s["timing"]
    lines = [
        f"state             {s['state']}" + (f" ({s['reason']})" if s.get("reason") else ""),
        f"model             {s['model']}  algorithm {s['algorithm']}  mode {s['mode']}  "
        f"{s['rate_hz']:g} Hz ({s['pacing']} pacing)",
        f"target            {s['target']}",
        f"reached           {s['reached']}  (task error {_fmt(s['task_error'])}, "
        f"statics residual {_fmt(s['statics_residual'])})",
        f"cycles            {t['cycles']}  missed {t['missed']} ({t['missed_pct']} %)  "
        f"overruns {t['overruns']}",
        "timing [µs]       p50      p90      p99    p99.9      max",
    ]
    for key in ("period_us", "lateness_us", "compute_us", "latency_us"):
        row = t[key]
        lines.append(f"  {key[:-3]:<15}" + "".join(
            f"{'-' if row[p] is None else format(row[p], '.0f'):>9}"
            for p in ("p50", "p90", "p99", "p99.9", "max")))
    link = s.get("link")
    if link:
        lines.append(f"link              {link['sensor_frames']} sensor frames, crc errors "
                     f"{link['crc_errors']}, lost {link['lost_frames']}, reconnects "
                     f"{link['reconnects']}")
    return "\n".join(lines)
