"""Opening and closing a store (and the pool it may own), and what callers hook into it:
listeners told after each commit, and a publisher of the outbox rows it writes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Self

from coordinator.store._base import (
    STATE_CACHE_NODES,
    ChangeListener,
    Clock,
    Publish,
    RegistryLike,
    StoreBase,
    TimerListener,
    utcnow,
)
from participant_sdk.pools import create_pool

__all__ = ["LifecycleMixin"]


class LifecycleMixin(StoreBase):
    """The pool's lifecycle, and the after-commit hooks callers register."""

    @classmethod
    async def open(
        cls,
        dsn: str,
        registry: RegistryLike,
        *,
        min_size: int = 1,
        max_size: int = 10,
        clock: Clock = utcnow,
        state_cache: int = STATE_CACHE_NODES,
        statement_cache_size: int = 100,
        server_settings: Mapping[str, str] | None = None,
    ) -> Self:
        """Open a pool and a store on it. Behind a transaction pooler (PgBouncer) pass
        ``statement_cache_size=0`` and ``server_settings`` without
        ``idle_in_transaction_session_timeout``, a startup parameter PgBouncer refuses (set
        it on the role instead)."""
        pool = await create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            statement_cache_size=statement_cache_size,
            # A forgotten open transaction would pin the xmin horizon and bloat the queues.
            server_settings=dict(server_settings) if server_settings is not None else {
                "application_name": "sagaflow-coordinator",
                "idle_in_transaction_session_timeout": "60000",
            },
        )
        return cls(pool, registry, clock=clock, owns_pool=True, state_cache=state_cache, dsn=dsn)

    async def close(self) -> None:
        """Close the pool if this store opened it (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_pool:
            await self.pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def add_timer_listener(self, listener: TimerListener) -> None:
        """Be told (after commit) when this store inserted a timer, so a sleeper can wake."""
        self._timer_listeners.append(listener)

    def add_change_listener(self, listener: ChangeListener) -> None:
        """Be told (after commit, once per committed transaction) of the changes written."""
        self._change_listeners.append(listener)

    def publish_own_rows(self, publish: Publish, lease: timedelta) -> None:
        """Lease the outbox rows of the commands this store writes to ``publish``, which is
        called right after each commit with them (``outbox_relay.direct``): relays leave
        them alone for ``lease``, and send what was not published and deleted by then."""
        if lease <= timedelta(0):
            raise ValueError("the lease must be positive")
        self._publish, self._lease = publish, lease
