"""The plain data of a compiled saga: the node tree, its kinds and the machine's edges.

Kept apart from the compiler (:mod:`coordinator.engine.compiled`), which needs the node
modules to build the machine, so that the node modules can use these types without a circle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any

from pydantic import BaseModel

from coordinator.language.policies import RetryPolicy
from coordinator.language.saga import Guard, Mapper, Saga
from coordinator.language.tasks import HumanTask
from participant_sdk.protocol import DEFAULT_TOPIC_PREFIX, Phase, command_topic, reply_topic

__all__ = [
    "CompiledGroup",
    "CompiledMigration",
    "CompiledNode",
    "CompiledSaga",
    "CompiledSleep",
    "CompiledStep",
    "CompiledTask",
    "CompiledWait",
    "GroupKind",
    "StepKind",
    "Transition",
    "WaitKind",
    "walk",
]


class StepKind(StrEnum):
    TCC = "tcc"
    SAGA = "saga"
    #: Another saga type run as one node: tried (its tree runs), then confirmed or cancelled.
    CHILD = "child"


class GroupKind(StrEnum):
    SEQUENCE = "sequence"
    PARALLEL = "parallel"
    FOREACH = "foreach"
    RACE = "race"
    CHOICE = "choice"
    #: A version guard: the first ``new_count`` children are the new path, the rest the old.
    PATCHED = "patched"
    #: Catch and fallback: children (body, fallback); the fallback runs on a caught failure.
    CATCH = "catch"
    #: A do-while loop: its one child (``name[]``) runs once per iteration.
    LOOP = "loop"


class WaitKind(StrEnum):
    """Leaves that send no command: they wait, on a timer of their own."""

    SLEEP = "sleep"
    SIGNAL = "signal"
    #: A human task: waits for a person to complete its form.
    TASK = "task"


@dataclass(frozen=True)
class CompiledWait:
    """A wait for the signal ``signal``; ``timeout`` ``None`` waits for ever."""

    name: str
    signal: str
    payload: type[BaseModel] | None
    timeout: timedelta | None
    on_timeout: str
    description: str = ""
    kind: WaitKind = WaitKind.SIGNAL

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind.value, "description": self.description,
                "signal": self.signal,
                "timeout_s": self.timeout.total_seconds() if self.timeout else None,
                "on_timeout": self.on_timeout,
                "payload_schema": self.payload.model_json_schema() if self.payload else None}


@dataclass(frozen=True)
class CompiledSleep:
    """A sleep or sleep-until node: exactly one of ``duration`` and ``until`` is set, each a
    value or a function of the step context."""

    name: str
    duration: timedelta | Callable[[Any], timedelta] | None = None
    until: datetime | Callable[[Any], datetime] | None = None
    description: str = ""
    kind: WaitKind = WaitKind.SLEEP

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind.value,
                               "description": self.description}
        if isinstance(self.duration, timedelta):
            out["duration_s"] = self.duration.total_seconds()
        elif isinstance(self.until, datetime):
            out["until"] = self.until.isoformat()
        else:
            out["computed"] = "duration" if self.duration is not None else "until"
        return out


@dataclass(frozen=True)
class CompiledTask:
    """A human task: the declaration as written (``spec``) and its form's JSON Schema."""

    name: str
    spec: HumanTask
    kind: WaitKind = WaitKind.TASK

    @property
    def description(self) -> str:
        return self.spec.description if isinstance(self.spec.description, str) else ""

    @cached_property
    def form_schema(self) -> dict[str, Any]:
        return self.spec.form.model_json_schema()

    def to_json(self) -> dict[str, Any]:
        s = self.spec
        timeout = s.on_timeout if isinstance(s.on_timeout, str) else "default_decision"
        return {"name": self.name, "kind": self.kind.value, "description": self.description,
                "form_schema": self.form_schema, "outcome_field": s.outcome_field,
                "reject": list(s.reject), "priority": s.priority,
                "users": None if callable(s.users) else list(s.users),
                "groups": None if callable(s.groups) else list(s.groups),
                "due_s": s.due.total_seconds() if isinstance(s.due, timedelta) else None,
                "business_time": s.calendar is not None,
                "reminders": s.max_reminders if s.remind_after or s.remind_every else 0,
                "escalations": len(s.escalations),
                "timeout_s": s.timeout.total_seconds() if s.timeout else None,
                "on_timeout": timeout, "four_eyes": s.four_eyes, "chain": s.chain}


