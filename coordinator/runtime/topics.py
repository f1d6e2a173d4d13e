"""Create the Kafka topics a set of saga types uses, with the admin client.

Managed Kafka turns broker-side auto-creation off, and auto-created topics get the broker's
default partitions and replication anyway; ``sagaflow-coordinator topics`` creates
``<prefix>.replies``, ``<prefix>.signals``, every ``<prefix>.<participant>.commands`` and,
with human tasks, ``<prefix>.tasks`` up front, and leaves
topics that already exist alone.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from coordinator.engine.compiled import CompiledSaga, CompiledTask, StepKind, walk
from coordinator.runtime.signal_wire import signal_topic
from participant_sdk.kafka_security import KafkaSecurity
from participant_sdk.task_events import tasks_topic

__all__ = ["ensure_topics", "saga_topics"]


def saga_topics(sagas: Iterable[CompiledSaga]) -> list[str]:
    """The reply and signal topics, every command topic the saga types send to, and the task
    notifications' topic of the types that have human tasks, sorted."""
    topics: set[str] = set()
    for saga in sagas:
        topics.add(saga.reply_topic)
        topics.add(signal_topic(saga.topic_prefix))
        if any(isinstance(n, CompiledTask) for n in walk(saga.root)):
            topics.add(tasks_topic(saga.topic_prefix))
        topics.update(saga.command_topic(step) for step in saga.steps
                      if step.kind is not StepKind.CHILD)
    return sorted(topics)


async def ensure_topics(bootstrap: str, security: KafkaSecurity, topics: Iterable[str], *,
                        partitions: int, replication_factor: int) -> dict[str, bool]:
    """Create the missing topics; returns each topic and whether this call created it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="sagaflow-topics",
                                **security.client_kwargs())
    await admin.start()  # a one-shot command: fail at once rather than wait for the broker
    try:
        existing = set(await admin.list_topics())
        wanted = list(dict.fromkeys(topics))
        missing = [t for t in wanted if t not in existing]
        if missing:
            await admin.create_topics([NewTopic(t, num_partitions=partitions,
                                                replication_factor=replication_factor)
                                       for t in missing])
    finally:
        await admin.close()
    return {t: t in missing for t in wanted}
