"""The sans-I/O link core (:class:`LinkCore`) on its own: frames and times fed by hand, the
device endpoint (also sans-I/O) as the other end. No port, no thread, no sleep."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.test_protocol_device import LagPlant

from poise.firmware_bridge import messages as m
from poise.firmware_bridge.device import DeviceEndpoint
from poise.firmware_bridge.link import (
    RECONNECT_BACKOFF,
    DeviceTimeoutError,
    LinkCore,
    LinkState,
    NotConnectedError,
    PortNotFoundError,
    SchemaMismatchError,
    VersionMismatchError,
)

PORT = "/dev/ttyCORE"


class Clock:
    """A hand-moved clock [s]: the core's time base and the ``now`` passed to it."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class RenamedPlant(LagPlant):
    """Same plant, another channel name: another schema checksum."""

    def describe(self):
        channels = super().describe()
        channels[3] = {**channels[3], "name": "tendonB"}
        return channels


def messages(frames: list[bytes]) -> list[m.Message]:
    return [fr.message for fr in m.MessageDecoder().feed(b"".join(frames))]


def seq_of(frame: bytes) -> int:
    return m.MessageDecoder().feed(frame)[0].header.seq


def answer(core: LinkCore, device: DeviceEndpoint, frames: list[bytes], now: float) -> None:
    """Deliver the host's ``frames`` to the device and everything it answers back to the core."""
    for frame in frames:
        device.receive(frame, now)
    core.feed(b"".join(device.outgoing()), now)


def connected(clock: Clock, device: DeviceEndpoint | None = None, **options
              ) -> tuple[LinkCore, DeviceEndpoint]:
    core = LinkCore(PORT, clock=clock, **options)
    device = device or DeviceEndpoint(LagPlant(), firmware_id="core-test")
    pending, frame = core.opened(clock.t)
    answer(core, device, [frame], clock.t)
    assert pending.result(0) == core.description and core.connected
    return core, device


# -------------------------------------------------------------------- handshake


def test_handshake_completes_only_once_hello_and_every_channel_are_in():
    clock = Clock()
    core = LinkCore(PORT, clock=clock)
    device = DeviceEndpoint(LagPlant(), firmware_id="core-test")
    assert core.state is LinkState.DISCONNECTED and not core.wants_port
    pending, frame = core.opened(clock.t)
    assert messages([frame]) == [m.HelloRequest()]
    assert core.state is LinkState.HANDSHAKE and core.wants_port
    device.receive(frame, clock.t)
    hello, *channels = device.outgoing()
    for part in [hello, *channels[:-1]]:
        core.feed(part, clock.t)
        assert not pending.done() and core.state is LinkState.HANDSHAKE
    core.feed(channels[-1], clock.t)
    desc = pending.result(0)
    assert core.connected and core.description is desc
    assert (desc.firmware_id, [c.name for c in desc.channels]) == (
        "core-test", ["theta1", "theta2", "tendon1", "tendon2"])


def test_handshake_resends_hello_request_evenly_then_times_out_saying_what_was_sent():
    clock = Clock(0.0)
    core = LinkCore(PORT, timeout=0.3, clock=clock)
    pending, _ = core.opened(0.0)
    resent = {}
    for now in (0.05, 0.1, 0.15, 0.2, 0.25, 0.299):
        resent[now] = messages(core.poll(now))
        assert core.next_poll() > now
    assert resent == {0.05: [], 0.1: [m.HelloRequest()], 0.15: [], 0.2: [m.HelloRequest()],
                      0.25: [], 0.299: []}
    assert core.next_poll() == pytest.approx(0.3)
    assert core.poll(0.3) == []
    with pytest.raises(DeviceTimeoutError, match=r"^/dev/ttyCORE: no Hello/Channel answer within "
                       r"0.3 s; sent 3 frame\(s\): HelloRequest \(.*; received nothing$"):
        pending.result(0)
    assert core.state is LinkState.DISCONNECTED and not core.wants_port
    assert core.reconnect_at is None  # never connected: nothing to reconnect to


