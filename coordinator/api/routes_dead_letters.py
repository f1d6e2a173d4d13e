"""Dead letters: messages a loop kept raw with the reason, and outbox rows never published.

``/dead-letters`` is ``participant_sdk.dead_letters``' table (the coordinator's reply loop
writes there with source ``coordinator:replies``; participants with ``participant:<name>``).
``/outbox/dead-letters`` is ``outbox_relay``'s table of rows the relay could not publish.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Annotated, Any, Final

import asyncpg
from fastapi import APIRouter, Depends, Path, Query

from coordinator.api import cursors
from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.errors import BadRequest, Conflict, NotFound
from coordinator.api.models import (
    ActionOut,
    DeadLetterOut,
    DeadLetterPageOut,
    OutboxDeadLetterOut,
    OutboxDeadLetterPageOut,
)
from coordinator.api.repairs import operator_actor
from coordinator.engine import ReplyReceived
from coordinator.store import ApplyOutcome, PendingEvent
from outbox_relay import OutboxMessage, enqueue
from outbox_relay import discard_dead_letter as discard_outbox
from outbox_relay import list_dead_letters as list_outbox
from outbox_relay import requeue_dead_letter as requeue_outbox
from outbox_relay.dead_letters import OutboxDeadLetter
from participant_sdk.dead_letters import DEAD_LETTER_TABLE, DeadLetter, list_dead_letters
from participant_sdk.protocol import (
    HEADER_MESSAGE_ID,
    HEADER_MESSAGE_KIND,
    KIND_COMMAND,
    ProtocolError,
    decode_command,
    decode_reply,
)

__all__ = ["router"]

audit = logging.getLogger("coordinator.api.audit")
router = APIRouter(responses=ERRORS, tags=["dead letters"])

Ctx = Annotated[Context, Depends(context)]
Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]
Admin = Annotated[Principal, Depends(require(Role.ADMIN))]
LetterId = Annotated[int, Path(ge=1, le=9_223_372_036_854_775_807)]

#: Source of the dead letters the coordinator's reply path writes
#: (coordinator.runtime.functions.handlers).
REPLY_SOURCE: Final = "coordinator:replies"
_ONE_LETTER: Final = (
    'SELECT id, source, topic, partition, "offset", key, headers, payload, reason, '  # noqa: S608
    f"created_at FROM {DEAD_LETTER_TABLE} WHERE id = $1"
)


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _decoded(letter: DeadLetter) -> dict[str, Any] | None:
    if letter.payload is None:
        return None
    try:
        if letter.source == REPLY_SOURCE:
            return decode_reply(letter.payload).model_dump(mode="json")
        return decode_command(letter.payload).model_dump(mode="json")
    except ProtocolError:
        return None


def _letter_out(letter: DeadLetter, *, decode: bool) -> DeadLetterOut:
    assert letter.id is not None
    return DeadLetterOut(
        id=letter.id, source=letter.source, topic=letter.topic, partition=letter.partition,
        offset=letter.offset, reason=letter.reason, created_at=letter.created_at,
        key_base64=_b64(letter.key), payload_base64=_b64(letter.payload),
        headers=[{"key": k, "value": v.decode("utf-8", errors="replace")}
                 for k, v in letter.headers],
        decoded=_decoded(letter) if decode else None,
    )


async def _fetch_letter(conn: asyncpg.Connection, letter_id: int) -> DeadLetter:
    # participant_sdk offers only newest-first listing; read one row by id the same way.
    row = await conn.fetchrow(_ONE_LETTER, letter_id)
    if row is None:
        raise NotFound(f"no dead letter {letter_id}", code="dead_letter_not_found")
    return DeadLetter(
        id=row["id"], source=row["source"], topic=row["topic"], partition=row["partition"],
        offset=row["offset"], key=row["key"], payload=row["payload"], reason=row["reason"],
        created_at=row["created_at"],
        headers=[(h["key"], h["value"].encode()) for h in json.loads(row["headers"])],
    )


async def _delete_letter(conn: asyncpg.Connection, letter_id: int) -> bool:
    status: str = await conn.execute(
        f"DELETE FROM {DEAD_LETTER_TABLE} WHERE id = $1", letter_id)  # noqa: S608
    return status == "DELETE 1"


@router.get("/dead-letters", response_model=DeadLetterPageOut,
            summary="Dead letters, newest first")
async def get_dead_letters(
    ctx: Ctx, _: Viewer,
    source: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: cursors.CursorParam = None,
) -> DeadLetterPageOut:
    before = _cursor_id(cursor, _LETTERS, source) if cursor is not None else None
    async with ctx.store.pool.acquire() as conn:
        letters = await list_dead_letters(conn, source=source, limit=limit + 1,
                                          before_id=before)
    items, nxt = cursors.split_page(letters, limit, _LETTERS,
                                    lambda d: (d.id or 0, source or ""))  # stored: has an id
    return DeadLetterPageOut(items=[_letter_out(d, decode=False) for d in items],
                             next_cursor=nxt)


_LETTERS: Final = "dead-letters"
_OUTBOX_LETTERS: Final = "outbox-dead-letters"


def _cursor_id(cursor: str, kind: str, source: str | None = None) -> int:
    """The id a dead-letter cursor carries; it must come from the same filter."""
    letter_id, filtered = cursors.decode(cursor, kind, 2)
    if not isinstance(letter_id, int) or filtered != (source or ""):
        raise BadRequest("the cursor belongs to another filter; start again without it",
                         code="invalid_cursor")
    return letter_id


@router.get("/dead-letters/{letter_id}", response_model=DeadLetterOut,
            summary="One dead letter: raw bytes (base64), reason, decoded when possible")
async def get_dead_letter(letter_id: LetterId, ctx: Ctx, _: Viewer) -> DeadLetterOut:
    async with ctx.store.pool.acquire() as conn:
        return _letter_out(await _fetch_letter(conn, letter_id), decode=True)


@router.post("/dead-letters/{letter_id}/requeue", response_model=ActionOut,
             summary="Process a dead letter again")
async def requeue_dead_letter(letter_id: LetterId, ctx: Ctx, who: Operator) -> ActionOut:
    """A reply is applied again through the store (a duplicate is ignored there); any other
    message is published again through the outbox. The dead letter is removed on success."""
    async with ctx.store.pool.acquire() as conn:
        letter = await _fetch_letter(conn, letter_id)
    if letter.payload is None:
        raise Conflict("the dead letter has no payload: discard it", code="not_requeueable")
    if letter.source == REPLY_SOURCE:
        try:
            reply = decode_reply(letter.payload)
        except ProtocolError as exc:
            raise Conflict(f"cannot requeue an undecodable reply ({exc}): discard it",
                           code="not_requeueable") from None
        (result,) = await ctx.store.apply_many(
            [PendingEvent(reply.saga_id, ReplyReceived(reply=reply),
                          actor=operator_actor(who.name))])
        if result.outcome in (ApplyOutcome.NOT_FOUND, ApplyOutcome.REJECTED):
            raise Conflict(f"the reply still cannot be applied: {result.reason}",
                           code="not_requeueable")
        detail = f"reply applied to saga {reply.saga_id} ({result.outcome.value})"
        async with ctx.store.pool.acquire() as conn:
            await _delete_letter(conn, letter_id)
    else:
        try:
            command = decode_command(letter.payload)
        except ProtocolError as exc:
            raise Conflict(f"cannot requeue an undecodable message ({exc}): discard it",
                           code="not_requeueable") from None
        if not letter.topic:
            raise Conflict("the dead letter has no topic to publish to",
                           code="not_requeueable")
        headers = {k: v.decode("utf-8", errors="replace") for k, v in letter.headers
                   if k != HEADER_MESSAGE_ID}
        headers.setdefault(HEADER_MESSAGE_KIND, KIND_COMMAND)
        message = OutboxMessage(topic=letter.topic, key=str(command.saga_id),
                                payload=letter.payload, message_id=command.message_id,
                                headers=headers)
        async with ctx.store.transaction() as conn:
            await enqueue(conn, [message])
            await _delete_letter(conn, letter_id)
        detail = f"re-published to {letter.topic} through the outbox"
    audit.info("requeue dead letter %d by=%s: %s", letter_id, who.name, detail)
    return ActionOut(id=letter_id, action="requeued", detail=detail)


@router.delete("/dead-letters/{letter_id}", response_model=ActionOut,
               summary="Discard a dead letter for good (admin)")
async def discard_dead_letter(letter_id: LetterId, ctx: Ctx, who: Admin) -> ActionOut:
    async with ctx.store.pool.acquire() as conn:
        if not await _delete_letter(conn, letter_id):
            raise NotFound(f"no dead letter {letter_id}", code="dead_letter_not_found")
    audit.info("discard dead letter %d by=%s", letter_id, who.name)
    return ActionOut(id=letter_id, action="discarded", detail="deleted")


# -- outbox dead letters --------------------------------------------------------------------


def _outbox_out(d: OutboxDeadLetter) -> OutboxDeadLetterOut:
    return OutboxDeadLetterOut(
        id=d.id, shard=d.shard, topic=d.topic, key=d.key, message_id=d.message_id,
        headers=d.headers, payload_base64=base64.b64encode(d.payload).decode(),
        error_class=d.error_class, reason=d.reason, created_at=d.created_at,
        failed_at=d.failed_at)


@router.get("/outbox/dead-letters", response_model=OutboxDeadLetterPageOut,
            summary="Outbox rows the relay could not publish, in id order")
async def get_outbox_dead_letters(
    ctx: Ctx, _: Viewer,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: cursors.CursorParam = None,
) -> OutboxDeadLetterPageOut:
    after = _cursor_id(cursor, _OUTBOX_LETTERS) if cursor is not None else None
    async with ctx.store.pool.acquire() as conn:
        rows = await list_outbox(conn, limit=limit + 1, after_id=after)
    items, nxt = cursors.split_page(rows, limit, _OUTBOX_LETTERS, lambda d: (d.id, ""))
    return OutboxDeadLetterPageOut(items=[_outbox_out(d) for d in items], next_cursor=nxt)


@router.get("/outbox/dead-letters/{letter_id}", response_model=OutboxDeadLetterOut,
            summary="One outbox dead letter")
async def get_outbox_dead_letter(letter_id: LetterId, ctx: Ctx,
                                 _: Viewer) -> OutboxDeadLetterOut:
    async with ctx.store.pool.acquire() as conn:
        found = await list_outbox(conn, limit=1, after_id=letter_id - 1)
    if not found or found[0].id != letter_id:
        raise NotFound(f"no outbox dead letter {letter_id}", code="dead_letter_not_found")
    return _outbox_out(found[0])


@router.post("/outbox/dead-letters/{letter_id}/requeue", response_model=ActionOut,
             summary="Put an outbox dead letter back in the outbox, in its original place")
async def requeue_outbox_dead_letter(letter_id: LetterId, ctx: Ctx,
                                     who: Operator) -> ActionOut:
    async with ctx.store.pool.acquire() as conn:
        if not await requeue_outbox(conn, letter_id):
            raise NotFound(f"no outbox dead letter {letter_id}", code="dead_letter_not_found")
    audit.info("requeue outbox dead letter %d by=%s", letter_id, who.name)
    return ActionOut(id=letter_id, action="requeued", detail="back in the outbox")


@router.delete("/outbox/dead-letters/{letter_id}", response_model=ActionOut,
               summary="Discard an outbox dead letter for good (admin)")
async def discard_outbox_dead_letter(letter_id: LetterId, ctx: Ctx, who: Admin) -> ActionOut:
    async with ctx.store.pool.acquire() as conn:
        if not await discard_outbox(conn, letter_id):
            raise NotFound(f"no outbox dead letter {letter_id}", code="dead_letter_not_found")
    audit.info("discard outbox dead letter %d by=%s", letter_id, who.name)
    return ActionOut(id=letter_id, action="discarded", detail="deleted")