@dataclass(frozen=True)
class CompiledStep:
    """One step with its policies resolved."""

    name: str
    kind: StepKind
    participant: str
    action: str
    #: A saga step whose participant compensates its action (TCC steps always cancel).
    compensable: bool
    payload: Mapper | None
    rollback_payload: Mapper | None
    when: Guard | None
    retry: RetryPolicy
    finish_retry: RetryPolicy  # confirm retry of a TCC step
    rollback_retry: RetryPolicy  # cancel or compensation retry
    deadline: timedelta
    rollback_deadline: timedelta
    description: str = ""
    #: A child saga node: the saga type it runs, and its version (``None``: the latest).
    child: str | None = None
    child_version: int | None = None
    #: A child saga node's own timeout (``None``: none) and what it does: "fail" or "dead".
    timeout: timedelta | None = None
    on_timeout: str = "fail"

    @property
    def confirms(self) -> bool:
        """Tried, then confirmed or cancelled: a TCC step, or a child saga."""
        return self.kind is not StepKind.SAGA

    @property
    def forward_phase(self) -> Phase:
        return Phase.TRY if self.confirms else Phase.ACTION

    @property
    def rollback_phase(self) -> Phase:
        return Phase.CANCEL if self.confirms else Phase.COMPENSATE

    @property
    def reversible(self) -> bool:
        return self.confirms or self.compensable

    def policy(self, phase: Phase) -> RetryPolicy:
        if phase.is_forward:
            return self.retry
        return self.finish_retry if phase is Phase.CONFIRM else self.rollback_retry

    def deadline_for(self, phase: Phase) -> timedelta:
        return self.deadline if phase.is_forward else self.rollback_deadline

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "participant": self.participant,
            "action": self.action,
            "reversible": self.reversible,
            "guarded": self.when is not None,
            "retry": self.retry.model_dump(mode="json"),
            "finish_retry": self.finish_retry.model_dump(mode="json")
            if self.confirms else None,
            "rollback_retry": self.rollback_retry.model_dump(mode="json")
            if self.reversible else None,
            "deadline_s": self.deadline.total_seconds(),
            "rollback_deadline_s": self.rollback_deadline.total_seconds(),
            "description": self.description,
            **({"child": self.child, "child_version": self.child_version}
               if self.child is not None else {}),
            **_timeout_json(self.timeout, self.on_timeout),
        }


@dataclass(frozen=True)
class CompiledGroup:
    """A composite node: children run by the node module of ``kind``."""

    name: str
    kind: GroupKind
    children: tuple[CompiledNode, ...]
    #: for-each: the item list mapper, the bounds.
    items: Callable[[Any], Any] | None = None
    max_concurrency: int | None = None
    max_items: int = 0
    #: race: how many branches must succeed, and when it is decided (``Race.verdicts``).
    quorum: int = 1
    verdicts: str = "decided"
    #: choice: one guard per child; ``None`` marks the ``otherwise`` branch.
    guards: tuple[Guard | None, ...] = ()
    #: patched: the change id, and how many children form the new path.
    change: str = ""
    new_count: int = 0
    #: loop: the stop condition, evaluated after each iteration (the cap is ``max_items``).
    until: Guard | None = None
    #: catch: the failure kinds caught (``("all",)``: every one), and whether the failed
    #: body's completed steps stay (``undo="kept"``) or are undone before the fallback.
    catches: tuple[str, ...] = ()
    keep: bool = False
    description: str = ""
    #: The node's timeout (``None``: none) and what it does when it passes: "fail" or "dead".
    timeout: timedelta | None = None
    on_timeout: str = "fail"

    def path(self, choice: str) -> tuple[CompiledNode, ...]:
        """A guard's children on the path ``"new"`` or ``"old"``."""
        cut = self.new_count
        return self.children[:cut] if choice == "new" else self.children[cut:]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind.value,
                               "description": self.description}
        if self.kind is GroupKind.FOREACH:
            out.update(max_concurrency=self.max_concurrency, max_items=self.max_items)
        if self.kind is GroupKind.RACE:
            out["quorum"] = self.quorum
            if self.verdicts != "decided":  # exports of older races stay as they were
                out["verdicts"] = self.verdicts
        if self.kind is GroupKind.CHOICE:
            out["otherwise"] = bool(self.guards) and self.guards[-1] is None
        if self.kind is GroupKind.CATCH:
            out.update(failures=list(self.catches), undo="kept" if self.keep else "first")
        if self.kind is GroupKind.LOOP:
            out["max_iterations"] = self.max_items
        if self.kind is GroupKind.PATCHED:
            out["change"] = self.change
            out["new"] = [c.name for c in self.path("new")]
            out["old"] = [c.name for c in self.path("old")]
        out.update(_timeout_json(self.timeout, self.on_timeout))
        out["children"] = [c.to_json() for c in self.children]
        return out


