"""Participant health: for each participant's command topic, its consumer group's live
members and lag, from Kafka's admin API.

A saga that waits on a participant whose service is down only shows missed deadlines; this
says why ("no live consumer for hotels.commands since 10:42"). One query round every
``ttl`` (5 s) whatever the number of page views: readers share the last answer. Kafka not
answering is a ``problem`` on each entry, never an error page.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, Gauge

__all__ = ["ParticipantHealth", "ParticipantHealthMonitor", "participant_topics"]

log = logging.getLogger(__name__)

#: Longest one round of admin queries may take before its entries say Kafka did not answer.
_ROUND_TIMEOUT: Final = 5.0


@dataclass(frozen=True, slots=True)
class ParticipantHealth:
    """One participant's command topic and the consumer group that should read it."""

    participant: str
    topic: str
    group: str
    #: The group's state (``Stable``, ``Empty``, ``Dead``, ...), ``None`` when unknown.
    state: str | None
    #: Live members of the group (consumers polling now).
    members: int
    #: Commands written and not yet consumed (end offset minus committed, all partitions).
    lag: int | None
    checked_at: datetime
    #: Since when this process has seen no live consumer (``None`` while there is one).
    no_consumer_since: datetime | None = None
    #: Why the figures are missing (Kafka did not answer), else ``None``.
    problem: str | None = None

    @property
    def down(self) -> bool:
        return self.problem is None and self.members == 0


def participant_topics(definitions: Iterable[Any]) -> dict[str, str]:
    """participant -> command topic, over the compiled sagas' steps (child sagas excluded)."""
    out: dict[str, str] = {}
    for definition in definitions:
        for step in definition.steps:
            if getattr(step, "child", None) is None:
                out.setdefault(step.participant, definition.command_topic(step))
    return dict(sorted(out.items()))


class ParticipantHealthMonitor:
    """Asks Kafka at most once per ``ttl``; ``snapshot()`` is what pages and the API read."""

    def __init__(self, bootstrap: str, topics: Callable[[], Mapping[str, str]], *,
                 groups: Mapping[str, str] | None = None, ttl: timedelta = timedelta(seconds=5),
                 client_kwargs: Mapping[str, Any] | None = None,
                 registry: CollectorRegistry | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._bootstrap = bootstrap
        self._topics = topics
        #: participant -> consumer group; default the participant's name (the SDK's default).
        self._groups = dict(groups or {})
        self._ttl = ttl
        self._kwargs = dict(client_kwargs or {})
        self._clock = clock
        self._lock = asyncio.Lock()
        self._last: tuple[datetime, list[ParticipantHealth]] | None = None
        self._down_since: dict[str, datetime] = {}
        self._admin: AIOKafkaAdminClient | None = None
        self._offsets: AIOKafkaConsumer | None = None
        self._members = self._lag = None
        if registry is not None:
            self._members = Gauge("sagaflow_command_topic_consumers",
                                  "Live members of the consumer group of a participant's "
                                  "command topic (0: nothing consumes its commands).",
                                  ["participant", "topic"], registry=registry)
            self._lag = Gauge("sagaflow_command_topic_lag_messages",
                              "Commands on a participant's topic its group has not consumed.",
                              ["participant", "topic"], registry=registry)

    async def snapshot(self) -> list[ParticipantHealth]:
        """The health of every participant, at most ``ttl`` old."""
        async with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last[0] < self._ttl:
                return self._last[1]
            try:
                found = await asyncio.wait_for(self._ask(now), _ROUND_TIMEOUT)
            except (KafkaError, OSError, TimeoutError) as exc:
                why = f"Kafka did not answer ({type(exc).__name__})"
                log.warning("participant health: %s", why)
                await self._close_clients()  # reconnect on the next round
                found = [ParticipantHealth(p, t, self._group(p), None, 0, None, now,
                                           self._down_since.get(t), why)
                         for p, t in self._topics().items()]
            self._last = (now, found)
            self._export(found)
            return found

    async def close(self) -> None:
        await self._close_clients()

    def _group(self, participant: str) -> str:
        return self._groups.get(participant, participant)

    async def _clients(self) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
        if self._admin is None or self._offsets is None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap,
                                        client_id="sagaflow-participant-health", **self._kwargs)
            offsets = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, group_id=None,
                                       client_id="sagaflow-participant-health",
                                       enable_auto_commit=False, **self._kwargs)
            await admin.start()
            self._admin = admin
            await offsets.start()
            self._offsets = offsets
        return self._admin, self._offsets

    async def _close_clients(self) -> None:
        admin, offsets, self._admin, self._offsets = self._admin, self._offsets, None, None
        for client in (offsets, admin):
            if client is not None:
                try:
                    await (client.stop() if isinstance(client, AIOKafkaConsumer)
                           else client.close())
                except (KafkaError, OSError):
                    pass

    async def _ask(self, now: datetime) -> list[ParticipantHealth]:
        admin, offsets = await self._clients()
        topics = self._topics()
        # Only topics that exist are described: a metadata request naming a missing topic
        # would create it on a broker that auto-creates topics.
        existing = set(await admin.list_topics())
        wanted = [t for t in topics.values() if t in existing]
        described = {t["topic"]: [p["partition"] for p in t["partitions"]]
                     for t in (await admin.describe_topics(wanted) if wanted else [])
                     if t["error_code"] == 0}
        out = []
        for participant, topic in topics.items():
            group = self._group(participant)
            # One group per request: aiokafka 0.14 cannot decode a Kafka 4 answer about
            # several groups when one of them does not exist.
            (answer,) = await admin.describe_consumer_groups([group])
            (info,) = answer.to_object()["groups"]
            members = len(info["members"]) if info["error_code"] == 0 else 0
            lag = await self._lag_of(admin, offsets, group, topic, described.get(topic))
            since = None
            if members == 0:
                since = self._down_since.setdefault(topic, now)
            else:
                self._down_since.pop(topic, None)
            out.append(ParticipantHealth(participant, topic, group, info["state"] or None,
                                         members, lag, now, since))
        return out

    @staticmethod
    async def _lag_of(admin: AIOKafkaAdminClient, offsets: AIOKafkaConsumer, group: str,
                      topic: str, partitions: list[int] | None) -> int | None:
        if not partitions:
            return None  # the topic does not exist yet: nothing was ever sent
        tps = [TopicPartition(topic, p) for p in partitions]
        ends = await offsets.end_offsets(tps)
        committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        lag = 0
        for tp in tps:
            done = committed[tp].offset if tp in committed else 0
            lag += max(int(ends[tp]) - max(int(done), 0), 0)
        return lag

    def _export(self, found: list[ParticipantHealth]) -> None:
        if self._members is None or self._lag is None:
            return
        for h in found:
            if h.problem is None:
                self._members.labels(h.participant, h.topic).set(h.members)
                self._lag.labels(h.participant, h.topic).set(h.lag or 0)
