"""The configuration's gains checked against the stability bound before a run starts.

``poise run`` (and the real-time process) call :func:`check_configured_gains` before anything
moves, so that an explicit gain at or above the feedback loop's bound at the configured target
is refused with the file or flag that set it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from poise.controller.config import Config, ConfigError, build_model
from poise.motion.params import LiveParams, ParamError, with_stability


def check_configured_gains(cfg: Config, model: Any = None,
                           origins: Mapping[str, tuple[Any, str]] | None = None) -> LiveParams:
    """Check a configuration's explicit gains against the stability bound at its target
    before anything starts (``poise run``): the target is planned from the rest pose (the
    rest pose itself without a target), the loop linearised there with one period of delay.

    Args:
        cfg: the configuration.
        model: its statics model (default: built from ``cfg.model``).
        origins: the command-line overrides (``{"algorithm.gamma": (2.0, "--gamma")}``), so
            a refused value is named by its flag.

    Returns:
        The parameters with their automatic gains and stability report.

    Raises:
        ConfigError: a gain at or above its bound, or an unstable target; the message names
            the file or the flag, the key, the bound and why.
    """
    from poise.ik.statics import release
    from poise.motion.planner import UnstableTarget, plan_target

    model = model if model is not None else build_model(cfg.model).model
    a = cfg.algorithm
    rest = release(model, np.zeros(model.n)).q
    target = np.asarray(a.target if a.target is not None else model.fk(rest), dtype=float)
    p = LiveParams.from_config(cfg, target)
    try:
        plan = plan_target(model, target, [rest], a.tolerance, period=1.0 / cfg.loop.rate,
                           effort_feedforward=cfg.loop.effort_feedforward, params=p,
                           uncertainty=cfg.loop.gain_uncertainty)
    except UnstableTarget as exc:
        raise ConfigError(f"{_where(cfg, 'algorithm.target', origins)} = "
                          f"{target.tolist()}: {exc}") from None
    try:
        return with_stability(replace(p, target=plan.live_target), plan.loop,
                              what="algorithm")
    except ParamError as exc:
        where = _where(cfg, exc.what, origins)
        raise ConfigError(f"{where}{str(exc)[len(exc.what):]}") from None


def _where(cfg: Config, dotted: str, origins: Mapping[str, tuple[Any, str]] | None) -> str:
    """``--flag (table.key)`` for a value from the command line, else ``file: table.key``."""
    flag = (origins or {}).get(dotted)
    return f"{flag[1]} ({dotted})" if flag else f"{cfg.source}: {dotted}"
