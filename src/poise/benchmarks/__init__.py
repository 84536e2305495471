"""Benchmarks that ship with the package, so an installed poise runs them (``poise bench …``).

Each module measures and returns a JSON-ready report plus a text table; the command in
``poise/cli/bench_*_cmd.py`` parses, calls and prints, and ``bench/<name>.py`` in a source
checkout is a thin wrapper that writes ``bench/results/<name>.json``. Tests never assert on
their times.

* :mod:`~poise.benchmarks.timing` — ``per_call_us``, the one timing loop;
* :mod:`~poise.benchmarks.kernels` — compiled kernels against the numpy reference;
* :mod:`~poise.benchmarks.ik_panda` — classic IK on the Panda against the Robotics Toolbox
  for Python (:mod:`~poise.benchmarks.rtb`, optional), run by ``poise bench ik``;
* :mod:`~poise.benchmarks.vvl` — the seed 001 continuum IK protocol (its own ``main(argv)``,
  run by ``poise bench vvl``);
* :mod:`~poise.benchmarks.held_ik` — held IK (seed 000): Algorithm-1/2 steps and solves,
  compiled and numpy;
* :mod:`~poise.benchmarks.scripts` — finds a benchmark by name: the packaged module, or one
  that still lives only in ``bench/`` of a checkout.
"""
