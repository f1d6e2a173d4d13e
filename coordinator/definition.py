"""Sagas as Python classes.

A saga class names itself, gives a version and a pydantic input model, and lists its steps::

    class OrderSaga(Saga):
        name = "order"
        version = 1
        input_model = OrderInput
        steps = (
            TccStep("reserve_funds", participant="payments", action="reserve",
                    payload=lambda ctx: {"customer_id": ctx.input.customer_id}),
            SagaStep("create_shipment", participant="shipping", action="create",
                     compensation="cancel"),
        )

The class is validated when it is created; every problem is reported at once, each message
naming the class and the step. Exceptions::

    DefinitionError (ValueError)   a saga class or its registration is invalid
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import timedelta
from enum import Enum
from typing import Any, ClassVar, Final, Generic, TypeVar
from uuid import UUID

from pydantic import BaseModel, ValidationError

from coordinator.definition_policies import (
    DEFAULT_DEADLINE,
    DEFAULT_RETRY,
    DEFAULT_ROLLBACK_RETRY,
    RetryPolicy,
)

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_RETRY",
    "DEFAULT_ROLLBACK_RETRY",
    "NO_COMPENSATION",
    "DefinitionError",
    "Guard",
    "Mapper",
    "NoCompensation",
    "PolicyLike",
    "RetryPolicy",
    "Saga",
    "SagaStep",
    "StepContext",
    "StepSpec",
    "TccStep",
    "resolve_policy",
    "validate_saga_class",
]

InputT = TypeVar("InputT", bound=BaseModel)


class DefinitionError(ValueError):
    """A saga class (or its registration) is invalid; the message names class and step."""


class NoCompensation(Enum):
    """Marker type of :data:`NO_COMPENSATION`."""

    NO_COMPENSATION = "no_compensation"


#: Declares on purpose that a saga step cannot be undone (``compensation=None`` is an error).
NO_COMPENSATION: Final = NoCompensation.NO_COMPENSATION


@dataclass(frozen=True)
class StepContext(Generic[InputT]):
    """What a guard or payload mapper sees: the saga input and earlier steps' results."""

    saga_id: UUID
    version: int
    input: InputT
    #: Result of every step that succeeded so far, by step key (``None`` for an empty result).
    results: Mapping[str, dict[str, Any] | None]


#: Builds a command payload from the context. Must be deterministic: it runs again on replay.
Mapper = Callable[[StepContext[Any]], dict[str, Any]]
#: Decides whether a step runs. Must be deterministic: it runs again on replay.
Guard = Callable[[StepContext[Any]], bool]
#: A policy, or its fields as a mapping (validated with the class, errors naming the step).
PolicyLike = RetryPolicy | Mapping[str, Any]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,99}$")


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
    """An action, undone by a compensation action on rollback.

    ``compensation`` must be given: an action name, or :data:`NO_COMPENSATION`
    (equivalently ``irreversible=True``) for a step that cannot be undone.
    """

    _: KW_ONLY
    compensation: str | NoCompensation | _Unset | None = _Unset.UNSET
    irreversible: bool = False
    #: Retry policy of the compensation.
    compensation_retry: PolicyLike = DEFAULT_ROLLBACK_RETRY
    #: Payload of the compensation; default: the action payload.
    compensation_payload: Mapper | None = None

    @property
    def reversible(self) -> bool:
        return isinstance(self.compensation, str)


StepSpec = TccStep | SagaStep


class Saga:
    """Base class of saga definitions. Subclasses are validated when they are created."""

    name: ClassVar[str]
    version: ClassVar[int] = 1
    input_model: ClassVar[type[BaseModel]]
    steps: ClassVar[Sequence[StepSpec]]
    description: ClassVar[str] = ""
    #: Abstract intermediate bases set this to skip validation.
    abstract: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("abstract", False):
            return
        validate_saga_class(cls)


def resolve_policy(value: PolicyLike) -> RetryPolicy:
    """A policy from a policy or a mapping of its fields (raises ``ValidationError``)."""
    if isinstance(value, RetryPolicy):
        return value
    return RetryPolicy.model_validate(dict(value))


