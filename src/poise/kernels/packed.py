"""A robot model as plain arrays: what every compiled kernel takes.

``pack(model)`` reads a model object of a family that has kernels (``planar_tree``,
``planar_pcc``) into a :class:`PackedModel`: the family's NamedTuple of arrays (named, for
reading) and the same values as a plain tuple ``args`` (what the kernels are called with, see
:mod:`poise.kernels.family`). The arrays are copies: changing the model object afterwards does not
change a packed model; pack it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from poise.kernels import family
from poise.kernels.planar_pcc import pack_pcc
from poise.kernels.planar_tree import pack_tree
from poise.models.base import FloatArray


class NoKernelsError(ValueError):
    """The model's family has no compiled kernels (use the numpy implementation)."""


#: family name → function reading a model object of that family into its NamedTuple.
PACKERS: dict[str, Callable[[Any], Any]] = {
    "planar_tree": pack_tree,
    "planar_pcc": pack_pcc,
}


@dataclass(frozen=True)
class PackedModel:
    """A model as arrays.

    Attributes:
        name: the model's name.
        family: its kinematic family (a key of :data:`PACKERS`).
        n: configuration coordinates; m: actuators; task_dim: task rows.
        arrays: the family's NamedTuple (``TreeArrays`` or ``PCCArrays``), fields with units.
        args: ``tuple(arrays)``, the first argument of every kernel.
    """

    name: str
    family: str
    n: int
    m: int
    task_dim: int
    arrays: Any
    args: tuple[Any, ...]


def has_kernels(model: Any) -> bool:
    """Whether ``model``'s family has compiled kernels."""
    return getattr(model, "family", None) in PACKERS


def pack(model: Any) -> PackedModel:
    """Read ``model`` into arrays.

    Raises:
        NoKernelsError: the model's family has no kernels.
    """
    fam = getattr(model, "family", None)
    packer = PACKERS.get(fam)  # type: ignore[arg-type]
    if packer is None:
        raise NoKernelsError(f"model {getattr(model, 'name', model)!r}: family {fam!r} has no "
                             f"compiled kernels (families with kernels: {', '.join(PACKERS)})")
    arrays = packer(model)
    return PackedModel(name=str(model.name), family=str(fam), n=int(model.n), m=int(model.m),
                       task_dim=int(model.task_dim), arrays=arrays,
                       args=family.remember(arrays))


def f64(a: Any) -> FloatArray:
    """``a`` as a writable C-contiguous float64 array: the one argument type the kernels are
    compiled for, so a read-only or integer input never triggers a compile inside a cycle."""
    if (type(a) is np.ndarray and a.dtype == np.float64 and a.flags.c_contiguous
            and a.flags.writeable):
        return a
    return np.array(a, dtype=np.float64)
