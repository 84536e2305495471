"""Host-side link logic without I/O, shared by the asyncio and the threaded transports.

:class:`LinkCore` is the whole protocol of a host link as a state machine fed with bytes and
times: framing (sequence numbers, send times), decoding and :class:`LinkStats` (frames, errors by
cause, sequence gaps, round-trip times), the handshake and its retries, requests matched to their
Ack by sequence number, deadlines, heartbeats while idle, and the reconnect policy (back-off,
same schema required). The transports (:mod:`~poise.firmware_bridge.transport`) only open and
close the port, move bytes and wait; the core is tested without them (``tests/test_link_core.py``).
"""

from __future__ import annotations

import enum
import errno as _errno
import math
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from poise.firmware_bridge import messages as m


class LinkError(RuntimeError):
    """Base of the transport errors; the message says what happened and what was sent."""


class PortNotFoundError(LinkError):
    """The serial port does not exist (``/dev/ttyXYZ: no such device``)."""


class DeviceTimeoutError(LinkError):
    """The device did not answer in time."""


class VersionMismatchError(LinkError):
    """The device speaks another protocol version."""


class SchemaMismatchError(LinkError):
    """The device's channels are not the ones expected (or not self-consistent)."""


class NotConnectedError(LinkError):
    """The link is down (unplugged, reconnecting, or closed)."""


class PortBusyError(LinkError):
    """Another process holds the serial port (every poise link opens its port exclusively)."""


@dataclass(frozen=True)
class DeviceDescription:
    """What the handshake learned: :class:`~messages.Hello` and the channels."""

    hello: m.Hello
    channels: tuple[m.Channel, ...]

    @property
    def protocol_version(self) -> int:
        return self.hello.protocol_version

    @property
    def firmware_id(self) -> str:
        return self.hello.firmware_id

    @property
    def rate_hz(self) -> int:
        return self.hello.rate_hz

    @property
    def schema_checksum(self) -> int:
        return self.hello.schema_checksum

    @property
    def coordinates(self) -> tuple[m.Channel, ...]:
        return self.channels[:self.hello.n_coordinates]

    @property
    def actuators(self) -> tuple[m.Channel, ...]:
        return self.channels[self.hello.n_coordinates:]

    def as_dict(self) -> dict:
        kinds = {m.ChannelKind.COORDINATE: "coordinate", m.ChannelKind.ACTUATOR: "actuator"}
        return {
            "protocol_version": self.protocol_version,
            "firmware_id": self.firmware_id,
            "rate_hz": self.rate_hz,
            "watchdog_ms": self.hello.watchdog_ms,
            "schema_checksum": f"0x{self.schema_checksum:08x}",
            "channels": [{"index": c.index, "kind": kinds.get(c.kind, str(c.kind)),
                          "name": c.name, "unit": c.unit, "lower": c.lower, "upper": c.upper,
                          "effort_unit": c.effort_unit, "effort_limit": c.effort_limit}
                         for c in self.channels],
        }


class SensorSample(NamedTuple):
    """A decoded sensor frame and when the host received it (immutable; a NamedTuple, built
    for every frame).

    Attributes:
        host_time: ``time.perf_counter()`` when the bytes that completed the frame were read [s].
        seq: device sequence number of the frame.
        device_time_us: the device's timestamp [µs, wraps at 2³²].
        sensors: the decoded :class:`~messages.Sensors`.
    """

    host_time: float
    seq: int
    device_time_us: int
    sensors: m.Sensors


def _percentile(samples: Iterable[float], p: float) -> float:
    """Percentile ``p`` (0–100) of ``samples`` (nearest rank); NaN without samples."""
    xs = sorted(samples)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))] if xs else math.nan


