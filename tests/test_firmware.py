"""The C reference firmware: compiled with gcc (C99, warnings as errors) and checked byte for byte
against the protocol test vectors, plus its watchdog / e-stop / config logic; its Arduino and
PlatformIO library manifests describe the files that are there; and, where the Arduino AVR
toolchain is installed (Debian: gcc-avr avr-libc arduino-core-avr arduino-builder), the example
sketch builds as an Arduino library for an Uno and a Mega 2560 without a warning from our files
and within each board's flash and static RAM."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import tomllib

import pytest

from poise.firmware_bridge import vectors

ROOT = pathlib.Path(__file__).resolve().parents[1]
FW = ROOT / "firmware"
CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1"]

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")


def build(tmp_path: pathlib.Path, sources: list[pathlib.Path], name: str) -> pathlib.Path:
    exe = tmp_path / name
    cmd = ["gcc", *CFLAGS, "-I", str(FW / "src"), *map(str, sources), "-lm", "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return exe


@needs_gcc
def test_firmware_matches_the_vectors_and_its_watchdog_latches(tmp_path):
    data = json.loads((ROOT / "tests" / "vectors" / "protocol_vectors.json").read_text())
    text = tmp_path / "vectors.txt"
    text.write_text(vectors.c_text(data))
    exe = build(tmp_path, [*sorted((FW / "src").glob("*.c")), FW / "test" / "test_vectors.c"],
                "test_vectors")
    proc = subprocess.run([str(exe), str(text)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok ")


@needs_gcc
def test_arduino_main_compiles_against_the_library(tmp_path):
    """The Arduino sketch builds as C++ on the host with a stub Arduino.h (no board needed)."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    stub = tmp_path / "Arduino.h"
    stub.write_text((FW / "test" / "arduino_stub.h").read_text())
    sketch = tmp_path / "sketch.cpp"
    sketch.write_text((FW / "examples" / "TendonArm" / "TendonArm.ino").read_text()
                      + "\nint main() { setup(); for (int i = 0; i < 100; ++i) loop(); }\n")
    objs = []
    for src in sorted((FW / "src").glob("*.c")):
        obj = tmp_path / (src.stem + ".o")
        subprocess.run(["gcc", *CFLAGS, "-I", str(FW / "src"), "-c", str(src), "-o",
                        str(obj)], check=True, timeout=120)
        objs.append(str(obj))
    cmd = ["g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-I", str(tmp_path), "-I",
           str(FW / "src"), str(sketch), *objs, "-lm", "-o", str(tmp_path / "sketch")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(tmp_path / "sketch")], capture_output=True, timeout=30)
    assert run.returncode == 0


def _library_properties() -> dict[str, str]:
    lines = (FW / "library.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def test_arduino_and_platformio_manifests_describe_the_library_as_it_is_laid_out():
    """Arduino (library.properties, 1.5 layout) and PlatformIO (library.json) find the headers
    and sources in src/ and the example sketch at examples/<Name>/<Name>.ino; both manifests
    carry the package's version."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    props = _library_properties()
    required = ("name", "version", "author", "maintainer", "sentence", "paragraph", "category",
                "url", "architectures")
    assert all(props.get(k) for k in required), props
    assert props["version"] == version
    assert props["category"] in ("Display", "Communication", "Signal Input/Output", "Sensors",
                                 "Device Control", "Timing", "Data Storage", "Data Processing",
                                 "Other")
    for header in props["includes"].split(","):
        assert (FW / "src" / header.strip()).is_file()

    manifest = json.loads((FW / "library.json").read_text())
    assert manifest["name"] == props["name"] and manifest["version"] == version
    assert manifest["build"]["srcDir"] == "src"
    for header in manifest["headers"]:
        assert (FW / manifest["build"]["includeDir"] / header).is_file()
    for example in manifest["examples"]:
        for file in example["files"]:
            assert (FW / example["base"] / file).is_file()

    sketches = sorted((FW / "examples").glob("*/*.ino"))
    assert sketches and all(s.stem == s.parent.name for s in sketches)
    assert {e["name"] for e in manifest["examples"]} == {s.stem for s in sketches}
    for source in (FW / "src").glob("*.c"):  # every source's header sits next to it
        assert source.with_suffix(".h").is_file()


def test_the_library_carries_the_projects_mit_licence():
    """A LICENSE file in the library root (what the Arduino and PlatformIO library managers
    ship and show), the project's own; the manifests say MIT."""
    assert (FW / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert json.loads((FW / "library.json").read_text())["license"] == "MIT"


#: The Arduino AVR core and build tool as Debian packages them (no download of their own).
ARDUINO_HARDWARE = pathlib.Path("/usr/share/arduino/hardware")
needs_arduino = pytest.mark.skipif(
    shutil.which("arduino-builder") is None or shutil.which("avr-gcc") is None
    or not (ARDUINO_HARDWARE / "arduino" / "avr").is_dir(),
    reason="the Arduino AVR toolchain is not installed (apt-get install gcc-avr avr-libc "
           "arduino-core-avr arduino-builder)")


def arduino_build(tmp_path: pathlib.Path, fqbn: str) -> str:
    """Build examples/TendonArm for ``fqbn`` with the library installed as the Arduino IDE
    installs it (a copy of firmware/ under libraries/poise); the builder's output."""
    library = tmp_path / "libraries" / "poise"
    shutil.copytree(FW, library)
    build = tmp_path / "build"
    build.mkdir()
    cmd = ["arduino-builder", "-compile", "-hardware", str(ARDUINO_HARDWARE), "-hardware",
           "/usr/share/arduino-builder", "-tools", "/usr/bin", "-libraries",
           str(library.parent), "-fqbn", fqbn, "-build-path", str(build), "-warnings", "all",
           # Debian's core 1.8.7 expects a newer avr-libc, which defines DECIMAL_DIG (the
           # digits of a double, 9 on AVR where a double is a float); not our code's need
           "-prefs=compiler.cpp.extra_flags=-DDECIMAL_DIG=9",
           str(library / "examples" / "TendonArm" / "TendonArm.ino")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    ours = [line for line in out.splitlines() if "warning" in line and str(library) in line]
    assert ours == [], "\n".join(ours)
    return out


def _usage(out: str, what: str) -> tuple[int, int]:
    match = re.search(rf"{what} (?:uses|use) (\d+) bytes .*Maximum is (\d+) bytes", out)
    assert match, out[-2000:]
    return int(match[1]), int(match[2])


@needs_arduino
@pytest.mark.parametrize("fqbn", ["arduino:avr:uno", "arduino:avr:mega:cpu=atmega2560"])
def test_the_example_sketch_builds_as_an_arduino_library_for_avr_boards(tmp_path, fqbn):
    """-Wall -Wextra on the library's C and the sketch (the core's own warnings aside); the
    program within flash and the static data within RAM. The stack is not in these numbers:
    see firmware/README.md for the Uno's."""
    out = arduino_build(tmp_path, fqbn)
    flash, flash_max = _usage(out, "Sketch")
    ram, ram_max = _usage(out, "Global variables")
    assert 0 < flash <= flash_max and 0 < ram <= ram_max