def test_version_mismatch_fails_the_handshake_saying_what_differs():
    clock = Clock()
    core = LinkCore(PORT, clock=clock)
    device = DeviceEndpoint(LagPlant(), firmware_id="core-test", protocol_version=2)
    pending, frame = core.opened(clock.t)
    answer(core, device, [frame], clock.t)
    with pytest.raises(VersionMismatchError, match=r"host expects 1, device 'core-test' speaks "
                                                   r"2; update the host \(poise\)"):
        pending.result(0)
    assert not core.wants_port


def test_unexpected_schema_is_refused_naming_both_checksums_and_the_channels():
    clock = Clock()
    core = LinkCore(PORT, expected_schema=0x12345678, clock=clock)
    pending, frame = core.opened(clock.t)
    answer(core, DeviceEndpoint(LagPlant()), [frame], clock.t)
    with pytest.raises(SchemaMismatchError, match=r"expected checksum 0x12345678, device .* has "
                                                  r"0x[0-9a-f]{8} \(channels: theta1 \[rad\]"):
        pending.result(0)
    assert not core.wants_port and core.description is None


def test_port_lost_or_link_closed_during_the_handshake_fails_it_at_once():
    clock = Clock()
    core = LinkCore(PORT, clock=clock)
    pending, _ = core.opened(clock.t)
    core.lost(clock.t)
    with pytest.raises(NotConnectedError, match="port closed during the handshake"):
        pending.result(0)
    pending, _ = core.opened(clock.t)
    core.close()
    with pytest.raises(NotConnectedError):
        pending.result(0)
    assert core.state is LinkState.CLOSED and core.reconnect_at is None


# -------------------------------------------------------------------- requests


def test_device_acks_and_nacks_come_back_to_their_request():
    clock = Clock()
    core, device = connected(clock)
    arm, arm_frame = core.request(m.Arm(), clock.t)
    bad, bad_frame = core.request(m.ConfigWrite(m.ConfigKey.SENSOR_RATE_HZ, 1e6), clock.t)
    answer(core, device, [arm_frame, bad_frame], clock.t)
    assert arm.result(0).ok
    assert bad.result(0).code == m.ErrorCode.OUT_OF_RANGE
    assert core.requests == {}


@given(order=st.permutations(range(4)))
def test_acks_match_requests_by_sequence_number_in_any_order(order):
    clock = Clock()
    core, _ = connected(clock)
    requests = [core.request(m.ConfigWrite(m.ConfigKey.WATCHDOG_MS, 100 + k), clock.t)
                for k in range(4)]
    seqs = [seq_of(frame) for _, frame in requests]
    stray = max(seqs) + 100
    core.feed(m.encode(m.Ack(m.MsgType.CONFIG_WRITE, 0, stray), 900), clock.t)  # no request
    for rx, k in enumerate(order):
        code = k + 1  # a different nack per request
        core.feed(m.encode(m.Ack(m.MsgType.CONFIG_WRITE, code, seqs[k]), 901 + rx), clock.t)
    assert [pending.result(0).code for pending, _ in requests] == [1, 2, 3, 4]


