"""The real-time process and its shared-memory ring, across real processes.

Ring tests write in a ``spawn`` child and read in the test process. Service tests run a
:class:`RealtimeController` (the controller in a child process) against the virtual device (a
grandchild) through a real pty. Every wait is for a state, with generous timeouts; nothing
asserts wall time beyond bounds that only say "did not wait for the queue".
"""

from __future__ import annotations

import itertools
import math
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import wait_until
from poise.api.bus import Command, CommandResponse, CycleSample
from poise.api.state import State
from poise.controller.config import ConfigError, load_config
from poise.controller.realtime import RealtimeController, StartupCancelled
from poise.controller.ring import STATES, CycleRing, RingError
from poise.examples import EXAMPLES_DIR
from poise.models.actuation import blocks
from poise.motion.params import ParamError
from poise.motion.planner import TargetPlan

N, M, K = 3, 2, 2

#: How long the service may take to come up, connect the virtual device, settle [s].
SLOW = 120.0


# ---------------------------------------------------------------------- helpers


def same(a: CycleSample, b: CycleSample) -> bool:
    """Field-by-field equality with NaN equal to NaN (and lengths kept)."""
    def eq(x: object, y: object) -> bool:
        if isinstance(x, tuple):
            return isinstance(y, tuple) and len(x) == len(y) and all(
                eq(u, v) for u, v in zip(x, y, strict=True))
        if isinstance(x, float) and math.isnan(x):
            return isinstance(y, float) and math.isnan(y)
        return x == y
    return all(eq(getattr(a, f), getattr(b, f)) for f in CycleSample.__slots__)


def sample(seq: int, **over: object) -> CycleSample:
    """A record whose every field is a function of ``seq`` (a torn copy shows)."""
    v = float(seq)
    fields = dict(t=v, seq=seq, state=STATES[seq % len(STATES)], q=(v,) * N,
                  q_bar=(v + 0.5,) * N, qa_ref=(v + 1,) * M, tau_ff=(v + 2,) * M,
                  target=(v + 3,) * K, x=(v + 4,) * K, task_error=v + 5,
                  statics_residual=v + 6, period_us=v + 7, lateness_us=v + 8,
                  compute_us=v + 9, latency_us=v + 10)
    fields.update(over)
    return CycleSample(**fields)  # type: ignore[arg-type]


def consistent(s: CycleSample) -> bool:
    return same(s, sample(s.seq))


def gone(pid: int | None) -> bool:
    """Whether ``pid`` no longer runs (absent, or a zombie nobody reaped yet)."""
    if pid is None:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def in_shm(name: str) -> bool:
    return os.path.exists(f"/dev/shm/{name}")


# -------------------------------------------------------- children of the ring tests
# (module level: the "spawn" child imports this module to find them)


def write_records(name: str, samples: list[CycleSample]) -> None:
    ring = CycleRing.attach(name)
    for s in samples:
        ring.write(s)
    ring.close()


def write_many(name: str, count: int) -> None:
    ring = CycleRing.attach(name)
    for i in range(1, count + 1):
        ring.write(sample(i))
    ring.close()


def spawn(target, *args) -> mp.process.BaseProcess:
    p = mp.get_context("spawn").Process(target=target, args=args, daemon=True)
    p.start()
    return p


# ---------------------------------------------------------------------- the ring


def test_ring_round_trips_every_field_across_processes_incl_nan_and_empty():
    nan = math.nan
    records = [
        sample(1),
        sample(2, qa_ref=(), tau_ff=(), latency_us=nan),      # a cycle that sent nothing
        sample(3, q=(nan, 1.0, -0.0), statics_residual=nan, tau_ff=(nan, nan)),
        sample(4, qa_ref=(1e300, -1e-300), state="unknown-state"),
    ]
    with CycleRing.create(N, M, K, capacity=8) as ring:
        try:
            p = spawn(write_records, ring.name, records)
            p.join(SLOW)
            assert p.exitcode == 0
            got, since, lost = ring.read_new(0)
        finally:
            ring.unlink()
    assert (since, lost) == (4, 0)
    assert all(same(a, b) for a, b in zip(got[:3], records[:3], strict=True)), got
    assert got[3].state == "unknown"  # a name the ring does not know is not invented
    assert same(got[3], sample(4, qa_ref=(1e300, -1e-300), state="unknown"))


