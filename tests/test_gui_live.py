"""The dashboard live: a real Qt application (offscreen) on a real MQTT broker, against the real
service (the :class:`~poise.controller.Controller` with :func:`poise.telemetry.service.attach`,
each robot in its own process): on the simulated robot in that process (``device.port =
"inprocess"``) for the dashboard's own behaviour, and on the virtual device behind its pty
(``"sim"``) for the drag-and-e-stop test. No mocks: what the operator sees is what these
check."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import getpass
import json
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest
from pytestqt.exceptions import TimeoutError as QtTimeout

from conftest import PATIENT_SETTINGS
from poise.gui.app import application
from poise.gui.client import MqttLink
from poise.gui.window import DashboardWindow

MOSQUITTO = shutil.which("mosquitto") or shutil.which("/usr/sbin/mosquitto")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class Broker:
    """A private broker on a free loopback port: ``mosquitto`` when installed, else the embedded
    broker of :mod:`poise.telemetry.broker`. ``kill()`` then ``start()`` reuses the port."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.port = _free_port()
        self.tmp = tmp
        self._proc: subprocess.Popen | None = None
        self._embedded = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> Broker:
        if MOSQUITTO:
            conf = self.tmp / f"mosquitto-{self.port}.conf"
            # as root, mosquitto would otherwise switch to user "mosquitto"
            conf.write_text(f"user {getpass.getuser()}\nlistener {self.port} 127.0.0.1\n"
                            "allow_anonymous true\n")
            self._proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        else:
            from poise.telemetry.broker import EmbeddedBroker

            self._embedded = EmbeddedBroker(self.port, mode="process").start()
        assert _listening(self.port, 10), "the test broker did not start"
        return self

    def kill(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(5)
            self._proc = None
        if self._embedded is not None:
            self._embedded.kill()
            self._embedded.stop()
            self._embedded = None


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.kill()


@pytest.fixture
def robots(broker, tmp_path):
    """``robots(model=...)`` starts the real service (:data:`SERVICE`) on the simulated robot
    in its process, with a fresh id, on the test broker; returns it once it runs."""
    started: list[Service] = []

    def start(model: str = "double_pendulum") -> Service:
        service = Service(broker.url, f"gui-{uuid.uuid4().hex[:8]}", tmp_path, model=model,
                          port="inprocess", rate=200.0)
        started.append(service)
        return service.wait_running()

    yield start
    retained = Retained(broker)
    for service in started:
        service.stop()
        retained.forget(service.robot)
    retained.clear()


@pytest.fixture
def dashboard(qtbot, broker):
    """``dashboard(robot=None)``: a shown dashboard window with its MQTT link started."""
    application()
    windows: list[DashboardWindow] = []

    def open_(robot: str | None = None) -> DashboardWindow:
        link = MqttLink(broker.url, robot, max_backoff=1)
        window = DashboardWindow(link, robot)
        qtbot.addWidget(window)
        link.start()
        window.show()
        qtbot.waitExposed(window)
        windows.append(window)
        return window

    yield open_
    for window in windows:
        window.close()


#: The service as an operator runs it, in its own process: the Controller API on a device
#: (``[device] port``) and its telemetry (:func:`poise.telemetry.service.attach`: the MQTT bridge).
#: Unlike the timed ``poise run`` demo it stays up after an e-stop, so the latch and the refusals
#: can be seen. Arguments: broker URL, robot id, model, device port, loop rate [Hz]. The
#: device watchdog and sensor timeout are patient (``conftest.PATIENT_SETTINGS``): these
#: tests are not about them, and a clean-clone CI run on 2 cores faulted the drag test with
#: "no setpoint reached the device for 101 ms" while a sibling test compiled kernels.
SERVICE = f"PATIENT = {PATIENT_SETTINGS!r}\n" + """
import sys
from poise.controller import Controller, load_config
from poise.telemetry.service import attach
url, robot, model, port, rate = sys.argv[1:6]
overrides = {"mqtt.url": (url, "test"), "mqtt.robot_id": (robot, "test"),
             "model.name": (model, "test"), "device.port": (port, "test"),
             "loop.rate": (float(rate), "test")}
overrides.update({key: (value, "test") for key, value in PATIENT.items()})
if model == "double_pendulum":
    overrides["algorithm.target"] = ([0.5], "test")
controller = Controller(load_config(None, overrides))
telemetry = attach(controller, out=None)
print("start:", controller.start("test start"), flush=True)
try:
    sys.stdin.read()  # until the test closes our stdin
finally:
    controller.close()
    telemetry.stop()
"""


class Service:
    """The real service (:data:`SERVICE`) for robot ``robot`` in its own process; its output
    goes to ``<tmp>/<robot>.log``."""

    def __init__(self, url: str, robot: str, tmp: pathlib.Path, *, model: str, port: str,
                 rate: float) -> None:
        self.robot = robot
        self.log = tmp / f"{robot}.log"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", SERVICE, url, robot, model, port, str(rate)],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)

    def wait_running(self, timeout: float = 120.0) -> Service:
        """Wait until the service says it started (a loaded machine may take long)."""
        end = time.monotonic() + timeout
        while not (line := self._start_line()):  # the whole line: it may arrive in pieces
            if self.proc.poll() is not None or time.monotonic() > end:
                pytest.fail(f"the service did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        assert "accepted=True" in line, self.log.read_text()[-2000:]
        return self

    def _start_line(self) -> str:
        """The service's whole ``start:`` line (ended by its newline), or ''."""
        text = self.log.read_text()
        at = text.find("start:")
        end = text.find("\n", at)
        return text[at:end] if at >= 0 and end >= 0 else ""

    def kill(self) -> None:
        """Die without a word (SIGKILL): the broker publishes its last will, ``lost``."""
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        """Stop as an operator does (its retained state: ``offline``)."""
        if self.proc.poll() is not None:
            return
        self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()


#: How long a state the dashboard follows may take to show [ms]: generous for a busy machine
#: (a clean-clone run failed in the robot-following test with 10 s waits; its report was
#: lost to a crash in the next test, so the cause is not known for certain).
WAIT_MS = 30_000


def samples(window: DashboardWindow) -> int:
    return len(window.buffer) if window.buffer is not None else 0


def test_curves_arm_and_plane_follow_a_publishing_robot(qtbot, robots, dashboard):
    robot = robots()
    window = dashboard(robot.robot)
    qtbot.waitUntil(lambda: samples(window) > 100, timeout=5000)
    qtbot.waitUntil(lambda: window.plane.data is not None, timeout=5000)
    window.frame()
    assert all(len(c.item.getOriginalDataset()[0]) > 50 for c in window.curves.curves)
    assert len(window.curves.curves) == 12
    assert window.arm.model is not None and window.arm.model.name == "double_pendulum"
    assert len(window.arm.arm.getData()[0]) > 0  # the arm is drawn from q
    assert window.plane.isVisible() and window.plane.data.E_stable
    assert "running" in window.controls.state_label.text()
    assert window.controls.robots.currentData() == robot.robot
    assert "connected" in window.controls.broker_label.text()


def test_every_command_shows_whether_it_was_accepted_or_why_refused(qtbot, robots, dashboard):
    robot = robots()
    window = dashboard(robot.robot)
    qtbot.waitUntil(lambda: samples(window) > 0, timeout=5000)
    window.controls.mode.setCurrentText("ff")  # the service runs "fb"
    window.controls.mode.activated.emit(window.controls.mode.currentIndex())
    qtbot.waitUntil(lambda: len(window.answers) == 1, timeout=WAIT_MS)
    assert window.answers[0]["accepted"] and "accepted" in window.controls.answer.text()
    window.controls.gains["gamma"].setValue(500.0)  # above the loop rate, 200 Hz
    qtbot.mouseClick(window.controls.apply_gains, _left())
    qtbot.waitUntil(lambda: len(window.answers) == 2, timeout=WAIT_MS)
    assert not window.answers[1]["accepted"]
    assert "gains.gamma = 500.0: must be in (0, 200] 1/s" in window.controls.answer.text()
    assert window.controls.log.count() >= 2


def test_robot_selector_switches_robots(qtbot, robots, dashboard):
    first, second = robots("double_pendulum"), robots("tendon_3link")
    window = dashboard(first.robot)
    combo = window.controls.robots
    qtbot.waitUntil(lambda: combo.findData(second.robot) >= 0 and samples(window) > 0,
                    timeout=5000)
    assert window.buffer.layout.n == 2
    combo.setCurrentIndex(combo.findData(second.robot))
    combo.activated.emit(combo.currentIndex())
    qtbot.waitUntil(lambda: samples(window) > 0 and window.buffer.layout.n == 3, timeout=5000)
    assert window.link.robot == second.robot
    assert window.plane.isHidden()  # three coordinates: no configuration plane
    qtbot.waitUntil(lambda: window.arm.model is not None
                    and window.arm.model.name == "tendon_3link", timeout=3000)


def test_reconnects_by_itself_after_the_broker_restarts(qtbot, broker, robots, dashboard):
    robot = robots()
    window = dashboard(robot.robot)
    qtbot.waitUntil(lambda: samples(window) > 0, timeout=5000)
    broker.kill()
    qtbot.waitUntil(lambda: not window.link.connected, timeout=5000)
    assert window.send("mode", "fb") is None  # refused locally, and said so
    assert "not sent" in window.controls.answer.text()
    broker.start()
    qtbot.waitUntil(lambda: window.link.connected, timeout=10_000)
    total = window.buffer.samples
    qtbot.waitUntil(lambda: window.buffer is not None and window.buffer.samples > total + 20,
                    timeout=10_000)
    assert "connected" in window.controls.broker_label.text()


def test_screenshot_command_saves_a_picture_of_the_window(robots, broker, tmp_path):
    robot = robots()
    out = tmp_path / "dash.png"
    proc = subprocess.run(
        [sys.executable, "-m", "poise", "dashboard", "--mqtt", broker.url, "--robot",
         robot.robot, "--screenshot", str(out), "--after", "2", "--size", "1200x800"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stderr
    from PySide6 import QtGui

    image = QtGui.QImage(str(out))
    assert (image.width(), image.height()) == (1200, 800)


class Retained:
    """Retained ``$state`` (and ``model``) of robots whose service is not running, as a stopped
    service leaves them on a broker; everything published is erased by :meth:`clear`."""

    def __init__(self, broker: Broker) -> None:
        import paho.mqtt.client as paho
        from paho.mqtt.enums import CallbackAPIVersion

        self.client = paho.Client(CallbackAPIVersion.VERSION2,
                                  client_id=f"retained-{uuid.uuid4().hex[:8]}")
        self.client.connect("127.0.0.1", broker.port)
        self.client.loop_start()
        self.topics: set[str] = set()

    def publish(self, robot: str, leaf: str, payload: object) -> None:
        name = f"poise/{robot}/{leaf}"
        self.client.publish(name, json.dumps(payload), qos=1, retain=True).wait_for_publish(10)
        self.topics.add(name)

    def forget(self, robot: str) -> None:
        """Erase whatever is retained for ``robot`` (also what its own service left)."""
        self.topics.update(f"poise/{robot}/{leaf}" for leaf in ("$state", "model", "params"))

    def clear(self) -> None:
        for name in self.topics:
            self.client.publish(name, b"", qos=1, retain=True).wait_for_publish(10)
        self.client.disconnect()
        self.client.loop_stop()


def test_without_robot_the_dashboard_follows_live_robots_never_stale_ones(qtbot, broker,
                                                                          robots, dashboard):
    """The issue: started without ``--robot`` the dashboard followed an offline robot's retained
    topics. It must list offline and lost robots but follow only a live one, and move to a live
    robot when one appears, until the operator picks a robot."""
    from poise.models import load_model

    retained = Retained(broker)
    offline, lost = f"gui-off-{uuid.uuid4().hex[:8]}", f"gui-lost-{uuid.uuid4().hex[:8]}"
    try:
        retained.publish(offline, "$state", {"state": "offline", "reason": "stopped"})
        retained.publish(offline, "model", load_model("double_pendulum").describe())
        retained.publish(lost, "$state", {"state": "lost"})
        window = dashboard(None)
        combo = window.controls.robots
        qtbot.waitUntil(lambda: combo.findData(offline) >= 0 and combo.findData(lost) >= 0,
                        timeout=WAIT_MS)
        assert window.link.robot is None and window.arm.model is None  # listed, not followed

        first = robots()
        retained.forget(first.robot)
        # its samples and its ``$state`` travel apart: wait for both (a busy machine orders them
        # either way)
        qtbot.waitUntil(lambda: window.link.robot == first.robot and samples(window) > 0
                        and "running" in window.controls.state_label.text(), timeout=WAIT_MS)

        # the followed robot goes (its last will: lost); with no live robot it stays on screen
        first.kill()
        qtbot.waitUntil(lambda: window.robot_states.get(first.robot) == "lost", timeout=WAIT_MS)
        assert window.link.robot == first.robot
        # ... until a live robot appears
        second = robots("tendon_3link")
        qtbot.waitUntil(lambda: window.link.robot == second.robot and samples(window) > 0
                        and window.buffer.layout.n == 3, timeout=WAIT_MS)

        # the operator's choice wins: no more switching by itself, even to an offline robot
        combo.setCurrentIndex(combo.findData(offline))
        combo.activated.emit(combo.currentIndex())
        assert window.link.robot == offline and not window.auto_select
        third = robots()
        qtbot.waitUntil(lambda: window.robot_states.get(third.robot) == "running",
                        timeout=WAIT_MS)
        assert window.link.robot == offline
        qtbot.waitUntil(lambda: window.arm.model is not None, timeout=WAIT_MS)  # its retained model
    finally:
        retained.clear()


def _left():
    from PySide6 import QtCore

    return QtCore.Qt.MouseButton.LeftButton


# --------------------------------------------------------------------- the real service


@pytest.fixture
def service(broker, tmp_path):
    """The real service on the virtual device (``poise device sim`` on a pty) on the test
    broker: ``(robot_id, log_path)``."""
    robot = Service(broker.url, f"svc-{uuid.uuid4().hex[:8]}", tmp_path, model="double_pendulum",
                    port="sim", rate=500.0)
    yield robot.robot, robot.log
    robot.stop()


def test_against_the_service_drag_moves_the_arm_and_estop_latches(qtbot, dashboard, service):
    from poise.gui.window import STREAMED
    from test_gui import drag

    robot, log = service
    window = dashboard(robot)
    try:  # generous bound: a loaded 2-core machine can take long to start the service
        qtbot.waitUntil(lambda: samples(window) > 50 and window.arm.handle is not None
                        and "running" in window.controls.state_label.text(), timeout=45_000)
    except QtTimeout as exc:
        pytest.fail(f"the service never streamed ({exc}): {log.read_text()[-2000:]}")
    # curves receive the service's telemetry (a frame at a time, as the timer draws them: on
    # a loaded machine the newest window may hold few samples at first)

    def curves_filled() -> bool:
        window.frame()
        return all(len(c.item.getOriginalDataset()[0]) > 10 for c in window.curves.curves)

    qtbot.waitUntil(curves_filled, timeout=30_000)
    model = window.arm.model
    assert window.arm.target() == [pytest.approx(0.5)]

    # drag the target from x̄ = 0.5 to ≈ 0.3 with the mouse: live drag streams its positions
    assert window.live_drag.isChecked()

    def sent() -> bool:
        return window.streamed_answers > 0 or any(
            v[0] == STREAMED for v in window.pending.values())

    for _ in range(3):  # on a busy machine the view may rescale under the press: drag again
        window.frame()
        drag(qtbot, window.arm, window.arm.handle_scene_pos(), dx_view=-0.2)
        try:
            qtbot.waitUntil(sent, timeout=5000)
            break
        except QtTimeout:
            continue
    assert sent(), "three drags from the target handle sent no streamed target"
    # every sample answered at once and accepted: none lands among the (shown) answers
    qtbot.waitUntil(lambda: not any(v[0] == STREAMED for v in window.pending.values()),
                    timeout=60_000)
    assert window.streamed_answers >= 2 and window.answers == [], window.answers
    goal = window.arm.target()[0]
    assert goal == pytest.approx(0.3, abs=0.03)

    def tip_error() -> float:
        q = window.buffer.latest("q")
        return abs(float(model.fk(q)[0]) - goal)

    start_error = abs(0.5 - goal)
    try:
        qtbot.waitUntil(lambda: tip_error() < 0.25 * start_error, timeout=90_000)
    except QtTimeout:
        pytest.fail(f"the arm did not follow the dragged target {goal:.3f} (tip error "
                    f"{tip_error():.3f}, state {window.controls.state_label.text()!r}, "
                    f"{samples(window)} samples): {log.read_text()[-2000:]}")

    # the e-stop latches the service; commands are then refused with the reason
    qtbot.mouseClick(window.controls.estop, _left())
    qtbot.waitUntil(lambda: len(window.answers) == 1, timeout=30_000)
    assert window.answers[0]["command"] == "estop" and window.answers[0]["accepted"]
    qtbot.waitUntil(lambda: "estop" in window.controls.state_label.text(), timeout=30_000)
    window.send("target", [0.4])
    qtbot.waitUntil(lambda: len(window.answers) == 2, timeout=30_000)
    refused = window.answers[1]
    assert not refused["accepted"] and refused["reason"]
    assert "refused" in window.controls.answer.text()