def validate_saga_class(
    cls: type[Saga], strict_participants: set[str] | frozenset[str] | None = None
) -> None:
    """Raise :class:`DefinitionError` listing every problem of ``cls``, or return."""
    where = cls.__qualname__
    problems: list[str] = []
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _NAME.match(name):
        problems.append(f"{where}: `name` must be an identifier-like string, got {name!r}")
    version = getattr(cls, "version", None)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        problems.append(f"{where}: `version` must be an int >= 1, got {version!r}")
    model = getattr(cls, "input_model", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        problems.append(f"{where}: `input_model` must be a pydantic model class, got {model!r}")
    steps = getattr(cls, "steps", None)
    if not isinstance(steps, Sequence) or isinstance(steps, str) or not steps:
        problems.append(f"{where}: `steps` must be a non-empty list or tuple of steps")
        steps = ()
    seen: set[str] = set()
    for index, step in enumerate(steps):
        if not isinstance(step, TccStep | SagaStep):
            problems.append(f"{where}: steps[{index}] is {step!r}, not a TccStep or SagaStep")
            continue
        problems.extend(_step_problems(where, step, seen, strict_participants))
        seen.add(step.name)
    if problems:
        raise DefinitionError("invalid saga definition:\n  " + "\n  ".join(problems))


def _step_problems(
    where: str,
    step: StepSpec,
    seen: set[str],
    strict_participants: set[str] | frozenset[str] | None,
) -> list[str]:
    at = f"{where}.{step.name}"
    out: list[str] = []
    if not isinstance(step.name, str) or not _NAME.match(step.name):
        out.append(f"{at}: step name must be identifier-like (letters, digits, _ and -)")
    if step.name in seen:
        out.append(f"{at}: duplicate step name {step.name!r}")
    for label, value in (("participant", step.participant), ("action", step.action)):
        if not isinstance(value, str) or not _NAME.match(value):
            out.append(f"{at}: {label} must be identifier-like, got {value!r}")
    if strict_participants is not None and step.participant not in strict_participants:
        known = ", ".join(sorted(strict_participants)) or "none"
        out.append(f"{at}: unknown participant {step.participant!r} (known: {known})")
    for label, dl in (("deadline", step.deadline), ("rollback_deadline", step.rollback_deadline)):
        if not isinstance(dl, timedelta) or dl <= timedelta(0):
            out.append(f"{at}: {label} must be a positive timedelta, got {dl!r}")
    for label, fn in (("payload", step.payload), ("when", step.when)):
        if fn is not None and not callable(fn):
            out.append(f"{at}: {label} must be callable, got {fn!r}")
    policies: dict[str, PolicyLike] = {"retry": step.retry}
    if isinstance(step, TccStep):
        policies.update(confirm_retry=step.confirm_retry, cancel_retry=step.cancel_retry)
    else:
        policies["compensation_retry"] = step.compensation_retry
        out.extend(_compensation_problems(at, step))
    for label, policy in policies.items():
        if not isinstance(policy, RetryPolicy | Mapping):
            out.append(f"{at}: {label} must be a RetryPolicy, got {policy!r}")
            continue
        try:
            resolve_policy(policy)
        except ValidationError as exc:
            errs = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'policy'}: {e['msg']}"
                             for e in exc.errors())
            out.append(f"{at}: bad {label}: {errs}")
    return out


def _compensation_problems(at: str, step: SagaStep) -> list[str]:
    comp = step.compensation
    if step.irreversible:
        if isinstance(comp, str):
            return [f"{at}: irreversible=True contradicts compensation={comp!r}"]
        return []
    if comp is NO_COMPENSATION:
        return []
    if comp is None:
        return [f"{at}: compensation=None is ambiguous; pass compensation=NO_COMPENSATION "
                    "(or irreversible=True) to declare a step that cannot be undone"]
    if comp is _Unset.UNSET:
        return [f"{at}: saga step needs a compensation action, or compensation=NO_COMPENSATION "
                "(or irreversible=True) to declare that it cannot be undone"]
    if not isinstance(comp, str) or not _NAME.match(comp):
        return [f"{at}: compensation must be an action name or NO_COMPENSATION, got {comp!r}"]
    return []
