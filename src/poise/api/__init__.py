"""poise.api: the shared vocabulary every layer may import (standard library only).

* :mod:`~poise.api.rules` — the controller's names and value rules (one owner for every
  entry point);
* :mod:`~poise.api.bus` — commands, responses, events and cycle samples;
* :mod:`~poise.api.state` — the controller's states and their machine;
* :mod:`~poise.api.topics` — the MQTT topics and payloads;
* :mod:`~poise.api.mqtt_config` — the ``[mqtt]`` settings;
* :mod:`~poise.api.numerics` — numeric conventions shared by the reference solvers and the
  compiled kernels;
* :mod:`~poise.api.extras` — optional dependencies and the install hint for each.
"""
