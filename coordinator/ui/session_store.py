"""UI sessions on the server (table ``ui_sessions``), so every API replica agrees when one ends.

The cookie carries only a random id; the table keeps its SHA-256, who signed in, which
configured credential they used, when they were last seen and when the session expires. A
session is valid while its row exists, has not expired, was seen within the idle timeout, and
its credential is still configured (checked by the caller on every request).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from coordinator.api.auth import Principal, Role

__all__ = ["SessionRecord", "SessionStore"]


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()


@dataclass(frozen=True, slots=True)
class SessionRecord:
    principal: Principal
    credential: str


class SessionStore:
    """Creates, reads (touching ``last_seen_at``) and deletes session rows."""

    def __init__(self, *, idle_timeout: timedelta, max_age: timedelta) -> None:
        self.idle_timeout = idle_timeout
        self.max_age = max_age

    async def create(self, pool: asyncpg.Pool, principal: Principal, credential: str, *,
                     now: datetime, expires_at: datetime | None = None) -> str:
        """A new session's id (for the cookie). Ended sessions are purged on the way."""
        session_id = secrets.token_urlsafe(32)
        ends = now + self.max_age if expires_at is None else min(now + self.max_age, expires_at)
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "DELETE FROM ui_sessions WHERE expires_at <= $1 OR last_seen_at <= $2",
                now, now - self.idle_timeout)
            await conn.execute(
                "INSERT INTO ui_sessions (id_digest, user_name, role, groups, credential, "
                "created_at, last_seen_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $6, $7)",
                _digest(session_id), principal.name, principal.role.value,
                sorted(principal.groups), credential, now, ends)
        return session_id

    async def find(self, pool: asyncpg.Pool, session_id: str, *,
                   now: datetime) -> SessionRecord | None:
        """The live session ``session_id``, marked as seen now; None (and the row deleted)
        once it has expired or been idle too long."""
        async with pool.acquire() as conn:
            row = await conn.fetchrow(
                "UPDATE ui_sessions SET last_seen_at = $2 WHERE id_digest = $1 "
                "AND expires_at > $2 AND last_seen_at > $3 "
                "RETURNING user_name, role, groups, credential",
                _digest(session_id), now, now - self.idle_timeout)
            if row is None:
                await conn.execute("DELETE FROM ui_sessions WHERE id_digest = $1",
                                   _digest(session_id))
                return None
        principal = Principal(row["user_name"], Role(row["role"]), frozenset(row["groups"]))
        return SessionRecord(principal, row["credential"])

    async def delete(self, pool: asyncpg.Pool, session_id: str) -> None:
        await pool.execute("DELETE FROM ui_sessions WHERE id_digest = $1", _digest(session_id))
