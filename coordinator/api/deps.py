"""What the route modules share: the app's state and the documented error answers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fastapi import Request

from coordinator.api.errors import ErrorBody
from coordinator.store import SagaStore

__all__ = ["ERRORS", "Context", "context"]


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
    503: _e("The database is unavailable; retry"),
}


@dataclass(frozen=True, slots=True)
class Context:
    store: SagaStore
    registry: Any
    clock: Callable[[], datetime]
    stuck_after: timedelta
    #: Wakes the bulk-repair runner of this process, if it runs one.
    wake_jobs: Callable[[], None]

    def now(self) -> datetime:
        return self.clock()


def context(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx
