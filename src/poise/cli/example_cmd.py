"""``poise example list|show|copy|schema``: the bundled run configurations (see
:mod:`poise.examples`) and the JSON Schema of run configurations (docs/config.md).

    poise example list                        # names and what each runs
    poise example show soft_arm_stiff         # the file, to read or pipe
    poise example copy soft_arm_stiff my.toml # an editable copy; then poise run --config my.toml
    poise example schema --out config.schema.json   # for editors (Taplo / Even Better TOML)
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(commands: argparse._SubParsersAction, groups: dict[str, Any]) -> None:
    """Add ``poise example list``, ``show`` and ``copy``."""
    example = groups["example"]
    p = example.add_parser("list", help="the bundled configurations and what each runs")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_list)

    p = example.add_parser("show", help="print a bundled configuration")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--path", action="store_true", help="print only where the file is")
    p.set_defaults(func=run_show)

    p = example.add_parser("copy", help="copy a bundled configuration to edit it",
                           description="Copy a bundled configuration to DEST (a file, or a "
                           "folder; default: ./NAME.toml), then run it with "
                           "poise run --config DEST.")
    p.add_argument("name", metavar="NAME")
    p.add_argument("dest", nargs="?", metavar="DEST")
    p.add_argument("--force", action="store_true", help="overwrite DEST if it exists")
    p.set_defaults(func=run_copy)

    p = example.add_parser(
        "schema", help="print the JSON Schema of run configurations (for editors: "
        "docs/config.md)",
        description="Print the JSON Schema of run configurations (poise run --config FILE), "
        "generated from the declarations the loader validates against. Editors complete and "
        "check configuration files with it: put '#:schema ./config.schema.json' on the first "
        "line of the TOML file (Taplo / Even Better TOML).")
    p.add_argument("--out", metavar="FILE", help="write it to FILE instead of stdout")
    p.set_defaults(func=run_schema)


def run_list(args: argparse.Namespace) -> int:
    from poise.examples import description, names

    rows = [{"name": n, "description": description(n)} for n in names()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}}  {r['description']}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    from poise.examples import ExampleError, path

    try:
        file = path(args.name)
    except ExampleError as exc:
        print(f"poise example show: {exc}", file=sys.stderr)
        return 2
    if args.path:
        print(file)
    else:
        print(file.read_text(encoding="utf-8"), end="")
    return 0


def run_copy(args: argparse.Namespace) -> int:
    from poise.examples import ExampleError, copy

    try:
        written = copy(args.name, args.dest, force=args.force)
    except (ExampleError, OSError) as exc:
        print(f"poise example copy: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {written}; run it with: poise run --config {written}")
    return 0


def run_schema(args: argparse.Namespace) -> int:
    from poise.cli.outpaths import print_or_write
    from poise.controller.config_schema import schema_text

    return print_or_write(schema_text(), args.out, "poise example schema")
