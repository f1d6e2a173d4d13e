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
naming the class and the step. The node tree's checks live here, beside the class, because a
child saga's target is checked against :class:`Saga`. Exceptions::

    DefinitionError (ValueError)   a saga class or its registration is invalid
"""

from __future__ import annotations

import collections.abc as cabc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from coordinator.language.business_key import BusinessKey, business_key_problems
from coordinator.language.flow_nodes import Catch, Loop, flow_problems
from coordinator.language.nodes import (
    _COMPOSITES,
    ITEMS_CEILING,
    MAX_DEPTH,
    ChildSaga,
    Choice,
    ForEach,
    Parallel,
    Patched,
    Race,
    Sequence,
    Sleep,
    SleepUntil,
    WaitForSignal,
    branch_nodes,
    named_branches,
)
from coordinator.language.policies import (
    DEFAULT_DEADLINE,
    DEFAULT_RETRY,
    DEFAULT_ROLLBACK_RETRY,
    RetryPolicy,
)
from coordinator.language.search_attributes import SearchAttribute, search_problems
from coordinator.language.steps import (
    NAME_PATTERN,
    DefinitionError,
    Guard,
    Mapper,
    PolicyLike,
    SagaStep,
    StepContext,
    StepSpec,
    TccStep,
    _Unset,
    resolve_policy,
)
from coordinator.language.tasks import HumanTask, task_problems
from coordinator.language.timeouts import node_timeout_problems, saga_timeout_problems
from coordinator.language.updates import Update, update_problems

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
    #: Steps and composite nodes (``coordinator.language.nodes``), run in order.
    steps: ClassVar[cabc.Sequence[Any]]
    description: ClassVar[str] = ""
    #: Read-only queries by name: functions of a ``coordinator.sagas.queries.QueryContext``
    #: returning a pydantic model (served at ``GET /sagas/{id}/queries/{name}``).
    queries: ClassVar[Mapping[str, Callable[[Any], BaseModel]]] = {}
    #: Updates it takes: signals with a validator and an answer (``language.updates``).
    updates: ClassVar[cabc.Sequence[Update]] = ()
    #: Running sagas of older versions this version can take over: version -> how.
    migrate_from: ClassVar[Mapping[int, Migration]] = {}
    #: The id people know a saga by: an input field's name, or a
    #: :class:`~coordinator.language.business_key.BusinessKey` (stored, indexed, searchable).
    business_key: ClassVar[str | BusinessKey | None] = None
    #: Typed, indexed fields set from the input and the results, to filter sagas by
    #: (:class:`~coordinator.language.search_attributes.SearchAttribute`).
    search: ClassVar[cabc.Sequence[SearchAttribute]] = ()
    #: Signals a saga keeps (received, no wait has taken them yet), at most, in all and per
    #: signal name: one more is refused (HTTP 409 ``too_many_signals``; on Kafka, a dead
    #: letter), so signals nobody waits for cannot grow a saga without end.
    max_kept_signals: ClassVar[int] = 1000
    max_kept_signals_per_name: ClassVar[int] = 100
    #: How long the saga may run forward, from its start (``None``: no limit); then it rolls
    #: back (``on_timeout = "rollback"``) or is parked as dead (``"dead"``).
    timeout: ClassVar[timedelta | None] = None
    on_timeout: ClassVar[str] = "rollback"
    #: Abstract intermediate bases set this to skip validation.
    abstract: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("abstract", False):
            return
        validate_saga_class(cls)


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
    if not isinstance(steps, cabc.Sequence) or isinstance(steps, str) or not steps:
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
    for bound in ("max_kept_signals", "max_kept_signals_per_name"):
        value = getattr(cls, bound, None)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"{where}: `{bound}` must be an int >= 1, got {value!r}")
    problems.extend(update_problems(where, getattr(cls, "updates", ()), steps))
    problems.extend(_migration_problems(where, cls))
    problems.extend(saga_timeout_problems(where, cls))
    problems.extend(business_key_problems(where, cls))
    problems.extend(search_problems(where, cls))
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


def node_problems(where: str, nodes: cabc.Sequence[Any], seen: set[str], depth: int,
                  step_problems: cabc.Callable[[str, Any, set[str]], list[str]],
                  in_race: bool = False) -> list[str]:
    """Every problem of ``nodes`` (recursively), each naming class and node."""
    out: list[str] = []
    for index, node in enumerate(nodes):
        if isinstance(node, TccStep | SagaStep):
            out.extend(step_problems(where, node, seen))
            seen.add(node.name)
            if in_race and isinstance(node, SagaStep) and not node.reversible:
                out.append(f"{where}.{node.name}: a step inside a Race must be reversible "
                           "(losers are undone)")
            continue
        if isinstance(node, ChildSaga):
            out.extend(_child_problems(f"{where}.{node.name}", node, seen))
            seen.add(node.name)
            continue
        if isinstance(node, Sleep | SleepUntil):
            out.extend(_sleep_problems(f"{where}.{node.name}", node, seen))
            seen.add(node.name)
            continue
        if isinstance(node, HumanTask):
            out.extend(_name_problems(f"{where}.{node.name}", node.name, seen))
            out.extend(task_problems(f"{where}.{node.name}", node))
            seen.add(node.name)
            continue
        if isinstance(node, WaitForSignal):
            out.extend(_wait_problems(f"{where}.{node.name}", node, seen))
            seen.add(node.name)
            continue
        if not isinstance(node, _COMPOSITES):
            out.append(f"{where}: node {index} is {node!r}, not a step or a composite node")
            continue
        name = node.node_name if isinstance(node, Patched) else node.name
        at = f"{where}.{name}"
        out.extend(_name_problems(at, name, seen))
        seen.add(name)
        if depth >= MAX_DEPTH:
            out.append(f"{at}: composites nest deeper than {MAX_DEPTH} levels")
            continue
        race = in_race or isinstance(node, Race)
        for label, branch in named_branches(node):
            kids = branch_nodes(branch)
            if not kids:
                out.append(f"{at}: {label} is empty")
                continue
            if isinstance(node, Parallel | Race | Choice):
                out.extend(_guard_beside_problems(f"{at}: {label}", kids))
            out.extend(node_problems(where, kids, seen, depth + 1, step_problems, race))
        out.extend(_own_problems(at, node))
    return out


def _child_problems(at: str, node: ChildSaga, seen: set[str]) -> list[str]:

    out = _name_problems(at, node.name, seen)
    target: Any = node.saga
    if isinstance(target, type) and issubclass(target, Saga):
        target = getattr(target, "name", None)
    if not isinstance(target, str) or not NAME_PATTERN.match(target):
        out.append(f"{at}: saga must be a Saga class or a registered saga type name, "
                   f"got {node.saga!r}")
    v = node.version
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
        out.append(f"{at}: version must be None or an int >= 1, got {v!r}")
    if not isinstance(node.deadline, timedelta) or node.deadline <= timedelta(0):
        out.append(f"{at}: deadline must be a positive timedelta, got {node.deadline!r}")
    for label, fn in (("input", node.input), ("when", node.when)):
        if fn is not None and not callable(fn):
            out.append(f"{at}: {label} must be callable, got {fn!r}")
    try:
        resolve_policy(node.finish_retry)
    except (TypeError, ValueError) as exc:
        out.append(f"{at}: bad finish_retry: {exc}")
    return out + node_timeout_problems(at, node)


def _sleep_problems(at: str, node: Sleep | SleepUntil, seen: set[str]) -> list[str]:
    out = _name_problems(at, node.name, seen)
    if isinstance(node, Sleep):
        d = node.duration
        if not callable(d) and (not isinstance(d, timedelta) or d < timedelta(0)):
            out.append(f"{at}: duration must be a timedelta >= 0 or a function returning "
                       f"one, got {d!r}")
        return out
    u = node.until
    if isinstance(u, datetime):
        if u.tzinfo is None or u.utcoffset() is None:
            out.append(f"{at}: until is a naive datetime ({u.isoformat()}); give a "
                       "timezone-aware one (e.g. tzinfo=UTC)")
    elif not callable(u):
        out.append(f"{at}: until must be a timezone-aware datetime or a function returning "
                   f"one, got {u!r}")
    return out


def _wait_problems(at: str, node: WaitForSignal, seen: set[str]) -> list[str]:

    out = _name_problems(at, node.name, seen)
    if not isinstance(node.signal, str) or not NAME_PATTERN.match(node.signal):
        out.append(f"{at}: signal must be an identifier-like name, got {node.signal!r}")
    model = node.payload
    if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
        out.append(f"{at}: payload must be a pydantic model class or None, got {model!r}")
    t = node.timeout
    if t is not None and (not isinstance(t, timedelta) or t <= timedelta(0)):
        out.append(f"{at}: timeout must be None or a positive timedelta, got {t!r}")
    if node.on_timeout not in ("fail", "continue"):
        out.append(f"{at}: on_timeout must be 'fail' or 'continue', got {node.on_timeout!r}")
    return out


def _name_problems(at: str, name: Any, seen: set[str]) -> list[str]:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        return [f"{at}: node name must be identifier-like (letters, digits, _ and -)"]
    if name in seen:
        return [f"{at}: duplicate node name {name!r}"]
    return []


def _guard_beside_problems(at: str, kids: tuple[Any, ...]) -> list[str]:
    """A guard beside what was a branch's only node turns the branch into a sequence that the
    sagas started before the guard do not have (their rollback would pass the branch by)."""
    before = _before_guards(kids)
    if len(kids) == 1 or len(before) != 1 or not any(isinstance(k, Patched) for k in kids):
        return []
    name = getattr(before[0], "name", "?")
    return [f"{at}: without its guards this branch is the single node {name!r}; a guard "
            "beside it makes the branch a sequence that sagas started before the guard lack: "
            f"guard the whole branch instead (Patched(change, new=(...), old={name}))"]


def _before_guards(kids: tuple[Any, ...]) -> tuple[Any, ...]:
    """The nodes of a branch as they were before its guards: each guard by its old path."""
    out: list[Any] = []
    for kid in kids:
        if isinstance(kid, Patched):
            out.extend(_before_guards(branch_nodes(kid.old)) if kid.old is not None else ())
        else:
            out.append(kid)
    return tuple(out)


def _own_problems(at: str, node: Any) -> list[str]:
    out: list[str] = [] if isinstance(node, Patched) else node_timeout_problems(at, node)
    if isinstance(node, Catch | Loop):
        out.extend(flow_problems(at, node))
    elif isinstance(node, ForEach):
        if not callable(node.items):
            out.append(f"{at}: items must be callable, got {node.items!r}")
        mi = node.max_items
        if not isinstance(mi, int) or isinstance(mi, bool) or not 1 <= mi <= ITEMS_CEILING:
            out.append(f"{at}: max_items must be an int from 1 to {ITEMS_CEILING}, got {mi!r}")
        mc = node.max_concurrency
        if mc is not None and (not isinstance(mc, int) or isinstance(mc, bool) or mc < 1):
            out.append(f"{at}: max_concurrency must be None or an int >= 1, got {mc!r}")
    elif isinstance(node, Parallel | Race):
        if not isinstance(node.branches, list | tuple) or not node.branches:
            out.append(f"{at}: branches must be a non-empty tuple")
        if isinstance(node, Race):
            q, n = node.quorum, len(node.branches) if isinstance(node.branches, tuple) else 0
            if not isinstance(q, int) or isinstance(q, bool) or not 1 <= q <= max(n, 1):
                out.append(f"{at}: quorum must be an int from 1 to the number of branches "
                           f"({n}), got {q!r}")
            if node.verdicts not in ("decided", "first_rejection", "all"):
                out.append(f"{at}: verdicts must be 'decided', 'first_rejection' or 'all', "
                           f"got {node.verdicts!r}")
    elif isinstance(node, Choice):
        pairs = node.branches if isinstance(node.branches, list | tuple) else None
        if not pairs:
            out.append(f"{at}: branches must be a non-empty tuple of (guard, branch) pairs")
        for i, pair in enumerate(pairs or ()):
            if not (isinstance(pair, list | tuple) and len(pair) == 2 and callable(pair[0])):
                out.append(f"{at}: branches[{i}] must be a (guard, branch) pair with a "
                           "callable guard")
    elif isinstance(node, Patched):

        if not isinstance(node.change, str) or not NAME_PATTERN.match(node.change):
            out.append(f"{at}: change must be an identifier-like change id, "
                       f"got {node.change!r}")
    elif isinstance(node, Sequence) and not isinstance(node.steps, list | tuple):
        out.append(f"{at}: steps must be a tuple of nodes")
    return out
