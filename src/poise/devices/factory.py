"""Open the device a configuration names: one place that turns ``[device]`` into a
:class:`~poise.devices.base.Device`.

============================  ==========================================================
``port``                      device
============================  ==========================================================
``sim``                       the virtual device (``poise device sim``, its own process) on
                              a pty, poise wire protocol
``inprocess``                 the same simulated robot in this process, kept in step with
                              the wall clock and polled (:class:`~poise.devices.inprocess.
                              RealTimeSimulatedDevice`): no pty, no second process
``/dev/ttyACM0``              a poise-protocol device (our firmware)
``dynamixel:/dev/ttyUSB0``    a Dynamixel servo bus (or ``protocol = "dynamixel"``); with
                              ``sensors = PORT`` (``--sensors``) a composite of the bus and
                              a poise-protocol joint-sensor board
============================  ==========================================================

The controller and ``poise calibrate`` both open their device here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poise.devices.base import Device, DeviceError
from poise.firmware_bridge import messages as msg

if TYPE_CHECKING:
    from poise.devices.config import DeviceConfig
    from poise.devices.dynamixel_config import ServoConfig
    from poise.devices.simdevice import SimDevice

#: ``[device] port`` of the simulated robot in the controller's own process.
INPROCESS = "inprocess"
#: A joint-sensor board gets no setpoints: heartbeats keep its watchdog fed [s].
SENSOR_HEARTBEAT = 0.05


@dataclass(frozen=True)
class Opened:
    """An open device and where it is.

    Attributes:
        device: the device (connected, disarmed).
        port: the port it was opened on (``sim`` devices: the pty's stable symlink).
        sim: the virtual device process (``port = "sim"``), else ``None``.
    """

    device: Device
    port: str
    sim: object | None = None


def open_device(cfg: DeviceConfig, *, model: str, m: int, rate: float,
                on_fault: Callable[[msg.Fault], None] | None = None,
                reconnect: bool = True, qa_min: Sequence[float] | None = None,
                qa_max: Sequence[float] | None = None,
                launched: SimDevice | None = None,
                cpus: frozenset[int] | None = None, priority: int = 0) -> Opened:
    """Open the device of ``cfg`` for a robot ``model`` with ``m`` actuators at ``rate`` Hz.

    Args:
        cfg: the ``[device]`` table.
        model: the model the virtual device simulates when ``cfg.sim_model`` is not set.
        m: the number of actuators (the default Dynamixel table has IDs 1 … m).
        rate: the loop rate [Hz] (the virtual device's stream rate).
        on_fault: Fault frames of poise-protocol devices (on their reader threads).
        reconnect: poise-protocol links re-open after an unplug.
        qa_min, qa_max: the model's actuator limits: those of the default Dynamixel table
            (without ``[[device.servos]]``), instead of ∓ one spool turn.
        launched: for ``port = "sim"``, the virtual device of :func:`early_device_spec`
            started earlier (it has been importing and building its plant meanwhile); else
            one is started here, on the CPUs ``cpus`` (``None``: any), one real-time
            priority below the loop's ``priority`` (:func:`device_priority`).

    Raises:
        DeviceError: the device cannot be opened; the message names the port and why.
    """
    if cfg.protocol == "dynamixel":
        from poise.devices.dynamixel_config import default_servos

        servos = cfg.servos or default_servos(m, qa_min=qa_min, qa_max=qa_max)
        return _open_dynamixel(cfg, servos, on_fault=on_fault, reconnect=reconnect)
    if cfg.port == INPROCESS:
        return Opened(_inprocess(cfg, model=model, rate=rate), INPROCESS)
    if cfg.port == "sim":
        sim = launched or virtual_device(cfg, model=model, rate=rate, cpus=cpus,
                                         fifo_priority=device_priority(priority))
        return _open_sim(sim, on_fault=on_fault, reconnect=reconnect, baud=cfg.baud,
                         timeout=cfg.timeout)
    from poise.devices.wire import WireDevice

    dev = WireDevice(cfg.port, baud=cfg.baud, timeout=cfg.timeout, on_fault=on_fault,
                     reconnect=reconnect)
    return Opened(dev, cfg.port)


def _inprocess(cfg: DeviceConfig, *, model: str, rate: float) -> Device:
    """The simulated robot (``cfg.sim_model`` or ``model``, its ``sim_params``) in this
    process, in real time at ``rate`` Hz."""
    from poise.devices.inprocess import RealTimeSimulatedDevice
    from poise.sim import make_plant

    return RealTimeSimulatedDevice(make_plant(cfg.sim_model or model, cfg.sim_params),
                                   rate=rate)


def virtual_device_spec(cfg: DeviceConfig, *, model: str, rate: float,
                        fifo_priority: int | None = None,
                        cpus: frozenset[int] | None = None) -> dict[str, Any]:
    """The keyword arguments of :class:`~poise.devices.simdevice.SimDevice` for the virtual
    device (``poise device sim``) of a ``port = "sim"`` table: ``cfg.sim_model`` or ``model``
    at ``rate`` Hz, its ``sim_params`` and ``sim_args``, on the CPUs ``cpus`` (``None``:
    any). Plain values: the real-time process gets them before it imports anything else."""
    return {"model": cfg.sim_model or model, "rate": rate, "params": cfg.sim_params,
            "extra": tuple(cfg.sim_args), "fifo_priority": fifo_priority, "cpus": cpus}


def virtual_device(cfg: DeviceConfig, *, model: str, rate: float,
                   fifo_priority: int | None = None,
                   cpus: frozenset[int] | None = None) -> SimDevice:
    """The virtual device of a ``port = "sim"`` table (:func:`virtual_device_spec`), not
    started."""
    from poise.devices.simdevice import SimDevice

    return SimDevice(**virtual_device_spec(cfg, model=model, rate=rate,
                                           fifo_priority=fifo_priority, cpus=cpus))


def early_device_spec(cfg: DeviceConfig, *, model: str, rate: float, priority: int,
                      cpus: frozenset[int] | None = None) -> dict[str, Any] | None:
    """What the real-time process launches first (:func:`~poise.devices.simdevice.
    launch_early`), when the table asks for a virtual device (``port = "sim"``, poise
    protocol); else None. Its start-up (a Python process, its imports, its plant's kernels:
    about a second) then overlaps the controller's own; :func:`open_device` (``launched=``)
    waits for it. ``priority``: the controller's ``SCHED_FIFO`` priority
    (``loop.priority``); the device takes one below once started, and starts at the
    scheduler of its launcher, which launches it before taking its own. ``cpus``: the CPUs
    it runs on (``None``: any; :mod:`poise.devices.affinity`)."""
    if cfg.port != "sim" or cfg.protocol != "poise":
        return None
    return virtual_device_spec(cfg, model=model, rate=rate,
                               fifo_priority=device_priority(priority), cpus=cpus)


def device_priority(loop_priority: int) -> int | None:
    """The virtual device's ``SCHED_FIFO`` priority for a control loop at ``loop_priority``:
    one below it (the loop preempts the device the moment a frame wakes it; at the same
    priority the device's pacing spin would hold it off), None (the normal scheduler) when
    the loop has no real-time priority to be below."""
    return loop_priority - 1 if loop_priority > 1 else None


def _open_sim(sim: SimDevice, *, on_fault: Callable[[msg.Fault], None] | None,
              reconnect: bool, baud: int, timeout: float) -> Opened:
    from poise.devices.simdevice import SimDeviceError
    from poise.devices.wire import WireDevice

    try:
        path = sim.start()
    except (SimDeviceError, OSError) as exc:
        sim.stop()
        raise DeviceError(f"virtual device: {exc}") from None
    dev = WireDevice(path, baud=baud, timeout=timeout, on_fault=on_fault,
                     reconnect=reconnect, on_close=sim.stop)
    return Opened(dev, path, sim)


def _open_dynamixel(cfg: DeviceConfig, servos: Sequence[ServoConfig], *,
                    on_fault: Callable[[msg.Fault], None] | None, reconnect: bool) -> Opened:
    from poise.devices.dynamixel import DEFAULT_TIMEOUT_MS, DynamixelDevice

    bus = DynamixelDevice(cfg.port, servos, baud=cfg.baud,
                          timeout_ms=cfg.timeout_ms or DEFAULT_TIMEOUT_MS, retries=cfg.retries)
    if cfg.sensors is None:
        return Opened(bus, cfg.port)
    from poise.devices.composite import CompositeDevice
    from poise.devices.wire import WireDevice

    try:
        board = WireDevice(cfg.sensors, timeout=cfg.timeout, on_fault=on_fault,
                           heartbeat=SENSOR_HEARTBEAT, reconnect=reconnect)
    except DeviceError as exc:
        with contextlib.suppress(DeviceError):
            bus.close()
        raise DeviceError(f"joint-sensor board {exc}") from None
    try:
        return Opened(CompositeDevice(board, bus), cfg.port)
    except DeviceError:
        board.close()
        with contextlib.suppress(DeviceError):
            bus.close()
        raise


__all__ = ["INPROCESS", "SENSOR_HEARTBEAT", "Opened", "device_priority", "early_device_spec",
           "open_device", "virtual_device", "virtual_device_spec"]
