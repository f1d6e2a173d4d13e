"""The barrier: one row per (saga id, step, phase) in the participant's own database.

Rows are written with ``INSERT … ON CONFLICT DO NOTHING`` in the same transaction as the
handler's business write, so the effect and its record commit together ("change instead of
check", as in DTM's sub-transaction barrier). A committed row always holds a final outcome
(``ok`` or ``rejected``) and its result or error, so a duplicate command is answered from the row
without running the handler. A ``failed`` outcome is never stored: its transaction rolls back.

``reason`` tells how the row came to be:

* ``handled``: the handler ran (outcome ``ok``, or ``rejected`` for a business rejection);
* ``null_compensation``: a cancel/compensation whose try/action never ran (or was rejected);
  the business code was skipped;
* ``blocked``: the marker that cancel/compensation writes for a try/action that has not
  arrived; it stores the refusal a late (hanging) try/action gets.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any, Protocol

from participant_sdk.protocol import ErrorInfo, Outcome, Phase

BARRIER_TABLE = "sagaflow_barrier"

BARRIER_DDL = f"""
CREATE TABLE IF NOT EXISTS {BARRIER_TABLE} (
    saga_id     uuid        NOT NULL,
    step        text        NOT NULL,
    phase       text        NOT NULL,
    reason      text        NOT NULL,
    outcome     text,
    result      jsonb,
    error       jsonb,
    message_id  uuid,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, step, phase)
);
CREATE INDEX IF NOT EXISTS {BARRIER_TABLE}_created_at_idx ON {BARRIER_TABLE} (created_at);
"""


class BarrierReason(StrEnum):
    HANDLED = "handled"
    NULL_COMPENSATION = "null_compensation"
    BLOCKED = "blocked"


@dataclass(frozen=True, slots=True)
class BarrierKey:
    saga_id: uuid.UUID
    step: str
    phase: Phase

    def origin(self) -> BarrierKey:
        """The forward phase (try or action) this rollback phase undoes."""
        forward = Phase.TRY if self.phase is Phase.CANCEL else Phase.ACTION
        return BarrierKey(self.saga_id, self.step, forward)


@dataclass(frozen=True, slots=True)
class BarrierRecord:
    """What a barrier row stores: enough to send the same reply again."""

    reason: BarrierReason
    outcome: Outcome | None
    result: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    message_id: uuid.UUID | None = None


class BarrierStore(Protocol):
    """Barrier operations inside one open transaction (Postgres, or in memory for tests)."""

    async def insert(self, key: BarrierKey, record: BarrierRecord) -> bool:
        """Insert the row unless one exists; return whether it was inserted."""

    async def get(self, key: BarrierKey) -> BarrierRecord | None: ...

    async def settle(self, key: BarrierKey, record: BarrierRecord) -> None:
        """Overwrite the row inserted by this transaction with its final outcome."""

    async def claim_rollback(self, key: BarrierKey, marker: BarrierRecord,
                             message_id: uuid.UUID | None) -> RollbackClaim:
        """For a cancel/compensation: insert ``marker`` for its forward phase unless that has
        a row, judge whether this is a null compensation, and insert this phase's own row
        (``ok``, its reason by that judgement) unless it has one. See :class:`RollbackClaim`."""


@dataclass(frozen=True, slots=True)
class RollbackClaim:
    """What :meth:`BarrierStore.claim_rollback` found.

    ``inserted``: this phase's own row went in (else a duplicate: answer from the row).
    ``null_compensation``: the forward phase never ran or was refused (the row went in as
    ``null_compensation``), or it committed ``ok`` (``False``, row ``handled``); ``None`` when
    the forward row committed while the claim waited for it, so the claim could not see it:
    the row went in as ``handled`` and the caller reads the forward row in a fresh statement.
    """

    inserted: bool
    null_compensation: bool | None


async def claim_rollback_in_steps(store: BarrierStore, key: BarrierKey, marker: BarrierRecord,
                                  message_id: uuid.UUID | None) -> RollbackClaim:
    """:meth:`BarrierStore.claim_rollback` from ``insert`` and ``get`` (the in-memory store)."""
    origin_key = key.origin()
    if await store.insert(origin_key, marker):
        null_compensation = True
    else:
        origin = await store.get(origin_key)
        null_compensation = origin is None or origin.outcome is not Outcome.OK
    reason = BarrierReason.NULL_COMPENSATION if null_compensation else BarrierReason.HANDLED
    inserted = await store.insert(key, BarrierRecord(reason, Outcome.OK, message_id=message_id))
    return RollbackClaim(inserted, null_compensation)


#: One statement for :meth:`PgBarrierStore.claim_rollback`. The forward row is read in the
#: statement's snapshot: a committed row is final, so when visible it decides; when the marker
#: conflicted with a row committed after the snapshot (the insert waited for it), the verdict
#: is NULL and the caller reads it again. The own row's insert reads the verdict, so the
#: marker is always inserted (its key locked) first, as with two statements.
_CLAIM_ROLLBACK = f"""
WITH marker AS (
    INSERT INTO {BARRIER_TABLE} (saga_id, step, phase, reason, outcome, result, error, message_id)
    VALUES ($1, $2, $3, $5, $6, $7::jsonb, $8::jsonb, $9)
    ON CONFLICT (saga_id, step, phase) DO NOTHING
    RETURNING 1
), origin AS (
    SELECT outcome FROM {BARRIER_TABLE} WHERE saga_id = $1 AND step = $2 AND phase = $3
), verdict AS (
    SELECT CASE
        WHEN EXISTS (SELECT FROM marker) THEN true
        WHEN EXISTS (SELECT FROM origin) THEN (SELECT outcome FROM origin) IS DISTINCT FROM 'ok'
    END AS null_compensation
), own AS (
    INSERT INTO {BARRIER_TABLE} (saga_id, step, phase, reason, outcome, message_id)
    SELECT $1, $2, $4,
           CASE WHEN verdict.null_compensation THEN 'null_compensation' ELSE 'handled' END,
           'ok', $10
    FROM verdict
    ON CONFLICT (saga_id, step, phase) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT FROM own) AS inserted, (SELECT null_compensation FROM verdict) AS verdict
