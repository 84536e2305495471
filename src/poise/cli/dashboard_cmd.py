"""``poise dashboard``: the operator dashboard (live curves, arm, configuration plane, controls)."""

from __future__ import annotations

import argparse
import os
import sys

DEFAULT_URL = "mqtt://127.0.0.1:1883"


def register(commands, groups) -> None:
    p = commands.add_parser(
        "dashboard", help="open the operator dashboard on an MQTT broker",
        description="Live curves, the arm with its target, the configuration plane, gains, "
        "algorithm, mode, start/stop and e-stop of a poise service, over MQTT only (so it "
        "can run on another machine).")
    p.add_argument("--mqtt", default=os.environ.get("POISE_MQTT", DEFAULT_URL), metavar="URL",
                   help="broker URL mqtt://[user[:password]@]host[:port] "
                   "(default $POISE_MQTT or %(default)s)")
    p.add_argument("--robot", metavar="ID",
                   help="robot id to follow (default: a live robot, never an offline or lost "
                   "one; switches to a live robot when one appears)")
    p.add_argument("--screenshot", metavar="FILE.png",
                   help="save a picture of the window after --after seconds and exit")
    p.add_argument("--after", type=float, default=3.0, metavar="SECONDS",
                   help="delay before --screenshot (default 3)")
    p.add_argument("--size", default="1500x900", metavar="WxH",
                   help="window size (default 1500x900)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        print(f"poise dashboard: --size must be WxH, got {args.size!r}", file=sys.stderr)
        return 2
    if args.screenshot and not os.environ.get("QT_QPA_PLATFORM") and not (
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from poise.api.extras import require

    require("gui", "poise dashboard")
    from poise.gui.app import run as run_dashboard
    from poise.gui.broker import BrokerURL

    try:
        BrokerURL.parse(args.mqtt)
    except ValueError as exc:
        print(f"poise dashboard: {exc}", file=sys.stderr)
        return 2
    return run_dashboard(args.mqtt, args.robot, screenshot_path=args.screenshot,
                         after=args.after, size=(width, height))
