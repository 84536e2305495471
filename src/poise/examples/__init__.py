"""The bundled run configurations (TOML): one per reference robot, proposals in sub-folders.

They ship inside the package, so an installed poise runs them by name::

    poise run --config soft_arm_stiff        # a bundled example (when no such file exists)
    poise example list                       # names and one-line descriptions
    poise example copy soft_arm_stiff        # an editable copy: ./soft_arm_stiff.toml

A name is the file's path below this folder without ``.toml`` (``"dancer"``,
``"dynamixel/tendon_arm"``). :func:`resolve_config` is the one place that turns what the user
typed after ``--config`` into a file.
"""

from __future__ import annotations

import os
import pathlib
import shutil

#: The folder of the bundled examples (package data).
EXAMPLES_DIR = pathlib.Path(__file__).parent
SUFFIX = ".toml"


class ExampleError(ValueError):
    """An unknown example name, or a copy that would overwrite a file."""


def names() -> list[str]:
    """Every bundled example, sorted: top-level ones first, then those in sub-folders."""
    found = [p.relative_to(EXAMPLES_DIR).with_suffix("").as_posix()
             for p in EXAMPLES_DIR.rglob(f"*{SUFFIX}")]
    return sorted(found, key=lambda n: (n.count("/"), n))


def path(name: str) -> pathlib.Path:
    """The file of the bundled example ``name`` (``.toml`` optional).

    Raises:
        ExampleError: no bundled example has that name (the message lists them).
    """
    key = name.removesuffix(SUFFIX)
    if key not in names():
        raise ExampleError(f"{name!r} is not a bundled example; they are: {', '.join(names())}")
    return EXAMPLES_DIR / f"{key}{SUFFIX}"


def description(name: str) -> str:
    """The first comment line of an example (what robot, task and algorithm it runs)."""
    for line in path(name).read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


def resolve_config(name_or_path: str | os.PathLike[str]) -> pathlib.Path:
    """What ``--config`` names: an existing file, else a bundled example of that name.

    ``"soft_arm_stiff"``, ``"soft_arm_stiff.toml"`` and the checkout-era
    ``"examples/soft_arm_stiff.toml"`` all name the bundled file when no such file exists.

    Raises:
        ExampleError: neither a file nor a bundled example (the message lists the examples).
    """
    given = pathlib.Path(name_or_path)
    if given.exists():
        return given
    key = given.as_posix().removesuffix(SUFFIX)
    key = key.removeprefix("examples/")
    if key in names():
        return EXAMPLES_DIR / f"{key}{SUFFIX}"
    raise ExampleError(f"{os.fspath(name_or_path)}: no such file, and not a bundled example "
                       f"(poise example list): {', '.join(names())}")


def copy(name: str, dest: str | os.PathLike[str] | None = None, *,
         force: bool = False) -> pathlib.Path:
    """Copy the bundled example ``name`` to ``dest`` (a file, or a folder that exists; default:
    ``./<basename>.toml``) and return the written path.

    Raises:
        ExampleError: unknown name, or the target exists and ``force`` is false.
    """
    source = path(name)
    target = pathlib.Path(dest) if dest is not None else pathlib.Path(source.name)
    if target.is_dir():
        target = target / source.name
    if target.exists() and not force:
        raise ExampleError(f"{target} exists; pass --force to overwrite it")
    shutil.copyfile(source, target)
    return target


__all__ = ["EXAMPLES_DIR", "ExampleError", "copy", "description", "names", "path",
           "resolve_config"]
