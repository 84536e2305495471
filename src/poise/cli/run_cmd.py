"""``poise run``: run the real-time controller against a device (default: the virtual one).

    poise run                                  # demo: virtual double pendulum, Algorithm 1,
                                               # a reachable target, embedded MQTT, 5 s
    poise run --config soft_arm_stiff --duration 20 --json-summary   # a bundled example
    poise run --model soft_arm_stiff --target 0.2 -0.9 --mode ff --device /dev/ttyACM0

Flags override the configuration file's keys. Ctrl-C (SIGINT) or SIGTERM stops cleanly at any
moment — start-up, running or shutdown: disarm, close, summary. The summary's state is the one
the run ended in: ``stopped``, ``fault`` or ``estop``.

Exit codes (:data:`EXIT_CODES`): 0 the target was reached and held at the end, 1 the run ended
without reaching it (also: an unreachable target), 2 bad input (configuration, flags, a log
path in a missing folder), 3 fault (or the controller could not start), 4 e-stop, 5 the
experiment log failed during the run (disk full …; the run went on; fault and e-stop take
precedence).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import pathlib
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from poise.api.rules import ALGORITHMS, MODES

if TYPE_CHECKING:
    from poise.cli.stopflag import StopFlag

#: The embedded demo: a target the double pendulum reaches on E within its tendon limits.
DEMO_TARGET = (0.5,)
DEMO_DURATION = 10.0
#: Events printed when the run starts (the device runs feed-forward only, ...).
SAY_AT_START = ("feedforward_only",)
#: ``poise run``'s exit codes.
EXIT_CODES = {"reached": 0, "not_reached": 1, "bad_input": 2, "fault": 3, "estop": 4,
              "log_failed": 5}
#: The default log folder (in the working directory): created when missing, unlike others.
RUNS = pathlib.Path("runs")
#: After a trajectory (``--trajectory`` without ``--duration``) the run waits at most this long
#: for the arm to settle at its last point [s].
SETTLE_AFTER_S = 10.0
#: How often the waiting main thread looks at the stop flag and the duration [s].
TICK = 0.05
#: How long ``poise run`` waits for its MQTT connection before it gives up, unarmed [s].
MQTT_WAIT = 20.0


def register(commands, groups) -> None:
    p = commands.add_parser(
        "run", help="run the real-time controller (default: a demo on the virtual device)",
        description="Run the fixed-rate controller. With no arguments: the virtual "
        "double pendulum, Algorithm 1, a reachable target and an embedded MQTT broker for "
        f"{DEMO_DURATION:g} s, then a summary. Flags override configuration keys.")
    p.add_argument("--config", metavar="FILE|NAME",
                   help="configuration file (TOML), or a bundled example (poise example list)")
    p.add_argument("--model", metavar="NAME", help="model name or file (model.name)")
    p.add_argument("--algorithm", choices=ALGORITHMS,
                   help="IK algorithm (algorithm.name)")
    p.add_argument("--target", type=float, nargs="+", metavar="X",
                   help="task target [task units] (algorithm.target)")
    p.add_argument("--trajectory", metavar="FILE",
                   help="then follow this trajectory (waypoints with times, .csv or .json; "
                   "docs/controller.md 'Trajectories'): checked before anything moves, "
                   "shaped with preview; without --duration the run ends once it is done")
    p.add_argument("--mode", choices=MODES, help="feedforward or feedback (loop.mode)")
    for flag, key, what in (("--gamma", "gamma", "Γ (alg1, plain)"),
                            ("--gamma-z", "gamma_z", "ΓZ (alg2)"),
                            ("--gamma-e", "gamma_e", "ΓE (alg2)")):
        p.add_argument(flag, type=_gain, metavar="G|auto",
                       help=f"{what} [1/s], below the stability bound, or 'auto' (default: "
                       f"a fraction of the bound) (algorithm.{key})")
    p.add_argument("--device", metavar="PORT|sim|inprocess|dynamixel:PORT",
                   help="serial port (poise protocol), 'sim' (the virtual device), "
                   "'inprocess' (the simulated robot in the controller's process, real time) "
                   "or 'dynamixel:PORT' (a Dynamixel servo bus) (device.port)")
    p.add_argument("--sensors", metavar="PORT",
                   help="a poise-protocol joint-sensor board measuring q, beside a "
                   "Dynamixel bus (device.sensors)")
    p.add_argument("--sim-params", metavar="FILE",
                   help="the simulated robot's true parameters (device.sim_params)")
    p.add_argument("--calibration", metavar="FILE",
                   help="calibration file used as the statics model (model.calibration)")
    p.add_argument("--gravity", type=float, metavar="G",
                   help="gravity of the controller's statics model [m/s²] (model.gravity)")
    p.add_argument("--rate", type=float, metavar="HZ",
                   help="loop rate, 10 … 1000 Hz (loop.rate)")
    p.add_argument("--pacing", choices=("device", "host"), help="loop pacing (loop.pacing)")
    p.add_argument("--duration", type=float, metavar="S",
                   help=f"stop after S seconds, 0 < S <= 30 days (default: {DEMO_DURATION:g} "
                   "for the demo, else until Ctrl-C)")
    p.add_argument("--log", metavar="FILE",
                   help="experiment log file, in an existing folder (runs/ is created) "
                   "(log.path)")
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
    p.add_argument("--joint-states", type=float, nargs="?", const=50.0, metavar="HZ",
                   help="also publish one record per cycle on poise/<ID>/joint_states and "
                   "…/task, at most HZ per second (default 50; for PlotJuggler, ROS 2 bridges)")
    p.add_argument("--foxglove", nargs="?", const="8765", metavar="[HOST:]PORT",
                   help="live view for Foxglove: a WebSocket server on PORT (default 8765, "
                   "loopback); needs pip install 'poise[foxglove]' (docs/foxglove.md)")
    p.add_argument("--json-summary", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


FLAG_KEYS = {
    "model": "model.name", "algorithm": "algorithm.name", "target": "algorithm.target",
    "mode": "loop.mode", "device": "device.port", "sensors": "device.sensors",
    "sim_params": "device.sim_params",
    "calibration": "model.calibration", "gravity": "model.gravity", "rate": "loop.rate",
    "pacing": "loop.pacing", "log": "log.path",
    "mqtt": "mqtt.url", "robot_id": "mqtt.robot_id",
    "gamma": "algorithm.gamma", "gamma_z": "algorithm.gamma_z", "gamma_e": "algorithm.gamma_e",
}


def _gain(text: str) -> float | str:
    """A ``--gamma`` value: a number, or ``auto`` (checked with the rules at load)."""
    from poise.api.rules import AUTO

    if text == AUTO:
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a number [1/s] or '{AUTO}'") from None


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
    from poise.cli import stopflag

    stop = stopflag.install()
    try:
        return _run(args, stop)
    finally:
        stopflag.restore_quietly()


def _run(args: argparse.Namespace, stop: StopFlag) -> int:
    """The run; ``stop`` becomes true on SIGINT/SIGTERM (polled, never a handler's work)."""
    from poise.api.rules import RuleError, check_duration
    from poise.cli.compiling import CompileView
    from poise.controller.config import ConfigError, load_config
    from poise.controller.realtime import StartupCancelled
    from poise.examples import resolve_config

    demo = args.config is None and args.model is None and args.device is None
    compiling = CompileView("poise run", quiet=args.quiet)  # a first start's compile
    try:
        duration = check_duration(args.duration) if args.duration is not None else (
            DEMO_DURATION if demo else None)
        flags = overrides(args)
        config = load_config(args.config and resolve_config(args.config), flags)
        _check_log(config, flags, args)
        trajectory = _read_trajectory(args.trajectory, config)
        if not args.quiet:  # the first line, at once: what starts
            print(f"poise run: {config.model.name}, {config.algorithm.name}, mode "
                  f"{config.loop.mode}, {config.loop.rate:g} Hz, device "
                  f"{_device_text(config.device)}"
                  + (f", {duration:g} s" if duration else ", Ctrl-C to stop"), file=sys.stderr)
        try:
            controller, broker = _start(config, flags, stop, compiling)
        finally:
            compiling.close()  # a bar cleared before anything else is said
    except (ConfigError, RuleError, ValueError) as exc:
        print(f"poise run: {exc}", file=sys.stderr)
        return EXIT_CODES["bad_input"]
    except StartupCancelled:
        if not args.quiet:
            print(f"poise run: {stop.name} during start-up: stopped", file=sys.stderr)
        return EXIT_CODES["not_reached"]
    except RuntimeError as exc:
        from poise.controller.realtime import RealtimeError
        from poise.controller.ring import RingError

        if not isinstance(exc, RealtimeError | RingError):
            raise
        # the real-time process or its shared-memory ring could not start
        print(f"poise run: cannot start: {exc}", file=sys.stderr)
        return EXIT_CODES["fault"]
    telemetry = None
    summary: dict[str, Any] | None = None
    refused = False
    try:
        if not stop:  # a signal during start-up: start nothing more
            telemetry = _attach_telemetry(controller, args.quiet, _log_path(config, args),
                                          foxglove=args.foxglove,
                                          joint_states=args.joint_states, broker=broker)
            broker = None  # the telemetry's now
        channel = _command_channel(telemetry, stop)
        if channel:
            print(f"poise run: {channel}", file=sys.stderr)
            refused = True
        elif not stop:
            resp = controller.start("cli start")
            refused = not resp.accepted
            if refused:
                print(f"poise run: cannot start: {resp.reason}", file=sys.stderr)
            else:
                for event in controller.history():  # what the operator must know at once
                    if event.data.get("code") in SAY_AT_START and not args.quiet:
                        print(f"poise run: {event.data.get('text', event.data['code'])}",
                              file=sys.stderr)
                done = None if trajectory is None else _follow(controller, trajectory,
                                                                args.quiet)
                if trajectory is not None and done is None:
                    refused = True
                else:
                    _wait(controller, stop, duration, args.quiet, done)
        if stop and not args.quiet:
            print(f"poise run: {stop.name}: stopping", file=sys.stderr)
        controller.stop("signal" if stop else "end of run")
        summary = controller.final_summary()
    finally:
        if summary is None:  # an exception on the way: still a summary for the record
            summary = controller.final_summary()
        controller.close()
        if telemetry is not None:
            telemetry.stop()
        if broker is not None:  # launched, never handed over (a signal during start-up)
            broker.stop()
    if telemetry is not None and telemetry.log is not None:
        summary["log"] = telemetry.log.report()
    if args.json_summary:
        print(json.dumps(summary, indent=1))
    else:
        print(format_summary(summary))
    return exit_code(summary, refused)


def _start(config: Any, flags: dict[str, tuple[Any, str]], stop: StopFlag,
           progress: Callable[[Any], Any]) -> tuple[Any, Any]:
    """The controller, and the embedded broker launched (not yet waited for) if MQTT needs
    one. While the real-time process starts (imports, kernels, its virtual device), the
    broker starts and the telemetry modules load: none of them waits for another (issue
    12: start-up to running). The gains are checked against the stability bound in the
    real-time process, which has every module loaded (a refusal is a ``ConfigError``).
    ``progress`` hears of each step of a first start's compile (:class:`~poise.cli.
    compiling.CompileView`). Nothing is left running if this raises."""
    from poise.controller.realtime import make_controller
    from poise.telemetry.broker import EmbeddedBroker, embedded_broker_needed

    broker = EmbeddedBroker().launch() if embedded_broker_needed(config) else None
    threading.Thread(target=importlib.import_module, args=("poise.telemetry.service",),
                     name="poise-preload", daemon=True).start()
    try:
        return make_controller(config, cancelled=lambda: bool(stop), check_gains=True,
                               origins=flags, progress=progress), broker
    except BaseException:
        if broker is not None:
            broker.stop()
        raise


def _command_channel(telemetry: Any, stop: StopFlag) -> str:
    """Wait until MQTT, the command and e-stop channel, is up (``--no-mqtt``: none to wait
    for); "" once it is, else why the arm is not armed without it."""
    bridge = getattr(telemetry, "bridge", None)
    if bridge is None:
        return ""
    deadline = time.monotonic() + MQTT_WAIT
    while not stop and time.monotonic() < deadline:
        if bridge.wait_connected(TICK):
            return ""
        if bridge.refused:
            break
    if stop:
        return ""
    why = bridge.refused or (f"no connection to {bridge.config.url} within {MQTT_WAIT:g} s"
                             f" ({bridge.stats.last_error or 'no answer'})")
    return (f"MQTT: {why}. Without its command and e-stop channel the arm is not armed: "
            "fix [mqtt] (--mqtt URL with user:password@) or run with --no-mqtt")


def exit_code(summary: dict[str, Any], refused: bool = False) -> int:
    """The exit code of a run from its final summary (see :data:`EXIT_CODES`); ``refused``:
    the controller could not start (a fault)."""
    state = summary["state"]
    if state in ("fault", "estop"):
        return EXIT_CODES[state]
    if refused:
        return EXIT_CODES["fault"]
    if not (summary.get("log") or {}).get("ok", True):
        return EXIT_CODES["log_failed"]
    return EXIT_CODES["reached" if summary.get("reached") else "not_reached"]


def _read_trajectory(path: str | None, config: Any) -> Any:
    """``--trajectory FILE`` read and validated before anything starts (None without it).

    Raises:
        ValueError: the file is missing or malformed (the message names it and where).
    """
    if path is None:
        return None
    from poise.controller.config import build_model
    from poise.motion.trajectory import Trajectory

    return Trajectory.from_file(path, build_model(config.model).model.task_dim)


def _follow(controller: Any, trajectory: Any, quiet: bool) -> Callable[[], bool] | None:
    """Hand the trajectory to the running controller; a predicate that is true once it is
    done or aborted, or None (said on stderr) when it was refused."""
    from poise.api.bus import Command

    times, points = trajectory.waypoints
    events = controller.events(history=False)
    resp = controller.submit(Command("trajectory", {"t": times.tolist(),
                                                    "x": points.tolist()},
                                     id="cli-trajectory", source="cli"))
    if not resp.accepted:
        print(f"poise run: {resp.reason}", file=sys.stderr)
        return None
    if not quiet:
        print(f"poise run: trajectory: {resp.reason}", file=sys.stderr)
    ended: list[float] = []

    def done() -> bool:
        for ev in events.drain():
            if ev.kind == "trajectory" and ev.data.get("status") in ("done", "aborted"):
                ended.append(time.monotonic())
                if not quiet:
                    print(f"poise run: trajectory {ev.data['status']}", file=sys.stderr)
        if not ended:
            return False
        # then the arm settles at its last point (or SETTLE_AFTER_S passes)
        return bool(controller.summary().get("reached")) or \
            time.monotonic() - ended[0] > SETTLE_AFTER_S

    return done


def _wait(controller, stop: StopFlag, duration: float | None, quiet: bool,
          done: Callable[[], bool] | None = None) -> None:
    """Until the duration has passed, a signal came or (without a duration) ``done`` says
    so; progress once a second."""
    t_end = time.monotonic() + duration if duration else None
    next_print = time.monotonic() + 1.0
    latched: str | None = None
    while not stop:
        now = time.monotonic()
        if t_end is not None and now >= t_end:
            break
        if t_end is None and done is not None and done():
            break
        time.sleep(TICK if t_end is None else min(TICK, t_end - now))
        if not quiet and time.monotonic() >= next_print:
            next_print += 1.0
            s = controller.summary()
            err = s["task_error"]
            target = " (target unreachable)" if s.get("target_status") == "unreachable" else ""
            print(f"  {s['state']:<8} task error {err if err is None else f'{err:.4g}'}"
                  f"{target}  latency p99 {s['timing']['latency_us']['p99']} µs",
                  file=sys.stderr)
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
    path = RUNS / f"{config.model.name}-{stamp}.mcap"
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path)


