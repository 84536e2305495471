"""Which family's kernels a packed model uses, resolved when a kernel is compiled.

Every kernel takes the model as ``args``: a plain tuple of arrays and numbers (Numba types a
plain tuple in C, a NamedTuple field by field in Python: 1.1 against 2.7 µs per call for
eight fields on the reference machine). Inside compiled
code :func:`as_arrays` turns ``args`` back into the family's NamedTuple (``TreeArrays``,
``PCCArrays``, readable field names), chosen by the Numba type of the tuple, and
:func:`statics_terms`, :func:`dynamics_terms`, ... call that family's kernel, chosen by the
NamedTuple's class. Both choices are made at compile time: a compiled kernel holds exactly one
family's code and costs nothing to dispatch.

A family registers once (:func:`register`); :func:`poise.kernels.packed.pack` records the Numba
type of each packed model's ``args`` (:func:`remember`), so two families whose tuples had the
same type would be refused at pack time rather than mixed up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from numba import typeof, types
from numba.core.dispatcher import Dispatcher
from numba.extending import overload


@dataclass(frozen=True)
class FamilyKernels:
    """The compiled model functions of one family (each ``f(P, ...)`` on its NamedTuple)."""

    name: str
    arrays: type  # the NamedTuple class
    fk: Dispatcher
    task_jacobian: Dispatcher
    G: Dispatcher
    dG: Dispatcher
    statics_terms: Dispatcher
    dynamics_terms: Dispatcher
    potential: Dispatcher | None = None  # U(q) [J], for the statics solver's line search


_BY_CLASS: dict[type, FamilyKernels] = {}
_BY_ARGS_TYPE: dict[types.Type, type] = {}


def register(kernels: FamilyKernels) -> None:
    """Make a family's kernels reachable from the generic kernels."""
    _BY_CLASS[kernels.arrays] = kernels


def remember(arrays: Any) -> tuple[Any, ...]:
    """The plain ``args`` tuple of a family NamedTuple; records its Numba type → class."""
    args = tuple(arrays)
    numba_type = typeof(args)
    known = _BY_ARGS_TYPE.setdefault(numba_type, type(arrays))
    if known is not type(arrays):
        raise TypeError(f"{type(arrays).__name__} and {known.__name__} pack to the same Numba "
                        "type; give one of them a distinguishing field")
    return args


def kernels_of(arrays: Any) -> FamilyKernels:
    """The model kernels of a family NamedTuple (e.g. ``PackedModel.arrays``), callable from
    Python as ``kernels.G(arrays, q)``."""
    return _BY_CLASS[type(arrays)]


def _family(P: types.Type) -> FamilyKernels | None:
    if isinstance(P, types.BaseNamedTuple):
        return _BY_CLASS.get(P.instance_class)
    return None


# --------------------------------------------------------------------- Python stubs + overloads


def as_arrays(args: tuple[Any, ...]) -> Any:
    """The family NamedTuple of a packed model's ``args`` (compiled code only)."""
    raise NotImplementedError("poise.kernels.family.as_arrays works in compiled code only")


def statics_terms(P: Any, q: Any) -> Any:
    """``(h, ∂h/∂q, G, ∂G/∂q)`` of the family of ``P`` (compiled code only)."""
    raise NotImplementedError


def dynamics_terms(P: Any, q: Any, qd: Any) -> Any:
    """``(M, C(q, q̇) q̇, G)`` of the family of ``P`` (compiled code only)."""
    raise NotImplementedError


def fk(P: Any, q: Any) -> Any:
    """``h(q)`` of the family of ``P`` (compiled code only)."""
    raise NotImplementedError


def task_jacobian(P: Any, q: Any) -> Any:
    """``∂h/∂q`` of the family of ``P`` (compiled code only)."""
    raise NotImplementedError


def G(P: Any, q: Any) -> Any:
    """``G(q)`` of the family of ``P`` (compiled code only)."""
    raise NotImplementedError


def dG(P: Any, q: Any) -> Any:
    """``∂G/∂q`` of the family of ``P`` (compiled code only)."""
    raise NotImplementedError


def potential(P: Any, q: Any) -> Any:
    """``U(q)`` [J] of the family of ``P`` (compiled code only; families that register one)."""
    raise NotImplementedError


def _as_arrays(args):  # type: ignore[no-untyped-def]
    cls = _BY_ARGS_TYPE.get(args)
    if cls is None:
        return None

    def impl(args):  # type: ignore[no-untyped-def]
        return cls(*args)

    return impl


def _dispatch_q(attribute: str):  # type: ignore[no-untyped-def]
    """Overload typer for ``f(P, q)``: calls the family's ``attribute`` kernel."""

    def typer(P, q):  # type: ignore[no-untyped-def]
        fam = _family(P)
        fn = None if fam is None else getattr(fam, attribute)
        if fn is None:
            return None
        return lambda P, q: fn(P, q)

    return typer


def _dispatch_q_qd(attribute: str):  # type: ignore[no-untyped-def]
    """Overload typer for ``f(P, q, qd)``: calls the family's ``attribute`` kernel."""

    def typer(P, q, qd):  # type: ignore[no-untyped-def]
        fam = _family(P)
        if fam is None:
            return None
        fn = getattr(fam, attribute)
        return lambda P, q, qd: fn(P, q, qd)

    return typer


# inline: the one-line dispatch adds no compiled function of its own
for _stub in (statics_terms, fk, task_jacobian, G, dG, potential):
    overload(_stub, inline="always")(_dispatch_q(_stub.__name__))
overload(dynamics_terms, inline="always")(_dispatch_q_qd("dynamics_terms"))
overload(as_arrays, inline="always")(_as_arrays)
