"""Benchmarks that ship with the package, so an installed poise runs them (``poise bench …``).

Each module measures and returns a JSON-ready report plus a text table; the command in
``poise/cli/bench_*_cmd.py`` parses, calls and prints, and ``bench/<name>.py`` in a source
checkout is a thin wrapper that writes ``bench/results/<name>.json``. Tests never assert on
their times.

* :mod:`~poise.benchmarks.timing` — ``per_call_us``, the one timing loop;
* :mod:`~poise.benchmarks.kernels` — compiled kernels against the numpy reference;
* :mod:`~poise.benchmarks.scripts` — the benchmarks that still live only in ``bench/`` of a
  checkout (``held_ik``, ``vvl``), found for ``poise bench`` when they are there.
"""
