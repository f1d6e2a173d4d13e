"""Reads only the UI needs: the overview's counts, recent repair jobs, the id-prefix search and
the participants' dead letters (read from their own databases)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import asyncpg

from coordinator.api.queries import id_range
from coordinator.observability.scan import _DEAD_LETTERS, _IN_FLIGHT, _OUTBOX
from participant_sdk.dead_letters import DeadLetter, list_dead_letters

__all__ = ["BULK_LIMIT", "Overview", "ParticipantLetters", "id_range", "overview",
           "participant_letters", "recent_jobs"]

#: Most sagas one bulk job from the UI may touch (the API's own cap is 10,000).
BULK_LIMIT: Final = 1000

_LAST_DAY: Final = """
SELECT status, count(*) AS n FROM sagas WHERE created_at >= $1 GROUP BY status
"""
_RETRIED: Final = """
SELECT count(*) FROM sagas WHERE created_at >= $1 AND EXISTS (
    SELECT 1 FROM saga_nodes n, json_each_text(n.state->'attempts') a
    WHERE n.saga_id = sagas.id AND a.value::int > 1)
"""
_JOBS: Final = """
SELECT j.id, j.verb, j.reason, j.actor, j.status, j.total, j.created_at, j.finished_at,
       (SELECT count(*) FROM repair_job_items i WHERE i.job_id = j.id AND i.outcome <> 'pending')
       AS done
FROM repair_jobs j ORDER BY j.created_at DESC LIMIT $1
"""


@dataclass(frozen=True, slots=True)
class Overview:
    #: (saga type, status, count) of running, compensating and dead sagas.
    in_flight: list[tuple[str, str, int]]
    #: Sagas created in the last 24 hours, by status.
    last_day: dict[str, int]
    #: Of those, how many needed a retry somewhere (over the last hour only: it reads JSON).
    retried_last_hour: int
    started_last_hour: int
    dead_letters: dict[str, int]
    outbox_rows: int
    outbox_lag_seconds: float


async def overview(conn: asyncpg.Connection, now: datetime) -> Overview:
    in_flight = [(r["saga_type"], r["status"], r["n"]) for r in await conn.fetch(_IN_FLIGHT)]
    last_day = {r["status"]: r["n"] for r in await conn.fetch(_LAST_DAY, now - timedelta(1))}
    hour = now - timedelta(hours=1)
    retried = await conn.fetchval(_RETRIED, hour)
    started = await conn.fetchval("SELECT count(*) FROM sagas WHERE created_at >= $1", hour)
    letters: dict[str, int] = {}
    with contextlib.suppress(asyncpg.UndefinedTableError):
        letters = {r["source"]: r["n"] for r in await conn.fetch(_DEAD_LETTERS)}
    rows, lag = 0, 0.0
    with contextlib.suppress(asyncpg.UndefinedTableError):
        row = await conn.fetchrow(_OUTBOX)
        if row is not None:
            rows, lag = row["n"], row["lag"]
    return Overview(in_flight, last_day, retried, started, letters, rows, lag)


async def recent_jobs(conn: asyncpg.Connection, limit: int = 50) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(_JOBS, limit)]


@dataclass(frozen=True, slots=True)
class ParticipantLetters:
    participant: str
    letters: list[DeadLetter]
    #: Why the list could not be read (the DSN itself is never shown: it may hold a password).
    problem: str | None = None


async def participant_letters(name: str, dsn: str, *, wait: float,
                              limit: int = 50) -> ParticipantLetters:
    """The newest dead letters in one participant's own database (read-only)."""
    try:
        conn = await asyncpg.connect(dsn, timeout=wait, command_timeout=wait,
                                     server_settings={"application_name": "sagaflow-ui",
                                                      "default_transaction_read_only": "on"})
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        return ParticipantLetters(name, [], f"cannot connect ({type(exc).__name__})")
    try:
        return ParticipantLetters(name, await list_dead_letters(conn, limit=limit))
    except asyncpg.UndefinedTableError:
        return ParticipantLetters(name, [], "no dead-letter table in this database")
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        return ParticipantLetters(name, [], f"cannot read ({type(exc).__name__})")
    finally:
        await conn.close()
