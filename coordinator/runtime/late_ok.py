"""Resuming a dead saga by itself once a late ``ok`` for its dead step arrived.

Off by default (``SAGAFLOW_RESUME_ON_LATE_OK``): the engine records the late ``ok`` and the
page says that Retry completes the step; with the setting on, the worker makes that retry
itself, as the actor ``sagaflow:late-ok``, right after the reply's commit. A worker killed in
between leaves the saga dead with the late ``ok`` recorded, for a person to retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Final
from uuid import UUID

from coordinator.engine import InvalidTransition, OperatorRepair, RepairVerb, ReplyReceived, Status
from coordinator.store import SagaStore
from coordinator.store._writes import Change
from coordinator.store.errors import StoreError

__all__ = ["ACTOR", "LateOkResumer"]

log = logging.getLogger(__name__)

#: Who the history names for a retry the worker made by itself.
ACTOR: Final = "sagaflow:late-ok"


class LateOkResumer:
    """A change listener: a reply that recorded a late ``ok`` on a dead saga starts a retry."""

    def __init__(self, store: SagaStore) -> None:
        self._store = store
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._store.add_change_listener(self.on_changes)

    def on_changes(self, changes: Sequence[Change]) -> None:
        for change in changes:
            state = change.decision.state
            if (isinstance(change.event, ReplyReceived) and change.decision.ignored is None
                    and state.status is Status.DEAD and state.late_ok is not None):
                task = asyncio.get_running_loop().create_task(self._resume(state.saga_id))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _resume(self, saga_id: UUID) -> None:
        repair = OperatorRepair(verb=RepairVerb.RETRY, actor=ACTOR,
                                reason="a late ok for the dead step arrived")
        try:
            await self._store.apply(saga_id, repair, actor=ACTOR)
        except (InvalidTransition, StoreError) as exc:  # an operator was quicker, or it moved
            log.info("saga %s: no retry after its late ok: %s", saga_id, exc)

    async def stop(self) -> None:
        """Wait for the retries already started (each is one short transaction)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
