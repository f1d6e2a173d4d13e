"""The Postgres saga store: every state change is one transaction.

A change locks the saga row (``SELECT ... FOR NO KEY UPDATE``), calls the pure core with a
``now`` read once here, appends the history row, rewrites the spine and the nodes that changed
(``nodes``), and writes the commands to the outbox and the timers, then commits. Nothing here
talks to Kafka. The states this process committed are cached (``nodes.StateCache``): a reply
to a large tree neither reads nor decodes the whole tree again.

:class:`SagaStore` is composed of one mixin per concern, each in its own module beside this
one, on the shared state of ``_base.StoreBase``; the names below stay importable from here.
"""

from __future__ import annotations

from coordinator.store._apply import _READ_SAGAS as _READ_SAGAS
from coordinator.store._base import STATE_CACHE_NODES as STATE_CACHE_NODES
from coordinator.store._base import ChangeListener as ChangeListener
from coordinator.store._base import Clock as Clock
from coordinator.store._base import Publish as Publish
from coordinator.store._base import RegistryLike
from coordinator.store._base import TimerListener as TimerListener
from coordinator.store._base import utcnow as utcnow
from coordinator.store._lifecycle import LifecycleMixin
from coordinator.store._reads import ReadsMixin
from coordinator.store._signalling import SignalsMixin
from coordinator.store._tasks import TasksMixin
from coordinator.store._timers import TimersMixin
from coordinator.store._timers import _Timer as _Timer
from coordinator.store._transactions import CONNECTION_ERRORS as CONNECTION_ERRORS
from coordinator.store._updating import UpdatesMixin

__all__ = ["RegistryLike", "SagaStore"]


class SagaStore(LifecycleMixin, SignalsMixin, UpdatesMixin, TimersMixin, TasksMixin,
                ReadsMixin):
    """Saga state in Postgres. Build it on a pool, or let :meth:`open` own one.

    Its parts: ``_lifecycle`` (pool, listeners), ``_transactions`` (retry, write, after
    commit), ``_starts``, ``_signalling``, ``_updating``, ``_apply``, ``_timers``, ``_tasks``
    and ``_reads``."""
