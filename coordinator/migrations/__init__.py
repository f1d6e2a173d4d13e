"""Versioned schema migrations of the coordinator's Postgres tables.

Each ``NNNN_name.sql`` file in this package is one migration, applied once, in version order,
inside its own transaction. ``schema_migrations`` records what was applied with a checksum, so an
edited migration is refused instead of silently diverging. A session advisory lock serialises
concurrent runners (several workers starting with ``--migrate`` at once).
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib import resources
from typing import Final

import asyncpg

from outbox_relay.schema import install as install_outbox
from participant_sdk.dead_letters import install_dead_letters

__all__ = ["Migration", "MigrationError", "applied_versions", "discover", "migrate"]

log = logging.getLogger(__name__)

#: Session advisory lock key held while migrating ("sagaflow" + 1, as a bigint).
MIGRATION_LOCK_KEY: Final = 0x5A6A_F100_0000_0001

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class MigrationError(Exception):
    """The database's migration record disagrees with the migration files."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def discover() -> list[Migration]:
    """The packaged migrations, in version order."""
    found: list[Migration] = []
    for entry in resources.files(__name__).iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration versions: {versions}")
    return found


async def applied_versions(conn: asyncpg.Connection) -> dict[int, str]:
    """Version -> checksum of every applied migration (empty on a fresh database)."""
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return {}
    rows = await conn.fetch("SELECT version, checksum FROM schema_migrations")
    return {int(r["version"]): str(r["checksum"]) for r in rows}


async def migrate(conn: asyncpg.Connection, *, install_shared: bool = True) -> list[int]:
    """Apply the pending migrations; return the versions applied now.

    ``install_shared`` also installs the tables the coordinator shares with the other packages:
    the outbox (``outbox_relay``) and the dead letters (``participant_sdk.dead_letters``); both
    installers are idempotent.
    """
    applied_now: list[int] = []
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await conn.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version    integer PRIMARY KEY,
                name       text NOT NULL,
                checksum   text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
            )
            """
        )
        applied = await applied_versions(conn)
        for migration in discover():
            recorded = applied.get(migration.version)
            if recorded is not None:
                if recorded != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.version:04d}_{migration.name} was changed after "
                        "it was applied; add a new migration instead"
                    )
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
            log.info("applied migration %04d_%s", migration.version, migration.name)
            applied_now.append(migration.version)
        if install_shared:
            await install_outbox(conn)
            await install_dead_letters(conn)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
    return applied_now
