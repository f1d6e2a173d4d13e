"""Catch and fallback: run the body; on a caught failure undo it (or keep it) and run the
fallback in its place. The fallback's outcome is the node's.

The node stays ``running`` throughout; ``count`` says where it is: 0 the body (and, once a
failure was caught, the undo of the failed body), 1 the fallback. The caught failure is kept
in the node's ``payload`` (``{"kind", "reason", "node"}``): the fallback's mappers read it as
``ctx.caught`` and the history notes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from coordinator.engine.nodes import base
from coordinator.engine.nodes.base import Kind, Progress, Scope
from coordinator.engine.nodes.caught import failure_kind
from coordinator.engine.state import StepPhase
from coordinator.engine.tree import CompiledGroup, CompiledNode

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = ["KIND"]

#: Phases of a body node that ``undo="kept"`` keeps as they are (done, or never started).
_KEPT = frozenset({StepPhase.PENDING, StepPhase.SKIPPED, StepPhase.TRIED, StepPhase.SUCCEEDED,
                   StepPhase.CONFIRMING, StepPhase.CONFIRMED, StepPhase.CANCELLED,
                   StepPhase.COMPENSATED, StepPhase.RESOLVED})
_BODY, _FALLBACK = 0, 1


def forward(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    state = base.enter(w, node, key, scope)
    if state.phase is StepPhase.SUCCEEDED:
        return Progress.DONE
    if state.phase is StepPhase.FAILED:
        return Progress.FAILED
    inner = base.inner_scope(w, node, key, scope)
    body, fallback = node.children
    if state.payload is None:
        progress = base.forward(w, body, inner.key(body), inner)
        if progress is not Progress.FAILED:
            return _finished(w, key, progress)
        caught = _caught(w, node, inner.key(body), inner)
        if caught is None:
            base.finish(w, key, StepPhase.FAILED)  # not ours: the failure goes on up
            return Progress.FAILED
        w.update_step(key, payload=caught, count=_BODY)
        w.note(f"{key}: caught {caught['kind']} ({caught['reason']}); "
               + ("keeping what the body completed" if node.keep
                  else "undoing the body first"))
    if not w.step(key).count:
        progress = _clear_body(w, node, inner.key(body), inner)
        if progress is not Progress.DONE:
            # FAILED: the saga went dead at an undo; it resumes here after a repair.
            return Progress.WAITING
        w.update_step(key, count=_FALLBACK)
        w.note(f"{key}: running the fallback")
    return _finished(w, key, base.forward(w, fallback, inner.key(fallback), inner))


def _finished(w: Work, key: str, progress: Progress) -> Progress:
    if progress is Progress.DONE:
        base.finish(w, key, StepPhase.SUCCEEDED)
    elif progress is Progress.FAILED:
        base.finish(w, key, StepPhase.FAILED)
    return progress


def _caught(w: Work, node: CompiledGroup, body_key: str, scope: Scope
            ) -> dict[str, Any] | None:
    """The body's failure as a record, if this catch catches its kind."""
    where, reason = w.failure or ("", "a node failed for good")
    if where not in set(_keys(w, node.children[0], body_key, scope)):
        where, reason = body_key, f"{body_key}: failed"  # no cause recorded under the body
    kind = failure_kind(w, where)
    if "all" not in node.catches and kind not in node.catches:
        w.note(f"{body_key}: {kind} failure not caught (catches {', '.join(node.catches)})")
        return None
    return {"kind": kind, "reason": reason, "node": where}


def _keys(w: Work, node: CompiledNode, key: str, scope: Scope) -> Iterator[str]:
    yield key
    for child, child_key, child_scope in base.children(w, node, key, scope):
        yield from _keys(w, child, child_key, child_scope)


def _clear_body(w: Work, node: CompiledGroup, body_key: str, scope: Scope) -> Progress:
    """``undo="first"``: undo the whole body. ``undo="kept"``: undo only its nodes that
    failed or were in flight (their effect is unknown; a wait is given up), keep the rest."""
    body = node.children[0]
    if not node.keep:
        return base.undo(w, body, body_key, scope)
    return base.undo_concurrent(w, [leaf for leaf in _leaves(w, body, body_key, scope)
                                    if w.step(leaf[1]).phase not in _KEPT])


def _leaves(w: Work, node: CompiledNode, key: str, scope: Scope
            ) -> Iterator[tuple[CompiledNode, str, Scope]]:
    """Every node instance under ``key`` that is not a composite (steps, waits, sleeps)."""
    if not isinstance(node, CompiledGroup):
        if key in w.steps:
            yield node, key, scope
        return
    for child, child_key, child_scope in base.children(w, node, key, scope):
        yield from _leaves(w, child, child_key, child_scope)


def undo(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    """Undo the fallback first (it ran last), then the body (what ``undo="kept"`` kept, or
    what is left of an undo cut short)."""
    for child, child_key, child_scope in sorted(children(w, node, key, scope),
                                                key=lambda kid: kid[0] is node.children[0]):
        progress = base.undo(w, child, child_key, child_scope)
        if progress is not Progress.DONE:
            return progress
    return Progress.DONE


def result(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Any:
    """The fallback's result when it ran, else the body's."""
    state = w.steps.get(key)
    branch = node.children[_FALLBACK if state is not None and state.count else _BODY]
    inner = base.inner_scope(w, node, key, scope)
    return base.result(w, branch, inner.key(branch), inner)


def edges(node: CompiledGroup) -> Iterable[tuple[str, str, str]]:
    return base.COMPOSITE_EDGES  # the body, its undo and the fallback all run in ``running``


children = base.static_children
KIND = Kind(forward, undo, result, children, edges)
