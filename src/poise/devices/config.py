"""``[device]`` of a run configuration: where the robot is, as the devices read it.

The devices own their configuration type: :class:`DeviceConfig` is what
:func:`poise.devices.factory.open_device` opens, declared key by key with
:func:`~poise.models.settings.setting` (the servo table's keys:
:data:`~poise.devices.dynamixel_config.SERVO_KEYS`). The run configuration
(:mod:`poise.controller.config`) reads the ``[device]`` table into it and re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from poise.api.rules import PROTOCOLS
from poise.devices.dynamixel_config import SERVO_KEYS, ServoConfig
from poise.firmware_bridge.device import WATCHDOG_RANGE_MS
from poise.models.settings import setting


@dataclass(frozen=True)
class DeviceConfig:
    """``[device]``: where the robot is (the wire protocol, or a Dynamixel servo bus)."""

    port: str = setting(
        "sim", "string", "serial device path (poise protocol), 'sim' to spawn `poise device "
        "sim` (a virtual device on a pseudo-terminal, a separate process), or "
        "'dynamixel:/dev/ttyUSB0' (a Dynamixel bus; docs/devices.md)")
    baud: int = setting(1_000_000, "integer", "baud rate [bit/s] (ignored by USB-CDC devices "
                        "and ptys)", ge=1)
    timeout: float = setting(2.0, "number", "handshake / acknowledgement timeout [s]", gt=0)
    sim_model: str | None = setting(None, "string", "model the virtual device simulates "
                                    "(default: model.name)")
    sim_params: str | None = setting(None, "string", "the simulated robot's true parameters, a "
                                     "model file (`poise device sim --params`; relative to "
                                     "this file)")
    sim_args: tuple[str, ...] = setting((), "strings", "extra `poise device sim` flags, e.g. "
                                        "[\"--corrupt\", \"0.02\"] (fault injection)")
    watchdog_ms: int | None = setting(
        None, "integer", "device watchdog set at connect [ms] (default: the device's own)",
        ge=WATCHDOG_RANGE_MS[0], le=WATCHDOG_RANGE_MS[1])
    protocol: str = setting("poise", "string", "'poise' (the wire protocol: our firmware, the "
                            "virtual device) or 'dynamixel' (a Dynamixel Protocol 2.0 servo "
                            "bus); a port written 'dynamixel:…' selects it too",
                            choices=PROTOCOLS)
    sensors: str | None = setting(None, "string", "port of a poise-protocol joint-sensor board "
                                  "measuring q beside a Dynamixel bus (protocol 'dynamixel' "
                                  "only; default: q is not measured by a servo bus)")
    servos: tuple[ServoConfig, ...] = setting(
        (), "tables", "the Dynamixel actuator table, [[device.servos]] (protocol 'dynamixel' "
        "only; default: IDs 1 … m with the defaults of docs/devices.md)", table=SERVO_KEYS)
    timeout_ms: float | None = setting(None, "number", "Dynamixel status-packet timeout [ms] "
                                       "(default: the SDK's)", gt=0)
    retries: int = setting(1, "integer", "Dynamixel sync reads repeated after a failed one "
                           "before it is a bad read (answered with the previous sample)",
                           ge=0)


__all__ = ["DeviceConfig"]
