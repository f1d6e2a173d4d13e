"""The confirm walk: once the whole tree succeeded, confirm every tried TCC step, each
for-each at most ``max_concurrency`` items at a time, as its forward run was.

A walk over the tree like forward and undo, so a reply costs the same whatever the number of
items: a for-each starts at its ``walked`` mark (its items below it are all confirmed) and
stops at the first item it may not start yet. Branches a race gave up on (``undoing``) are
being cancelled: never confirmed.
"""

from __future__ import annotations

from coordinator.engine import quiet
from coordinator.engine.nodes import base, foreach
from coordinator.engine.nodes.base import Progress, Scope
from coordinator.engine.nodes.leaf import go_dead, send_finish
from coordinator.engine.state import StepPhase
from coordinator.engine.tree import CompiledGroup, CompiledNode, CompiledStep, GroupKind
from coordinator.engine.work import Work
from participant_sdk.protocol import Phase

__all__ = ["confirm"]


def confirm(w: Work, node: CompiledNode, key: str, scope: Scope,
            undoing: frozenset[str]) -> Progress:
    """Start the confirms that may start under ``key``; DONE when all are confirmed,
    FAILED when the saga went dead at one."""
    if key in undoing:
        return Progress.DONE  # a race's given-up branch: cancelled, never confirmed
    if isinstance(node, CompiledStep):
        return _step(w, node, key)
    if isinstance(node, CompiledGroup) and node.kind is GroupKind.FOREACH:
        return _items(w, node, key, scope, undoing)
    waiting = False
    for child, child_key, child_scope in base.children(w, node, key, scope):
        progress = confirm(w, child, child_key, child_scope, undoing)
        if progress is Progress.FAILED:
            return progress
        waiting = waiting or progress is Progress.WAITING
    return Progress.WAITING if waiting else Progress.DONE


def _step(w: Work, spec: CompiledStep, key: str) -> Progress:
    step = w.steps.get(key)
    if step is None or not spec.confirms:
        return Progress.DONE
    if step.phase is StepPhase.CONFIRMING:
        if step.outstanding is None and step.retry_timer is None:
            error = step.last_error
            go_dead(w, key, f"{key}: confirm gave up while the saga was dead at another step "
                            f"({f'{error.kind}: {error.message}' if error else 'no error'})")
            return Progress.FAILED
        return Progress.WAITING
    if step.phase is not StepPhase.TRIED:
        return Progress.DONE
    if not step.sent:  # an operator skipped its try: nothing to confirm
        w.update_step(key, phase=StepPhase.CONFIRMED, finished_at=w.now)
        return Progress.DONE
    return Progress.WAITING if send_finish(w, key, Phase.CONFIRM) else Progress.FAILED


def _items(w: Work, node: CompiledGroup, key: str, scope: Scope,
           undoing: frozenset[str]) -> Progress:
    def visit(w: Work, body: CompiledNode, child_key: str, inner: Scope) -> Progress:
        return confirm(w, body, child_key, inner, undoing)

    return foreach.bounded_walk(w, node, key, scope, quiet.CONFIRM, _CONFIRMING, visit)


_CONFIRMING = frozenset({StepPhase.CONFIRMING})