def test_request_times_out_at_its_deadline_and_a_late_ack_is_ignored():
    clock = Clock(10.0)
    core, _ = connected(clock, timeout=0.6, heartbeat=0)
    pending, frame = core.request(m.Arm(), 10.0)
    seqs = [seq_of(frame)]
    for k in (1, 2):  # resent evenly over the timeout, each time with a new sequence number
        assert core.next_poll() == pytest.approx(10.0 + 0.2 * k)
        assert core.poll(10.0 + 0.2 * k - 0.01) == []
        resent = core.poll(10.0 + 0.2 * k)
        assert messages(resent) == [m.Arm()]
        seqs.append(seq_of(resent[0]))
    assert len(set(seqs)) == 3
    assert core.next_poll() == pytest.approx(10.6)
    core.poll(10.59)
    assert not pending.done()
    core.poll(10.6)
    with pytest.raises(DeviceTimeoutError, match=rf"no Ack for Arm \(seq {seqs[0]}\) within 0.6 s; "
                                                 r"sent 3 frame\(s\): Arm \("):
        pending.result(0)
    assert core.requests == {}
    core.feed(m.encode(m.Ack(m.MsgType.ARM, 0, seqs[1]), 50), 10.7)  # late: nothing to match
    assert isinstance(pending.exception(0), DeviceTimeoutError)


@pytest.mark.parametrize("acked", [0, 1])
def test_a_request_whose_ack_was_lost_is_resent_and_any_ack_completes_it(acked):
    """A lossy link drops the first Ack: the resend (new sequence number) is answered, or the
    first Ack arrives late; either completes the request once and forgets all its numbers."""
    clock = Clock(10.0)
    core, _ = connected(clock, timeout=0.6, heartbeat=0)
    pending, frame = core.request(m.Disarm(), 10.0)
    seqs = [seq_of(frame), seq_of(core.poll(10.2)[0])]
    core.feed(m.encode(m.Ack(m.MsgType.DISARM, 0, seqs[acked]), 60), 10.25)
    assert pending.result(0).ok and core.requests == {}
    assert core.poll(10.6) == []  # nothing more is resent
    core.feed(m.encode(m.Ack(m.MsgType.DISARM, 0, seqs[1 - acked]), 61), 10.3)  # a duplicate
    assert pending.result(0).ok


def test_a_timeout_says_how_many_valid_frames_came_but_not_the_ack():
    clock = Clock(10.0)
    core, _ = connected(clock, timeout=0.3, heartbeat=0)
    pending, _ = core.request(m.Arm(), 10.0)
    core.feed(m.encode(m.Heartbeat(), 70), 10.1)  # a valid frame, not the Ack
    core.poll(10.3)
    with pytest.raises(DeviceTimeoutError, match=r"received \d+ bytes \(\d+ valid frames\) but "
                                                 r"not that$"):
        pending.result(0)


def test_nothing_is_sent_or_requested_while_not_connected():
    core = LinkCore(PORT, clock=Clock())
    assert core.send(m.Setpoint((0.0, 0.0))) == (-1, None)
    assert core.stats.tx_dropped == 1 and core.stats.tx_frames == 0
    with pytest.raises(NotConnectedError, match=r"^/dev/ttyCORE: not connected$"):
        core.request(m.Arm(), 0.0)


# -------------------------------------------------------------------- heartbeats


def test_heartbeat_goes_out_after_a_quarter_watchdog_of_silence_and_sends_postpone_it():
    clock = Clock()
    device = DeviceEndpoint(LagPlant(), watchdog_ms=40)
    core, _ = connected(clock, device)
    t0 = clock.t  # the handshake request was the last frame sent
    assert core.heartbeat_interval == pytest.approx(0.010)
    assert core.next_poll() == pytest.approx(t0 + 0.010)
    assert core.poll(t0 + 0.009) == []
    assert messages(core.poll(t0 + 0.010)) == [m.Heartbeat()]
    clock.t = t0 + 0.015
    core.send(m.Setpoint((0.0, 0.0)))  # any frame feeds the watchdog
    assert core.poll(t0 + 0.024) == []
    assert messages(core.poll(t0 + 0.025)) == [m.Heartbeat()]


@pytest.mark.parametrize(("heartbeat", "watchdog_ms", "interval"),
                         [(None, 10, 0.005), (0.2, 100, 0.2), (0, 100, 0.0)])