def _check_log(config, flags: dict[str, tuple[Any, str]], args: argparse.Namespace) -> None:
    """Refuse, before anything starts, a log path that cannot be written (its folder missing,
    a file, read-only), as ``poise calibrate`` refuses its ``--out``: only :data:`RUNS` is
    created.

    Raises:
        ValueError: the message names the option (``--log``, ``log.path``) and the path.
    """
    path = None if getattr(args, "no_log", False) else config.log.path
    if not path:
        return
    from poise.cli.outpaths import check_output

    if pathlib.Path(path).parent == RUNS:
        with contextlib.suppress(OSError):  # a file named runs: check_output says so
            RUNS.mkdir(exist_ok=True)
    problem = check_output(path, flags.get("log.path", (None, "log.path"))[1])
    if problem:
        raise ValueError(f"{problem} (nothing was run)")


def _attach_telemetry(controller, quiet: bool, log_path: str | None = None, **options):
    """Start the experiment log (``[log] path``), MQTT (``[mqtt]``; an embedded broker on
    loopback when no url is configured) and, with ``foxglove=``, the Foxglove live view for the
    controller: see :func:`poise.telemetry.service.attach` (``options``). Returns what to
    ``stop()`` after ``close()``."""
    from poise.telemetry.service import attach

    try:
        return attach(controller, out=None if quiet else sys.stderr, log_path=log_path,
                      **options)
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"poise run: telemetry: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}{unit}"
    return f"{v}{unit}"


