"""Shard leases and the claim: which outbox rows this relay may publish, and in what order.

Order and no-skip: every shard has one owner, rows are deleted only after Kafka acknowledged
them, and each claim reads the lowest ids still present in each owned shard. There is no id
cursor, so a transaction that commits late is simply picked up by the next claim. A row whose
``created_at`` lies ahead is leased to the writer that publishes it itself
(:class:`~outbox_relay.direct.DirectPublisher`); it is claimed once that time has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import asyncpg

from outbox_relay.dead_letters import count_dead_letters
from outbox_relay.publishing import _Inflight, _Publishing, _retrieve
from outbox_relay.schema import NOTIFY_CHANNEL, install, installed_shard_count
from outbox_relay.shards import ShardOwnership

#: The relay's log lines keep the logger name they had when the relay was one module.
log = logging.getLogger("outbox_relay.relay")

_CLAIM: Final = """
SELECT o.id, o.shard, o.topic, o.key, o.payload, o.message_id, o.headers::text AS headers
FROM unnest($1::smallint[]) AS s(shard)
CROSS JOIN LATERAL (
    SELECT * FROM sagaflow_outbox o
    WHERE o.shard = s.shard
      AND o.created_at <= statement_timestamp()
      AND (NOT (SELECT EXISTS (SELECT 1 FROM sagaflow_outbox_dead_letter))
           OR NOT EXISTS (SELECT 1 FROM sagaflow_outbox_dead_letter d WHERE d.key = o.key))
    ORDER BY o.id
    LIMIT $2
) AS o
ORDER BY o.id
LIMIT $3
"""

_LAG: Final = """
SELECT count(*), extract(epoch FROM clock_timestamp() - min(created_at))::float8
FROM sagaflow_outbox WHERE shard = ANY($1::smallint[])
"""


@dataclass(slots=True)
class _Lane:
    """The owned shards with one remainder modulo ``_LANES``.

    Lanes take turns: in lane i's turn the rows lane i-1 claimed in the previous turn go to the
    producer while lane i's batch in flight is settled and deleted and its next batch claimed.
    A lane claims only after its previous batch was settled and deleted, so a claim never sees
    rows in flight; a batch is settled two turns after it was sent, so its acknowledgements
    have normally arrived.
    """

    shards: list[int] = field(default_factory=list)
    claimed: list[asyncpg.Record] = field(default_factory=list)
    inflight: _Inflight | None = None


#: Number of lanes: claim, send and acknowledgement of three batches overlap.
_LANES: Final = 3


def _new_lanes() -> tuple[_Lane, ...]:
    return tuple(_Lane() for _ in range(_LANES))


def _forget(lanes: Sequence[_Lane]) -> None:
    """Drop what lanes claimed or have in flight (the rows stay in the table). Their futures'
    errors are retrieved when they finish, so asyncio does not log them as lost."""
    for lane in lanes:
        if lane.inflight is not None:
            for _, fut in lane.inflight.pending:
                fut.add_done_callback(_retrieve)
        lane.claimed, lane.inflight = [], None


class _Leasing(_Publishing):
    """The relay's connection, its shard leases and its claims (a base of
    :class:`~outbox_relay.loop.Relay`, which sets the attributes declared here)."""

    _shards: ShardOwnership | None
    _lanes: tuple[_Lane, ...]
    _wake: asyncio.Event

    @property
    def owned_shards(self) -> dict[int, int]:
        """Shards owned now, mapped to the ownership epoch."""
        return dict(self._shards.owned) if self._shards is not None else {}

    async def _connect_pg(self) -> None:
        conn = await asyncpg.connect(
            self.settings.postgres_dsn,
            statement_cache_size=self.settings.statement_cache_size,
            server_settings={"application_name": f"sagaflow-relay:{self.name}"},
        )
        try:
            if self.settings.install_schema:
                await install(conn, shard_count=self.settings.shard_count)
            shard_count = await installed_shard_count(conn)
            if shard_count != self.settings.shard_count:
                log.warning(
                    "relay %s: outbox installed with %d shards, settings say %d; using %d",
                    self.name,
                    shard_count,
                    self.settings.shard_count,
                    shard_count,
                )
            shards = ShardOwnership(conn, shard_count, self.name)
            await shards.join()
            if self.settings.listen:
                await conn.add_listener(NOTIFY_CHANNEL, self._on_notify)
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn
        self._shards = shards
        self._set_owned_gauges()

    def _on_notify(self, *_args: Any) -> None:
        self._wake.set()

    async def _close_pg(self, *, release: bool) -> None:
        """Let the connection go: with ``release``, the shards first and a clean close (a
        stop); without, after an error, at once (it may be mid-operation, waiting on a server
        that is gone; Postgres frees the session's shard locks when it sees it go)."""
        conn, self._conn = self._conn, None
        shards, self._shards = self._shards, None
        # Rows claimed or in flight stay in the table; a later owner (re-)sends them.
        _forget(self._lanes)
        self._lanes = _new_lanes()
        if shards is not None:
            for shard in shards.owned:
                self.metrics.shard_owned.labels(str(shard)).set(0)
        self.metrics.owned_shards.set(0)
        if conn is None or conn.is_closed():
            return
        if not release:
            conn.terminate()
            return
        if shards is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(shards.release_all(), 5)
        try:
            await asyncio.wait_for(conn.close(), 5)
        except Exception:
            conn.terminate()

    async def _rebalance(self) -> None:
        assert self._shards is not None
        # Shards are released only once nothing of theirs is claimed or in flight.
        acquired, released = await self._shards.rebalance(before_release=self._drain)
        if acquired or released:
            for lane in self._lanes:
                lane.shards.clear()
            for shard in sorted(self._shards.owned):
                self._lanes[shard % _LANES].shards.append(shard)
        for shard in released:
            self.metrics.shard_owned.labels(str(shard)).set(0)
        self.metrics.live_relays.set(self._shards.live_relays)
        self._set_owned_gauges()
        if acquired:
            self._wake.set()

    def _set_owned_gauges(self) -> None:
        owned = self._shards.owned if self._shards is not None else {}
        self.metrics.owned_shards.set(len(owned))
        for shard in owned:
            self.metrics.shard_owned.labels(str(shard)).set(1)

    async def _refresh_lag(self) -> None:
        assert self._conn is not None and self._shards is not None
        owned = sorted(self._shards.owned)
        count, age = await self._conn.fetchrow(_LAG, owned)
        self.metrics.outbox_backlog.set(count or 0)
        self.metrics.outbox_lag.set(max(age or 0.0, 0.0))
        self.metrics.dead_letters.set(await count_dead_letters(self._conn))

    async def _claim(self, shards: list[int]) -> list[asyncpg.Record]:
        """The next batch of ``shards``' committed rows, in id order."""
        assert self._conn is not None
        batch = self.settings.batch_size
        per_shard = min(batch, max(64, 2 * -(-batch // len(shards))))
        return list(await self._conn.fetch(_CLAIM, shards, per_shard, batch))

    async def _drain(self) -> None:
        """Settle and commit every batch in flight; forget claimed rows (they stay in the table)."""
        for lane in self._lanes:
            lane.claimed = []
            inflight, lane.inflight = lane.inflight, None
            if inflight is not None:
                await self._commit(await self._settle(inflight))

