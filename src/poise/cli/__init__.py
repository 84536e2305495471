"""The ``poise`` command line: thin (parse, call the package, print).

Each command family lives in its own module ``poise/cli/<name>_cmd.py`` (found
automatically) and exposes ``register(commands, groups)``: ``commands`` is the top-level
``argparse`` sub-parser collection, ``groups`` maps a group name (``"bench"``, ``"plot"``,
``"device"``, ``"model"``, ``"log"``, ``"example"``) to the sub-parser collection of that
group. A registered parser sets ``func=handler``; the handler takes the parsed
namespace and returns the exit code. A handler that needs an optional extra calls
:func:`poise.extras.require`; its :class:`~poise.extras.MissingExtra` becomes a one-line
message naming ``pip install 'poise[...]'`` and exit code 2.

Registering imports every command module, so a module imports only the standard library and the
headless core at its top (never Qt or matplotlib: ``poise run`` must start on a robot computer
without them).
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import pkgutil
import sys
from collections.abc import Sequence

from poise import __version__

#: Command groups with sub-commands (``poise bench ik``, ``poise device sim`` …).
GROUPS = {
    "model": "describe the built-in and user robot models",
    "bench": "run a benchmark (tables on stdout, JSON on request)",
    "plot": "draw a figure to a PNG file",
    "device": "run or probe a device on a serial port",
    "log": "inspect, export, plot and replay experiment logs",
    "example": "list, show and copy the bundled run configurations; print their JSON Schema",
}


def command_modules() -> list[str]:
    """Names of the command modules of this package (``*_cmd``), sorted."""
    here = pathlib.Path(__file__).parent
    return sorted(info.name for info in pkgutil.iter_modules([str(here)])
                  if info.name.endswith("_cmd"))


def build_parser() -> argparse.ArgumentParser:
    """The full ``poise`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="poise",
        description="Inverse kinematics and real-time control for robots that cannot hold "
        "every pose.",
    )
    parser.add_argument("--version", action="version", version=f"poise {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for name, help_text in GROUPS.items():
        group = commands.add_parser(name, help=help_text)
        groups[name] = group.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND")
        group.set_defaults(func=_group_help(group))
    for module_name in command_modules():
        importlib.import_module(f"poise.cli.{module_name}").register(commands, groups)
    for name in list(GROUPS):
        if not groups[name].choices:
            commands.choices.pop(name, None)
    return parser


def _group_help(group: argparse.ArgumentParser):
    def show(_args: argparse.Namespace) -> int:
        group.print_help()
        return 2

    return show


#: Commands that handle SIGINT/SIGTERM themselves through :mod:`poise.cli.stopflag`.
FLAG_COMMANDS = ("run",)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``poise`` console script."""
    from poise.cli import stopflag

    stopflag.install()  # before anything slow: a signal during start-up is kept, not lost
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "command", None) not in FLAG_COMMANDS:
        try:
            stopflag.restore()
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from poise.extras import MissingExtra

    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except MissingExtra as exc:  # an optional part (poise[gui], poise[plot] …) is not installed
        print(f"poise: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