def _device_text(cfg: Any) -> str:
    text = f"dynamixel:{cfg.port}" if cfg.protocol == "dynamixel" else cfg.port
    return text + (f" + sensors {cfg.sensors}" if cfg.sensors else "")


def format_summary(s: dict[str, Any]) -> str:
    """The human-readable run summary."""
    t = s["timing"]
    lines = [
        f"state             {s['state']}" + (f" ({s['reason']})" if s.get("reason") else ""),
        *([f"target            unreachable: {s['target_note']}"]
          if s.get("target_status") == "unreachable" else []),
        f"model             {s['model']}  algorithm {s['algorithm']}  mode {s['mode']}  "
        f"{s['rate_hz']:g} Hz ({s['pacing']} pacing)",
        f"target            {s['target']}",
        f"reached           {s['reached']}  (task error {_fmt(s['task_error'])}, "
        f"statics residual {_fmt(s['statics_residual'])})",
        *stability_lines(s.get("params") or {}),
        *follow_lines(s),
        *move_lines(s.get("move")),
        *log_lines(s.get("log")),
        f"cycles            {t['cycles']}  missed {t['missed']} ({t['missed_pct']} %)  "
        f"overruns {t['overruns']}  sensor gaps {t.get('gaps', 0)}",
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
        rtt = link.get("rtt_us") or {}
        if "sensors" in s.get("device", {}):
            lines[-1] = "sensor board" + lines[-1][len("link"):]
        if rtt.get("count"):
            lines.append(f"setpoint → device → sensor round trip [µs]  p50 {rtt['p50']:.0f}  "
                         f"p99 {rtt['p99']:.0f}  max {rtt['max']:.0f}")
            warning = rtt_warning(rtt, s["rate_hz"])
            if warning:
                lines.append(f"warning           {warning}")
    rt = s.get("realtime") or {}
    if rt.get("refused"):
        lines.append(f"scheduler         normal ({rt['refused']}: see 'Real-time scheduling' "
                     "in docs/controller.md)")
    elif rt.get("scheduler") == "fifo":
        lines.append(f"scheduler         SCHED_FIFO priority {rt['priority']}")
    if rt.get("cpu") is not None:
        lines.append(f"loop CPU          {rt['cpu']} (virtual device on "
                     f"{', '.join(map(str, rt['other_cpus']))})")
    elif rt.get("unpinned"):
        lines.append(f"loop CPU          any ({rt['unpinned']})")
    bus = s.get("bus_rtt_us") or {}
    if bus.get("count"):
        lines.append(f"servo bus sync read round trip [µs]  p50 {bus['p50']:.0f}  "
                     f"p99 {bus['p99']:.0f}  max {bus['max']:.0f}  ({bus['count']} reads)")
    return "\n".join(lines)


def stability_lines(params: dict[str, Any]) -> list[str]:
    """The summary's lines on the feedback gains' stability bound and the slowest structural
    mode (:mod:`poise.motion.stability`), from the ``params`` dictionary."""
    st = params.get("stability")
    if not st:
        return []
    auto = set(params.get("auto") or ())
    gains = ", ".join(
        f"{k} {_fmt(params.get(k))}" + (" (auto)" if k in auto else "")
        + f" < {_fmt(st['gain_max_fb'].get(k))}" for k in st["gain_max_fb"])
    u = float(st.get("uncertainty") or 0.0)
    nominal = st.get("gain_max_nominal") or {}
    robust = (f"the bound for springs within ±{u * 100:g} % of the model's (at the model: "
              + ", ".join(f"{k} < {_fmt(v)}" for k, v in nominal.items()) + "); "
              if u > 0 and nominal else "the bound; ")
    rf = st.get("robust_fraction")
    auto = (f"auto: the smaller of {st['fraction']:g} × the bound at the model and {rf:g} × "
            f"the robust one, gain margins {1 / st['fraction']:.2g} and {1 / rf:.2g}"
            if u > 0 and rf else
            f"{st['fraction']:g} × it when auto: a gain margin of {1 / st['fraction']:.2g}")
    auto += ", or less where the slowest pole then decays faster"
    lines = [f"stability         {gains} 1/s in fb ({robust}{auto}; delay "
             f"{st['delay_periods']} period(s))"]
    if st.get("left_out"):
        from poise.motion.bounds import StabilityReport  # the summary's end: no start-up cost

        lines.append(f"left out          {StabilityReport.from_dict(st).left_out_sentence()}")
    slow = st.get("slowest_mode")
    if slow:
        lines.append(f"slowest mode      ω {slow['omega']:.3g} rad/s, ζ {slow['zeta']:.2g}, "
                     f"period {slow['period_s']:.3g} s")
    return lines


def follow_lines(s: dict[str, Any]) -> list[str]:
    """The summary's line on the model's predicted response feedback follows after the
    current target's move (:mod:`poise.motion.reference`), where there is one."""
    seconds = s.get("reference_s")
    if not seconds:
        return []
    return [f"follows model     fb measured against the model's predicted response for "
            f"{seconds:.3g} s from the move's start (loop.follow_model)"]


def move_lines(move: dict[str, Any] | None) -> list[str]:
    """The summary's line on the current target's move (``ControlStep.move_summary``):
    its shaper, speed, slowdown or pause, duration and the model's predicted settling
    time."""
    if not move:
        return []
    impulses = len(move["shaper_s"])
    parts = [f"shaped by {impulses} impulses over {move['shaper_s'][-1]:.3g} s"
             if impulses > 1 else "unshaped", f"{move['speed']:g} × the speed"]
    pause = move.get("pause")
    if pause:
        held = f" for {pause['s']:.3g} s" if pause["s"] is not None else ""
        parts.append(f"holds still{held} at {100 * pause['at']:.0f} % of the way "
                     "(timed on the model so that nothing sways)")
    elif move["slowdown"] > 1.0:
        parts.append(f"slowed where the arm's equilibrium moves fast "
                     f"({move['slowdown']:.3g} × longer)")
    if move["duration_s"] is not None:
        parts.append(f"{move['duration_s']:.3g} s long")
    if move["predicted_settle_s"] is not None:
        parts.append(f"settles {move['predicted_settle_s']:.3g} s after its start on the model")
    return [f"move              {', '.join(parts)}"]


def log_lines(report: dict[str, Any] | None) -> list[str]:
    """The summary's line on the experiment log (``LogWriter.report``): its path, or how it
    failed, when, and how much of the run it does not hold."""
    if not report:
        return []
    if report.get("ok", True):
        return [f"log               {report['path']}"]
    if "failed_after_s" not in report:
        return [f"log               {report['path']}: FAILED ({report.get('error')})"]
    return [f"log               {report['path']}: FAILED after {report['failed_after_s']:.1f} "
            f"s ({report['error']}): {report['samples_logged']} cycles logged, "
            f"{report['samples_unlogged']} not ({report['unlogged_pct']:g} % of the run)"]


#: A setpoint round trip (p99) longer than this many loop periods is reported.
RTT_PERIODS = 5


def rtt_warning(rtt: dict[str, Any], rate_hz: float) -> str:
    """A warning when the link delays setpoints by several periods ('' otherwise): the host's
    own latency cannot see a slow link, the echoed sequence numbers can."""
    p99 = rtt.get("p99")
    limit = RTT_PERIODS / rate_hz * 1e6
    if p99 is None or p99 <= limit:
        return ""
    return (f"the device applies setpoints {p99 / 1e3:.1f} ms (p99) after they are sent, "
            f"more than {RTT_PERIODS} periods ({limit / 1e3:.1f} ms): a slow or buffered link "
            "(USB latency timer, a busy hub); feedback sees the arm that late")
