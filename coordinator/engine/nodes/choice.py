"""Choice: if / elif / else. The branch taken is recorded on entry and never re-evaluated."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from coordinator.engine.nodes import base
from coordinator.engine.nodes.base import Kind, Progress, Scope
from coordinator.engine.state import StepPhase
from coordinator.engine.tree import CompiledGroup, CompiledNode

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = ["KIND"]


def forward(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    state = w.steps.get(key)
    if state is None or state.phase is StepPhase.PENDING:
        try:
            ctx = base.context(w, scope)
            taken = next((i for i, guard in enumerate(node.guards)
                          if guard is None or guard(ctx)), -1)
        except Exception as exc:
            reason = f"{key}: a guard raised {type(exc).__name__}: {exc}"
            w.create(key, node.name, scope.parent, phase=StepPhase.FAILED, started_at=w.now,
                     finished_at=w.now, note=reason)
            w.failed(key, reason)
            return Progress.FAILED
        phase = StepPhase.RUNNING if taken >= 0 else StepPhase.SKIPPED
        state = w.create(key, node.name, scope.parent, phase=phase, count=taken,
                         started_at=w.now)
        w.note(f"{key}: took branch {taken}" if taken >= 0 else f"{key}: no branch taken")
    if state.phase in (StepPhase.SKIPPED, StepPhase.SUCCEEDED):
        return Progress.DONE
    if state.phase is StepPhase.FAILED:
        return Progress.FAILED
    assert state.count is not None
    branch = node.children[state.count]
    inner = base.inner_scope(w, node, key, scope)
    progress = base.forward(w, branch, inner.key(branch), inner)
    if progress is Progress.DONE:
        base.finish(w, key, StepPhase.SUCCEEDED)
    elif progress is Progress.FAILED:
        base.finish(w, key, StepPhase.FAILED)
    return progress


def children(w: Work, node: CompiledGroup, key: str, scope: Scope
             ) -> Iterator[tuple[CompiledNode, str, Scope]]:
    state = w.steps.get(key)
    if state is None or state.count is None or state.count < 0:
        return iter(())
    inner = base.inner_scope(w, node, key, scope)
    branch = node.children[state.count]
    return base.existing(w, [(branch, inner.key(branch), inner)])


def undo(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    return base.undo_serial(w, children(w, node, key, scope))


def result(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Any:
    for child, child_key, child_scope in children(w, node, key, scope):
        return base.result(w, child, child_key, child_scope)
    return None


def edges(node: CompiledGroup) -> Iterable[tuple[str, str, str]]:
    return (*base.COMPOSITE_EDGES, ("pending", "skipped", "no guard true, no otherwise"),
            ("pending", "failed", "a guard raised"))


KIND = Kind(forward, undo, result, children, edges)
