"""What every controller offers on top of its commands: the in-process service
(:class:`~poise.controller.service.Controller`) and any other with ``submit`` and ``close``."""

from __future__ import annotations

from typing import Any, Self

from poise.api.bus import Command, CommandResponse, SubscriberHub


class ControllerFace(SubscriberHub):
    """A :class:`~poise.api.bus.SubscriberHub` with commands (``submit``) and a life
    (``close``): the shorthand for a target and ``with`` closing it."""

    def submit(self, command: Command) -> CommandResponse:
        """Validate and apply ``command``; always answered."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop and release everything."""
        raise NotImplementedError

    def set_target(self, target: Any, source: str = "api") -> CommandResponse:
        """Shorthand for ``submit(Command("target", target))``."""
        return self.submit(Command("target", target, source=source))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["ControllerFace"]
