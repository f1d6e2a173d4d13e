"""Starting a saga: validate its input, insert its row and first decision, or find the same
start already done (a start is idempotent by saga id). Signals reuse it to start sagas."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

import asyncpg
from opentelemetry import propagate
from pydantic import ValidationError

from coordinator.engine import CompiledSaga, SagaStarted, advance
from coordinator.engine import InvalidInput as EngineInvalidInput
from coordinator.store import queries
from coordinator.store._transactions import INSERT_SAGA, TransactionsMixin, input_hash
from coordinator.store._writes import Change, LockedSaga
from coordinator.store.business_keys import key_holder, start_key
from coordinator.store.errors import BusinessKeyConflict, InvalidInput, SagaConflict
from coordinator.store.nodes import dumps, spine_json
from coordinator.store.records import SagaRecord, StartResult
from coordinator.store.tracing import traced_start

__all__ = ["StartsMixin"]


class StartsMixin(TransactionsMixin):
    """Starting sagas by request (the API, a schedule, a signal with start)."""

    @traced_start
    async def start_saga(
        self,
        saga_type: str,
        input: Any,
        *,
        saga_id: UUID | None = None,
        version: int | None = None,
        actor: str = "api",
        trace_context: dict[str, str] | None = None,
        start_at: datetime | None = None,
        started_by: str | None = None,
    ) -> StartResult:
        """Start a saga, idempotently by id; with a later ``start_at`` it is ``scheduled``
        until then (its first command goes out at that time).

        The same id with the same type and input returns the existing saga
        (``created=False``); the same id with another type or input raises
        :class:`SagaConflict`. ``trace_context`` defaults to the current OpenTelemetry context.
        """
        definition, event, digest = self._start_event(saga_type, input, saga_id, version,
                                                      trace_context, start_at, started_by)

        async def work(conn: asyncpg.Connection) -> tuple[SagaRecord, bool, datetime | None]:
            return await self._start_in(conn, definition, event, digest, actor)

        record, created, earliest = await self._retrying(work)
        self._notify_timers(earliest)
        return StartResult(record=record, created=created)

    def _start_event(self, saga_type: str, input: Any, saga_id: UUID | None,
                     version: int | None, trace_context: dict[str, str] | None,
                     start_at: datetime | None = None, started_by: str | None = None,
                     ) -> tuple[CompiledSaga, SagaStarted, bytes]:
        """The definition, start event and input digest of a start (raises on bad input)."""
        definition = self.definition(saga_type, version)
        try:
            model = definition.input_model.model_validate(input)
        except ValidationError as exc:
            raise InvalidInput(saga_type, exc.errors(include_url=False)) from exc
        data = model.model_dump(mode="json")
        if trace_context is None:
            trace_context = {}
            propagate.inject(trace_context)
        event = SagaStarted(
            saga_id=saga_id or uuid4(),
            saga_type=definition.name,
            version=definition.version,
            input=data,
            trace_context=trace_context,
            start_at=start_at,
            started_by=started_by,
        )
        return definition, event, input_hash(data)


    async def _start_in(self, conn: asyncpg.Connection, definition: CompiledSaga,
                        event: SagaStarted, digest: bytes, actor: str
                        ) -> tuple[SagaRecord, bool, datetime | None]:
        """Insert the saga and its first decision in ``conn``'s transaction (or find the
        same start already there); (record, created, earliest timer due)."""
        sid, saga_type, trace_context = event.saga_id, event.saga_type, event.trace_context
        now = self._clock()
        try:
            decision = advance(definition, None, event, now)
        except EngineInvalidInput as exc:
            raise InvalidInput(saga_type, [{"loc": (), "msg": str(exc)}]) from exc
        key, spec = start_key(definition, decision.state.input)
        if key is not None and spec is not None:
            holder = await key_holder(conn, definition.name, key, spec, sid)
            if holder is not None and spec.on_conflict == "return":
                return await self._held_by(conn, holder[0]), False, None
            if holder is not None:
                raise BusinessKeyConflict(definition.name, key, *holder)
        inserted = await conn.fetchval(
            INSERT_SAGA, sid, definition.name, definition.version,
            decision.state.status.value, spine_json(decision.state),
            dumps(decision.state.input), digest, json.dumps(trace_context), now, None, key,
        )
        if not inserted:
            row = await conn.fetchrow(
                f"SELECT {queries.SAGA_COLUMNS}, input_hash FROM sagas WHERE id = $1",  # noqa: S608
                sid,
            )
            assert row is not None
            if row["saga_type"] != definition.name:
                raise SagaConflict(sid, f"with type {row['saga_type']!r}")
            if bytes(row["input_hash"]) != digest:
                raise SagaConflict(sid, "with a different input")
            return (await queries.saga_records(conn, [row]))[0], False, None
        locked = LockedSaga(
            saga_id=sid,
            saga_type=definition.name,
            version=definition.version,
            trace_context=trace_context,
            history_seq=0,
        )
        earliest = await self._write(
            conn, [Change(locked, 1, event, decision, now, actor)]
        )
        # The row as written (INSERT, then the snapshot update of history seq 1): no read back.
        record = SagaRecord(
            saga_id=sid,
            saga_type=definition.name,
            version=definition.version,
            status=decision.state.status.value,
            state=decision.state,
            trace_context=trace_context,
            history_seq=1,
            created_at=now,
            updated_at=now,
            last_progress_at=now,
            business_key=key,
        )
        return record, True, earliest

    @staticmethod
    async def _held_by(conn: asyncpg.Connection, saga_id: UUID) -> SagaRecord:
        """The saga that holds a start's business key (a start that returns it)."""
        record = await queries.get_saga(conn, saga_id)
        assert record is not None  # found under the key's lock a moment ago
        return record
