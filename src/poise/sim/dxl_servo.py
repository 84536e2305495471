"""An X-series Dynamixel servo's control table and its access rules (no physics, no I/O).

:class:`XServo` holds the bytes of the control table and answers the Protocol 2.0 read and
write instructions the way the servo's firmware does: read-only items refuse writes, EEPROM
items (addresses < 64) refuse writes while the torque is on, values outside an item's range are
refused, a write must cover whole items, the Indirect Data items (224 …) read and write the
addresses their Indirect Address items (168 …) point at, and a non-zero Hardware Error Status
sets the alert bit of every status packet and keeps the torque off. Each refusal returns the
servo's error code (:class:`~poise.sim.dxl_protocol.ErrorCode`).

Position Control Mode (3) takes goals within Min/Max Position Limit (52/48) only: a Goal
Position beyond them is refused with a Data Limit error (Protocol 2.0 error 6, "the data to
be written is outside the Limit value") and the goal stays; the multi-turn modes (4, 5) ignore
the limits.

Bus Watchdog (98, unit 20 ms; e-Manual): while the torque is on and its value is 1 … 127, a
servo that receives no instruction packet for value × 20 ms stops: the torque stays on and it
holds where it is (Goal Position := Present Position), the item reads −1 (0xFF), and the goal
values (Goal Current 102, Goal Position 116) are refused with a Data Range error until 0 is
written to it (which clears the error; another value is refused while it is set). The owner
calls :meth:`XServo.feed` for every instruction packet addressed to the servo and
:meth:`XServo.check_watchdog` as its clock runs.

The items emulated (address, size in bytes, access, default) are those of the XM430-W350
e-Manual page that poise uses (:data:`ITEMS`); other addresses answer an access error. What the
motor does is up to the owner (the virtual bus steps a plant and writes the present values
through :meth:`XServo.set_present`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from poise.sim.dxl_protocol import ALERT, ErrorCode

#: Size of the emulated control table [bytes] (the X series ends before 661).
TABLE_SIZE = 661
#: Default model number: XM430-W350.
XM430_W350 = 1020
#: Operating modes: 0 current, 1 velocity, 3 position, 4 extended position (multi-turn),
#: 5 current-based position, 16 PWM.
OPERATING_MODES = (0, 1, 3, 4, 5, 16)
#: Indirect Address 1 and Indirect Data 1, and how many pairs there are.
INDIRECT_ADDRESS, INDIRECT_DATA, INDIRECT_COUNT = 168, 224, 28
#: Last EEPROM address + 1: these items are locked while the torque is on.
EEPROM_END = 64
#: Position Control Mode: the goal is bounded by Min/Max Position Limit.
POSITION_MODE = 3
#: Bus Watchdog: unit [s], and what it reads once tripped.
WATCHDOG_UNIT_S, WATCHDOG_TRIPPED = 0.020, -1
#: Goal values that a tripped Bus Watchdog locks (the e-Manual also names Goal PWM and Goal
#: Velocity, not emulated).
GOAL_ITEMS = ("Goal Current", "Goal Position")


@dataclass(frozen=True, slots=True)
class Item:
    """One control-table item.

    Attributes:
        name: e-Manual name.
        address, size: where and how many bytes (little-endian).
        writable: False for read-only items.
        default: value after power-on.
        signed: the value is two's complement.
        allowed: a predicate on the value; a write of another value answers a range error.
    """

    name: str
    address: int
    size: int
    writable: bool
    default: int = 0
    signed: bool = False
    allowed: Callable[[int], bool] | None = None


def _range(lo: int, hi: int) -> Callable[[int], bool]:
    return lambda v: lo <= v <= hi


#: The items emulated (XM430-W350 control table; e-Manual).
ITEMS: tuple[Item, ...] = (
    Item("Model Number", 0, 2, False, XM430_W350),
    Item("Model Information", 2, 4, False, 0),
    Item("Firmware Version", 6, 1, False, 48),
    Item("ID", 7, 1, True, 1, allowed=_range(0, 252)),
    Item("Baud Rate", 8, 1, True, 3, allowed=_range(0, 7)),
    Item("Return Delay Time", 9, 1, True, 250),
    Item("Drive Mode", 10, 1, True, 0),
    Item("Operating Mode", 11, 1, True, 3, allowed=lambda v: v in OPERATING_MODES),
    Item("Homing Offset", 20, 4, True, 0, signed=True),
    Item("Current Limit", 38, 2, True, 1193, allowed=_range(0, 1193)),
    Item("Max Position Limit", 48, 4, True, 4095, allowed=_range(0, 4095)),
    Item("Min Position Limit", 52, 4, True, 0, allowed=_range(0, 4095)),
    Item("Shutdown", 63, 1, True, 52),
    Item("Torque Enable", 64, 1, True, 0, allowed=_range(0, 1)),
    Item("LED", 65, 1, True, 0, allowed=_range(0, 1)),
    Item("Status Return Level", 68, 1, True, 2, allowed=_range(0, 2)),
    Item("Hardware Error Status", 70, 1, False, 0),
    Item("Bus Watchdog", 98, 1, True, 0, signed=True, allowed=_range(0, 127)),
    Item("Goal Current", 102, 2, True, 0, signed=True),
    Item("Goal Position", 116, 4, True, 0, signed=True,
         allowed=_range(-1_048_575, 1_048_575)),
    Item("Moving", 122, 1, False, 0),
    Item("Present Current", 126, 2, False, 0, signed=True),
    Item("Present Velocity", 128, 4, False, 0, signed=True),
    Item("Present Position", 132, 4, False, 0, signed=True),
    Item("Present Input Voltage", 144, 2, False, 120),
    Item("Present Temperature", 146, 1, False, 30),
    *(Item(f"Indirect Address {k + 1}", INDIRECT_ADDRESS + 2 * k, 2, True,
           INDIRECT_DATA + k, allowed=_range(64, TABLE_SIZE - 1))
      for k in range(INDIRECT_COUNT)),
)
BY_NAME = {item.name: item for item in ITEMS}
_AT: dict[int, Item] = {}
for _item in ITEMS:
    for _a in range(_item.address, _item.address + _item.size):
        _AT[_a] = _item


def _to_bytes(item: Item, value: int) -> bytes:
    return int(value).to_bytes(item.size, "little", signed=item.signed)


class XServo:
    """One X-series servo: control table bytes and the firmware's access rules.

    Args:
        servo_id: the ID (address 7).
        model_number: address 0 (default :data:`XM430_W350`).
        operating_mode: the initial Operating Mode (address 11; factory default 3).

    Attributes:
        responsive: False makes the servo silent (a cut cable, a brown-out): the bus does not
            answer for it.
    """

    def __init__(self, servo_id: int, *, model_number: int = XM430_W350,
                 operating_mode: int = 3) -> None:
        self.table = bytearray(TABLE_SIZE)
        for item in ITEMS:
            self.table[item.address:item.address + item.size] = _to_bytes(item, item.default)
        self.set("Model Number", model_number)
        self.set("ID", servo_id)
        self.set("Operating Mode", operating_mode)
        self.responsive = True
        self._fed: float | None = None  # when the last instruction packet came [s]

    # ------------------------------------------------------------------ values by name

    @property
    def id(self) -> int:
        return self.get("ID")

    def get(self, name: str) -> int:
        """The value of item ``name`` (direct, never through the indirect mapping)."""
        item = BY_NAME[name]
        return int.from_bytes(self.table[item.address:item.address + item.size], "little",
                              signed=item.signed)

    def set(self, name: str, value: int) -> None:
        """Set item ``name`` without access checks (what the firmware itself does)."""
        item = BY_NAME[name]
        self.table[item.address:item.address + item.size] = _to_bytes(item, value)

    @property
    def torque_on(self) -> bool:
        return self.get("Torque Enable") == 1

    @property
    def hardware_error(self) -> int:
        return self.get("Hardware Error Status")

    def set_hardware_error(self, bits: int) -> None:
        """Raise hardware error ``bits`` (e.g. 0x20 overload, 0x04 overheating): the firmware
        switches the torque off and sets the alert bit in every status packet."""
        self.set("Hardware Error Status", bits & 0xFF)
        if bits:
            self.set("Torque Enable", 0)

    def set_present(self, position: int, velocity: int, current: int, moving: bool) -> None:
        """Update the present values [counts, 0.229 rev/min, current units]."""
        self.set("Present Position", max(-(2**31), min(2**31 - 1, position)))
        self.set("Present Velocity", max(-(2**31), min(2**31 - 1, velocity)))
        self.set("Present Current", max(-(2**15), min(2**15 - 1, current)))
        self.set("Moving", int(moving))

    # ------------------------------------------------------------------ bus watchdog

    def feed(self, now: float) -> None:
        """An instruction packet for this servo arrived at ``now`` [s]."""
        self._fed = now

    def excuse(self, seconds: float) -> None:
        """The emulation itself did not run for ``seconds`` [s] (its process was not
        scheduled): that time is not the host's silence."""
        if self._fed is not None and seconds > 0:
            self._fed += seconds

    @property
    def watchdog_tripped(self) -> bool:
        return self.get("Bus Watchdog") == WATCHDOG_TRIPPED

    def check_watchdog(self, now: float) -> bool:
        """At ``now`` [s]: trip the Bus Watchdog if it is armed (value 1 … 127, torque on)
        and no instruction packet came for value × 20 ms: hold where it is and read −1.
        Returns whether it tripped now."""
        value = self.get("Bus Watchdog")
        if value <= 0 or not self.torque_on or self._fed is None:
            return False
        if now - self._fed <= value * WATCHDOG_UNIT_S:
            return False
        self.set("Goal Position", self.get("Present Position"))
        self.set("Bus Watchdog", WATCHDOG_TRIPPED)
        return True

    def reboot(self) -> None:
        """The Reboot instruction: clears the hardware error and the torque; RAM to defaults
        (goal values, indirect addresses), EEPROM kept."""
        for item in ITEMS:
            if item.address >= EEPROM_END and item.writable:
                self.table[item.address:item.address + item.size] = _to_bytes(item,
                                                                                item.default)
        self.set("Hardware Error Status", 0)

    # ------------------------------------------------------------------ instructions

    def _refusal(self, item: Item, value: int, staged: bytearray) -> int:
        """The error code refusing ``value`` for ``item`` (0: accepted); ``staged``: the
        table as the write would leave it."""
        if item.allowed is not None and not item.allowed(value):
            return ErrorCode.DATA_RANGE
        if item.name == "Torque Enable" and value == 1 and self.hardware_error:
            return ErrorCode.RESULT_FAIL
        if self.watchdog_tripped and (item.name in GOAL_ITEMS
                                      or (item.name == "Bus Watchdog" and value != 0)):
            return ErrorCode.DATA_RANGE
        if item.name == "Goal Position" and self.get("Operating Mode") == POSITION_MODE:
            lo, hi = (int.from_bytes(staged[a:a + 4], "little", signed=True)
                      for a in (BY_NAME["Min Position Limit"].address,
                                BY_NAME["Max Position Limit"].address))
            if not lo <= value <= hi:
                return ErrorCode.DATA_LIMIT
        return 0

    @property
    def alert(self) -> int:
        """:data:`~poise.sim.dxl_protocol.ALERT` while a hardware error is present, else 0."""
        return ALERT if self.hardware_error else 0

    def _physical(self, address: int) -> int:
        """The address a byte access really touches (Indirect Data → its Indirect Address)."""
        k = address - INDIRECT_DATA
        if 0 <= k < INDIRECT_COUNT:
            a = INDIRECT_ADDRESS + 2 * k
            return self.table[a] | (self.table[a + 1] << 8)
        return address

    def read(self, address: int, length: int) -> tuple[int, bytes]:
        """Read ``length`` bytes at ``address``: ``(error byte, data)``."""
        if length < 1 or address < 0 or address + length > TABLE_SIZE:
            return ErrorCode.ACCESS | self.alert, b""
        data = bytes(self.table[self._physical(a)] for a in range(address, address + length))
        return self.alert, data

    def write(self, address: int, data: bytes) -> int:
        """Write ``data`` at ``address`` (all or nothing); returns the error byte."""
        if not data or address < 0 or address + len(data) > TABLE_SIZE:
            return ErrorCode.ACCESS | self.alert
        physical = [self._physical(a) for a in range(address, address + len(data))]
        staged = bytearray(self.table)
        for a, b in zip(physical, data, strict=True):
            staged[a] = b
        touched: dict[str, Item] = {}
        for a in physical:
            item = _AT.get(a)
            if item is None or not item.writable:
                return ErrorCode.ACCESS | self.alert
            touched[item.name] = item
        for item in touched.values():
            span = range(item.address, item.address + item.size)
            if not all(a in physical for a in span):
                return ErrorCode.DATA_LENGTH | self.alert
            if item.address < EEPROM_END and self.torque_on:
                return ErrorCode.ACCESS | self.alert
            value = int.from_bytes(staged[span.start:span.stop], "little", signed=item.signed)
            error = self._refusal(item, value, staged)
            if error:
                return error | self.alert
        torque_was_on = self.torque_on
        self.table[:] = staged
        if not torque_was_on and self.torque_on:
            # the firmware takes the present position as the goal: no jump on torque-on
            self.set("Goal Position", self.get("Present Position"))
        return self.alert


__all__ = ["BY_NAME", "EEPROM_END", "GOAL_ITEMS", "INDIRECT_ADDRESS", "INDIRECT_COUNT",
           "INDIRECT_DATA", "ITEMS", "OPERATING_MODES", "POSITION_MODE", "TABLE_SIZE",
           "WATCHDOG_TRIPPED", "WATCHDOG_UNIT_S", "XM430_W350", "Item", "XServo"]