class RoundTrip:
    """Setpoint round-trip times: a fixed ring of the last :attr:`WINDOW` samples [s], and the
    count and maximum of all of them. Recording allocates nothing beyond the sample.

    Percentiles are over the window (the recent past), ``max`` and ``count`` over every
    sample since the link was created.
    """

    WINDOW = 4096

    def __init__(self) -> None:
        self._ring = array("d", bytes(8 * self.WINDOW))
        self.count = 0
        self.max = 0.0

    def record(self, rtt: float) -> None:
        """Add one round-trip time [s]."""
        self._ring[self.count % self.WINDOW] = rtt
        self.count += 1
        if rtt > self.max:
            self.max = rtt

    def percentile(self, p: float) -> float:
        """Percentile ``p`` (0–100) of the window [s]; NaN without samples."""
        return _percentile(self._ring[:min(self.count, self.WINDOW)], p)

    def as_dict(self) -> dict[str, float | int | None]:
        """``{"count", "p50", "p99", "max"}`` in µs (``None`` without samples)."""
        if self.count == 0:
            return {"count": 0, "p50": None, "p99": None, "max": None}
        return {"count": self.count, "p50": round(self.percentile(50) * 1e6, 1),
                "p99": round(self.percentile(99) * 1e6, 1), "max": round(self.max * 1e6, 1)}


@dataclass
class LinkStats:
    """Link statistics (host side).

    ``rtt`` samples: time from sending a host frame to receiving the first sensor frame that echoes
    its sequence number in ``last_rx_seq`` (any host frame; heartbeats while idle). It includes
    up to one sensor period of waiting for the next frame.

    ``setpoint_rtt`` (``rtt_us`` in :meth:`as_dict`): time from writing the setpoint with
    sequence number *s* to receiving the first sensor frame whose ``last_setpoint_seq`` is *s*:
    the whole loop through the wire and the device, as the controller experiences it (it also
    includes up to one sensor period). Setpoints the device replaced before it reported them
    (two arriving within one sensor period) give no sample.
    """

    rx_frames: int = 0
    tx_frames: int = 0
    tx_dropped: int = 0
    sensor_frames: int = 0
    seq_gaps: int = 0
    lost_frames: int = 0
    duplicates: int = 0
    reconnects: int = 0
    sample_overruns: int = 0
    #: The decoder's counters (:class:`~poise.firmware_bridge.codec.DecodeCounters`), read
    #: when asked for (:attr:`decode`), not copied per received chunk.
    counters: Any = field(default=None, repr=False)
    rtt: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    setpoint_rtt: RoundTrip = field(default_factory=RoundTrip)
    first_sensor_time: float | None = None
    last_sensor_time: float | None = None
    _rate_frames: int = 0

    @property
    def decode(self) -> dict[str, int]:
        """Frames dropped by cause, and the frames and bytes decoded (now)."""
        return {} if self.counters is None else self.counters.as_dict()

    @property
    def crc_errors(self) -> int:
        return self.decode.get("crc", 0)

    @property
    def frame_rate_hz(self) -> float:
        """Measured sensor frame rate since the first sensor frame (or the last reset)."""
        if self.first_sensor_time is None or self.last_sensor_time is None or \
                self._rate_frames < 2 or self.last_sensor_time <= self.first_sensor_time:
            return 0.0
        return (self._rate_frames - 1) / (self.last_sensor_time - self.first_sensor_time)

    def rtt_percentile(self, p: float) -> float:
        """Round-trip time percentile ``p`` (0–100) [s]; NaN without samples."""
        return _percentile(self.rtt, p)

    def reset_rate(self) -> None:
        self.first_sensor_time = self.last_sensor_time = None
        self._rate_frames = 0

    def as_dict(self) -> dict:
        ms = 1e3
        return {
            "rx_frames": self.rx_frames, "tx_frames": self.tx_frames,
            "tx_dropped": self.tx_dropped, "sensor_frames": self.sensor_frames,
            "frame_rate_hz": round(self.frame_rate_hz, 2),
            "crc_errors": self.crc_errors, "decode_errors": dict(self.decode),
            "seq_gaps": self.seq_gaps, "lost_frames": self.lost_frames,
            "duplicates": self.duplicates, "reconnects": self.reconnects,
            "sample_overruns": self.sample_overruns, "rtt_samples": len(self.rtt),
            "rtt_ms": {"p50": self.rtt_percentile(50) * ms, "p95": self.rtt_percentile(95) * ms,
                       "max": self.rtt_percentile(100) * ms},
            "rtt_us": self.setpoint_rtt.as_dict(),
        }


