"""Bulk repair and bulk verify: a verb applied to every saga a filter matched, as a durable job.

The job and its items live in Postgres (migration 0002); a verify job is a job whose verb is
``verify`` (:mod:`.verification`): it changes no saga, it records per saga whether replaying
the history rebuilds the stored snapshot. :class:`RepairJobRunner` claims an
unfinished job (``FOR UPDATE SKIP LOCKED``, then a renewed lease), applies the verb to each
pending item through :func:`~coordinator.api.repairs.apply_repair` and records the outcome.
A runner that dies leaves its lease to expire; any replica then resumes the job. An item
whose repair committed but whose outcome was not yet recorded is recognised by the job's
marker in the saga's history, so no saga is repaired twice by one job.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable, Collection
from datetime import datetime, timedelta
from typing import Any, Final, Self
from uuid import UUID

import asyncpg

from coordinator.api.migrations import MIGRATE_VERB, apply_migration
from coordinator.api.models import BulkRepairRequest, RepairItemOut, RepairJobOut, SagaFilter
from coordinator.api.queries import matching_ids
from coordinator.api.repairs import RepairOptions, apply_repair
from coordinator.api.verification import VERIFY_VERB, ItemResult, verify_one
from coordinator.engine import InvalidTransition, RepairVerb
from coordinator.store import SagaNotFound, SagaStore, StoreError, TransientStoreError

__all__ = ["JobTooLarge", "RepairJobRunner", "create_job", "get_job", "insert_job", "job_marker",
           "read_job"]

log = logging.getLogger(__name__)

_BATCH: Final = 50


class JobTooLarge(ValueError):
    """The filter matches more sagas than the request allows."""


def job_marker(job_id: UUID) -> str:
    """Appended to the reason of every repair a job makes (and used to find them)."""
    return f" [bulk repair {job_id}]"


async def create_job(
    conn: asyncpg.Connection, request: BulkRepairRequest, *, actor: str, now: datetime,
    stuck_ids: Collection[UUID],
) -> UUID:
    """Insert the repair job and one item per matching saga, in one transaction."""
    options = {"step": request.step, "payload": request.payload,
               "result": request.result, "status": request.status}
    return await insert_job(conn, verb=request.verb.value, reason=request.reason, actor=actor,
                            saga_filter=request.filter, options=options,
                            max_sagas=request.max_sagas, now=now, stuck_ids=stuck_ids)


async def insert_job(
    conn: asyncpg.Connection, *, verb: str, reason: str, actor: str, saga_filter: SagaFilter,
    options: dict[str, Any], max_sagas: int, now: datetime, stuck_ids: Collection[UUID],
) -> UUID:
    """Insert a job of any verb and one item per matching saga, in one transaction."""
    job_id = uuid.uuid4()
    async with conn.transaction():
        ids = await matching_ids(conn, saga_filter, now=now, stuck_ids=stuck_ids,
                                 limit=max_sagas + 1)
        if len(ids) > max_sagas:
            raise JobTooLarge(f"the filter matches more than {max_sagas} sagas; "
                              "narrow it or raise max_sagas")
        await conn.execute(
            "INSERT INTO repair_jobs (id, verb, reason, actor, filter, options, status, total)"
            " VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7, $8)",
            job_id, verb, reason, actor,
            json.dumps(saga_filter.model_dump(mode="json", exclude_none=True)),
            json.dumps(options), "done" if not ids else "pending", len(ids),
        )
        if ids:
            await conn.execute(
                "INSERT INTO repair_job_items (job_id, position, saga_id) "
                "SELECT $1, p, s FROM unnest($2::uuid[]) WITH ORDINALITY AS u(s, p)",
                job_id, ids,
            )
        else:
            await conn.execute("UPDATE repair_jobs SET finished_at = clock_timestamp() "
                               "WHERE id = $1", job_id)
    return job_id


async def read_job(
    conn: asyncpg.Connection, job_id: UUID, *, item_limit: int = 1000, after_position: int = 0
) -> tuple[asyncpg.Record, dict[str, int], list[RepairItemOut]] | None:
    """A job's row, its item counts per outcome and a page of its items (any verb)."""
    job = await conn.fetchrow("SELECT * FROM repair_jobs WHERE id = $1", job_id)
    if job is None:
        return None
    counts = {r["outcome"]: r["n"] for r in await conn.fetch(
        "SELECT outcome, count(*) AS n FROM repair_job_items WHERE job_id = $1 "
        "GROUP BY outcome", job_id)}
    items = await conn.fetch(
        "SELECT saga_id, outcome, status, message, finished_at FROM repair_job_items "
        "WHERE job_id = $1 AND position > $2 ORDER BY position LIMIT $3",
        job_id, after_position, item_limit,
    )
    return job, counts, [RepairItemOut(saga_id=r["saga_id"], outcome=r["outcome"],
                                       status=r["status"], message=r["message"],
                                       finished_at=r["finished_at"]) for r in items]


