"""Safe under stress (issue 17): one validation for every entry point, targets that never strand
the arm, an e-stop that overtakes a flood of commands, shutdown that always completes.

Deterministic where the point allows it (the planner and the stepper in simulated time, the
rules); the rest runs the real service: the virtual device on a pty, a real MQTT broker, ``poise
run`` as a subprocess. Waits are for states, with generous timeouts, never for fixed times.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

from conftest import PATIENT_SETTINGS, PATIENT_WATCHDOG
from poise.api.bus import Command
from poise.api.state import State
from poise.controller.config import ConfigError, config_from_dict, load_config
from poise.controller.realtime import RealtimeController
from poise.controller.service import Controller
from poise.ik.statics import release, solve_statics
from poise.models.actuation import split
from poise.models.registry import ModelError, load_model, model_from_dict
from poise.motion.params import LiveParams
from poise.motion.planner import TargetPlan, approach_move, plan_target
from poise.motion.safety import SafetyLimits, limit_setpoint
from poise.motion.stepper import make_stepper
from poise.telemetry import commands
from poise.telemetry.client import Recorder, forget
from poise.telemetry.mqtt import MqttBridge, MqttConfig, static_params
from test_mqtt import broker_url  # noqa: F401 - the broker fixture

DT = 1 / 500


def drive(stepper, limits, target: float, plan, cycles: int = 5000) -> None:
    """The loop's update in simulated time (feed-forward): the approach to the plan's goal,
    then the per-cycle IK, every setpoint through the safety layer."""
    p = LiveParams(stepper.name, "dls", 2.0, 2.0, 20.0, 0.01, np.array([target]), "ff")
    move = None if plan.qa_goal is None else approach_move(
        plan, stepper.qa, limits.qa_min, limits.qa_max, limits.qa_rate)
    for k in range(1, cycles + 1):
        qa = stepper.propose(p, None, DT)
        if move is not None and (k - 1) * DT < move.duration:
            qa = move.at(k * DT)
        safe, _, _ = limit_setpoint(limits, stepper.qa, qa, DT)
        stepper.commit(safe)


@pytest.mark.parametrize("algorithm", ["alg1", "alg2"])
def test_unreachable_target_parks_at_the_closest_held_shape_and_later_targets_are_reached(
        algorithm):
    """The double pendulum sent to x̄ = 2.5 m (reach 2 m) folds towards its actuator limit;
    from there the per-cycle IK alone drives 0.45 m *into* the limit (a local minimum). The
    plan from several starts gets it back."""
    model = load_model("double_pendulum")
    limits = SafetyLimits.build(1, model.qa_min, model.qa_max, None, None, [0.5])
    stepper = make_stepper(algorithm, model)
    stepper.reset(release(model, np.zeros(2)).q, limits.qa_min, limits.qa_max)
    far = plan_target(model, np.array([2.5]), [stepper.q_bar], 2e-3)
    assert far.status == "unreachable" and "closest held configuration" in far.note()
    drive(stepper, limits, 2.5, far)
    x_max = float(stepper.x_bar[0])
    assert abs(x_max - float(model.fk(far.q_goal)[0])) < 2e-3  # as close as it can get
    assert x_max > 1.9 and stepper.qa[0] <= limits.qa_max[0]
    # parked folded past the top of h, at the tendon's limit (where the IK alone, pushing
    # on towards 2.5 m, leaves it)
    parked = solve_statics(model, limits.qa_max, split(model, stepper.q_bar)[1]).q
    stepper.reset(parked, limits.qa_min, limits.qa_max)

    # without the plan: the IK alone goes the wrong way from the parked, folded arm
    alone = make_stepper(algorithm, model)
    alone.reset(parked, limits.qa_min, limits.qa_max)
    drive(alone, limits, 0.45, TargetPlan(np.array([0.45])))  # a plan without a goal
    assert abs(alone.x_bar[0] - 0.45) > 0.5

    for target in (0.45, 0.3):
        plan = plan_target(model, np.array([target]), [stepper.q_bar], 2e-3)
        assert plan.reachable and plan.error < 2e-4 and plan.approach
        drive(stepper, limits, target, plan)
        assert abs(stepper.x_bar[0] - target) < 1e-5
        assert stepper.residual < 1e-6  # a shape the arm can hold


def test_one_rule_for_gains_rates_and_targets_on_every_entry_point(tmp_path):
    # configuration file
    conf = tmp_path / "run.toml"
    conf.write_text("[algorithm]\ngamma = 1e9\n")
    with pytest.raises(ConfigError, match=r"run.toml: algorithm.gamma = 1000000000.0: must be "
                       r"in \(0, 500\] 1/s"):
        load_config(conf)
    # command-line flags
    with pytest.raises(ConfigError, match=r"--rate \(loop.rate\) = 0.001: must be in \[10, "
                       r"1000\] Hz"):
        load_config(None, {"loop.rate": (0.001, "--rate")})
    with pytest.raises(ConfigError, match=r"algorithm.gamma = 200.0: must be in \(0, 100\]"):
        config_from_dict({"loop": {"rate": 100}, "algorithm": {"gamma": 200.0}}, "run.toml")
    # the Python API (Controller.submit) and MQTT's edge check, with the same limits
    ctl = Controller(config_from_dict({"algorithm": {"target": [0.5]}}))
    limits = commands.Limits.from_params({**static_params(ctl), **ctl.params.as_dict()})
    assert (limits.rate, limits.reach) == (500.0, 2.0)
    for name, value, reason in [("gains", {"gamma": 501.0}, "must be in (0, 500] 1/s"),
                                ("target", [1e300], "farther than 4 from the base"),
                                ("target", {"x": 1}, "must be a non-empty list"),
                                ("target", [float("nan")], "must be a finite number")]:
        api = ctl.submit(Command(name, value))
        edge = commands.parse(name, json.dumps({"id": "a", "value": value}).encode(), limits)
        assert not api.accepted and reason in api.reason, api
        assert not edge.accepted and reason in edge.reason, edge
    ctl.close()


def test_model_values_beyond_physical_ranges_are_refused_with_their_key():
    data = load_model("double_pendulum").describe()
    data["bodies"][0]["length"] = 1e300
    with pytest.raises(ModelError, match=r"bodies\[0\].length = 1e\+300.*<= 1e\+06"):
        model_from_dict(data, "my_robot.json")


def run_poise(*args: str, cwd, env_extra: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-m", "poise", "run", *PATIENT_WATCHDOG, *args],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


class Lines:
    """stderr of a process, read in a thread; ``wait_for`` a line containing a text."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()

    def text(self, timeout: float = 60) -> str:
        """Everything, once the stream has ended."""
        self.thread.join(timeout)
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: any(text in ln for ln in self.lines), timeout)


