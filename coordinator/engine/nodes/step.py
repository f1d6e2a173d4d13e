"""A TCC step or a saga step: the leaves, the only nodes that send commands."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from coordinator.engine.nodes import leaf
from coordinator.engine.nodes.base import RESULT_PHASES, Kind, Progress, Scope
from coordinator.engine.state import StepPhase, StepState
from coordinator.engine.tree import CompiledNode, CompiledStep

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = ["KIND"]

_DONE = frozenset({StepPhase.TRIED, StepPhase.SUCCEEDED, StepPhase.SKIPPED,
                   StepPhase.CONFIRMING, StepPhase.CONFIRMED})
_UNDONE = frozenset({StepPhase.CANCELLED, StepPhase.COMPENSATED, StepPhase.RESOLVED})
_UNDOING = frozenset({StepPhase.CANCELLING, StepPhase.COMPENSATING})
_IN_FLIGHT = frozenset({StepPhase.TRYING, StepPhase.EXECUTING})


def forward(w: Work, spec: CompiledStep, key: str, scope: Scope) -> Progress:
    state = w.steps.get(key)
    if state is None:
        state = w.create(key, spec.name, scope.parent)
    phase = state.phase
    if phase in _DONE:
        return Progress.DONE
    if phase is StepPhase.PENDING:
        return leaf.start(w, spec, key, scope)
    if phase in _IN_FLIGHT:
        return Progress.WAITING
    return Progress.FAILED  # failed, or undone as a race's loser


def needs_undo(spec: CompiledStep, state: StepState | None) -> bool:
    """The step applied, may have applied, or is being undone."""
    if state is None or state.phase in _UNDONE:
        return False
    if state.phase in _UNDOING or state.phase in _IN_FLIGHT:
        return state.phase in _UNDOING or state.sent
    applied = state.phase in (StepPhase.TRIED, StepPhase.SUCCEEDED)
    maybe = state.phase is StepPhase.FAILED and (spec.reversible or state.uncertain)
    return state.sent and (applied or maybe)


def undo(w: Work, spec: CompiledStep, key: str, scope: Scope) -> Progress:
    """Undo what the step applied or may have applied: cancel a TCC step that was tried (or
    whose try failed, which the participant answers as a null compensation), compensate a
    saga step that succeeded or whose outcome is unknown."""
    state = w.steps.get(key)
    if state is not None and state.phase in _UNDOING:
        if state.outstanding is None and state.retry_timer is None:
            # Its undo gave up while the saga was dead at another node (go_dead kept the
            # first): now that the saga runs again, it is this node's turn to park it.
            error = state.last_error.message if state.last_error is not None else "no reply"
            leaf.go_dead(w, key, f"{key}: {spec.rollback_phase.value} gave up while the saga "
                                 f"was dead at another step ({error})")
            return Progress.FAILED
        return Progress.WAITING
    if state is not None and state.phase in _IN_FLIGHT:
        leaf.abandon_forward(w, key, "abandoned: its branch is being undone")
        state = w.step(key)
    if not needs_undo(spec, state):
        return Progress.DONE
    assert state is not None
    applied = state.phase in (StepPhase.TRIED, StepPhase.SUCCEEDED)
    if not spec.reversible:
        why = ("committed" if applied
               else "may have taken effect (no reply before its deadline)")
        leaf.go_dead(w, key, f"{key} {why} and declares no compensation: rollback cannot "
                             "pass it; compensate or resolve it by hand")
        return Progress.FAILED
    if not leaf.send_finish(w, key, spec.rollback_phase, scope):
        return Progress.FAILED
    return Progress.WAITING


def result(w: Work, spec: CompiledStep, key: str, scope: Scope) -> Any:
    state = w.steps.get(key)
    return state.result if state is not None and state.phase in RESULT_PHASES else None


def children(w: Work, spec: CompiledStep, key: str, scope: Scope
             ) -> Iterator[tuple[CompiledNode, str, Scope]]:
    return iter(())


def edges(spec: CompiledStep) -> Iterable[tuple[str, str, str]]:
    """Every move of a step's phase that the engine makes (checked by a property test)."""
    tcc = spec.confirms
    fwd, done = ("trying", "tried") if tcc else ("executing", "succeeded")
    back, backed = ("cancelling", "cancelled") if tcc else ("compensating", "compensated")
    out = [
        ("pending", fwd, "entered"),
        ("pending", "skipped", "guard false"),
        ("pending", "failed", "mapper raised"),
        (fwd, done, "ok"),
        (fwd, "failed", "rejected / exhausted / abandoned"),
        (fwd, done, "operator skip"),
        ("failed", "pending", "operator retry (abandoned sibling re-run)"),
        (done, "resolved", "operator skip / compensate (left as is)"),
        ("failed", "resolved", "operator skip / compensate (left as is)"),
    ]
    if tcc:
        out += [("tried", "confirming", "all succeeded"),
                ("tried", "confirmed", "try skipped by operator: nothing to confirm"),
                ("confirming", "confirmed", "ok / operator skip")]
    if spec.reversible:
        out += [(done, back, "undo"), ("failed", back, "undo (may have applied)"),
                (back, backed, "ok"), (back, "resolved", "operator skip")]
    else:
        out.append(("failed", fwd, "operator retry (outcome unknown)"))
    return out


KIND = Kind(forward, undo, result, children, edges)
