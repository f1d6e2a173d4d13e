"""A function runtime played by the test: Kafka triggers that read a topic and invoke a function
with the event shape the real trigger sends (no tests here).

* :class:`LambdaKafkaTrigger`: AWS Lambda's Kafka event source mapping: polls a topic in a
  consumer group, builds the MSK (``aws:kafka``) or self-managed (``SelfManagedKafka``) event,
  calls the synchronous handler, and commits past the records not named in the partial batch
  response (resuming a partition from the first one named).
* :class:`KnativeTrigger`: Knative's KafkaSource: one CloudEvent per record, binary or
  structured, POSTed to an ASGI app; a non-2xx answer means the record is sent again.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.structs import OffsetAndMetadata

from coordinator.config.settings import CoordinatorSettings
from coordinator.language.saga import Saga
from coordinator.migrations import migrate
from coordinator.runtime.functions import CoordinatorFunctions
from coordinator.sagas.loading import build_registry
from examples.services import inventory, payments, shipping
from outbox_relay import RelaySettings
from participant_sdk import (
    CommandBatchHandler,
    Participant,
    ParticipantSettings,
    command_topic,
    reply_topic,
)
from participant_sdk.functions import (
    FunctionLoop,
    cloudevents_app,
    command_batch,
    lambda_handler,
)

LambdaFn = Callable[[Mapping[str, Any], Any], dict[str, Any]]


async def create_topics(bootstrap: str, topics: list[str], partitions: int = 3) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        for topic in topics:
            try:
                await admin.create_topics(
                    [NewTopic(topic, num_partitions=partitions, replication_factor=1)])
            except TopicAlreadyExistsError:
                pass
    finally:
        await admin.close()


def lambda_event(records: list[Any], *, msk: bool) -> dict[str, Any]:
    """The event a Kafka event source mapping sends, built from aiokafka records."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        item: dict[str, Any] = {
            "topic": r.topic, "partition": r.partition, "offset": r.offset,
            "timestamp": r.timestamp, "timestampType": "CREATE_TIME",
            "value": None if r.value is None else base64.b64encode(r.value).decode(),
            # Java bytes: signed, as the event source serialises them.
            "headers": [{k: [b - 256 if b > 127 else b for b in v]} for k, v in r.headers],
        }
        if r.key is not None:
            item["key"] = base64.b64encode(r.key).decode()
        grouped.setdefault(f"{r.topic}-{r.partition}", []).append(item)
    event: dict[str, Any] = {"records": grouped, "bootstrapServers": "b-1.example:9092"}
    if msk:
        event["eventSource"] = "aws:kafka"
        event["eventSourceArn"] = "arn:aws:kafka:eu-west-1:123456789012:cluster/test/abc"
    else:
        event["eventSource"] = "SelfManagedKafka"
    return event


class LambdaKafkaTrigger:
    """One event source mapping: a topic, a consumer group, a function, a batch size."""

    def __init__(self, bootstrap: str, topic: str, fn: LambdaFn, *, msk: bool,
                 batch_size: int = 100, on_stop: Callable[[], None] | None = None) -> None:
        self.bootstrap, self.topic, self.fn, self.msk = bootstrap, topic, fn, msk
        self.on_stop = on_stop
        self.batch_size = batch_size
        self.invocations = 0
        self.responses: list[dict[str, Any]] = []
        # The function's own thread: its FunctionLoop outlives each invocation, as when warm.
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        self._consumer = AIOKafkaConsumer(
            self.topic, bootstrap_servers=self.bootstrap, group_id=f"lambda-{uuid.uuid4().hex}",
            enable_auto_commit=False, auto_offset_reset="earliest",
            max_poll_records=self.batch_size)
        await self._consumer.start()

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
        if self.on_stop is not None:  # the instance shuts down on its own thread and loop
            await asyncio.get_running_loop().run_in_executor(self._thread, self.on_stop)
        self._thread.shutdown(wait=True)

    async def poll(self, timeout_ms: int = 200) -> int:
        """Deliver what is there as one invocation; return the records delivered."""
        assert self._consumer is not None
        batches = await self._consumer.getmany(timeout_ms=timeout_ms,
                                               max_records=self.batch_size)
        records = [r for rs in batches.values() for r in rs]
        if not records:
            return 0
        event = json.loads(json.dumps(lambda_event(records, msk=self.msk)))  # as JSON travels
        loop = asyncio.get_running_loop()
        response = await loop.run_in_executor(self._thread, self.fn, event, None)
        self.invocations += 1
        self.responses.append(response)
        failures = {f["itemIdentifier"]["partition"]: f["itemIdentifier"]["offset"]
                    for f in response.get("batchItemFailures", [])}
        for tp, rs in batches.items():
            name = f"{tp.topic}-{tp.partition}"
            if name in failures:
                self._consumer.seek(tp, failures[name])
                continue
            await self._consumer.commit({tp: OffsetAndMetadata(rs[-1].offset + 1, "")})
        return len(records)


