"""Composite nodes of a saga definition: sequences, parallel groups, for-each, races, choices,
and the waits: durable sleeps and waits for signals.

A saga's ``steps`` is a sequence. Each element is a step (:class:`TccStep`, :class:`SagaStep`)
or one of the composites below; a *branch* is one node or a tuple of nodes (run in order)::

    steps = (
        TccStep("reserve_funds", "payments", "charge"),
        ForEach("lines", items=lambda ctx: ctx.input.lines, max_concurrency=4,
                body=(TccStep("reserve_stock", "inventory", "reserve",
                              payload=lambda ctx: ctx.item),)),
        Race("quote", branches=(SagaStep("fast", "carrier_a", "book", compensable=True),
                                SagaStep("cheap", "carrier_b", "book", compensable=True))),
    )

Every node name is unique in the whole definition: a node's runtime key is its name, prefixed
by the for-each item it runs in (``lines[3].reserve_stock``).
"""

from __future__ import annotations

import collections.abc as cabc
from dataclasses import KW_ONLY, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from coordinator.definition import (
    DEFAULT_ROLLBACK_RETRY,
    Guard,
    Mapper,
    PolicyLike,
    SagaStep,
    StepContext,
    TccStep,
)

if TYPE_CHECKING:
    from coordinator.definition import Saga

__all__ = [
    "MAX_CHILD_DEPTH",
    "MAX_DEPTH",
    "Branch",
    "ChildSaga",
    "Choice",
    "ForEach",
    "Node",
    "Parallel",
    "Patched",
    "Race",
    "Sequence",
    "Sleep",
    "SleepUntil",
    "WaitForSignal",
    "branch_nodes",
    "child_branches",
]

#: Nesting limit of composites (keeps step keys short: the wire limits them to 200 chars).
MAX_DEPTH = 6
#: Hard ceiling on a for-each's ``max_items`` (larger fan-outs belong in child sagas).
ITEMS_CEILING = 10_000
#: How deep child sagas may nest (a child of a top-level saga is at depth 1). A start
#: beyond it fails the node, so a saga that runs itself cannot recurse without end.
MAX_CHILD_DEPTH = 5


@dataclass(frozen=True)
class Sequence:
    """Nodes run one after the other; done when the last is done."""

    name: str
    steps: tuple[Any, ...]
    _: KW_ONLY
    description: str = ""


@dataclass(frozen=True)
class Parallel:
    """Static branches started together; joins when every branch succeeded.

    One branch failing for good fails the node: new work stops, siblings in flight are
    treated as possibly applied, and the saga rolls back everything that was applied."""

    name: str
    branches: tuple[Any, ...]
    _: KW_ONLY
    description: str = ""


@dataclass(frozen=True)
class ForEach:
    """One branch (``body``, run in order) per item of ``items(ctx)``, in item order.

    ``items`` sees the input and earlier results and returns a list of JSON values; the body's
    mappers see the item as ``ctx.item`` and its position as ``ctx.index``. At most
    ``max_concurrency`` items run at once (``None``: all), the next one starting as one
    finishes. More than ``max_items`` items fail the node. The result is the list of item
    results (each the result of the body's last step) in item order."""

    name: str
    items: Mapper | cabc.Callable[[StepContext[Any]], cabc.Sequence[Any]]
    body: tuple[Any, ...]
    _: KW_ONLY
    max_concurrency: int | None = None
    max_items: int = 100
    description: str = ""


@dataclass(frozen=True)
class Race:
    """First-of-N (``quorum=1``) or K-of-N: branches start together; the first ``quorum`` to
    succeed win. Every other branch is undone at once, including a loser whose reply arrives
    after the win, so no loser's effect stays. Every step in a race must be reversible. The
    node fails as soon as ``quorum`` successes are out of reach. Result: the winner's result
    (``quorum=1``) or the winners' results in the order they won."""

    name: str
    branches: tuple[Any, ...]
    _: KW_ONLY
    quorum: int = 1
    description: str = ""


@dataclass(frozen=True)
class Choice:
    """if / elif / else: the first branch whose guard is true runs, else ``otherwise``.

    The branch taken is recorded when the node is entered and never evaluated again."""

    name: str
    branches: tuple[tuple[Guard, Any], ...]
    _: KW_ONLY
    otherwise: Any = None
    description: str = ""


@dataclass(frozen=True)
class Patched:
    """A version guard: the branch ``new`` replaces ``old`` (``None``: ``new`` was added) by
    the change ``change``, inside one saga version.

    Decided once per saga, the first time the walk reaches it: a saga that already ran a node
    of ``old``, or a node after the guard, keeps the old path; any other takes ``new``. The
    choice is kept in the snapshot (``patches``) and the history note, so replay follows it.
    Several guards may share one change id: they then all take the same path. The guard has no
    state of its own: its branch's nodes sit where the guard sits, under the same keys they
    had before the guard was written."""

    change: str
    new: Any
    old: Any = None
    _: KW_ONLY
    #: The guard's node name (default: the change id); unique like every node name.
    name: str = ""
    description: str = ""

    @property
    def node_name(self) -> str:
        return self.name or self.change


