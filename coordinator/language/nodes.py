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

from coordinator.language.flow_nodes import Catch, Loop, flow_branches
from coordinator.language.policies import DEFAULT_ROLLBACK_RETRY
from coordinator.language.steps import (
    Guard,
    Mapper,
    PolicyLike,
    SagaStep,
    StepContext,
    TccStep,
)

if TYPE_CHECKING:
    from coordinator.language.saga import Saga

__all__ = [
    "MAX_CHILD_DEPTH",
    "MAX_DEPTH",
    "Branch",
    "Catch",
    "ChildSaga",
    "Choice",
    "ForEach",
    "Loop",
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
    #: Fail the node (``"fail"``, kind ``timeout``) or park the saga as dead (``"dead"``)
    #: once it has run this long (``None``: no limit); see :mod:`coordinator.language.timeouts`.
    timeout: timedelta | None = None
    on_timeout: Literal["fail", "dead"] = "fail"
    description: str = ""


@dataclass(frozen=True)
class Parallel:
    """Static branches started together; joins when every branch succeeded.

    One branch failing for good fails the node: new work stops, siblings in flight are
    treated as possibly applied, and the saga rolls back everything that was applied."""

    name: str
    branches: tuple[Any, ...]
    _: KW_ONLY
    #: Fail the node (``"fail"``, kind ``timeout``) or park the saga as dead (``"dead"``)
    #: once it has run this long (``None``: no limit); see :mod:`coordinator.language.timeouts`.
    timeout: timedelta | None = None
    on_timeout: Literal["fail", "dead"] = "fail"
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
    #: Fail the node (``"fail"``, kind ``timeout``) or park the saga as dead (``"dead"``)
    #: once it has run this long (``None``: no limit); see :mod:`coordinator.language.timeouts`.
    timeout: timedelta | None = None
    on_timeout: Literal["fail", "dead"] = "fail"
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
    #: When the race is decided: ``"decided"`` as soon as the outcome is known,
    #: ``"first_rejection"`` fails it at the first branch that fails (a veto), ``"all"``
    #: waits for every branch's verdict first (approvers are all heard).
    verdicts: Literal["decided", "first_rejection", "all"] = "decided"
    #: Fail the node (``"fail"``, kind ``timeout``) or park the saga as dead (``"dead"``)
    #: once it has run this long (``None``: no limit); see :mod:`coordinator.language.timeouts`.
    timeout: timedelta | None = None
    on_timeout: Literal["fail", "dead"] = "fail"
    description: str = ""


@dataclass(frozen=True)
class Choice:
    """if / elif / else: the first branch whose guard is true runs, else ``otherwise``.

    The branch taken is recorded when the node is entered and never evaluated again."""

    name: str
    branches: tuple[tuple[Guard, Any], ...]
    _: KW_ONLY
    otherwise: Any = None
    #: Fail the node (``"fail"``, kind ``timeout``) or park the saga as dead (``"dead"``)
    #: once it has run this long (``None``: no limit); see :mod:`coordinator.language.timeouts`.
    timeout: timedelta | None = None
    on_timeout: Literal["fail", "dead"] = "fail"
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
    #: Fail the node (``"fail"``, kind ``timeout``) or park the saga as dead (``"dead"``)
    #: once it has run this long (``None``: no limit); see :mod:`coordinator.language.timeouts`.
    timeout: timedelta | None = None
    on_timeout: Literal["fail", "dead"] = "fail"
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
        | Sleep | SleepUntil | WaitForSignal | Catch | Loop)
#: A branch: one node, or a tuple of nodes run in order.
Branch = Node | tuple[Node, ...]
_COMPOSITES = (Sequence, Parallel, ForEach, Race, Choice, Patched, Catch, Loop)


def branch_nodes(branch: Any) -> tuple[Any, ...]:
    """The nodes of a branch given as one node or as a tuple/list of nodes."""
    if isinstance(branch, list | tuple):
        return tuple(branch)
    return (branch,)


def child_branches(node: Any) -> list[Any]:
    """The branches under a composite node (none under a step, a sleep, a wait, a child)."""
    return [b for _, b in named_branches(node)] if isinstance(node, _COMPOSITES) else []


def named_branches(node: Any) -> list[tuple[str, Any]]:
    if isinstance(node, Patched):
        return [("new", node.new)] + ([("old", node.old)] if node.old is not None else [])
    if isinstance(node, Sequence):
        return [("steps", node.steps)]
    if isinstance(node, Catch | Loop):
        return flow_branches(node)
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


