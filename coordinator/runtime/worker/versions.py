"""The worker's start-up check: every version with live sagas must be registered.

A worker that lacks a version its live sagas are pinned to cannot advance them. Such a
deploy is refused at start-up (one line naming each saga type, version and live count),
unless ``allow_unregistered_versions`` says it is intended, for instance while the old
workers still run. Then the events of those sagas are deferred, never dropped
(``coordinator.store.deferral``), until a worker that registers the version handles them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

import asyncpg

from participant_sdk.startup_errors import StartupError

__all__ = ["LIVE_STATUSES", "LiveVersion", "UnregisteredVersionsLive", "check_live_versions",
           "live_versions"]

log = logging.getLogger(__name__)

#: Statuses in which a saga still receives replies and fires timers on its own.
LIVE_STATUSES: Final = ("scheduled", "running", "compensating")


@dataclass(frozen=True, slots=True)
class LiveVersion:
    saga_type: str
    version: int
    live: int

    def __str__(self) -> str:
        return f"{self.saga_type} v{self.version} ({self.live} live)"


class UnregisteredVersionsLive(StartupError):
    """Sagas are live on versions this worker does not register."""

    def __init__(self, missing: list[LiveVersion]) -> None:
        self.missing = missing
        super().__init__(
            "sagas are live on versions this worker does not register: "
            + ", ".join(map(str, missing))
            + "; register those classes (--saga / SAGAFLOW_SAGAS), or set "
              "SAGAFLOW_ALLOW_UNREGISTERED_VERSIONS=true to start anyway (their events are "
              "then kept for a worker that has them)")


async def live_versions(conn: asyncpg.Connection) -> list[LiveVersion]:
    """Live sagas counted per type and version (reads the ``sagas_in_flight`` index)."""
    rows = await conn.fetch(
        "SELECT saga_type, saga_version, count(*) AS live FROM sagas "
        "WHERE status = ANY($1::text[]) GROUP BY 1, 2 ORDER BY 1, 2",
        list(LIVE_STATUSES))
    return [LiveVersion(r["saga_type"], r["saga_version"], r["live"]) for r in rows]


async def check_live_versions(conn: asyncpg.Connection, registry: Any, *, allow: bool
                              ) -> list[LiveVersion]:
    """The live versions ``registry`` lacks; raises :class:`UnregisteredVersionsLive`
    unless ``allow`` (then it only warns)."""
    missing = [v for v in await live_versions(conn)
               if (v.saga_type, v.version) not in registry]
    if missing and not allow:
        raise UnregisteredVersionsLive(missing)
    if missing:
        log.warning("starting although sagas are live on unregistered versions: %s; their "
                    "replies and timers are deferred until a worker registers them",
                    ", ".join(map(str, missing)))
    return missing