async def get_job(
    conn: asyncpg.Connection, job_id: UUID, *, item_limit: int = 1000, after_position: int = 0
) -> RepairJobOut | None:
    """A repair job (None for a verify or migrate job: those have their own routes)."""
    found = await read_job(conn, job_id, item_limit=item_limit, after_position=after_position)
    if found is None or found[0]["verb"] in (VERIFY_VERB, MIGRATE_VERB):
        return None
    job, counts, items = found
    return RepairJobOut(
        job_id=job["id"], verb=RepairVerb(job["verb"]), reason=job["reason"],
        actor=job["actor"], filter=json.loads(job["filter"]), status=job["status"],
        total=job["total"], counts=counts, created_at=job["created_at"],
        started_at=job["started_at"], finished_at=job["finished_at"], items=items,
    )


_CLAIM: Final = """
UPDATE repair_jobs SET status = 'running', owner = $1,
       lease_until = clock_timestamp() + $2::interval,
       started_at = coalesce(started_at, clock_timestamp())
WHERE id = (
    SELECT id FROM repair_jobs
    WHERE status <> 'done' AND (lease_until IS NULL OR lease_until < clock_timestamp())
    ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED
)
RETURNING id, verb, reason, actor, options
"""

_RENEW: Final = """
UPDATE repair_jobs SET lease_until = clock_timestamp() + $3::interval
WHERE id = $1 AND owner = $2 RETURNING id
"""

#: Called after each item (tests use it to stop a runner mid-job).
ItemHook = Callable[[UUID, UUID], Awaitable[None]]


