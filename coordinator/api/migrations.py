"""The dry run of a migration: every live saga of one type and version, planned in memory.

Nothing is written: each saga's snapshot goes through ``engine.migrate.plan_migration``, the
same plan the ``Migrated`` event applies, so the verdict is what the migration would do.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coordinator.engine.migrate import plan_migration
from coordinator.store import SagaStore

__all__ = ["DryRunOut", "DryRunRequest", "NoMigration", "dry_run"]

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


async def dry_run(store: SagaStore, body: DryRunRequest) -> DryRunOut:
    """Raises the store's ``UnknownSagaType`` / ``UnknownSagaVersion`` or :class:`NoMigration`."""
    store.definition(body.saga_type, body.from_version)
    target = store.definition(body.saga_type, body.to_version)
    migration = target.migrations.get(body.from_version)
    if migration is None:
        raise NoMigration(f"{body.saga_type} v{body.to_version} declares no migration from "
                          f"v{body.from_version}")
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
