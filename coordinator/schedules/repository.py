"""The schedules' SQL: create, read, change and list them and their runs (asyncpg, no ORM)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final
from uuid import UUID

import asyncpg

from coordinator.language.declared import STORED
from coordinator.schedules.errors import ScheduleConflict, ScheduleNotFound
from coordinator.schedules.model import ScheduleDefinition, ScheduleState

__all__ = ["RUN_NAMESPACE", "RunRecord", "definition_of", "delete", "get", "get_run", "insert",
           "jitter_of", "list_all", "list_runs", "run_saga_id", "set_paused", "stored_columns",
           "update"]

#: uuid5 namespace of the saga ids of schedule runs (fixed forever: ids must stay stable).
RUN_NAMESPACE: Final = UUID("6f1c2a4e-5b0d-4c1e-9a55-20a1c0de5c4e")

_COLUMNS: Final = (
    "id, saga_type, saga_version, input, fire_time_field, spec, overlap, catchup_window_s, "
    "jitter_s, paused, note, source, next_fire_at, due_at, last_saga_id, buffered, "
    "cancel_requested, fired_count, skipped_count, missed_count, last_fired_at, created_at, "
    "updated_at, created_by, updated_by"
)
SELECT_SCHEDULE: Final = f"SELECT {_COLUMNS} FROM schedules"  # noqa: S608


def run_saga_id(schedule_id: str, nominal: datetime, kind: str = "run") -> UUID:
    """The saga id of the run of ``schedule_id`` at ``nominal``: the same on every replica."""
    return uuid.uuid5(RUN_NAMESPACE, f"{kind}|{schedule_id}|{nominal.isoformat()}")


def jitter_of(definition: ScheduleDefinition, nominal: datetime) -> timedelta:
    """A deterministic delay in ``[0, jitter)`` for this fire time."""
    if not definition.jitter:
        return timedelta(0)
    fraction = run_saga_id(definition.id, nominal, "jitter").int / float(1 << 128)
    return definition.jitter * fraction


def due_for(definition: ScheduleDefinition, nominal: datetime | None) -> datetime | None:
    return None if nominal is None else nominal + jitter_of(definition, nominal)


def definition_of(row: Mapping[str, Any]) -> ScheduleDefinition:
    """A row's definition; fields a newer build added to its JSON are ignored."""
    return ScheduleDefinition.model_validate({
        "id": row["id"], "saga_type": row["saga_type"], "saga_version": row["saga_version"],
        "input": json.loads(row["input"]), "fire_time_field": row["fire_time_field"],
        "spec": json.loads(row["spec"]), "overlap": row["overlap"],
        "catchup_window": timedelta(seconds=row["catchup_window_s"]),
        "jitter": timedelta(seconds=row["jitter_s"]), "paused": row["paused"],
        "note": row["note"],
    }, context=STORED)


def state_of(row: asyncpg.Record) -> ScheduleState:
    return ScheduleState(
        definition=definition_of(row), source=row["source"], next_fire_at=row["next_fire_at"],
        due_at=row["due_at"],
        last_saga_id=str(row["last_saga_id"]) if row["last_saga_id"] else None,
        buffered=[datetime.fromisoformat(t) for t in json.loads(row["buffered"])],
        fired_count=row["fired_count"], skipped_count=row["skipped_count"],
        missed_count=row["missed_count"], last_fired_at=row["last_fired_at"],
        created_at=row["created_at"], updated_at=row["updated_at"],
        created_by=row["created_by"], updated_by=row["updated_by"])


def stored_columns(d: ScheduleDefinition) -> dict[str, Any]:
    """The definition's columns of a ``schedules`` row, as written (``input`` and ``spec``
    as JSON text); :func:`definition_of` reads them back."""
    return {"saga_type": d.saga_type, "saga_version": d.saga_version,
            "input": json.dumps(d.input), "fire_time_field": d.fire_time_field,
            "spec": d.spec.model_dump_json(), "overlap": d.overlap.value,
            "catchup_window_s": d.catchup_window.total_seconds(),
            "jitter_s": d.jitter.total_seconds(), "paused": d.paused, "note": d.note}


def _definition_args(d: ScheduleDefinition) -> list[Any]:
    return list(stored_columns(d).values())


async def insert(conn: asyncpg.Connection, d: ScheduleDefinition, *, now: datetime,
                 actor: str, source: str = "api") -> ScheduleState:
    """Create a schedule; its first fire time is the spec's first after ``now``."""
    nxt = d.spec.next_after(now)
    row = await conn.fetchrow(
        f"""
        INSERT INTO schedules (id, saga_type, saga_version, input, fire_time_field, spec,
                               overlap, catchup_window_s, jitter_s, paused, note, source,
                               next_fire_at, due_at, created_at, updated_at, created_by,
                               updated_by)
        VALUES ($1, $2, $3, $4::jsonb, $5, $6::jsonb, $7, $8, $9, $10, $11, $12, $13, $14,
                $15, $15, $16, $16)
        ON CONFLICT (id) DO NOTHING
        RETURNING {_COLUMNS}
        """,  # noqa: S608
        d.id, *_definition_args(d), source, nxt, due_for(d, nxt), now, actor)
    if row is None:
        raise ScheduleConflict(f"a schedule {d.id!r} already exists")
    return state_of(row)


