"""Dynamixel Protocol 2.0 servos (X series) as a poise :class:`~poise.devices.base.Device`.

One servo per actuator, each winding a tendon on a spool (or driving a joint directly); the
conversion and the per-servo table are in :mod:`poise.devices.dynamixel_config`. The bus is
reached through ROBOTIS' ``dynamixel_sdk`` (``pip install "poise[dynamixel]"``).

Per control cycle the device does exactly two bus transactions:

* ``read()``: ONE ``GroupSyncRead`` of 11 bytes at Indirect Data 1 (224 … 234), which the
  servos map (Indirect Address 1 … 11, written at connect) to Hardware Error Status (70, 1
  byte) followed by Present Current (126, 2), Present Velocity (128, 4) and Present Position
  (132, 4). Why indirect addressing rather than a second sync read of address 70: each bus
  transaction costs a full round trip (USB latency, ~1 ms through an FTDI adapter with its
  latency timer at 1 ms, plus the servos' return delay), so a second read would halve the
  highest loop rate, while the mapping costs one write per servo at connect. (The SDK's
  ``GroupSyncRead`` also drops each status packet's error byte, so its alert bit cannot stand
  in for address 70.)
* ``write()``: ONE ``GroupSyncWrite`` of Goal Position (116, 4 bytes).

Faults: a non-zero hardware error status, a servo that stops answering, or any failed
transaction raises :class:`~poise.devices.base.DeviceError` naming the servo ID and the SDK's
error text; the controller latches it. ``estop()`` switches every servo's torque off and
latches in this object until ``clear()``.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from poise.devices.base import DeviceError, DeviceInfo, Sample, Status
from poise.devices.dynamixel_config import (
    CURRENT_BASED_POSITION,
    ServoConfig,
    with_defaults,
)

try:  # optional extra: pip install "poise[dynamixel]"
    import dynamixel_sdk as sdk
    import serial
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    sdk = None
    _IMPORT_ERROR: ImportError | None = _exc
else:
    _IMPORT_ERROR = None

# Control table (X series, Protocol 2.0; e-Manual). Address, size [bytes].
ADDR_MODEL_NUMBER = 0
ADDR_OPERATING_MODE = 11
ADDR_CURRENT_LIMIT = 38
ADDR_TORQUE_ENABLE = 64
ADDR_HARDWARE_ERROR = 70
ADDR_GOAL_CURRENT = 102
ADDR_GOAL_POSITION = 116
ADDR_PRESENT_CURRENT = 126
ADDR_PRESENT_VELOCITY = 128
ADDR_PRESENT_POSITION = 132
ADDR_INDIRECT_ADDRESS = 168
ADDR_INDIRECT_DATA = 224
#: The bytes mapped to Indirect Data 1 … 11, in order: error, current, velocity, position.
INDIRECT_MAP = (ADDR_HARDWARE_ERROR, *range(ADDR_PRESENT_CURRENT, ADDR_PRESENT_POSITION + 4))
READ_LENGTH = len(INDIRECT_MAP)  # 11 bytes
#: Offsets of the fields inside the sync-read block.
OFF_ERROR, OFF_CURRENT, OFF_VELOCITY, OFF_POSITION = 0, 1, 3, 7

#: Hardware Error Status bits (X series).
HARDWARE_ERRORS = {0x01: "input voltage", 0x04: "overheating", 0x08: "motor encoder",
                   0x10: "electrical shock", 0x20: "overload"}
#: Model numbers of servos with the X-series control table (MX-series in Protocol 2.0 too).
X_MODELS = {1000: "XH430-W350", 1010: "XH430-W210", 1020: "XM430-W350", 1030: "XM430-W210",
            1040: "XH430-V350", 1050: "XH430-V210", 1060: "XL430-W250", 1070: "XC430-W150",
            1080: "XC430-W240", 1090: "2XL430-W250", 1100: "XH540-W270", 1110: "XH540-W150",
            1120: "XM540-W270", 1130: "XM540-W150", 1160: "2XC430-W250", 1190: "XL330-M077",
            1200: "XL330-M288", 1210: "XC330-T181", 1220: "XC330-T288", 1230: "XC330-M181",
            1240: "XC330-M288", 30: "MX-28(2.0)", 311: "MX-64(2.0)", 321: "MX-106(2.0)"}
#: Models whose control table differs (not supported).
OTHER_TABLES = {350: "XL-320"}
#: Where Linux's usb-serial drivers (FTDI) expose the latency timer.
SYSFS_USB_SERIAL = "/sys/bus/usb-serial/devices"
#: The SDK's status-packet wait beyond the transmission time [ms] (2 × 16 ms latency + 2).
DEFAULT_TIMEOUT_MS = 34.0
#: Round-trip samples kept for the percentiles.
RTT_WINDOW = 4096


def _require_sdk() -> None:
    if sdk is None:
        raise DeviceError(f"the Dynamixel device needs dynamixel_sdk ({_IMPORT_ERROR}); "
                          "install it with: pip install \"poise[dynamixel]\"")


def hardware_error_text(bits: int) -> str:
    """Names of the set Hardware Error Status bits, e.g. ``"overload, overheating"``."""
    names = [name for bit, name in HARDWARE_ERRORS.items() if bits & bit]
    unknown = bits & ~sum(HARDWARE_ERRORS)
    if unknown:
        names.append(f"unknown bits 0x{unknown:02x}")
    return ", ".join(names)


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


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


if sdk is not None:

    class _Port(sdk.PortHandler):
        """The SDK's port with a configurable status-packet timeout and an exclusive open
        (one owner per bus, as every poise transport)."""

        def __init__(self, port_name: str, timeout_ms: float) -> None:
            super().__init__(port_name)
            self.timeout_ms = timeout_ms

        def setPacketTimeout(self, packet_length: int) -> None:  # the SDK's method name
            self.packet_start_time = self.getCurrentTime()
            self.packet_timeout = self.tx_time_per_byte * packet_length + self.timeout_ms

        def setupPort(self, cflag_baud: int) -> bool:  # the SDK's method name
            if self.is_open:
                self.closePort()
            self.ser = serial.Serial(port=self.port_name, baudrate=self.baudrate,
                                     bytesize=serial.EIGHTBITS, timeout=0, exclusive=True)
            self.is_open = True
            self.ser.reset_input_buffer()
            self.tx_time_per_byte = (1000.0 / self.baudrate) * 10.0
            return True


class DynamixelDevice:
    """A bus of Dynamixel X-series servos, one per actuator (the ``Device`` protocol).

    Connecting opens the port (exclusively), pings every ID, reads the model numbers, switches
    every torque off (a device starts disarmed), maps the indirect addresses, checks the
    adapter's latency timer and measures the sync-read round trip.

    Args:
        port: serial port (``/dev/ttyUSB0``, ``/dev/serial/by-id/…``, a pty).
        servos: one :class:`ServoConfig` per actuator, in actuator order; ``None``: the
            defaults for ``m`` actuators (IDs 1 … m).
        m: number of actuators when ``servos`` is ``None``.
        baud: bus baud rate [bit/s] (default 1 Mbit/s).
        timeout_ms: how long to wait for a status packet beyond its transmission time [ms]
            (the SDK's 34 ms by default; a servo answers in < 1 ms, so this only bounds how
            long a missing servo takes to detect).
        retries: sync reads repeated after a failed one before it is a fault.
        sysfs_root: where to look for the latency timer (tests point it elsewhere).

    Raises:
        DeviceError: the SDK is missing, the port cannot be opened, a servo does not answer,
            has another control table, or refuses a configuration write.
    """

    def __init__(self, port: str, servos: Sequence[ServoConfig] | None = None, *,
                 m: int | None = None, baud: int = 1_000_000,
                 timeout_ms: float = DEFAULT_TIMEOUT_MS, retries: int = 1,
                 sysfs_root: str = SYSFS_USB_SERIAL) -> None:
        _require_sdk()
        try:
            self.servos = with_defaults(servos, m)
        except ValueError as exc:
            raise DeviceError(str(exc)) from None
        self.port_name = port
        self.baud = int(baud)
        self.retries = max(0, int(retries))
        self.ids = tuple(s.id for s in self.servos)
        self._lock = threading.RLock()
        self._armed = False
        self._estop = False
        self._limit = False
        self._seq = 0
        self._rtt: deque[float] = deque(maxlen=RTT_WINDOW)
        self._rtt_count = 0
        self._rtt_max = 0.0
        self.models: dict[int, int] = {}
        #: q̇a of the last read() [m/s] (Present Velocity; the Sample has no velocity field).
        self.qa_velocity: tuple[float, ...] = ()
        self.warnings: list[str] = []
        self.latency: LatencyTimer | None = None
        self._port = _Port(port, float(timeout_ms))
        self._ph = sdk.PacketHandler(2.0)
        try:
            self._open()
            self._connect(sysfs_root)
        except BaseException:
            self._close_port()
            raise

    # ------------------------------------------------------------------ connect

    def _open(self) -> None:
        if self._port.getCFlagBaud(self.baud) <= 0:
            raise DeviceError(f"{self.port_name}: baud rate {self.baud} is not one the "
                              "Dynamixel SDK supports (57600, 115200, 1000000, 2000000, "
                              "3000000, 4000000, …)")
        try:
            self._port.setBaudRate(self.baud)
        except (OSError, serial.SerialException) as exc:
            text = str(exc)
            if "lock" in text.lower():
                text = ("already in use by another process (opened exclusively); stop the "
                        "other poise run (or whatever holds the port) first")
            raise DeviceError(f"{self.port_name}: cannot open the Dynamixel bus: {text}"
                              ) from None

    def _connect(self, sysfs_root: str) -> None:
        for servo in self.servos:
            _, result, error = self._call(self._ph.ping, servo.id)
            if result != sdk.COMM_SUCCESS:
                raise DeviceError(
                    f"servo {servo.id} does not answer on {self.port_name} at {self.baud} "
                    f"baud (ping: {self._ph.getTxRxResult(result)}); check the ID, the "
                    "servo's baud rate (register 8), power and cabling")
            self._check_error(servo.id, "ping", error)
            number = self._read(servo.id, ADDR_MODEL_NUMBER, 2, "read model number")
            if number in OTHER_TABLES:
                raise DeviceError(f"servo {servo.id} is a {OTHER_TABLES[number]} (model "
                                  f"{number}): its control table differs from the X series; "
                                  "not supported")
            if number not in X_MODELS:
                self.warnings.append(f"servo {servo.id}: model {number} is not a known "
                                     "X-series servo; assuming the X-series control table")
            self.models[servo.id] = number
        self._torque_all(0, "connect")  # a device starts disarmed
        indirect = b"".join(a.to_bytes(2, "little") for a in INDIRECT_MAP)
        for servo in self.servos:
            self._write(servo.id, ADDR_INDIRECT_ADDRESS, indirect, "map indirect addresses")
            if servo.mode != CURRENT_BASED_POSITION and servo.current_limit is not None:
                limit = servo.current_limit_units()
                if self._read(servo.id, ADDR_CURRENT_LIMIT, 2, "read current limit") != limit:
                    self._write(servo.id, ADDR_CURRENT_LIMIT, limit.to_bytes(2, "little"),
                                "write current limit (38)")
        self.latency = check_latency_timer(self.port_name, sysfs_root)
        if self.latency is not None and self.latency.warning:
            self.warnings.append(self.latency.warning)
        self._sync_read = sdk.GroupSyncRead(self._port, self._ph, ADDR_INDIRECT_DATA,
                                            READ_LENGTH)
        self._sync_write = sdk.GroupSyncWrite(self._port, self._ph, ADDR_GOAL_POSITION, 4)
        for servo in self.servos:
            self._sync_read.addParam(servo.id)
            self._sync_write.addParam(servo.id, [0, 0, 0, 0])
        for _ in range(10):  # measure the bus round trip (and check the mapping works)
            self._read_block()

    # ------------------------------------------------------------------ bus helpers

    def _call(self, fn, *args):  # type: ignore[no-untyped-def]
        """One SDK transaction under the lock; port errors become DeviceError."""
        with self._lock:
            try:
                return fn(self._port, *args)
            except (OSError, serial.SerialException) as exc:
                self._port.is_using = False  # the SDK leaves its busy flag set on exceptions
                raise DeviceError(f"{self.port_name}: Dynamixel bus I/O failed: {exc}"
                                  ) from None

    def _check_error(self, servo_id: int, what: str, error: int) -> None:
        if error & 0x7F:
            raise DeviceError(f"servo {servo_id}: {what} refused: "
                              f"{self._ph.getRxPacketError(error & 0x7F)} (error byte "
                              f"0x{error:02x})")
        if error & 0x80:
            bits = self._read(servo_id, ADDR_HARDWARE_ERROR, 1, "read hardware error", False)
            raise DeviceError(f"servo {servo_id}: hardware error status 0x{bits:02x} "
                              f"({hardware_error_text(bits)}) during {what}; the servo "
                              "switched its torque off (reboot or power-cycle it)")

    def _read(self, servo_id: int, address: int, length: int, what: str,
              check: bool = True) -> int:
        data, result, error = self._call(self._ph.readTxRx, servo_id, address, length)
        if result != sdk.COMM_SUCCESS:
            raise DeviceError(f"servo {servo_id}: {what} failed on {self.port_name}: "
                              f"{self._ph.getTxRxResult(result)}")
        if check:
            self._check_error(servo_id, what, error)
        return int.from_bytes(bytes(data[:length]), "little")

    def _write(self, servo_id: int, address: int, data: bytes, what: str) -> None:
        result, error = self._call(self._ph.writeTxRx, servo_id, address, len(data),
                                   list(data))
        if result != sdk.COMM_SUCCESS:
            raise DeviceError(f"servo {servo_id}: {what} failed on {self.port_name}: "
                              f"{self._ph.getTxRxResult(result)}")
        self._check_error(servo_id, what, error)

    def _torque_all(self, value: int, what: str) -> None:
        """Torque Enable := value on every servo, each confirmed; a failure on one servo does
        not stop the others (the first error is raised after all were tried)."""
        first: DeviceError | None = None
        for servo in self.servos:
            try:
                self._write(servo.id, ADDR_TORQUE_ENABLE, bytes([value]),
                            f"{what}: torque enable = {value}")
            except DeviceError as exc:
                first = first or exc
        if first is not None:
            raise first

    def _read_block(self) -> dict[int, tuple[int, int, int, int]]:
        """One sync read: ``{id: (hardware error, current, velocity, position)}``, its data
        taken under the bus lock with it (another thread's sync read, e.g. the loop's while a
        command arms, clears the group's data when it starts)."""
        with self._lock:
            return self._read_block_locked()

    def _read_block_locked(self) -> dict[int, tuple[int, int, int, int]]:
        attempts = self.retries + 1
        for attempt in range(attempts):
            t0 = time.perf_counter()
            result = self._call(lambda _port: self._sync_read.txRxPacket())
            dt_us = (time.perf_counter() - t0) * 1e6
            if result == sdk.COMM_SUCCESS:
                self._rtt.append(dt_us)
                self._rtt_count += 1
                self._rtt_max = max(self._rtt_max, dt_us)
                break
            if attempt == attempts - 1:
                self._diagnose(result)
        out = {}
        for servo in self.servos:
            sid = servo.id
            if not self._sync_read.isAvailable(sid, ADDR_INDIRECT_DATA, READ_LENGTH):
                raise DeviceError(f"servo {sid}: no data in the sync read on {self.port_name}")
            get = self._sync_read.getData
            out[sid] = (get(sid, ADDR_INDIRECT_DATA + OFF_ERROR, 1),
                        _signed(get(sid, ADDR_INDIRECT_DATA + OFF_CURRENT, 2), 16),
                        _signed(get(sid, ADDR_INDIRECT_DATA + OFF_VELOCITY, 4), 32),
                        _signed(get(sid, ADDR_INDIRECT_DATA + OFF_POSITION, 4), 32))
        return out

    def _diagnose(self, result: int) -> None:
        """A sync read failed: find which servo stopped answering (one ping each)."""
        text = self._ph.getTxRxResult(result)
        for servo in self.servos:
            _, ping, _ = self._call(self._ph.ping, servo.id)
            if ping != sdk.COMM_SUCCESS:
                raise DeviceError(f"servo {servo.id} stopped answering on {self.port_name} "
                                  f"at {self.baud} baud (sync read: {text}; ping: "
                                  f"{self._ph.getTxRxResult(ping)})")
        raise DeviceError(f"sync read of servos {list(self.ids)} on {self.port_name} failed "
                          f"({text}) although every servo answers a ping (a corrupted or "
                          "late status packet)")

    # ------------------------------------------------------------------ Device protocol

    def describe(self) -> DeviceInfo:
        names = sorted({X_MODELS.get(n, f"model {n}") for n in self.models.values()})
        extra: dict[str, object] = {
            "port": self.port_name, "baud": self.baud,
            "models": {str(i): X_MODELS.get(n, f"model {n}") for i, n in self.models.items()},
            "modes": [s.mode for s in self.servos],
            "latency_timer_ms": None if self.latency is None else self.latency.ms,
            "warnings": list(self.warnings),
            "bus_rtt_us": self.bus_rtt_us(),
        }
        if self.latency is not None and self.latency.warning:
            extra["latency_timer_fix"] = f"echo 1 | sudo tee {self.latency.path}"
        return DeviceInfo(name=f"dynamixel {'/'.join(names)} ×{len(self.servos)}", n_q=0,
                          n_a=len(self.servos),
                          qa_min=tuple(float(s.qa_min) for s in self.servos),  # type: ignore[arg-type]
                          qa_max=tuple(float(s.qa_max) for s in self.servos),  # type: ignore[arg-type]
                          rate_hz=0.0, polled=True, ids=self.ids, extra=extra)

    def read(self, timeout: float | None = None) -> Sample:
        """One sync read now (``timeout`` is not used: the bus timeout is ``timeout_ms``).

        Raises:
            DeviceError: a servo reports a hardware error or stopped answering.
        """
        block = self._read_block()
        qa, qad, efforts = [], [], []
        saturated = False
        for servo in self.servos:
            error, current, velocity, position = block[servo.id]
            if error:
                raise DeviceError(f"servo {servo.id}: hardware error status 0x{error:02x} "
                                  f"({hardware_error_text(error)}); the servo switched its "
                                  "torque off (reboot or power-cycle it)")
            qa.append(servo.qa(position))
            qad.append(servo.qa_velocity(velocity))
            efforts.append(servo.effort(current))
            limit = servo.current_limit_units()
            if limit is not None and abs(current) >= limit:
                saturated = True
        status = Status(0)
        for flag, on in ((Status.ARMED, self._armed), (Status.ESTOP, self._estop),
                         (Status.LIMIT, self._limit), (Status.SATURATED, saturated)):
            if on:
                status |= flag
        self._seq += 1
        self.qa_velocity = tuple(qad)
        return Sample(host_time=time.perf_counter(), device_time_us=0, q=(), qa=tuple(qa),
                      efforts=tuple(efforts), status=int(status), seq=self._seq)

    def latest(self) -> Sample:
        """A polled bus has no stream: one sync read now (as :meth:`read`)."""
        return self.read()

    def configure(self, rate_hz: float | None = None, watchdog_ms: float | None = None) -> None:
        """Nothing to set: the host paces a polled bus, and X-series servos have no host
        watchdog (they hold their last goal if the host goes away; see docs/devices.md)."""

    @property
    def connected(self) -> bool:
        """Whether the port is open."""
        return bool(getattr(self._port, "is_open", False))

    def stats(self) -> dict[str, object]:
        """The sync-read round trip (``bus_rtt_us``: count, p50, p99, max [µs])."""
        return {"port": self.port_name, "bus_rtt_us": self.bus_rtt_us()}

    def write(self, qa: Sequence[float], tau_ff: Sequence[float] | None = None) -> None:
        """One sync write of the goal positions for ``qa`` [m] (clipped to the limits: status
        LIMIT). Ignored while disarmed or e-stopped, as a wire-protocol device ignores
        setpoints. ``tau_ff`` is not used (a position servo takes no effort feed-forward)."""
        values = [float(x) for x in qa]
        if len(values) != len(self.servos) or not all(math.isfinite(x) for x in values):
            raise DeviceError(f"setpoint {values}: need {len(self.servos)} finite actuator "
                              f"positions (servos {list(self.ids)})")
        if not self._armed or self._estop:
            return
        clipped = [min(max(x, s.qa_min), s.qa_max)  # type: ignore[type-var]
                   for x, s in zip(values, self.servos, strict=True)]
        self._limit = clipped != values
        self._send_goals([s.counts(x) for x, s in zip(clipped, self.servos, strict=True)])

    def _send_goals(self, counts: Sequence[int]) -> None:
        for servo, c in zip(self.servos, counts, strict=True):
            self._sync_write.changeParam(servo.id, list((c & 0xFFFFFFFF).to_bytes(4, "little")))
        result = self._call(lambda _port: self._sync_write.txPacket())
        if result != sdk.COMM_SUCCESS:
            raise DeviceError(f"sync write of goal positions to servos {list(self.ids)} on "
                              f"{self.port_name} failed: {self._ph.getTxRxResult(result)}")

    def arm(self, clear_estop: bool = False) -> None:
        """Operating mode (written only if it differs, torque off), Goal Current in mode 5,
        goal = present position (no jump), then Torque Enable = 1 on every servo."""
        if self._estop and not clear_estop:
            raise DeviceError("e-stop latched: clear() it (or arm with clear_estop) first")
        if self._estop:
            self.clear()
        block = self._read_block()
        for servo in self.servos:
            error = block[servo.id][0]
            if error:
                raise DeviceError(f"servo {servo.id}: cannot arm: hardware error status "
                                  f"0x{error:02x} ({hardware_error_text(error)})")
        if self._armed:
            return
        self._torque_all(0, "arm")
        for servo in self.servos:
            mode = self._read(servo.id, ADDR_OPERATING_MODE, 1, "read operating mode")
            if mode != servo.mode:
                self._write(servo.id, ADDR_OPERATING_MODE, bytes([servo.mode]),
                            f"write operating mode {servo.mode}")
            if servo.mode == CURRENT_BASED_POSITION:
                limit = servo.current_limit_units() or 0
                self._write(servo.id, ADDR_GOAL_CURRENT, limit.to_bytes(2, "little"),
                            "write goal current (effort limit)")
        self._send_goals([block[s.id][3] for s in self.servos])
        self._limit = False
        try:
            self._torque_all(1, "arm")
        except DeviceError:
            self._torque_off_quietly()
            raise
        self._armed = True

    def disarm(self) -> None:
        """Torque Enable = 0 on every servo (the arm goes limp: a servo has no brake)."""
        self._armed = False
        self._torque_all(0, "disarm")

    def estop(self) -> None:
        """Torque off on every servo at once (one broadcast sync write, then each confirmed)
        and latch until :meth:`clear`."""
        self._estop = True
        self._armed = False
        group = sdk.GroupSyncWrite(self._port, self._ph, ADDR_TORQUE_ENABLE, 1)
        for servo in self.servos:
            group.addParam(servo.id, [0])
        try:
            self._call(lambda _port: group.txPacket())
        finally:
            self._torque_all(0, "e-stop")

    def clear(self) -> None:
        """Clear the e-stop latch (then :meth:`arm` again)."""
        self._estop = False

    def close(self) -> None:
        """Leave the servos as they are (torque on only if armed: disarm first) and close."""
        self._close_port()

    def _torque_off_quietly(self) -> None:
        with contextlib.suppress(DeviceError):
            self._torque_all(0, "recover")

    def _close_port(self) -> None:
        ser = getattr(self._port, "ser", None)
        if ser is not None and self._port.is_open:
            self._port.closePort()

    def __enter__(self) -> DynamixelDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ statistics

    def bus_rtt_us(self) -> dict[str, float]:
        """Sync-read round trip [µs]: ``count`` and ``max`` over the device's life, ``p50``
        and ``p99`` over the last :data:`RTT_WINDOW` reads (instruction written → last status
        packet decoded, host clock)."""
        if not self._rtt:
            return {"count": 0, "p50": math.nan, "p99": math.nan, "max": math.nan}
        ordered = sorted(self._rtt)

        def pct(p: float) -> float:
            return ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)]

        return {"count": self._rtt_count, "p50": pct(50), "p99": pct(99), "max": self._rtt_max}

    @property
    def armed(self) -> bool:
        return self._armed

    @property
    def estopped(self) -> bool:
        return self._estop


__all__ = ["DEFAULT_TIMEOUT_MS", "HARDWARE_ERRORS", "INDIRECT_MAP", "X_MODELS",
           "DynamixelDevice", "LatencyTimer", "check_latency_timer", "hardware_error_text"]
