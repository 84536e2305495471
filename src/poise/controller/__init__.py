"""poise.controller: the real-time controller service (see ``docs/controller.md``).

* :mod:`~poise.controller.config` — the TOML configuration, validated into frozen dataclasses;
* :mod:`~poise.controller.loop` — :class:`Controller`: state machine, loop thread, commands;
* :mod:`~poise.controller.stepper` — one IK step per cycle (Algorithm 1 / 2 / plain);
* :mod:`~poise.controller.safety`, :mod:`~poise.controller.timing`,
  :mod:`~poise.controller.params`, :mod:`~poise.controller.state`,
  :mod:`~poise.controller.simdevice`, :mod:`~poise.controller.bus`.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from poise.controller.bus import Command, CommandResponse, CycleSample, Event, SampleQueue
    from poise.controller.config import Config, ConfigError, build_model, load_config
    from poise.controller.loop import Controller, ControllerError
    from poise.controller.state import State

#: Where each name of this package lives: imported on first use (PEP 562), so that importing
#: one submodule (``poise.controller.config`` in ``poise run``'s parent process) does not
#: load the loop, Numba and SciPy with it.
_HOME = {
    "Command": "bus", "CommandResponse": "bus", "CycleSample": "bus", "Event": "bus",
    "SampleQueue": "bus", "Config": "config", "ConfigError": "config",
    "build_model": "config", "load_config": "config", "Controller": "loop",
    "ControllerError": "loop", "State": "state",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'poise.controller' has no attribute {name!r}")
    return getattr(importlib.import_module(f"poise.controller.{home}"), name)


__all__ = [
    "Command",
    "CommandResponse",
    "Config",
    "ConfigError",
    "Controller",
    "ControllerError",
    "CycleSample",
    "Event",
    "SampleQueue",
    "State",
    "build_model",
    "load_config",
]
