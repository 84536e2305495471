"""The errors of a host link: what happened, and what was sent, in the message.

:func:`port_error` maps what pyserial or the OS raise on opening a port to one of them.
"""

from __future__ import annotations

import errno as _errno


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


__all__ = ["DeviceTimeoutError", "LinkError", "NotConnectedError", "PortBusyError",
           "PortNotFoundError", "SchemaMismatchError", "VersionMismatchError", "port_error"]