App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


class KnativeTrigger:
    """One KafkaSource: every record of the topic POSTed to ``app`` as a CloudEvent."""

    def __init__(self, bootstrap: str, topic: str, app: App, *, structured: bool) -> None:
        self.bootstrap, self.topic, self.structured = bootstrap, topic, structured
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                        base_url="http://function")
        self.statuses: list[int] = []
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        self._consumer = AIOKafkaConsumer(
            self.topic, bootstrap_servers=self.bootstrap, group_id=f"knative-{uuid.uuid4().hex}",
            enable_auto_commit=False, auto_offset_reset="earliest")
        await self._consumer.start()

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
        await self.client.aclose()

    def request(self, r: Any) -> tuple[dict[str, str], bytes]:
        attrs = {
            "specversion": "1.0",
            "id": f"partition:{r.partition}/offset:{r.offset}",
            "source": f"/apis/v1/namespaces/default/kafkasources/replies#{r.topic}",
            "type": "dev.knative.kafka.event",
            "subject": f"partition:{r.partition}#{r.offset}",
        }
        if r.key is not None:
            attrs["key"] = r.key.decode()
        for k, v in r.headers:
            attrs["kafkaheader" + k.lower().replace("-", "")] = v.decode("utf-8", "replace")
        if self.structured:
            doc: dict[str, Any] = dict(attrs, datacontenttype="application/json")
            doc["data_base64"] = base64.b64encode(r.value or b"").decode()
            return {"content-type": "application/cloudevents+json"}, json.dumps(doc).encode()
        headers = {f"ce-{k}": v for k, v in attrs.items()}
        headers["content-type"] = "application/json"
        return headers, r.value or b""

    async def poll(self, timeout_ms: int = 200) -> int:
        assert self._consumer is not None
        batches = await self._consumer.getmany(timeout_ms=timeout_ms)
        delivered = 0
        for tp, rs in batches.items():
            for r in rs:
                headers, body = self.request(r)
                response = await self.client.post("/", headers=headers, content=body)
                self.statuses.append(response.status_code)
                if response.status_code >= 300:
                    self._consumer.seek(tp, r.offset)  # KafkaSource retries the event
                    break
                await self._consumer.commit({TopicPartition(tp.topic, tp.partition):
                                             OffsetAndMetadata(r.offset + 1, "")})
                delivered += 1
        return delivered


