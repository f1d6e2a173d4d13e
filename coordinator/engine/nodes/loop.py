"""Loop (do-while): the body once per iteration, until the condition holds or the cap is
reached. Iteration ``i`` runs under ``<loop>[i]``, like a for-each item.

``count`` is the number of iterations started. After iteration ``i`` succeeds, ``until`` is
evaluated once (its answer is recorded by what follows: the node succeeds, the next
iteration is created, or the node fails), so replay never asks again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from coordinator.engine.nodes import base
from coordinator.engine.nodes.base import Kind, Progress, Scope
from coordinator.engine.nodes.foreach import item_key
from coordinator.engine.state import StepPhase
from coordinator.engine.tree import CompiledGroup, CompiledNode

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = ["KIND"]


def forward(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    state = base.enter(w, node, key, scope)
    if state.phase is StepPhase.SUCCEEDED:
        return Progress.DONE
    if state.phase is StepPhase.FAILED:
        return Progress.FAILED
    body = node.children[0]
    assert isinstance(body, CompiledGroup)  # the iteration's sequence, ``<loop>[]``
    inner = Scope(scope.prefix, key, scope.item, scope.index)
    if not state.count:
        _next(w, node, key, scope, 0)
    while True:
        index = (w.step(key).count or 1) - 1
        ik = item_key(key, index)
        progress = base.forward(w, body, ik, inner)
        if progress is Progress.WAITING:
            return progress
        if progress is Progress.FAILED:
            base.finish(w, key, StepPhase.FAILED)
            return progress
        assert node.until is not None
        try:
            done = bool(node.until(base.context(w, base.inner_scope(w, body, ik, inner))))
        except Exception as exc:  # a user function failing fails the node for good
            return _fail(w, key, "mapper", f"{key}: until raised {type(exc).__name__}: {exc}")
        if done:
            base.finish(w, key, StepPhase.SUCCEEDED)
            w.note(f"{key}: done after {index + 1} iteration(s)")
            return Progress.DONE
        if index + 1 >= node.max_items:
            return _fail(w, key, "max_iterations",
                         f"{key}: max_iterations={node.max_items} reached and until still "
                         "false")
        _next(w, node, key, scope, index + 1)


def _next(w: Work, node: CompiledGroup, key: str, scope: Scope, index: int) -> None:
    """Start iteration ``index``; its nodes keep seeing an enclosing for-each's item."""
    w.create(item_key(key, index), node.children[0].name, key, item=scope.item)
    w.update_step(key, count=index + 1)
    w.note(f"{key}: iteration {index}")


def _fail(w: Work, key: str, kind: str, reason: str) -> Progress:
    """The loop failed on its own (not an iteration): the kind is kept for a catch."""
    w.update_step(key, payload={"failure": kind}, note=reason)
    base.finish(w, key, StepPhase.FAILED)
    w.failed(key, reason)
    return Progress.FAILED


def children(w: Work, node: CompiledGroup, key: str, scope: Scope
             ) -> Iterator[tuple[CompiledNode, str, Scope]]:
    """The iterations started, in order."""
    state = w.steps.get(key)
    inner = Scope(scope.prefix, key, scope.item, scope.index)
    body = node.children[0]
    for index in range(state.count or 0 if state is not None else 0):
        yield body, item_key(key, index), inner


def undo(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    """One iteration at a time, the latest first: iterations ran one after the other."""
    for child, child_key, child_scope in reversed(list(children(w, node, key, scope))):
        progress = base.undo(w, child, child_key, child_scope)
        if progress is not Progress.DONE:
            return progress
    return Progress.DONE


def result(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Any:
    """Every iteration's result (the body's last result), in order."""
    return [base.result(w, c, k, s) for c, k, s in children(w, node, key, scope)]


def edges(node: CompiledGroup) -> Iterable[tuple[str, str, str]]:
    return base.COMPOSITE_EDGES


KIND = Kind(forward, undo, result, children, edges)