def test_heartbeat_interval_is_the_option_else_a_quarter_watchdog_but_at_least_5ms(
        heartbeat, watchdog_ms, interval):
    clock = Clock()
    core, _ = connected(clock, DeviceEndpoint(LagPlant(), watchdog_ms=watchdog_ms),
                        heartbeat=heartbeat)
    assert core.heartbeat_interval == pytest.approx(interval)
    if interval == 0:  # never
        assert core.poll(clock.t + 1e3) == [] and core.next_poll() == float("inf")


# -------------------------------------------------------------------- reconnect


def test_unplug_schedules_reconnect_attempts_backing_off_to_a_second():
    clock = Clock(10.0)
    core, _ = connected(clock)
    core.lost(10.0)
    assert core.state is LinkState.DISCONNECTED and not core.connected
    assert core.reconnect_at == pytest.approx(10.0 + RECONNECT_BACKOFF[0])
    delays = []
    now = core.reconnect_at
    for _ in range(7):
        error = core.open_failed(FileNotFoundError(2, "No such file or directory"), now)
        assert isinstance(error, PortNotFoundError) and str(error) == f"{PORT}: no such device"
        delays.append(round(core.reconnect_at - now, 6))
        now = core.reconnect_at
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


def test_reconnect_counts_once_and_requires_the_schema_seen_before():
    clock = Clock()
    core, _ = connected(clock)
    schema = core.description.schema_checksum
    core.lost(clock.t)
    pending, frame = core.opened(core.reconnect_at)
    answer(core, DeviceEndpoint(LagPlant(), firmware_id="core-test"), [frame], clock.t)
    assert pending.result(0).schema_checksum == schema
    assert core.connected and core.stats.reconnects == 1 and core.reconnect_at is None
    # another device on the same path: refused, the port given up, and tried again later
    core.lost(clock.t)
    pending, frame = core.opened(clock.t)
    answer(core, DeviceEndpoint(RenamedPlant()), [frame], clock.t)
    with pytest.raises(SchemaMismatchError, match=rf"after reconnect the device has schema "
                                                  rf"0x[0-9a-f]{{8}}, before 0x{schema:08x}"):
        pending.result(0)
    assert not core.wants_port and core.stats.reconnects == 1
    assert core.reconnect_at == pytest.approx(clock.t + 2 * RECONNECT_BACKOFF[0])
    assert core.description.schema_checksum == schema


def test_no_reconnect_when_it_is_off_or_the_link_was_closed():
    clock = Clock()
    core, _ = connected(clock, reconnect=False)
    core.lost(clock.t)
    assert core.state is LinkState.DISCONNECTED and core.reconnect_at is None
    core, _ = connected(clock)
    core.close()
    core.lost(clock.t)
    assert core.state is LinkState.CLOSED and core.reconnect_at is None


# -------------------------------------------------------------------- statistics


def _sensors_frame(seq: int, last_setpoint_seq: int) -> bytes:
    return m.encode(m.Sensors(0, last_setpoint_seq, last_setpoint_seq, (0.0,), (0.0,), (0.0,)),
                    seq, 0)


def test_setpoint_round_trip_is_timed_per_echoed_sequence_number():
    clock = [10.0]
    core = LinkCore(clock=lambda: clock[0])
    assert core.stats.as_dict()["rtt_us"] == {"count": 0, "p50": None, "p99": None, "max": None}
    core.frame(m.HelloRequest())  # the handshake takes seq 0, as on a real link
    core.feed(_sensors_frame(0, 0), now=10.0)  # the echo before any setpoint: no sample
    seqs = []
    for k in range(3):  # three setpoints 1 ms apart, each echoed 250 ms later
        clock[0] = 10.0 + 1e-3 * k
        seqs.append(core.frame(m.Setpoint((0.0,), None))[0])
    core.frame(m.Heartbeat())  # other frames take sequence numbers too
    for k, s in enumerate(seqs):
        core.feed(_sensors_frame(1 + 2 * k, s), now=10.25 + 1e-3 * k)
        core.feed(_sensors_frame(2 + 2 * k, s), now=10.30 + 1e-3 * k)  # echoed again: no sample
    rtt = core.stats.as_dict()["rtt_us"]
    assert rtt["count"] == 3
    assert rtt["p50"] == pytest.approx(250_000, abs=1)
    assert rtt["max"] == pytest.approx(250_000, abs=1)