"""  # noqa: S608


class PgBarrierStore:
    """:class:`BarrierStore` on an asyncpg connection inside a transaction."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def insert(self, key: BarrierKey, record: BarrierRecord) -> bool:
        status: str = await self._conn.execute(
            f"INSERT INTO {BARRIER_TABLE}"  # noqa: S608
            " (saga_id, step, phase, reason, outcome, result, error, message_id)"
            " VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7::jsonb, $8)"
            " ON CONFLICT (saga_id, step, phase) DO NOTHING",
            key.saga_id,
            key.step,
            key.phase.value,
            *_columns(record),
        )
        return status.endswith(" 1")

    async def get(self, key: BarrierKey) -> BarrierRecord | None:
        row = await self._conn.fetchrow(
            f"SELECT reason, outcome, result, error, message_id FROM {BARRIER_TABLE}"  # noqa: S608
            " WHERE saga_id = $1 AND step = $2 AND phase = $3",
            key.saga_id,
            key.step,
            key.phase.value,
        )
        if row is None:
            return None
        return BarrierRecord(
            reason=BarrierReason(row["reason"]),
            outcome=None if row["outcome"] is None else Outcome(row["outcome"]),
            result=None if row["result"] is None else json.loads(row["result"]),
            error=None if row["error"] is None else ErrorInfo.model_validate_json(row["error"]),
            message_id=row["message_id"],
        )

    async def settle(self, key: BarrierKey, record: BarrierRecord) -> None:
        await self._conn.execute(
            f"UPDATE {BARRIER_TABLE}"  # noqa: S608
            " SET reason = $4, outcome = $5, result = $6::jsonb, error = $7::jsonb,"
            " message_id = $8 WHERE saga_id = $1 AND step = $2 AND phase = $3",
            key.saga_id,
            key.step,
            key.phase.value,
            *_columns(record),
        )


    async def claim_rollback(self, key: BarrierKey, marker: BarrierRecord,
                             message_id: uuid.UUID | None) -> RollbackClaim:
        """The claim in one round trip (:data:`_CLAIM_ROLLBACK`), not two or three."""
        origin = key.origin()
        row = await self._conn.fetchrow(
            _CLAIM_ROLLBACK, key.saga_id, key.step, origin.phase.value, key.phase.value,
            *_columns(marker), message_id)
        return RollbackClaim(bool(row["inserted"]), row["verdict"])


def _columns(record: BarrierRecord) -> tuple[Any, ...]:
    return (
        record.reason.value,
        None if record.outcome is None else record.outcome.value,
        None if record.result is None else json.dumps(record.result),
        None if record.error is None else record.error.model_dump_json(),
        record.message_id,
    )


async def install_barrier(conn: Any) -> None:
    """Create the barrier table and its index if absent (safe to run concurrently)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", BARRIER_TABLE)
        await conn.execute(BARRIER_DDL)


async def purge_barrier(conn: Any, older_than: timedelta, *, batch_size: int = 5000) -> int:
    """Delete barrier rows older than ``older_than`` in batches; return how many were deleted.

    Choose an age well beyond the longest time a duplicate or late command can still arrive
    (the coordinator's retry horizon plus Kafka retention): a purged row can no longer refuse a
    hanging try or deduplicate a redelivery.
    """
    total = 0
    while True:
        status: str = await conn.execute(
            f"DELETE FROM {BARRIER_TABLE} WHERE ctid = ANY(ARRAY("  # noqa: S608
            f" SELECT ctid FROM {BARRIER_TABLE}"
            " WHERE created_at < now() - $1::interval LIMIT $2))",
            older_than,
            batch_size,
        )
        deleted = int(status.split()[-1])
        total += deleted
        if deleted < batch_size:
            return total
