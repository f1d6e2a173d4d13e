"""The state every part of :class:`~coordinator.store.SagaStore` shares, in one typed base
class, so each concern's mixin sees the pool, registry and caches under mypy strict."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

import asyncpg

from coordinator.engine import CompiledSaga
from coordinator.store._writes import Change, LockedSaga
from coordinator.store.errors import UnknownSagaType, UnknownSagaVersion
from coordinator.store.nodes import StateCache
from outbox_relay.message import LeasedRow

__all__ = [
    "STATE_CACHE_NODES",
    "ChangeListener",
    "Clock",
    "Publish",
    "RegistryLike",
    "StoreBase",
    "TimerListener",
    "utcnow",
]

#: The store's one logger, under the name it logged as before it was split into modules.
log = logging.getLogger("coordinator.store.store")

Clock = Callable[[], datetime]
#: Listener called after a commit that inserted timers, with the earliest due time.
TimerListener = Callable[[datetime], None]
#: Listener called after a commit with the changes it wrote (metrics, in order).
ChangeListener = Callable[[Sequence[Change]], None]
#: Called after a commit with the outbox rows it leased to this store (see
#: :meth:`SagaStore.publish_own_rows`).
Publish = Callable[[Sequence[LeasedRow]], None]

#: Nodes (of all sagas) whose latest states each store keeps in memory by default: about
#: 100-200 MB at most, 10,000 ten-node sagas or 100 thousand-item for-eaches.
STATE_CACHE_NODES: Final = 100_000


def utcnow() -> datetime:
    return datetime.now(UTC)


class RegistryLike(Protocol):
    """What the store needs from ``coordinator.sagas.registry.SagaRegistry``."""

    def get(self, name: str, version: int) -> CompiledSaga: ...

    def latest(self, name: str) -> CompiledSaga: ...


class StoreBase:
    """The shared state, and the definitions every change is decided by."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        registry: RegistryLike,
        *,
        clock: Clock = utcnow,
        owns_pool: bool = False,
        state_cache: int = STATE_CACHE_NODES,
        dsn: str | None = None,
    ) -> None:
        self.pool = pool
        #: Where the pool connects, when known: for connections of their own (LISTEN).
        self.dsn = dsn
        self.registry = registry
        self._clock = clock
        self._states = StateCache(state_cache)
        self._owns_pool = owns_pool
        self._timer_listeners: list[TimerListener] = []
        self._change_listeners: list[ChangeListener] = []
        self._closed = False
        self._publish: Publish | None = None
        self._lease = timedelta(0)

    # -- definitions ------------------------------------------------------------------------

    def definition(self, saga_type: str, version: int | None = None) -> CompiledSaga:
        """The compiled definition, or :class:`UnknownSagaType` / :class:`UnknownSagaVersion`."""
        try:
            if version is None:
                return self.registry.latest(saga_type)
            return self.registry.get(saga_type, version)
        except (KeyError, LookupError, ValueError) as exc:
            known = _known_types(self.registry)  # only for the error: lookups are on every apply
            if known is not None and saga_type not in known:
                raise UnknownSagaType(saga_type, known) from exc
            if version is None:
                raise UnknownSagaType(saga_type, known or ()) from exc
            raise UnknownSagaVersion(
                saga_type, version, _known_versions(self.registry, saga_type)
            ) from exc

    def _definition_of(self, saga: LockedSaga) -> CompiledSaga:
        return self.definition(saga.saga_type, saga.version)


def _known_types(registry: Any) -> list[str] | None:
    names = getattr(registry, "names", None)
    return sorted(str(n) for n in names()) if callable(names) else None


def _known_versions(registry: Any, saga_type: str) -> list[int]:
    types = getattr(registry, "types", None)  # SagaRegistry.types(): compiled definitions
    if callable(types):
        return sorted(d.version for d in types() if d.name == saga_type)
    return []
