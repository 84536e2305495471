"""The C reference firmware: compiled with gcc (C99, warnings as errors) and checked byte for byte
against the protocol test vectors, plus its watchdog / e-stop / config logic."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import pytest

from poise.firmware_bridge import vectors

ROOT = pathlib.Path(__file__).resolve().parents[1]
FW = ROOT / "firmware"
CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1"]

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")


def build(tmp_path: pathlib.Path, sources: list[pathlib.Path], name: str) -> pathlib.Path:
    exe = tmp_path / name
    cmd = ["gcc", *CFLAGS, "-I", str(FW / "include"), *map(str, sources), "-lm", "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return exe


def test_firmware_matches_the_vectors_and_its_watchdog_latches(tmp_path):
    data = json.loads((ROOT / "tests" / "vectors" / "protocol_vectors.json").read_text())
    text = tmp_path / "vectors.txt"
    text.write_text(vectors.c_text(data))
    exe = build(tmp_path, [*sorted((FW / "src").glob("*.c")), FW / "test" / "test_vectors.c"],
                "test_vectors")
    proc = subprocess.run([str(exe), str(text)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok ")


def test_arduino_main_compiles_against_the_library(tmp_path):
    """The Arduino sketch builds as C++ on the host with a stub Arduino.h (no board needed)."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    stub = tmp_path / "Arduino.h"
    stub.write_text((FW / "test" / "arduino_stub.h").read_text())
    sketch = tmp_path / "sketch.cpp"
    sketch.write_text((FW / "arduino" / "poise_firmware.ino").read_text()
                      + "\nint main() { setup(); for (int i = 0; i < 100; ++i) loop(); }\n")
    objs = []
    for src in sorted((FW / "src").glob("*.c")):
        obj = tmp_path / (src.stem + ".o")
        subprocess.run(["gcc", *CFLAGS, "-I", str(FW / "include"), "-c", str(src), "-o",
                        str(obj)], check=True, timeout=120)
        objs.append(str(obj))
    cmd = ["g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-I", str(tmp_path), "-I",
           str(FW / "include"), str(sketch), *objs, "-lm", "-o", str(tmp_path / "sketch")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(tmp_path / "sketch")], capture_output=True, timeout=30)
    assert run.returncode == 0
