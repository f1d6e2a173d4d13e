"""Wake the outbox relays after commits that wrote commands (see ``outbox_relay.waker``).

Without it a relay that has gone idle finds a new command at its next poll, up to
``SAGAFLOW_RELAY_POLL_INTERVAL`` (5 s) later, on every hop of a saga.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from outbox_relay import RelayWaker

if TYPE_CHECKING:
    from coordinator.config.settings import CoordinatorSettings
    from coordinator.store import SagaStore
    from coordinator.store._writes import Change

__all__ = ["start_relay_waker"]


async def start_relay_waker(
    store: SagaStore, settings: CoordinatorSettings
) -> RelayWaker | None:
    """A running waker hinted by the store's commits that wrote commands, or None when
    ``settings.wake_relays`` is off. The caller stops it."""
    if not settings.wake_relays:
        return None
    waker = RelayWaker(store.pool, min_interval=settings.relay_wake_interval)

    def on_commit(changes: Sequence[Change]) -> None:
        if any(change.decision.commands for change in changes):
            waker.wake()

    store.add_change_listener(on_commit)
    await waker.start()
    return waker
