"""``loop.cpu``: the loop thread on a CPU of its own, what poise starts besides it elsewhere.

The plan is checked on given CPU sets; the service test runs the real-time process against the
virtual device and reads each thread's and process's affinity back from the OS.
"""

from __future__ import annotations

import os

import pytest

from conftest import PATIENT_SETTINGS
from poise.api.state import State
from poise.cli.run_cmd import format_summary
from poise.controller.config import ConfigError, load_config
from poise.controller.realtime import RealtimeController
from poise.devices.affinity import (
    AUTO,
    OFF,
    CpuPlan,
    allowed_cpus,
    format_cpus,
    parse_cpus,
    plan_cpus,
)
from poise.examples import EXAMPLES_DIR


def test_auto_takes_the_last_allowed_cpu_and_leaves_the_others_to_the_rest():
    assert plan_cpus(AUTO, frozenset({0, 1, 2, 3})) == (CpuPlan(3, frozenset({0, 1, 2})), "")
    assert plan_cpus(AUTO, frozenset({2, 5, 7})) == (CpuPlan(7, frozenset({2, 5})), "")


def test_auto_pins_nothing_on_fewer_than_three_cpus_and_says_why():
    for cpus in ({3}, {0, 1}):
        plan, why = plan_cpus(AUTO, frozenset(cpus))
        assert plan is None and f"{len(cpus)} CPU(s)" in why and str(sorted(cpus)) in why


def test_a_chosen_cpu_must_be_allowed_and_off_pins_nothing():
    assert plan_cpus(0, frozenset({0, 1})) == (CpuPlan(0, frozenset({1})), "")
    plan, why = plan_cpus(9, frozenset({0, 1}))
    assert plan is None and "loop.cpu = 9" in why and "[0, 1]" in why
    plan, why = plan_cpus(OFF, frozenset({0, 1}))
    assert plan is None and "off" in why
    # alone on its CPU: the loop shares it with the rest rather than leave them nowhere
    assert plan_cpus(4, frozenset({4})) == (CpuPlan(4, frozenset({4})), "")


def test_cpu_lists_round_trip_and_bad_ones_are_refused():
    assert parse_cpus(format_cpus(frozenset({3, 0, 1}))) == frozenset({0, 1, 3})
    for bad in ("", "a", "1,,2", "-1"):
        with pytest.raises(ValueError, match="--cpus"):
            parse_cpus(bad)


def test_a_cpu_below_minus_two_is_a_config_error():
    with pytest.raises(ConfigError, match=r"loop\.cpu"):
        load_config(EXAMPLES_DIR / "double_pendulum.toml", {"loop.cpu": (-3, "test")})


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.append(int(entry))
    return out


def _config(cpu: int):
    over = {"device.port": ("sim", "test"), "mqtt.enabled": (False, "test"),
            "loop.rate": (200.0, "test"), "algorithm.target": ([0.5], "test"),
            "loop.cpu": (cpu, "test")}
    return load_config(EXAMPLES_DIR / "double_pendulum.toml", over)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux CPU affinity")
def test_the_service_runs_its_loop_alone_on_its_cpu_and_the_device_elsewhere():
    """Real processes: the loop thread's affinity is the chosen CPU, the virtual device's the
    others; the real-time process's other threads and the test process are not moved."""
    mine = allowed_cpus()
    cpu = max(mine)
    plan, why = plan_cpus(cpu, mine)
    assert plan is not None, why
    rt = RealtimeController(_config(cpu))
    try:
        assert rt.start().accepted
        assert rt.wait_for(State.RUNNING, timeout=60)
        realtime = rt.summary()["realtime"]
        assert realtime["cpu"] == cpu
        assert realtime["other_cpus"] == sorted(plan.others)
        assert os.sched_getaffinity(realtime["loop_tid"]) == {cpu}
        child = rt.pid
        others = [int(t) for t in os.listdir(f"/proc/{child}/task")
                  if int(t) != realtime["loop_tid"]]
        assert others and all(os.sched_getaffinity(t) == set(mine) for t in others)
        device = rt.device_pid()
        assert device in _children(child)
        assert all(os.sched_getaffinity(int(t)) == set(plan.others)
                   for t in os.listdir(f"/proc/{device}/task"))
        assert allowed_cpus() == mine  # the first process is not moved
        summary = rt.summary()
        assert summary["state"] == "running"  # and the loop runs so
        others_text = ", ".join(map(str, sorted(plan.others)))
        assert f"loop CPU          {cpu} (virtual device on {others_text})" in \
            format_summary(summary)
    finally:
        rt.close()


def test_an_unusable_cpu_leaves_the_loop_unpinned_with_the_reason_and_running():
    bad = max(allowed_cpus()) + 64
    rt = RealtimeController(_config(bad))
    try:
        assert rt.start().accepted
        assert rt.wait_for(State.RUNNING, timeout=60)
        realtime = rt.summary()["realtime"]
        assert realtime["cpu"] is None
        assert f"loop.cpu = {bad}" in realtime["unpinned"]
        assert f"loop CPU          any (loop.cpu = {bad} is not" in format_summary(rt.summary())
    finally:
        rt.close()


def test_the_loop_benchmark_runs_each_cpu_setting_and_reports_where_the_loop_ran():
    """``poise bench loop --cpu -2 N``: one run each, the table's cpu column from the run's
    own summary (short runs at 200 Hz: what is checked is the plumbing, not the timing)."""
    from poise.controller import benchmark

    cpu = max(allowed_cpus())
    result = benchmark.run(1.0, (200.0,), cpus=(OFF, cpu), settings=PATIENT_SETTINGS)
    pinned = [r["cpu"] for r in result["runs"]]
    assert pinned == [None, cpu]
    assert all(r["cycles"] > 0 and r["state"] == "running" for r in result["runs"]), \
        [(r["state"], r["reason"], r["cycles"]) for r in result["runs"]]
    table = benchmark.table(result).splitlines()
    assert table[1].split()[4] == "cpu"
    assert [line.split()[4] for line in table[2:4]] == ["-", str(cpu)]
    # the hypervisor's share of the window, read from /proc/stat (Linux)
    assert all(r["steal_pct"] is None or 0.0 <= r["steal_pct"] <= 100.0
               for r in result["runs"])
    assert table[1].split()[-1] == "steal"


def test_steal_is_the_hypervisors_share_of_the_cpu_time_between_two_readings():
    from poise.controller.benchmark import cpu_times, steal_pct

    now = cpu_times()
    assert now is not None and 0 <= now[0] <= now[1]  # Linux: /proc/stat is there
    assert steal_pct((100, 10_000), (150, 12_000)) == 2.5  # 50 of 2,000 ticks
    assert steal_pct((100, 10_000), (100, 10_000)) is None  # no time passed
    assert steal_pct(None, now) is None