floats = st.floats(allow_nan=True, allow_infinity=True, width=64)


def test_a_ring_that_cannot_be_created_is_a_ring_error_that_says_why():
    # a name already taken in /dev/shm: the OS refuses, and the message names the ring and
    # the reason (poise run reports it as "cannot start", exit 3, not a traceback)
    with CycleRing.create(N, M, K, capacity=4) as ring, \
            pytest.raises(RingError, match=rf"cannot create the cycle ring '{ring.name}' "
                                           r"\(\d+ bytes\) in shared memory \(/dev/shm\): "
                                           r"File exists"):
        CycleRing.create(N, M, K, capacity=4, name=ring.name)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_ring_round_trip_is_exact_for_any_values(data):
    def vec(n: int, lo: int = 0) -> tuple[float, ...]:
        return tuple(data.draw(st.lists(floats, min_size=lo, max_size=n)
                               if lo == 0 else st.lists(floats, min_size=n, max_size=n)))
    s = CycleSample(
        t=data.draw(floats), seq=data.draw(st.integers(0, 2**52)),
        state=data.draw(st.sampled_from(STATES)), q=vec(N, N), q_bar=vec(N, N), qa_ref=vec(M),
        tau_ff=vec(M), target=vec(K, K), x=vec(K, K), task_error=data.draw(floats),
        statics_residual=data.draw(floats), period_us=data.draw(floats),
        lateness_us=data.draw(floats), compute_us=data.draw(floats),
        latency_us=data.draw(floats))
    with CycleRing.create(N, M, K, capacity=2) as ring:
        try:
            ring.write(s)
            (got,), _, _ = ring.read_new(0)
        finally:
            ring.unlink()
    assert same(got, s)


def test_ring_counts_records_lost_to_overrun():
    with CycleRing.create(N, M, K, capacity=16) as ring:
        try:
            p = spawn(write_many, ring.name, 100)
            p.join(SLOW)
            assert p.exitcode == 0
            got, since, lost = ring.read_new(0)
            again = ring.read_new(since)
        finally:
            ring.unlink()
    assert (since, lost) == (100, 84)
    assert [s.seq for s in got] == list(range(85, 101))
    assert all(consistent(s) for s in got)
    assert again == ([], 100, 0)


def test_ring_reader_gets_order_and_no_torn_records_while_the_writer_laps_it():
    total = 60_000
    with CycleRing.create(N, M, K, capacity=64) as ring:
        try:
            p = spawn(write_many, ring.name, total)
            got: list[CycleSample] = []
            since = lost = 0
            while p.is_alive() or since < ring.count:
                batch, since, n_lost = ring.read_new(since)
                got += batch
                lost += n_lost
            p.join(SLOW)
            assert p.exitcode == 0
        finally:
            ring.unlink()
    seqs = [s.seq for s in got]
    assert all(consistent(s) for s in got)                    # never torn
    assert all(b > a for a, b in itertools.pairwise(seqs))  # in order
    assert len(got) + lost == total                           # every record read or counted
    assert seqs[-1] == total


# ---------------------------------------------------------------------- the service


def config(**keys: object):
    over = {"device.port": ("sim", "test"), "mqtt.enabled": (False, "test"),
            "loop.rate": (200.0, "test"), "algorithm.target": ([0.5], "test"),
            "device.watchdog_ms": (400, "test"), "limits.sensor_hold": (0.1, "test"),
            "limits.sensor_fault": (1.0, "test")}
    for k, v in keys.items():
        over[k.replace("__", ".")] = (v, "test")
    return load_config(EXAMPLES_DIR / "double_pendulum.toml", over)


def started() -> RealtimeController:
    rt = RealtimeController(config())
    resp = rt.start()
    assert resp.accepted, resp
    return rt


def why(rt: RealtimeController) -> str:
    """What the controller says of itself: its state, the reason and its last faults and
    state changes (so that a test failing on a busy machine says whether the child faulted,
    and why)."""
    told = [(e.kind, e.data) for e in rt.history() if e.kind in ("state", "fault")][-4:]
    return f"state {rt.state}, reason {rt.reason!r}, last {told}"


