"""poise.firmware_bridge: the wire protocol to the microcontroller and the host transports.

Modules, from the ground up:

* :mod:`~poise.firmware_bridge.codec`: COBS, CRC-16/XMODEM, frame header, stream decoder.
* :mod:`~poise.firmware_bridge.messages`: message types and their byte layouts.
* :mod:`~poise.firmware_bridge.link`: host-side link logic without I/O (the state machine),
  with its collaborators :mod:`~poise.firmware_bridge.linkerrors`,
  :mod:`~poise.firmware_bridge.description` (what a handshake learns),
  :mod:`~poise.firmware_bridge.pending` (the handshake, requests and their Acks),
  :mod:`~poise.firmware_bridge.linkstats` and :mod:`~poise.firmware_bridge.sequence`
  (statistics, sequence numbers and round trips).
* :mod:`~poise.firmware_bridge.transport`: :class:`AsyncLink` (asyncio,
  :mod:`~poise.firmware_bridge.async_link`) and :class:`SerialLink` (threaded, lower latency,
  :mod:`~poise.firmware_bridge.serial_link`) serial transports, both drivers of
  :mod:`~poise.firmware_bridge.driver`.
* :mod:`~poise.firmware_bridge.plant`: the :class:`Plant` protocol a device drives.
* :mod:`~poise.firmware_bridge.device`: the device endpoint and the pty virtual device.
* :mod:`~poise.firmware_bridge.vectors`, :mod:`~poise.firmware_bridge.benchmark`: test vectors and
  the codec benchmark.

The byte layouts are documented in ``docs/protocol.md``.
"""

from poise.firmware_bridge.messages import PROTOCOL_VERSION

__all__ = ["PROTOCOL_VERSION"]
