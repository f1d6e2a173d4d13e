"""What the route modules share: the app's state and the documented error answers."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from fastapi import Request

from coordinator.api.errors import ErrorBody
from coordinator.observability.participants import ParticipantHealthMonitor
from coordinator.observability.settings import StuckPolicy
from coordinator.observability.stuck import stuck_ids
from coordinator.runtime.hints.results import SagaEndWaiters
from coordinator.store import SagaStore

__all__ = ["ERRORS", "Context", "context"]

#: Most stuck sagas the API considers at once; beyond it, narrow the filter.
_STUCK_LIMIT = 10_000


def _e(text: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": text}


#: Error answers every route documents (all share the ErrorBody shape).
ERRORS: dict[int | str, dict[str, Any]] = {
    400: _e("Bad parameter (e.g. an invalid cursor)"),
    401: _e("No or unknown credentials"),
    403: _e("The caller's role does not allow this"),
    404: _e("Not found"),
    409: _e("Conflict: not legal in the current state"),
    422: _e("The request does not validate"),
    429: _e("Too many failed credentials from this address or for this credential; "
            "retry after the Retry-After header's seconds"),
    503: _e("The database is unavailable; retry"),
}


@dataclass(frozen=True, slots=True)
class Context:
    store: SagaStore
    registry: Any
    clock: Callable[[], datetime]
    #: The same policy the worker's stuck scan applies (``SAGAFLOW_STUCK_*``).
    stuck_policy: StuckPolicy
    #: Wakes the bulk-repair runner of this process, if it runs one.
    wake_jobs: Callable[[], None]
    #: Hints the workers that a schedule changed (``coordinator.runtime.hints.timers``), if enabled.
    wake_workers: Callable[[], None] = lambda: None
    #: Wakes the result long polls when their saga ends (``coordinator.runtime.hints.results``), if
    #: enabled.
    saga_ends: SagaEndWaiters | None = None
    #: Consumers and lag of each participant's command topic (``GET /participants``).
    participants: ParticipantHealthMonitor | None = None

    def now(self) -> datetime:
        return self.clock()

    async def stuck_ids(self, conn: Any, among: Collection[UUID] | None = None) -> frozenset[UUID]:
        """Ids of the sagas the stuck policy flags now (one indexed scan of in-flight sagas),
        or of those ``among`` the given ones (cheap: for a page or one saga)."""
        return await stuck_ids(conn, self.stuck_policy, now=self.now(), limit=_STUCK_LIMIT,
                               saga_ids=among)


def context(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx
