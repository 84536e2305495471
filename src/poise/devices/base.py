"""The device interface: what the controller and calibration need of any robot hardware.

Implementations: the poise wire protocol over serial (our C firmware, the virtual device),
Dynamixel Protocol 2.0 servo buses, a composite of a joint-sensor board and a servo bus, and an
in-process plant stepped in simulated time. The controller never builds its own transport.

Life cycle::

    dev = open_device(...)            # connected, handshake done, disarmed
    info = dev.describe()             # channels, limits, native rate, ids
    dev.arm()                         # actuators follow setpoints
    while running:
        s = dev.read(timeout)         # the next sample (streamed devices: the next frame;
                                      # polled devices: one bus read now)
        dev.write(qa_ref, tau_ff)     # one setpoint per cycle
    dev.disarm(); dev.close()

Pacing: a streaming device (``polled`` False) sends samples at its rate and the loop answers
each one (``read``) or takes the newest at its own deadline (``latest``); a polled device (a
servo bus) is read at the host's deadline (``latest`` polls).

``estop()`` latches a device-side safe state until ``clear()`` (then ``arm()`` again).
Every method may raise :class:`DeviceError` (a subclass names the cause); ``read`` raises
:class:`DeviceTimeout` when no sample came within ``timeout``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable

from poise.firmware_bridge import messages as _wire
from poise.firmware_bridge.transport import RawRead


class DeviceError(RuntimeError):
    """The device cannot do what was asked; the message says why and names the channel or
    servo where it can."""


class DeviceTimeout(DeviceError):
    """No sample within the timeout."""


#: Status bits of a :class:`Sample`: the poise wire protocol's, shared by every device
#: (ARMED, ESTOP, WATCHDOG, FAULT, LIMIT, SATURATED, ...).
Status = _wire.Status


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What a device is.

    Attributes:
        name: firmware id or bus description (``poise-sim``, ``dynamixel XM430-W350 ×2``).
        n_q: measured configuration coordinates (0: q is not measured, feed-forward only).
        n_a: actuators.
        qa_min, qa_max: actuator limits (m,) [actuator units, m or rad].
        rate_hz: native sample rate [Hz] of a streaming device; 0 for a polled one.
        polled: True when the host paces the loop and ``read`` polls (a servo bus).
        raw_reads: the device hands out its reads undecoded (:class:`RawReads`; the
            control loop's wire path answers them itself).
        ids: actuator ids on a bus (servo IDs), empty otherwise.
        extra: anything else worth showing (firmware, baud, latency timer), JSON-ready.
    """

    name: str
    n_q: int
    n_a: int
    qa_min: tuple[float, ...]
    qa_max: tuple[float, ...]
    rate_hz: float = 0.0
    polled: bool = False
    raw_reads: bool = False
    ids: tuple[int, ...] = ()
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def measures_q(self) -> bool:
        """Whether the configuration q is measured (else only feed-forward can run)."""
        return self.n_q > 0


class Sample(NamedTuple):
    """One reading of a device (immutable; a NamedTuple, built every cycle: ~0.3 µs against
    ~0.8 µs for a frozen dataclass).

    Attributes:
        host_time: ``time.perf_counter()`` when the sample was complete on the host [s].
        device_time_us: the device's own timestamp [µs] (0 if it has none).
        q: measured configuration (n_q,) [rad / model units]; empty if not measured.
        qa: measured actuator positions (n_a,) [actuator units].
        efforts: measured actuator efforts (n_a,) [N or N·m]; empty if not measured.
        status: :class:`Status` bits.
        seq: sample counter (gaps show lost samples).
    """

    host_time: float
    device_time_us: int
    q: tuple[float, ...]
    qa: tuple[float, ...]
    efforts: tuple[float, ...]
    status: int
    seq: int


@runtime_checkable
class Device(Protocol):
    """The interface every device implements (see the module docstring)."""

    def describe(self) -> DeviceInfo: ...

    @property
    def connected(self) -> bool:
        """False while the device is unreachable (e.g. a link reconnecting after an unplug)."""
        ...

    def configure(self, rate_hz: float | None = None, watchdog_ms: float | None = None) -> None:
        """Sample rate [Hz] of a streaming device and the device watchdog [ms] (``None``:
        leave as is; a device without one ignores it)."""
        ...

    def read(self, timeout: float | None = None) -> Sample: ...

    def latest(self) -> Sample | None:
        """The newest sample without waiting (a polled device polls now); ``None``: none yet."""
        ...

    def read_nowait(self) -> Sample | None:
        """The next sample already received and not yet read, or ``None`` (never waits, never
        raises): a streaming device's backlog, which a device-paced loop skips to the newest
        of. A polled device has none (``None``)."""
        ...

    def write(self, qa: Sequence[float], tau_ff: Sequence[float] | None = None) -> None: ...

    def arm(self, clear_estop: bool = False) -> None: ...

    def disarm(self) -> None: ...

    def estop(self) -> None: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...

    def stats(self) -> dict[str, object]:
        """Link / bus statistics, JSON-ready (round-trip times as ``rtt_us`` / ``bus_rtt_us``)."""
        ...


class RawReads(Protocol):
    """A device whose reads a loop may answer itself (``DeviceInfo.raw_reads``): a poise
    wire-protocol serial link (:class:`~poise.devices.wire.WireDevice`)."""

    def read_raw(self, timeout: float | None = None) -> RawRead | None:
        """The undecoded bytes of the next read, or ``None`` when a sample decoded earlier is
        waiting (:meth:`Device.read_nowait` returns it)."""
        ...

    def feed_raw(self, read: RawRead) -> None:
        """Decode ``read`` as usual (its samples: :meth:`Device.read_nowait`)."""
        ...

    def answered(self, read: RawRead, seq: int, timestamp_us: int, sensors: _wire.Sensors,
                 start: int = 0) -> tuple[Sample, int]:
        """Account for ``read`` whose last frame the caller decoded and answered; its
        sample and how many sensor frames came before it in the read."""
        ...


__all__ = ["Device", "DeviceError", "DeviceInfo", "DeviceTimeout", "RawRead", "RawReads", "Sample",
           "Status"]