@pytest.mark.parametrize("args", [("--duration", "nan"), ("--duration", "0"),
                                  ("--duration", "-5"), ("--rate", "0.001"),
                                  ("--set", "algorithm.gamma=1e9"),
                                  ("--model", "panda")])  # a pose chain: no statics
def test_bad_durations_and_rates_exit_2_before_anything_starts(tmp_path, args):
    proc = run_poise("--no-mqtt", "--no-log", *args, cwd=tmp_path)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert "must be" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_running_stops_cleanly_with_the_final_state(tmp_path, sig):
    proc = run_poise("--no-mqtt", "--no-log", "--json-summary", cwd=tmp_path,
                     env_extra={"TMPDIR": str(tmp_path)})
    lines = Lines(proc.stderr)
    assert lines.wait_for("  running ", 120), "".join(lines.lines)  # a progress line
    proc.send_signal(sig)
    proc.wait(60)  # a hang would be a failure, however slow the machine
    summary = json.loads(proc.stdout.read())
    assert summary["state"] == "stopped"
    assert proc.returncode == (0 if summary["reached"] else 1)
    text = lines.text()
    assert f"{sig.name}: stopping" in text and "Traceback" not in text
    assert not list(tmp_path.glob("poise-sim-*"))  # the simulator's folder went with it


def test_a_signal_during_start_up_is_not_lost(tmp_path):
    proc = run_poise("--no-mqtt", "--no-log", cwd=tmp_path, env_extra={"TMPDIR": str(tmp_path)})
    lines = Lines(proc.stderr)
    assert lines.wait_for("poise run: double_pendulum", 120)  # configured, now starting
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    text = lines.text()
    assert proc.returncode in (0, 1, 3), text
    assert "Traceback" not in text
    assert not list(tmp_path.glob("poise-sim-*"))


