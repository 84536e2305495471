"""``poise model list``, ``poise model show NAME|PATH`` and ``poise model schema``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np


def register(commands: argparse._SubParsersAction, groups: dict[str, Any]) -> None:
    model = groups["model"]
    p = model.add_parser("list", help="list the built-in models (name, family, n, m, task size)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_list)
    p = model.add_parser("show", help="print all parameters of a model (name or .toml path)")
    p.add_argument("model", metavar="NAME|PATH", help="built-in model name/alias or a .toml file")
    p.add_argument("--gravity", type=float, default=None, help="override gravity [m/s²]")
    p.add_argument("--json", action="store_true",
                   help="print JSON (loadable again as a model description)")
    p.set_defaults(func=cmd_show)
    p = model.add_parser(
        "schema", help="print the JSON Schema of model files (for editors: docs/models.md)",
        description="Print the JSON Schema of model files, generated from the declarations "
        "the loader validates against. Editors use it to complete and check model files: "
        "put '#:schema ./model.schema.json' on the first line of a TOML model file "
        "(Taplo / Even Better TOML).")
    p.add_argument("--out", metavar="FILE", help="write it to FILE instead of stdout")
    p.set_defaults(func=cmd_schema)


def cmd_list(args: argparse.Namespace) -> int:
    from poise.models import model_summaries

    rows = model_summaries()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'name':<18} {'family':<12} {'n':>3} {'m':>3} {'task':>5}  aliases")
    for r in rows:
        if "error" in r:
            print(f"{r['name']:<18} {r.get('family') or '?':<12} error: {r['error']}")
            continue
        m = "-" if r["m"] is None else r["m"]
        task = f"{r['task_dim']}" + (" pose" if r["task_kind"] == "pose" else "")
        print(f"{r['name']:<18} {r['family']:<12} {r['n']:>3} {m:>3} {task:>5}  "
              f"{', '.join(r['aliases'])}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from poise.cli.outpaths import print_or_write
    from poise.models.schema import schema_text

    return print_or_write(schema_text(), args.out, "poise model schema")


def derived(model: Any) -> dict[str, Any]:
    """Quantities that follow from the description (written under ``derived``, ignored on
    load)."""
    out: dict[str, Any] = {"n": model.n, "task_dim": model.task_dim,
                           "task_kind": model.task_kind}

    def lst(x: Any) -> list[float | None]:
        return [None if not np.isfinite(v) else float(v) for v in np.asarray(x, float)]

    out["q_min"], out["q_max"] = lst(model.q_min), lst(model.q_max)
    if hasattr(model, "C"):
        out.update(m=model.m, qa_min=lst(model.qa_min), qa_max=lst(model.qa_max),
                   damping=lst(model.damping), gravity=model.gravity,
                   C_inv=np.asarray(model.C_inv if hasattr(model, "C_inv")
                                    else np.linalg.inv(model.C)).tolist())
    if hasattr(model, "masses"):
        out["total_mass"] = float(np.sum(model.masses))
    return out


def cmd_show(args: argparse.Namespace) -> int:
    from poise.models import ModelError, load_model

    try:
        model = load_model(args.model, gravity=args.gravity)
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    desc = model.describe()
    extra = derived(model)
    if args.json:
        print(json.dumps({**desc, "derived": extra}, indent=2))
        return 0
    print(f"{desc.get('name', model.name)} ({desc.get('family')})")
    if desc.get("description"):
        print(f"  {desc['description']}")
    for key, value in extra.items():
        print(f"  {key:<12} {_fmt(value)}")
    print("parameters:")
    for key, value in desc.items():
        if key in ("name", "family", "description"):
            continue
        if isinstance(value, list) and value and isinstance(value[0], dict):
            for i, item in enumerate(value):
                print(f"  {key}[{i}]: " + ", ".join(f"{k}={_fmt(v)}" for k, v in item.items()))
        elif isinstance(value, dict):
            print(f"  {key}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in value.items()))
        else:
            print(f"  {key} = {_fmt(value)}")
    return 0


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if value is None:
        return "unlimited"
    return str(value)