@pytest.fixture(scope="module")
def running():
    rt = started()
    yield rt
    rt.close()


def test_start_reports_running_from_the_mirror_at_once(running):
    assert running.state == State.RUNNING  # the mirror is current when start() returns
    assert running.reason == ""
    assert running.wait_for(State.RUNNING, timeout=0)
    kinds = {e.kind for e in running.history()}
    assert {"state", "info"} <= kinds


def test_the_parent_loads_its_planner_while_the_loop_runs(running):
    """Once the child has planned its first target, a background thread of the parent loads
    what planning needs (the compiled steppers, the statics) by planning that goal again, so
    that the first target command is planned as fast as the next ones."""
    planner = running._planner
    assert wait_until(lambda: planner.warmer is not None, SLOW)
    planner.warmer.join(SLOW)
    assert not planner.warmer.is_alive()
    assert planner.warm and planner.steppers_loaded
    assert running.state == State.RUNNING, why(running)


def test_cycle_samples_arrive_through_the_ring_in_order_with_the_childs_values(running):
    samples = running.subscribe()
    lost0 = running.samples_lost
    assert samples.wait(SLOW)
    got: list[CycleSample] = []
    matched = None
    for _ in range(50):  # the summary's q and qa_ref may come from two cycles: retry
        summary = running.summary()
        if not summary["qa_ref"]:  # the first running cycle has not come yet
            time.sleep(0.05)
            continue

        def seen(summary=summary) -> bool:
            got.extend(samples.drain())
            return any(list(s.q) == summary["q"] for s in got)

        assert wait_until(seen, 30), "the child's last q never came through the ring"
        matched = next((s for s in got if list(s.q) == summary["q"] and
                        list(s.qa_ref) == summary["qa_ref"]), None)
        if matched is not None:
            break
    assert matched is not None, "no ring record carries the child's last q and qa_ref"
    assert matched.state == "running"
    assert list(matched.target) == summary["target"]
    assert wait_until(lambda: got.extend(samples.drain()) or len(got) >= 100, SLOW)
    seqs = [s.seq for s in got]
    gaps = sum(b - a - 1 for a, b in itertools.pairwise(seqs))
    assert all(b > a for a, b in itertools.pairwise(seqs))
    assert gaps == running.samples_lost - lost0 + samples.dropped
    running.unsubscribe(samples)


def test_target_command_is_applied_and_the_arm_reaches_it(running):
    assert wait_until(lambda: running.summary()["reached"], SLOW, 0.2), why(running)
    resp = running.set_target([0.45])
    assert resp.accepted, (resp, why(running))
    assert list(running.params.target) == [0.45]  # mirrored before the reply came back
    assert running.target_status in ("reachable", "")
    assert wait_until(lambda: running.summary()["reached"] and
                      running.summary()["target"] == [0.45], SLOW, 0.2), why(running)
    assert running.final_summary()["state"] == "stopped"


def test_post_gets_exactly_one_reply(running):
    replies: dict[str, list[CommandResponse]] = {"a": [], "b": []}
    running.post(Command("gains", {"gamma": 2.5}, id="a"), replies["a"].append)
    assert wait_until(lambda: replies["a"], 30)
    running.post(Command("gains", {"gamma": 2.0}, id="b"), replies["b"].append)
    assert wait_until(lambda: replies["b"], 30)
    assert [len(replies["a"]), len(replies["b"])] == [1, 1]
    assert replies["a"][0].accepted and replies["a"][0].id == "a"
    assert running.params.gamma == 2.0


