"""A saga class compiled for the engine: a tree of nodes with resolved policies.

The root is a sequence named ``""``; leaves are :class:`CompiledStep`, composites
:class:`CompiledGroup`. The machine each node kind contributes (its phases and their moves)
comes from the node modules in ``coordinator.engine.nodes``, the same code that runs them,
so the compiler sits above them and the tree's types below them, in
:mod:`coordinator.engine.tree` (re-exported here).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coordinator.engine.machine import build_machine, saga_timeout_edges
from coordinator.engine.tree import (
    CompiledGroup,
    CompiledMigration,
    CompiledNode,
    CompiledSaga,
    CompiledSleep,
    CompiledStep,
    CompiledTask,
    CompiledWait,
    GroupKind,
    StepKind,
    Transition,
    WaitKind,
    walk,
)
from coordinator.language import nodes as flow
from coordinator.language.flow_nodes import catch_kinds
from coordinator.language.policies import RetryPolicy
from coordinator.language.saga import (
    Guard,
    Saga,
    SagaStep,
    TccStep,
    resolve_policy,
    validate_saga_class,
)
from coordinator.language.tasks import HumanTask
from participant_sdk.protocol import DEFAULT_TOPIC_PREFIX

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
    "compile_saga",
    "walk",
]


def compile_saga(cls: type[Saga], *, topic_prefix: str = DEFAULT_TOPIC_PREFIX,
                 strict_participants: set[str] | frozenset[str] | None = None) -> CompiledSaga:
    """Validate ``cls`` (again, with the registry's participants) and compile it."""
    validate_saga_class(cls, strict_participants)
    root = CompiledGroup(name="", kind=GroupKind.SEQUENCE,
                         children=tuple(_compile_node(n) for n in cls.steps))
    _check_signal_models(cls, root)
    states, transitions = build_machine(root)
    timeout, on_timeout = getattr(cls, "timeout", None), getattr(cls, "on_timeout", "rollback")
    return CompiledSaga(
        name=cls.name,
        version=cls.version,
        input_model=cls.input_model,
        steps=tuple(n for n in walk(root) if isinstance(n, CompiledStep)),
        root=root,
        topic_prefix=topic_prefix,
        saga_class=cls,
        states=states,
        transitions=transitions + saga_timeout_edges(timeout, on_timeout),
        timeout=timeout,
        on_timeout=on_timeout,
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
    if isinstance(spec, HumanTask):
        return CompiledTask(name=spec.name, spec=spec)
    if isinstance(spec, flow.SleepUntil):
        return CompiledSleep(name=spec.name, until=spec.until, description=spec.description)
    if isinstance(spec, flow.Sequence):
        return _timed(_group(spec.name, GroupKind.SEQUENCE, spec.steps, spec.description), spec)
    if isinstance(spec, flow.Parallel | flow.Race):
        kind = GroupKind.PARALLEL if isinstance(spec, flow.Parallel) else GroupKind.RACE
        branches = tuple(_branch(f"{spec.name}.{i}", b) for i, b in enumerate(spec.branches))
        quorum = spec.quorum if isinstance(spec, flow.Race) else 1
        verdicts = spec.verdicts if isinstance(spec, flow.Race) else "decided"
        return CompiledGroup(name=spec.name, kind=kind, children=branches, quorum=quorum,
                             verdicts=verdicts, description=spec.description,
                             timeout=spec.timeout, on_timeout=spec.on_timeout)
    if isinstance(spec, flow.ForEach):
        body = _group(f"{spec.name}[]", GroupKind.SEQUENCE, spec.body, "")
        return CompiledGroup(name=spec.name, kind=GroupKind.FOREACH, children=(body,),
                             items=spec.items, max_concurrency=spec.max_concurrency,
                             max_items=spec.max_items, description=spec.description,
                             timeout=spec.timeout, on_timeout=spec.on_timeout)
    if isinstance(spec, flow.Catch):
        return CompiledGroup(
            name=spec.name, kind=GroupKind.CATCH, description=spec.description,
            children=(_group(f"{spec.name}.body", GroupKind.SEQUENCE, spec.body, ""),
                      _group(f"{spec.name}.fallback", GroupKind.SEQUENCE, spec.fallback, "")),
            catches=catch_kinds(spec), keep=spec.undo == "kept", timeout=spec.timeout,
            on_timeout=spec.on_timeout)
    if isinstance(spec, flow.Loop):
        body = _group(f"{spec.name}[]", GroupKind.SEQUENCE, spec.body, "")
        return CompiledGroup(name=spec.name, kind=GroupKind.LOOP, children=(body,),
                             until=spec.until, max_items=spec.max_iterations or 0,
                             description=spec.description, timeout=spec.timeout,
                             on_timeout=spec.on_timeout)
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
        guards=tuple(g for g, _ in pairs), description=spec.description,
        timeout=spec.timeout, on_timeout=spec.on_timeout)


def _timed(group: CompiledGroup, spec: Any) -> CompiledGroup:
    return replace(group, timeout=spec.timeout, on_timeout=spec.on_timeout)


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
        child_version=spec.version, timeout=spec.timeout, on_timeout=spec.on_timeout,
    )