def test_exit_code_says_fault_when_the_device_cannot_be_reached(tmp_path):
    proc = run_poise("--no-mqtt", "--no-log", "--device", str(tmp_path / "nope"),
                     "--duration", "1", cwd=tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert "cannot start" in err and out.startswith("state             fault")


@pytest.fixture
def mqtt_service(broker_url, request, sim_device):  # noqa: F811 - the imported fixture
    """A running controller on the virtual double pendulum, served over MQTT: in this process,
    or (parameter True) in a real-time process of its own, as ``poise run`` runs it."""
    dev = sim_device("double_pendulum")
    config = load_config(None, {"device.port": (dev.path, "test"),
                                "algorithm.target": ([0.5], "test"),
                                "loop.mode": ("ff", "test"), "mqtt.enabled": (False, "test"),
                                **{key: (value, "test") for key, value in
                                   PATIENT_SETTINGS.items()}})
    ctl = RealtimeController(config) if getattr(request, "param", False) else Controller(config)
    mc = MqttConfig.from_url(broker_url, robot_id="safety-" + uuid.uuid4().hex[:8])
    request.addfinalizer(lambda: forget(mc))
    bridge = MqttBridge(ctl, ctl.subscribe(), ctl.events(), mc, model=ctl.model.describe())
    bridge.start()
    assert bridge.wait_connected(30)
    assert ctl.start().accepted
    yield ctl, mc
    ctl.close()
    bridge.stop()


def responses(rec: Recorder, ids: set[str], timeout: float) -> dict[str, list[dict]]:
    """Every response received so far by id, once all of ``ids`` are in (or ``timeout``)."""
    end = time.monotonic() + timeout
    while True:
        got: dict[str, list[dict]] = {}
        for m in rec.named("response"):
            doc = m.json()
            got.setdefault(doc["id"], []).append(doc)
        if ids <= set(got) or time.monotonic() >= end:
            return got
        time.sleep(0.05)


@pytest.mark.parametrize("mqtt_service", [False, True], indirect=True,
                         ids=["in-process", "realtime-process"])
def test_estop_overtakes_a_flood_of_targets_and_every_command_is_answered_once(mqtt_service):
    ctl, mc = mqtt_service
    with Recorder(mc) as rec:
        assert rec.connected.wait(30)
        ids = {f"t{i}" for i in range(300)}
        for i in range(300):  # QoS 1, each acknowledged by the broker before the next
            rec.command("target", [0.3 + 0.001 * (i % 200)], id=f"t{i}")
        rec.command("estop", id="stop-now")
        got = responses(rec, ids | {"stop-now"}, timeout=120)
        time.sleep(0.5)  # a duplicate would come now
        got = responses(rec, ids | {"stop-now"}, timeout=0)
    assert ids | {"stop-now"} <= set(got)
    assert all(len(v) == 1 for v in got.values()), {k: v for k, v in got.items() if len(v) > 1}
    assert got["stop-now"][0]["accepted"] and ctl.state == State.ESTOP
    applied = [i for i in ids if got[i][0]["accepted"]]
    refused = [got[i][0]["reason"] for i in ids if not got[i][0]["accepted"]]
    assert len(applied) < 300  # coalesced: the newest waiting target wins
    assert all(r.startswith(("superseded by a newer target", "cancelled by the e-stop",
                             "e-stop latched")) for r in refused), set(refused)
    # nothing was applied after the e-stop latched
    events = ctl.history()
    t_estop = next(e.t for e in events if e.kind == "state" and e.data["to"] == "estop")
    late = [e for e in events if e.kind == "param" and e.t > t_estop]
    assert late == []
    assert any(e.kind == "info" and e.data.get("code") == "estop_acknowledged" for e in events)
    # the e-stop latch is not a barrier forever: clear and start are served again
    assert ctl.clear().accepted and ctl.start().accepted
    assert ctl.wait_for(State.RUNNING, 30)


def test_in_the_realtime_process_the_estop_is_taken_from_mqtt_by_that_process(
        broker_url, request, sim_device):  # noqa: F811 - the imported fixture
    """With the real-time process, the e-stop's MQTT connection lives in that process: the
    e-stop goes from the socket to the device there (the service process's own command path,
    which a flood keeps busy, is never used), answered once, counted by the bridge."""
    dev = sim_device("double_pendulum")
    config = load_config(None, {"device.port": (dev.path, "test"),
                                "algorithm.target": ([0.5], "test"),
                                "loop.mode": ("ff", "test"), "mqtt.enabled": (False, "test")})
    ctl = RealtimeController(config)
    request.addfinalizer(ctl.close)
    mc = MqttConfig.from_url(broker_url, robot_id="safety-rt-" + uuid.uuid4().hex[:8])
    request.addfinalizer(lambda: forget(mc))
    bridge = MqttBridge(ctl, ctl.subscribe(), ctl.events(), mc)
    request.addfinalizer(bridge.stop)
    bridge.start()
    assert bridge.wait_connected(30)
    assert ctl.start().accepted and ctl.wait_for(State.RUNNING, 30)
    parent_path = []
    bridge.intake.post = lambda c, r: parent_path.append(c)  # the service process's way: unused
    with Recorder(mc) as rec:
        assert rec.connected.wait(30)
        rec.command("estop", id="child-stop")
        got = responses(rec, {"child-stop"}, timeout=60)
        assert ctl.wait_for(State.ESTOP, 30)
        rec.publish(f"poise/{mc.robot_id}/set/estop", b"\xff\xfe")  # not UTF-8: refused
        end = time.monotonic() + 60
        while len(rec.named("response")) < 2 and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(0.5)  # a duplicate would come now
        got = responses(rec, {"child-stop"}, timeout=0)
        refusals = [m.json() for m in rec.named("response") if m.json()["id"] == ""]
    assert [r["accepted"] for r in got["child-stop"]] == [True]
    assert [r["accepted"] for r in refusals] == [False]
    assert parent_path == [] and bridge.stats.commands == 2
    assert (bridge.stats.accepted, bridge.stats.refused) == (1, 1)
    # a call the parent sends after it learned of the e-stop is served, not cancelled
    assert ctl.clear().accepted and ctl.state == State.READY


def test_unreachable_target_is_announced_and_the_arm_comes_back(mqtt_service):
    ctl, mc = mqtt_service
    with Recorder(mc) as rec:
        assert rec.connected.wait(30)
        rec.command("target", [2.5], id="far")
        far = responses(rec, {"far"}, 60)["far"][0]
        assert far["accepted"] and far["reason"].startswith("unreachable")
        state = rec.wait_for(lambda m: m.name == "$state" and
                             m.json().get("target") == "unreachable", 30)
        assert state is not None and state.json()["state"] == "running"
        assert "closest held configuration" in state.json()["reason"]
        assert ctl.summary()["target_status"] == "unreachable"
        rec.command("target", [0.45], id="back")
        back = responses(rec, {"back"}, 60)["back"][0]
        assert back["accepted"] and back["reason"] == ""
        assert rec.wait_for(lambda m: m.name == "$state" and
                            m.json().get("target") == "reachable", 30) is not None
    # the prediction reaches it (feed-forward); the arm follows it
    end = time.monotonic() + 120
    while time.monotonic() < end and ctl.summary()["task_error_predicted"] > 1e-4:
        time.sleep(0.1)
    s = ctl.summary()
    assert s["task_error_predicted"] < 1e-4 and s["state"] == "running", s


def test_the_stress_bench_tells_an_interrupt_in_cpythons_start_up_from_one_in_poise():
    """A SIGINT in CPython's own start-up (before poise's first line) gives Python's traceback,
    which no program can prevent; ``poise bench stress`` reports it apart from poise's own."""
    from poise.telemetry.stress import interpreter_startup_interrupt

    proc = subprocess.run([sys.executable, "-c",
                           "import os, signal; os.kill(os.getpid(), signal.SIGINT)"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr
    assert interpreter_startup_interrupt(proc.stderr)
    inside = proc.stderr.replace('File "<string>"',
                                 f'File "{os.sep}x{os.sep}poise{os.sep}cli{os.sep}run.py"')
    assert not interpreter_startup_interrupt(inside)
    assert not interpreter_startup_interrupt("Traceback ...\nValueError: x\n")


def test_the_stress_bench_counts_a_command_by_when_it_took_effect_not_when_it_was_answered():
    """A target adopted under the lock before the e-stop latched, whose ``command`` event (its
    answer's record, made after the lock) comes after the latch, is not a command accepted
    after the e-stop; a change announced after the latch is, and so is leaving ``estop``."""
    from poise.api.bus import Event
    from poise.telemetry.stress_estop import _after_latch

    before = [Event(1.000, "param", {"name": "target", "id": "u-1"}),
              Event(1.001, "state", {"from": "running", "to": "estop"}),
              Event(1.002, "command", {"name": "target", "id": "u-1", "accepted": True})]
    assert _after_latch(before, {"u-1"}) == (0, 0)
    after = [*before, Event(1.003, "param", {"name": "target", "id": "u-2"}),
             Event(1.004, "state", {"from": "estop", "to": "ready"})]
    assert _after_latch(after, {"u-1", "u-2"}) == (1, 1)
    assert _after_latch(after, {"u-1"}) == (0, 1)  # only the flood's own ids count
    assert _after_latch(before[:1], {"u-1"}) == (0, 0)  # no latch: nothing after it
