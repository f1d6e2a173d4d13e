"""Updates: a signal with a validator and an answer (Temporal's Update).

A saga class lists the updates it takes::

    class AddressChange(BaseModel):
        address: str

    class OrderSaga(Saga):
        ...
        updates = (
            Update("change_address", model=AddressChange,
                   validate=lambda ctx, u: None if ctx.status == "running" and u.address
                   else "the order has shipped",
                   apply=lambda ctx, u: {"address": u.address, "at": ctx.now.isoformat()},
                   signal="address_changed"),
        )

``validate`` sees the saga as it stands and the payload (an instance of ``model``); it accepts
by returning ``None`` (or ``True``) and rejects by returning a reason (a string, or ``False``)
or by raising :class:`UpdateRejected`. A rejected update changes nothing. ``apply`` runs only
on an accepted update and returns its result (a dict or a pydantic model): the sender's answer,
and what later mappers, guards and queries read as ``ctx.updates[name]`` (the latest accepted
update of that name). With ``signal``, an accepted update also delivers that signal (payload:
the result) in the same transaction, so a wait for it wakes at once.

Both functions run inside the saga's transaction and ``apply`` runs again on replay: like
mappers and queries they must be deterministic, do no I/O, and read the time as ``ctx.now``.
"""

from __future__ import annotations

import collections.abc as cabc
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from uuid import UUID

from pydantic import BaseModel

from coordinator.language.nodes import WaitForSignal, child_branches
from coordinator.language.steps import NAME_PATTERN

__all__ = ["Update", "UpdateContext", "UpdateRejected", "update_problems", "waited_signals"]

InputT = TypeVar("InputT", bound=BaseModel)


class UpdateRejected(Exception):
    """Raised by a validator to reject an update with ``reason`` (nothing is applied)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class UpdateContext(Generic[InputT]):
    """What an update's ``validate`` and ``apply`` see: the saga as it stands."""

    saga_id: UUID
    saga_type: str
    version: int
    #: ``running``, ``compensating``, ``dead``, ... (never a finished status: refused before).
    status: str
    input: InputT
    #: The result of every node that succeeded so far, by node key.
    results: Mapping[str, Any]
    #: The result of the latest accepted update of each name, by update name.
    updates: Mapping[str, Any]
    #: The time the update is applied (on replay: the recorded time), never the clock.
    now: datetime


#: Accepts (``None``/``True``) or rejects (a reason, ``False``, or :class:`UpdateRejected`).
Validator = Callable[[UpdateContext[Any], Any], "str | bool | None"]
#: The accepted update's result: a JSON object (dict) or a pydantic model.
Applier = Callable[[UpdateContext[Any], Any], "Mapping[str, Any] | BaseModel | None"]


@dataclass(frozen=True)
class Update:
    """An update a saga takes: ``POST /sagas/{id}/updates/{name}``, answered synchronously."""

    name: str
    _: KW_ONLY
    #: The payload's model (``None``: any JSON object, given to the functions as a dict).
    model: type[BaseModel] | None = None
    #: ``None``: every update is accepted.
    validate: Validator | None = None
    #: ``None``: the result is the payload itself.
    apply: Applier | None = None
    #: A signal (one the saga's waits declare) delivered with the result as its payload
    #: when the update is accepted: a wait for it wakes in the same transaction.
    signal: str | None = None
    description: str = field(default="")


def waited_signals(steps: Any) -> set[str]:
    """The signal names the waits of a saga's node tree declare."""
    out: set[str] = set()

    def visit(nodes: Any) -> None:
        for node in nodes if isinstance(nodes, list | tuple) else (nodes,):
            if isinstance(node, WaitForSignal):
                out.add(node.signal)
            for branch in child_branches(node):
                visit(branch)

    visit(steps)
    return out


def update_problems(where: str, updates: Any, steps: Any) -> list[str]:
    """Every problem of a class's ``updates`` declaration, each naming the class."""
    if not isinstance(updates, cabc.Sequence) or isinstance(updates, str):
        return [f"{where}: `updates` must be a tuple of Update, got {updates!r}"]
    problems: list[str] = []
    seen: set[str] = set()
    signals = waited_signals(steps)
    for update in updates:
        if not isinstance(update, Update):
            problems.append(f"{where}: `updates` holds {update!r}, not an Update")
            continue
        at = f"{where}.updates[{update.name!r}]"
        if not isinstance(update.name, str) or not NAME_PATTERN.match(update.name):
            problems.append(f"{at}: name must be identifier-like")
        elif update.name in seen:
            problems.append(f"{at}: declared twice")
        seen.add(update.name)
        model = update.model
        if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
            problems.append(f"{at}: model must be a pydantic model class or None")
        for role in ("validate", "apply"):
            fn = getattr(update, role)
            if fn is not None and not callable(fn):
                problems.append(f"{at}: {role} must be callable, got {fn!r}")
        if update.signal is not None and update.signal not in signals:
            problems.append(f"{at}: signal {update.signal!r} is not one the saga's waits "
                            f"declare ({', '.join(sorted(signals)) or 'none'})")
    return problems
