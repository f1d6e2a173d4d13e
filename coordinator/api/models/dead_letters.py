"""Bodies of the dead-letter routes: replies the coordinator could not apply, and outbox
messages the relay could not publish."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel

__all__ = [
    "ActionOut",
    "DeadLetterOut",
    "DeadLetterPageOut",
    "OutboxDeadLetterOut",
    "OutboxDeadLetterPageOut",
]


class DeadLetterOut(BaseModel):
    id: int
    source: str
    topic: str | None
    partition: int | None
    offset: int | None
    reason: str
    created_at: datetime | None
    key_base64: str | None
    payload_base64: str | None
    headers: list[dict[str, str]]
    #: The payload decoded as a reply envelope, when it is one.
    decoded: dict[str, Any] | None = None


class OutboxDeadLetterOut(BaseModel):
    id: int
    shard: int
    topic: str
    key: str
    message_id: UUID
    headers: dict[str, str]
    payload_base64: str
    error_class: str
    reason: str
    created_at: datetime
    failed_at: datetime


class DeadLetterPageOut(BaseModel):
    items: list[DeadLetterOut]
    #: Pass back as ``cursor`` for the next page; null on the last one.
    next_cursor: str | None


class OutboxDeadLetterPageOut(BaseModel):
    items: list[OutboxDeadLetterOut]
    #: Pass back as ``cursor`` for the next page; null on the last one.
    next_cursor: str | None


class ActionOut(BaseModel):
    """What a dead-letter action did."""

    id: int
    action: str
    detail: str
