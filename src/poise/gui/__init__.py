"""poise.gui: the operator dashboard (pyqtgraph on PySide6), talking to the service over MQTT.

Modules, one idea each:

* :mod:`~poise.gui.ring` — ring buffers of live telemetry (numpy only);
* :mod:`~poise.gui.broker` — the MQTT topic contract and broker URLs (no Qt);
* :mod:`~poise.gui.client` — :class:`~poise.gui.client.MqttLink`, paho in a network thread,
  Qt signals to the GUI thread;
* :mod:`~poise.gui.curves`, :mod:`~poise.gui.arm`, :mod:`~poise.gui.plane`,
  :mod:`~poise.gui.controls` — the panels;
* :mod:`~poise.gui.window` — :class:`~poise.gui.window.DashboardWindow`, the ~30 Hz frame;
* :mod:`~poise.gui.app` — :func:`~poise.gui.app.run` (``poise dashboard``);
* :mod:`~poise.gui.bench` — the frame-time benchmark (``poise bench dashboard``).

Importing this package loads no Qt; the submodules do (binding: PySide6).
"""

import os

os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")
