"""``poise device sim``, ``poise device probe`` and ``poise bench protocol`` end to end."""

from __future__ import annotations

import json
import threading
import time

import pytest
from tests.test_protocol_device import LagPlant

import poise.sim
from poise.cli import main
from poise.firmware_bridge.device import DeviceEndpoint, PtyDevice


def test_device_sim_without_a_simulator_says_so(monkeypatch, capsys):
    monkeypatch.delattr(poise.sim, "make_plant", raising=False)
    assert main(["device", "sim", "--model", "planar2"]) == 2
    err = capsys.readouterr().err
    assert "simulator is not available" in err and "make_plant" in err


def test_device_sim_serves_a_plant_that_probe_can_read(monkeypatch, capsys):
    calls = []

    def make_plant(name, params):
        calls.append((name, params))
        return LagPlant()

    monkeypatch.setattr(poise.sim, "make_plant", make_plant, raising=False)
    codes = []
    t = threading.Thread(target=lambda: codes.append(
        main(["device", "sim", "--model", "lag2", "--rate", "250", "--duration", "3"])))
    t.start()
    out = ""
    t0 = time.monotonic()
    while "PTY " not in out and time.monotonic() - t0 < 5:
        time.sleep(0.02)
        out += capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("PTY /dev/pts/")
    path = first.split(" ", 1)[1]
    assert main(["device", "probe", path, "--seconds", "0.5", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    t.join()
    assert codes == [0] and calls == [("lag2", None)]
    assert report["device"]["firmware_id"] == "poise-sim:lag2"
    assert [c["name"] for c in report["device"]["channels"]] == ["theta1", "theta2", "tendon1",
                                                                  "tendon2"]
    assert 150 < report["link"]["frame_rate_hz"] < 350
    assert report["link"]["rtt_samples"] > 5 and report["link"]["crc_errors"] == 0


def test_probe_text_report_and_missing_port(capsys):
    dev = PtyDevice(DeviceEndpoint(LagPlant(), rate_hz=200, firmware_id="probe-me"))
    path = dev.start()
    try:
        assert main(["device", "probe", path, "--seconds", "0.3"]) == 0
    finally:
        dev.stop()
    out = capsys.readouterr().out
    for needle in ("protocol version  1", "firmware id       probe-me", "tendon2", "round trip",
                   "sequence gaps     0"):
        assert needle in out
    assert main(["device", "probe", "/dev/ttyXYZ"]) == 1
    assert capsys.readouterr().err.strip() == "poise device probe: /dev/ttyXYZ: no such device"


@pytest.mark.parametrize("as_json", [False, True])
def test_bench_protocol_prints_every_message_type(capsys, as_json):
    argv = ["bench", "protocol", "--number", "20", "--repeat", "1"]
    assert main([*argv, "--json"] if as_json else argv) == 0
    out = capsys.readouterr().out
    if as_json:
        rows = json.loads(out)["rows"]
        assert all(r["encode_us"] > 0 and r["decode_ratio"] > 0 for r in rows)
        assert len(rows) == 12
    else:
        assert "Setpoint (2a, ff)" in out and "baseline" in out
