"""Events of a saga whose version this process does not register are kept, never dropped.

A rolling deploy, a rollback or a worker started with ``allow_unregistered_versions`` can
leave a live saga on a version the process handling its event does not know. Refusing the
event would strand the saga (a refused timer was deleted, a refused reply became a dead
letter). Instead the reply is kept as a delivery (a ``timers`` row holding the event, see
migration 0004) and a timer is pushed back; both come due again every :data:`DEFER_RETRY`
until a process that registers the version applies them, in that saga's own transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final
from uuid import NAMESPACE_URL, UUID, uuid5

import asyncpg

from coordinator.engine import Event
from coordinator.engine.decision import Delivery
from coordinator.store.errors import UnknownSagaType, UnknownSagaVersion
from coordinator.store.nodes import dumps

__all__ = ["DEFER_RETRY", "UNREGISTERED", "deferred_delivery", "postpone_timers"]

#: How long a deferred event waits before a process tries it again.
DEFER_RETRY: Final = timedelta(seconds=30)
#: The errors that mean "this process does not register the saga's definition".
UNREGISTERED: Final = (UnknownSagaType, UnknownSagaVersion)

_NAMESPACE: Final = uuid5(NAMESPACE_URL, "sagaflow:deferred-event")


def deferred_delivery(saga_id: UUID, event: Event, now: datetime
                      ) -> tuple[Delivery, datetime]:
    """``event`` as a delivery due after :data:`DEFER_RETRY`; the id comes from the event's
    content, so a redelivered Kafka record is kept once."""
    message_id = uuid5(_NAMESPACE, f"{saga_id}:{dumps(event.to_json())}")
    return Delivery(saga_id=saga_id, event=event, message_id=message_id), now + DEFER_RETRY


async def postpone_timers(conn: asyncpg.Connection, timer_ids: Sequence[str], now: datetime
                          ) -> None:
    """Timers (and deliveries) that could not fire here come due again later."""
    await conn.execute("UPDATE timers SET due_at = $2 WHERE id = ANY($1::text[])",
                       list(timer_ids), now + DEFER_RETRY)
