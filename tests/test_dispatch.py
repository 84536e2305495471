"""The command dispatcher: e-stop first, coalescing, one answer per command (deterministic)."""

from __future__ import annotations

import threading

from poise.api.bus import Command, CommandResponse
from poise.controller.dispatch import CommandDispatcher


class Gate:
    """An executor that blocks on chosen commands until released, and records the order."""

    def __init__(self, block: tuple[str, ...] = ()) -> None:
        self.block = set(block)
        self.release = threading.Event()
        self.entered = threading.Event()
        self.order: list[str] = []
        self.threads: dict[str, str] = {}

    def __call__(self, c: Command) -> CommandResponse:
        self.threads[c.id] = threading.current_thread().name
        if c.id in self.block:
            self.entered.set()
            assert self.release.wait(30)
        self.order.append(c.id)
        return CommandResponse(c.id, c.name, True, "")


class Answers:
    def __init__(self) -> None:
        self.got: dict[str, list[CommandResponse]] = {}
        self.lock = threading.Lock()
        self.all_in = threading.Condition(self.lock)

    def __call__(self, r: CommandResponse) -> None:
        with self.lock:
            self.got.setdefault(r.id, []).append(r)
            self.all_in.notify_all()

    def wait(self, ids: set[str], timeout: float = 30) -> bool:
        with self.all_in:
            return self.all_in.wait_for(lambda: ids <= set(self.got), timeout)


def test_estop_acts_in_the_callers_thread_while_the_worker_is_busy_and_cancels_the_queue():
    gate = Gate(block=("slow",))
    d = CommandDispatcher(gate)
    answers = Answers()
    d.post(Command("target", [0.4], "slow"), answers)
    assert gate.entered.wait(30)  # the worker is inside a slow command
    d.post(Command("clear", None, "c1"), answers)
    d.post(Command("run", "start", "r1"), answers)
    d.post(Command("estop", None, "e1"), answers)
    # answered before the slow command finished, in this thread
    assert answers.got["e1"][0].accepted and gate.threads["e1"] == threading.current_thread().name
    for cid in ("c1", "r1"):  # sent before the e-stop: they can never undo it
        (r,) = answers.got[cid]
        assert not r.accepted and "cancelled by the e-stop (id 'e1')" in r.reason
    gate.release.set()
    assert answers.wait({"slow"})
    d.close()
    assert gate.order == ["e1", "slow"]
    assert all(len(v) == 1 for v in answers.got.values())


def test_stop_bypasses_the_queue_and_cancels_only_waiting_run_commands():
    gate = Gate(block=("slow",))
    d = CommandDispatcher(gate)
    answers = Answers()
    d.post(Command("mode", "ff", "slow"), answers)
    assert gate.entered.wait(30)
    d.post(Command("run", "start", "r1"), answers)
    d.post(Command("target", [0.3], "t1"), answers)
    d.post(Command("run", "stop", "s1"), answers)
    assert answers.got["s1"][0].accepted
    assert "cancelled by the stop" in answers.got["r1"][0].reason
    assert "t1" not in answers.got  # still waiting: a stop is not an e-stop
    gate.release.set()
    assert answers.wait({"slow", "t1"})
    d.close()
    assert gate.order == ["s1", "slow", "t1"]


def test_newest_target_wins_and_each_superseded_one_is_answered_once():
    gate = Gate(block=("slow",))
    d = CommandDispatcher(gate)
    answers = Answers()
    d.post(Command("gains", {"gamma": 1.0}, "slow"), answers)
    assert gate.entered.wait(30)
    for i in range(100):
        d.post(Command("target", [0.3 + i * 1e-3], f"t{i}"), answers)
    d.post(Command("gains", {"gamma": 2.0}, "g1"), answers)
    d.post(Command("gains", {"damping": 0.1}, "g2"), answers)  # other keys: both kept
    d.post(Command("gains", {"gamma": 3.0, "damping": 0.2}, "g3"), answers)  # covers g1
    assert d.pending() == 3  # t99, g2, g3: one command replaces one waiting command
    gate.release.set()
    ids = {f"t{i}" for i in range(100)} | {"slow", "g1", "g2", "g3"}
    assert answers.wait(ids)
    d.close()
    assert all(len(answers.got[i]) == 1 for i in ids)
    for i in range(99):
        r = answers.got[f"t{i}"][0]
        assert not r.accepted and r.reason.startswith("superseded by a newer target")
    assert answers.got["t99"][0].accepted
    # g3 replaced the first waiting gains command it covers (g1); g2 waited before it
    assert "superseded" in answers.got["g1"][0].reason
    assert gate.order == ["slow", "t99", "g2", "g3"]
    assert d.stats.superseded == 100


def test_a_full_queue_answers_busy_and_close_refuses_what_waits():
    gate = Gate(block=("slow",))
    d = CommandDispatcher(gate, max_pending=3)
    answers = Answers()
    d.post(Command("run", "start", "slow"), answers)
    assert gate.entered.wait(30)
    for i in range(5):  # run commands are never merged
        d.post(Command("run", "start", f"r{i}"), answers)
    assert [answers.got[f"r{i}"][0].reason.split(":")[0] for i in (3, 4)] == ["busy", "busy"]
    gate.release.set()
    d.close("service stopping: command not applied")
    ids = {"slow", "r0", "r1", "r2", "r3", "r4"}
    assert answers.wait(ids)
    assert all(len(answers.got[i]) == 1 for i in ids)
    d.post(Command("target", [0.1], "late"), answers)
    assert answers.got["late"][0].reason.startswith("service stopping")


def test_an_executor_that_raises_is_still_answered():
    def boom(c: Command) -> CommandResponse:
        raise RuntimeError("kaput")

    d = CommandDispatcher(boom)
    answers = Answers()
    d.post(Command("mode", "fb", "m1"), answers)
    assert answers.wait({"m1"})
    d.post(Command("estop", None, "e1"), answers)
    assert answers.wait({"e1"})
    d.close()
    for cid in ("m1", "e1"):
        assert "internal error: RuntimeError: kaput" in answers.got[cid][0].reason
