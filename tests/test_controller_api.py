"""Both controllers offer :class:`~poise.controller.interface.ControllerAPI`: every member,
with a signature that accepts every call the Protocol allows."""

from __future__ import annotations

import inspect
from typing import Generic, Protocol

import pytest

from poise.controller import Controller, ControllerAPI, load_config
from poise.controller.realtime import RealtimeController, make_controller
from poise.examples import EXAMPLES_DIR

IMPLEMENTATIONS = [Controller, RealtimeController]
#: What every user of a controller relies on (a name dropped from the Protocol fails here).
EXPECTED = {
    "config", "model_info", "model", "reach",
    "state", "reason", "params", "estops", "target_status", "target_note", "wait_for",
    "connect", "start", "stop", "clear", "estop", "submit", "set_target", "post",
    "subscribe", "events", "unsubscribe", "history", "announce",
    "timing", "reset_timing", "summary", "final_summary", "close", "__enter__", "__exit__",
}


def members() -> dict[str, object]:
    """The Protocol's members as declared (its own and its base Protocols'): methods and
    properties (class attributes; a data attribute: None)."""
    out: dict[str, object] = {}
    for cls in ControllerAPI.__mro__:
        if cls in (Protocol, Generic, object):
            continue
        for name, value in vars(cls).items():
            if (not name.startswith("_") or name in ("__enter__", "__exit__")) and \
                    (callable(value) or isinstance(value, property)):
                out.setdefault(name, value)
        out.update(dict.fromkeys(vars(cls).get("__annotations__", {}), None))
    return out


def accepts(impl: inspect.Signature, spec: inspect.Signature) -> str:
    """'' if every call ``spec`` allows is one ``impl`` allows; else what is missing."""
    params = list(impl.parameters.values())
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in params}
    for i, sp in enumerate(spec.parameters.values()):
        if sp.kind is sp.VAR_POSITIONAL:
            if not var_pos:
                return f"*{sp.name} not accepted"
            continue
        if sp.kind is sp.VAR_KEYWORD:
            if not var_kw:
                return f"**{sp.name} not accepted"
            continue
        if sp.kind in (sp.POSITIONAL_ONLY, sp.POSITIONAL_OR_KEYWORD) and \
                i >= len(positional) and not var_pos:
            return f"{sp.name} not accepted by position"
        if sp.kind in (sp.KEYWORD_ONLY, sp.POSITIONAL_OR_KEYWORD):
            ip = by_name.get(sp.name)
            if ip is None and not var_kw:
                return f"{sp.name} not accepted by name"
            if ip is not None and sp.default is not sp.empty and ip.default is ip.empty:
                return f"{sp.name} is optional in the Protocol, required here"
    spec_names = set(spec.parameters)
    for ip in params:  # whatever the Protocol does not pass must have a default
        if ip.name not in spec_names and ip.default is ip.empty and \
                ip.kind not in (ip.VAR_POSITIONAL, ip.VAR_KEYWORD):
            return f"{ip.name} required here, unknown to the Protocol"
    return ""


def test_the_protocol_names_what_the_users_call():
    assert set(members()) == EXPECTED


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda c: c.__name__)
def test_each_controller_has_every_method_and_property_with_a_compatible_signature(cls):
    for name, spec in members().items():
        if spec is None:  # a data attribute: checked on an instance below
            continue
        impl = inspect.getattr_static(cls, name, None)
        assert impl is not None, f"{cls.__name__} has no {name}"
        if isinstance(spec, property):
            assert isinstance(impl, property), f"{cls.__name__}.{name} is not a property"
            continue
        assert callable(impl) and not isinstance(impl, property), \
            f"{cls.__name__}.{name} is not a method"
        problem = accepts(inspect.signature(impl), inspect.signature(spec))
        assert not problem, f"{cls.__name__}.{name}: {problem}"


def test_the_signature_check_sees_a_missing_or_narrower_parameter():
    def spec(self, cause: str = "x", *, timeout: float = 1.0): ...
    def fine(self, cause: str = "y", since=None, *, timeout: float = 2.0, more=1): ...
    def narrower(self, cause: str, *, timeout: float = 1.0): ...
    def missing(self, *, timeout: float = 1.0): ...
    s = inspect.signature(spec)
    assert accepts(inspect.signature(fine), s) == ""
    assert "optional" in accepts(inspect.signature(narrower), s)
    assert "cause" in accepts(inspect.signature(missing), s)


@pytest.mark.parametrize("process", ["shared", "own"])
def test_make_controller_gives_an_instance_of_the_protocol(process):
    over = {"device.port": ("sim", "t"), "mqtt.enabled": (False, "t"),
            "loop.process": (process, "t")}
    ctl = make_controller(load_config(EXAMPLES_DIR / "double_pendulum.toml", over))
    try:
        assert isinstance(ctl, ControllerAPI)  # every member, data attributes too
        assert isinstance(ctl, RealtimeController if process == "own" else Controller)
    finally:
        ctl.close()
