"""Migrations of running sagas: the dry run, and the move of one saga (the job's step).

The dry run writes nothing: each saga's snapshot goes through
``engine.migrate.plan_migration``, the same plan the ``Migrated`` event applies, so the
verdict is what the migration would do. The migration itself is a job of the bulk-repair
runner (verb ``migrate``) that calls :func:`apply_migration` for each saga.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from coordinator.api.repairs import operator_actor
from coordinator.engine import InvalidTransition
from coordinator.engine.compiled import CompiledMigration
from coordinator.engine.events import Migrated
from coordinator.engine.migrate import plan_migration
from coordinator.store import SagaNotFound, SagaStore

__all__ = ["MIGRATE_VERB", "DryRunOut", "DryRunRequest", "MigrationJobOut", "MigrationRequest",
           "NoMigration", "apply_migration", "declared", "dry_run"]

audit = logging.getLogger("coordinator.api.audit")

#: Sagas that no event moves any more: there is nothing to migrate.
_LIVE = "status NOT IN ('completed', 'compensated', 'cancelled')"


class NoMigration(Exception):
    """The target version declares no migration from the source version."""


class DryRunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    saga_type: str = Field(min_length=1, max_length=100)
    from_version: int = Field(ge=1)
    to_version: int = Field(ge=1)
    #: At most this many sagas, oldest first.
    limit: int = Field(default=1000, ge=1, le=10_000)


class MigrationRequest(DryRunRequest):
    """Move every live saga of ``from_version`` that can move, as a durable job."""

    reason: str = Field(min_length=1, max_length=500)
    #: Refuse the job when more sagas than this run on ``from_version``.
    max_sagas: int = Field(default=1000, ge=1, le=10_000)


class MigrationJobOut(BaseModel):
    job_id: UUID
    saga_type: str
    from_version: int
    to_version: int
    reason: str
    actor: str
    #: ``pending``, ``running`` or ``done``.
    status: str
    total: int
    #: Items per outcome: ``applied``, ``refused`` (with the dry run's reason), ...
    counts: dict[str, int]
    items: list[dict[str, Any]]


class DryRunOut(BaseModel):
    saga_type: str
    from_version: int
    to_version: int
    migration: str
    total: int
    can_move: int
    cannot_move: int
    #: One verdict per saga: ``saga_id``, ``can_move``, ``problems``.
    items: list[dict[str, Any]]


def declared(store: SagaStore, body: DryRunRequest) -> CompiledMigration:
    """Raises the store's ``UnknownSagaType`` / ``UnknownSagaVersion`` or :class:`NoMigration`."""
    store.definition(body.saga_type, body.from_version)
    migration = store.definition(body.saga_type, body.to_version).migrations.get(
        body.from_version)
    if migration is None:
        raise NoMigration(f"{body.saga_type} v{body.to_version} declares no migration from "
                          f"v{body.from_version}")
    return migration


async def dry_run(store: SagaStore, body: DryRunRequest) -> DryRunOut:
    """Raises the store's ``UnknownSagaType`` / ``UnknownSagaVersion`` or :class:`NoMigration`."""
    migration = declared(store, body)
    target = store.definition(body.saga_type, body.to_version)
    async with store.pool.acquire() as conn:
        rows = await conn.fetch(
            f"SELECT id FROM sagas WHERE saga_type = $1 AND saga_version = $2 AND {_LIVE} "  # noqa: S608 - constant
            "ORDER BY created_at, id LIMIT $3",
            body.saga_type, body.from_version, body.limit)
    items = []
    for row in rows:
        record = await store.get_saga(row["id"])
        if record is not None:
            items.append(plan_migration(target, record.state).to_json())
    moving = sum(1 for i in items if i["can_move"])
    return DryRunOut(saga_type=body.saga_type, from_version=body.from_version,
                     to_version=body.to_version, migration=migration.name, total=len(items),
                     can_move=moving, cannot_move=len(items) - moving, items=items)


#: The verb of a migration job on the bulk-repair runner.
MIGRATE_VERB = "migrate"


async def apply_migration(store: SagaStore, saga_id: UUID, to_version: int, *, principal: str,
                          reason: str) -> tuple[str, str | None, str | None]:
    """Move one saga to ``to_version`` in one transaction of the store (its clock, its state
    cache and its listeners): the ``Migrated`` history row, the new state and
    ``sagas.saga_version`` together. (outcome, status, message) as the job runner records
    them; refused (nothing written) when the dry run would say it cannot, or when the saga
    moved meanwhile (the core checks the event's versions against the locked row's)."""
    record = await store.get_saga(saga_id)
    if record is None:
        return "not_found", None, f"no saga {saga_id}"
    migration = store.definition(record.saga_type, to_version).migrations.get(record.version)
    event = Migrated(from_version=record.version, to_version=to_version,
                     migration=migration.name if migration else "", actor=principal,
                     reason=reason)
    try:
        result = await store.apply(saga_id, event, actor=operator_actor(principal),
                                   version=to_version)
    except SagaNotFound:
        return "not_found", None, f"no saga {saga_id}"
    except InvalidTransition as exc:
        return "refused", record.status, str(exc)
    audit.info("migrate saga=%s v%d->v%d by=%s reason=%r", saga_id, event.from_version,
               to_version, principal, reason)
    return "applied", result.status, None
