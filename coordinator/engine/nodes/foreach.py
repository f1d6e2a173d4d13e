"""For-each: the body once per item of a list computed at run time, at most
``max_concurrency`` items at a time, results gathered in item order."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from coordinator.engine import quiet
from coordinator.engine.nodes import base
from coordinator.engine.nodes.base import Kind, Progress, Scope
from coordinator.engine.state import StepPhase
from coordinator.engine.tree import CompiledGroup, CompiledNode, CompiledStep, GroupKind

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = ["KIND", "item_key"]


def item_key(key: str, index: int) -> str:
    return f"{key}[{index}]"


def forward(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    state = w.steps.get(key)
    if state is None or state.phase is StepPhase.PENDING:
        items, problem = _items(w, node, scope)
        if problem is not None:
            reason = f"{key}: {problem}"
            w.create(key, node.name, scope.parent, phase=StepPhase.FAILED, started_at=w.now,
                     finished_at=w.now, note=reason)
            w.failed(key, reason)
            return Progress.FAILED
        state = w.create(key, node.name, scope.parent, phase=StepPhase.RUNNING,
                         count=len(items), started_at=w.now)
        body = node.children[0]
        for index, value in enumerate(items):  # the items are fixed once, on entry
            w.create(item_key(key, index), body.name, key, item=value)
        w.note(f"{key}: {len(items)} item(s)")
    if state.phase is StepPhase.SUCCEEDED:
        return Progress.DONE
    if state.phase is StepPhase.FAILED:
        return Progress.FAILED
    body, cap = node.children[0], node.max_concurrency
    inner = Scope(scope.prefix, key, scope.item, scope.index)
    active, done = 0, True
    settled = state.settled
    marks = w.quiet.own(key, quiet.FORWARD)
    for index in range(state.settled, state.count or 0):
        if marks.get(index) == quiet.WAITING:  # and nothing it reads changed since
            active += 1
            done = False
            continue
        ik = item_key(key, index)
        phase = w.step(ik).phase
        if phase is StepPhase.SUCCEEDED:
            settled += index == settled
            continue
        if phase is StepPhase.PENDING and cap is not None and active >= cap:
            done = False
            break  # items start in order, as running ones finish
        progress = base.forward(w, body, ik, inner)
        if progress is Progress.FAILED:
            base.finish(w, key, StepPhase.FAILED)
            return progress
        if progress is Progress.WAITING:
            active += 1
            done = False
            marks[index] = quiet.WAITING
        else:
            settled += index == settled
    if settled != state.settled:
        w.update_step(key, settled=settled)
    if not done:
        return Progress.WAITING
    base.finish(w, key, StepPhase.SUCCEEDED)
    return Progress.DONE


def _items(w: Work, node: CompiledGroup, scope: Scope) -> tuple[list[Any], str | None]:
    assert node.items is not None
    try:
        raw = node.items(base.context(w, scope))
    except Exception as exc:
        return [], f"items mapper raised {type(exc).__name__}: {exc}"
    if not isinstance(raw, list | tuple):
        return [], f"items mapper must return a list, got {type(raw).__name__}"
    if len(raw) > node.max_items:
        return [], f"{len(raw)} items exceed max_items={node.max_items}"
    items = [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in raw]
    try:
        json.dumps(items)
    except (TypeError, ValueError) as exc:
        return [], f"items must be JSON values: {exc}"
    return items, None


def children(w: Work, node: CompiledGroup, key: str, scope: Scope, start: int = 0
             ) -> Iterator[tuple[CompiledNode, str, Scope]]:
    """The items, in order (from ``start``: the walks skip a settled prefix)."""
    state = w.steps.get(key)
    inner = Scope(scope.prefix, key, scope.item, scope.index)
    body = node.children[0]
    for index in range(start, state.count or 0 if state is not None else 0):
        yield body, item_key(key, index), inner


def undo(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    """Undo the items at most ``max_concurrency`` at a time, like the forward run, in item
    order from the ``walked`` mark (the items below it are all undone), so a reply costs the
    same whatever the number of items."""
    return bounded_walk(w, node, key, scope, quiet.UNDO, _UNDOING, base.undo)


_UNDOING = frozenset({StepPhase.CANCELLING, StepPhase.COMPENSATING})


def bounded_walk(w: Work, node: CompiledGroup, key: str, scope: Scope, walk: str,
                 in_flight: frozenset[StepPhase],
                 visit: Callable[[Work, CompiledNode, str, Scope], Progress]) -> Progress:
    """``visit`` the items in order from the ``walked`` mark, at most ``max_concurrency`` with
    a step in one of the ``in_flight`` phases (the confirm and undo stages; the forward run
    has its own ``settled`` walk). Each item's answer is marked (``engine.quiet``), so a reply
    visits the item that replied and the one it starts, whatever the number of items."""
    state = w.steps.get(key)
    if state is None:
        return Progress.DONE  # never entered: nothing to walk
    cap, walked = node.max_concurrency, state.walked
    waiting, active = False, 0
    body, inner = node.children[0], Scope(scope.prefix, key, scope.item, scope.index)
    marks = w.quiet.own(key, walk)
    for index in range(walked, state.count or 0):
        mark = marks.get(index)  # engine.quiet: what it answered, if nothing changed since
        child_key = "" if mark == quiet.WAITING else item_key(key, index)
        if mark != quiet.WAITING and cap is not None and active >= cap and (
                mark == quiet.IDLE or not in_phase(w, body, child_key, inner, in_flight)):
            if mark is None:
                marks[index] = quiet.IDLE
            waiting = True
            break  # its turn comes as a running item finishes (one waiting is running)
        if mark is None or mark == quiet.IDLE:
            progress = visit(w, body, child_key, inner)
            if progress is Progress.FAILED:
                return progress
            mark = marks[index] = quiet.WAITING if progress is Progress.WAITING else quiet.DONE
        if mark == quiet.WAITING:  # in flight under it: it counts against the bound
            waiting, active = True, active + 1
        elif index == walked:  # all done below it: its mark is needed no more
            walked += 1
            marks.pop(index, None)
    if walked != state.walked:
        w.update_step(key, walked=walked)
    return Progress.WAITING if waiting else Progress.DONE


def in_phase(w: Work, body: CompiledNode, key: str, scope: Scope,
             phases: frozenset[StepPhase]) -> bool:
    """A step under the item at ``key`` is in one of ``phases``. Asked once per reply, at the
    bound: an item whose body is a sequence or parallel of steps is read by key."""
    names = _flat_steps(body)
    if names is None:
        return any(w.step(k).phase in phases for _, k, _ in base.leaves(w, body, key, scope))
    steps = w.steps
    for name in names:
        state = steps.get(f"{key}.{name}")
        if state is not None and state.phase in phases:
            return True
    return False


#: id of an item body -> (the body, its steps' names, or None when it nests anything else).
_FLAT: dict[int, tuple[CompiledNode, tuple[str, ...] | None]] = {}


def _flat_steps(body: CompiledNode) -> tuple[str, ...] | None:
    known = _FLAT.get(id(body))
    if known is not None and known[0] is body:
        return known[1]
    names = None
    if (isinstance(body, CompiledGroup) and body.name.endswith("[]")
            and body.kind in (GroupKind.SEQUENCE, GroupKind.PARALLEL)
            and all(isinstance(c, CompiledStep) for c in body.children)):
        names = tuple(c.name for c in body.children)
    if len(_FLAT) >= 1024:  # definitions come and go in tests: keep the cache small
        _FLAT.clear()
    _FLAT[id(body)] = (body, names)
    return names


def result(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Any:
    """Every item's result, in item order."""
    return [base.result(w, c, k, s) for c, k, s in children(w, node, key, scope)]


def edges(node: CompiledGroup) -> Iterable[tuple[str, str, str]]:
    return (*base.COMPOSITE_EDGES, ("pending", "failed", "items mapper failed / too many"))


KIND = Kind(forward, undo, result, children, edges)
