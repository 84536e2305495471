"""The service's fault latch: faults from the cycle, the device and the host, latched once.

:class:`FaultLatch` latches ``fault`` (any thread; the device is disarmed in a thread of its
own so that the loop never blocks), turns the device's Fault frames into events and states
(e-stop, watchdog, errors) and names the quiet side of a watchdog trip
(:func:`~poise.firmware_bridge.faultinfo.watchdog_cause`).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from poise.api.bus import SubscriberHub
from poise.api.state import State, StateMachine
from poise.devices.base import Device, DeviceError
from poise.firmware_bridge import messages as msg
from poise.firmware_bridge.faultinfo import HostWrites, watchdog_cause


class FaultLatch:
    """Latches the service's faults (see the module docstring).

    Args:
        sm: the service's state machine.
        hub: the service: its ``device`` (disarmed on a fault) and its event stream.
    """

    def __init__(self, sm: StateMachine, hub: SubscriberHub) -> None:
        self.sm, self.hub = sm, hub
        #: When the host's setpoints went out (the cycle writes it; the watchdog's diagnosis).
        self.writes = HostWrites()
        #: The device's watchdog limit [ms] (set at connect).
        self.watchdog_ms: float | None = None
        #: An e-stop the service knows of (its own, or the device's reported) and has not
        #: re-armed since: its Fault frame, arriving after a fast ``clear``, latches nothing.
        self.clear_estop = False

    def fault(self, cause: str, **data: Any) -> None:
        """Latch a fault (from any thread) and disarm the device without blocking the loop."""
        if self.sm.to(State.FAULT, cause):
            self.hub.announce("fault", source="host", reason=cause, **data)
            threading.Thread(target=self.disarm, name="poise-disarm", daemon=True).start()

    def disarm(self) -> None:
        """Disarm the device where it is connected; a refusal is a ``fault`` event."""
        device: Device | None = self.hub.device  # type: ignore[attr-defined]
        if device is None or not device.connected:
            return
        try:
            device.disarm()
        except DeviceError as exc:
            self.hub.announce("fault", source="host", code="disarm_failed", text=str(exc))

    def on_device_fault(self, fault: msg.Fault) -> None:
        """Reader thread: a Fault frame from the device."""
        try:
            code = msg.FaultCode(fault.code).name.lower()
        except ValueError:
            code = f"code_{fault.code}"
        sev = int(fault.severity)
        self.hub.announce("fault", source="device", code=code, severity=sev,
                          channel=fault.channel, value=fault.value, text=fault.text)
        state = self.sm.state
        if fault.code == msg.FaultCode.ESTOP:
            if state != State.ESTOP and not self.clear_estop:
                self.clear_estop = True
                self.sm.to(State.ESTOP, f"device reported e-stop ({fault.text})")
        elif sev >= msg.Severity.ERROR and state in (State.RUNNING, State.READY):
            if fault.code == msg.FaultCode.WATCHDOG:
                self.watchdog(fault.value)
            else:
                self.fault(f"device fault: {code} ({fault.text})")

    def watchdog(self, device_silence: float | None) -> None:
        """The device's watchdog tripped: fault with a cause that names the quiet side."""
        cause, side = watchdog_cause(device_silence, self.writes.silence(time.perf_counter()),
                                     self.watchdog_ms)
        self.fault(cause, quiet_side=side)


__all__ = ["FaultLatch"]
