"""A stand-in robot service that speaks the MQTT topic contract (for tests and offline demos).

It is *not* the controller: no device, no safety layer, no real-time loop. It runs Algorithm 1
(:func:`poise.ik.held.algorithm1_step` + :func:`poise.ik.statics.solve_statics`) on a model in
a plain thread, lets the "measured" ``q`` lag the predicted ``q̄`` by a first-order filter, and
publishes what the service publishes: retained ``$state`` (last will ``lost``), ``model`` and
``params``; ``telemetry`` batches; a ``response`` to every ``set/<name>`` command (validated,
refused with a reason when out of range or when the e-stop is latched); ``events``.

Run one from a shell::

    python -m poise.gui.standin --mqtt mqtt://127.0.0.1:1883 --robot demo
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from typing import Any

import numpy as np
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from poise.api.rules import ALGORITHMS, MODES
from poise.api.topics import split_topic, topic
from poise.gui.broker import DEFAULT_URL, BrokerURL
from poise.ik.held import algorithm1_step
from poise.ik.statics import solve_statics
from poise.models import load_model
from poise.models.actuation import Gu, split

RETAINED = ("$state", "params", "model")


class StandInService:
    """A robot on the broker, driven by Algorithm 1 in a thread.

    Args:
        url: broker URL.
        robot: robot id (topics under ``poise/<robot>/``).
        model: built-in model name.
        rate: control-loop rate [Hz]; telemetry goes out in batches at ``batch_rate`` [Hz].
        lag: time constant of the measured ``q`` following ``q̄`` [s].
    """

    def __init__(self, url: str = DEFAULT_URL, robot: str = "standin", *,
                 model: str = "double_pendulum", rate: float = 200.0,
                 batch_rate: float = 50.0, lag: float = 0.15, autostart: bool = True) -> None:
        self.url = BrokerURL.parse(url)
        self.robot = robot
        self.model = load_model(model)
        self.rate, self.batch_rate, self.lag = rate, batch_rate, lag
        self.state = "idle"
        self.reason = "waiting for start"
        self.params: dict[str, Any] = {
            "algorithm": "alg1", "mode": "ff", "rate": rate, "model": self.model.name,
            "n": self.model.n, "m": self.model.m, "task_dim": self.model.task_dim,
            "gains": {"gamma": 4.0, "gamma_z": 4.0, "gamma_e": 4.0, "damping": 1e-3},
            "algorithms": list(ALGORITHMS),
        }
        start = solve_statics(self.model, np.zeros(self.model.m),
                              np.zeros(self.model.n - self.model.m))
        self.statics = start
        self.q = start.q.copy()
        self.params["target"] = [float(v) for v in self.model.fk(start.q)]
        self.commands: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seq = 0
        self._client = paho.Client(CallbackAPIVersion.VERSION2,
                                   client_id=f"poise-standin-{robot}")
        self._client.will_set(topic(robot, "$state"), json.dumps({"state": "lost"}), 1, True)
        self._client.on_connect = self._on_connect
        self._client.on_message = self._on_message
        if autostart:
            self.state, self.reason = "running", "stand-in started"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> StandInService:
        """Connect and start publishing (returns self)."""
        self._client.connect(self.url.host, self.url.port, keepalive=10)
        self._client.loop_start()
        self._thread = threading.Thread(target=self._loop, name=f"standin-{self.robot}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, *, clear_retained: bool = True) -> None:
        """Stop publishing; by default erase the retained topics so nothing stale is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if clear_retained:
            for leaf in RETAINED:
                self._client.publish(topic(self.robot, leaf), b"", qos=1, retain=True)
        else:
            self._publish("$state", {"state": "lost"}, retain=True)
        time.sleep(0.1)
        self._client.disconnect()
        self._client.loop_stop()

    def __enter__(self) -> StandInService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ MQTT

    def _publish(self, leaf: str, payload: Any, *, retain: bool = False, qos: int = 0) -> None:
        self._client.publish(topic(self.robot, leaf), json.dumps(payload), qos=qos,
                             retain=retain)

    def _publish_state(self) -> None:
        self._publish("$state", {"state": self.state, "reason": self.reason, "t": time.time(),
                                 "device": "stand-in (no device)", "broker": str(self.url)},
                      retain=True, qos=1)

    def _on_connect(self, client, userdata, flags, reason_code, properties=None) -> None:
        client.subscribe(topic(self.robot, "set/+"), qos=1)
        self._publish_state()
        self._publish("model", self.model.describe(), retain=True, qos=1)
        self._publish("params", self.params, retain=True, qos=1)

    def _on_message(self, client, userdata, msg) -> None:
        where = split_topic(msg.topic)
        if where is None or not where[1].startswith("set/"):
            return
        name = where[1][4:]
        try:
            data = json.loads(msg.payload)
            cid, value = str(data.get("id", "")), data.get("value")
        except (ValueError, AttributeError):
            cid, value, data = "", None, None
        with self._lock:
            accepted, reason = (False, "payload is not {id, value} JSON") if data is None \
                else self._apply(name, value)
        self.commands.append({"id": cid, "command": name, "value": value,
                              "accepted": accepted})
        self._publish("response", {"id": cid, "command": name, "accepted": accepted,
                                   "reason": reason}, qos=1)
        if accepted:
            self._publish("params", self.params, retain=True, qos=1)
            self._publish("events", {"t": time.time(), "kind": "command",
                                     "data": {"command": name, "value": value}})

    def _apply(self, name: str, value: Any) -> tuple[bool, str]:
        """Validate and apply one command (called with the lock held)."""
        if self.state == "estop" and name not in ("clear", "estop"):
            return False, "e-stop latched: send clear first"
        if name == "estop":
            self._set_state("estop", "e-stop pressed")
            return True, ""
        if name == "clear":
            if self.state != "estop":
                return False, f"nothing to clear (state {self.state})"
            self._set_state("idle", "cleared; send start to re-arm")
            return True, ""
        if name == "run":
            if value not in ("start", "stop"):
                return False, "value must be 'start' or 'stop'"
            self._set_state(*(("running", "started") if value == "start"
                              else ("idle", "stopped")))
            return True, ""
        if name == "target":
            return self._set_target(value)
        if name == "gains":
            if not isinstance(value, dict) or not value:
                return False, "value must be an object of gains"
            for key, v in value.items():
                if key not in self.params["gains"]:
                    return False, f"unknown gain {key!r}"
                if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                    return False, f"{key} must be a finite number ≥ 0"
                if key != "damping" and not 0 < v <= 100:
                    return False, f"{key} must be in (0, 100]"
            self.params["gains"].update({k: float(v) for k, v in value.items()})
            return True, ""
        if name == "algorithm":
            if value not in self.params["algorithms"]:
                return False, f"unknown algorithm {value!r}"
            self.params["algorithm"] = value
            return True, ""
        if name == "mode":
            if value not in MODES:
                return False, "mode must be 'ff' or 'fb'"
            self.params["mode"] = value
            return True, ""
        return False, f"unknown command {name!r}"

    def _set_target(self, value: Any) -> tuple[bool, str]:
        dim = self.model.task_dim
        if not isinstance(value, list) or len(value) != dim:
            return False, f"target must be a list of {dim} numbers"
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in value):
            return False, "target must be finite numbers"
        reach = 0.95 * sum(float(np.hypot(*(p[-1] - p[0])))
                           for p in self.model.body_points(np.zeros(self.model.n)))
        if float(np.linalg.norm(value)) > reach:
            return False, f"target out of reach (|x̄| ≤ {reach:.2f})"
        self.params["target"] = [float(v) for v in value]
        return True, ""

    def _set_state(self, state: str, reason: str) -> None:
        old, self.state, self.reason = self.state, state, reason
        self._publish_state()
        self._publish("events", {"t": time.time(), "kind": "state",
                                 "data": {"from": old, "to": state, "cause": reason}})

    # ------------------------------------------------------------------ loop

    def _step(self, dt: float) -> dict[str, Any]:
        model = self.model
        with self._lock:
            running = self.state == "running"
            target = np.array(self.params["target"])
            gain = self.params["gains"]["gamma"]
            damping = self.params["gains"]["damping"]
        t0 = time.perf_counter()
        if running:
            qa, _, _ = algorithm1_step(model, self.statics, target, damping=damping,
                                       gain=gain, dt=dt)
            qa = np.clip(qa, model.qa_min, model.qa_max)
            self.statics = solve_statics(model, qa, self.statics.qu)
        compute = (time.perf_counter() - t0) * 1e6
        q_bar = self.statics.q
        self.q = self.q + (q_bar - self.q) * min(1.0, dt / self.lag)
        x = model.fk(self.q if self.params["mode"] == "fb" else q_bar)
        qa_ref = split(model, q_bar)[0]
        return {"t": time.time(), "q": self.q.tolist(), "q_bar": q_bar.tolist(),
                "qa_ref": qa_ref.tolist(), "target": target.tolist(), "x": x.tolist(),
                "task_error": float(np.linalg.norm(target - x)),
                "statics_residual": float(np.linalg.norm(Gu(model, q_bar))),
                "latency_us": 80.0 + 20.0 * np.random.rand(),
                "lateness_us": 10.0 + 30.0 * np.random.rand() ** 4,
                "compute_us": compute}

    def _loop(self) -> None:
        dt = 1.0 / self.rate
        per_batch = max(1, round(self.rate / self.batch_rate))
        samples: list[dict[str, Any]] = []
        next_t = time.monotonic()
        while not self._stop.is_set():
            samples.append(self._step(dt))
            if len(samples) >= per_batch:
                batch: dict[str, Any] = {"seq0": self._seq, "n": len(samples), "dropped": 0,
                                         "state": self.state}
                for key in samples[0]:
                    batch[key] = [s[key] for s in samples]
                self._seq += len(samples)
                self._publish("telemetry", batch)
                samples = []
            next_t += dt
            delay = next_t - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_t = time.monotonic()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a stand-in poise robot on an MQTT broker")
    parser.add_argument("--mqtt", default=DEFAULT_URL, metavar="URL")
    parser.add_argument("--robot", default="standin", metavar="ID")
    parser.add_argument("--model", default="double_pendulum", metavar="NAME")
    parser.add_argument("--duration", type=float, default=math.inf, metavar="S")
    args = parser.parse_args(argv)
    service = StandInService(args.mqtt, args.robot, model=args.model).start()
    print(f"stand-in robot {args.robot!r} ({args.model}) on {service.url}", flush=True)
    try:
        time.sleep(args.duration) if math.isfinite(args.duration) else threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
