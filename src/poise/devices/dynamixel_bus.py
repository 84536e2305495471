"""The transactions of a Dynamixel Protocol 2.0 bus (X series), through ROBOTIS' SDK.

:class:`ServoBus` owns the port (:class:`~poise.devices.dynamixel_port.BusPort`), the SDK's
packet handler and the lock that serialises transactions, and turns every way a transaction
can go wrong into one of two outcomes:

* a **one-servo transaction** (ping, read, write: connect, arm, disarm) is repeated while it
  gets no valid status packet — none, a corrupted one, one the SDK cannot decode, a short
  one — for up to ``patience_s`` (at least ``1 + retries`` times), then raises
  :class:`~poise.devices.base.DeviceError` naming the servo and the SDK's text;
* the per-cycle **sync read** is repeated ``retries`` times, then is a *bad read*: counted
  (``failed``) and, while the bus's last valid status packet is less than ``patience_s``
  old, answered with ``None``; beyond it, a DeviceError naming the servo that stopped
  answering.

So a bus that does not answer for ``patience_s`` is a fault, whatever was asked of it; a
shorter silence (a busy computer that did not schedule the virtual bus, a burst of noise on a
real one) is waited for or counted.

An exception of the SDK while it decodes a malformed or mismatched status packet is such an
invalid answer, never a traceback. The status packets of reads are received here (the SDK's
``readTx`` / ``syncReadTx`` and ``rxPacket``) rather than through its ``readTxRx`` and
``GroupSyncRead``, which take a fixed number of bytes from a packet whatever its length: a
status packet shorter than asked then gave CRC bytes as data (a wrong position, silently) or,
shorter still, an ``IndexError`` in ``getData``. Each packet's length field is checked
instead.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from poise.devices.base import DeviceError

try:  # optional extra: pip install "poise[dynamixel]"
    import dynamixel_sdk as sdk
    import serial

    from poise.devices.dynamixel_port import BusPort
except ImportError:  # pragma: no cover - exercised only without the extra
    sdk = None

# Control table (X series, Protocol 2.0; e-Manual). Address, size [bytes].
ADDR_MODEL_NUMBER = 0
ADDR_OPERATING_MODE = 11
ADDR_CURRENT_LIMIT = 38
ADDR_TORQUE_ENABLE = 64
ADDR_HARDWARE_ERROR = 70
ADDR_BUS_WATCHDOG = 98
ADDR_GOAL_CURRENT = 102
ADDR_GOAL_POSITION = 116
ADDR_PRESENT_CURRENT = 126
ADDR_PRESENT_VELOCITY = 128
ADDR_PRESENT_POSITION = 132
ADDR_INDIRECT_ADDRESS = 168
ADDR_INDIRECT_DATA = 224
#: The bytes mapped to Indirect Data 1 … 12, in order: error, watchdog, current, velocity,
#: position.
INDIRECT_MAP = (ADDR_HARDWARE_ERROR, ADDR_BUS_WATCHDOG,
                *range(ADDR_PRESENT_CURRENT, ADDR_PRESENT_POSITION + 4))
READ_LENGTH = len(INDIRECT_MAP)  # 12 bytes
#: Offsets of the fields inside the sync-read block.
OFF_ERROR, OFF_WATCHDOG, OFF_CURRENT, OFF_VELOCITY, OFF_POSITION = 0, 1, 2, 4, 8

#: Hardware Error Status bits (X series).
HARDWARE_ERRORS = {0x01: "input voltage", 0x04: "overheating", 0x08: "motor encoder",
                   0x10: "electrical shock", 0x20: "overload"}
#: The SDK's status-packet wait beyond the transmission time [ms] (2 × 16 ms latency + 2).
DEFAULT_TIMEOUT_MS = 34.0
#: How long the bus may give no valid status packet before it is a fault [s]: a servo still
#: starting, or a busy computer whose virtual bus is not scheduled for a while, answers
#: within it; a missing servo is named after it. (Longer than a controller's default
#: ``limits.sensor_fault``, 0.5 s: a controller holds, then faults, on its own rule first.)
DEFAULT_PATIENCE_S = 1.0
#: Pings per servo before a fault calls it silent (a busy computer's virtual bus, or a servo
#: bus with noise, may miss one).
DIAGNOSIS_PINGS = 3
#: Bus Watchdog (98): unit [ms], largest value, and what it reads after it tripped.
WATCHDOG_UNIT_MS, WATCHDOG_MAX, WATCHDOG_TRIPPED = 20, 127, -1
#: Round-trip samples kept for the percentiles.
RTT_WINDOW = 4096
#: Exceptions the SDK raises while decoding a malformed or mismatched status packet.
SDK_DECODE_ERRORS = (IndexError, KeyError, ValueError, TypeError)
#: Where a status packet's fields are (Protocol 2.0, :mod:`poise.sim.dxl_protocol`): ID,
#: length (2 bytes, counting the instruction, error byte, data and CRC), error byte, data.
PKT_ID, PKT_LENGTH, PKT_ERROR, PKT_DATA = 4, 5, 8, 9


def hardware_error_text(bits: int) -> str:
    """Names of the set Hardware Error Status bits, e.g. ``"overload, overheating"``."""
    names = [name for bit, name in HARDWARE_ERRORS.items() if bits & bit]
    unknown = bits & ~sum(HARDWARE_ERRORS)
    if unknown:
        names.append(f"unknown bits 0x{unknown:02x}")
    return ", ".join(names)


def watchdog_units(ms: float) -> int:
    """Bus Watchdog (98) value for a timeout of ``ms`` [ms], rounded up to the 20 ms unit;
    0 switches it off.

    Raises:
        ValueError: beyond 127 units (2540 ms), negative or not finite.
    """
    if not (math.isfinite(ms) and 0 <= ms <= WATCHDOG_MAX * WATCHDOG_UNIT_MS):
        raise ValueError(f"watchdog {ms!r} ms: a Dynamixel Bus Watchdog (register 98) is "
                         f"0 (off) or up to {WATCHDOG_MAX * WATCHDOG_UNIT_MS} ms in steps of "
                         f"{WATCHDOG_UNIT_MS} ms")
    return math.ceil(ms / WATCHDOG_UNIT_MS - 1e-9)


class ServoState(NamedTuple):
    """One servo's part of a sync read: Hardware Error Status, Bus Watchdog (-1: tripped)
    and Present Current / Velocity / Position [counts]."""

    error: int
    watchdog: int
    current: int
    velocity: int
    position: int


class Garbled(Exception):
    """The SDK failed on a malformed status packet (an exception while decoding it)."""


def _field(data: bytes, offset: int, size: int) -> int:
    return int.from_bytes(data[offset:offset + size], "little", signed=True)


class ServoBus:
    """Transactions on one Dynamixel bus (module docstring). Opening the port is the
    caller's (:meth:`open`); every method is thread-safe.

    Args:
        port: serial port.
        ids: the servo IDs of the sync read and write, in actuator order.
        baud: [bit/s].
        timeout_ms: status-packet wait beyond the transmission time [ms].
        retries: sync reads repeated after a failed one; also the least number of repeats
            of a one-servo transaction.
        patience_s: how long the bus may give no valid status packet before it is a
            fault [s] (a one-servo transaction is repeated for that long).
    """

    def __init__(self, port: str, ids: Sequence[int], *, baud: int, timeout_ms: float,
                 retries: int, patience_s: float) -> None:
        self.port_name = port
        self.ids = tuple(ids)
        self.baud = int(baud)
        self.retries = max(0, int(retries))
        self.patience_s = max(0.0, float(patience_s))
        self.lock = threading.RLock()
        self.port = BusPort(port, float(timeout_ms))
        self.ph = sdk.PacketHandler(2.0)
        self.failed = 0  # sync reads without a valid answer
        self.last_good = -math.inf  # time.monotonic() of the last valid status packet
        self._rtt: deque[float] = deque(maxlen=RTT_WINDOW)
        self._rtt_count = 0
        self._rtt_max = 0.0
        self._sync_write = sdk.GroupSyncWrite(self.port, self.ph, ADDR_GOAL_POSITION, 4)
        for sid in self.ids:
            self._sync_write.addParam(sid, [0, 0, 0, 0])

    def open(self) -> None:
        """Open the port exclusively at ``baud``.

        Raises:
            DeviceError: an unsupported baud rate, or the port cannot be opened (in use).
        """
        if self.port.getCFlagBaud(self.baud) <= 0:
            raise DeviceError(f"{self.port_name}: baud rate {self.baud} is not one the "
                              "Dynamixel SDK supports (57600, 115200, 1000000, 2000000, "
                              "3000000, 4000000, …)")
        try:
            self.port.setBaudRate(self.baud)
        except (OSError, serial.SerialException) as exc:
            text = str(exc)
            if "lock" in text.lower():
                text = ("already in use by another process (opened exclusively); stop the "
                        "other poise run (or whatever holds the port) first")
            raise DeviceError(f"{self.port_name}: cannot open the Dynamixel bus: {text}"
                              ) from None

    @property
    def is_open(self) -> bool:
        return bool(getattr(self.port, "is_open", False))

    def close(self) -> None:
        if getattr(self.port, "ser", None) is not None and self.port.is_open:
            self.port.closePort()

    # ------------------------------------------------------------------ one servo

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One SDK transaction under the lock. Port errors become DeviceError; an exception
        of the SDK decoding a malformed status packet becomes :class:`Garbled`."""
        with self.lock:
            try:
                return fn(self.port, *args)
            except (OSError, serial.SerialException) as exc:
                self.port.is_using = False  # the SDK leaves its busy flag set on exceptions
                raise DeviceError(f"{self.port_name}: Dynamixel bus I/O failed: {exc}"
                                  ) from None
            except SDK_DECODE_ERRORS as exc:
                self.port.is_using = False
                raise Garbled(f"{type(exc).__name__}: {exc}") from None

    def exchange(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, int, int]:
        """One servo's request and status packet, ``(value, result, error)``, repeated while
        no valid status packet comes (none, a corrupted, garbled or short one): at least
        ``1 + retries`` times and for up to ``patience_s``."""
        deadline = time.monotonic() + self.patience_s
        tries = 0
        while True:
            tries += 1
            try:
                out = self.call(fn, *args)
            except Garbled:
                out = (None, sdk.COMM_RX_CORRUPT, 0)
            value, result, error = out if len(out) == 3 else (None, *out)
            if result == sdk.COMM_SUCCESS:
                self.last_good = time.monotonic()
            if result not in (sdk.COMM_RX_TIMEOUT, sdk.COMM_RX_CORRUPT) or (
                    tries > self.retries and time.monotonic() >= deadline):
                return value, result, error

    def check_error(self, servo_id: int, what: str, error: int) -> None:
        """Raise for a status packet's error byte: the instruction's refusal, or the alert bit
        (a hardware error, read from address 70)."""
        if error & 0x7F:
            raise DeviceError(f"servo {servo_id}: {what} refused: "
                              f"{self.ph.getRxPacketError(error & 0x7F)} (error byte "
                              f"0x{error:02x})")
        if error & 0x80:
            bits = self.read(servo_id, ADDR_HARDWARE_ERROR, 1, "read hardware error", False)
            raise DeviceError(f"servo {servo_id}: hardware error status 0x{bits:02x} "
                              f"({hardware_error_text(bits)}) during {what}; the servo "
                              "switched its torque off (reboot or power-cycle it)")

    def ping(self, servo_id: int) -> tuple[int, int, int]:
        """``(model number, result, error)`` of a ping (:meth:`exchange`)."""
        return self.exchange(self.ph.ping, servo_id)

    def read(self, servo_id: int, address: int, length: int, what: str,
             check: bool = True) -> int:
        """The unsigned value of ``length`` bytes at ``address``.

        Raises:
            DeviceError: no valid answer within the patience, or (``check``) refused.
        """
        data, result, error = self.exchange(self._read_once, servo_id, address, length)
        if result != sdk.COMM_SUCCESS:
            raise DeviceError(f"servo {servo_id}: {what} failed on {self.port_name}: "
                              f"{self.ph.getTxRxResult(result)}")
        if check:
            self.check_error(servo_id, what, error)
        return int.from_bytes(data, "little")

    def _read_once(self, port: Any, servo_id: int, address: int, length: int
                   ) -> tuple[bytes | None, int, int]:
        """A read instruction and its status packet: ``(data, result, error)``."""
        result = self.ph.readTx(port, servo_id, address, length)
        if result != sdk.COMM_SUCCESS:
            return None, result, 0
        return self._status(port, servo_id, length)

    def _status(self, port: Any, servo_id: int, length: int) -> tuple[bytes | None, int, int]:
        """The next status packet of ``servo_id`` (one of another ID, a late answer, is
        skipped, as the SDK does), checked to carry ``length`` data bytes: ``(data, result,
        error byte)``, data None unless the result is a success."""
        packet, result = self.ph.rxPacket(port, False)
        while result == sdk.COMM_SUCCESS and packet[PKT_ID] != servo_id:
            packet, result = self.ph.rxPacket(port, False)
        if result != sdk.COMM_SUCCESS:
            return None, result, 0
        if packet[PKT_LENGTH] | packet[PKT_LENGTH + 1] << 8 != length + 4:  # + inst, error, CRC
            return None, sdk.COMM_RX_CORRUPT, 0
        return bytes(packet[PKT_DATA:PKT_DATA + length]), result, packet[PKT_ERROR]

    def write(self, servo_id: int, address: int, data: bytes, what: str) -> None:
        """Write ``data`` at ``address``, confirmed by the servo's status packet.

        Raises:
            DeviceError: no valid answer within the patience, or refused.
        """
        _, result, error = self.exchange(self.ph.writeTxRx, servo_id, address, len(data),
                                         list(data))
        if result != sdk.COMM_SUCCESS:
            raise DeviceError(f"servo {servo_id}: {what} failed on {self.port_name}: "
                              f"{self.ph.getTxRxResult(result)}")
        self.check_error(servo_id, what, error)

    def write_each(self, address: int, value: int, what: str) -> None:
        """Write the 1-byte ``value`` at ``address`` of every servo, each confirmed; a
        failure on one servo does not stop the others (the first error is raised after all
        were tried)."""
        first: DeviceError | None = None
        for sid in self.ids:
            try:
                self.write(sid, address, bytes([value]), what)
            except DeviceError as exc:
                first = first or exc
        if first is not None:
            raise first

    # ------------------------------------------------------------------ every servo

    def sync_write_goals(self, counts: Sequence[int]) -> None:
        """One sync write of Goal Position [counts] (no status packets)."""
        with self.lock:
            for sid, c in zip(self.ids, counts, strict=True):
                self._sync_write.changeParam(sid, list((c & 0xFFFFFFFF).to_bytes(4, "little")))
            result = self.call(lambda _port: self._sync_write.txPacket())
        if result != sdk.COMM_SUCCESS:
            raise DeviceError(f"sync write of goal positions to servos {list(self.ids)} on "
                              f"{self.port_name} failed: {self.ph.getTxRxResult(result)}")

    def broadcast_byte(self, address: int, value: int) -> None:
        """One sync write of the 1-byte ``value`` at ``address`` to every servo at once."""
        group = sdk.GroupSyncWrite(self.port, self.ph, address, 1)
        for sid in self.ids:
            group.addParam(sid, [value])
        self.call(lambda _port: group.txPacket())

    def sync_read(self, tolerate: bool = False) -> dict[int, ServoState] | None:
        """One sync read of the mapped block: ``{id: ServoState}``, under the lock (one
        transaction at a time, whichever thread asks). Repeated ``retries`` times while it
        gets no valid answer; then, with ``tolerate`` and the bus's last valid status packet
        less than ``patience_s`` old, ``None`` (a bad read), else a DeviceError naming the
        silent servo."""
        with self.lock:
            result = sdk.COMM_RX_FAIL
            for _ in range(self.retries + 1):
                t0 = time.perf_counter()
                try:
                    result, block = self.call(self._sync_read_once)
                except Garbled:
                    result, block = sdk.COMM_RX_CORRUPT, None
                if block is not None:
                    self._timed((time.perf_counter() - t0) * 1e6)
                    return block
                self.failed += 1
            silent = time.monotonic() - self.last_good
            if tolerate and silent < self.patience_s:
                return None
            raise self._diagnose(result, silent)

    def _sync_read_once(self, port: Any) -> tuple[int, dict[int, ServoState] | None]:
        """Send the sync read and receive one status packet per servo, in ID order
        (:meth:`_status`): ``(result, block)``, the block None unless every packet is valid
        and as long as asked."""
        result = self.ph.syncReadTx(port, ADDR_INDIRECT_DATA, READ_LENGTH, list(self.ids),
                                    len(self.ids), False)
        if result != sdk.COMM_SUCCESS:
            return result, None
        out = {}
        for sid in self.ids:
            data, result, _ = self._status(port, sid, READ_LENGTH)
            if data is None:
                return result, None
            out[sid] = ServoState(data[OFF_ERROR], _field(data, OFF_WATCHDOG, 1),
                                  _field(data, OFF_CURRENT, 2), _field(data, OFF_VELOCITY, 4),
                                  _field(data, OFF_POSITION, 4))
        return result, out

    def _timed(self, dt_us: float) -> None:
        self._rtt.append(dt_us)
        self._rtt_count += 1
        self._rtt_max = max(self._rtt_max, dt_us)
        self.last_good = time.monotonic()

    def _diagnose(self, result: int, silent: float) -> DeviceError:
        """The bus gave no valid sync read for ``silent`` s: which servo stopped answering
        (up to :data:`DIAGNOSIS_PINGS` pings each: one late answer on a loaded computer does
        not make a servo silent)."""
        text = self.ph.getTxRxResult(result)
        for sid in self.ids:
            for _ in range(DIAGNOSIS_PINGS):
                try:
                    _, ping, _ = self.call(self.ph.ping, sid)
                except Garbled:
                    ping = sdk.COMM_RX_CORRUPT
                if ping == sdk.COMM_SUCCESS:
                    break
            if ping != sdk.COMM_SUCCESS:
                return DeviceError(f"servo {sid} stopped answering on {self.port_name} at "
                                   f"{self.baud} baud (sync read: {text}; ping: "
                                   f"{self.ph.getTxRxResult(ping)})")
        since = "" if math.isinf(silent) else f" for {silent * 1e3:.0f} ms"
        return DeviceError(f"sync read of servos {list(self.ids)} on {self.port_name} failed "
                           f"({text}){since} although every servo answers a ping (corrupted "
                           f"or late status packets; {self.failed} sync reads failed so far)")

    def rtt_us(self) -> dict[str, float]:
        """Sync-read round trip [µs]: ``count`` and ``max`` over the bus's life, ``p50`` and
        ``p99`` over the last :data:`RTT_WINDOW` reads (instruction written → last status
        packet decoded, host clock); ``failed``: sync reads without a valid answer (each
        repeat counted)."""
        if not self._rtt:
            return {"count": 0, "p50": math.nan, "p99": math.nan, "max": math.nan,
                    "failed": self.failed}
        ordered = sorted(self._rtt)

        def pct(p: float) -> float:
            return ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)]

        return {"count": self._rtt_count, "p50": pct(50), "p99": pct(99), "max": self._rtt_max,
                "failed": self.failed}


__all__ = ["DEFAULT_PATIENCE_S", "DEFAULT_TIMEOUT_MS", "HARDWARE_ERRORS", "INDIRECT_MAP",
           "READ_LENGTH", "WATCHDOG_TRIPPED", "WATCHDOG_UNIT_MS", "Garbled", "ServoBus",
           "ServoState", "hardware_error_text", "watchdog_units"]
