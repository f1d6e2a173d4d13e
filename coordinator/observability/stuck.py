"""Stuck sagas: running or compensating without progress for too long, or retrying too often.

A saga that only waits on purpose (a sleep, a wait for a signal) is not stuck for waiting: it
is stuck when a wait is overdue by more than its threshold (the timer that should have ended
it did not fire), or when it has waited for a signal with no timeout longer than
``StuckPolicy.signal_wait``.

:func:`list_stuck` is the store-level query behind ``GET /sagas?stuck=true`` and the worker's
periodic scan. It reads only in-flight sagas through the partial index ``sagas_in_flight``
(migration 0003), so its cost grows with the sagas in flight, not with the history of all
sagas ever run; the per-step thresholds are applied here, in Python, on the few candidates.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from uuid import UUID

from coordinator.observability.settings import StuckPolicy

__all__ = ["StuckSaga", "list_stuck", "node_name", "stuck_ids"]


def node_name(key: str) -> str:
    """The definition node a step key runs: ``lines[3].reserve`` -> ``reserve`` (thresholds
    and metric labels go by node, so a fan-out does not multiply them)."""
    return key[key.rindex("].") + 2:] if "]." in key else key


# The status list must stay textually implied by the predicate of index sagas_in_flight.
# The activity columns are written with every snapshot (migration 0004): no JSON is read.
# $1 saga type or NULL, $2 progress cut-off, $3 max retries, $4 limit, $5 ids or NULL,
# $6 cut-off of a wait for a signal with no timeout.
_WHERE: Final = """
FROM sagas s
WHERE s.status IN ('scheduled', 'running', 'compensating')
  AND ($1::text IS NULL OR s.saga_type = $1)
  AND CASE WHEN s.waiting THEN (s.wait_due_at IS NOT NULL AND s.wait_due_at < $2)
                               OR (s.wait_due_at IS NULL AND s.last_progress_at < $6)
           ELSE s.last_progress_at < $2 OR ($3 > 0 AND s.busiest_attempt - 1 >= $3) END
  AND ($5::uuid[] IS NULL OR s.id = ANY($5::uuid[]))
  -- a prepared child saga waits for its parent by design; the parent is what may be stuck
  AND s.stage <> 'prepared'
ORDER BY s.last_progress_at, s.id
LIMIT $4
"""
_CANDIDATES: Final = """
SELECT s.id, s.saga_type, s.saga_version, s.status, s.created_at, s.last_progress_at,
       s.busiest_step AS step, s.busiest_phase AS step_phase, s.busiest_attempt AS attempt,
       s.active_steps, s.waiting, s.wait_due_at""" + _WHERE
#: Only the ids: exact on its own when one threshold applies to every type and step.
_IDS: Final = "SELECT s.id" + _WHERE


@dataclass(frozen=True, slots=True)
class StuckSaga:
    """One flagged saga and why."""

    saga_id: UUID
    saga_type: str
    version: int
    status: str
    created_at: datetime
    last_progress_at: datetime
    #: The step whose command is in flight or waiting to retry (None between steps).
    step: str | None
    step_phase: str | None
    #: Attempt number of the step's current phase (0 when no step is active).
    attempt: int
    #: Every active step key (parallel branches, for-each items, confirms).
    active_steps: tuple[str, ...]
    #: How long without progress, at the time of the query.
    idle: timedelta
    threshold: timedelta
    #: ``"no_progress"`` and/or ``"retrying"``, or ``"wait_overdue"`` for a deliberate wait.
    reasons: tuple[str, ...]

    @property
    def retries(self) -> int:
        return max(0, self.attempt - 1)


async def list_stuck(
    conn: Any,
    policy: StuckPolicy | None = None,
    *,
    now: datetime | None = None,
    saga_type: str | None = None,
    limit: int = 100,
    saga_ids: Collection[UUID] | None = None,
) -> list[StuckSaga]:
    """Stuck sagas, longest without progress first (at most ``limit``).

    ``conn`` is an asyncpg connection or pool (``store.pool``). ``now`` defaults to the
    current time (pass the store's clock for deterministic tests). ``saga_ids`` checks only
    those sagas (a page of a list, one saga), which costs little however many are in flight.
    """
    policy = policy or StuckPolicy()
    at = now or datetime.now(UTC)
    out: list[StuckSaga] = []
    # The coarse filter may return rows the exact per-step threshold clears: read more.
    fetch = limit if not policy.thresholds else max(limit * 4, limit + 100)
    rows = await conn.fetch(_CANDIDATES, saga_type, at - policy.shortest(saga_type),
                            policy.max_retries, fetch,
                            None if saga_ids is None else list(saga_ids),
                            at - policy.signal_wait)
    for row in rows:
        step = row["step"]
        active = tuple(row["active_steps"] or ())
        # With several steps in progress the saga waits for the most patient of them.
        threshold = max((policy.threshold(row["saga_type"], node_name(k)) for k in active),
                        default=policy.threshold(row["saga_type"], None))
        idle = at - row["last_progress_at"]
        reasons: list[str] = []
        if row["waiting"]:
            due = row["wait_due_at"]
            if due is None:
                threshold = policy.signal_wait
            else:  # overdue: the timer that ends the wait did not fire
                idle = at - due
        if idle > threshold:
            reasons.append("no_progress" if not row["waiting"] else "wait_overdue")
        attempt = int(row["attempt"] or 0)
        if policy.max_retries > 0 and attempt - 1 >= policy.max_retries:
            reasons.append("retrying")
        if not reasons:
            continue
        out.append(StuckSaga(
            saga_id=row["id"], saga_type=row["saga_type"], version=row["saga_version"],
            status=row["status"], created_at=row["created_at"],
            last_progress_at=row["last_progress_at"], step=step,
            step_phase=row["step_phase"], attempt=attempt, active_steps=active,
            idle=idle, threshold=threshold,
            reasons=tuple(reasons),
        ))
        if len(out) >= limit:
            break
    return out


async def stuck_ids(
    conn: Any,
    policy: StuckPolicy | None = None,
    *,
    now: datetime | None = None,
    limit: int = 100,
    saga_ids: Collection[UUID] | None = None,
) -> frozenset[UUID]:
    """The ids :func:`list_stuck` would return. With one threshold for every type and step
    (the default policy), the SQL filter is already exact, so only the ids are read: the
    UI's stuck list among thousands of stuck sagas stays a few milliseconds."""
    policy = policy or StuckPolicy()
    if policy.thresholds:
        found = await list_stuck(conn, policy, now=now, limit=limit, saga_ids=saga_ids)
        return frozenset(s.saga_id for s in found)
    at = now or datetime.now(UTC)
    rows = await conn.fetch(_IDS, None, at - policy.default, policy.max_retries, limit,
                            None if saga_ids is None else list(saga_ids),
                            at - policy.signal_wait)
    return frozenset(r["id"] for r in rows)

