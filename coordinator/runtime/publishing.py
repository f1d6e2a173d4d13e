"""How a coordinator process (worker or API) gets the commands of its own commits to Kafka.

With ``publish_commands`` (the default) it publishes them itself right after each commit
(:class:`~outbox_relay.direct.DirectPublisher`; the relays send what it did not, after
``publish_lease``), handing the commands of ``direct_endpoints`` participants over on the
direct lane (:mod:`coordinator.runtime.direct_lane`); without, it hints the relays after each
commit that wrote commands (:func:`~coordinator.runtime.hints.relay.start_relay_waker`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry

from coordinator.runtime.direct_lane import DirectLane
from coordinator.runtime.hints.relay import start_relay_waker
from outbox_relay.direct import DirectPublisher, direct_producer_config
from participant_sdk.startup import open_with_retry

if TYPE_CHECKING:
    from coordinator.config.settings import CoordinatorSettings
    from coordinator.store import SagaStore

__all__ = ["CommandPublishing", "start_command_publishing"]

log = logging.getLogger(__name__)

_RETRY_MAX = 30.0


@dataclass(frozen=True, slots=True)
class CommandPublishing:
    """What :func:`start_command_publishing` started: ``stop()`` it when done."""

    #: The process's own publisher (None when only the relays are hinted).
    publisher: DirectPublisher | None
    stop: Callable[[], Awaitable[None]]


async def start_command_publishing(store: SagaStore, settings: CoordinatorSettings, *,
                                   name: str, wait_for_kafka: bool = True,
                                   direct: bool = True,
                                   registry: CollectorRegistry | None = None
                                   ) -> CommandPublishing:
    """Start publishing ``store``'s commands (or hinting the relays).

    ``wait_for_kafka``: start only once the producer is connected (the worker, which needs
    Kafka anyway). Without it (the API, which must serve while Kafka is away) the producer
    connects in the background, and until then the rows are left to the relays. ``direct``
    false: only hint the relays, whatever ``publish_commands`` says. ``registry``: where the
    direct lane's counters go.
    """
    if not (settings.publish_commands and direct):
        waker = await start_relay_waker(store, settings)
        return CommandPublishing(None, waker.stop if waker is not None else _nothing)
    lane = _direct_lane(store, settings, registry)
    publisher = DirectPublisher(
        store.pool, lambda: AIOKafkaProducer(**direct_producer_config(
            settings.kafka_bootstrap, f"sagaflow-{name}-commands",
            **settings.kafka_security.client_kwargs())),
        lease=settings.publish_lease, name=f"{name}-commands", lane=lane)
    # Rows committed before the producer connected are left to the relays (``publish``).
    store.publish_own_rows(publisher.publish, settings.publish_lease)
    connecting: asyncio.Task[None] | None = None
    if wait_for_kafka:
        await open_with_retry(publisher.start, what="Kafka")
    else:
        connecting = asyncio.create_task(_start_when_reachable(publisher, name),
                                         name=f"{name}-commands-start")

    async def stop() -> None:
        if connecting is not None:
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await connecting
        await publisher.stop()  # first: what it handed to the lane is answered or left
        if lane is not None:
            await lane.stop()

    return CommandPublishing(publisher, stop)


def _direct_lane(store: SagaStore, settings: CoordinatorSettings,
                 registry: CollectorRegistry | None) -> DirectLane | None:
    if not settings.direct_endpoints:
        return None
    token = settings.direct_token.get_secret_value() if settings.direct_token else ""
    lane = DirectLane(store, settings.direct_endpoints, prefix=settings.topic_prefix,
                      token=token, timeout=settings.direct_timeout.total_seconds(),
                      registry=registry)
    lane.start()
    return lane


async def _start_when_reachable(publisher: DirectPublisher, name: str) -> None:
    delay = 0.5
    while True:
        try:
            await publisher.start()
            return
        except Exception as exc:  # Kafka away or refusing: the relays send meanwhile
            log.warning("%s: cannot publish commands yet (%r); the relays send them, "
                        "retrying in %.0f s", name, exc, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, _RETRY_MAX)


async def _nothing() -> None:
    return None
