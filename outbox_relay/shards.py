"""Shard ownership: session-level advisory locks on the relay's own connection.

Each relay holds one *member* lock while it lives, so ``pg_locks`` tells every relay how many are
alive, with no heartbeat table to go stale: Postgres drops a dead session's locks as soon as its
socket closes. Each relay aims at ``ceil(shards / live relays)`` shards, takes free ones up to
that and releases extras (only between batches) so a newcomer gets its share.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Awaitable, Callable

import asyncpg

from outbox_relay.schema import MEMBER_LOCK_NAMESPACE, SHARD_LOCK_NAMESPACE

log = logging.getLogger(__name__)

_LIVE_RELAYS = """
SELECT count(DISTINCT objid) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND classid = $1::oid AND objsubid = 2
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""

_HELD_SHARDS = """
SELECT objid::int FROM pg_locks
WHERE locktype = 'advisory' AND granted AND classid = $1::oid AND objsubid = 2
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


class ShardOwnership:
    """The shards one relay owns, with the fencing epoch of each acquisition."""

    def __init__(self, conn: asyncpg.Connection, shard_count: int, relay_id: str) -> None:
        self._conn = conn
        self.shard_count = shard_count
        self.relay_id = relay_id
        #: shard -> epoch at which this relay acquired it.
        self.owned: dict[int, int] = {}
        self.live_relays = 1

    async def join(self) -> None:
        """Take a membership lock so other relays count this one."""
        while True:
            member = random.randrange(1, 2**31 - 1)
            if await self._conn.fetchval(
                "SELECT pg_try_advisory_lock($1, $2)", MEMBER_LOCK_NAMESPACE, member
            ):
                return

    async def rebalance(
        self, *, before_release: Callable[[], Awaitable[None]] | None = None
    ) -> tuple[list[int], list[int]]:
        """Move towards the fair share; returns (acquired, released) shards.

        ``before_release`` runs first when shards are about to be given up, so the caller can
        finish what it has in flight for them.
        """
        live = int(await self._conn.fetchval(_LIVE_RELAYS, MEMBER_LOCK_NAMESPACE)) or 1
        self.live_relays = live
        target = math.ceil(self.shard_count / live)
        acquired: list[int] = []
        released: list[int] = []
        if len(self.owned) > target:
            extras = random.sample(sorted(self.owned), len(self.owned) - target)
            if before_release is not None:
                await before_release()
            for shard in extras:
                await self.release(shard)
                released.append(shard)
        elif len(self.owned) < target:
            held = {r[0] for r in await self._conn.fetch(_HELD_SHARDS, SHARD_LOCK_NAMESPACE)}
            free = [s for s in range(self.shard_count) if s not in held]
            random.shuffle(free)
            for shard in free:
                if len(self.owned) >= target:
                    break
                if await self._conn.fetchval(
                    "SELECT pg_try_advisory_lock($1, $2)", SHARD_LOCK_NAMESPACE, shard
                ):
                    epoch = await self._conn.fetchval(
                        "UPDATE sagaflow_outbox_shard SET epoch = epoch + 1, owner = $2, "
                        "acquired_at = clock_timestamp() WHERE shard = $1 RETURNING epoch",
                        shard,
                        self.relay_id,
                    )
                    self.owned[shard] = int(epoch or 0)
                    acquired.append(shard)
        if acquired or released:
            log.info(
                "relay %s: %d live relays, owns %d shards (+%s -%s)",
                self.relay_id,
                live,
                len(self.owned),
                acquired,
                released,
            )
        return acquired, released

    async def release(self, shard: int) -> None:
        self.owned.pop(shard, None)
        await self._conn.execute(
            "UPDATE sagaflow_outbox_shard SET owner = NULL WHERE shard = $1 AND owner = $2",
            shard,
            self.relay_id,
        )
        await self._conn.fetchval("SELECT pg_advisory_unlock($1, $2)", SHARD_LOCK_NAMESPACE, shard)

    async def release_all(self) -> None:
        if self.owned:
            await self._conn.execute(
                "UPDATE sagaflow_outbox_shard SET owner = NULL WHERE owner = $1", self.relay_id
            )
        self.owned.clear()
        await self._conn.execute("SELECT pg_advisory_unlock_all()")
