"""The device side of the link, in Python: what a virtual (or Python-driven real) device does.

:class:`DeviceEndpoint` is the protocol logic without I/O (the same logic as ``firmware/src``):
it answers ``HelloRequest``, applies setpoints, arms/disarms, latches e-stop, acknowledges
configuration writes, reports faults, runs the watchdog, and produces a ``Sensors`` frame per
:meth:`DeviceEndpoint.tick`. It drives a :class:`~poise.firmware_bridge.plant.Plant`.

:class:`PtyDevice` puts an endpoint on a pseudo-terminal and runs it in real time (a thread or the
foreground), with fault injection (:class:`FaultInjection`): dropped, corrupted and delayed
device→host frames, and a disconnect (the pty is closed, then reopened under the same symlink
after ``reopen_after`` seconds, as a re-plugged USB device reappears under ``/dev/serial/by-id``).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import select
import threading
import time
import tty
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.faultinfo import HOST_SILENT
from poise.firmware_bridge.plant import Plant, channel_messages

SAFE_MODES = ("hold", "disabled")
#: ConfigWrite value ranges (inclusive).
WATCHDOG_RANGE_MS = (10, 10_000)
RATE_RANGE_HZ = (1, 2_000)
#: The serving loop polls the pty for the last part of each wait instead of sleeping in
#: ``select`` (which can wake ~1 ms late) [s].
SPIN = 0.3e-3


def _spin() -> float:
    """:data:`SPIN`, or 0 under ``SCHED_FIFO``: a real-time thread wakes from ``select``
    within tens of µs (no timer slack, no queue behind normal processes), and spinning would
    take CPU from the controller (measured at 1 kHz: half the bursts, a lower latency tail)."""
    try:
        return 0.0 if os.sched_getscheduler(0) == os.SCHED_FIFO else SPIN
    except (AttributeError, OSError):
        return SPIN


#: Largest plant step the endpoint takes after a stall [s] (the plant sees time pass slower).
MAX_STEP = 0.05
#: A virtual device's tick this many periods late means its process was not running
#: (:meth:`DeviceEndpoint.excuse`).
LATE_PERIODS = 2.0


@dataclass
class EndpointStats:
    """What the device counted (frames it sent and got, and what it refused)."""

    tx_frames: int = 0
    rx_frames: int = 0
    setpoints_applied: int = 0
    setpoints_ignored: int = 0
    host_seq_gaps: int = 0
    watchdog_trips: int = 0


class DeviceEndpoint:
    """Protocol logic of a device, driving ``plant``. No I/O: feed bytes, collect frames.

    Args:
        plant: what the device drives (see :mod:`poise.firmware_bridge.plant`).
        rate_hz: sensor stream rate [Hz].
        watchdog_ms: watchdog timeout [ms]: no valid Setpoint or Heartbeat for this long while
            armed → safe state, latched until re-armed.
        firmware_id: ≤ 16 bytes, sent in Hello.
        safe_mode: ``"hold"`` or ``"disabled"``: what disarm and the watchdog switch to.
        protocol_version: the version announced (tests use another one to check refusals).
    """

    def __init__(self, plant: Plant, *, rate_hz: int = 500, watchdog_ms: int = 100,
                 firmware_id: str = "poise-py-dev", safe_mode: str = "hold",
                 protocol_version: int = m.PROTOCOL_VERSION) -> None:
        if safe_mode not in SAFE_MODES:
            raise ValueError(f"safe_mode {safe_mode!r} not in {SAFE_MODES}")
        self.plant = plant
        self.channels = channel_messages(plant)
        self.n_q = sum(c.kind == m.ChannelKind.COORDINATE for c in self.channels)
        self.n_a = len(self.channels) - self.n_q
        self.rate_hz = int(rate_hz)
        self.watchdog_ms = int(watchdog_ms)
        self.firmware_id = firmware_id
        self.safe_mode = safe_mode
        self.protocol_version = protocol_version
        self.decoder = m.MessageDecoder(version=protocol_version)
        self.stats = EndpointStats()
        self.armed = False
        self.estop = False
        self.watchdog_tripped = False
        self.fault_latched = False
        self._limit = False
        self._ff = False
        self._rx_error = False
        self._limit_reported = False
        self._seq = 0
        self._t0: float | None = None
        self._last_tick: float | None = None
        self._last_feed = 0.0
        self._last_setpoint_seq = 0
        self._last_rx_seq = 0
        self._expected_host_seq: int | None = None
        self._sensor_fault_reported = False
        self._out: list[bytes] = []
        plant.set_mode("disabled")

    # ------------------------------------------------------------------ output

    def _now_us(self, now: float) -> int:
        if self._t0 is None:
            self._t0 = now
        return int((now - self._t0) * 1e6) & 0xFFFFFFFF

    def _send(self, msg: m.Message, now: float) -> None:
        self._out.append(m.encode(msg, self._seq, self._now_us(now), self.protocol_version))
        self._seq = (self._seq + 1) & 0xFFFF
        self.stats.tx_frames += 1

    def outgoing(self) -> list[bytes]:
        """The frames produced since the last call, in order."""
        out, self._out = self._out, []
        return out

    # ------------------------------------------------------------------ input

    def receive(self, data: bytes, now: float) -> None:
        """Handle the host bytes ``data`` received at ``now`` [s, monotonic]."""
        errors_before = self.decoder.counters.errors
        for frame in self.decoder.feed(data):
            self._handle(frame, now)
        if self.decoder.counters.errors != errors_before:
            self._rx_error = True

    def _handle(self, frame: m.Frame, now: float) -> None:
        self.stats.rx_frames += 1
        seq = frame.header.seq
        if self._expected_host_seq is not None and seq != self._expected_host_seq:
            self.stats.host_seq_gaps += 1
        self._expected_host_seq = (seq + 1) & 0xFFFF
        self._last_rx_seq = seq
        msg = frame.message
        if isinstance(msg, m.Setpoint):
            self._last_feed = now
            self._apply_setpoint(msg, seq, now)
        elif isinstance(msg, m.Heartbeat):
            self._last_feed = now
        elif isinstance(msg, m.HelloRequest):
            self._send(m.Hello(self.protocol_version, self.n_q, self.n_a, self.rate_hz,
                               self.watchdog_ms, m.schema_checksum(self.channels),
                               self.firmware_id), now)
            for ch in self.channels:
                self._send(ch, now)
        elif isinstance(msg, m.Arm):
            self._arm(msg, seq, now)
        elif isinstance(msg, m.Disarm):
            self.armed = False
            self.plant.set_mode(self.safe_mode)
            self._ack(msg, seq, m.ErrorCode.OK, now)
        elif isinstance(msg, m.EStop):
            self.estop = True
            self.armed = False
            self.fault_latched = True
            self.plant.set_mode("disabled")
            self._ack(msg, seq, m.ErrorCode.OK, now)
            self._send(m.Fault(m.FaultCode.ESTOP, m.Severity.FATAL, text="e-stop"), now)
        elif isinstance(msg, m.ConfigWrite):
            self._ack(msg, seq, self._configure(msg), now, detail=msg.key)
        # device→host types arriving here are ignored

    def _ack(self, msg: m.Message, seq: int, code: int, now: float, detail: int = 0) -> None:
        self._send(m.Ack(msg.TYPE, int(code), seq, int(detail)), now)

    def _arm(self, msg: m.Arm, seq: int, now: float) -> None:
        if self.estop and not msg.clear_estop:
            self._ack(msg, seq, m.ErrorCode.BAD_STATE, now)
            return
        self.estop = False
        self.watchdog_tripped = False
        self.fault_latched = False
        self._limit_reported = False
        self._sensor_fault_reported = False
        _, qa, _, _ = self.plant.read_sensors()
        self.plant.set_actuator_command([float(x) for x in qa], None)  # no jump
        self.plant.set_mode("position")
        self.armed = True
        self._last_feed = now
        self._ack(msg, seq, m.ErrorCode.OK, now)

    def _apply_setpoint(self, sp: m.Setpoint, seq: int, now: float) -> None:
        if not self.armed:
            self.stats.setpoints_ignored += 1
            return
        if len(sp.qa_ref) != self.n_a or not m.finite(sp.qa_ref) or (
                sp.tau_ff is not None and not m.finite(sp.tau_ff)):
            self.stats.setpoints_ignored += 1
            self.fault_latched = True
            self._send(m.Fault(m.FaultCode.BAD_SETPOINT, m.Severity.WARNING,
                               value=float(len(sp.qa_ref)), text="bad setpoint"), now)
            return
        acts = self.channels[self.n_q:]
        clipped = [min(max(x, c.lower), c.upper) for x, c in zip(sp.qa_ref, acts, strict=True)]
        self._limit = clipped != list(sp.qa_ref)
        if self._limit and not self._limit_reported:
            self._limit_reported = True
            bad = next(i for i, (a, b) in enumerate(zip(clipped, sp.qa_ref, strict=True))
                       if a != b)
            self._send(m.Fault(m.FaultCode.LIMIT, m.Severity.WARNING, self.n_q + bad,
                               sp.qa_ref[bad], "clipped"), now)
        self.plant.set_actuator_command(clipped, sp.tau_ff)
        self._ff = sp.tau_ff is not None
        self._last_setpoint_seq = seq
        self.stats.setpoints_applied += 1

    def _configure(self, cw: m.ConfigWrite) -> m.ErrorCode:
        v = cw.value
        if not math.isfinite(v):
            return m.ErrorCode.OUT_OF_RANGE
        if cw.key in (m.ConfigKey.WATCHDOG_MS, m.ConfigKey.SENSOR_RATE_HZ, m.ConfigKey.SAFE_MODE):
            if cw.channel != m.NO_CHANNEL:
                return m.ErrorCode.BAD_CHANNEL
            if cw.key == m.ConfigKey.WATCHDOG_MS:
                if not WATCHDOG_RANGE_MS[0] <= v <= WATCHDOG_RANGE_MS[1]:
                    return m.ErrorCode.OUT_OF_RANGE
                self.watchdog_ms = round(v)
            elif cw.key == m.ConfigKey.SENSOR_RATE_HZ:
                if not RATE_RANGE_HZ[0] <= v <= RATE_RANGE_HZ[1]:
                    return m.ErrorCode.OUT_OF_RANGE
                self.rate_hz = round(v)
            else:
                if v not in (0.0, 1.0):
                    return m.ErrorCode.OUT_OF_RANGE
                self.safe_mode = SAFE_MODES[int(v)]
            return m.ErrorCode.OK
        if cw.key == m.ConfigKey.EFFORT_LIMIT:
            if not self.n_q <= cw.channel < len(self.channels):
                return m.ErrorCode.BAD_CHANNEL
            if v <= 0:
                return m.ErrorCode.OUT_OF_RANGE
            if self.armed:
                return m.ErrorCode.BAD_STATE
            ch = self.channels[cw.channel]
            self.channels[cw.channel] = m.Channel(ch.index, ch.kind, ch.name, ch.unit, ch.lower,
                                                  ch.upper, ch.effort_unit, v)
            return m.ErrorCode.OK
        return m.ErrorCode.UNKNOWN_KEY

    # ------------------------------------------------------------------ time

    @property
    def status(self) -> int:
        s = m.Status(0)
        for flag, on in ((m.Status.ARMED, self.armed), (m.Status.ESTOP, self.estop),
                         (m.Status.WATCHDOG, self.watchdog_tripped),
                         (m.Status.FAULT, self.fault_latched), (m.Status.LIMIT, self._limit),
                         (m.Status.RX_ERROR, self._rx_error),
                         (m.Status.FEEDFORWARD, self._ff and self.armed)):
            if on:
                s |= flag
        return int(s)

    def excuse(self, seconds: float) -> None:
        """The device itself did not run for ``seconds`` [s] (a virtual device's process that
        was not scheduled): it sent no sensor frames then, so a host that answers them had
        nothing to answer; the watchdog does not count that time as the host's silence (its
        deadline moves on by it). Firmware on a microcontroller never needs this; a host that
        stops answering while the device streams still trips the watchdog."""
        if seconds > 0.0:
            self._last_feed += seconds

    def tick(self, now: float) -> None:
        """Advance the plant to ``now``, run the watchdog, and queue one Sensors frame."""
        if self._last_tick is None:
            self._last_tick = now
        dt = now - self._last_tick
        self._last_tick = now
        if dt > 0:
            self.plant.step(min(dt, MAX_STEP))
        if self.armed and now - self._last_feed > self.watchdog_ms * 1e-3:
            silence = now - self._last_feed
            self.armed = False
            self.watchdog_tripped = True
            self.fault_latched = True
            self.stats.watchdog_trips += 1
            self.plant.set_mode(self.safe_mode)
            self._send(m.Fault(m.FaultCode.WATCHDOG, m.Severity.ERROR, value=silence,
                               text=HOST_SILENT), now)
        q, qa, tau, plant_status = self.plant.read_sensors()
        q, qa, tau = tuple(map(float, q)), tuple(map(float, qa)), tuple(map(float, tau))
        status = self.status | ((int(plant_status) & 0xFFFF) << 16)
        if any(c.effort_limit > 0 and abs(t) >= c.effort_limit * (1 - 1e-6)
               for t, c in zip(tau, self.channels[self.n_q:], strict=False)):
            status |= m.Status.SATURATED
        finite = m.finite(q) and m.finite(qa) and m.finite(tau)
        if not finite and not self._sensor_fault_reported:
            self._sensor_fault_reported = True
            self.fault_latched = True
            self._send(m.Fault(m.FaultCode.SENSOR, m.Severity.ERROR, text="non-finite"), now)
        self._send(m.Sensors(int(status), self._last_setpoint_seq, self._last_rx_seq, q, qa,
                             tau), now)
        self._rx_error = False


# ---------------------------------------------------------------------------- pty runner


@dataclass
class FaultInjection:
    """Faults a virtual device injects into its device→host frames.

    Attributes:
        drop: probability that a frame is not sent (its sequence number is still used).
        corrupt: probability that one byte of a frame is flipped (never the delimiter).
        delay_ms: extra latency of every frame [ms].
        disconnect_after: close the pty this many seconds after it was first opened, once
            (``None``: never); it reopens after ``reopen_after``.
        reopen_after: after a disconnect, open a new pty this many seconds later (``None``: stop).
        seed: random seed (``None``: nondeterministic).
    """

    drop: float = 0.0
    corrupt: float = 0.0
    delay_ms: float = 0.0
    disconnect_after: float | None = None
    reopen_after: float | None = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("drop", "corrupt"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} probability {p} not in [0, 1]")
        if self.delay_ms < 0:
            raise ValueError(f"delay {self.delay_ms} ms is negative")


@dataclass
class PtyDevice:
    """Run a :class:`DeviceEndpoint` on a pseudo-terminal in real time.

    ``path`` is the slave side the host opens (``/dev/pts/N``); with ``link`` set, a symlink of
    that name points to the current pty (it survives reopening). ``on_open(path)`` is called each
    time a pty is opened.
    """

    endpoint: DeviceEndpoint
    faults: FaultInjection = field(default_factory=FaultInjection)
    link: str | None = None
    on_open: Callable[[str], None] | None = None
    path: str = ""
    connections: int = 0
    dropped: int = 0
    corrupted: int = 0
    overflowed: int = 0
    _master: int = -1
    _slave: int = -1
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _disconnect: threading.Event = field(default_factory=threading.Event)
    _spin: float = SPIN  # the pacing's polling time for the serving thread (:func:`_spin`)

    def open(self) -> str:
        """Open a new pty (raw mode) and point ``link`` at it; returns the slave path."""
        master, slave = os.openpty()
        tty.setraw(slave)
        os.set_blocking(master, False)
        self._master, self._slave = master, slave
        self.path = os.ttyname(slave)
        if self.link:
            tmp = f"{self.link}.tmp{os.getpid()}"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            os.symlink(self.path, tmp)
            os.replace(tmp, self.link)
        self.connections += 1
        if self.on_open:
            self.on_open(self.path)
        return self.path

    def close(self) -> None:
        """Close the pty (the host sees the device vanish) and remove ``link``, as udev removes
        a ``/dev/serial/by-id`` link on unplug (a stale link could point at a reused pty)."""
        if self.link:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.link)
        for fd in (self._master, self._slave):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._master = self._slave = -1

    def start(self) -> str:
        """Open the pty and run the device in a daemon thread; returns the path."""
        path = self.open()
        self._thread = threading.Thread(target=self._run, name="poise-pty-device", daemon=True)
        self._thread.start()
        return path

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.close()

    def disconnect(self) -> None:
        """Simulate an unplug now (then reopen after ``faults.reopen_after``)."""
        self._disconnect.set()

    def run_forever(self) -> None:
        """Open the pty and run in the calling thread until :meth:`stop` (or a disconnect with
        no reopen)."""
        self.open()
        try:
            self._run()
        finally:
            self.close()

    def _run(self) -> None:
        self._spin = _spin()  # this thread's scheduler
        rng = random.Random(self.faults.seed)
        ep = self.endpoint
        pending: deque[tuple[float, bytes]] = deque()
        opened = time.monotonic()
        next_tick = opened
        while not self._stop.is_set():
            now = time.monotonic()
            dc_after = None if self.connections > 1 else self.faults.disconnect_after
            if self._disconnect.is_set() or (dc_after is not None and now - opened >= dc_after):
                # --disconnect-after unplugs once (the first connection); disconnect() any time.
                self._disconnect.clear()
                self.close()
                pending.clear()
                if self.faults.reopen_after is None or self._stop.wait(self.faults.reopen_after):
                    return
                self.open()
                ep.decoder.reset()
                opened = next_tick = time.monotonic()
                continue
            timeout = max(0.0, next_tick - now)
            if pending:
                timeout = min(timeout, max(0.0, pending[0][0] - now))
            ready = self._wait_readable(timeout)
            now = time.monotonic()
            if ready:
                try:
                    data = os.read(self._master, 4096)
                except (BlockingIOError, InterruptedError):
                    data = b""
                except OSError:  # EIO: no process has the slave open; keep streaming
                    data = b""
                    self._stop.wait(0.001)
                if data:
                    ep.receive(data, now)
            if now >= next_tick:
                period = 1.0 / ep.rate_hz
                if now - next_tick > LATE_PERIODS * period:  # this process was not running
                    ep.excuse(now - next_tick)
                ep.tick(now)
                next_tick += period
                if next_tick < now - 10 * period:  # fell far behind: skip, don't burst
                    next_tick = now + period
            for frame in ep.outgoing():
                if rng.random() < self.faults.drop:
                    self.dropped += 1
                    continue
                if rng.random() < self.faults.corrupt:
                    b = bytearray(frame)
                    i = rng.randrange(len(b) - 1)
                    b[i] = (b[i] ^ (1 << rng.randrange(8))) or 0x5A
                    frame = bytes(b)
                    self.corrupted += 1
                pending.append((now + self.faults.delay_ms * 1e-3, frame))
            while pending and pending[0][0] <= now:
                self._write(pending.popleft()[1])

    def _wait_readable(self, timeout: float) -> bool:
        """Wait up to ``timeout`` [s] for input. ``select`` wakes up to ~1 ms late on a busy
        machine, which would send two sensor frames at once (the host sees a burst): it sleeps
        until :data:`SPIN` before the deadline, then the rest is spent polling the pty (not
        under ``SCHED_FIFO``, :func:`_spin`)."""
        deadline = time.monotonic() + timeout
        try:
            ready, _, _ = select.select([self._master], [], [], max(0.0, timeout - self._spin))
            while not ready and time.monotonic() < deadline:
                ready, _, _ = select.select([self._master], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(ready)

    def _write(self, frame: bytes) -> None:
        try:
            os.write(self._master, frame)
        except (BlockingIOError, OSError):
            self.overflowed += 1  # nobody reads: a UART would drop it too

