"""The ``poise`` command line: thin (parse, call the package, print).

Each command family lives in its own module ``poise/cli/<name>_cmd.py`` (found
automatically) and exposes ``register(commands, groups)``: ``commands`` is the top-level
``argparse`` sub-parser collection, ``groups`` maps a group name (``"bench"``, ``"plot"``,
``"device"``, ``"model"``, ``"log"``, ``"example"``) to the sub-parser collection of that
group. A registered parser sets ``func=handler``; the handler takes the parsed
namespace and returns the exit code. A handler that needs an optional extra calls
:func:`poise.api.extras.require`; its :class:`~poise.api.extras.MissingExtra` becomes a one-line
message naming ``pip install 'poise[...]'`` and exit code 2.

Registering imports every command module, so a module imports only the standard library and the
headless core at its top (never Qt or matplotlib: ``poise run`` must start on a robot computer
without them).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pathlib
import pkgutil
import signal
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


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``poise`` argument parser, with every command; or, given the command line
    ``argv``, with only the command module that owns it when one evidently does
    (:func:`owner`): ``poise run`` and the virtual device (``poise device sim``) then start
    without importing every other command (part of the start-up time, issue 12)."""
    module = owner(argv) if argv is not None else None
    if module is not None:
        parser = _parser([module])
        if _has_command(parser, argv):
            return parser
    return _parser(command_modules())


def owner(argv: Sequence[str]) -> str | None:
    """The command module that registers the command ``argv`` starts with, by the naming
    rule of the package (``X`` → ``X_cmd``; ``G S`` → ``G_S_cmd`` or ``G_cmd``, hyphens as
    underscores), or None (no command yet, an option first, or no such module)."""
    if not argv or argv[0].startswith("-"):
        return None
    words = [argv[0]]
    if argv[0] in GROUPS:  # a group needs its sub-command (its help lists them all)
        if len(argv) < 2 or argv[1].startswith("-"):
            return None
        words.append(argv[1])
    names = set(command_modules())
    stem = "_".join(w.replace("-", "_") for w in words)
    for name in (f"{stem}_cmd", f"{words[0]}_cmd"):
        if name in names:
            return name
    return None


def _has_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> bool:
    """Whether ``parser`` knows the command (and sub-command) ``argv`` starts with."""
    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub = top.choices.get(argv[0])
    if sub is None:
        return False
    if argv[0] not in GROUPS:
        return True
    group = next((a for a in sub._actions if isinstance(a, argparse._SubParsersAction)), None)
    return len(argv) > 1 and group is not None and argv[1] in group.choices


def _parser(modules: Sequence[str]) -> argparse.ArgumentParser:
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
    for module_name in modules:
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
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
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
    from poise.api.extras import MissingExtra

    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except MissingExtra as exc:  # an optional part (poise[gui], poise[plot] …) is not installed
        print(f"poise: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (``| head``): nothing more to say
        _silence_stdout()
        return 128 + signal.SIGPIPE  # what a command ended by SIGPIPE reports


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush of what was still
    buffered for a closed pipe raises nothing at exit (Python's documented recipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
