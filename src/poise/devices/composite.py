"""A composite device: joint sensors on one device, actuators on another.

The usual lab set-up: a microcontroller reads the joint encoders / tendon sensors and speaks the
poise wire protocol (a :class:`~poise.devices.wire.WireDevice` with n coordinates and no
actuators), while the tendons are pulled by a servo bus (a
:class:`~poise.devices.dynamixel.DynamixelDevice`, polled).

One :meth:`CompositeDevice.read` polls the actuators and takes the newest joint-sensor frame:
the sample's ``host_time`` is that frame's arrival time, so a sensor board that stops streaming
ages the samples and the controller holds, then faults, as with any streaming device. Status:
the actuators' bits, plus ESTOP and FAULT from the sensor board (an e-stop button wired to it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from poise.devices.base import Device, DeviceError, DeviceInfo, Sample, Status
from poise.devices.wire import WireDevice

#: Sensor-board status bits that the composite reports (the rest belong to the actuators).
SENSOR_BITS = Status.ESTOP | Status.FAULT


class CompositeDevice:
    """Joint sensors from ``sensors`` and actuators from ``actuators`` (see the module
    docstring).

    Args:
        sensors: the joint-sensor board (n_q > 0 coordinates, its actuators unused).
        actuators: the actuator device (a servo bus).

    Raises:
        DeviceError: the sensor board measures no coordinates.
    """

    def __init__(self, sensors: WireDevice, actuators: Device) -> None:
        self.sensors = sensors
        self.actuators = actuators
        s_info, a_info = sensors.describe(), actuators.describe()
        if s_info.n_q == 0:
            raise DeviceError(f"sensor board {s_info.extra.get('port', s_info.name)} "
                              "measures no coordinates")
        self._info = DeviceInfo(
            name=f"{s_info.name} + {a_info.name}", n_q=s_info.n_q, n_a=a_info.n_a,
            qa_min=a_info.qa_min, qa_max=a_info.qa_max, rate_hz=0.0, polled=True,
            ids=a_info.ids, extra={"sensors": {"name": s_info.name, **s_info.extra},
                                   "actuators": {"name": a_info.name, **a_info.extra}})

    def describe(self) -> DeviceInfo:
        return self._info

    @property
    def connected(self) -> bool:
        return self.sensors.connected and self.actuators.connected

    def configure(self, rate_hz: float | None = None, watchdog_ms: float | None = None) -> None:
        """The sensor board streams at ``rate_hz``; the watchdog goes to the actuators."""
        self.sensors.configure(rate_hz=rate_hz)
        self.actuators.configure(watchdog_ms=watchdog_ms)

    def read(self, timeout: float | None = None) -> Sample:
        """Poll the actuators and combine with the newest sensor frame.

        Raises:
            DeviceTimeout: the sensor board has sent no frame yet (within ``timeout``).
        """
        act = self.actuators.read(timeout)
        frame = self.sensors.latest()
        if frame is None:
            frame = self.sensors.read(timeout)
        return self._combine(frame, act)

    def latest(self) -> Sample:
        """Same as :meth:`read` (the actuators are polled)."""
        return self.read(None)

    def read_nowait(self) -> Sample | None:
        """The actuators are polled: no backlog, None."""
        return None

    def _combine(self, frame: Sample, act: Sample) -> Sample:
        status = int(act.status) | (int(frame.status) & int(SENSOR_BITS))
        return Sample(host_time=min(frame.host_time, act.host_time),
                      device_time_us=frame.device_time_us, q=frame.q, qa=act.qa,
                      efforts=act.efforts, status=status, seq=act.seq)

    def write(self, qa: Sequence[float], tau_ff: Sequence[float] | None = None) -> None:
        self.actuators.write(qa, tau_ff)

    def arm(self, clear_estop: bool = False) -> None:
        """Arm the actuators. With ``clear_estop`` also clear an e-stop latched on the sensor
        board (its button): arm it with the clear flag, then disarm (it drives nothing)."""
        last = self.sensors.latest()
        if last is not None and last.status & Status.ESTOP:
            if not clear_estop:
                raise DeviceError("the sensor board reports a latched e-stop: clear it first")
            self.sensors.arm(clear_estop=True)
            self.sensors.disarm()
        self.actuators.arm(clear_estop)

    def disarm(self) -> None:
        self.actuators.disarm()

    def estop(self) -> None:
        self.actuators.estop()

    def clear(self) -> None:
        self.actuators.clear()

    def close(self) -> None:
        with contextlib.suppress(DeviceError):
            self.actuators.close()
        self.sensors.close()

    def stats(self) -> dict[str, Any]:
        return {"sensors": self.sensors.stats(), "actuators": self.actuators.stats()}


__all__ = ["SENSOR_BITS", "CompositeDevice"]