class RepairJobRunner:
    """Runs bulk-repair and verify jobs; start any number of them (one per API replica)."""

    def __init__(
        self,
        store: SagaStore,
        *,
        lease: timedelta = timedelta(seconds=30),
        poll: timedelta = timedelta(seconds=2),
        name: str | None = None,
        after_item: ItemHook | None = None,
    ) -> None:
        self.store = store
        self.lease = lease
        self.poll = poll
        self.name = name or f"{socket.gethostname()}:{uuid.uuid4().hex[:8]}"
        self._after_item = after_item
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._current: UUID | None = None
        self._started = False

    async def start(self) -> None:
        if self._started:
            raise RuntimeError("RepairJobRunner already started")
        self._started = True
        self._task = asyncio.create_task(self._loop(), name=f"repair-jobs:{self.name}")

    async def stop(self) -> None:
        """Stop now; the job in hand is handed back (its lease released). Idempotent."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def wake(self) -> None:
        """Look for work now (a job was just created)."""
        self._wake.set()

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                worked = await self.run_once()
            except (TransientStoreError, OSError, asyncpg.PostgresError) as exc:
                log.warning("%s: repair job round failed: %s", self.name, exc)
                worked = False
            if worked:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll.total_seconds())
            self._wake.clear()

    async def run_once(self) -> bool:
        """Claim one job and work it to its end; False when there was nothing to claim."""
        async with self.store.pool.acquire() as conn:
            job = await conn.fetchrow(_CLAIM, self.name, self.lease)
        if job is None:
            return False
        self._current = job["id"]
        log.info("%s: running job %s (%s)", self.name, job["id"], job["verb"])
        try:
            await self._work(job)
        except asyncio.CancelledError:
            # Stopped mid-job: hand the job back so another runner resumes it at once.
            with contextlib.suppress(Exception):
                async with self.store.pool.acquire() as conn:
                    await conn.execute("UPDATE repair_jobs SET owner = NULL, lease_until = NULL"
                                       " WHERE id = $1 AND owner = $2", job["id"], self.name)
            raise
        finally:
            self._current = None
        return True

    def _action(self, job: asyncpg.Record) -> Callable[[UUID], Awaitable[ItemResult]]:
        """What the job does to each of its sagas."""
        if job["verb"] == VERIFY_VERB:
            return lambda saga_id: verify_one(self.store, saga_id)
        opts: dict[str, Any] = json.loads(job["options"])
        if job["verb"] == MIGRATE_VERB:
            marked = job["reason"] + job_marker(job["id"])
            return lambda saga_id: self._migrate(saga_id, opts["to_version"], job["actor"],
                                                 marked)
        verb = RepairVerb(job["verb"])
        options = RepairOptions(step=opts.get("step"), payload=opts.get("payload"),
                                result=opts.get("result"), status=opts.get("status"))
        reason = job["reason"] + job_marker(job["id"])
        return lambda saga_id: self._repair(saga_id, verb, job["actor"], reason, options)

    async def _work(self, job: asyncpg.Record) -> None:
        job_id: UUID = job["id"]
        action = self._action(job)
        while True:
            async with self.store.pool.acquire() as conn:
                if await conn.fetchval(_RENEW, job_id, self.name, self.lease) is None:
                    log.warning("%s: lost the lease of job %s", self.name, job_id)
                    return
                items = await conn.fetch(
                    "SELECT position, saga_id FROM repair_job_items WHERE job_id = $1 "
                    "AND outcome = 'pending' ORDER BY position LIMIT $2", job_id, _BATCH)
            if not items:
                break
            for item in items:
                if self._stopping.is_set():
                    return
                outcome, status, message = await action(item["saga_id"])
                async with self.store.pool.acquire() as conn:
                    await conn.execute(
                        "UPDATE repair_job_items SET outcome = $3, status = $4, message = $5, "
                        "finished_at = clock_timestamp() WHERE job_id = $1 AND position = $2",
                        job_id, item["position"], outcome, status, message)
                if self._after_item is not None:
                    await self._after_item(job_id, item["saga_id"])
        async with self.store.pool.acquire() as conn:
            await conn.execute(
                "UPDATE repair_jobs SET status = 'done', finished_at = clock_timestamp(), "
                "owner = NULL, lease_until = NULL WHERE id = $1 AND owner = $2",
                job_id, self.name)
        log.info("%s: %s job %s done", self.name, job["verb"], job_id)

    async def _repair(self, saga_id: UUID, verb: RepairVerb, actor: str, reason: str,
                      options: RepairOptions) -> ItemResult:
        status: str | None = None
        if await self._already_applied(saga_id, reason):
            outcome, message = "applied", "applied before the job was resumed"
            record = await self.store.get_saga(saga_id)
            status = None if record is None else record.status
        else:
            try:
                result = await apply_repair(self.store, saga_id, verb, principal=actor,
                                            reason=reason, options=options)
                outcome, status, message = "applied", result.status, None
            except InvalidTransition as exc:
                outcome, message = "refused", str(exc)
            except SagaNotFound as exc:
                outcome, message = "not_found", str(exc)
            except TransientStoreError:
                raise
            except (StoreError, ValueError, LookupError) as exc:
                outcome, message = "failed", f"{type(exc).__name__}: {exc}"
        return outcome, status, message

    async def _migrate(self, saga_id: UUID, to_version: int, actor: str, reason: str
                       ) -> ItemResult:
        if await self._already_applied(saga_id, reason, event_type="migrated"):
            record = await self.store.get_saga(saga_id)
            return ("applied", None if record is None else record.status,
                    "applied before the job was resumed")
        try:
            return await apply_migration(self.store, saga_id, to_version, principal=actor,
                                         reason=reason)
        except TransientStoreError:
            raise
        except (StoreError, ValueError, LookupError) as exc:
            return "failed", None, f"{type(exc).__name__}: {exc}"

    async def _already_applied(self, saga_id: UUID, reason: str,
                               event_type: str = "operator_repair") -> bool:
        async with self.store.pool.acquire() as conn:
            found = await conn.fetchval(
                "SELECT true FROM saga_history WHERE saga_id = $1 "
                "AND event->>'type' = $3 AND event->>'reason' = $2 LIMIT 1",
                saga_id, reason, event_type)
        return bool(found)