# -------------------------------------------------------------------- the fast receive path


def test_frames_read_one_at_a_time_or_many_at_once_give_the_same_samples_and_statistics():
    """A read of one whole sensor frame takes the fast path (``MessageDecoder.sensors``),
    several in one read the general one: the samples, the sequence checks (a gap, a
    duplicate), the setpoint echoes and every counter come out the same."""
    seqs = [0, 1, 2, 5, 6, 6, 7]  # a gap of two, a duplicate
    frames = [m.encode(m.Sensors(1 << 3, 40 + i, 40 + i, (0.1 * i, -0.2), (0.3 * i,),
                                 (1.5,)), seq, 1000 * i) for i, seq in enumerate(seqs)]
    frames.insert(3, m.encode(m.Ack(1, 0, 2, 0), 3))  # another type in between
    got: dict[str, list] = {"one": [], "many": []}
    clock = Clock()
    one = LinkCore(PORT, clock=clock, on_sensors=got["one"].append)
    many = LinkCore(PORT, clock=clock, on_sensors=got["many"].append)
    fast: dict[str, int] = {"one": 0, "many": 0}
    for name, core in (("one", one), ("many", many)):
        decode = core.decoder.sensors

        def counted(data: bytes, name: str = name, decode=decode):
            out = decode(data)
            fast[name] += out is not None
            return out
        core.decoder.sensors = counted  # type: ignore[method-assign]
    for frame in frames:
        one.feed(frame, clock.t)
    many.feed(b"".join(frames), clock.t)
    assert fast == {"one": len(seqs), "many": 0}  # each path was taken where it should be
    assert got["one"] == got["many"] and len(got["one"]) == len(seqs)
    assert [s.seq for s in got["one"]] == seqs
    assert repr(one.stats.as_dict()) == repr(many.stats.as_dict())  # NaN where no round trip
    assert (one.stats.seq_gaps, one.stats.lost_frames, one.stats.duplicates) == (1, 1, 1)
    assert one.last_sensors == many.last_sensors == got["one"][-1]
    assert (one.rx_bytes, one.rx_valid) == (many.rx_bytes, many.rx_valid) == \
        (sum(map(len, frames)), len(frames))


def test_a_read_answered_elsewhere_is_counted_as_feed_counts_it_but_delivered_to_nobody():
    """The wire cycle decodes a read itself (:meth:`LinkCore.answered`): the sequence checks,
    the echoes' round trips, every counter and ``last_sensors`` come out as from ``feed``
    of the same bytes, and no sample goes to ``on_sensors``."""
    seqs = [0, 1, 4, 4, 5]  # a gap, a duplicate
    sensors = [m.Sensors(1, 1 + i, 1 + i, (0.1 * i, -0.2), (0.3 * i,), (1.5,))
               for i in range(len(seqs))]
    frames = [m.encode(s, seq, 1000 * i) for i, (s, seq) in enumerate(zip(sensors, seqs,
                                                                            strict=True))]
    sensors = [m.MessageDecoder().feed(f)[0].message for f in frames]  # float32 values
    clock = Clock()
    delivered: list = []
    fed = LinkCore(PORT, clock=clock)
    answered = LinkCore(PORT, clock=clock, on_sensors=delivered.append)
    for core in (fed, answered):
        for _ in range(6):  # setpoints for the echoes to time
            core.frame(m.Setpoint((0.0,), None))
    samples = []
    for i, (frame, s, seq) in enumerate(zip(frames, sensors, seqs, strict=True)):
        clock.t += 1e-3
        fed.feed(frame, clock.t)
        samples.append(answered.answered(frame, seq, 1000 * i, s, clock.t))
    assert delivered == []
    assert samples[-1] == answered.last_sensors == fed.last_sensors
    assert [s.seq for s in samples] == seqs
    assert repr(answered.stats.as_dict()) == repr(fed.stats.as_dict())
    assert answered.stats.setpoint_rtt.as_dict()["count"] == 4  # echoes 2…5 of sent frames
    assert (answered.rx_bytes, answered.rx_valid) == (fed.rx_bytes, fed.rx_valid)


