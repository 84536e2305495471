"""``poise log info|export|plot|replay FILE``: inspect, export, plot and replay experiment logs.

Every command reads damaged files too (a run killed mid-way): it uses what survived and says so.
A file that is not MCAP at all is an error (``FILE is not an MCAP file``). ``info`` takes several
files (a shell glob) and reports each. Exit codes: 0 done, 2 a file cannot be read (for ``info``:
any of them) or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import threading
import time
from typing import Any


def register(commands, groups) -> None:
    log = groups["log"]
    p = log.add_parser("info", help="summarise logs: span, rate, gaps, states, timing",
                       description="Summarise experiment logs (MCAP), one after the other.")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--json", action="store_true",
                   help="print JSON (one object; a list of objects for several files)")
    p.set_defaults(func=run_info)

    p = log.add_parser("export", help="write each channel as CSV or Parquet",
                       description="Write one table per channel: FILE-STEM_<channel>.<format>.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", choices=("csv", "parquet"), default="csv",
                   help="csv (default) or parquet (needs pyarrow: pip install 'poise[parquet]')")
    p.add_argument("--out", metavar="DIR", default=".", help="output directory (default .)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar (none either when stderr is not a terminal)")
    p.set_defaults(func=run_export)

    p = log.add_parser("plot", help="task error, statics residual, q vs q̄ and timing to a PNG",
                       description="Plot a run: task error, statics residual, q vs q̄, timing.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--out", metavar="FILE.png", help="PNG to write (default: FILE-STEM.png)")
    p.set_defaults(func=run_plot)

    p = log.add_parser("replay", help="re-publish a run to MQTT on the live topics",
                       description="Replay a run to MQTT with the live topics, so the "
                       "dashboard shows it. Without --mqtt: the broker on 127.0.0.1:1883 if "
                       "one listens, else an embedded one (its address is printed).")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--mqtt", metavar="URL", help="broker, mqtt://[user:pass@]host[:port]")
    p.add_argument("--robot-id", default="replay", metavar="ID",
                   help="topic level poise/<ID>/ (default: replay)")
    p.add_argument("--speed", type=float, default=1.0, metavar="X",
                   help="playback speed (default 1)")
    p.add_argument("--rate", type=float, default=50.0, metavar="HZ",
                   help="telemetry messages per second (default 50, at most 100)")
    p.set_defaults(func=run_replay)


def _open(file: str):
    """``(contents, "")``, or ``(None, why it cannot be read)``."""
    from poise.telemetry.reader import NotMcapError, read_log

    path = pathlib.Path(file)
    if not path.is_file():
        return None, f"{path}: no such file"
    try:
        return read_log(path), ""
    except (NotMcapError, OSError) as exc:
        return None, str(exc)


def _read(args: argparse.Namespace, cmd: str, file: str | None = None):
    """The log's contents, or None after saying on stderr why it cannot be read."""
    path = file if file is not None else args.file
    contents, error = _open(path)
    if contents is None:
        print(f"poise log {cmd}: {error}", file=sys.stderr)
        return None
    if contents.truncated:
        print(f"poise log {cmd}: {path}: damaged or unfinished file ({contents.error}); "
              "using everything before the damage", file=sys.stderr)
    return contents


def _f(v: Any, fmt: str = ".4g") -> str:
    return "-" if v is None else format(v, fmt)


def format_info(info: dict[str, Any]) -> str:
    """The human-readable ``poise log info``."""
    lines = [f"{info['path']}: " + ("complete" if info["finished"] else "TRUNCATED "
                                    f"({info['error']}); below: what comes before the damage")]
    meta = info.get("metadata", {})
    prov = meta.get("poise", {})
    if prov:
        lines.append(f"  poise {prov.get('version')} (git {prov.get('git_revision') or '-'}), "
                     f"Python {prov.get('python')}, host {prov.get('host')}")
    fw = meta.get("firmware", {})
    if fw:
        lines.append(f"  firmware {fw.get('id') or fw.get('firmware_id') or fw}")
    model = meta.get("model", {})
    if model:
        lines.append(f"  model {model.get('name', '-')}")
    if "cycles" in info:
        start = info.get("start_unix")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start)) if start else "-"
        lines.append(f"  {info['cycles']} cycles (seq {info['first_seq']}…{info['last_seq']}) "
                     f"over {info['duration_s']:.3f} s from {when}, "
                     f"{_f(info['rate_hz'], '.1f')} Hz")
        lines.append(f"  sequence gaps in the log: {info['missing_cycles']} cycle(s) missing"
                     + (f" in {len(info['gaps'])} gap(s), first at seq {info['gaps'][0][0]}"
                        if info["gaps"] else ""))
    else:
        lines.append("  no cycles")
    lines.append(_time_base_line(info.get("time_base")))
    lines.append(_controller_line(info.get("controller")))
    for key in ("lateness_us", "compute_us", "latency_us"):
        if key in info:
            d = info[key]
            lines.append(f"  {key[:-3]:<9} p50 {d['p50']:8.1f} µs  p99 {d['p99']:8.1f} µs  "
                         f"max {d['max']:8.1f} µs")
    if "task_error_final" in info:
        lines.append(f"  final task error {info['task_error_final']:.4g}")
    lines.append(f"  {len(info['states'])} state change(s), {info['param_changes']} parameter "
                 f"change(s), {info['events']} other event(s)")
    for t, frm, to, cause in info["states"][:12]:
        lines.append(f"    t={t:.3f}  {frm} → {to}  ({cause})")
    lines.append("  messages: " + ", ".join(f"{k} {v}" for k, v in info["messages"].items()))
    return "\n".join(lines)


