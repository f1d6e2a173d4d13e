"""The drain report of a saga type: which versions still have sagas in flight, since when,
and how long the last of them may keep an old version needed.

Counts read the ``sagas_in_flight`` partial index (scheduled, running, compensating and dead
rows), so a report costs O(sagas in flight), never O(sagas ever run). The expected end of a
version is the latest durable timer (sleep, deadline, backoff) of its live sagas: none of
them waits on a known timer beyond it. A live saga with no timer at all (waiting for a reply,
signal or task without a deadline) has no known end; those are counted as ``unbounded``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final
from uuid import UUID

import asyncpg

from coordinator.engine.compiled import CompiledGroup, GroupKind, walk
from coordinator.runtime.worker.versions import LIVE_STATUSES

__all__ = ["IN_FLIGHT_STATUSES", "VersionDrain", "drain_report"]

#: The statuses counted: live ones, and dead ones (a person may still retry them).
IN_FLIGHT_STATUSES: Final = (*LIVE_STATUSES, "dead")

_COUNTS: Final = """
SELECT saga_version, status, count(*) AS n FROM sagas
WHERE saga_type = $1 AND status = ANY($2::text[]) GROUP BY 1, 2
"""

_OLDEST: Final = """
SELECT DISTINCT ON (saga_version) saga_version, id, created_at FROM sagas
WHERE saga_type = $1 AND status = ANY($2::text[])
ORDER BY saga_version, created_at, id
"""

_ENDS: Final = """
SELECT s.saga_version, max(t.last_due) AS last_due,
       count(*) FILTER (WHERE t.last_due IS NULL) AS unbounded
FROM sagas s
LEFT JOIN LATERAL (SELECT max(due_at) AS last_due FROM timers
                   WHERE saga_id = s.id AND event IS NULL) t ON true
WHERE s.saga_type = $1 AND s.status = ANY($2::text[])
GROUP BY 1
"""

# The spine column holds ``patches`` (change id -> "old"/"new"), the version-guard decisions.
_PATCHES: Final = """
SELECT s.saga_version, p.key AS change, p.value AS choice, count(*) AS n
FROM sagas s, json_each_text(s.snapshot->'patches') p
WHERE s.saga_type = $1 AND s.status = ANY($2::text[])
GROUP BY 1, 2, 3
"""


@dataclass(slots=True)
class VersionDrain:
    """One version of a saga type: what is in flight on it and when it may be drained."""

    version: int
    registered: bool
    latest: bool
    #: In-flight sagas by status (scheduled, running, compensating, dead); absent ones are 0.
    by_status: dict[str, int] = field(default_factory=lambda: dict.fromkeys(IN_FLIGHT_STATUSES, 0))
    oldest_live_id: UUID | None = None
    oldest_live_at: datetime | None = None
    #: The latest timer of a live saga; None when there is no live saga with a timer.
    last_timer_due: datetime | None = None
    #: Live sagas with no timer: their end is not known.
    unbounded: int = 0
    #: The exported machine (``CompiledSaga.to_json()``), when this process registers it.
    machine: dict[str, Any] | None = None
    #: Version guards of this version: change id -> live sagas that took ``old``, took
    #: ``new``, or have not reached the guard (``undecided``). A guard can be retired once
    #: ``old`` and ``undecided`` are 0 (new starts always take ``new``).
    guards: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def live(self) -> int:
        return sum(self.by_status[s] for s in LIVE_STATUSES)

    @property
    def expected_last_finish(self) -> datetime | None:
        """When the last live saga is expected to be done at the earliest; None when none
        is live, or some live saga has no known end (see ``unbounded``)."""
        return None if self.unbounded or not self.live else self.last_timer_due


async def drain_report(conn: asyncpg.Connection, registry: Any, saga_type: str
                       ) -> list[VersionDrain]:
    """Every registered version of ``saga_type`` and every version with sagas in flight."""
    compiled = {c.version: c for c in registry.types() if c.name == saga_type}
    statuses = list(IN_FLIGHT_STATUSES)
    counts = await conn.fetch(_COUNTS, saga_type, statuses)
    versions = sorted(set(compiled) | {r["saga_version"] for r in counts})
    latest = max(compiled, default=None)
    report = {v: VersionDrain(v, registered=v in compiled, latest=v == latest,
                              machine=compiled[v].to_json() if v in compiled else None)
              for v in versions}
    for row in counts:
        report[row["saga_version"]].by_status[row["status"]] = row["n"]
    live = list(LIVE_STATUSES)
    for row in await conn.fetch(_OLDEST, saga_type, live):
        entry = report[row["saga_version"]]
        entry.oldest_live_id, entry.oldest_live_at = row["id"], row["created_at"]
    for row in await conn.fetch(_ENDS, saga_type, live):
        entry = report[row["saga_version"]]
        entry.last_timer_due, entry.unbounded = row["last_due"], row["unbounded"]
    for version, definition in compiled.items():
        report[version].guards = {
            node.change: {"old": 0, "new": 0} for node in walk(definition.root)
            if isinstance(node, CompiledGroup) and node.kind is GroupKind.PATCHED}
    for row in await conn.fetch(_PATCHES, saga_type, live):
        counts_of = report[row["saga_version"]].guards.setdefault(
            row["change"], {"old": 0, "new": 0})
        counts_of[row["choice"]] = counts_of.get(row["choice"], 0) + row["n"]
    for entry in report.values():
        for counts_of in entry.guards.values():
            counts_of["undecided"] = entry.live - counts_of["old"] - counts_of["new"]
    return [report[v] for v in versions]
