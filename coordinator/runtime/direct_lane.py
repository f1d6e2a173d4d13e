"""The coordinator's end of the direct lane: commands to participants around Kafka, replies
applied as they come back (see :mod:`participant_sdk.direct` for the guarantees).

:class:`DirectLane` is the :class:`~outbox_relay.direct.Lane` a process's
:class:`~outbox_relay.direct.DirectPublisher` hands committed command rows to. A reply that
comes back is applied like a Kafka reply (:func:`handle_reply_batch`: decoded, dead-lettered
if malformed, ignored if a duplicate); replies arriving while a batch commits share the next
batch's transaction. Only once the reply is committed does the publisher delete the command's
outbox row; if anything fails before that, the row goes to Kafka and the participant's barrier
answers the command again without running it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter

from coordinator.runtime.functions.handlers import handle_reply_batch
from participant_sdk.direct import DirectClient, Kind
from participant_sdk.protocol import command_topic
from participant_sdk.records import InboundRecord

if TYPE_CHECKING:
    from coordinator.store import SagaStore

__all__ = ["DIRECT_SOURCE", "DirectLane"]

log = logging.getLogger(__name__)

#: ``source`` of the dead letters written for replies that came on the lane.
DIRECT_SOURCE = "coordinator:direct"


class DirectLane:
    """Routes the command topics of ``endpoints`` (participant name -> ``host:port``)."""

    def __init__(self, store: SagaStore, endpoints: Mapping[str, str], *, prefix: str,
                 token: str = "", timeout: float = 10.0,
                 registry: CollectorRegistry | None = None) -> None:
        self._store = store
        self._clients = {
            command_topic(name, prefix): DirectClient(address, token=token, timeout=timeout)
            for name, address in endpoints.items()
        }
        self._names = {command_topic(name, prefix): name for name in endpoints}
        self._commands = None if registry is None else Counter(
            "sagaflow_direct_lane_commands", "Commands handed to a participant's direct lane, "
            "by outcome: answered (reply applied), dead_letter (the participant kept it), "
            "kafka (the lane could not finish it: it went over Kafka)",
            ["participant", "outcome"], registry=registry)
        self._waiting: list[tuple[InboundRecord, asyncio.Future[bool]]] = []
        self._wake = asyncio.Event()
        self._applier: asyncio.Task[None] | None = None
        #: Replies applied, and batches of them (a batch is one transaction).
        self.applied = 0
        self.batches = 0

    def start(self) -> None:
        self._applier = asyncio.create_task(self._apply_loop(), name="direct-lane-replies")

    async def stop(self) -> None:
        if self._applier is not None:
            self._applier.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._applier
        for _, future in self._waiting:
            if not future.done():
                future.set_result(False)
        await asyncio.gather(*(c.close() for c in self._clients.values()))

    def routes(self, topic: str) -> bool:
        return topic in self._clients

    async def deliver(self, topic: str, key: bytes, value: bytes,
                      headers: list[tuple[str, bytes]]) -> bool:
        outcome = await self._deliver(topic, key, value, headers)
        if self._commands is not None:
            self._commands.labels(self._names[topic], outcome).inc()
        return outcome != "kafka"

    async def _deliver(self, topic: str, key: bytes, value: bytes,
                       headers: list[tuple[str, bytes]]) -> str:
        answer = await self._clients[topic].call(topic, key, value, headers)
        if answer is None or answer.kind is Kind.REDELIVER:
            return "kafka"
        if answer.kind is Kind.NO_REPLY:  # a dead letter on the participant, as over Kafka
            return "dead_letter"
        assert answer.reply is not None
        if self._applier is None or self._applier.done():
            return "kafka"
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((answer.reply, future))
        self._wake.set()
        return "answered" if await future else "kafka"

    async def _apply_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._waiting = self._waiting, []
            if not batch:
                continue
            try:
                await handle_reply_batch(self._store, [record for record, _ in batch],
                                         source=DIRECT_SOURCE)
                applied = True
                self.applied += len(batch)
                self.batches += 1
            except asyncio.CancelledError:  # stopped mid-batch: those commands go over Kafka
                for _, future in batch:
                    if not future.done():
                        future.set_result(False)
                raise
            except Exception as exc:  # nothing committed: the commands go over Kafka
                log.warning("direct lane: applying %d replies failed (%r); their commands go "
                            "over Kafka", len(batch), exc)
                applied = False
            for _, future in batch:
                if not future.done():
                    future.set_result(applied)
