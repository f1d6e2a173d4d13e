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

from participant_sdk.folded import FoldedTransaction, literal, uuid_literal
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


class PgBarrierStore:
    """:class:`BarrierStore` on an asyncpg connection inside a transaction.

    With a ``folded`` transaction not begun yet, the first insert begins it (BEGIN and the
    insert in one round trip) and the settle goes out with its COMMIT (see
    :mod:`participant_sdk.folded`). Only rows without the handler's data are folded: a folded
    statement carries its values as literals, and a tracer records statements' text, so a
    row with a result or an error message (other than the barrier's own refusal) is written
    with bound parameters as before."""

    def __init__(self, conn: Any, folded: FoldedTransaction | None = None) -> None:
        self._conn = conn
        self._folded = folded

    async def insert(self, key: BarrierKey, record: BarrierRecord) -> bool:
        folded = self._folded
        if folded is not None and not folded.started:
            if _foldable(record):
                status = await folded.begin_with(_insert_literal(key, record))
                return status.endswith(" 1")
            await folded.begin()
        plain: str = await self._conn.execute(
            f"INSERT INTO {BARRIER_TABLE}"  # noqa: S608
            " (saga_id, step, phase, reason, outcome, result, error, message_id)"
            " VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7::jsonb, $8)"
            " ON CONFLICT (saga_id, step, phase) DO NOTHING",
            key.saga_id,
            key.step,
            key.phase.value,
            *_columns(record),
        )
        return plain.endswith(" 1")

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
        if self._folded is not None and self._folded.started and _foldable(record):
            self._folded.commit_with(_settle_literal(key, record))
            return
        await self._conn.execute(
            f"UPDATE {BARRIER_TABLE}"  # noqa: S608
            " SET reason = $4, outcome = $5, result = $6::jsonb, error = $7::jsonb,"
            " message_id = $8 WHERE saga_id = $1 AND step = $2 AND phase = $3",
            key.saga_id,
            key.step,
            key.phase.value,
            *_columns(record),
        )


def _foldable(record: BarrierRecord) -> bool:
    """Whether ``record`` may travel as literals: it holds no result and no error but the
    barrier's own refusal (ids, step, phase and outcome are not the handler's data)."""
    return record.result is None and (record.error is None
                                       or record.reason is BarrierReason.BLOCKED)


def _insert_literal(key: BarrierKey, record: BarrierRecord) -> str:
    """The insert of :meth:`PgBarrierStore.insert` with its values as literals."""
    reason, outcome, result, error, message_id = _columns(record)
    return (f"INSERT INTO {BARRIER_TABLE}"  # noqa: S608 - literals quoted by folded.literal
            " (saga_id, step, phase, reason, outcome, result, error, message_id) VALUES ("
            f"{uuid_literal(key.saga_id)}, {literal(key.step)}, {literal(key.phase.value)},"
            f" {literal(reason)}, {literal(outcome)}, {literal(result)}::jsonb,"
            f" {literal(error)}::jsonb, {uuid_literal(message_id)})"
            " ON CONFLICT (saga_id, step, phase) DO NOTHING")


def _settle_literal(key: BarrierKey, record: BarrierRecord) -> str:
    """The update of :meth:`PgBarrierStore.settle` with its values as literals."""
    reason, outcome, result, error, message_id = _columns(record)
    return (f"UPDATE {BARRIER_TABLE}"  # noqa: S608 - literals quoted by folded.literal
            f" SET reason = {literal(reason)}, outcome = {literal(outcome)},"
            f" result = {literal(result)}::jsonb, error = {literal(error)}::jsonb,"
            f" message_id = {uuid_literal(message_id)}"
            f" WHERE saga_id = {uuid_literal(key.saga_id)} AND step = {literal(key.step)}"
            f" AND phase = {literal(key.phase.value)}")


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
