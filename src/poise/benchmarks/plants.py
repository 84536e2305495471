"""Simulated robots that differ from the controller's model, for the benchmarks' ``--plant``.

``--plant NAME=FILE`` (``poise bench control``, ``poise bench tracking``) simulates robot
``NAME`` with the true parameters of the model file ``FILE`` (``device.sim_params``) while the
controller keeps its own model. :func:`parse_plants` reads the option once for every
benchmark; :func:`stiffer` writes the plant a benchmark makes itself when only ``NAME`` is
given (where it allows that): the built-in model with every joint spring stiffer. With a
named plant (``--plant real``, ``--plant double_pendulum=friction``;
:mod:`poise.sim.named`) the benchmark writes that plant's file for each robot.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Callable, Iterable, Sequence


def parse_plants(given: Iterable[str], make: Callable[[str], str] | None = None, *,
                 named: Callable[[str, str], str] | None = None,
                 robots: Sequence[str] = ()) -> dict[str, str]:
    """``{robot: model file}`` from ``--plant`` values.

    * ``NAME=FILE`` — robot ``NAME`` simulated with the model file ``FILE``;
    * ``NAME`` — ``make(NAME)`` (the file it writes) where ``make`` is given;
    * with ``named`` (``named(robot, plant)`` writes a named plant,
      :func:`poise.sim.named.write_named`): ``PLANT`` alone, a name of
      :data:`poise.sim.named.NAMED_PLANTS` such as ``real``, for every robot of ``robots``,
      and ``NAME=PLANT`` for robot ``NAME`` only (a later value for a robot wins).

    Raises:
        ValueError: a value that is none of these (the message quotes it).
    """
    from poise.sim.named import NAMED_PLANTS

    plants: dict[str, str] = {}
    for value in given:
        name, sep, path = value.partition("=")
        if named is not None and not sep and name in NAMED_PLANTS:
            for robot in robots:
                plants[robot] = named(robot, name)
            continue
        if not sep and make is not None and name:
            plants[name] = make(name)
            continue
        if not sep or not name or not path:
            expected = "NAME=FILE" + (" or NAME" if make is not None else "") + (
                f" or [NAME=]PLANT with PLANT one of {', '.join(NAMED_PLANTS)}"
                if named is not None else "")
            raise ValueError(f"--plant {value!r}: expected {expected}")
        if named is not None and path in NAMED_PLANTS:
            plants[name] = named(name, path)
            continue
        plants[name] = path
    return plants


def named_writer(folder: str | pathlib.Path, made: dict[str, str]) -> Callable[[str, str], str]:
    """``named(robot, plant)`` for :func:`parse_plants`: writes the named plant's file in
    ``folder`` (:func:`poise.sim.named.write_named`) and records in ``made`` what it is
    (``{path: "<robot>=<plant> (named plant, built in)"}``, for the run's report)."""
    from poise.sim.named import write_named

    def named(robot: str, plant: str) -> str:
        path = write_named(robot, plant, folder)
        made[path] = f"{robot}={plant} (named plant, built in)"
        return path

    return named


def stiffer(name: str, factor: float, folder: str | pathlib.Path) -> str:
    """A copy of the built-in model file of ``name`` in ``folder`` with every joint spring
    (each ``stiffness = …`` line) ``factor`` times stiffer; its path.

    Raises:
        ValueError: no built-in model ``name``, or one without a spring.
    """
    from poise.models.registry import builtin_path

    text = builtin_path(name).read_text()  # a ModelError (a ValueError) for an unknown name
    new, count = re.subn(r"^stiffness = ([0-9.eE+-]+)",
                         lambda m: f"stiffness = {round(float(m.group(1)) * factor, 9)!r}",
                         text, flags=re.M)
    if count == 0:
        raise ValueError(f"--plant {name}: the model has no joint spring to make stiffer")
    path = pathlib.Path(folder) / f"{name}_stiffer_{factor:g}.toml"
    path.write_text(new)
    return str(path)


__all__ = ["named_writer", "parse_plants", "stiffer"]
