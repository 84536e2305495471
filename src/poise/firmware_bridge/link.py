"""Host-side link logic without I/O, shared by the asyncio and the threaded transports.

:class:`LinkCore` is the whole protocol of a host link as a state machine fed with bytes and
times: framing (sequence numbers, send times), decoding and :class:`LinkStats` (frames, errors by
cause, sequence gaps, round-trip times), the handshake and its retries, requests matched to their
Ack by sequence number, deadlines, heartbeats while idle, and the reconnect policy (back-off,
same schema required). The transports (:mod:`~poise.firmware_bridge.transport`) only open and
close the port, move bytes and wait; the core is tested without them (``tests/test_link_core.py``).

Its collaborators, each in a module of its own (all importable from here): the errors
(:mod:`~poise.firmware_bridge.linkerrors`), what a handshake learns
(:mod:`~poise.firmware_bridge.description`), what the core waits for: the handshake and the
requests in flight (:mod:`~poise.firmware_bridge.pending`), the statistics
(:mod:`~poise.firmware_bridge.linkstats`) and the sequence numbers out and back
(:mod:`~poise.firmware_bridge.sequence`); the back-off between reconnect attempts is
:class:`Reconnection`, here.
"""

from __future__ import annotations

import enum
import math
import time
from collections import deque
from collections.abc import Callable, Sequence

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.description import DeviceDescription, check_description
from poise.firmware_bridge.linkerrors import (
    DeviceTimeoutError,
    LinkError,
    NotConnectedError,
    PortBusyError,
    PortNotFoundError,
    SchemaMismatchError,
    VersionMismatchError,
    port_error,
)
from poise.firmware_bridge.linkstats import LinkStats, RoundTrip, SensorSample
from poise.firmware_bridge.pending import (
    HELLO_TRIES,
    REQUEST_TRIES,
    Handshake,
    Pending,
    RequestBook,
)
from poise.firmware_bridge.sequence import SETPOINT_RING, SequenceLedger

#: Reconnect back-off after an unplug: the first attempt this long after the loss, the delay
#: doubling after each failed attempt up to the second value [s].
RECONNECT_BACKOFF = (0.05, 1.0)


class LinkState(enum.Enum):
    """``DISCONNECTED``: no port (not opened yet, unplugged, between reconnect attempts, after a
    failed handshake); ``HANDSHAKE``: port open, Hello and Channels requested; ``CONNECTED``;
    ``CLOSED``: closed by its owner, no more reconnects."""

    DISCONNECTED = "disconnected"
    HANDSHAKE = "handshake"
    CONNECTED = "connected"
    CLOSED = "closed"


