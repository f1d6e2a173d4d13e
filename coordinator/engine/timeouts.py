"""Timeouts of a saga and of its composite nodes: armed, dropped and fired.

A timeout is armed while it can still act: the saga's own while the saga runs forward (due
``timeout`` after its start), a node's while the node runs (a composite ``running``, a child
saga node ``trying``; due ``timeout`` after the node was entered) and no node above it has
failed or is being undone. Each armed timeout is one durable ``timeout`` timer (a row in
``timers``, fired once among replicas like every timer) and one entry of
``SagaState.timeouts``. :func:`settle` runs after every walk: it arms what now applies and
drops what no longer does (the node finished, the saga left its forward walk, went dead or
ended), so a saga that finishes first leaves no effect. Times come from the event being
applied (``w.now``, the stored start times), so replay arms and fires the same timers.

When one fires: the saga's own rolls the saga back (``on_timeout="rollback"``) or parks it
as dead; a node's fails that node (its ``last_error`` has kind ``timeout``), as a step's
failure would, or parks the saga as dead. The reason reads ``timed out after 2h in
fulfil > approve``. Commands in flight are given up the usual way: a reply that arrives after
the timeout is a late reply (a late success is undone).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any
from uuid import UUID

from coordinator.engine.decision import TimerRequest
from coordinator.engine.events import TimerFired, TimerKind
from coordinator.engine.nodes import base
from coordinator.engine.nodes.leaf import abandon_forward
from coordinator.engine.state import ErrorRecord, Stage, Status, StepPhase
from coordinator.engine.tree import CompiledGroup, CompiledStep
from coordinator.engine.work import Work
from coordinator.language.timeouts import human
from participant_sdk.protocol import Phase

__all__ = ["KIND", "fired", "node_path", "settle", "timeout_timer_id"]

#: ``ErrorRecord.kind`` of a node that failed because its timeout passed.
KIND = "timeout"
Rollback = Callable[..., None]


def timeout_timer_id(saga_id: UUID, key: str) -> str:
    """The timer of the timeout of node ``key`` (``""``: the saga's own)."""
    return f"{saga_id}:{key}:{TimerKind.TIMEOUT.value}"


def settle(w: Work) -> None:
    """Arm the timeouts that now apply and drop those that no longer do."""
    definition = w.definition
    armed: dict[str, datetime] = w.get("timeouts")
    if not armed and definition.timeout is None and not definition.timed_nodes:
        return
    running = w.get("status") is Status.RUNNING and w.get("stage") is Stage.FORWARD
    keep = dict(armed)
    for key in armed:
        if not running or (key and not _live(w, key)):
            w.drop_timer(timeout_timer_id(w.saga_id, key))
            del keep[key]
    if running:
        timed_out = w.get("timed_out")
        if (definition.timeout is not None and "" not in keep
                and not (timed_out and timed_out.get("node") == "")):
            start = max(w.get("started_at"), w.get("start_at") or w.get("started_at"))
            _arm(w, keep, "", start + definition.timeout)
        if definition.timed_nodes:
            for key in _candidates(w):
                state = w.steps.get(key)
                if (key in keep or state is None or state.node not in definition.timed_nodes
                        or not _live(w, key)):
                    continue
                node = definition.node(state.node)
                assert isinstance(node, CompiledGroup | CompiledStep) and node.timeout
                _arm(w, keep, key, (state.started_at or w.now) + node.timeout)
    if keep != armed:
        w.update(timeouts=keep)


def _candidates(w: Work) -> Iterable[str]:
    """The nodes that may have started to run: those this decision touched, or every node
    when the saga came back from ``dead`` (its timeouts were dropped then)."""
    if any(not key and source == "dead" for key, _, source, _ in w.moves):
        return list(w.steps)
    return list(w.touched)


def _arm(w: Work, keep: dict[str, datetime], key: str, due: datetime) -> None:
    w.timers.append(TimerRequest(timer_id=timeout_timer_id(w.saga_id, key), due_at=due,
                                 step=key, phase=None, attempt=1, kind=TimerKind.TIMEOUT))
    keep[key] = due


def _live(w: Work, key: str) -> bool:
    """The node at ``key`` runs, and nothing above it failed or is being undone."""
    state = w.steps.get(key)
    if state is None:
        return False
    node = w.definition.node(state.node)
    running = StepPhase.TRYING if isinstance(node, CompiledStep) else StepPhase.RUNNING
    if state.phase is not running:
        return False
    undoing = w.get("undoing")
    at: str | None = key
    while at is not None:
        here = w.step(at)
        if at in undoing or (at != key and here.phase is not StepPhase.RUNNING):
            return False
        at = here.parent
    return True


def node_path(w: Work, key: str) -> str:
    """``fulfil > lines[2] > reserve``: the node's name after the nodes above it (a for-each
    item by its key, in place of its for-each)."""
    chain: list[tuple[str, str]] = []
    at: str | None = key
    while at is not None:
        state = w.step(at)
        chain.append((at, state.node))
        at = state.parent
    chain.reverse()
    out: list[str] = []
    for index, (at, node) in enumerate(chain):
        if node.endswith("[]"):
            out.append(at)  # an item: lines[2]
        elif index + 1 == len(chain) or not chain[index + 1][1].endswith("[]"):
            out.append(node)  # its for-each is named by the item that follows
    return " > ".join(out)


def _busy_below(w: Work, key: str) -> list[str]:
    """The paths of the steps and waits in progress at or below ``key`` (``""``: anywhere)."""
    state = w.state
    out = []
    for busy in (*state.active_steps(), *state.waiting_nodes()):
        at: str | None = busy
        while at is not None and at != key:
            at = w.step(at).parent
        if at == key or not key:
            out.append(node_path(w, busy))
    return sorted(out)


def _where(w: Work, key: str) -> str:
    busy = _busy_below(w, key)
    if not key:
        return ", ".join(busy) or "its forward walk"
    inner = [b for b in busy if b != node_path(w, key)]
    return node_path(w, key) + (f" (at {', '.join(inner)})" if inner else "")


def fired(w: Work, event: TimerFired, rollback: Rollback) -> str | None:
    """A ``timeout`` timer fired: act as declared. ``rollback``: ``driver.start_rollback``
    (passed in: the driver settles timeouts after each walk). Returns why it was ignored."""
    key, armed = event.step, w.get("timeouts")
    if key not in armed or event.timer_id != timeout_timer_id(w.saga_id, key):
        return f"stale timeout timer {event.timer_id}"
    w.update(timeouts={k: v for k, v in armed.items() if k != key})
    running = w.get("status") is Status.RUNNING and w.get("stage") is Stage.FORWARD
    if not running or (key and not _live(w, key)):
        w.note(f"timeout of {key or 'the saga'} passed when it no longer applied")
        return None
    node = w.definition.node(w.step(key).node) if key else None
    if isinstance(node, CompiledGroup | CompiledStep):
        timeout, action = node.timeout, node.on_timeout
    else:
        timeout, action = w.definition.timeout, w.definition.on_timeout
    assert timeout is not None
    reason = f"timed out after {human(timeout)} in {_where(w, key)}"
    record: dict[str, Any] = {"node": key, "after_s": timeout.total_seconds(),
                              "on_timeout": action, "at": w.now.isoformat(), "reason": reason}
    w.update(timed_out=record)
    if action == "dead":
        _park(w, reason)
    elif not key:
        rollback(w, reason, Status.COMPENSATED)
    else:
        _fail_node(w, key, reason)
    return None


def _fail_node(w: Work, key: str, reason: str) -> None:
    """The node failed for good, kind ``timeout``: the node above decides what it means."""
    state = w.step(key)
    if isinstance(w.definition.node(state.node), CompiledStep):  # a child saga: try is out
        phase, attempt = Phase.TRY, state.attempt(Phase.TRY)
        w.abandon(key)
        w.update_step(key, phase=StepPhase.FAILED, uncertain=True, finished_at=w.now,
                      note=reason)
    else:
        phase, attempt = Phase.ACTION, 1
        w.update_step(key, phase=StepPhase.FAILED, finished_at=w.now, note=reason)
    w.update_step(key, last_error=ErrorRecord(kind=KIND, message=reason, phase=phase,
                                              attempt=max(attempt, 1), at=w.now))
    w.failed(key, reason)
    w.note(f"{key}: {reason}")


def _park(w: Work, reason: str) -> None:
    """``on_timeout="dead"``: stop everything in progress and wait for a person (compensate
    rolls the saga back, resolve settles it by hand)."""
    for key, state in w.ordered():
        if state.phase in (StepPhase.TRYING, StepPhase.EXECUTING):
            abandon_forward(w, key, f"abandoned: {reason}")
        elif state.phase.is_deliberate_wait:
            node = w.definition.node(state.node)
            base.undo(w, node, key, base.scope_of(w, key))
    w.update(status=Status.DEAD, dead_step=None, reason=reason, dead_reason=reason)
    w.note(f"saga dead: {reason}")
