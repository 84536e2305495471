"""What a host link waits for: the handshake and the acknowledged requests in flight.

A :class:`Pending` is a :class:`~concurrent.futures.Future` the link core resolves or fails,
with the message it resends until then (evenly spaced over the timeout, :meth:`Pending.
next_try`) and what it sent, for the timeout's message. The :class:`Handshake` collects the
device's Hello and Channel frames until its description is whole; the :class:`RequestBook`
finds the request an Ack answers by the sequence number it echoes.
"""

from __future__ import annotations

import math
from concurrent.futures import Future

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.description import DeviceDescription, check_description
from poise.firmware_bridge.linkerrors import DeviceTimeoutError, VersionMismatchError

#: Handshake requests sent within the timeout, evenly spaced.
HELLO_TRIES = 3
#: Times an acknowledged request (Arm, Disarm, EStop, ConfigWrite: all idempotent on the device)
#: is sent within the timeout, evenly spaced, each with a new sequence number; the Ack of any
#: of them completes it. A lossy link that drops one Ack does not fail the request.
REQUEST_TRIES = 3


class Pending(Future):
    """A handshake or an acknowledged request in flight: a :class:`~concurrent.futures.Future`
    that the core resolves (a :class:`~poise.firmware_bridge.description.DeviceDescription`, or
    an :class:`~messages.Ack` that may be a nack) or fails (a
    :class:`~poise.firmware_bridge.linkerrors.LinkError`), with what it waits for, its
    ``deadline`` [s, the core's clock], the ``message`` it sends (again, on a lossy link) and
    what was ``sent`` for it (both for the timeout message)."""

    def __init__(self, waiting_for: str, deadline: float, message: m.Message) -> None:
        super().__init__()
        self.waiting_for = waiting_for
        self.deadline = deadline
        self.sent: list[tuple[str, bytes]] = []
        self.message = message
        #: The sequence numbers it went out with (an Ack for any of them completes it).
        self.seqs: list[int] = []

    def record(self, seq: int, frame: bytes) -> None:
        """Its message went out (again) as ``frame`` with sequence number ``seq``."""
        self.seqs.append(seq)
        self.sent.append((type(self.message).__name__, frame))

    def next_try(self, tries: int, timeout: float) -> float:
        """When the next of ``tries`` sends, evenly spaced over the ``timeout`` [s] that ends
        at the deadline, is due (``inf`` once all went out)."""
        n = len(self.sent)
        return self.deadline - timeout * (1 - n / tries) if n < tries else math.inf

    def timeout_error(self, port: str, timeout: float, rx_bytes: int, rx_valid: int
                      ) -> DeviceTimeoutError:
        """The error once the deadline passed: what was sent, and what came back
        (``rx_bytes`` bytes, ``rx_valid`` valid frames since the port opened)."""
        sent = "; ".join(f"{name} ({frame.hex()})" for name, frame in self.sent[-3:])
        got = ("received nothing" if not rx_bytes
               else f"received {rx_bytes} bytes but no valid frame" if not rx_valid
               else f"received {rx_bytes} bytes ({rx_valid} valid frames) but not that")
        return DeviceTimeoutError(
            f"{port}: no {self.waiting_for} within {timeout:g} s; sent "
            f"{len(self.sent)} frame(s): {sent}; {got}")


class Handshake(Pending):
    """The handshake: HelloRequests until the device's Hello and all its Channel frames are
    in; resolved with the :class:`~poise.firmware_bridge.description.DeviceDescription`."""

    def __init__(self, deadline: float) -> None:
        super().__init__("Hello/Channel answer", deadline, m.HelloRequest())
        self.hello: m.Hello | None = None
        self.channels: dict[int, m.Channel] = {}

    def collect(self, msg: m.Hello | m.Channel) -> None:
        """A Hello (the channels start again) or one of its Channel frames."""
        if isinstance(msg, m.Hello):
            self.hello, self.channels = msg, {}
        else:
            self.channels[msg.index] = msg

    def description(self, port: str, expected_schema: int | None,
                    previous: DeviceDescription | None) -> DeviceDescription | None:
        """The description once Hello and all its channels are in (``None``: not yet).

        Raises:
            VersionMismatchError: the device speaks another protocol version.
            SchemaMismatchError: :func:`~poise.firmware_bridge.description.check_description`.
        """
        h = self.hello
        if h is None:
            return None
        if h.protocol_version != m.PROTOCOL_VERSION:
            update = "firmware" if h.protocol_version < m.PROTOCOL_VERSION else "host (poise)"
            raise VersionMismatchError(
                f"{port}: protocol version mismatch: host expects {m.PROTOCOL_VERSION}, "
                f"device '{h.firmware_id}' speaks {h.protocol_version}; update the {update}")
        n = h.n_coordinates + h.n_actuators
        if any(i not in self.channels for i in range(n)):
            return None
        desc = DeviceDescription(h, tuple(self.channels[i] for i in range(n)))
        check_description(desc, port, expected_schema, previous)
        return desc


class RequestBook(dict[int, Pending]):
    """The acknowledged requests in flight, by every sequence number each went out with."""

    def sent(self, pending: Pending, seq: int, frame: bytes) -> bytes:
        """``pending`` went out (again) as ``frame`` numbered ``seq`` (:meth:`Pending.record`
        noted it there): an Ack of ``seq`` completes it. Returns the frame."""
        self[seq] = pending
        return frame

    def acknowledged(self, ack: m.Ack) -> None:
        """Complete the request ``ack`` answers (any of its sequence numbers; else nothing)."""
        req = self.get(ack.ref_seq)
        if req is not None:
            self.forget(req)
            req.set_result(ack)

    def forget(self, pending: Pending) -> None:
        """Drop every sequence number of ``pending``."""
        for seq in pending.seqs:
            self.pop(seq, None)

    def in_flight(self) -> list[Pending]:
        """The requests, each once."""
        return list({id(r): r for r in self.values()}.values())

    def next_time(self, timeout: float) -> float:
        """When the next resend or deadline of a request is due [s] (inf: none)."""
        return min((min(req.deadline, req.next_try(REQUEST_TRIES, timeout))
                    for req in self.values()), default=math.inf)


__all__ = ["HELLO_TRIES", "REQUEST_TRIES", "Handshake", "Pending", "RequestBook"]
