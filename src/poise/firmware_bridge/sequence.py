"""The sequence numbers of a host link: what went out when, what came back.

Every host frame goes out with the next 16-bit sequence number (:meth:`SequenceLedger.stamp`),
its send time recorded; every sensor frame echoes the last host frame and the last setpoint the
device received (``last_rx_seq``, ``last_setpoint_seq``), which gives the round trips of
:class:`~poise.firmware_bridge.linkstats.LinkStats` (``rtt``, ``setpoint_rtt``); and the
device's own sequence numbers show frames lost or repeated on the way (``seq_gaps``,
``lost_frames``, ``duplicates``). Called once per frame each way: allocates nothing.
"""

from __future__ import annotations

import math
from array import array

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.linkstats import LinkStats

#: Setpoint send times kept for the round trip (a ring indexed by ``seq % SETPOINT_RING``):
#: enough for 4 s of setpoints in flight at 1 kHz.
SETPOINT_RING = 4096


class SequenceLedger:
    """Sequence numbers out (with send times) and in (with their echoes) of one link.

    Attributes:
        next_seq: the sequence number the next host frame goes out with.
        last_tx_time: when the last host frame went out [s, the link's clock].
    """

    def __init__(self, stats: LinkStats) -> None:
        self.stats = stats
        self.next_seq = 0
        self.last_tx_time = 0.0
        self._sent_at = [math.nan] * 65536
        # setpoint send times by seq % SETPOINT_RING, and which seq each slot holds (-1: none)
        self._sp_sent = array("d", bytes(8 * SETPOINT_RING))
        self._sp_seq = array("l", [-1]) * SETPOINT_RING
        self.restart()

    def restart(self) -> None:
        """A new stream (the port opened again): no sequence history of the device's."""
        self._rx_expected: int | None = None
        self._last_echo: int | None = None
        self._last_sp_echo: int | None = None

    def stamp(self, now: float, setpoint: bool) -> int:
        """The next sequence number, its send time ``now`` recorded (for the round trips)."""
        seq = self.next_seq
        self.next_seq = (seq + 1) & 0xFFFF
        self._sent_at[seq] = now
        self.last_tx_time = now
        self.stats.tx_frames += 1
        if setpoint:
            slot = seq % SETPOINT_RING
            self._sp_sent[slot] = now
            self._sp_seq[slot] = seq
        return seq

    def received(self, seq: int) -> None:
        """A device frame with sequence number ``seq``: count a gap (and the frames lost in
        it) or a duplicate."""
        exp = self._rx_expected
        self._rx_expected = (seq + 1) & 0xFFFF
        if exp is None or seq == exp:
            return
        ahead = (seq - exp) & 0xFFFF
        if ahead < 0x8000:
            self.stats.seq_gaps += 1
            self.stats.lost_frames += ahead
        else:
            self.stats.duplicates += 1

    def sensors(self, seq: int, msg: m.Sensors, now: float) -> None:
        """A sensor frame received at ``now``: :meth:`received`, counted in the frame rate,
        and its echoes matched to the host frames they answer (one round trip per host frame,
        one per setpoint)."""
        self.received(seq)
        st = self.stats
        st.sensor_frames += 1
        st._rate_frames += 1
        if st.first_sensor_time is None:
            st.first_sensor_time = now
        st.last_sensor_time = now
        echo = msg.last_rx_seq
        if self._last_echo is not None and echo != self._last_echo:
            sent = self._sent_at[echo]
            if not math.isnan(sent):
                st.rtt.append(now - sent)
                self._sent_at[echo] = math.nan  # one sample per host frame
        self._last_echo = echo
        sp = msg.last_setpoint_seq
        if sp != self._last_sp_echo:
            if self._last_sp_echo is not None:
                slot = sp % SETPOINT_RING
                if self._sp_seq[slot] == sp:
                    st.setpoint_rtt.record(now - self._sp_sent[slot])
                    self._sp_seq[slot] = -1  # one sample per setpoint
            self._last_sp_echo = sp


__all__ = ["SETPOINT_RING", "SequenceLedger"]
