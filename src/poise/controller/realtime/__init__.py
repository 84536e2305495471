"""The controller in a real-time process of its own (``[loop] process = "own"``).

* :mod:`~poise.controller.realtime.parent` — :class:`RealtimeController`, the parent's side
  (the same API as the in-process :class:`~poise.controller.loop.Controller`:
  :class:`~poise.controller.interface.ControllerAPI`), and :func:`make_controller`; built from
  :mod:`~.process` (start-up, lifetime), :mod:`~.channel` (calls and replies), :mod:`~.mirror`
  (state, events and cycle records as the child reports them), :mod:`~.estop` (the e-stop's
  own pipe) and :mod:`~.planning` (targets planned in the parent);
* :mod:`~poise.controller.realtime.boot` — the process's first step (the spawn target);
* :mod:`~poise.controller.realtime.child` — the process itself: the controller, its ring
  writer, its command servers;
* :mod:`~poise.controller.realtime.messages` — what the two send each other.

The names below are imported on first use (PEP 562): the spawned process imports this package
before :mod:`~.boot`, which must load nothing else before it launches the virtual device.
"""

from typing import TYPE_CHECKING

from poise.api.lazy import lazy_exports

if TYPE_CHECKING:
    from poise.controller.realtime.channel import RealtimeError
    from poise.controller.realtime.parent import RealtimeController, make_controller
    from poise.controller.realtime.process import StartupCancelled

_HOME = {
    "RealtimeController": "poise.controller.realtime.parent",
    "make_controller": "poise.controller.realtime.parent",
    "RealtimeError": "poise.controller.realtime.channel",
    "StartupCancelled": "poise.controller.realtime.process",
}


__getattr__ = lazy_exports(__name__, _HOME)


__all__ = ["RealtimeController", "RealtimeError", "StartupCancelled", "make_controller"]
