"""Applying a signal: keep it, then walk, so a wait already waiting for it takes it at once."""

from __future__ import annotations

from coordinator.engine.driver import drive
from coordinator.engine.events import SignalReceived
from coordinator.engine.state import KeptSignal
from coordinator.engine.work import Work

__all__ = ["on_signal"]


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
