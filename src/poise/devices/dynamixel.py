"""Dynamixel Protocol 2.0 servos (X series) as a poise :class:`~poise.devices.base.Device`.

One servo per actuator, each winding a tendon on a spool (or driving a joint directly); the
conversion and the per-servo table are in :mod:`poise.devices.dynamixel_config`. The bus is
reached through ROBOTIS' ``dynamixel_sdk`` (``pip install "poise[dynamixel]"``): its
transactions in :mod:`poise.devices.dynamixel_bus`, on the port of
:mod:`poise.devices.dynamixel_port` (which waits for status packets without spinning).

Per control cycle the device does exactly two bus transactions:

* ``read()``: ONE ``GroupSyncRead`` of 12 bytes at Indirect Data 1 (224 … 235), which the
  servos map (Indirect Address 1 … 12, written at connect) to Hardware Error Status (70, 1
  byte), Bus Watchdog (98, 1), Present Current (126, 2), Present Velocity (128, 4) and Present
  Position (132, 4). Why indirect addressing rather than more sync reads: each bus
  transaction costs a full round trip (USB latency, ~1 ms through an FTDI adapter with its
  latency timer at 1 ms, plus the servos' return delay), so a second read would halve the
  highest loop rate, while the mapping costs one write per servo at connect. (The SDK's
  ``GroupSyncRead`` also drops each status packet's error byte, so its alert bit cannot stand
  in for address 70.)
* ``write()``: ONE ``GroupSyncWrite`` of Goal Position (116, 4 bytes).

The servos' **Bus Watchdog** (98, unit 20 ms) is set when they are armed (default 500 ms): a
servo that receives no instruction packet for that long stops where it is and refuses goal
values until it is cleared; the next read reports ``WATCHDOG`` and no longer ``ARMED``.

Faults: a non-zero hardware error status, a refused transaction, or a bus that gives no valid
answer for ``patience_s`` (1 s) raises :class:`~poise.devices.base.DeviceError` naming the
servo ID and the SDK's error text; the controller latches it. A sync read without a valid
answer (none within ``timeout_ms``, a corrupted or short one) is repeated ``retries`` times,
then is a counted bad read answered with the previous sample, whose age makes a controller
hold (and fault after its ``limits.sensor_fault``). ``estop()`` switches every servo's torque
off and latches in this object until ``clear()``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence

from poise.devices.base import DeviceError, DeviceInfo, Sample, Status
from poise.devices.dynamixel_bus import (
    ADDR_BUS_WATCHDOG,
    ADDR_CURRENT_LIMIT,
    ADDR_GOAL_CURRENT,
    ADDR_INDIRECT_ADDRESS,
    ADDR_MODEL_NUMBER,
    ADDR_OPERATING_MODE,
    ADDR_TORQUE_ENABLE,
    DEFAULT_PATIENCE_S,
    DEFAULT_TIMEOUT_MS,
    HARDWARE_ERRORS,
    INDIRECT_MAP,
    WATCHDOG_TRIPPED,
    WATCHDOG_UNIT_MS,
    ServoBus,
    ServoState,
    hardware_error_text,
    watchdog_units,
)
from poise.devices.dynamixel_config import (
    CURRENT_BASED_POSITION,
    ServoConfig,
    with_defaults,
)
from poise.devices.dynamixel_port import (
    SYSFS_USB_SERIAL,
    LatencyTimer,
    check_latency_timer,
)

try:  # optional extra: pip install "poise[dynamixel]"
    import dynamixel_sdk as sdk
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    sdk = None
    _IMPORT_ERROR: ImportError | None = _exc
else:
    _IMPORT_ERROR = None

#: Model numbers of servos with the X-series control table (MX-series in Protocol 2.0 too).
X_MODELS = {1000: "XH430-W350", 1010: "XH430-W210", 1020: "XM430-W350", 1030: "XM430-W210",
            1040: "XH430-V350", 1050: "XH430-V210", 1060: "XL430-W250", 1070: "XC430-W150",
            1080: "XC430-W240", 1090: "2XL430-W250", 1100: "XH540-W270", 1110: "XH540-W150",
            1120: "XM540-W270", 1130: "XM540-W150", 1160: "2XC430-W250", 1190: "XL330-M077",
            1200: "XL330-M288", 1210: "XC330-T181", 1220: "XC330-T288", 1230: "XC330-M181",
            1240: "XC330-M288", 30: "MX-28(2.0)", 311: "MX-64(2.0)", 321: "MX-106(2.0)"}
#: Models whose control table differs (not supported).
OTHER_TABLES = {350: "XL-320"}
#: Bus Watchdog set at arm [ms] (25 units of 20 ms): as long as a controller's default
#: ``limits.sensor_fault`` lets the servos be silent, so neither end gives up on the other
#: sooner. A loop kept from running for 100-150 ms (measured on a busy 2-core machine) tripped
#: a 100 ms watchdog in 3 of 27 runs; a position servo whose host is gone holds its last goal
#: meanwhile, and the watchdog then stops it and locks its goals.
DEFAULT_WATCHDOG_MS = 500.0


def _require_sdk() -> None:
    if sdk is None:
        raise DeviceError(f"the Dynamixel device needs dynamixel_sdk ({_IMPORT_ERROR}); "
                          "install it with: pip install \"poise[dynamixel]\"")


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
            (the SDK's 34 ms by default; a servo answers in < 1 ms).
        retries: sync reads repeated after a failed one before it is a bad read.
        patience_s: how long the bus may give no valid answer before it is a fault [s]
            (default 1 s): a one-servo transaction (connect, arm, disarm) is repeated for
            that long, bad reads are answered with the previous sample until then.
        watchdog_ms: the servos' Bus Watchdog set at arm [ms] (0: off; up to 2540, rounded
            up to 20 ms).
        sysfs_root: where to look for the latency timer (tests point it elsewhere).

    Raises:
        DeviceError: the SDK is missing, the port cannot be opened, a servo does not answer,
            has another control table, or refuses a configuration write.
    """

    def __init__(self, port: str, servos: Sequence[ServoConfig] | None = None, *,
                 m: int | None = None, baud: int = 1_000_000,
                 timeout_ms: float = DEFAULT_TIMEOUT_MS, retries: int = 1,
                 patience_s: float = DEFAULT_PATIENCE_S,
                 watchdog_ms: float = DEFAULT_WATCHDOG_MS,
                 sysfs_root: str = SYSFS_USB_SERIAL) -> None:
        _require_sdk()
        try:
            self.servos = with_defaults(servos, m)
            self._watchdog = watchdog_units(watchdog_ms)
        except ValueError as exc:
            raise DeviceError(str(exc)) from None
        self.port_name = port
        self.ids = tuple(s.id for s in self.servos)
        self.bus = ServoBus(port, self.ids, baud=baud, timeout_ms=timeout_ms, retries=retries,
                            patience_s=patience_s)
        self._armed = False
        self._estop = False
        self._limit = False
        self._seq = 0
        self._stale = 0  # reads answered with the previous sample
        self._last: tuple[Sample, bool, bool] | None = None  # sample, saturated, tripped
        self.models: dict[int, int] = {}
        #: q̇a of the last read() [m/s] (Present Velocity; the Sample has no velocity field).
        self.qa_velocity: tuple[float, ...] = ()
        self.warnings: list[str] = []
        self.latency: LatencyTimer | None = None
        try:
            self.bus.open()
            self._connect(sysfs_root)
        except BaseException:
            self.bus.close()
            raise

    @property
    def baud(self) -> int:
        return self.bus.baud

    def _connect(self, sysfs_root: str) -> None:
        bus = self.bus
        for servo in self.servos:
            _, result, error = bus.ping(servo.id)
            if result != sdk.COMM_SUCCESS:
                raise DeviceError(
                    f"servo {servo.id} does not answer on {self.port_name} at {self.baud} "
                    f"baud (ping: {bus.ph.getTxRxResult(result)}, repeated for "
                    f"{bus.patience_s:g} s); check the ID, the servo's baud rate "
                    "(register 8), power and cabling")
            bus.check_error(servo.id, "ping", error)
            number = bus.read(servo.id, ADDR_MODEL_NUMBER, 2, "read model number")
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
            bus.write(servo.id, ADDR_INDIRECT_ADDRESS, indirect, "map indirect addresses")
            if servo.mode != CURRENT_BASED_POSITION and servo.current_limit is not None:
                limit = servo.current_limit_units()
                if bus.read(servo.id, ADDR_CURRENT_LIMIT, 2, "read current limit") != limit:
                    bus.write(servo.id, ADDR_CURRENT_LIMIT, limit.to_bytes(2, "little"),
                              "write current limit (38)")
        self.latency = check_latency_timer(self.port_name, sysfs_root)
        if self.latency is not None and self.latency.warning:
            self.warnings.append(self.latency.warning)
        valid, block = 0, None
        while valid < 10:  # measure the bus round trip (and check the mapping works)
            got = bus.sync_read(tolerate=True)  # raises once the bus is silent for patience_s
            if got is not None:
                valid, block = valid + 1, got
        assert block is not None
        self._sample(block)  # the sample a first bad read repeats

    def _torque_all(self, value: int, what: str) -> None:
        """Torque Enable := value on every servo, each confirmed (all are tried)."""
        self.bus.write_each(ADDR_TORQUE_ENABLE, value, f"{what}: torque enable = {value}")

    # ------------------------------------------------------------------ Device protocol

    def describe(self) -> DeviceInfo:
        names = sorted({X_MODELS.get(n, f"model {n}") for n in self.models.values()})
        extra: dict[str, object] = {
            "port": self.port_name, "baud": self.baud,
            "models": {str(i): X_MODELS.get(n, f"model {n}") for i, n in self.models.items()},
            "modes": [s.mode for s in self.servos],
            "bus_watchdog_ms": self._watchdog * WATCHDOG_UNIT_MS,
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
        A bad read (no valid answer after ``retries`` repeats, less than ``patience_s``
        after the bus last answered) returns the previous sample again, its ``host_time``
        ageing.

        Raises:
            DeviceError: a servo reports a hardware error, or the bus gave no valid answer
                for ``patience_s`` (naming the servo that stopped answering).
        """
        block = self.bus.sync_read(tolerate=True)
        if block is None:
            self._stale += 1
            assert self._last is not None  # connect kept its last sample
            sample, saturated, tripped = self._last
            return sample._replace(status=self._status(saturated, tripped))
        sample = self._sample(block)
        for servo in self.servos:
            error = block[servo.id].error
            if error:
                raise DeviceError(f"servo {servo.id}: hardware error status 0x{error:02x} "
                                  f"({hardware_error_text(error)}); the servo switched its "
                                  "torque off (reboot or power-cycle it)")
        return sample

    def _sample(self, block: dict[int, ServoState]) -> Sample:
        """The sample of a sync read's block (kept for the bad reads that follow)."""
        qa, qad, efforts = [], [], []
        saturated = tripped = False
        for servo in self.servos:
            state = block[servo.id]
            qa.append(servo.qa(state.position))
            qad.append(servo.qa_velocity(state.velocity))
            efforts.append(servo.effort(state.current))
            limit = servo.current_limit_units()
            saturated |= limit is not None and abs(state.current) >= limit
            tripped |= state.watchdog == WATCHDOG_TRIPPED
        if tripped:  # the servos stopped and refuse goals until armed again
            self._armed = False
        self._seq += 1
        self.qa_velocity = tuple(qad)
        sample = Sample(host_time=time.perf_counter(), device_time_us=0, q=(), qa=tuple(qa),
                        efforts=tuple(efforts), status=self._status(saturated, tripped),
                        seq=self._seq)
        self._last = (sample, saturated, tripped)
        return sample

    def _status(self, saturated: bool, tripped: bool) -> int:
        status = Status(0)
        for flag, on in ((Status.ARMED, self._armed), (Status.ESTOP, self._estop),
                         (Status.LIMIT, self._limit), (Status.SATURATED, saturated),
                         (Status.WATCHDOG, tripped)):
            if on:
                status |= flag
        return int(status)

    def latest(self) -> Sample:
        """A polled bus has no stream: one sync read now (as :meth:`read`)."""
        return self.read()

    def read_nowait(self) -> Sample | None:
        """A polled bus keeps no backlog: None."""
        return None

    def configure(self, rate_hz: float | None = None, watchdog_ms: float | None = None) -> None:
        """``watchdog_ms``: the servos' Bus Watchdog [ms] (0 off, up to 2540, rounded up to
        20 ms), written now if armed, else at the next arm; ``None`` keeps it. ``rate_hz``
        is not used: the host paces a polled bus.

        Raises:
            DeviceError: ``watchdog_ms`` out of range, or a servo refused it.
        """
        if watchdog_ms is None:
            return
        try:
            self._watchdog = watchdog_units(float(watchdog_ms))
        except ValueError as exc:
            raise DeviceError(str(exc)) from None
        if self._armed:
            self.bus.write_each(ADDR_BUS_WATCHDOG, self._watchdog, "write bus watchdog (98)")

    @property
    def connected(self) -> bool:
        """Whether the port is open."""
        return self.bus.is_open

    def stats(self) -> dict[str, object]:
        """The sync-read round trip and bad reads (``bus_rtt_us``, :meth:`bus_rtt_us`)."""
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
        self.bus.sync_write_goals([s.counts(x)
                                   for x, s in zip(clipped, self.servos, strict=True)])

    def arm(self, clear_estop: bool = False) -> None:
        """Bus Watchdog cleared (a tripped one refuses goals), Operating Mode written only if
        it differs (torque off), Goal Current in mode 5, goal = present position (no jump),
        Torque Enable = 1 on every servo, then the Bus Watchdog set."""
        if self._estop and not clear_estop:
            raise DeviceError("e-stop latched: clear() it (or arm with clear_estop) first")
        if self._estop:
            self.clear()
        block = self.bus.sync_read()
        assert block is not None  # without tolerate a bad read raises
        for servo in self.servos:
            error = block[servo.id].error
            if error:
                raise DeviceError(f"servo {servo.id}: cannot arm: hardware error status "
                                  f"0x{error:02x} ({hardware_error_text(error)})")
        if self._armed:
            return
        bus = self.bus
        self._torque_all(0, "arm")
        bus.write_each(ADDR_BUS_WATCHDOG, 0, "clear bus watchdog (98)")
        for servo in self.servos:
            mode = bus.read(servo.id, ADDR_OPERATING_MODE, 1, "read operating mode")
            if mode != servo.mode:
                bus.write(servo.id, ADDR_OPERATING_MODE, bytes([servo.mode]),
                          f"write operating mode {servo.mode}")
            if servo.mode == CURRENT_BASED_POSITION:
                limit = servo.current_limit_units() or 0
                bus.write(servo.id, ADDR_GOAL_CURRENT, limit.to_bytes(2, "little"),
                          "write goal current (effort limit)")
        bus.sync_write_goals([block[s.id].position for s in self.servos])
        self._limit = False
        try:
            self._torque_all(1, "arm")
            if self._watchdog:
                bus.write_each(ADDR_BUS_WATCHDOG, self._watchdog, "write bus watchdog (98)")
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
        try:
            self.bus.broadcast_byte(ADDR_TORQUE_ENABLE, 0)
        finally:
            self._torque_all(0, "e-stop")

    def clear(self) -> None:
        """Clear the e-stop latch (then :meth:`arm` again)."""
        self._estop = False

    def close(self) -> None:
        """Leave the servos as they are and close: torque on only if armed (disarm first),
        and then their Bus Watchdog stops them once no instruction packet comes."""
        self.bus.close()

    def _torque_off_quietly(self) -> None:
        with contextlib.suppress(DeviceError):
            self._torque_all(0, "recover")

    def __enter__(self) -> DynamixelDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def bus_rtt_us(self) -> dict[str, float]:
        """Sync-read round trip [µs] (``count``, ``p50``, ``p99``, ``max``), ``failed`` sync
        reads (each repeat counted) and ``stale`` reads (answered with the previous sample):
        :meth:`ServoBus.rtt_us <poise.devices.dynamixel_bus.ServoBus.rtt_us>`."""
        return {**self.bus.rtt_us(), "stale": self._stale}

    @property
    def armed(self) -> bool:
        return self._armed

    @property
    def estopped(self) -> bool:
        return self._estop


__all__ = ["DEFAULT_PATIENCE_S", "DEFAULT_TIMEOUT_MS", "DEFAULT_WATCHDOG_MS", "HARDWARE_ERRORS",
           "INDIRECT_MAP", "X_MODELS", "DynamixelDevice", "LatencyTimer", "check_latency_timer",
           "hardware_error_text"]