#: Setpoint send times kept for the round trip (a ring indexed by ``seq % SETPOINT_RING``):
#: enough for 4 s of setpoints in flight at 1 kHz.
SETPOINT_RING = 4096
#: Handshake requests sent within the timeout, evenly spaced.
HELLO_TRIES = 3
#: Times an acknowledged request (Arm, Disarm, EStop, ConfigWrite: all idempotent on the device)
#: is sent within the timeout, evenly spaced, each with a new sequence number; the Ack of any
#: of them completes it. A lossy link that drops one Ack does not fail the request.
REQUEST_TRIES = 3
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


class Pending(Future):
    """A handshake or an acknowledged request in flight: a :class:`~concurrent.futures.Future`
    that the core resolves (a :class:`DeviceDescription`, or an :class:`~messages.Ack` that may
    be a nack) or fails (a :class:`LinkError`), with what it waits for, its ``deadline`` [s, the
    core's clock] and what was ``sent`` for it (both for the timeout message)."""

    def __init__(self, waiting_for: str, deadline: float,
                 message: m.Message | None = None) -> None:
        super().__init__()
        self.waiting_for = waiting_for
        self.deadline = deadline
        self.sent: list[tuple[str, bytes]] = []
        #: The request resent on a lossy link (``None``: the handshake, which resends itself).
        self.message = message
        #: The sequence numbers it went out with (an Ack for any of them completes it).
        self.seqs: list[int] = []


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
        self.reconnect = reconnect
        self.heartbeat = heartbeat
        self.clock = clock
        self.decoder = m.MessageDecoder()
        self.stats = LinkStats(counters=self.decoder.counters)
        self.on_sensors = on_sensors
        self.on_fault = on_fault
        self.faults: deque[tuple[float, m.Fault]] = deque(maxlen=256)
        self.last_sensors: SensorSample | None = None
        self.state = LinkState.DISCONNECTED
        #: The description of the last successful handshake.
        self.description: DeviceDescription | None = None
        self.handshake: Pending | None = None  # of a DeviceDescription
        self.requests: dict[int, Pending] = {}  # of an Ack, by sequence number
        self.hello: m.Hello | None = None
        self.channels: dict[int, m.Channel] = {}
        self.rx_bytes = 0  # since the port was opened
        self.rx_valid = 0  # frames decoded since the port was opened
        self.last_tx_time = 0.0
        self._reconnecting = False
        self._retry_at = math.inf
        self._backoff = RECONNECT_BACKOFF[0]
        self._tx_seq = 0
        self._t0 = clock()
        self._sent_at = [math.nan] * 65536
        self._rx_expected: int | None = None
        self._last_echo: int | None = None
        self._last_sp_echo: int | None = None
        # setpoint send times by seq % SETPOINT_RING, and which seq each slot holds (-1: none)
        self._sp_sent = array("d", bytes(8 * SETPOINT_RING))
        self._sp_seq = array("l", [-1]) * SETPOINT_RING

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
        if self.state is LinkState.DISCONNECTED and self._reconnecting:
            return self._retry_at
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
        self._rx_expected = self._last_echo = self._last_sp_echo = None
        self.rx_bytes = self.rx_valid = 0
        self.hello, self.channels = None, {}
        self.state = LinkState.HANDSHAKE
        self.handshake = Pending("Hello/Channel answer", now + self.timeout)
        return self.handshake, self._hello_request(now)

    def lost(self, now: float) -> None:
        """The port closed or failed (an unplug, or the transport closed it)."""
        if self.state is LinkState.HANDSHAKE:
            self._handshake_failed(
                NotConnectedError(f"{self.port}: the port closed during the handshake"), now)
        elif self.state is LinkState.CONNECTED:
            self.state = LinkState.DISCONNECTED
            self._reconnecting = self.reconnect
            self._backoff = RECONNECT_BACKOFF[0]
            self._retry_at = now + self._backoff

    def open_failed(self, exc: BaseException, now: float) -> LinkError:
        """Opening the port raised ``exc``: back off; returns the error to raise."""
        self._retry_later(now)
        return port_error(self.port, exc)

    def close(self) -> None:
        """Closed by its owner: no more reconnect attempts (a handshake under way fails)."""
        self.lost(self.clock())
        self.state = LinkState.CLOSED
        self._reconnecting = False

    def _retry_later(self, now: float) -> None:
        self._backoff = min(2 * self._backoff, RECONNECT_BACKOFF[1])
        self._retry_at = now + self._backoff

    # ------------------------------------------------------------- time
    def poll(self, now: float) -> list[bytes]:
        """Do what is due at ``now``: returns the frames to write (handshake retries, a
        heartbeat while idle); fails the handshake and the requests past their deadline."""
        out: list[bytes] = []
        hs = self.handshake
        if self.state is LinkState.HANDSHAKE and hs is not None:
            if now >= hs.deadline:
                self._handshake_failed(self._timeout_error(hs), now)
            elif now >= self._next_try(hs, HELLO_TRIES):
                out.append(self._hello_request(now))
        for req in {id(r): r for r in self.requests.values()}.values():
            if now >= req.deadline:
                self._forget(req)
                req.set_exception(self._timeout_error(req))
            elif now >= self._next_try(req, REQUEST_TRIES):
                out.append(self._send_request(req, now))
        interval = self.heartbeat_interval
        if self.connected and interval > 0 and now - self.last_tx_time >= interval:
            out.append(self.frame(m.Heartbeat(), now)[1])
        return out

    def next_poll(self) -> float:
        """When :meth:`poll` has something to do next [s] (inf: nothing; reconnects are due at
        :attr:`reconnect_at`)."""
        times = [min(req.deadline, self._next_try(req, REQUEST_TRIES))
                 for req in self.requests.values()]
        if self.state is LinkState.HANDSHAKE and self.handshake is not None:
            times += [self._next_try(self.handshake, HELLO_TRIES), self.handshake.deadline]
        if self.connected and self.heartbeat_interval > 0:
            times.append(self.last_tx_time + self.heartbeat_interval)
        return min(times, default=math.inf)

    def _timeout_error(self, pending: Pending) -> DeviceTimeoutError:
        sent = "; ".join(f"{name} ({frame.hex()})" for name, frame in pending.sent[-3:])
        frames = self.rx_valid
        got = ("received nothing" if not self.rx_bytes
               else f"received {self.rx_bytes} bytes but no valid frame" if not frames
               else f"received {self.rx_bytes} bytes ({frames} valid frames) but not that")
        return DeviceTimeoutError(
            f"{self.port}: no {pending.waiting_for} within {self.timeout:g} s; sent "
            f"{len(pending.sent)} frame(s): {sent}; {got}")

    # ------------------------------------------------------------- tx
    def frame(self, msg: m.Message, now: float | None = None) -> tuple[int, bytes]:
        """Frame ``msg`` with the next sequence number; records the send time."""
        if now is None:
            now = self.clock()
        seq = self._stamp(now, type(msg) is m.Setpoint)
        return seq, m.encode(msg, seq, int((now - self._t0) * 1e6))

    def _stamp(self, now: float, setpoint: bool) -> int:
        """The next sequence number, its send time recorded (for the round trips)."""
        seq = self._tx_seq
        self._tx_seq = (seq + 1) & 0xFFFF
        self._sent_at[seq] = now
        self.last_tx_time = now
        self.stats.tx_frames += 1
        if setpoint:
            slot = seq % SETPOINT_RING
            self._sp_sent[slot] = now
            self._sp_seq[slot] = seq
        return seq

    def setpoint(self, qa_ref: Sequence[float], tau_ff: Sequence[float] | None = None
                 ) -> tuple[int, bytes | None]:
        """:meth:`send` of ``Setpoint(qa_ref, tau_ff)`` without making the message (the
        control loop's write each cycle, :func:`~messages.encode_setpoint`)."""
        if not self.connected:
            self.stats.tx_dropped += 1
            return -1, None
        now = self.clock()
        seq = self._stamp(now, True)
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
        pending = Pending(f"Ack for {type(msg).__name__} (seq {self._tx_seq})",
                          now + self.timeout, msg)
        return pending, self._send_request(pending, now)

    def _send_request(self, pending: Pending, now: float) -> bytes:
        """Frame ``pending``'s message (again) with a new sequence number; returns the frame."""
        assert pending.message is not None
        seq, frame = self.frame(pending.message, now)
        self.requests[seq] = pending
        pending.seqs.append(seq)
        pending.sent.append((type(pending.message).__name__, frame))
        return frame

    def _next_try(self, pending: Pending, tries: int) -> float:
        """When the next of ``tries`` sends of ``pending``, evenly spaced over the timeout,
        is due (``inf`` once all went out)."""
        n = len(pending.sent)
        return pending.deadline - self.timeout * (1 - n / tries) if n < tries else math.inf

    def _forget(self, pending: Pending) -> None:
        for seq in pending.seqs:
            self.requests.pop(seq, None)

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
            self._one_sensors(*one, now, deliver)
            return
        for fr in self.decoder.feed(data):
            self.stats.rx_frames += 1
            self.rx_valid += 1
            self._check_seq(fr.header.seq)
            msg = fr.message
            if isinstance(msg, m.Sensors):
                self._sensors(fr.header.seq, fr.header.timestamp_us, msg, now, deliver)
            elif isinstance(msg, m.Hello):
                self.hello = msg
                self.channels = {}
            elif isinstance(msg, m.Channel):
                self.channels[msg.index] = msg
            elif isinstance(msg, m.Ack):
                req = self.requests.get(msg.ref_seq)
                if req is not None:
                    self._forget(req)
                    req.set_result(msg)
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
        return self._one_sensors(seq, timestamp_us, msg, now, deliver=False)

    def _one_sensors(self, seq: int, timestamp_us: int, msg: m.Sensors, now: float,
                     deliver: bool) -> SensorSample:
        """A read that was one whole Sensors frame: counted, its sample made (and delivered)."""
        self.stats.rx_frames += 1
        self.rx_valid += 1
        self._check_seq(seq)
        sample = self._sensors(seq, timestamp_us, msg, now, deliver)
        if self.state is LinkState.HANDSHAKE:
            self._check_handshake(now)
        return sample

    def reserve_setpoint(self) -> tuple[int, int] | None:
        """The sequence number and timestamp [µs] the next setpoint goes out with, for a
        caller that frames it itself (:meth:`sent_setpoint` once written); None while not
        connected."""
        if not self.connected:
            return None
        return self._tx_seq, self.timestamp_us(self.clock())

    def timestamp_us(self, now: float) -> int:
        """The header timestamp of a frame sent at ``now`` [µs since the link was made]."""
        return int((now - self._t0) * 1e6)

    def sent_setpoint(self, seq: int, now: float) -> bool:
        """Record a setpoint framed with :meth:`reserve_setpoint`'s ``seq`` as sent at
        ``now``, as :meth:`setpoint` records its own; False (nothing recorded: frame it
        again) when that number went to another frame meanwhile or the link went down."""
        if seq != self._tx_seq or not self.connected:
            return False
        self._stamp(now, True)
        return True

    def _check_seq(self, seq: int) -> None:
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

    def _sensors(self, seq: int, timestamp_us: int, msg: m.Sensors, now: float,
                 deliver: bool = True) -> SensorSample:
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
        sample = SensorSample(now, seq, timestamp_us, msg)
        self.last_sensors = sample
        if deliver and self.on_sensors:
            self.on_sensors(sample)
        return sample

    # ------------------------------------------------------------- handshake
    def _hello_request(self, now: float) -> bytes:
        assert self.handshake is not None
        frame = self.frame(m.HelloRequest(), now)[1]
        self.handshake.sent.append(("HelloRequest", frame))
        return frame

    def _check_handshake(self, now: float) -> None:
        """Finish the handshake once Hello and all its channels are in (or refuse them)."""
        h = self.hello
        if h is None:
            return
        if h.protocol_version != m.PROTOCOL_VERSION:
            update = "firmware" if h.protocol_version < m.PROTOCOL_VERSION else "host (poise)"
            self._handshake_failed(VersionMismatchError(
                f"{self.port}: protocol version mismatch: host expects {m.PROTOCOL_VERSION}, "
                f"device '{h.firmware_id}' speaks {h.protocol_version}; update the {update}"), now)
            return
        n = h.n_coordinates + h.n_actuators
        if any(i not in self.channels for i in range(n)):
            return
        desc = DeviceDescription(h, tuple(self.channels[i] for i in range(n)))
        try:
            check_description(desc, self.port, self.expected_schema, self.description)
        except SchemaMismatchError as exc:
            self._handshake_failed(exc, now)
            return
        assert self.handshake is not None
        self.description, self.state = desc, LinkState.CONNECTED
        if self._reconnecting:
            self.stats.reconnects += 1
            self._reconnecting = False
        self.handshake.set_result(desc)  # last: a waiting thread wakes to the new state

    def _handshake_failed(self, error: LinkError, now: float) -> None:
        assert self.handshake is not None
        self.state = LinkState.DISCONNECTED
        self._retry_later(now)
        self.handshake.set_exception(error)


