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
    state = w.steps.get(key)
    if state is None:
        return Progress.DONE
    cap, walked, active = node.max_concurrency, state.walked, 0
    waiting = False
    body, inner = node.children[0], Scope(scope.prefix, key, scope.item, scope.index)
    marks = w.quiet.own(key, quiet.CONFIRM)
    for index in range(walked, state.count or 0):
        mark = marks.get(index)  # engine.quiet: what it answered, if nothing changed since
        child_key = "" if mark == quiet.WAITING else foreach.item_key(key, index)
        if mark != quiet.WAITING and cap is not None and active >= cap and (
                mark == quiet.IDLE or not _confirming(w, body, child_key, inner)):
            if mark is None:
                marks[index] = quiet.IDLE
            waiting = True
            break  # items confirm in order, as running confirms finish (one waiting is)
        if mark is None or mark == quiet.IDLE:
            progress = confirm(w, body, child_key, inner, undoing)
            if progress is Progress.FAILED:
                return progress
            mark = marks[index] = quiet.WAITING if progress is Progress.WAITING else quiet.DONE
        if mark == quiet.WAITING:  # a confirm in flight under it: it counts against the bound
            waiting, active = True, active + 1
        elif index == walked:  # all done below it: its mark is needed no more
            walked += 1
            marks.pop(index, None)
    if walked != state.walked:
        w.update_step(key, walked=walked)
    return Progress.WAITING if waiting else Progress.DONE


_CONFIRMING = frozenset({StepPhase.CONFIRMING})


def _confirming(w: Work, node: CompiledNode, key: str, scope: Scope) -> bool:
    """A confirm under this item is in flight (it counts against the bound)."""
    return foreach.in_phase(w, node, key, scope, _CONFIRMING)
