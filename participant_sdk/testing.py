"""An in-memory harness to unit-test a participant's handlers without Kafka or Postgres.

It runs commands through the same executor and barrier algorithm as the real loop
(:mod:`participant_sdk.executor`), with an in-memory barrier and a fake transaction, so
duplicates, null compensations, hanging tries and business rejections behave as in production.

What it cannot do is run SQL: handlers get a :class:`MemoryTransaction` as ``ctx.conn``. Keep
the SQL of a handler behind a small interface (a repository) with a Postgres implementation and
an in-memory one that writes through :meth:`MemoryTransaction.insert`; writes staged there are
committed with the barrier row, or rolled back with it, exactly like the real transaction.
Commands are processed one at a time; races between concurrent try and cancel are covered by
the SDK's Postgres tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from participant_sdk.barrier import (
    BarrierKey,
    BarrierRecord,
    RollbackClaim,
    claim_rollback_in_steps,
)
from participant_sdk.executor import CommandTransaction, LocalRetry, execute
from participant_sdk.handlers import Handler, Participant
from participant_sdk.metrics import ParticipantMetrics
from participant_sdk.protocol import (
    CommandEnvelope,
    Phase,
    ProtocolError,
    ReplyEnvelope,
    decode_command,
    reply_topic,
)

__all__ = ["DeadLetterRecord", "MemoryBarrier", "MemoryTransaction", "ParticipantHarness"]


class MemoryBarrier:
    """The barrier table as a dict; used through a :class:`MemoryTransaction`."""

    def __init__(self) -> None:
        self.rows: dict[BarrierKey, BarrierRecord] = {}


class _StagedBarrier:
    def __init__(self, tx: MemoryTransaction) -> None:
        self._tx = tx

    async def insert(self, key: BarrierKey, record: BarrierRecord) -> bool:
        if await self.get(key) is not None:
            return False
        self._tx._barrier_writes[key] = record
        return True

    async def get(self, key: BarrierKey) -> BarrierRecord | None:
        staged = self._tx._barrier_writes.get(key)
        return staged if staged is not None else self._tx._harness.barrier.rows.get(key)

    async def settle(self, key: BarrierKey, record: BarrierRecord) -> None:
        self._tx._barrier_writes[key] = record

    async def claim_rollback(self, key: BarrierKey, marker: BarrierRecord,
                             message_id: uuid.UUID | None) -> RollbackClaim:
        return await claim_rollback_in_steps(self, key, marker, message_id)


class MemoryTransaction:
    """What a handler gets as ``ctx.conn`` under the harness: staged, table-like writes."""

    def __init__(self, harness: ParticipantHarness) -> None:
        self._harness = harness
        self._barrier_writes: dict[BarrierKey, BarrierRecord] = {}
        self._rows: list[tuple[str, dict[str, Any]]] = []

    @property
    def conn(self) -> MemoryTransaction:
        return self

    @property
    def barrier(self) -> _StagedBarrier:
        return _StagedBarrier(self)

    async def insert(self, table: str, row: dict[str, Any]) -> None:
        """Stage a row; it becomes visible in ``harness.tables`` when the command commits."""
        self._rows.append((table, dict(row)))

    def select(self, table: str, **where: Any) -> list[dict[str, Any]]:
        """Rows of ``table`` (committed and staged by this transaction) matching ``where``."""
        rows = [*self._harness.tables.get(table, []), *(r for t, r in self._rows if t == table)]
        return [r for r in rows if all(r.get(k) == v for k, v in where.items())]

    def _commit(self) -> None:
        self._harness.barrier.rows.update(self._barrier_writes)
        for table, row in self._rows:
            self._harness.tables.setdefault(table, []).append(row)


@dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    reason: str
    raw: bytes | None = None
    command: CommandEnvelope | None = None


class ParticipantHarness:
    """Send commands to a participant's handlers in memory and get the replies.

    >>> harness = ParticipantHarness(Payments())
    >>> reply = await harness.send(harness.command("reserve", Phase.TRY, {"amount": 5}))
    """

    def __init__(
        self,
        participant: Participant,
        *,
        retry: LocalRetry | None = None,
        metrics: ParticipantMetrics | None = None,
    ) -> None:
        self.participant = participant
        self.handlers: dict[tuple[str, Any], Handler] = participant.validate()
        self.retry = retry or LocalRetry(initial=timedelta(0), maximum=timedelta(0))
        self.metrics = metrics
        self.barrier = MemoryBarrier()
        #: Committed rows written through :meth:`MemoryTransaction.insert`, per table.
        self.tables: dict[str, list[dict[str, Any]]] = {}
        self.dead_letters: list[DeadLetterRecord] = []
        #: Every reply sent, in order (duplicates included).
        self.replies: list[ReplyEnvelope] = []
        self._failures: list[BaseException] = []
        self._lock = asyncio.Lock()

    def fail_next_transactions(self, exc: BaseException, times: int = 1) -> None:
        """Make the next ``times`` transactions raise ``exc`` at begin (e.g. a lost connection)."""
        self._failures.extend([exc] * times)

    def command(
        self,
        action: str,
        phase: Phase,
        payload: dict[str, Any] | BaseModel | None = None,
        *,
        saga_id: uuid.UUID | None = None,
        step: str | None = None,
        attempt: int = 1,
        saga_type: str = "test",
        reply_to: str | None = None,
    ) -> CommandEnvelope:
        """Build a command for this participant, as the coordinator would."""
        body = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
        return CommandEnvelope(
            message_id=uuid.uuid4(),
            saga_id=saga_id or uuid.uuid4(),
            saga_type=saga_type,
            step=step or action,
            phase=phase,
            attempt=attempt,
            participant=self.participant.name,
            action=action,
            payload=body or {},
            reply_to=reply_to or reply_topic(),
        )

    async def send(self, command: CommandEnvelope) -> ReplyEnvelope:
        """Run one command to completion, like the real loop, and return its reply."""
        async with self._lock:
            execution = await execute(
                command,
                participant=self.participant.name,
                handlers=self.handlers,
                begin=self._begin,
                retry=self.retry,
                metrics=self.metrics,
            )
        if execution.dead_letter_reason is not None:
            self.dead_letters.append(
                DeadLetterRecord(execution.dead_letter_reason, command=command)
            )
        self.replies.append(execution.reply)
        return execution.reply

    async def send_raw(self, raw: bytes) -> ReplyEnvelope | None:
        """Send undecoded bytes: an undecodable message becomes a dead letter and no reply."""
        try:
            command = decode_command(raw)
        except ProtocolError as exc:
            self.dead_letters.append(DeadLetterRecord(str(exc), raw=raw))
            return None
        return await self.send(command)

    @contextlib.asynccontextmanager
    async def _begin(self) -> AsyncIterator[CommandTransaction]:
        if self._failures:
            raise self._failures.pop(0)
        tx = MemoryTransaction(self)
        yield tx
        tx._commit()
