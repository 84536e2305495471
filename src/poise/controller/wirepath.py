"""The control loop's wire path: from the bytes of a sensor frame to the bytes of its setpoint
with one compiled call and no Python objects in between (``loop.wire``).

In the service a cycle's Python runs 3–6× slower than the same code in a tight loop, so the
time from a frame to its setpoint is about proportional to the Python between them. On a
poise-protocol serial link (:class:`~poise.devices.wire.WireDevice`) with a compiled stepper,
the loop therefore answers a read like this::

    seq = link.reserve_setpoint()                 # before the read: the setpoint's number
    read = device.read_raw()                      # os.read, not decoded (RawReads)
    step.wire_cycle(params, buffers, newest)      # decode, IK cycle, encode: one call
    link.send_reserved(seq, buffers.frame())      # os.write
    device.answered(read, ...)                    # then the bookkeeping, after the write

``newest`` is the read's last frame: when the device sent a burst (two frames in one read,
after a late tick of its own), the newest is answered and the older ones are decoded and
counted after the write (``coalesced``, as the ordinary path counts them).

:func:`poise.kernels.wire.wire_cycle` does the decoding, the cycle and the encoding. What it
does not take (a read that is not one whole Sensors frame, a device not armed, a NaN, a cycle
that faults or falls back to the statics solver) it leaves untouched, and the loop decodes the
read and runs the ordinary cycle on it, which reports it as it always has
(:meth:`poise.controller.cycle.Cycle.run_wire`, a variant of the service's one cycle).
"""

from __future__ import annotations

from typing import Any

from poise.devices.base import DeviceInfo, Sample
from poise.firmware_bridge import messages as msg
from poise.firmware_bridge.transport import RawRead
from poise.kernels import wire as wk
from poise.kernels.wire import WireBuffers

__all__ = ["RawRead", "WirePath", "wire_path"]


class WirePath:
    """The wire cycle's buffers and its accounting for one device (see the module docstring).

    Args:
        device: a device with raw reads (:class:`~poise.devices.base.RawReads`: a
            :class:`~poise.devices.wire.WireDevice`, ``read_raw``, ``feed_raw``,
            ``answered`` and its ``link``).
        feedforward: the setpoint carries τ_ff = G_a(q̄).
    """

    def __init__(self, device: Any, feedforward: bool) -> None:
        self.device = device
        self.link = device.link
        self.feedforward = feedforward
        self._buffers: WireBuffers | None = None
        self._layout: object = None
        #: Reads answered on the wire path, and reads it declined (prepared for, but left to
        #: the ordinary cycle: a corrupt or partial read, a fault). Reads it did not prepare
        #: for (the loop not running, holding, just armed) count in neither.
        self.answered = 0
        self.passed = 0

    def buffers(self, stepper: Any) -> WireBuffers:
        """The buffers for ``stepper``'s state layout (made once per layout)."""
        if self._layout is not stepper.layout or self._buffers is None:
            self._buffers = stepper.wire_buffers(
                version=msg.PROTOCOL_VERSION, sensors_type=int(msg.MsgType.SENSORS),
                setpoint_type=int(msg.MsgType.SETPOINT), feedforward=self.feedforward,
                armed_bit=int(msg.Status.ARMED), saturated_bit=int(msg.Status.SATURATED))
            self._layout = stepper.layout
        return self._buffers

    def reserve(self, buffers: WireBuffers) -> int | None:
        """Put the next setpoint's sequence number into ``buffers`` (before the read); the
        number, or None while the link is not connected."""
        reserved = self.link.reserve_setpoint()
        if reserved is None:
            return None
        buffers.io[wk.W_TX_SEQ] = reserved[0]
        return reserved[0]

    def stamp(self, buffers: WireBuffers, read: RawRead) -> None:
        """Put the setpoint's timestamp into ``buffers``: the link's time of ``read`` [µs]."""
        buffers.io[wk.W_TX_TS] = self.link.core.timestamp_us(read.host_time)

    def send(self, seq: int, buffers: WireBuffers) -> bool:
        """Write the setpoint frame of the last wire cycle; False when ``seq`` went to
        another frame meanwhile (the caller writes the setpoint the ordinary way)."""
        return self.link.send_reserved(seq, buffers.frame())

    def newest(self, read: RawRead) -> int:
        """Where the last frame of ``read`` starts (0: it is the only one, or the read ends
        in part of one); −1 when its start belongs to a frame the decoder holds part of (the
        ordinary path decodes it)."""
        data = read.data
        start = data.rfind(b"\x00", 0, len(data) - 1) + 1
        return -1 if start == 0 and self.link.pending else start

    def account(self, read: RawRead, buffers: WireBuffers, start: int) -> tuple[Sample, int]:
        """After the write: the read counted by the link as if it had decoded it (its last
        frame, from byte ``start``, answered); its sample (the decoded frame, as the codec
        gives it) and how many sensor frames before it the read held (skipped)."""
        io = buffers.io
        q, qa, tau = buffers.values()
        sensors = msg.Sensors(int(io[wk.W_STATUS]), int(io[wk.W_SP_ECHO]),
                              int(io[wk.W_RX_ECHO]), tuple(q), tuple(qa), tuple(tau))
        self.answered += 1
        return self.device.answered(read, int(io[wk.W_SEQ]), int(io[wk.W_TS]), sensors, start)


def wire_path(device: Any, info: DeviceInfo, feedforward: bool) -> WirePath | None:
    """The wire path for ``device`` when it hands out its reads undecoded
    (``info.raw_reads``, :class:`~poise.devices.base.RawReads`: a poise-protocol serial
    device), else None (the loop reads samples)."""
    return WirePath(device, feedforward) if info.raw_reads else None