def test_a_flood_of_targets_coalesces_in_the_parent_and_only_the_newest_reaches_the_child(
        running):
    events = running.events(history=False)
    replies: dict[str, list[CommandResponse]] = {}
    lock = threading.Lock()

    def reply(r: CommandResponse) -> None:
        with lock:
            replies.setdefault(r.id, []).append(r)

    targets = [0.45 + 0.001 * (i % 50) for i in range(200)]
    for i, x in enumerate(targets):
        running.post(Command("target", [x], id=f"f{i}"), reply)
    assert wait_until(lambda: len(replies) == 200, SLOW)
    assert all(len(r) == 1 for r in replies.values())  # exactly one answer each
    assert replies["f199"][0].accepted, replies["f199"]
    superseded = [i for i, r in replies.items() if "superseded" in r[0].reason]
    assert wait_until(lambda: list(running.params.target) == [targets[-1]], SLOW)
    # the child saw (and recorded) only the commands that survived the parent's queue
    applied = [e for e in events.drain() if e.kind == "command"]
    ids = {e.data["id"] for e in applied}
    assert "f199" in ids and not ids & set(superseded)
    assert len(applied) + len(superseded) == 200
    assert len(applied) < 100
    stats = running.summary()["dispatch"]
    assert stats["superseded"] >= len(superseded)


def test_targets_are_planned_in_the_parent_while_the_loop_runs(running):
    assert wait_until(lambda: running._last_sample is not None, SLOW)

    def at_rest() -> bool:  # the child reached the target the parent has (q̄ still), not
        summary = running.summary()  # an earlier one it had reached before that came
        return summary["reached"] and summary["target"] == list(running.params.target)

    assert wait_until(at_rest, SLOW, 0.2), why(running)
    plan = running._planner.prepare(Command("target", [0.5]))
    assert isinstance(plan, TargetPlan) and plan.reachable
    b = blocks(running.model, np.asarray(plan.q_goal))
    assert np.linalg.norm(b.x - 0.5) <= running.config.algorithm.tolerance  # reaches it,
    assert np.linalg.norm(b.Gu) < 1e-6                                      # held there
    # with the model's predicted response to the move, which the child follows in fb
    start = np.asarray(running._last_sample.q_bar)
    rows = running._planner.prepare(Command("target", [0.45])).reference
    assert rows is not None and rows.shape[1] == running.model.task_dim
    assert abs(rows[0, 0] - running.model.fk(start)[0]) < 0.01  # from where it is
    assert abs(rows[-1, 0] - 0.45) <= running.config.algorithm.tolerance  # to the target
    distance = abs(running.model.fk(start)[0] - 0.45)
    assert distance > 0.02 and np.ptp(rows[:, 0]) >= 0.95 * distance  # the move is in it
    resp = running.set_target([0.47])
    assert resp.accepted, resp
    period = 1.0 / running.config.loop.rate
    assert wait_until(lambda: (running.summary().get("reference_s") or 0) > 10 * period, SLOW)
    # the summary describes the move: made in the child, predicted by the parent's plan
    assert wait_until(lambda: running.summary()["move"]["duration_s"] is not None, SLOW)
    summary = running.summary()
    move = summary["move"]
    assert move["speed"] == 1.0 and move["slowdown"] == 1.0 and move["duration_s"] > 0
    assert 0 < move["predicted_settle_s"] <= summary["reference_s"]
    bad = running._planner.prepare(Command("target", [float("nan")]))
    assert isinstance(bad, ParamError) and "target" in str(bad)
    resp = running.submit(Command("target", [float("nan")], id="nan"))
    assert not resp.accepted and "target" in resp.reason
    assert running._planner.prepare(Command("gains", {"gamma": 1.0})) is None  # only targets


def test_close_leaves_no_shared_memory_and_no_process(running):
    name, pid, device = running._child.ring.name, running.pid, running.device_pid()
    assert in_shm(name) and not gone(pid) and not gone(device)
    before = why(running)  # a fault under load shows here, not at the close
    events = running.events(history=False)
    running.close()
    assert not in_shm(name)
    assert gone(pid)
    assert wait_until(lambda: gone(device), 30)
    final = running.final_summary()
    assert final["state"] == "stopped", (final["state"], before)
    assert any(e.kind == "summary" for e in events.drain())
    assert not running.start().accepted  # closed: refused, not hung


