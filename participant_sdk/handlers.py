"""Declaring a participant: a class whose methods handle (action, phase) pairs.

Example::

    class Payments(Participant):
        name = "payments"

        @on_try("reserve")
        async def hold(self, ctx: HandlerContext, body: Reserve) -> Held: ...

        @on_confirm("reserve")
        async def capture(self, ctx: HandlerContext, body: Reserve) -> None: ...

        @on_cancel("reserve")
        async def release(self, ctx: HandlerContext, body: Reserve) -> None: ...

A handler receives a :class:`HandlerContext` (the command and the open transaction ``ctx.conn``)
and its payload validated into the pydantic model named by its second parameter's annotation.
It returns ``None``, a dict or a pydantic model (sent back as the reply's ``result``), or raises
:class:`~participant_sdk.errors.BusinessRejection`.
"""

from __future__ import annotations

import inspect
import typing
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel

from participant_sdk.errors import ConfigurationError
from participant_sdk.protocol import CommandEnvelope, Phase

_ATTR = "__sagaflow_handles__"

HandlerResult = BaseModel | dict[str, Any] | None
HandlerFunc = Callable[..., Awaitable[HandlerResult]]
_F = TypeVar("_F", bound=Callable[..., Awaitable[Any]])


@dataclass(frozen=True, slots=True)
class HandlerContext:
    """What a handler gets besides its payload.

    ``conn`` is the asyncpg connection with the transaction that also holds the barrier row:
    write through it, and never commit or roll it back yourself. Under
    :class:`~participant_sdk.testing.ParticipantHarness` it is an in-memory
    :class:`~participant_sdk.testing.MemoryTransaction` instead.
    """

    command: CommandEnvelope
    conn: Any

    @property
    def saga_id(self) -> uuid.UUID:
        return self.command.saga_id

    @property
    def step(self) -> str:
        return self.command.step

    @property
    def phase(self) -> Phase:
        return self.command.phase

    @property
    def attempt(self) -> int:
        return self.command.attempt


@dataclass(frozen=True, slots=True)
class Handler:
    """One registered handler, bound to its participant instance."""

    action: str
    phase: Phase
    payload_model: type[BaseModel] | None
    func: HandlerFunc

    def parse(self, payload: dict[str, Any]) -> Any:
        """Validate a command payload into the handler's model (raises pydantic ValidationError)."""
        if self.payload_model is None:
            return payload
        return self.payload_model.model_validate(payload)

    async def run(self, ctx: HandlerContext, body: Any) -> dict[str, Any] | None:
        """Run the handler and normalise its result to a JSON-able dict."""
        return normalise_result(await self.func(ctx, body))


def normalise_result(result: object) -> dict[str, Any] | None:
    if result is None:
        return None
    if isinstance(result, BaseModel):
        dumped: dict[str, Any] = result.model_dump(mode="json")
        return dumped
    if isinstance(result, dict):
        return dict(result)
    raise TypeError(f"a handler must return None, a dict or a pydantic model, not {type(result)!r}")


def handles(action: str, phase: Phase) -> Callable[[_F], _F]:
    """Mark a method of a :class:`Participant` as the handler of ``phase`` of ``action``."""

    def mark(func: _F) -> _F:
        if not inspect.iscoroutinefunction(typing.cast(Any, func)):
            raise ConfigurationError(f"handler {func.__qualname__} must be an async def")
        marks: list[tuple[str, Phase]] = getattr(func, _ATTR, [])
        marks.append((action, Phase(phase)))
        setattr(func, _ATTR, marks)
        return func

    return mark


def on_try(action: str) -> Callable[[_F], _F]:
    """TCC try: reserve the resource (may raise BusinessRejection)."""
    return handles(action, Phase.TRY)


def on_confirm(action: str) -> Callable[[_F], _F]:
    """TCC confirm: make the reservation final. Must not reject; retried until it succeeds."""
    return handles(action, Phase.CONFIRM)


def on_cancel(action: str) -> Callable[[_F], _F]:
    """TCC cancel: release the reservation. Skipped by the barrier when try never ran."""
    return handles(action, Phase.CANCEL)


def on_action(action: str) -> Callable[[_F], _F]:
    """Saga step action (may raise BusinessRejection)."""
    return handles(action, Phase.ACTION)


def on_compensate(action: str) -> Callable[[_F], _F]:
    """Saga step compensation. Skipped by the barrier when the action never ran."""
    return handles(action, Phase.COMPENSATE)


class Participant:
    """Base class of a participant service: set ``name`` and decorate handler methods."""

    #: The participant's name: its command topic and default consumer group derive from it.
    name: ClassVar[str] = ""

    def handlers(self) -> dict[tuple[str, Phase], Handler]:
        """Every (action, phase) this participant handles, bound to this instance."""
        found: dict[tuple[str, Phase], Handler] = {}
        for klass in reversed(type(self).__mro__):
            for attr, func in vars(klass).items():
                for key in getattr(func, _ATTR, ()):
                    found[key] = Handler(
                        action=key[0],
                        phase=key[1],
                        payload_model=_payload_model(func),
                        func=getattr(self, attr),
                    )
        return found

    def validate(self) -> dict[tuple[str, Phase], Handler]:
        """Check the declaration (name, complete TCC and saga pairs) and return the handlers."""
        if not self.name:
            raise ConfigurationError(f"{type(self).__name__} must set a class attribute `name`")
        table = self.handlers()
        actions = {action for action, _ in table}
        for action in actions:
            phases = {phase for a, phase in table if a == action}
            tcc = phases & {Phase.TRY, Phase.CONFIRM, Phase.CANCEL}
            saga = phases & {Phase.ACTION, Phase.COMPENSATE}
            if tcc and saga:
                raise ConfigurationError(f"action {action!r} mixes TCC and saga-step phases")
            if tcc and tcc != {Phase.TRY, Phase.CONFIRM, Phase.CANCEL}:
                raise ConfigurationError(f"TCC action {action!r} needs try, confirm and cancel")
            if saga and Phase.ACTION not in saga:
                raise ConfigurationError(f"saga action {action!r} has a compensation only")
        return table


def _payload_model(func: Callable[..., Any]) -> type[BaseModel] | None:
    params = list(inspect.signature(func).parameters)
    if len(params) != 3:
        raise ConfigurationError(
            f"handler {func.__qualname__} must take (self, ctx, payload), got {params}"
        )
    hints = typing.get_type_hints(func)
    model = hints.get(params[2])
    if isinstance(model, type) and issubclass(model, BaseModel):
        return model
    return None
