"""``poise warmup``: compile and cache the kernels of the installed models ahead of time.

    poise warmup                          # every model poise run drives
    poise warmup --model double_pendulum  # one (a name or a model file; repeatable)

A first ``poise run`` of a model compiles its kernels with Numba (about 1–2 min on a 2-core
machine); this does it ahead, e.g. in a Dockerfile after ``pip install``, so that every run
starts in seconds. For each model it prepares what ``poise run`` prepares, with the same code
(:meth:`poise.controller.service.Controller.prepare_kernels`: the cycle, the planner's solves,
the timing statistics, the simulated plant of its virtual device, which ``poise calibrate``
uses too), and Numba caches it (docs/kernels.md, "The cache"). Exit codes: 0 ready, 1 a
model failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def register(commands, groups) -> None:
    p = commands.add_parser(
        "warmup", help="compile and cache the kernels of the installed models (first-run "
        "compile ahead of time, e.g. in a Dockerfile)",
        description="Compile (or load from Numba's cache) every kernel 'poise run' and "
        "'poise calibrate' use, for every model 'poise run' drives or the ones named, so "
        "that no later start compiles. Run it as the user who runs poise: when the "
        "installation is not writable Numba caches per user (or set NUMBA_CACHE_DIR for "
        "both).")
    p.add_argument("--model", action="append", metavar="NAME|FILE",
                   help="only this model (repeatable; default: all built-in models with "
                   "actuators)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON report on stdout (what was compiled, how long, where)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from poise.cli.compiling import CompileView

    try:
        names = args.model or runnable_models()
        configs = [(name, model_config(name)) for name in names]
    except ValueError as exc:
        print(f"poise warmup: {exc}", file=sys.stderr)
        return 2
    view = CompileView("poise warmup", quiet=args.quiet, every_model=True, hint=False)
    report: list[dict[str, Any]] = []
    failed = False
    try:
        for name, config in configs:
            entry = prepare(config, view)
            report.append({"model": name, **entry})
            if "error" in entry:
                failed = True
                print(f"poise warmup: {name}: {entry['error']}", file=sys.stderr)
    finally:
        view.close()
    if args.json:
        from poise.kernels.warmup import cache_dir

        print(json.dumps({"models": report, "cache_dir": str(cache_dir())}, indent=1))
    return 1 if failed else 0


def runnable_models() -> list[str]:
    """The built-in models ``poise run`` drives (those with actuators)."""
    from poise.models import list_models, load_model
    from poise.models.base import MechanicalModel

    return [name for name in list_models() if isinstance(load_model(name), MechanicalModel)]


def model_config(name: str) -> Any:
    """The configuration ``poise run --model NAME`` starts with (its virtual device), which
    decides what its controller prepares.

    Raises:
        ValueError: an unknown model, or one ``poise run`` does not drive.
    """
    from poise.controller.config import ConfigError, build_model, load_config
    from poise.models import ModelError

    try:
        config = load_config(None, {"model.name": (name, "--model"),
                                    "device.port": ("sim", "poise warmup"),
                                    "mqtt.enabled": (False, "poise warmup")})
        build_model(config.model)  # refuses a model poise run does not drive
    except (ConfigError, ModelError, OSError) as exc:
        raise ValueError(str(exc)) from None
    return config


def prepare(config: Any, view: Any) -> dict[str, Any]:
    """Prepare the kernels of ``config``'s run as its controller does, reporting to
    ``view``; what happened (``seconds``, ``cached``: whether all were expected from the
    cache, ``kernels``: the steps, ``compiled``: the functions Numba compiled rather than
    loaded), or ``error``."""
    from poise.controller.service import Controller

    t0 = time.perf_counter()
    before = _compiled()
    try:
        ctl = Controller(config)
        cached = ctl.kernels_cached()
        steps: list[str] = []

        def progress(p: Any) -> None:
            if p.name:
                steps.append(p.name)
            view(p)

        ctl.prepare_kernels(progress=progress)
        ctl.close()
    except Exception as exc:  # one model's failure is reported, the others still prepared
        return {"error": f"{type(exc).__name__}: {exc}"}
    after = _compiled()
    return {"seconds": round(time.perf_counter() - t0, 3), "cached": cached,
            "kernels": steps,
            "compiled": sorted(name for name, n in after.items() if n > before.get(name, 0))}


def _compiled() -> dict[str, int]:
    """How many signatures each compiled function of poise loaded so far compiled (not
    loaded from the cache), by ``module.name`` (Numba's ``stats.cache_misses``)."""
    from poise.kernels.cache import dispatchers

    modules = [m for name, m in list(sys.modules.items()) if name.startswith("poise.")]
    return {f"{f.py_func.__module__}.{f.__name__}": sum(f.stats.cache_misses.values())
            for f in dispatchers(modules)}


__all__ = ["model_config", "prepare", "run", "runnable_models"]
