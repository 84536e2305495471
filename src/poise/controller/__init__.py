"""poise.controller: the real-time controller service (see ``docs/controller.md``).

* :mod:`~poise.controller.config` — the TOML configuration, validated into frozen dataclasses;
* :mod:`~poise.controller.service` — :class:`Controller`: states, commands, life cycle,
  summaries; its cycle (:mod:`~poise.controller.cycle`: read → update → write → record) and
  its pacing (:mod:`~poise.controller.pacing`: when the next cycle runs);
* :mod:`~poise.controller.realtime` — the same controller in a real-time process of its own;
  :mod:`~poise.controller.interface` — :class:`ControllerAPI`, what both offer;
* :mod:`~poise.motion.stepper` — one IK step per cycle (Algorithm 1 / 2 / plain);
* :mod:`~poise.motion.safety`, :mod:`~poise.controller.timing`,
  :mod:`~poise.motion.params`, :mod:`~poise.api.state`,
  :mod:`~poise.devices.simdevice`, :mod:`~poise.api.bus`.
"""

from typing import TYPE_CHECKING

from poise.api.lazy import lazy_exports

if TYPE_CHECKING:
    from poise.api.bus import Command, CommandResponse, CycleSample, Event, SampleQueue
    from poise.api.state import State
    from poise.controller.config import Config, ConfigError, build_model, load_config
    from poise.controller.interface import ControllerAPI
    from poise.controller.service import Controller, ControllerError

#: Where each name of this package lives: imported on first use (PEP 562), so that importing
#: one submodule (``poise.controller.config`` in ``poise run``'s parent process) does not
#: load the loop, Numba and SciPy with it.
_HOME = {
    "Command": "poise.api.bus", "CommandResponse": "poise.api.bus",
    "CycleSample": "poise.api.bus", "Event": "poise.api.bus", "SampleQueue": "poise.api.bus",
    "Config": "poise.controller.config", "ConfigError": "poise.controller.config",
    "build_model": "poise.controller.config", "load_config": "poise.controller.config",
    "Controller": "poise.controller.service", "ControllerError": "poise.controller.service",
    "ControllerAPI": "poise.controller.interface",
    "State": "poise.api.state",
}


__getattr__ = lazy_exports(__name__, _HOME)


__all__ = [
    "Command",
    "CommandResponse",
    "Config",
    "ConfigError",
    "Controller",
    "ControllerAPI",
    "ControllerError",
    "CycleSample",
    "Event",
    "SampleQueue",
    "State",
    "build_model",
    "load_config",
]
