"""Panda IK benchmark (TRAC-IK / Robotics Toolbox protocol) against the Robotics Toolbox's
``ik_LM``; the protocol is in ``poise.benchmarks.ik_panda``.

    nice python bench/ik_panda.py [--n 10000] [--seed 0] ...   # same options as `poise bench ik`

Prints the table, writes ``bench/results/ik_panda.json`` (unless ``--json`` says otherwise)
and the table with the command and load average to ``bench/results/ik_panda.md``.
"""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import sys

from poise.cli import main

RESULTS = pathlib.Path(__file__).parent / "results"

if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--json" not in argv:
        argv += ["--json", str(RESULTS / "ik_panda.json")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["bench", "ik", *argv])
    print(out.getvalue(), end="")
    if code == 0:
        load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
        (RESULTS / "ik_panda.md").write_text(
            f"# ik_panda\n\n`nice python bench/ik_panda.py {' '.join(sys.argv[1:])}`\n\n"
            f"load average after the run: {load} (2 cores, shared)\n\n```\n{out.getvalue()}```\n")
    sys.exit(code)
