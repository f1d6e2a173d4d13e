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
                     compensable=True),
        )

The class is validated when it is created; every problem is reported at once, each message
naming the class and the step. Exceptions::

    DefinitionError (ValueError)   a saga class or its registration is invalid
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar
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
    "DefinitionError",
    "Guard",
    "Mapper",
    "Migration",
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


@dataclass(frozen=True)
class Migration:
    """How a running saga of version ``source.version`` moves to the class declaring it (in
    ``migrate_from``): node ``renames`` (old name -> new name), then ``transform``, a pure
    function of the renamed state's JSON returning the new JSON (default: unchanged). A saga
    moves only if every node it has maps to a node of the new version and no node that was
    renamed or changed has a command or timer outstanding (see ``coordinator.engine.migrate``)."""

    source: type[Saga]
    renames: Mapping[str, str] = field(default_factory=dict)
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: A label for the history and the audit (default: ``"v<N>->v<M>"``).
    name: str = ""


class Saga:
    """Base class of saga definitions. Subclasses are validated when they are created."""

    name: ClassVar[str]
    version: ClassVar[int] = 1
    input_model: ClassVar[type[BaseModel]]
    #: Steps and composite nodes (``coordinator.flow``), run in order.
    steps: ClassVar[Sequence[Any]]
    description: ClassVar[str] = ""
    #: Read-only queries by name: functions of a ``coordinator.saga_queries.QueryContext``
    #: returning a pydantic model (served at ``GET /sagas/{id}/queries/{name}``).
    queries: ClassVar[Mapping[str, Callable[[Any], BaseModel]]] = {}
    #: Running sagas of older versions this version can take over: version -> how.
    migrate_from: ClassVar[Mapping[int, Migration]] = {}
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
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
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
    queries = getattr(cls, "queries", {})
    if not isinstance(queries, Mapping):
        problems.append(f"{where}: `queries` must be a mapping of name -> function")
        queries = {}
    for qname, fn in queries.items():
        if not isinstance(qname, str) or not NAME_PATTERN.match(qname):
            problems.append(f"{where}: query name must be identifier-like, got {qname!r}")
        if not callable(fn):
            problems.append(f"{where}: query {qname!r} must be callable, got {fn!r}")
    problems.extend(_migration_problems(where, cls))
    from coordinator.flow import node_problems  # flow's nodes hold this module's steps

    problems.extend(node_problems(
        where, steps, set(), 0,
        lambda at, step, seen: _step_problems(at, step, seen, strict_participants)))
    if problems:
        raise DefinitionError("invalid saga definition:\n  " + "\n  ".join(problems))


def _migration_problems(where: str, cls: type[Saga]) -> list[str]:
    table = getattr(cls, "migrate_from", {})
    if not isinstance(table, Mapping):
        return [f"{where}: `migrate_from` must be a mapping of version -> Migration"]
    out: list[str] = []
    for version, migration in table.items():
        at = f"{where}.migrate_from[{version!r}]"
        if not isinstance(migration, Migration):
            out.append(f"{at}: must be a Migration, got {migration!r}")
            continue
        src = migration.source
        if not (isinstance(src, type) and issubclass(src, Saga)):
            out.append(f"{at}: source must be a Saga class, got {src!r}")
            continue
        if getattr(src, "name", None) != getattr(cls, "name", None) or src.version != version:
            out.append(f"{at}: source is {getattr(src, 'name', '?')} v{src.version}, not "
                       f"{getattr(cls, 'name', '?')} v{version}")
        if isinstance(cls.version, int) and version >= cls.version:
            out.append(f"{at}: can only migrate from an older version than {cls.version}")
        if migration.transform is not None and not callable(migration.transform):
            out.append(f"{at}: transform must be callable, got {migration.transform!r}")
    return out


def _step_problems(
    where: str,
    step: StepSpec,
    seen: set[str],
    strict_participants: set[str] | frozenset[str] | None,
) -> list[str]:
    at = f"{where}.{step.name}"
    out: list[str] = []
    if not isinstance(step.name, str) or not NAME_PATTERN.match(step.name):
        out.append(f"{at}: step name must be identifier-like (letters, digits, _ and -)")
    if step.name in seen:
        out.append(f"{at}: duplicate node name {step.name!r}")
    for label, value in (("participant", step.participant), ("action", step.action)):
        if not isinstance(value, str) or not NAME_PATTERN.match(value):
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
    if step.compensable is _Unset.UNSET:
        return [f"{at}: saga step must say compensable=True (its participant compensates "
                "the action) or compensable=False (it cannot be undone)"]
    if not isinstance(step.compensable, bool):
        return [f"{at}: compensable must be True or False, got {step.compensable!r}"]
    return []
