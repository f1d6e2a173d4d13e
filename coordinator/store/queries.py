"""Read paths of the store, and the replay-based verify and compaction."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final
from uuid import UUID

import asyncpg

from coordinator.engine import CompiledSaga, SagaState, event_from_json, replay
from coordinator.engine.decide import replay_from
from coordinator.store.errors import SagaNotFound, StoreError
from coordinator.store.nodes import (
    KEPT_SIGNALS,
    dumps,
    load_nodes,
    load_stored,
    state_from_rows,
    steps_json,
)
from coordinator.store.records import (
    HistoryRecord,
    SagaPage,
    SagaRecord,
    TimerRecord,
    VerifyResult,
)
from coordinator.store.task_queries import task_differences

__all__ = [
    "compact",
    "get_history",
    "get_saga",
    "list_sagas",
    "list_timers",
    "sagas_needing_checkpoint",
    "verify",
]

DefinitionLookup = Callable[[str, int], CompiledSaga]

SAGA_COLUMNS: Final = (
    "id, saga_type, saga_version, status, snapshot, input, trace_context, history_seq, "
    f"created_at, updated_at, last_progress_at, business_key, {KEPT_SIGNALS} AS kept"
)


def saga_record(row: Mapping[str, Any], nodes: Sequence[tuple[str, str]]) -> SagaRecord:
    """A record from a row of ``SAGA_COLUMNS`` and the saga's node rows."""
    return SagaRecord(
        saga_id=row["id"],
        saga_type=row["saga_type"],
        version=row["saga_version"],
        status=row["status"],
        state=state_from_rows(row["snapshot"], row["input"], steps_json(nodes), row["kept"]),
        trace_context=json.loads(row["trace_context"]),
        history_seq=row["history_seq"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_progress_at=row["last_progress_at"],
        business_key=row["business_key"],
    )


async def saga_records(conn: asyncpg.Connection, rows: Sequence[Mapping[str, Any]]
                       ) -> list[SagaRecord]:
    """Records from rows of ``SAGA_COLUMNS``, their node rows read in one query."""
    nodes = await load_nodes(conn, [r["id"] for r in rows])
    return [saga_record(r, nodes.get(r["id"], [])) for r in rows]


async def get_saga(conn: asyncpg.Connection, saga_id: UUID) -> SagaRecord | None:
    row = await conn.fetchrow(f"SELECT {SAGA_COLUMNS} FROM sagas WHERE id = $1", saga_id)  # noqa: S608
    return None if row is None else (await saga_records(conn, [row]))[0]


_HISTORY: Final = """
SELECT saga_id, seq, event, recorded_at, actor, annotation, ignored FROM (
    SELECT * FROM saga_history_archive WHERE saga_id = $1 AND seq > $2
    UNION ALL
    SELECT * FROM saga_history WHERE saga_id = $1 AND seq > $2
) h ORDER BY seq
"""


async def get_history(
    conn: asyncpg.Connection, saga_id: UUID, *, after_seq: int = 0
) -> list[HistoryRecord]:
    """History rows after ``after_seq`` in order, archived ones included."""
    rows = await conn.fetch(_HISTORY, saga_id, after_seq)
    return [
        HistoryRecord(
            saga_id=r["saga_id"],
            seq=r["seq"],
            event=event_from_json(json.loads(r["event"])),
            recorded_at=r["recorded_at"],
            actor=r["actor"],
            annotation=None if r["annotation"] is None else json.loads(r["annotation"]),
            ignored=r["ignored"],
        )
        for r in rows
    ]


def _encode_cursor(created_at: datetime, saga_id: UUID) -> str:
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{saga_id}".encode()).decode()


def _decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        at, sid = base64.urlsafe_b64decode(cursor.encode()).decode().split("|")
        return datetime.fromisoformat(at), UUID(sid)
    except ValueError as exc:
        raise StoreError(f"invalid cursor {cursor!r}") from exc


async def list_sagas(
    conn: asyncpg.Connection,
    *,
    saga_type: str | None,
    version: int | None,
    status: str | None,
    created_after: datetime | None,
    created_before: datetime | None,
    limit: int,
    cursor: str | None,
) -> SagaPage:
    # Conditions are fixed fragments (values are always parameters), chosen so the planner sees
    # only the filters in use and can pick sagas_type_created, sagas_created or sagas_dead.
    conditions: list[str] = []
    args: list[Any] = []

    def add(fragment: str, *values: Any) -> None:
        placeholders = [f"${len(args) + i + 1}" for i in range(len(values))]
        conditions.append(fragment.format(*placeholders))
        args.extend(values)

    if saga_type is not None:
        add("saga_type = {0}", saga_type)
    if version is not None:
        add("saga_version = {0}", version)
    if status is not None:
        add("status = {0}", status)
    if created_after is not None:
        add("created_at >= {0}", created_after)
    if created_before is not None:
        add("created_at < {0}", created_before)
    if cursor is not None:
        at, sid = _decode_cursor(cursor)
        add("(created_at, id) < ({0}, {1})", at, sid)
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    limit = max(1, min(limit, 1000))
    args.append(limit + 1)
    rows = await conn.fetch(
        f"SELECT {SAGA_COLUMNS} FROM sagas {where} "  # noqa: S608
        f"ORDER BY created_at DESC, id DESC LIMIT ${len(args)}",
        *args,
    )
    items = await saga_records(conn, rows[:limit])
    next_cursor = None
    if len(rows) > limit:
        last = items[-1]
        next_cursor = _encode_cursor(last.created_at, last.saga_id)
    return SagaPage(items=items, next_cursor=next_cursor)


async def list_timers(conn: asyncpg.Connection, saga_id: UUID) -> list[TimerRecord]:
    rows = await conn.fetch(
        "SELECT id, saga_id, due_at, step, phase, attempt, kind FROM timers "
        "WHERE saga_id = $1 ORDER BY due_at",
        saga_id,
    )
    return [
        TimerRecord(r["id"], r["saga_id"], r["due_at"], r["step"], r["phase"], r["attempt"],
                    r["kind"])
        for r in rows
    ]


async def _replayed(
    conn: asyncpg.Connection, saga_id: UUID, definition: CompiledSaga
) -> tuple[SagaState | None, int, int]:
    """The state rebuilt from the latest checkpoint and the history after it."""
    checkpoint = await conn.fetchrow(
        "SELECT seq, state FROM saga_snapshots WHERE saga_id = $1 ORDER BY seq DESC LIMIT 1",
        saga_id,
    )
    from_seq = 0 if checkpoint is None else int(checkpoint["seq"])
    history = await get_history(conn, saga_id, after_seq=from_seq)
    if checkpoint is None:
        if not history:
            return None, 0, 0
        return replay(definition, [(h.event, h.recorded_at) for h in history]), 0, len(history)
    state = SagaState.from_json(json.loads(checkpoint["state"]))
    # replay_from switches definitions at a Migrated event after the checkpoint, and follows
    # the version-guard decisions the checkpoint and the events recorded.
    replayed = replay_from(definition, state, [(h.event, h.recorded_at) for h in history],
                           known_patches=state.patches)
    assert replayed is not None  # it started from a state
    return replayed, from_seq, len(history)


async def verify(
    conn: asyncpg.Connection, saga_id: UUID, lookup: DefinitionLookup
) -> VerifyResult:
    row = await conn.fetchrow(
        "SELECT saga_type, saga_version, history_seq FROM sagas WHERE id = $1", saga_id
    )
    if row is None:
        raise SagaNotFound(saga_id)
    definition = lookup(row["saga_type"], row["saga_version"])
    state, from_seq, count = await _replayed(conn, saga_id, definition)
    stored = _as_decoded((await load_stored(conn, [saga_id]))[saga_id])
    rebuilt = None if state is None else state.to_json()
    differences = [] if rebuilt is None else _diff(stored, rebuilt)
    if rebuilt is not None and list(stored["steps"]) != list(rebuilt["steps"]):
        # The steps mapping is ordered and the engine's walks follow that order.
        differences.append("steps: stored in another order than replayed")
    if rebuilt is None:
        differences.append("no history to replay")
    elif state is not None:
        differences += await task_differences(conn, saga_id, state, definition)
    if from_seq + count != row["history_seq"]:
        differences.append(
            f"history has {from_seq + count} events, the saga row says {row['history_seq']}"
        )
    return VerifyResult(saga_id, not differences, from_seq, count, differences)


def _as_decoded(stored: dict[str, Any]) -> dict[str, Any]:
    """The stored JSON as this build reads it (fields an older build did not write take their
    defaults), or as stored when it does not decode (the diff then shows where)."""
    try:
        return SagaState.from_json(stored).to_json()
    except ValueError:
        return stored


def _diff(stored: Any, rebuilt: Any, path: str = "") -> list[str]:
    if isinstance(stored, dict) and isinstance(rebuilt, dict):
        out: list[str] = []
        for key in sorted(set(stored) | set(rebuilt)):
            out.extend(_diff(stored.get(key), rebuilt.get(key), f"{path}.{key}"))
        return out
    if stored != rebuilt:
        return [f"{path or '.'}: stored {stored!r} != replayed {rebuilt!r}"]
    return []


async def compact(
    conn: asyncpg.Connection, saga_id: UUID, lookup: DefinitionLookup, *, archive: bool
) -> int:
    row = await conn.fetchrow(
        "SELECT history_seq FROM sagas WHERE id = $1 FOR NO KEY UPDATE",
        saga_id,
    )
    if row is None:
        raise SagaNotFound(saga_id)
    result = await verify(conn, saga_id, lookup)
    if not result.ok:
        raise StoreError(
            f"saga {saga_id}: replay disagrees with the snapshot, not checkpointing: "
            + "; ".join(result.differences[:5])
        )
    seq = int(row["history_seq"])
    await conn.execute(
        "INSERT INTO saga_snapshots (saga_id, seq, state) VALUES ($1, $2, $3::json) "
        "ON CONFLICT DO NOTHING",
        saga_id,
        seq,
        dumps((await load_stored(conn, [saga_id]))[saga_id]),
    )
    if archive:
        await conn.execute(
            """
            WITH moved AS (
                DELETE FROM saga_history WHERE saga_id = $1 AND seq <= $2 RETURNING *
            )
            INSERT INTO saga_history_archive SELECT * FROM moved
            """,
            saga_id,
            seq,
        )
    return seq


async def sagas_needing_checkpoint(
    conn: asyncpg.Connection, min_new_events: int, limit: int
) -> list[UUID]:
    # A maintenance scan (not a hot path), so it reads sagas without a dedicated index.
    rows = await conn.fetch(
        """
        SELECT s.id FROM sagas s
        LEFT JOIN LATERAL (
            SELECT max(seq) AS seq FROM saga_snapshots c WHERE c.saga_id = s.id
        ) c ON true
        WHERE s.history_seq - coalesce(c.seq, 0) >= $1
        ORDER BY s.id LIMIT $2
        """,
        min_new_events,
        limit,
    )
    return [r["id"] for r in rows]


#: At most this many children are listed with a saga (a for-each of children can be large).
CHILDREN_SHOWN = 1000


async def list_children(conn: asyncpg.Connection, saga_id: UUID
                        ) -> list[tuple[UUID, str, str, str, datetime]]:
    """The child sagas of ``saga_id``, oldest first: (id, type, status, parent node key,
    created at)."""
    rows = await conn.fetch(
        "SELECT id, saga_type, status, snapshot::jsonb #>> '{parent,step}' AS node, "
        "created_at FROM sagas WHERE parent_id = $1 ORDER BY created_at, id LIMIT $2",
        saga_id, CHILDREN_SHOWN)
    return [(r["id"], r["saga_type"], r["status"], r["node"] or "", r["created_at"])
            for r in rows]
