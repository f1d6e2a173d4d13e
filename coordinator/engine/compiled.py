"""A saga class compiled for the engine: a tree of nodes with resolved policies.

The root is a sequence named ``""``; leaves are :class:`CompiledStep`, composites
:class:`CompiledGroup`. The machine each node kind contributes (its phases and their moves)
comes from the node modules in ``coordinator.engine.nodes``, the same code that runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any

from pydantic import BaseModel

from coordinator.language import nodes as flow
from coordinator.language.policies import RetryPolicy
from coordinator.language.saga import (
    Guard,
    Mapper,
    Saga,
    SagaStep,
    TccStep,
    resolve_policy,
    validate_saga_class,
)
from participant_sdk.protocol import DEFAULT_TOPIC_PREFIX, Phase, command_topic, reply_topic

__all__ = [
    "CompiledGroup",
    "CompiledMigration",
    "CompiledNode",
    "CompiledSaga",
    "CompiledSleep",
    "CompiledStep",
    "CompiledWait",
    "GroupKind",
    "StepKind",
    "Transition",
    "WaitKind",
    "compile_saga",
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


class WaitKind(StrEnum):
    """Leaves that send no command: they wait, on a timer of their own."""

    SLEEP = "sleep"
    SIGNAL = "signal"


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
    #: race: how many branches must succeed.
    quorum: int = 1
    #: choice: one guard per child; ``None`` marks the ``otherwise`` branch.
    guards: tuple[Guard | None, ...] = ()
    #: patched: the change id, and how many children form the new path.
    change: str = ""
    new_count: int = 0
    description: str = ""

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
        if self.kind is GroupKind.CHOICE:
            out["otherwise"] = bool(self.guards) and self.guards[-1] is None
        if self.kind is GroupKind.PATCHED:
            out["change"] = self.change
            out["new"] = [c.name for c in self.path("new")]
            out["old"] = [c.name for c in self.path("old")]
        out["children"] = [c.to_json() for c in self.children]
        return out


CompiledNode = CompiledStep | CompiledGroup | CompiledSleep | CompiledWait


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
        }


def compile_saga(cls: type[Saga], *, topic_prefix: str = DEFAULT_TOPIC_PREFIX,
                 strict_participants: set[str] | frozenset[str] | None = None) -> CompiledSaga:
    """Validate ``cls`` (again, with the registry's participants) and compile it."""
    validate_saga_class(cls, strict_participants)
    root = CompiledGroup(name="", kind=GroupKind.SEQUENCE,
                         children=tuple(_compile_node(n) for n in cls.steps))
    from coordinator.engine.machine import build_machine  # machine needs the node modules

    _check_signal_models(cls, root)
    states, transitions = build_machine(root)
    return CompiledSaga(
        name=cls.name,
        version=cls.version,
        input_model=cls.input_model,
        steps=tuple(n for n in walk(root) if isinstance(n, CompiledStep)),
        root=root,
        topic_prefix=topic_prefix,
        saga_class=cls,
        states=states,
        transitions=transitions,
        migrations={
            version: CompiledMigration(
                source=compile_saga(m.source, topic_prefix=topic_prefix,
                                    strict_participants=strict_participants),
                renames=dict(m.renames), transform=m.transform,
                name=m.name or f"v{version}->v{cls.version}")
            for version, m in cls.migrate_from.items()},
    )


def _check_signal_models(cls: type[Saga], root: CompiledGroup) -> None:
    from coordinator.language.saga import DefinitionError

    models: dict[str, Any] = {}
    for node in walk(root):
        if isinstance(node, CompiledWait):
            if models.setdefault(node.signal, node.payload) is not node.payload:
                raise DefinitionError(f"{cls.__qualname__}.{node.name}: waits for signal "
                                      f"{node.signal!r} declare different payload models")


def walk(node: CompiledNode) -> Iterator[CompiledNode]:
    """``node`` and every node below it, in preorder (declaration order)."""
    yield node
    if isinstance(node, CompiledGroup):
        for child in node.children:
            yield from walk(child)


def _compile_node(spec: Any) -> CompiledNode:
    if isinstance(spec, TccStep | SagaStep):
        return _compile_step(spec)
    if isinstance(spec, flow.ChildSaga):
        return _compile_child(spec)
    if isinstance(spec, flow.Sleep):
        return CompiledSleep(name=spec.name, duration=spec.duration,
                             description=spec.description)
    if isinstance(spec, flow.WaitForSignal):
        return CompiledWait(name=spec.name, signal=spec.signal, payload=spec.payload,
                            timeout=spec.timeout, on_timeout=spec.on_timeout,
                            description=spec.description)
    if isinstance(spec, flow.SleepUntil):
        return CompiledSleep(name=spec.name, until=spec.until, description=spec.description)
    if isinstance(spec, flow.Sequence):
        return _group(spec.name, GroupKind.SEQUENCE, spec.steps, spec.description)
    if isinstance(spec, flow.Parallel | flow.Race):
        kind = GroupKind.PARALLEL if isinstance(spec, flow.Parallel) else GroupKind.RACE
        branches = tuple(_branch(f"{spec.name}.{i}", b) for i, b in enumerate(spec.branches))
        quorum = spec.quorum if isinstance(spec, flow.Race) else 1
        return CompiledGroup(name=spec.name, kind=kind, children=branches, quorum=quorum,
                             description=spec.description)
    if isinstance(spec, flow.ForEach):
        body = _group(f"{spec.name}[]", GroupKind.SEQUENCE, spec.body, "")
        return CompiledGroup(name=spec.name, kind=GroupKind.FOREACH, children=(body,),
                             items=spec.items, max_concurrency=spec.max_concurrency,
                             max_items=spec.max_items, description=spec.description)
    if isinstance(spec, flow.Patched):
        new = tuple(_compile_node(n) for n in flow.branch_nodes(spec.new))
        old = () if spec.old is None else tuple(
            _compile_node(n) for n in flow.branch_nodes(spec.old))
        return CompiledGroup(name=spec.node_name, kind=GroupKind.PATCHED, children=new + old,
                             change=spec.change, new_count=len(new),
                             description=spec.description)
    assert isinstance(spec, flow.Choice)
    pairs: list[tuple[Guard | None, Any]] = list(spec.branches)
    if spec.otherwise is not None:
        pairs.append((None, spec.otherwise))
    return CompiledGroup(
        name=spec.name, kind=GroupKind.CHOICE,
        children=tuple(_branch(f"{spec.name}.{i}", b) for i, (_, b) in enumerate(pairs)),
        guards=tuple(g for g, _ in pairs), description=spec.description)


def _group(name: str, kind: GroupKind, nodes: Any, description: str) -> CompiledGroup:
    return CompiledGroup(name=name, kind=kind, description=description,
                         children=tuple(_compile_node(n) for n in flow.branch_nodes(nodes)))


def _branch(name: str, branch: Any) -> CompiledNode:
    """A branch of one node is that node; a tuple of nodes becomes a sequence ``name``."""
    nodes = flow.branch_nodes(branch)
    if len(nodes) != 1:
        return _group(name, GroupKind.SEQUENCE, nodes, "")
    if isinstance(nodes[0], flow.Patched):
        return _sole_guard(name, nodes[0])
    return _compile_node(nodes[0])


def _sole_guard(name: str, spec: flow.Patched) -> CompiledGroup:
    """A version guard alone in the branch ``name`` is the branch, and each of its paths is
    compiled as a branch of its own: the old path gets the shape, keys and parents the branch
    had before the guard was written (a saga started then lines up with it), and each path is
    one node, which holds the branch's state (a race's win order, its background undo)."""
    new = _branch(f"{name}.{spec.node_name}", spec.new)
    old = () if spec.old is None else (_branch(name, spec.old),)
    return CompiledGroup(name=spec.node_name, kind=GroupKind.PATCHED, children=(new, *old),
                         change=spec.change, new_count=1, description=spec.description)


def _compile_step(spec: TccStep | SagaStep) -> CompiledStep:
    if isinstance(spec, TccStep):
        return CompiledStep(
            name=spec.name, kind=StepKind.TCC, participant=spec.participant,
            action=spec.action, compensable=True, payload=spec.payload,
            rollback_payload=spec.finish_payload, when=spec.when,
            retry=resolve_policy(spec.retry), finish_retry=resolve_policy(spec.confirm_retry),
            rollback_retry=resolve_policy(spec.cancel_retry), deadline=spec.deadline,
            rollback_deadline=spec.rollback_deadline, description=spec.description,
        )
    policy = resolve_policy(spec.compensation_retry)
    return CompiledStep(
        name=spec.name, kind=StepKind.SAGA, participant=spec.participant, action=spec.action,
        compensable=spec.reversible, payload=spec.payload,
        rollback_payload=spec.compensation_payload,
        when=spec.when, retry=resolve_policy(spec.retry), finish_retry=policy,
        rollback_retry=policy, deadline=spec.deadline,
        rollback_deadline=spec.rollback_deadline, description=spec.description,
    )


#: A child saga is tried once: a failed child has already run its own rollback, and a new
#: one (an operator retry) is a new saga. Its confirm and cancel are retried like a TCC
#: step's, each attempt waiting up to the child's deadline.
_CHILD_TRY = RetryPolicy(max_attempts=1)


def _compile_child(spec: flow.ChildSaga) -> CompiledStep:
    child = spec.saga if isinstance(spec.saga, str) else spec.saga.name
    finish = resolve_policy(spec.finish_retry)
    return CompiledStep(
        name=spec.name, kind=StepKind.CHILD, participant=child, action="child_saga",
        compensable=True, payload=spec.input, rollback_payload=None, when=spec.when,
        retry=_CHILD_TRY, finish_retry=finish, rollback_retry=finish, deadline=spec.deadline,
        rollback_deadline=spec.deadline, description=spec.description, child=child,
        child_version=spec.version,
    )
