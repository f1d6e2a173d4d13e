"""Wait for a signal: a leaf that sends nothing and takes the first kept signal of its name.

Entered, it looks among the signals the saga kept (they may have come before it): the first
of its name is consumed at once, and the consumption is data in the decision. Otherwise it
waits, with a ``signal_timeout`` timer when it declares a timeout. A signal arriving later
is kept by :mod:`coordinator.engine.signals` and taken by the next walk. On timeout the node
fails (the saga rolls back) or succeeds with ``{"timed_out": True}``. Nothing to undo; a
wait cut short drops its timer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from coordinator.engine.decision import ConsumedSignal, TimerRequest
from coordinator.engine.events import TimerFired, TimerKind
from coordinator.engine.nodes.base import Kind, Progress, Scope, abandon_wait
from coordinator.engine.state import StepPhase
from coordinator.engine.tree import CompiledNode, CompiledWait

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = ["KIND", "timed_out"]

TIMED_OUT = {"timed_out": True}


def forward(w: Work, node: CompiledWait, key: str, scope: Scope) -> Progress:
    state = w.steps.get(key)
    if state is None:
        state = w.create(key, node.name, scope.parent)
    if state.phase is StepPhase.SUCCEEDED:
        return Progress.DONE
    if state.phase not in (StepPhase.PENDING, StepPhase.WAITING):
        return Progress.FAILED
    if _take(w, node, key):
        return Progress.DONE
    if state.phase is StepPhase.WAITING:
        return Progress.WAITING
    entry = (state.count or 0) + 1
    changes: dict[str, Any] = {"phase": StepPhase.WAITING, "count": entry,
                               "started_at": w.now, "finished_at": None, "abandoned": False}
    if node.timeout is not None:
        due = w.now + node.timeout
        tid = f"{w.saga_id}:{key}:{TimerKind.SIGNAL_TIMEOUT.value}:{entry}"
        w.timers.append(TimerRequest(timer_id=tid, due_at=due, step=key, phase=None,
                                     attempt=entry, kind=TimerKind.SIGNAL_TIMEOUT))
        changes.update(timer=tid, due_at=due)
    w.update_step(key, **changes)
    w.note(f"{key}: waiting for signal {node.signal!r}")
    return Progress.WAITING


def _take(w: Work, node: CompiledWait, key: str) -> bool:
    """Consume the first kept signal of the node's name, if there is one."""
    kept = w.get("signals")
    found = next((s for s in kept if s.name == node.signal), None)
    if found is None:
        return False
    w.update(signals=[s for s in kept if s is not found])
    state = w.step(key)
    if state.timer is not None:
        w.drop_timer(state.timer)
    w.update_step(key, phase=StepPhase.SUCCEEDED, result=dict(found.payload), timer=None,
                  started_at=state.started_at or w.now, finished_at=w.now,
                  completed_seq=w.next_completion())
    w.consumed_signals.append(ConsumedSignal(signal_id=found.signal_id, node=key))
    w.note(f"{key}: took signal {node.signal!r} ({found.signal_id})")
    return True


def timed_out(w: Work, event: TimerFired) -> str | None:
    """The wait's timeout fired: fail the node or go on, as it declares."""
    state = w.step(event.step)
    if state.phase is not StepPhase.WAITING or state.timer != event.timer_id:
        return f"stale signal timeout {event.timer_id}"
    node = w.definition.node(state.node)
    assert isinstance(node, CompiledWait)
    if node.on_timeout == "continue":
        w.update_step(event.step, phase=StepPhase.SUCCEEDED, timer=None, finished_at=w.now,
                      result=dict(TIMED_OUT), completed_seq=w.next_completion())
        w.note(f"{event.step}: no signal {node.signal!r} in time; going on")
        return None
    reason = (f"{event.step}: no signal {node.signal!r} within "
              f"{node.timeout.total_seconds() if node.timeout else 0:g}s")
    w.update_step(event.step, phase=StepPhase.FAILED, timer=None, finished_at=w.now,
                  note=reason)
    w.failed(event.step, reason)
    w.note(reason)
    return None


def undo(w: Work, node: CompiledWait, key: str, scope: Scope) -> Progress:
    """Nothing was applied; a wait given up drops its timeout timer."""
    return abandon_wait(w, key, StepPhase.WAITING, f"wait for signal {node.signal!r} given up")


def result(w: Work, node: CompiledWait, key: str, scope: Scope) -> Any:
    state = w.steps.get(key)
    return state.result if state is not None and state.phase is StepPhase.SUCCEEDED else None


def children(w: Work, node: CompiledWait, key: str, scope: Scope
             ) -> Iterator[tuple[CompiledNode, str, Scope]]:
    return iter(())


def edges(node: CompiledWait) -> Iterable[tuple[str, str, str]]:
    out = [
        ("pending", "waiting", "entered: no kept signal yet"),
        ("pending", "succeeded", "a kept signal taken on entry"),
        ("waiting", "succeeded", "signal received, or operator skip"),
        ("waiting", "failed", "abandoned: rollback or operator cancel (timer dropped)"),
        ("failed", "pending", "operator retry (abandoned sibling re-run)"),
    ]
    if node.timeout is not None:
        out.append(("waiting", "succeeded" if node.on_timeout == "continue" else "failed",
                    f"timeout ({node.on_timeout})"))
    return out


KIND = Kind(forward, undo, result, children, edges)
