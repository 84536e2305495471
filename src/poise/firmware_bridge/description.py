"""What a handshake learns of a device: :class:`DeviceDescription`, and the checks it must
pass (:func:`check_description`: a consistent schema checksum, the expected one, after a
reconnect the same one as before).
"""

from __future__ import annotations

from dataclasses import dataclass

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.linkerrors import SchemaMismatchError


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


__all__ = ["DeviceDescription", "check_description"]