@dataclass(frozen=True)
class ChildSaga:
    """Run another registered saga type as one node, with its own row, history and trace;
    the parent waits for it.

    Nested TCC: the child is *tried* when it starts; once its whole tree succeeded it
    reports its results and waits (``prepared``), and the parent goes on. When the parent
    succeeds it confirms the child (the child confirms its own TCC steps and completes);
    when the parent rolls back it cancels the child, which runs its own rollback. A child
    that fails rolls itself back and fails the node. ``input`` builds the child's input
    (default: the parent's input); ``deadline`` bounds each wait for the child."""

    name: str
    saga: type[Saga] | str
    _: KW_ONLY
    input: Mapper | None = None
    when: Guard | None = None
    #: ``None``: the latest registered version of the child type when it starts.
    version: int | None = None
    deadline: timedelta = timedelta(hours=1)
    #: Retries of the confirm and cancel requests (each waits up to ``deadline``).
    finish_retry: PolicyLike = DEFAULT_ROLLBACK_RETRY
    description: str = ""


@dataclass(frozen=True)
class Sleep:
    """Wait for ``duration`` (a ``timedelta``, or a function of the context returning one)
    before the next node runs. The wake-up is a timer row in Postgres: it survives every
    process, so days and months are fine. Undo has nothing to do; a rollback or an operator
    cancel of a sleeping saga removes the timer."""

    name: str
    duration: timedelta | cabc.Callable[[StepContext[Any]], timedelta]
    _: KW_ONLY
    description: str = ""


@dataclass(frozen=True)
class SleepUntil:
    """Wait until ``until``: a timezone-aware ``datetime``, or a function of the context (the
    input, earlier results) returning one. A naive datetime is a definition error (a naive
    one returned at run time fails the node). A time already past wakes at once."""

    name: str
    until: datetime | cabc.Callable[[StepContext[Any]], datetime]
    _: KW_ONLY
    description: str = ""


@dataclass(frozen=True)
class WaitForSignal:
    """Wait for the signal ``signal`` (sent through the API, the client, the CLI or the
    ``{prefix}.signals`` Kafka topic), whose payload must validate against ``payload``. A
    signal that came before the wait is kept and taken when the wait is reached. The node's
    result is the payload. After ``timeout`` (``None``: wait for ever), ``on_timeout="fail"``
    fails the node (the saga rolls back) and ``"continue"`` goes on with the result
    ``{"timed_out": True}``, so a following :class:`Choice` can take a declared path."""

    name: str
    signal: str
    _: KW_ONLY
    payload: type[BaseModel] | None = None
    timeout: timedelta | None = None
    on_timeout: Literal["fail", "continue"] = "fail"
    description: str = ""


Node = (TccStep | SagaStep | Sequence | Parallel | ForEach | Race | Choice | Patched | ChildSaga
        | Sleep | SleepUntil | WaitForSignal)
#: A branch: one node, or a tuple of nodes run in order.
Branch = Node | tuple[Node, ...]
_COMPOSITES = (Sequence, Parallel, ForEach, Race, Choice, Patched)


def branch_nodes(branch: Any) -> tuple[Any, ...]:
    """The nodes of a branch given as one node or as a tuple/list of nodes."""
    if isinstance(branch, list | tuple):
        return tuple(branch)
    return (branch,)


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
        for label, branch in _branches(node):
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
    from coordinator.definition import NAME_PATTERN, Saga, resolve_policy

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
    return out


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
    from coordinator.definition import NAME_PATTERN

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
    from coordinator.definition import NAME_PATTERN

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


def child_branches(node: Any) -> list[Any]:
    """The branches under a composite node (none under a step, a sleep, a wait, a child)."""
    return [b for _, b in _branches(node)] if isinstance(node, _COMPOSITES) else []


def _branches(node: Any) -> list[tuple[str, Any]]:
    if isinstance(node, Patched):
        return [("new", node.new)] + ([("old", node.old)] if node.old is not None else [])
    if isinstance(node, Sequence):
        return [("steps", node.steps)]
    if isinstance(node, ForEach):
        return [("body", node.body)]
    if isinstance(node, Parallel | Race):
        if not isinstance(node.branches, list | tuple) or not node.branches:
            return [("branches", ())]
        return [(f"branches[{i}]", b) for i, b in enumerate(node.branches)]
    assert isinstance(node, Choice)
    out: list[tuple[str, Any]] = []
    for i, pair in enumerate(node.branches if isinstance(node.branches, list | tuple) else ()):
        if isinstance(pair, list | tuple) and len(pair) == 2:
            out.append((f"branches[{i}]", pair[1]))
    if node.otherwise is not None:
        out.append(("otherwise", node.otherwise))
    return out


def _own_problems(at: str, node: Any) -> list[str]:
    out: list[str] = []
    if isinstance(node, ForEach):
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
    elif isinstance(node, Choice):
        pairs = node.branches if isinstance(node.branches, list | tuple) else None
        if not pairs:
            out.append(f"{at}: branches must be a non-empty tuple of (guard, branch) pairs")
        for i, pair in enumerate(pairs or ()):
            if not (isinstance(pair, list | tuple) and len(pair) == 2 and callable(pair[0])):
                out.append(f"{at}: branches[{i}] must be a (guard, branch) pair with a "
                           "callable guard")
    elif isinstance(node, Patched):
        from coordinator.definition import NAME_PATTERN

        if not isinstance(node.change, str) or not NAME_PATTERN.match(node.change):
            out.append(f"{at}: change must be an identifier-like change id, "
                       f"got {node.change!r}")
    elif isinstance(node, Sequence) and not isinstance(node.steps, list | tuple):
        out.append(f"{at}: steps must be a tuple of nodes")
    return out