class FunctionStack:
    """The order saga's whole stack as functions: coordinator replies behind a KafkaSource,
    a scheduled tick (timers, schedules, relay), and the three participants behind Lambda
    Kafka event sources (payments and inventory as MSK, shipping as self-managed). Each
    function is its own instance (its own pool, producer and loop), as when deployed."""

    def __init__(self, dsn: str, bootstrap: str, prefix: str,
                 sagas: list[type[Saga]], *, structured: bool = False,
                 statement_cache_size: int = 100,
                 participants: Sequence[Participant] = ()) -> None:
        self.dsn, self.bootstrap, self.prefix = dsn, bootstrap, prefix
        self.registry = build_registry(sagas, topic_prefix=prefix)
        coordinator = CoordinatorSettings(dsn=dsn, kafka_bootstrap=bootstrap, topic_prefix=prefix,
                                          pool_max_size=2)
        self.reply_fn = CoordinatorFunctions(coordinator, self.registry,
                                             statement_cache_size=statement_cache_size)
        self.tick_fn = CoordinatorFunctions(
            coordinator, self.registry,
            relay=RelaySettings(postgres_dsn=dsn, kafka_bootstrap=bootstrap,
                                statement_cache_size=statement_cache_size),
            statement_cache_size=statement_cache_size,
        )
        settings = ParticipantSettings(dsn=dsn, kafka_bootstrap=bootstrap, topic_prefix=prefix,
                                       pool_size=2, statement_cache_size=statement_cache_size)
        every = [payments.Payments(), inventory.Inventory(), shipping.Shipping(), *participants]
        # One retry in the SDK: a transient failure becomes a reply (and a coordinator timer).
        settings = settings.model_copy(update={"retry_attempts": 1})
        self.handlers = {p.name: CommandBatchHandler(p, settings) for p in every}
        self.lambdas = {name: self._lambda(name, h) for name, h in self.handlers.items()}
        self.replies = KnativeTrigger(bootstrap, reply_topic(prefix),
                                      cloudevents_app(self.reply_fn.replies),
                                      structured=structured)
        self._tick_loop = FunctionLoop()
        self.tick = self.tick_fn.lambda_tick(self._tick_loop)
        self._tick_thread = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    def _lambda(self, name: str, handler: CommandBatchHandler) -> LambdaKafkaTrigger:
        loop = FunctionLoop()
        return LambdaKafkaTrigger(
            self.bootstrap, command_topic(name, self.prefix),
            lambda_handler(lambda: command_batch(handler), loop=loop), msk=name != "shipping",
            on_stop=lambda: loop.close(handler.close()))

    async def setup(self, admin_dsn: str | None = None) -> None:
        """Migrate, create the participants' tables and the topics, start the triggers."""
        import asyncpg

        conn = await asyncpg.connect(admin_dsn or self.dsn)
        try:
            await migrate(conn)
            for module in (payments, inventory, shipping):
                await module.install_tables(conn)
        finally:
            await conn.close()
        topics = [command_topic(n, self.prefix) for n in self.handlers]
        await create_topics(self.bootstrap, [reply_topic(self.prefix), *topics])
        for trigger in (*self.lambdas.values(), self.replies):
            await trigger.start()

    async def scheduled_tick(self) -> dict[str, Any]:
        """What the cron trigger does: invoke the tick function with an EventBridge event."""
        event = {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event",
                 "source": "aws.events", "account": "123456789012",
                 "time": "2026-12-02T06:00:00Z", "region": "eu-west-1",
                 "resources": ["arn:aws:events:eu-west-1:123456789012:rule/sagaflow-tick"],
                 "detail": {}}
        loop = asyncio.get_running_loop()
        result: dict[str, Any] = await loop.run_in_executor(self._tick_thread, self.tick,
                                                            event, None)
        return result

    async def round(self) -> int:
        """One tick, then every trigger delivers what it finds; returns the work done."""
        done = int((await self.scheduled_tick())["published"])
        for trigger in self.lambdas.values():
            done += await trigger.poll(100)
        done += await self.replies.poll(100)
        return done

    async def close(self) -> None:
        for trigger in (*self.lambdas.values(), self.replies):
            await trigger.stop()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._tick_thread,
                                   lambda: self._tick_loop.close(self.tick_fn.close()))
        self._tick_thread.shutdown(wait=True)
        await self.reply_fn.close()
