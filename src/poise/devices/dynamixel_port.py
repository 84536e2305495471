"""The serial port of a Dynamixel bus as ROBOTIS' SDK drives it, and the FTDI latency timer.

:class:`BusPort` is the SDK's ``PortHandler`` with four changes:

* **It waits for a status packet in the kernel, not in a spin.** The SDK opens the port with
  ``timeout=0`` and its ``rxPacket`` calls ``readPort`` in a loop until the packet is complete
  or the packet timeout passes: a busy wait. In the controller's real-time process
  (``SCHED_FIFO``) that spin keeps a CPU from what has to run for the answer to come: the
  kernel worker that moves a pseudo-terminal's bytes and a virtual bus's own process. On a
  2-core machine the first ping then went unanswered for the whole 34 ms timeout ("servo 1
  does not answer"; 11 of 30 connects at ``SCHED_FIFO`` 20, 0 of 50 with the wait here).
  :meth:`BusPort.readPort` returns what has arrived, or sleeps in ``select()`` until a byte
  arrives or the packet's deadline passes.
* a configurable status-packet timeout (``timeout_ms`` beyond the transmission time),
* the monotonic clock for that timeout (the SDK uses the wall clock, which NTP may step),
* an exclusive open (one owner per bus, as every poise transport).

The SDK is optional (``pip install "poise[dynamixel]"``); without it this module only offers
the latency timer check.
"""

from __future__ import annotations

import os
import select
import time
from dataclasses import dataclass

try:  # optional extra: pip install "poise[dynamixel]"
    import dynamixel_sdk as sdk
    import serial
except ImportError:  # pragma: no cover - exercised only without the extra
    sdk = None

#: Where Linux's usb-serial drivers (FTDI) expose the latency timer.
SYSFS_USB_SERIAL = "/sys/bus/usb-serial/devices"


@dataclass(frozen=True, slots=True)
class LatencyTimer:
    """The latency timer of a USB-serial (FTDI) adapter.

    Attributes:
        tty: kernel name of the port (``ttyUSB0``).
        path: the sysfs file.
        ms: its value [ms].
        warning: what to do when it is above 1 ms (empty otherwise).
    """

    tty: str
    path: str
    ms: int
    warning: str


def check_latency_timer(port: str, sysfs_root: str = SYSFS_USB_SERIAL) -> LatencyTimer | None:
    """The latency timer of ``port`` if it is a usb-serial adapter that has one (FTDI), else
    ``None``. Above 1 ms the warning gives the fix (``echo 1 | sudo tee …``): the FTDI default
    of 16 ms holds every status packet back by up to 16 ms."""
    tty = os.path.basename(os.path.realpath(port))
    path = os.path.join(sysfs_root, tty, "latency_timer")
    try:
        with open(path) as f:
            ms = int(f.read().strip())
    except (OSError, ValueError):
        return None
    warning = ""
    if ms > 1:
        warning = (f"{port} ({tty}): the FTDI latency timer is {ms} ms, so every bus "
                   f"transaction waits up to {ms} ms for the adapter; set it to 1 ms: "
                   f"echo 1 | sudo tee {path}")
    return LatencyTimer(tty, path, ms, warning)


if sdk is not None:

    class BusPort(sdk.PortHandler):
        """The SDK's port, waiting for status packets without spinning (module docstring).

        Args:
            port_name: the serial port.
            timeout_ms: how long to wait for a status packet beyond its transmission
                time [ms].
        """

        def __init__(self, port_name: str, timeout_ms: float) -> None:
            super().__init__(port_name)
            self.timeout_ms = timeout_ms

        # The SDK's method names and signatures (it calls them).

        def getCurrentTime(self) -> float:
            """Now [ms], monotonic."""
            return time.monotonic() * 1e3

        def setPacketTimeout(self, packet_length: int) -> None:
            self.packet_start_time = self.getCurrentTime()
            self.packet_timeout = self.tx_time_per_byte * packet_length + self.timeout_ms

        def readPort(self, length: int) -> bytes:
            """Up to ``length`` bytes: those already received, else the first that arrive
            before the packet's deadline (empty when it passes)."""
            data = self.ser.read(length)
            if data:
                return data
            left_ms = self.packet_timeout - (self.getCurrentTime() - self.packet_start_time)
            if left_ms > 0:
                select.select([self.ser.fileno()], [], [], left_ms / 1e3)
                data = self.ser.read(length)
            return data

        def setupPort(self, cflag_baud: int) -> bool:
            if self.is_open:
                self.closePort()
            self.ser = serial.Serial(port=self.port_name, baudrate=self.baudrate,
                                     bytesize=serial.EIGHTBITS, timeout=0, exclusive=True)
            self.is_open = True
            self.ser.reset_input_buffer()
            self.tx_time_per_byte = (1000.0 / self.baudrate) * 10.0
            return True


__all__ = ["SYSFS_USB_SERIAL", "BusPort", "LatencyTimer", "check_latency_timer"]
