"""Updates (``language.updates``): validating one against the saga as it stands, and applying
an accepted one. Pure like the rest of the engine: the store and the test kit call
:func:`check_update` under the saga's lock, then :func:`~coordinator.engine.advance` with an
:class:`UpdateApplied` event, which replay folds again (running ``apply`` again)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from coordinator.engine.decision import EngineError
from coordinator.engine.events import SignalReceived, UpdateApplied
from coordinator.engine.results import node_results
from coordinator.engine.signals import on_signal
from coordinator.engine.state import AppliedUpdate, SagaState, trusted
from coordinator.engine.tree import CompiledSaga
from coordinator.engine.work import Work
from coordinator.language.updates import Update, UpdateContext, UpdateRejected

__all__ = [
    "UpdateFailed",
    "check_update",
    "declared_updates",
    "on_update",
    "update_results",
    "update_signal_id",
    "update_signal_payload",
]


class UpdateFailed(EngineError):
    """An update's ``validate`` or ``apply`` broke (raised, or returned what it may not):
    a bug in the saga class. Nothing is applied."""


def declared_updates(definition: CompiledSaga) -> dict[str, Update]:
    """The updates the saga's class declares, by name."""
    updates = getattr(definition.saga_class, "updates", None) or ()
    return {u.name: u for u in updates}


def update_results(state: SagaState) -> dict[str, Any]:
    """What ``ctx.updates`` reads: the latest accepted update's result, by update name."""
    return {name: dict(u.result) for name, u in state.updates.items()}


def update_signal_id(update_id: str) -> str:
    """The id of the signal an accepted update with ``signal`` delivers (applied once)."""
    return f"update:{update_id}"


def _context(definition: CompiledSaga, state: SagaState, now: datetime) -> UpdateContext[Any]:
    return UpdateContext(
        saga_id=state.saga_id, saga_type=state.saga_type, version=state.version,
        status=state.status.value,
        input=definition.input_model.model_validate(state.input),
        results=node_results(definition, state), updates=update_results(state), now=now)


def _typed(update: Update, payload: dict[str, Any]) -> Any:
    return update.model.model_validate(payload) if update.model is not None else dict(payload)


def check_update(definition: CompiledSaga, state: SagaState, name: str,
                 payload: dict[str, Any], now: datetime) -> str | None:
    """Run update ``name``'s validator: ``None`` when it accepts, else its reason.

    ``payload`` is already valid for the update's model. A validator that raises anything
    but :class:`UpdateRejected` rejects too, with the error as its reason (a validator that
    cannot decide must not let the update through)."""
    update = declared_updates(definition)[name]
    if update.validate is None:
        return None
    try:
        verdict = update.validate(_context(definition, state, now), _typed(update, payload))
    except UpdateRejected as exc:
        return exc.reason or "rejected"
    except Exception as exc:
        return f"validator raised {type(exc).__name__}: {exc}"
    if verdict is None or verdict is True:
        return None
    if verdict is False:
        return "rejected by the validator"
    if isinstance(verdict, str):
        return verdict or "rejected by the validator"
    raise UpdateFailed(f"validator of update {name!r} of {definition.name} returned "
                       f"{type(verdict).__name__}: None/True accepts, a reason rejects")


def _result(update: Update, definition: CompiledSaga, state: SagaState,
            payload: dict[str, Any], now: datetime) -> dict[str, Any]:
    if update.apply is None:
        return dict(payload)
    where = f"update {update.name!r} of {definition.name}"
    try:
        value = update.apply(_context(definition, state, now), _typed(update, payload))
    except Exception as exc:
        raise UpdateFailed(f"{where}: apply raised {type(exc).__name__}: {exc}") from exc
    if value is None:
        return {}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if not isinstance(value, Mapping):
        raise UpdateFailed(f"{where}: apply returned {type(value).__name__}, not a dict "
                           "or a pydantic model")
    try:  # the answer is stored and sent as JSON: only JSON values
        out: dict[str, Any] = json.loads(json.dumps(dict(value)))
    except (TypeError, ValueError) as exc:
        raise UpdateFailed(f"{where}: apply returned a result that is not JSON: {exc}"
                           ) from exc
    return out


def on_update(w: Work, event: UpdateApplied) -> str | None:
    """Apply an accepted update: record its result for ``ctx.updates``, then deliver its
    signal if it declares one (a wait for it wakes now). Returns why it was ignored."""
    update = declared_updates(w.definition).get(event.name)
    if update is None:
        return f"saga type {w.definition.name} takes no update {event.name!r}"
    result = _result(update, w.definition, w.state, event.payload, w.now)
    before = w.state.updates.get(event.name)
    applied = trusted(AppliedUpdate, update_id=event.update_id, payload=dict(event.payload),
                      result=result, applied_at=w.now,
                      count=1 if before is None else before.count + 1)
    w.update(updates={**w.state.updates, event.name: applied})
    w.note(f"update {event.name!r} ({event.update_id}) applied")
    if update.signal is None:
        return None
    data = update_signal_payload(w.definition, update, result)
    return on_signal(w, SignalReceived(signal_id=update_signal_id(event.update_id),
                                       name=update.signal, payload=data, sender=event.sender))


def update_signal_payload(definition: CompiledSaga, update: Update, result: dict[str, Any]
                          ) -> dict[str, Any]:
    """The payload of the signal an accepted update delivers: its result, validated against
    the model of the saga's waits for that signal."""
    assert update.signal is not None
    model = definition.signals.get(update.signal)
    try:
        return model.model_validate(result).model_dump(mode="json") if model else result
    except ValidationError as exc:
        raise UpdateFailed(f"update {update.name!r}: its result is not a valid "
                           f"{update.signal!r} signal payload: {exc}") from exc
