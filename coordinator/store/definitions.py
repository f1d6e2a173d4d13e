"""Saga definitions uploaded over the API, kept in ``saga_definitions`` (migration 0014).

A row is written once: the same definition uploaded again is the same row (its digest
matches), another definition under a name and version already taken is refused, so a
running saga's version never changes under it. :func:`register_stored` brings a registry up
to date with the table; the worker calls it on a short interval, the API before a start of
a type it does not know, so new versions are picked up without a restart.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from coordinator.definitions import Definition, InvalidDefinition, load_definition
from coordinator.definitions.exporting import plain_definition
from coordinator.language.steps import DefinitionError
from coordinator.store.errors import StoreError

__all__ = [
    "DefinitionTaken",
    "StoredDefinition",
    "get_definition",
    "list_definitions",
    "register_stored",
    "register_uploaded",
    "save_definition",
]

log = logging.getLogger(__name__)


class DefinitionTaken(StoreError):
    """Another definition is already stored under this name and version (HTTP 409)."""


@dataclass(frozen=True, slots=True)
class StoredDefinition:
    name: str
    version: int
    definition: dict[str, Any]
    digest: str
    uploaded_by: str
    uploaded_at: datetime


def _digest(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _row(row: asyncpg.Record) -> StoredDefinition:
    definition = row["definition"]
    return StoredDefinition(
        name=row["name"], version=row["version"],
        definition=json.loads(definition) if isinstance(definition, str) else definition,
        digest=row["digest"], uploaded_by=row["uploaded_by"], uploaded_at=row["uploaded_at"])


async def save_definition(conn: asyncpg.Connection, definition: Definition, *, by: str,
                          now: datetime) -> tuple[StoredDefinition, bool]:
    """Store ``definition``; ``(row, created)``. :class:`DefinitionTaken` when the name and
    version hold another definition."""
    data = plain_definition(definition)
    digest = _digest(data)
    row = await conn.fetchrow(
        "INSERT INTO saga_definitions (name, version, definition, digest, uploaded_by, "
        "uploaded_at) VALUES ($1, $2, $3::jsonb, $4, $5, $6) ON CONFLICT (name, version) "
        "DO NOTHING RETURNING name, version, definition, digest, uploaded_by, uploaded_at",
        definition.name, definition.version, json.dumps(data), digest, by, now)
    if row is not None:
        return _row(row), True
    stored = await get_definition(conn, definition.name, definition.version)
    if stored is None or stored.digest != digest:
        raise DefinitionTaken(
            f"saga {definition.name!r} version {definition.version} is already stored with "
            "another definition: upload it as a new version")
    return stored, False


async def get_definition(conn: asyncpg.Connection, name: str,
                         version: int) -> StoredDefinition | None:
    row = await conn.fetchrow(
        "SELECT name, version, definition, digest, uploaded_by, uploaded_at "
        "FROM saga_definitions WHERE name = $1 AND version = $2",
        name, version)
    return None if row is None else _row(row)


async def list_definitions(conn: asyncpg.Connection,
                           name: str | None = None) -> list[StoredDefinition]:
    rows = await conn.fetch(
        "SELECT name, version, definition, digest, uploaded_by, uploaded_at "
        "FROM saga_definitions WHERE $1::text IS NULL OR name = $1 ORDER BY name, version",
        name)
    return [_row(r) for r in rows]


async def register_uploaded(pool: asyncpg.Pool, registry: Any) -> list[tuple[str, int]]:
    """:func:`register_stored` on a connection of ``pool``; a database not migrated to 0014
    yet has nothing uploaded."""
    async with pool.acquire() as conn:
        try:
            return await register_stored(conn, registry)
        except asyncpg.UndefinedTableError:
            return []


async def register_stored(conn: asyncpg.Connection, registry: Any) -> list[tuple[str, int]]:
    """Register every stored definition ``registry`` lacks; the ``(name, version)`` added.

    A row that no longer loads (a build that reads the format differently) or clashes with
    a class of the same name and version is logged and left out, never raised: it must not
    stop a worker."""
    added = []
    keys = await conn.fetch("SELECT name, version FROM saga_definitions")
    for name, version in ((r["name"], r["version"]) for r in keys):
        key = (name, version)
        stored = None if key in registry else await get_definition(conn, name, version)
        if stored is None:
            continue
        try:
            registry.register(load_definition(Definition.model_validate(stored.definition),
                                              f"{stored.name} v{stored.version}"))
        except (InvalidDefinition, DefinitionError, ValueError) as exc:
            log.error("stored saga definition %s v%s not registered: %s", stored.name,
                      stored.version, exc)
            continue
        added.append(key)
        log.info("registered saga definition %s v%s (uploaded by %s)", stored.name,
                 stored.version, stored.uploaded_by)
    return added
