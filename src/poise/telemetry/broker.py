"""An embedded MQTT broker on loopback (amqtt), for ``poise run`` without a configured broker.

Two ways to run it, same broker:

* ``mode="process"`` (default): ``python -m poise.telemetry.broker --port P`` in a child
  process. The broker's Python work (parsing, routing, JSON-free but busy) then holds *another*
  interpreter's GIL, so it cannot delay the control thread; ``bench/telemetry.py`` measures the
  difference (see ``docs/mqtt.md``). The child dies with the process that launched it, even
  when that one is SIGKILLed (``--parent-pid``, :mod:`poise.firmware_bridge.lifetime`): an
  orphaned broker would hold its port for good.
* ``mode="thread"``: the broker on its own asyncio loop in a thread of this process (no child
  process; costs the control thread GIL contention while it relays).

Both listen on ``127.0.0.1`` only and allow anonymous clients: anything that can reach the
loopback interface of this machine can read telemetry and send commands. Use a real broker with
authentication (Mosquitto, see ``docs/mqtt.md``) when that is not acceptable.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

DEFAULT_PORT = 1883


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True if nothing listens on ``host:port`` and we may bind it."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def wait_listening(host: str, port: int, timeout: float) -> bool:
    """Wait until a TCP connect to ``host:port`` succeeds; True if it did in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
            return True
        time.sleep(0.02)
    return False


def embedded_broker_needed(config: Any, *, mqtt: bool | None = None,
                           url: str | None = None) -> bool:
    """Whether MQTT for ``config`` (a :class:`~poise.controller.config.Config`) runs on an
    embedded broker: MQTT enabled (``mqtt`` overrides ``[mqtt] enabled``) and no broker
    address (``url`` overrides ``[mqtt] url``; ``[mqtt] embedded`` means none was given)."""
    enabled = config.mqtt.enabled if mqtt is None else mqtt
    return bool(enabled) and (url or (None if config.mqtt.embedded else config.mqtt.url)) is None


def amqtt_config(host: str, port: int) -> dict[str, Any]:
    """amqtt configuration: one TCP listener, anonymous clients, no logging or $SYS plugins."""
    return {
        "listeners": {"default": {"type": "tcp", "bind": f"{host}:{port}"}},
        "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin":
                    {"allow_anonymous": True}},
    }


async def serve(host: str, port: int, stop: asyncio.Event | None = None) -> None:
    """Run an amqtt broker on ``host:port`` until ``stop`` is set (forever without one)."""
    from amqtt.broker import Broker

    # amqtt logs every probe connection and client hang-up at ERROR: keep only real failures
    logging.getLogger("amqtt").setLevel(logging.CRITICAL)
    logging.getLogger("transitions").setLevel(logging.WARNING)
    broker = Broker(amqtt_config(host, port))
    await broker.start()
    try:
        await (stop or asyncio.Event()).wait()
    finally:
        await broker.shutdown()


class EmbeddedBroker:
    """An amqtt broker on loopback, in a child process (default) or a thread.

    Args:
        port: TCP port; 0 picks 1883 if free, else any free port.
        mode: ``"process"`` or ``"thread"``.
        host: listening address (keep the loopback default unless you mean it).
    """

    def __init__(self, port: int = 0, mode: str = "process", host: str = "127.0.0.1") -> None:
        if mode not in ("process", "thread"):
            raise ValueError(f"broker mode {mode!r}: use 'process' or 'thread'")
        self.host = host
        self.port = port or (DEFAULT_PORT if port_is_free(DEFAULT_PORT, host) else free_port(host))
        self.mode = mode
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None
        self._thread: threading.Thread | None = None
        self._ready: threading.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        """``mqtt://host:port``."""
        return f"mqtt://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The child's pid (process mode), else None."""
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = 10.0) -> EmbeddedBroker:
        """Start the broker (if :meth:`launch` has not) and wait until it accepts
        connections.

        Raises:
            RuntimeError: it did not within ``timeout`` s (the message has its stderr).
        """
        self.launch()
        if self._ready is not None:
            self._ready.wait(timeout)
        if not wait_listening(self.host, self.port, timeout):
            err = b""
            if self._stderr is not None:
                self._stderr.seek(0)
                err = self._stderr.read()[-2000:]
            self.stop()
            raise RuntimeError(f"embedded MQTT broker did not start on {self.url}: "
                               f"{err.decode(errors='replace').strip()}")
        return self

    def launch(self) -> EmbeddedBroker:
        """Start the broker without waiting for it (:meth:`start` then waits): its start-up
        overlaps the caller's. Idempotent."""
        if self._proc is not None or self._thread is not None:
            return self
        if self.mode == "process":
            # a pipe nobody reads could fill and block the broker: spool to a file instead
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "poise.telemetry.broker", "--host", self.host,
                 "--port", str(self.port), "--parent-pid", str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr)
        else:
            self._ready = threading.Event()
            self._thread = threading.Thread(target=self._thread_main, args=(self._ready,),
                                            name="poise-broker", daemon=True)
            self._thread.start()
        return self

    def _thread_main(self, ready: threading.Event) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            ready.set()
            await serve(self.host, self.port, self._stop)

        asyncio.run(main())

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the broker (SIGTERM, then SIGKILL for the child)."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait(timeout)
            self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._thread is not None:
            if self._loop is not None and self._stop is not None:
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout)
            self._thread = None

    def kill(self) -> None:
        """SIGKILL the child (process mode; for tests of a broker that dies)."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGKILL)
            self._proc.wait(5)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m poise.telemetry.broker --port P [--parent-pid PID]``: serve until
    SIGTERM/SIGINT, or until process PID dies (even by SIGKILL)."""
    parser = argparse.ArgumentParser(description="embedded amqtt broker on loopback")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--parent-pid", type=int, metavar="PID",
                        help="exit when process PID (the one that launched this broker) dies")
    args = parser.parse_args(argv)

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        parent = args.parent_pid
        watcher = None
        if parent is not None:
            from poise.firmware_bridge.lifetime import watch_parent

            # the handler runs between two steps of this loop: waking it is all it does
            if not watch_parent(parent, lambda: loop.call_soon_threadsafe(stop.set)):
                print(f"poise broker: parent process {parent} is gone; not starting",
                      file=sys.stderr)
                return 1
            watcher = loop.create_task(_watch_parent(parent, stop))
        await serve(args.host, args.port, stop)
        if watcher is not None:
            watcher.cancel()
        return 0

    code = asyncio.run(run())
    if args.parent_pid is not None:  # a managed child, its sockets closed: skip the
        sys.stderr.flush()           # interpreter's teardown, which would hold it up
        os._exit(code)
    return code


async def _watch_parent(parent: int, stop: asyncio.Event, period: float = 0.1) -> None:
    """Set ``stop`` once ``parent`` is no longer our parent, polled every ``period`` [s] (the
    portable check beside Linux's parent-death signal)."""
    from poise.firmware_bridge.lifetime import parent_alive

    while not stop.is_set():
        if not parent_alive(parent):
            stop.set()
            return
        await asyncio.sleep(period)


if __name__ == "__main__":
    raise SystemExit(main())
