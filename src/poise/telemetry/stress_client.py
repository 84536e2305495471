"""The operator's MQTT client of ``poise bench stress``, in a process of its own.

A measurement's publisher (a flood of commands, an e-stop behind them, retained commands) runs
in another Python process, as an operator's client elsewhere would: not a thread competing with
the service for the GIL. CLOCK_MONOTONIC is machine-wide, so the times it returns compare with
the service's event times.

:func:`in_process_of_its_own` sends the job (JSON on stdin) to ``python -m
poise.telemetry.stress_client``, which runs the coroutine the job names (:data:`JOBS`) and
prints its result as JSON.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
from typing import Any

#: A job's kind → (module, coroutine function): the publishers of the measurements.
JOBS: dict[str, tuple[str, str]] = {
    "round": ("poise.telemetry.stress", "_publish_round"),
    "estop": ("poise.telemetry.stress_estop", "_one_connection"),
    "retained": ("poise.telemetry.stress_estop", "_retained"),
}


def in_process_of_its_own(kind: str, timeout: float, **arguments: Any) -> dict[str, Any]:
    """Run the publisher ``kind`` (:data:`JOBS`) with keyword ``arguments`` (JSON values) in a
    new process; its result. ``timeout`` [s]: the publisher's own, plus a minute to start."""
    job = json.dumps({"kind": kind, "arguments": {**arguments, "timeout": timeout}})
    out = subprocess.run([sys.executable, "-m", "poise.telemetry.stress_client"], input=job,
                         capture_output=True, text=True, timeout=timeout + 60)
    if out.returncode != 0:
        raise PublisherFailed(f"the {kind} publisher exited {out.returncode}: "
                              f"{out.stderr.strip()[-600:]}")
    return json.loads(out.stdout)


class PublisherFailed(RuntimeError):
    """A publisher process failed; the message carries the end of what it printed."""


def main() -> None:
    """The publisher process: a JSON job on stdin, its result as JSON on stdout."""
    job = json.load(sys.stdin)
    module, name = JOBS[job["kind"]]
    publisher = getattr(importlib.import_module(module), name)
    print(json.dumps(asyncio.run(publisher(**job["arguments"]))))


if __name__ == "__main__":
    main()