def check_description(desc: DeviceDescription, port: str, expected_schema: int | None = None,
                      previous: DeviceDescription | None = None) -> None:
    """Refuse a description whose schema checksum is inconsistent, not the expected one, or
    (after a reconnect) not the ``previous`` one."""
    got = m.schema_checksum(desc.channels)
    if got != desc.schema_checksum:
        raise SchemaMismatchError(
            f"{port}: device announces schema checksum 0x{desc.schema_checksum:08x} but its "
            f"channels give 0x{got:08x}")
    if expected_schema is not None and expected_schema != desc.schema_checksum:
        names = ", ".join(f"{c.name} [{c.unit}]" for c in desc.channels)
        raise SchemaMismatchError(
            f"{port}: schema mismatch: expected checksum 0x{expected_schema:08x}, device "
            f"'{desc.firmware_id}' has 0x{desc.schema_checksum:08x} (channels: {names})")
    if previous is not None and previous.schema_checksum != desc.schema_checksum:
        raise SchemaMismatchError(
            f"{port}: after reconnect the device has schema 0x{desc.schema_checksum:08x}, "
            f"before 0x{previous.schema_checksum:08x}")


def port_error(port: str, exc: BaseException) -> LinkError:
    """Map a pyserial/OS error on open to a clear :class:`LinkError`."""
    errno = getattr(exc, "errno", None)
    text = str(exc)
    if errno == 2 or "No such file" in text or ("could not open port" in text and \
            "[Errno 2]" in text):
        return PortNotFoundError(f"{port}: no such device")
    if errno == 13 or "Permission denied" in text:
        return LinkError(f"{port}: permission denied (is the user in the 'dialout' group?)")
    if errno in (_errno.EAGAIN, _errno.EWOULDBLOCK, _errno.EBUSY) or \
            "exclusively lock" in text or "busy" in text.lower():
        return PortBusyError(f"{port} is already in use by another process (opened "
                             "exclusively); stop the other poise run (or whatever holds the "
                             "port) first")
    return LinkError(f"{port}: cannot open: {text}")

