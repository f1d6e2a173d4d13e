"""The saga's outcome, by long poll: ``GET /sagas/{id}/result?wait=30s`` answers as soon as
the saga finishes (or goes dead), or when ``wait`` runs out, so a client never loops over
short sleeps of its own. The process that ends the saga hints this one
(``coordinator.runtime.hints.results``), which then reads the row at once; without a hint the server
re-reads it with plain ``SELECT``s, backing off from 50 ms to 1 s (the API and the workers are
separate processes, and a read takes no lock).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel

from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.errors import BadRequest, NotFound
from coordinator.engine import Status, node_results
from coordinator.runtime.hints.results import ended
from coordinator.store import SagaRecord, SagaStore, UnknownSagaType, UnknownSagaVersion
from participant_sdk.durations import parse_duration

__all__ = ["MAX_WAIT_S", "router", "saga_results"]

router = APIRouter(responses=ERRORS, tags=["sagas"])
Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
Ctx = Annotated[Context, Depends(context)]

#: Longest long poll (proxies commonly cut idle requests at 60 s).
MAX_WAIT_S = 55.0
#: Without a hint, a long poll re-reads its saga after the first pause, then doubles it up to
#: the longest.
_FIRST_PAUSE = 0.05
_LONGEST_PAUSE = 1.0


class ResultOut(BaseModel):
    saga_id: UUID
    status: Status
    #: Finished (completed, compensated, cancelled) or dead: the status will not move alone.
    done: bool
    #: Results of the nodes that succeeded, by node key.
    results: dict[str, Any]
    reason: str | None


def _done(record: SagaRecord) -> bool:
    return ended(Status(record.status))


def saga_results(store: SagaStore, record: SagaRecord) -> dict[str, Any]:
    """Every succeeded node's result, composites as their mappers see them; a saga whose
    version is no longer registered: its steps' results only (composites need the tree)."""
    try:
        definition = store.definition(record.saga_type, record.version)
    except (UnknownSagaType, UnknownSagaVersion):
        return record.state.results()
    return node_results(definition, record.state)


def _out(store: SagaStore, record: SagaRecord) -> ResultOut:
    return ResultOut(saga_id=record.saga_id, status=Status(record.status), done=_done(record),
                     results=saga_results(store, record), reason=record.state.reason)


_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_SPACE = r"[ \t\n\r\f\v]*"
#: Exactly what ``parse_duration`` reads, so that the schema says which waits are valid.
WAIT_PATTERN = (
    rf"^{_SPACE}(?:{_NUMBER}{_SPACE}(?:[mM][sS]|[sSmMhHdD])?"
    rf"|[pP](?:{_NUMBER}[dD](?:[tT](?:{_NUMBER}[hH])?(?:{_NUMBER}[mM])?(?:{_NUMBER}[sS])?)?"
    rf"|[tT](?:{_NUMBER}[hH](?:{_NUMBER}[mM])?(?:{_NUMBER}[sS])?"
    rf"|{_NUMBER}[mM](?:{_NUMBER}[sS])?|{_NUMBER}[sS]))){_SPACE}$"
)


@router.get("/sagas/{saga_id}/result", response_model=ResultOut,
            summary="Wait up to `wait` for the saga to finish, then its outcome")
async def saga_result(
    saga_id: Annotated[UUID, Path(description="The saga's id.")], ctx: Ctx, _: Viewer,
    wait: Annotated[str, Query(max_length=20, pattern=WAIT_PATTERN,
                               description="How long to wait for the end: `30s`, `500ms`, "
                               "plain seconds, ISO 8601 `PT30S` (`0`: answer now; a longer "
                               f"wait than {MAX_WAIT_S:g} s waits {MAX_WAIT_S:g} s).")
                    ] = "0",
) -> ResultOut:
    try:
        seconds = min(parse_duration(wait).total_seconds(), MAX_WAIT_S)
    except OverflowError:  # more days than a timedelta holds: the longest wait, then
        seconds = MAX_WAIT_S
    except ValueError as exc:
        raise BadRequest(f"wait: {exc}", code="invalid_wait") from exc
    deadline, pause = time.monotonic() + seconds, _FIRST_PAUSE
    async with _hinted(ctx, saga_id) as ended:
        while True:
            ended.clear()  # before the read: a hint during it is not lost
            record = await ctx.store.get_saga(saga_id)
            if record is None:
                raise NotFound(f"no saga with id {saga_id}", code="saga_not_found")
            left = deadline - time.monotonic()
            if _done(record) or left <= 0:
                return _out(ctx.store, record)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), min(pause, left))
            pause = min(pause * 2, _LONGEST_PAUSE)


@contextlib.asynccontextmanager
async def _hinted(ctx: Context, saga_id: UUID) -> AsyncIterator[asyncio.Event]:
    """The event the saga's end hint sets (one never set when hints are off)."""
    if ctx.saga_ends is None:
        yield asyncio.Event()
        return
    async with ctx.saga_ends.watching(saga_id) as event:
        yield event
