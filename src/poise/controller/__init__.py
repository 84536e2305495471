"""poise.controller: the real-time controller service (see ``docs/controller.md``).

* :mod:`~poise.controller.config` — the TOML configuration, validated into frozen dataclasses;
* :mod:`~poise.controller.loop` — :class:`Controller`: state machine, loop thread, commands;
* :mod:`~poise.controller.stepper` — one IK step per cycle (Algorithm 1 / 2 / plain);
* :mod:`~poise.controller.safety`, :mod:`~poise.controller.timing`,
  :mod:`~poise.controller.params`, :mod:`~poise.controller.state`,
  :mod:`~poise.controller.simdevice`, :mod:`~poise.controller.bus`.
"""

from poise.controller.bus import Command, CommandResponse, CycleSample, Event, SampleQueue
from poise.controller.config import Config, ConfigError, build_model, load_config
from poise.controller.loop import Controller, ControllerError
from poise.controller.state import State

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