def test_a_setpoint_framed_elsewhere_takes_the_reserved_number_unless_another_frame_did():
    """:meth:`LinkCore.reserve_setpoint` gives the number and timestamp ``setpoint`` would
    use; :meth:`LinkCore.sent_setpoint` records it as ``setpoint`` does (the next number,
    the round trip of its echo), and refuses when another frame took the number meanwhile
    or the link is down."""
    clock = Clock()
    core, _ = connected(clock)
    twin, _ = connected(Clock(clock.t), DeviceEndpoint(LagPlant(), firmware_id="core-test"))
    seq, ts = core.reserve_setpoint()
    twin_seq, twin_frame = twin.setpoint((0.25,), (1.0,))
    assert (seq, ts) == (twin_seq, m.MessageDecoder().feed(twin_frame)[0].header.timestamp_us)
    assert m.encode_setpoint((0.25,), (1.0,), seq, ts) == twin_frame
    assert core.sent_setpoint(seq, clock.t)
    assert core.reserve_setpoint()[0] == (seq + 1) & 0xFFFF
    assert core.stats.tx_frames == twin.stats.tx_frames
    core.feed(_sensors_frame(50, (seq - 1) & 0xFFFF), clock.t)  # the echo before it
    clock.t += 0.01
    core.feed(_sensors_frame(51, seq), clock.t)
    rtt = core.stats.setpoint_rtt.as_dict()
    assert rtt["count"] == 1 and rtt["p50"] == pytest.approx(10_000, abs=1)
    late, _ = core.reserve_setpoint()
    core.frame(m.Heartbeat())  # another frame takes that number first
    assert not core.sent_setpoint(late, clock.t)
    core.lost(clock.t)
    assert core.reserve_setpoint() is None
    assert not core.sent_setpoint(core.ledger.next_seq, clock.t)


def test_a_burst_answered_at_its_newest_frame_counts_as_the_whole_read_fed():
    """Two frames and an Ack read at once, the newest frame answered by the wire cycle: the
    older frames fed undelivered, then the newest answered, give the counters, the echoes
    and ``last_sensors`` of ``feed`` of the whole read, and deliver nothing."""
    frames = [m.encode(m.Sensors(1, 1, 1, (0.5 * i, 0.25), (0.125 * i,), (1.0,)), i, 10 * i)
              for i in range(3)]
    frames.insert(1, m.encode(m.Ack(1, 0, 2, 0), 7))
    clock = Clock()
    delivered: list = []
    fed = LinkCore(PORT, clock=clock)
    burst = LinkCore(PORT, clock=clock, on_sensors=delivered.append)
    fed.feed(b"".join(frames), clock.t)
    before = burst.stats.sensor_frames
    burst.feed(b"".join(frames[:-1]), clock.t, deliver=False)
    assert burst.stats.sensor_frames - before == 2
    newest = m.MessageDecoder().feed(frames[-1])[0]
    burst.answered(frames[-1], newest.header.seq, newest.header.timestamp_us, newest.message,
                   clock.t)
    assert delivered == []
    assert burst.last_sensors == fed.last_sensors and burst.last_sensors.seq == 2
    assert repr(burst.stats.as_dict()) == repr(fed.stats.as_dict())
    assert (burst.rx_bytes, burst.rx_valid) == (fed.rx_bytes, fed.rx_valid)