def test_estop_reaches_estop_at_once_even_behind_200_queued_commands():
    rt = started()
    try:
        replies: dict[str, list[CommandResponse]] = {}
        lock = threading.Lock()

        def reply(r: CommandResponse) -> None:
            with lock:
                replies.setdefault(r.id, []).append(r)

        for i in range(200):
            rt.post(Command("target", [0.45 + 0.05 * (i % 2)], id=str(i)), reply)
        t0 = time.monotonic()
        resp = rt.estop("test e-stop")
        assert rt.wait_for(State.ESTOP, timeout=SLOW)
        elapsed = time.monotonic() - t0
        assert resp.accepted, resp
        assert elapsed < 5.0  # not a timing test: it did not wait for the 200
        assert rt.reason == "test e-stop"
        assert wait_until(lambda: len(replies) == 200, SLOW)
        assert all(len(r) == 1 for r in replies.values())
        assert not rt.set_target([0.5]).accepted  # latched: refused until 'clear'
    finally:
        rt.close()


def test_killed_realtime_process_means_fault_refusals_and_no_device():
    rt = started()
    events = rt.events(history=False)
    device = rt.device_pid()
    name = rt._child.ring.name
    try:
        os.kill(rt.pid, signal.SIGKILL)
        assert rt.wait_for(State.FAULT, timeout=rt.config.limits.sensor_fault + 5)
        assert rt.reason == "real-time process died (exit code -9)"
        assert any(e.kind == "fault" and e.data.get("reason") == rt.reason
                   for e in events.drain())
        for resp in (rt.start(), rt.set_target([0.4]), rt.clear(), rt.estop()):
            assert not resp.accepted and resp.reason == rt.reason
        posted: list[CommandResponse] = []
        rt.post(Command("mode", "ff", id="p"), posted.append)
        assert [(r.id, r.accepted, r.reason) for r in posted] == [("p", False, rt.reason)]
        assert rt.summary()["state"] == "fault"
        assert wait_until(lambda: gone(device), 30)  # the virtual device followed it
    finally:
        rt.close()
    assert not in_shm(name)
    assert rt.final_summary()["state"] == "fault"


def test_a_cancelled_start_up_ends_at_once_and_leaves_no_process():
    calls = []

    def cancelled() -> bool:  # the first poll comes while the child still starts
        calls.append(mp.active_children())
        return True

    with pytest.raises(StartupCancelled):
        RealtimeController(config(), cancelled=cancelled)
    assert calls and any(p.name == "poise-realtime" for p in calls[0])
    assert not [p for p in mp.active_children() if p.name == "poise-realtime"]


def test_a_configuration_the_child_refuses_is_a_config_error_and_leaves_nothing():
    ours = f"poise_ring_{os.getpid()}_"  # rings this process made (other suites may run)
    before = {f for f in os.listdir("/dev/shm") if f.startswith(ours)}
    with pytest.raises(ConfigError, match="dimensional"):
        RealtimeController(config(algorithm__target=[0.5, 0.1]))
    after = {f for f in os.listdir("/dev/shm") if f.startswith(ours)}
    assert after <= before
    assert not mp.active_children()


def test_running_realtime_process_and_its_device_die_with_the_parent_even_on_sigkill(
        tmp_path):
    script = textwrap.dedent(f"""
        import time
        from poise.controller.config import load_config
        from poise.controller.realtime import RealtimeController
        from poise.examples import EXAMPLES_DIR
        if __name__ == "__main__":
            over = {{"device.port": ("sim", "t"), "mqtt.enabled": (False, "t"),
                    "loop.rate": (200.0, "t"), "device.watchdog_ms": (400, "t")}}
            rt = RealtimeController(load_config(EXAMPLES_DIR / "double_pendulum.toml", over))
            assert rt.start().accepted
            print(rt.pid, rt._child.ring.name, rt.device_pid(), flush=True)
            time.sleep({SLOW})
    """)
    path = tmp_path / "parent.py"
    path.write_text(script)
    parent = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline().split()  # type: ignore[union-attr]
        assert line, "the parent did not start its real-time process"
        child, name, device = int(line[0]), line[1], int(line[2])
        assert not gone(child) and in_shm(name) and not gone(device)
        parent.kill()
        parent.wait(30)
        assert wait_until(lambda: gone(child), 30)  # it closed its controller, then left
        assert wait_until(lambda: gone(device), 30)
        # the multiprocessing resource tracker removes the orphaned segment
        assert wait_until(lambda: not in_shm(name), 30)
    finally:
        if parent.poll() is None:
            parent.kill()
        if parent.stdout is not None:
            parent.stdout.close()