def _timeout_json(timeout: timedelta | None, on_timeout: str) -> dict[str, Any]:
    """A timeout in an export; none at all without one (exports of older sagas unchanged)."""
    return {} if timeout is None else {"timeout_s": timeout.total_seconds(),
                                       "on_timeout": on_timeout}


CompiledNode = CompiledStep | CompiledGroup | CompiledSleep | CompiledWait | CompiledTask


@dataclass(frozen=True)
class Transition:
    source: str
    target: str
    label: str


@dataclass(frozen=True)
class CompiledMigration:
    """A declared migration with its source version compiled (replay runs the history before
    the ``Migrated`` event on it)."""

    source: CompiledSaga
    renames: Mapping[str, str]
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None
    name: str


@dataclass(frozen=True)
class CompiledSaga:
    """What the engine runs. ``topic_prefix`` decides every command and reply topic."""

    name: str
    version: int
    input_model: type[BaseModel]
    #: Every leaf step, in preorder.
    steps: tuple[CompiledStep, ...]
    root: CompiledGroup
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    saga_class: type[Saga] | None = None
    states: tuple[str, ...] = field(default=())
    transitions: tuple[Transition, ...] = field(default=())
    #: Older versions running sagas can move from: version -> migration.
    migrations: Mapping[int, CompiledMigration] = field(default_factory=dict)
    #: The saga's own timeout (``Saga.timeout``) and what it does: "rollback" or "dead".
    timeout: timedelta | None = None
    on_timeout: str = "rollback"

    def for_version(self, version: int) -> CompiledSaga:
        """This definition, or the one of an older version it migrates from (replay)."""
        if version == self.version:
            return self
        for migration in self.migrations.values():
            if migration.source.version == version or version in migration.source.migrations:
                return migration.source.for_version(version)
        raise KeyError(f"{self.name} v{self.version} declares no migration from v{version}")

    @property
    def reply_topic(self) -> str:
        return reply_topic(self.topic_prefix)

    def command_topic(self, step: CompiledStep) -> str:
        return command_topic(step.participant, self.topic_prefix)

    @cached_property
    def _by_name(self) -> dict[str, CompiledNode]:
        return {n.name: n for n in walk(self.root)}

    @cached_property
    def order(self) -> dict[str, int]:
        """Preorder position of each node in the declaration."""
        return {n.name: i for i, n in enumerate(walk(self.root))}

    @cached_property
    def parents(self) -> dict[str, str]:
        """Name of each node's enclosing group (the root's children: ``""``)."""
        return {c.name: g.name for g in walk(self.root) if isinstance(g, CompiledGroup)
                for c in g.children}

    @cached_property
    def timed_nodes(self) -> frozenset[str]:
        """Names of the nodes that declare a timeout of their own."""
        return frozenset(n.name for n in walk(self.root)
                         if isinstance(n, CompiledGroup | CompiledStep) and n.timeout)

    @cached_property
    def signals(self) -> dict[str, type[BaseModel] | None]:
        """Signal name -> its payload model, over every wait of the tree (waits for one
        signal share its model: checked when compiling)."""
        return {n.signal: n.payload for n in walk(self.root) if isinstance(n, CompiledWait)}

    def node(self, name: str) -> CompiledNode:
        return self._by_name[name]

    def step(self, name: str) -> CompiledStep:
        node = self._by_name[name]
        assert isinstance(node, CompiledStep), name
        return node

    def to_json(self) -> dict[str, Any]:
        """The definition and its state machine, JSON-ready."""
        return {
            "name": self.name,
            "version": self.version,
            "topic_prefix": self.topic_prefix,
            "input_schema": self.input_model.model_json_schema(),
            "steps": [s.to_json() for s in self.steps],
            "nodes": self.root.to_json()["children"],
            "states": list(self.states),
            "initial": "start",
            "terminal": ["completed", "compensated", "cancelled"],
            "transitions": [
                {"from": t.source, "to": t.target, "on": t.label} for t in self.transitions
            ],
            **_timeout_json(self.timeout, self.on_timeout),
        }


def walk(node: CompiledNode) -> Iterator[CompiledNode]:
    """``node`` and every node below it, in preorder (declaration order)."""
    yield node
    if isinstance(node, CompiledGroup):
        for child in node.children:
            yield from walk(child)
