"""Applying a signal: keep it, then walk, so a wait already waiting for it takes it at once."""

from __future__ import annotations

from coordinator.engine.driver import drive
from coordinator.engine.events import SignalReceived
from coordinator.engine.state import KeptSignal, SagaState
from coordinator.engine.tree import CompiledSaga
from coordinator.engine.work import Work
from coordinator.language.saga import Saga

__all__ = ["kept_over_bound", "on_signal"]


def on_signal(w: Work, event: SignalReceived) -> str | None:
    """Keep the signal until a wait consumes it; returns why it was ignored, or ``None``."""
    if event.name not in w.definition.signals:
        return f"saga type {w.definition.name} waits for no signal {event.name!r}"
    kept = w.get("signals")
    if any(s.signal_id == event.signal_id for s in kept):
        return f"duplicate signal {event.signal_id}"
    w.update(signals=[*kept, KeptSignal(signal_id=event.signal_id, name=event.name,
                                        payload=dict(event.payload), received_at=w.now)])
    w.note(f"signal {event.name!r} ({event.signal_id}) received")
    drive(w)
    return None


def kept_over_bound(definition: CompiledSaga, state: SagaState, name: str) -> str | None:
    """Why ``state`` (a signal ``name`` just applied) keeps more signals than the saga class
    allows (``max_kept_signals``, ``max_kept_signals_per_name``), or ``None``.

    Checked by whoever delivers a signal (the store, the test kit), before it commits: a
    signal a wait takes at once is never refused. Never checked on replay, so a bound lowered
    later cannot make a stored history unreplayable."""
    cls = definition.saga_class or Saga  # a definition without its class: the defaults
    total = len(state.signals)
    same = sum(1 for s in state.signals if s.name == name)
    per_saga, per_name = cls.max_kept_signals, cls.max_kept_signals_per_name
    if same > per_name:
        return (f"saga {state.saga_id} already keeps {per_name} {name!r} signal(s) no wait "
                f"has taken (max_kept_signals_per_name={per_name})")
    if total > per_saga:
        return (f"saga {state.saga_id} already keeps {per_saga} signal(s) no wait has taken "
                f"(max_kept_signals={per_saga})")
    return None
