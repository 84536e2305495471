"""Attach telemetry to a running controller in one call (what ``poise run`` does).

    telemetry = attach(controller)          # [mqtt] and [log] from controller.config
    ...
    telemetry.stop()                        # after controller.close()

* MQTT (``[mqtt] enabled``, default on): a :class:`MqttBridge` to ``[mqtt] url``; with no url,
  an :class:`EmbeddedBroker` on loopback (1883 if free, else any free port).
* Experiment log (``[log] path``): a :class:`LogWriter` via :func:`controller_log`.
* Foxglove live view (``foxglove_port``, ``poise run --foxglove``): a :class:`FoxgloveLive`
  WebSocket server (needs ``pip install 'poise[foxglove]'``).

All start before the loop does, so the log holds the run from its first cycle.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from poise.telemetry.broker import EmbeddedBroker, embedded_broker_needed
from poise.telemetry.log import LogWriter, controller_log
from poise.telemetry.mqtt import MqttBridge, MqttConfig

if TYPE_CHECKING:
    from poise.telemetry.foxglove_live import FoxgloveLive


@dataclass
class Telemetry:
    """What :func:`attach` started; ``stop()`` ends all of it (log last, so it sees it all)."""

    bridge: MqttBridge | None = None
    broker: EmbeddedBroker | None = None
    log: LogWriter | None = None
    url: str | None = None
    foxglove: FoxgloveLive | None = None

    def stop(self) -> None:
        if self.bridge is not None:
            self.bridge.stop()
        if self.broker is not None:
            self.broker.stop()
        if self.foxglove is not None:
            self.foxglove.stop()
        if self.log is not None:
            self.log.stop()


def attach(controller: Any, *, mqtt: bool | None = None, url: str | None = None,
           robot_id: str | None = None, log_path: str | None = None,
           foxglove: str | int | None = None, joint_states: float | None = None,
           out: TextIO | None = sys.stderr, broker: EmbeddedBroker | None = None) -> Telemetry:
    """Start MQTT, the experiment log and the Foxglove live view for ``controller``.

    Args:
        mqtt: override ``[mqtt] enabled``.
        url, robot_id: override ``[mqtt] url`` / ``robot_id`` (e.g. from ``--mqtt``,
            ``--robot-id``).
        log_path: override ``[log] path``.
        foxglove: serve the Foxglove live view on ``PORT`` or ``HOST:PORT`` (None: no).
        joint_states: override ``[mqtt] joint_states_hz`` (one record per cycle on
            ``joint_states`` and ``task``, at most this many per second; 0: off).
        out: where to print the broker address and log path (None: silent).
        broker: the embedded broker to use when one is needed
            (:func:`~poise.telemetry.broker.embedded_broker_needed`), launched earlier by
            the caller so that its start-up overlapped the controller's (owned by the
            returned :class:`Telemetry` from here on, stopped by it even on an error here);
            else one is started here.

    Raises:
        poise.api.extras.MissingExtra: ``foxglove`` is given but foxglove-sdk is missing (the
            message says ``pip install 'poise[foxglove]'``); nothing has started then.
        RuntimeError: the Foxglove port is taken.
    """
    config = controller.config
    telemetry = Telemetry(broker=broker)
    try:
        if foxglove is not None:  # first: a missing SDK fails before anything started
            telemetry.foxglove = _foxglove(controller, foxglove)
            if out is not None:
                print(f"poise run: Foxglove live view on {telemetry.foxglove.url} "
                      "(Foxglove: Open connection → Foxglove WebSocket)", file=out)
        path = log_path or config.log.path
        if path:
            telemetry.log = controller_log(controller, path)
            if out is not None:
                print(f"poise run: logging to {path}", file=out)
        if embedded_broker_needed(config, mqtt=mqtt, url=url):
            telemetry.broker = (broker or EmbeddedBroker()).start()
            url = telemetry.broker.url
            if out is not None:
                print(f"poise run: embedded MQTT broker on {url}", file=out)
        elif broker is not None:  # launched for nothing: not needed after all
            broker.stop()
            telemetry.broker = None
        if config.mqtt.enabled if mqtt is None else mqtt:
            url = url or config.mqtt.url
            # the embedded broker (amqtt) speaks MQTT 3.1.1 only
            mc = MqttConfig.from_settings(config.mqtt, url=url, robot_id=robot_id,
                                          joint_states_hz=joint_states,
                                          protocol="3.1.1" if telemetry.broker else None)
            telemetry.bridge = MqttBridge(
                controller, controller.subscribe(), controller.events(), mc,
                params=_params(controller), model=controller.model.describe(),
                device=_device(config), joint_names=_joint_names(controller.model),
                urgent_priority=config.loop.priority)
            telemetry.bridge.start()
            telemetry.url = mc.url
            if out is not None:
                print(f"poise run: MQTT on {mc.url} (topics poise/{mc.robot_id}/…)", file=out)
    except BaseException:
        telemetry.stop()
        raise
    return telemetry


def _params(controller: Any) -> Callable[[], dict[str, Any]] | None:
    """The controller's live parameters as a function, if it has them."""
    params = getattr(controller, "params", None)
    return (lambda: controller.params.as_dict()) if hasattr(params, "as_dict") else None


def _joint_names(model: Any) -> list[str]:
    """The coordinates' names (``poise.sim.plant.coordinate_names``: body names of planar
    trees, else ``theta1 …``)."""
    from poise.sim.plant import coordinate_names

    return coordinate_names(model)


def _foxglove(controller: Any, address: str | int) -> FoxgloveLive:
    """A started Foxglove live view of ``controller`` on ``address`` (``PORT``,
    ``HOST:PORT``)."""
    from poise.telemetry.foxglove_live import FoxgloveLive, parse_address

    host, port = parse_address(address)
    return FoxgloveLive(controller.subscribe(), controller.events(), model=controller.model,
                        host=host, port=port, params=_params(controller)).start()


def _device(config: Any) -> str:
    port = config.device.port
    if port == "sim":
        return f"sim:{config.device.sim_model or config.model.name}"
    return str(port)


def bench_attach(log_dir: str) -> Callable[[Any], Telemetry]:
    """For benchmarks: an ``attach(controller)`` that starts an embedded broker, the MQTT
    bridge and an MCAP log in ``log_dir`` (the benchmark measures the loop with them on)."""
    counter = iter(range(1_000_000))

    def start(controller: Any) -> Telemetry:
        path = f"{log_dir}/bench-{next(counter)}.mcap"
        return attach(controller, mqtt=True, url=None, log_path=path, out=None)

    return start
