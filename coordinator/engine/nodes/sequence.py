"""A sequence: children one after the other. The saga body and every for-each item are one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from coordinator.engine.nodes import base
from coordinator.engine.nodes.base import Kind, Progress, Scope
from coordinator.engine.state import StepPhase
from coordinator.engine.tree import CompiledGroup

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = ["KIND"]


def forward(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    if key:  # the root has no state of its own: the saga's status is its phase
        state = base.enter(w, node, key, scope)
        if state.phase is StepPhase.SUCCEEDED:
            return Progress.DONE
        if state.phase is StepPhase.FAILED:
            return Progress.FAILED
    inner = base.inner_scope(w, node, key, scope)
    for child in node.children:
        progress = base.forward(w, child, inner.key(child), inner)
        if progress is Progress.DONE:
            continue
        if progress is Progress.FAILED:
            base.finish(w, key, StepPhase.FAILED)
        return progress
    base.finish(w, key, StepPhase.SUCCEEDED)
    return Progress.DONE


def undo(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    return base.undo_serial(w, children(w, node, key, scope))


def result(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Any:
    """The result of the last child that ran (skipped children have none)."""
    return base.last_result(w, children(w, node, key, scope))


def edges(node: CompiledGroup) -> Iterable[tuple[str, str, str]]:
    return base.COMPOSITE_EDGES


children = base.static_children
KIND = Kind(forward, undo, result, children, edges)