class Reconnection:
    """When to open the port again after a connected link lost it: :data:`RECONNECT_BACKOFF`
    after the loss, the delay doubling after each failed attempt.

    Attributes:
        enabled: reconnect at all (the link's ``reconnect``).
        under_way: a connection was lost and not yet regained (nor given up by a close).
        at: when the next attempt is due [s, the core's clock].
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.under_way = False
        self.at = math.inf
        self._backoff = RECONNECT_BACKOFF[0]

    def start(self, now: float) -> None:
        """The connection was lost at ``now``: the first attempt after the shortest delay."""
        self.under_way = self.enabled
        self._backoff = RECONNECT_BACKOFF[0]
        self.at = now + self._backoff

    def later(self, now: float) -> None:
        """An attempt (opening the port, or its handshake) failed at ``now``: back off."""
        self._backoff = min(2 * self._backoff, RECONNECT_BACKOFF[1])
        self.at = now + self._backoff

    def done(self) -> bool:
        """Stop reconnecting (connected again, or closed); whether one was under way."""
        was, self.under_way = self.under_way, False
        return was


class LinkCore:
    """The protocol logic of one host link, without I/O (not thread-safe: the caller locks).

    A transport opens and closes the port and moves bytes; this decides what to send and what
    each received frame means. Times are ``now`` [s] on :attr:`clock`; frames to write are
    returned. **tx**: :meth:`frame`; :meth:`send` (setpoints, heartbeats; dropped while not
    connected); :meth:`request` (acknowledged). **rx**: :meth:`feed` decodes, keeps
    :class:`LinkStats`, delivers samples and faults, completes the handshake, matches each Ack
    to its request by sequence number. **time**: :meth:`poll` (at :meth:`next_poll` at the
    latest) resends handshake requests, fails what passed its deadline, sends heartbeats while
    idle. **the port**: :meth:`opened` starts the handshake; :meth:`lost` and
    :meth:`open_failed` schedule reconnects (:attr:`reconnect_at`, with back-off);
    :attr:`wants_port` turns False when a handshake failed (the transport closes the port).

    Args:
        port: the port's name, for error messages.
        timeout: handshake and acknowledgement timeout [s].
        expected_schema: refuse a device whose schema checksum differs (``None``: any).
        reconnect: reconnect after the port is lost while connected (the same schema required).
        heartbeat: send a Heartbeat when nothing was sent for this long [s]; ``None``: a
            quarter of the device's watchdog timeout (≥ 5 ms); ``0``: never.
        on_sensors: called with each :class:`SensorSample` as soon as it is decoded.
        on_fault: called with each :class:`~messages.Fault`.
        clock: the time base of ``now`` and of the samples' ``host_time`` [s].
    """

    def __init__(self, port: str = "link", *, timeout: float = 2.0,
                 expected_schema: int | None = None, reconnect: bool = True,
                 heartbeat: float | None = None,
                 on_sensors: Callable[[SensorSample], None] | None = None,
                 on_fault: Callable[[m.Fault], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.port = port
        self.timeout = timeout
        self.expected_schema = expected_schema
        self.heartbeat = heartbeat
        self.clock = clock
        self.decoder = m.MessageDecoder()
        self.stats = LinkStats(counters=self.decoder.counters)
        self.ledger = SequenceLedger(self.stats)
        self.reconnection = Reconnection(reconnect)
        self.on_sensors = on_sensors
        self.on_fault = on_fault
        self.faults: deque[tuple[float, m.Fault]] = deque(maxlen=256)
        self.last_sensors: SensorSample | None = None
        self.state = LinkState.DISCONNECTED
        #: The description of the last successful handshake.
        self.description: DeviceDescription | None = None
        self.handshake: Handshake | None = None
        self.requests = RequestBook()  # of an Ack, by sequence number
        self.rx_bytes = 0  # since the port was opened
        self.rx_valid = 0  # frames decoded since the port was opened
        self._t0 = clock()

    # ------------------------------------------------------------- state
    @property
    def connected(self) -> bool:
        return self.state is LinkState.CONNECTED

    @property
    def wants_port(self) -> bool:
        """Whether the port should be open (False once a handshake failed: close it)."""
        return self.state in (LinkState.HANDSHAKE, LinkState.CONNECTED)

    @property
    def reconnect_at(self) -> float | None:
        """When to open the port again [s]; ``None``: not (connected, never connected,
        reconnect off, or closed)."""
        if self.state is LinkState.DISCONNECTED and self.reconnection.under_way:
            return self.reconnection.at
        return None

    @property
    def heartbeat_interval(self) -> float:
        """Idle time after which :meth:`poll` sends a Heartbeat [s] (0: never)."""
        if self.heartbeat is not None:
            return self.heartbeat
        watchdog_ms = self.description.hello.watchdog_ms if self.description else 100
        return max(watchdog_ms / 4e3, 0.005)

    # ------------------------------------------------------------- the port
    def opened(self, now: float) -> tuple[Pending, bytes]:
        """The port is open: start the handshake; returns it and the HelloRequest to write."""
        if self.state is LinkState.HANDSHAKE:
            self.lost(now)  # fails the handshake under way
        self.decoder.reset()  # a new stream: no partial frame, no sequence history
        self.ledger.restart()
        self.rx_bytes = self.rx_valid = 0
        self.state = LinkState.HANDSHAKE
        self.handshake = Handshake(now + self.timeout)
        return self.handshake, self._send(self.handshake, now)[1]

    def lost(self, now: float) -> None:
        """The port closed or failed (an unplug, or the transport closed it)."""
        if self.state is LinkState.HANDSHAKE:
            self._handshake_failed(
                NotConnectedError(f"{self.port}: the port closed during the handshake"), now)
        elif self.state is LinkState.CONNECTED:
            self.state = LinkState.DISCONNECTED
            self.reconnection.start(now)

    def open_failed(self, exc: BaseException, now: float) -> LinkError:
        """Opening the port raised ``exc``: back off; returns the error to raise."""
        self.reconnection.later(now)
        return port_error(self.port, exc)

    def close(self) -> None:
        """Closed by its owner: no more reconnect attempts (a handshake under way fails)."""
        self.lost(self.clock())
        self.state = LinkState.CLOSED
        self.reconnection.done()

    # ------------------------------------------------------------- time
    def poll(self, now: float) -> list[bytes]:
        """Do what is due at ``now``: returns the frames to write (handshake retries, a
        heartbeat while idle); fails the handshake and the requests past their deadline."""
        out: list[bytes] = []
        rx = (self.port, self.timeout, self.rx_bytes, self.rx_valid)  # for a timeout's message
        hs = self.handshake
        if self.state is LinkState.HANDSHAKE and hs is not None:
            if now >= hs.deadline:
                self._handshake_failed(hs.timeout_error(*rx), now)
            elif now >= hs.next_try(HELLO_TRIES, self.timeout):
                out.append(self._send(hs, now)[1])
        for req in self.requests.in_flight():
            if now >= req.deadline:
                self.requests.forget(req)
                req.set_exception(req.timeout_error(*rx))
            elif now >= req.next_try(REQUEST_TRIES, self.timeout):
                out.append(self.requests.sent(req, *self._send(req, now)))
        interval = self.heartbeat_interval
        if self.connected and interval > 0 and now - self.ledger.last_tx_time >= interval:
            out.append(self.frame(m.Heartbeat(), now)[1])
        return out

    def next_poll(self) -> float:
        """When :meth:`poll` has something to do next [s] (inf: nothing; reconnects are due at
        :attr:`reconnect_at`)."""
        times = [self.requests.next_time(self.timeout)]
        if self.state is LinkState.HANDSHAKE and self.handshake is not None:
            times += [self.handshake.next_try(HELLO_TRIES, self.timeout),
                      self.handshake.deadline]
        if self.connected and self.heartbeat_interval > 0:
            times.append(self.ledger.last_tx_time + self.heartbeat_interval)
        return min(times)

    # ------------------------------------------------------------- tx
    def frame(self, msg: m.Message, now: float | None = None) -> tuple[int, bytes]:
        """Frame ``msg`` with the next sequence number; records the send time."""
        if now is None:
            now = self.clock()
        seq = self.ledger.stamp(now, type(msg) is m.Setpoint)
        return seq, m.encode(msg, seq, int((now - self._t0) * 1e6))

    def setpoint(self, qa_ref: Sequence[float], tau_ff: Sequence[float] | None = None
                 ) -> tuple[int, bytes | None]:
        """:meth:`send` of ``Setpoint(qa_ref, tau_ff)`` without making the message (the
        control loop's write each cycle, :func:`~messages.encode_setpoint`)."""
        if not self.connected:
            self.stats.tx_dropped += 1
            return -1, None
        now = self.clock()
        seq = self.ledger.stamp(now, True)
        return seq, m.encode_setpoint(qa_ref, tau_ff, seq, int((now - self._t0) * 1e6))

    def send(self, msg: m.Message) -> tuple[int, bytes | None]:
        """Frame a setpoint or heartbeat to write now: ``(seq, frame)``, or ``(-1, None)`` while
        not connected (dropped, counted in ``stats.tx_dropped``)."""
        if not self.connected:
            self.stats.tx_dropped += 1
            return -1, None
        return self.frame(msg)

    def request(self, msg: m.Message, now: float) -> tuple[Pending, bytes]:
        """Start a request the device acknowledges; returns it and the frame to write.

        Raises:
            NotConnectedError: the link is not connected.
        """
        if not self.connected:
            raise NotConnectedError(f"{self.port}: not connected")
        pending = Pending(f"Ack for {type(msg).__name__} (seq {self.ledger.next_seq})",
                          now + self.timeout, msg)
        return pending, self.requests.sent(pending, *self._send(pending, now))

    def _send(self, pending: Pending, now: float) -> tuple[int, bytes]:
        """Frame ``pending``'s message (again) with a new sequence number, recorded in it."""
        seq, frame = self.frame(pending.message, now)
        pending.record(seq, frame)
        return seq, frame

    def reserve_setpoint(self) -> tuple[int, int] | None:
        """The sequence number and timestamp [µs] the next setpoint goes out with, for a
        caller that frames it itself (:meth:`sent_setpoint` once written); None while not
        connected."""
        if not self.connected:
            return None
        return self.ledger.next_seq, self.timestamp_us(self.clock())

    def timestamp_us(self, now: float) -> int:
        """The header timestamp of a frame sent at ``now`` [µs since the link was made]."""
        return int((now - self._t0) * 1e6)

    def sent_setpoint(self, seq: int, now: float) -> bool:
        """Record a setpoint framed with :meth:`reserve_setpoint`'s ``seq`` as sent at
        ``now``, as :meth:`setpoint` records its own; False (nothing recorded: frame it
        again) when that number went to another frame meanwhile or the link went down."""
        if seq != self.ledger.next_seq or not self.connected:
            return False
        self.ledger.stamp(now, True)
        return True

    # ------------------------------------------------------------- rx
    def feed(self, data: bytes, now: float | None = None, deliver: bool = True) -> None:
        """Decode ``data`` (read at ``now``): count, deliver sensors (``deliver`` False: keep
        only the newest as :attr:`last_sensors`) and faults, collect the handshake, match
        acknowledgements."""
        if now is None:
            now = self.clock()
        self.rx_bytes += len(data)
        one = self.decoder.sensors(data)  # the usual read: one whole sensor frame
        if one is not None:
            self._sensors(*one, now, deliver)
        else:
            for fr in self.decoder.feed(data):
                msg = fr.message
                if isinstance(msg, m.Sensors):
                    self._sensors(fr.header.seq, fr.header.timestamp_us, msg, now, deliver)
                    continue
                self.stats.rx_frames += 1
                self.rx_valid += 1
                self.ledger.received(fr.header.seq)
                if isinstance(msg, (m.Hello, m.Channel)):
                    if self.handshake is not None:
                        self.handshake.collect(msg)
                elif isinstance(msg, m.Ack):
                    self.requests.acknowledged(msg)
                elif isinstance(msg, m.Fault):
                    self.faults.append((now, msg))
                    if self.on_fault:
                        self.on_fault(msg)
        if self.state is LinkState.HANDSHAKE:
            self._check_handshake(now)

    def answered(self, data: bytes, seq: int, timestamp_us: int, msg: m.Sensors, now: float
                 ) -> SensorSample:
        """Account for ``data`` (read at ``now``), one whole Sensors frame that the caller
        decoded and answered itself (the control loop's wire cycle), exactly as :meth:`feed`
        counts it, but deliver it to nobody; its sample."""
        self.rx_bytes += len(data)
        self.decoder.count_whole(data)
        sample = self._sensors(seq, timestamp_us, msg, now, deliver=False)
        if self.state is LinkState.HANDSHAKE:
            self._check_handshake(now)
        return sample

    def _sensors(self, seq: int, timestamp_us: int, msg: m.Sensors, now: float,
                 deliver: bool = True) -> SensorSample:
        """A sensor frame: counted, its sequence number and echoes accounted for, its sample
        kept as :attr:`last_sensors` (and with ``deliver`` handed to ``on_sensors``)."""
        self.stats.rx_frames += 1
        self.rx_valid += 1
        self.ledger.sensors(seq, msg, now)
        sample = SensorSample(now, seq, timestamp_us, msg)
        self.last_sensors = sample
        if deliver and self.on_sensors:
            self.on_sensors(sample)
        return sample

    # ------------------------------------------------------------- handshake
    def _check_handshake(self, now: float) -> None:
        """Finish the handshake once Hello and all its channels are in (or refuse them)."""
        assert self.handshake is not None
        try:
            desc = self.handshake.description(self.port, self.expected_schema,
                                              self.description)
        except LinkError as exc:  # another protocol version, or schema
            self._handshake_failed(exc, now)
            return
        if desc is None:
            return
        self.description, self.state = desc, LinkState.CONNECTED
        if self.reconnection.done():
            self.stats.reconnects += 1
        self.handshake.set_result(desc)  # last: a waiting thread wakes to the new state

    def _handshake_failed(self, error: LinkError, now: float) -> None:
        assert self.handshake is not None
        self.state = LinkState.DISCONNECTED
        self.reconnection.later(now)
        self.handshake.set_exception(error)


__all__ = ["HELLO_TRIES", "RECONNECT_BACKOFF", "REQUEST_TRIES", "SETPOINT_RING",
           "DeviceDescription", "DeviceTimeoutError", "LinkCore", "LinkError", "LinkState",
           "LinkStats", "NotConnectedError", "Pending", "PortBusyError", "PortNotFoundError",
           "Reconnection", "RoundTrip", "SchemaMismatchError", "SensorSample",
           "VersionMismatchError", "check_description", "port_error"]