async def get(conn: asyncpg.Connection, schedule_id: str, *, lock: bool = False
              ) -> asyncpg.Record:
    row = await conn.fetchrow(
        SELECT_SCHEDULE + " WHERE id = $1" + (" FOR UPDATE" if lock else ""), schedule_id)
    if row is None:
        raise ScheduleNotFound(schedule_id)
    return row


async def list_all(conn: asyncpg.Connection, *, saga_type: str | None = None,
                   limit: int = 500, after_id: str | None = None) -> list[ScheduleState]:
    """Schedules in id order (after ``after_id``: the next page)."""
    rows = await conn.fetch(
        SELECT_SCHEDULE + " WHERE ($1::text IS NULL OR saga_type = $1)"
        " AND ($3::text IS NULL OR id > $3) ORDER BY id LIMIT $2",
        saga_type, limit, after_id)
    return [state_of(r) for r in rows]


async def update(conn: asyncpg.Connection, d: ScheduleDefinition, *, now: datetime,
                 actor: str, source: str | None = None) -> ScheduleState:
    """Replace a schedule's definition; a changed spec fires next at its first time after
    ``now`` (the buffered runs and the counts stay)."""
    old = await get(conn, d.id, lock=True)
    spec_changed = json.loads(old["spec"]) != json.loads(d.spec.model_dump_json())
    nxt = d.spec.next_after(now) if spec_changed else old["next_fire_at"]
    row = await conn.fetchrow(
        f"""
        UPDATE schedules SET saga_type = $2, saga_version = $3, input = $4::jsonb,
               fire_time_field = $5, spec = $6::jsonb, overlap = $7, catchup_window_s = $8,
               jitter_s = $9, paused = $10, note = $11, next_fire_at = $12,
               due_at = CASE WHEN buffered <> '[]'::jsonb THEN $14::timestamptz
                             ELSE $13::timestamptz END,
               updated_at = $14, updated_by = $15, source = coalesce($16, source)
        WHERE id = $1 RETURNING {_COLUMNS}
        """,  # noqa: S608
        d.id, *_definition_args(d), nxt, due_for(d, nxt), now, actor, source)
    assert row is not None
    return state_of(row)


async def set_paused(conn: asyncpg.Connection, schedule_id: str, paused: bool, *,
                     now: datetime, actor: str, note: str | None = None) -> ScheduleState:
    """Pause, or resume: a resumed schedule fires next at its first time after ``now``
    (times that fell in the pause are not runs; backfill them if they should be)."""
    old = await get(conn, schedule_id, lock=True)
    d = definition_of(old)
    nxt = old["next_fire_at"]
    if not paused and old["paused"]:
        nxt = d.spec.next_after(now)
    row = await conn.fetchrow(
        f"""
        UPDATE schedules SET paused = $2, next_fire_at = $3,
               due_at = CASE WHEN buffered <> '[]'::jsonb THEN $5::timestamptz
                             ELSE $4::timestamptz END,
               note = coalesce($6, note), updated_at = $5, updated_by = $7
        WHERE id = $1 RETURNING {_COLUMNS}
        """,  # noqa: S608
        schedule_id, paused, nxt, due_for(d, nxt), now, note, actor)
    assert row is not None
    return state_of(row)


async def delete(conn: asyncpg.Connection, schedule_id: str) -> None:
    """Delete a schedule and its run records (the sagas it started stay)."""
    done = await conn.fetchval("DELETE FROM schedules WHERE id = $1 RETURNING true",
                               schedule_id)
    if not done:
        raise ScheduleNotFound(schedule_id)


class RunRecord(dict[str, Any]):
    """One ``schedule_runs`` row, with the status of its saga when there is one."""


_RUN_COLUMNS: Final = (
    "r.nominal_at, r.outcome, r.saga_id, r.reason, r.recorded_at, r.started_at, r.actor, "
    "s.status AS saga_status")


async def get_run(conn: asyncpg.Connection, schedule_id: str, nominal: datetime) -> RunRecord:
    row = await conn.fetchrow(
        f"SELECT {_RUN_COLUMNS} FROM schedule_runs r LEFT JOIN sagas s ON s.id = r.saga_id "  # noqa: S608
        "WHERE r.schedule_id = $1 AND r.nominal_at = $2", schedule_id, nominal)
    if row is None:
        raise ScheduleNotFound(f"{schedule_id}@{nominal.isoformat()}")
    return RunRecord(dict(row))


async def list_runs(conn: asyncpg.Connection, schedule_id: str, *, limit: int = 50,
                    since: datetime | None = None,
                    before: datetime | None = None) -> list[RunRecord]:
    """Runs newest nominal time first: at or after ``since``, before ``before`` (the next
    page; nominal times are unique per schedule)."""
    rows = await conn.fetch(
        f"""
        SELECT {_RUN_COLUMNS}
        FROM schedule_runs r LEFT JOIN sagas s ON s.id = r.saga_id
        WHERE r.schedule_id = $1 AND ($3::timestamptz IS NULL OR r.nominal_at >= $3)
          AND ($4::timestamptz IS NULL OR r.nominal_at < $4)
        ORDER BY r.nominal_at DESC LIMIT $2
        """,  # noqa: S608
        schedule_id, limit, since, before)
    return [RunRecord(dict(r)) for r in rows]
