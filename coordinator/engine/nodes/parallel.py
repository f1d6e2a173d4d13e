"""Parallel: static branches started together, joined when every branch succeeded."""

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
    """One branch failing for good fails the node at once: no further branch is started, and
    the saga's rollback treats the siblings in flight as possibly applied."""
    state = base.enter(w, node, key, scope)
    if state.phase is StepPhase.SUCCEEDED:
        return Progress.DONE
    if state.phase is StepPhase.FAILED:
        return Progress.FAILED
    inner = base.inner_scope(w, node, key, scope)
    waiting = False
    for branch in node.children:
        progress = base.forward(w, branch, inner.key(branch), inner)
        if progress is Progress.FAILED:
            base.finish(w, key, StepPhase.FAILED)
            return progress
        waiting = waiting or progress is Progress.WAITING
    if waiting:
        return Progress.WAITING
    base.finish(w, key, StepPhase.SUCCEEDED)
    return Progress.DONE


def undo(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    return base.undo_concurrent(w, children(w, node, key, scope))


def result(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Any:
    """The branches' results, in branch order."""
    return [base.result(w, c, k, s) for c, k, s in children(w, node, key, scope)]


def edges(node: CompiledGroup) -> Iterable[tuple[str, str, str]]:
    return base.COMPOSITE_EDGES


children = base.static_children
KIND = Kind(forward, undo, result, children, edges)
