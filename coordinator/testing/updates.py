"""The test kit's updates (``coordinator.testing``): the store's checks and answers, in
memory, so a kit test and the API answer an update alike (the shared behaviour suite runs
the same cases through both)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from coordinator.engine import SagaState, advance
from coordinator.engine.events import UpdateApplied
from coordinator.engine.signals import kept_over_bound
from coordinator.engine.simulate import Simulator
from coordinator.engine.updates import UpdateFailed, check_update, declared_updates
from coordinator.store.errors import TooManySignals
from coordinator.store.update_errors import (
    SagaFinishedForUpdates,
    UpdateBroken,
    UpdateIdConflict,
    UpdateNotFound,
)
from coordinator.store.updates import UpdateAnswer, update_payload

__all__ = ["send_update", "stored_answer"]

Answers = dict[tuple[uuid.UUID, str], UpdateAnswer]


def send_update(sim: Simulator, answers: Answers, name: str, payload: Any,
                update_id: str) -> UpdateAnswer:
    """Answer an update as ``SagaStore.update`` does: payload checked, a stored id answered
    again, a finished saga refusing, the validator run, an accepted update applied."""
    definition, state, saga_id = sim.definition, sim.current, sim.saga_id
    if not 1 <= len(update_id) <= 200:
        raise ValueError("update_id must be a string of 1 to 200 characters")
    stored = answers.get((saga_id, update_id))
    if stored is not None:
        if stored.name != name:
            raise UpdateIdConflict(saga_id, update_id, stored.name)
        return replace(stored, duplicate=True)
    data = update_payload(definition, name, payload)
    if state.status.is_terminal:
        raise SagaFinishedForUpdates(saga_id, state.status.value)
    now = sim.now
    try:
        reason = check_update(definition, state, name, data, now)
        if reason is not None:
            answer = UpdateAnswer(saga_id, update_id, name, "rejected", None, reason, now)
        else:
            event = UpdateApplied(update_id=update_id, name=name, payload=data, sender="kit")
            signal = declared_updates(definition)[name].signal
            if signal is not None:  # checked before it is applied, as the store does
                why = kept_over_bound(definition, _preview(sim, event), signal)
                if why is not None:
                    raise TooManySignals(saga_id, why)
            result = dict(sim.apply(event).state.updates[name].result)
            answer = UpdateAnswer(saga_id, update_id, name, "accepted", result, None, now)
    except UpdateFailed as exc:
        raise UpdateBroken(str(exc)) from exc
    answers[(saga_id, update_id)] = answer
    return answer


def _preview(sim: Simulator, event: UpdateApplied) -> SagaState:
    return advance(sim.definition, sim.current, event, sim.now).state


def stored_answer(saga_id: uuid.UUID, answers: Answers, update_id: str) -> UpdateAnswer:
    """The stored answer of ``update_id``, as ``GET .../updates/{name}/{id}`` gives it."""
    answer = answers.get((saga_id, update_id))
    if answer is None:
        raise UpdateNotFound(saga_id, update_id)
    return replace(answer, duplicate=True)