def _time_base_line(base: str | None) -> str:
    """What the MCAP message times are (Foxglove's timeline shows them as they are)."""
    if base == "unix":
        return "  message times: Unix (wall clock anchored at the start)"
    if base == "unknown":
        return "  message times: unknown (cut short before its clock record and first message)"
    return ("  message times: host monotonic (a log from before Unix message times; "
            "Foxglove shows it near 1970 + uptime)")


def _controller_line(run: dict[str, Any] | None) -> str:
    """The controller's own count of missed cycles and its final state (its summary event)."""
    if not run:
        return "  missed cycles (controller): not recorded (a log from before summary events, " \
               "or cut short before the end)"
    cycles, missed = run.get("cycles"), run.get("missed")
    if cycles is None or missed is None:
        text = "  missed cycles (controller): -"
    else:
        pct = run.get("missed_pct")
        text = (f"  missed cycles (controller): {missed} of {cycles + missed} periods"
                + (f" ({pct:.4g} %)" if isinstance(pct, int | float) else ""))
    state = run.get("state") or "-"
    reason = f" ({run['reason']})" if run.get("reason") else ""
    return f"{text}; final state {state}{reason}"


def run_info(args: argparse.Namespace) -> int:
    from poise.telemetry.reader import summary

    reports: list[dict[str, Any]] = []
    failed = 0
    for i, file in enumerate(args.files):
        contents, error = _open(file)
        if contents is None:
            failed += 1
            print(f"poise log info: {error}", file=sys.stderr)
            reports.append({"path": file, "error": error})
            continue
        info = summary(contents)
        reports.append(info)
        if not args.json:
            print(("\n" if i else "") + format_info(info))
    if args.json:
        out = reports[0] if len(args.files) == 1 else reports
        print(json.dumps(out, indent=1, default=str))
    if failed and len(args.files) > 1:
        print(f"poise log info: {failed} of {len(args.files)} file(s) could not be read",
              file=sys.stderr)
    return 2 if failed else 0


def run_export(args: argparse.Namespace) -> int:
    from poise.api.extras import require
    from poise.progress import progress_bar
    from poise.telemetry.export import export, rows_to_export

    if args.format == "parquet":  # before reading a long log
        require("parquet", "poise log export --format parquet")
    contents = _read(args, "export")
    if contents is None:
        return 2
    try:
        with progress_bar(rows_to_export(contents), "export", unit="row",
                          quiet=args.quiet) as bar:
            paths = export(contents, args.format, args.out, progress=bar.update)
    except RuntimeError as exc:
        print(f"poise log export: {exc}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


def run_plot(args: argparse.Namespace) -> int:
    from poise.api.extras import require
    from poise.telemetry.export import plot

    require("plot", "poise log plot")

    contents = _read(args, "plot")
    if contents is None:
        return 2
    out = args.out or pathlib.Path(args.file).with_suffix(".png").name
    try:
        print(plot(contents, out))
    except ValueError as exc:
        print(f"poise log plot: {exc}", file=sys.stderr)
        return 2
    return 0


def run_replay(args: argparse.Namespace) -> int:
    from poise.telemetry.broker import EmbeddedBroker, wait_listening
    from poise.telemetry.mqtt import MqttConfig
    from poise.telemetry.replay import replay

    contents = _read(args, "replay")
    if contents is None:
        return 2
    broker = None
    url = args.mqtt
    try:
        if url is None:
            if wait_listening("127.0.0.1", 1883, 0.3):
                url = "mqtt://127.0.0.1:1883"
            else:
                broker = EmbeddedBroker().start()
                url = broker.url
        cfg = MqttConfig.from_url(url, robot_id=args.robot_id, rate_hz=args.rate)
    except (ValueError, RuntimeError) as exc:
        print(f"poise log replay: {exc}", file=sys.stderr)
        if broker is not None:
            broker.stop()
        return 2
    print(f"poise log replay: {args.file} → {cfg.url} as poise/{cfg.robot_id}/… "
          f"at {args.speed:g}×", file=sys.stderr)
    stop = threading.Event()
    try:
        counts = replay(contents, cfg, speed=args.speed, stop=stop,
                        progress=lambda t, total: print(f"  {t:7.1f} / {total:.1f} s",
                                                        file=sys.stderr))
    except ValueError as exc:
        print(f"poise log replay: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        stop.set()
        return 130
    finally:
        if broker is not None:
            broker.stop()
    print(json.dumps(counts))
    return 0
