"""The steps of a saga: TCC steps and saga steps (action and compensation), what their guards
and payload mappers see, and the checks shared by every node (names, policies)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Generic, TypeVar
from uuid import UUID

from pydantic import BaseModel

from coordinator.language.policies import (
    DEFAULT_DEADLINE,
    DEFAULT_RETRY,
    DEFAULT_ROLLBACK_RETRY,
    RetryPolicy,
)

__all__ = [
    "NAME_PATTERN",
    "DefinitionError",
    "Guard",
    "Mapper",
    "PolicyLike",
    "SagaStep",
    "StepContext",
    "StepSpec",
    "TccStep",
    "resolve_policy",
]

InputT = TypeVar("InputT", bound=BaseModel)


class DefinitionError(ValueError):
    """A saga class (or its registration) is invalid; the message names class and step."""


@dataclass(frozen=True)
class StepContext(Generic[InputT]):
    """What a guard or payload mapper sees: the saga input and earlier steps' results."""

    saga_id: UUID
    version: int
    input: InputT
    #: Result of every node that succeeded so far, by node name (``None`` for an empty
    #: result). Inside a for-each item, the item's own steps are found by their bare names.
    results: Mapping[str, Any]
    #: Inside a for-each body: the item and its position; ``None`` elsewhere.
    item: Any = None
    index: int | None = None
    #: The time of the event being applied (a reply's, a timer's, a signal's arrival), never
    #: the clock: a mapper or guard that needs the time replays to the same answer.
    now: datetime | None = None
    #: Inside a ``Catch``'s fallback: the failure it caught (``kind``, ``reason``, ``node``).
    caught: Mapping[str, Any] | None = None
    #: The result of the latest accepted update of each name (``language.updates``).
    updates: Mapping[str, Any] = field(default_factory=dict)


#: Builds a command payload from the context. Must be deterministic: it runs again on replay.
Mapper = Callable[[StepContext[Any]], dict[str, Any]]
#: Decides whether a step runs. Must be deterministic: it runs again on replay.
Guard = Callable[[StepContext[Any]], bool]
#: A policy, or its fields as a mapping (validated with the class, errors naming the step).
PolicyLike = RetryPolicy | Mapping[str, Any]

NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,99}$")


class _Unset(Enum):
    UNSET = "unset"


@dataclass(frozen=True)
class _StepBase:
    name: str
    participant: str
    action: str
    _: KW_ONLY
    #: Builds the forward command's payload; default: the whole saga input.
    payload: Mapper | None = None
    #: The step runs only when this returns true; otherwise it is skipped.
    when: Guard | None = None
    #: Retry policy of the forward phase (try or action).
    retry: PolicyLike = DEFAULT_RETRY
    #: How long to wait for each forward reply; a missing reply counts as a retryable failure.
    deadline: timedelta = DEFAULT_DEADLINE
    #: How long to wait for each confirm/cancel/compensate reply.
    rollback_deadline: timedelta = DEFAULT_DEADLINE
    description: str = ""


@dataclass(frozen=True)
class TccStep(_StepBase):
    """Try, then confirm (when every forward step succeeded) or cancel (on rollback).

    All three phases go to ``participant`` with the same ``action``; the envelope's ``phase``
    says which handler runs.
    """

    _: KW_ONLY
    #: Retry policy of the confirm phase.
    confirm_retry: PolicyLike = DEFAULT_ROLLBACK_RETRY
    #: Retry policy of the cancel phase.
    cancel_retry: PolicyLike = DEFAULT_ROLLBACK_RETRY
    #: Payload of confirm and cancel; default: the try payload.
    finish_payload: Mapper | None = None


@dataclass(frozen=True)
class SagaStep(_StepBase):
    """An action, undone on rollback by the participant's compensation of the same action.

    ``compensable`` must be said out loud: ``True`` when the participant has an
    ``on_compensate`` handler for ``action``, ``False`` for a step that cannot be undone. On the
    wire a compensation is ``phase=compensate`` with the step's own ``action``.
    """

    _: KW_ONLY
    compensable: bool | _Unset = _Unset.UNSET
    #: Retry policy of the compensation.
    compensation_retry: PolicyLike = DEFAULT_ROLLBACK_RETRY
    #: Payload of the compensation; default: the action payload.
    compensation_payload: Mapper | None = None

    @property
    def reversible(self) -> bool:
        return self.compensable is True


StepSpec = TccStep | SagaStep


def resolve_policy(value: PolicyLike) -> RetryPolicy:
    """A policy from a policy or a mapping of its fields (raises ``ValidationError``)."""
    if isinstance(value, RetryPolicy):
        return value
    return RetryPolicy.model_validate(dict(value))
