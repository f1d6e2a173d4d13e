"""The participant loop: Kafka commands in, barrier-protected handlers, Kafka replies out.

One consumer group per participant reads ``command_topic(name, prefix)``. Each message goes to
one of N lanes chosen by its saga (the key) and its step: the phases of one step (try, then
confirm or cancel) always share a lane and run in order, while the independent steps of one
saga (a for-each's items, parallel branches) spread over at most ``saga_lanes`` lanes and run
that many at once. A message is finished once its reply was acknowledged by Kafka (or it was
kept as a dead letter); only then can its offset be committed (see :mod:`.offsets`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import zlib
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry

from participant_sdk.barrier import install_barrier
from participant_sdk.commands import CommandProcessor, OutgoingReply
from participant_sdk.dead_letters import install_dead_letters
from participant_sdk.direct import DIRECT_SYSTEM, DirectServer
from participant_sdk.event_loop import run as run_on_event_loop
from participant_sdk.executor import LocalRetry
from participant_sdk.handlers import Handler, Participant
from participant_sdk.logging_config import configure_logging
from participant_sdk.metrics import ParticipantMetrics
from participant_sdk.offsets import OffsetTracker
from participant_sdk.partitioning import KeyHashPartitioner
from participant_sdk.pools import create_pool
from participant_sdk.probes import ProbeServer, database_answers, tasks_alive
from participant_sdk.protocol import (
    CommandEnvelope,
    ProtocolError,
    command_topic,
    decode_command,
)
from participant_sdk.settings import ParticipantSettings
from participant_sdk.startup import open_with_retry
from participant_sdk.startup_errors import load_settings, run_cli
from participant_sdk.stopping import StopSignals, until_stopped
from participant_sdk.telemetry import configure as configure_telemetry

log = logging.getLogger(__name__)

#: Longest a fetch waits when no command comes (a command ends it at once).
_IDLE_FETCH_MS = 1000


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, runner: ParticipantRunner) -> None:
        self._runner = runner

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._runner._on_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        log.info("participant %s assigned %s", self._runner.name, sorted(map(str, assigned)))


class ParticipantRunner:
    """Runs a :class:`Participant` against Kafka and its Postgres database.

    ``start()`` / ``stop()`` or ``async with``; ``run()`` serves until SIGTERM/SIGINT or
    :meth:`request_stop`, then drains in-flight commands (within ``drain_timeout``), commits
    finished offsets and closes everything.
    """

    def __init__(
        self,
        participant: Participant,
        settings: ParticipantSettings,
        *,
        metrics: ParticipantMetrics | None = None,
    ) -> None:
        self.participant = participant
        self.settings = settings
        self.name = participant.name
        self.metrics = metrics
        self.handlers: dict[tuple[str, Any], Handler] = participant.validate()
        self.topic = command_topic(self.name, settings.topic_prefix)
        self.group_id = settings.group_id or self.name
        self._retry = LocalRetry(
            attempts=settings.retry_attempts,
            initial=settings.retry_initial,
            maximum=settings.retry_max,
        )
        self._tracker: OffsetTracker[Any] = OffsetTracker()
        self._slots = asyncio.Semaphore(settings.max_in_flight)
        self._lanes: list[asyncio.Queue[Any]] = [asyncio.Queue() for _ in range(settings.lanes)]
        self._tasks: list[asyncio.Task[None]] = []
        self._fetcher: asyncio.Task[None] | None = None
        self._stop_requested = asyncio.Event()
        self._progress = asyncio.Event()
        #: Set when a command finished since the last offset commit (the commit loop waits on it).
        self._uncommitted = asyncio.Event()
        #: Commands finished since the last commit; ``commit_max_pending`` of them commit early.
        self._finished_since_commit = 0
        self._commit_now = asyncio.Event()
        self._started = False
        self._probes: ProbeServer | None = None
        self._stopped = False
        self._pool: Any = None
        self._processor: CommandProcessor | None = None
        self._consumer: Any = None
        self._producer: Any = None
        self._direct: DirectServer | None = None
        self._direct_lanes: list[asyncio.Lock] = []

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            raise RuntimeError("ParticipantRunner.start() called twice")
        self._started = True
        s = self.settings
        if s.metrics_port is not None:  # first, so /healthz answers while it connects
            registry = self.metrics.registry if self.metrics is not None else CollectorRegistry()
            self._probes = ProbeServer(registry=registry, live=self._live, ready=self._ready,
                                       name=f"participant {self.name}")
            await self._probes.start(s.metrics_port, s.metrics_addr)
        self._pool = await open_with_retry(
            lambda: create_pool(s.dsn, min_size=1, max_size=s.pool_size,
                                statement_cache_size=s.statement_cache_size), what="Postgres"
        )
        if s.install_schema:
            async with self._pool.acquire() as conn:
                await install_barrier(conn)
                await install_dead_letters(conn)
        self._processor = CommandProcessor(
            self.name,
            self.handlers,
            self._pool,
            retry=self._retry,
            group_id=self.group_id,
            metrics=self.metrics,
            after_commit=self._crash_hook,
            persist=_persist,
        )
        if s.direct_listen:  # before Kafka: the lane serves even while Kafka is away
            token = s.direct_token.get_secret_value() if s.direct_token else ""
            self._direct_lanes = [asyncio.Lock() for _ in range(s.lanes)]
            self._direct = DirectServer(self._answer_direct, s.direct_listen, token=token,
                                        name=f"participant {self.name}")
            await self._direct.start()
        self._producer = AIOKafkaProducer(
            bootstrap_servers=s.kafka_bootstrap,
            enable_idempotence=True,
            partitioner=KeyHashPartitioner(),
            acks="all",
            linger_ms=int(s.linger.total_seconds() * 1000),
            client_id=f"sagaflow-participant-{self.name}",
            **s.kafka_security.client_kwargs(),
        )
        await open_with_retry(self._producer.start, what="Kafka")
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=s.kafka_bootstrap,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            client_id=f"sagaflow-participant-{self.name}",
            max_poll_records=s.max_in_flight,
            fetch_max_wait_ms=int(s.fetch_max_wait.total_seconds() * 1000),
            **s.kafka_security.client_kwargs(),
        )
        self._consumer.subscribe([self.topic], listener=_Listener(self))
        await open_with_retry(self._consumer.start, what="Kafka")
        self._tasks = [
            asyncio.create_task(self._lane(i, q), name=f"{self.name}-lane-{i}")
            for i, q in enumerate(self._lanes)
        ]
        self._tasks.append(asyncio.create_task(self._commit_loop(), name=f"{self.name}-commit"))
        self._fetcher = asyncio.create_task(self._fetch_loop(), name=f"{self.name}-fetch")
        log.info("participant %s consuming %s as group %s", self.name, self.topic, self.group_id)

    def _live(self) -> str | None:
        return tasks_alive([*self._tasks, self._fetcher])

    async def _ready(self) -> str | None:
        """Started, not stopping, every loop running, and the barrier's database answers."""
        if self._fetcher is None:
            return "starting"
        if self._stop_requested.is_set():
            return "stopping"
        return self._live() or await database_answers(self._pool)

    async def stop(self) -> None:
        """Stop fetching, drain in-flight commands within the bound, commit, close. Idempotent."""
        if self._stopped or not self._started:
            self._stopped = True
            return
        self._stopped = True
        self._stop_requested.set()
        if self._direct is not None:
            await self._direct.stop()
        if self._fetcher is not None:
            self._fetcher.cancel()
            await asyncio.gather(self._fetcher, return_exceptions=True)
        drained = await self._wait_drained(self.settings.drain_timeout)
        if not drained:
            log.warning(
                "participant %s: %d commands still in flight after %s; their offsets stay "
                "uncommitted and they will be redelivered",
                self.name,
                self._tracker.in_flight(),
                self.settings.drain_timeout,
            )
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._commit()
        for closer in (self._consumer, self._producer):
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer.stop()
        if self._pool is not None:
            await self._pool.close()
        if self._probes is not None:
            await self._probes.stop()
        log.info("participant %s stopped", self.name)

    async def __aenter__(self) -> ParticipantRunner:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def request_stop(self) -> None:
        """Ask :meth:`run` to shut down gracefully (safe from a signal handler)."""
        self._stop_requested.set()

    async def run(self) -> None:
        """Serve until SIGTERM/SIGINT or :meth:`request_stop`; re-raise if a loop task died.

        A stop request during start-up ends it at once; a signal bounds the whole stop (see
        :mod:`participant_sdk.stopping`)."""
        with StopSignals(self.request_stop):
            try:
                began, _ = await until_stopped(self.start(), self._stop_requested)
                if not began:
                    log.info("participant %s: stopped while starting", self.name)
                    return
                stop_wait = asyncio.create_task(self._stop_requested.wait())
                watched = [*self._tasks, stop_wait]
                if self._fetcher is not None:
                    watched.append(self._fetcher)
                done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                stop_wait.cancel()
                failed = [t for t in done
                          if t is not stop_wait and not t.cancelled() and t.exception()]
            finally:
                await self.stop()
        if failed:
            log.error("participant %s: loop task %s died", self.name, failed[0].get_name())
            exc = failed[0].exception()
            assert exc is not None
            raise exc

    # -- loops ----------------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        while not self._stop_requested.is_set():
            # Returns as soon as a command arrives; the timeout only sets the idle wake-ups.
            batches = await self._consumer.getmany(timeout_ms=_IDLE_FETCH_MS)
            for tp, messages in batches.items():
                for msg in messages:
                    await self._slots.acquire()
                    self._tracker.started(tp, msg.offset)
                    command = _decoded(msg)
                    lane = lane_of(msg.key, command.step if command is not None else None,
                                   len(self._lanes), self.settings.saga_lanes)
                    self._lanes[lane].put_nowait((tp, msg, command))

    async def _lane(self, index: int, queue: asyncio.Queue[Any]) -> None:
        while True:
            tp, msg, command = await queue.get()
            try:
                await self._process(tp, msg, command)
                self._command_finished(tp, msg.offset)
            finally:
                self._slots.release()
                self._progress.set()

    def _command_finished(self, tp: Any, offset: int) -> None:
        """A command's reply is durable: its offset may be committed (soon, or at once when
        ``commit_max_pending`` commands finished since the last commit)."""
        self._tracker.finished(tp, offset)
        self._uncommitted.set()
        self._finished_since_commit += 1
        if 0 < self.settings.commit_max_pending <= self._finished_since_commit:
            self._commit_now.set()

    async def _commit_loop(self) -> None:
        """Commit finished offsets at most every ``commit_interval``; idle, sleep until a
        command finishes (no timer wake-ups)."""
        interval = self.settings.commit_interval.total_seconds()
        while True:
            await self._uncommitted.wait()
            # What finishes meanwhile shares this commit (up to commit_max_pending commands).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._commit_now.wait(), interval)
            self._uncommitted.clear()
            self._commit_now.clear()
            self._finished_since_commit = 0
            try:
                await self._commit()
            except KafkaError as exc:
                log.warning("participant %s: offset commit failed (%s); will retry", self.name, exc)
                self._uncommitted.set()

    async def _commit(self, partitions: list[Any] | None = None) -> None:
        offsets = self._tracker.committable()
        if partitions is not None:
            offsets = {tp: o for tp, o in offsets.items() if tp in partitions}
        if offsets:
            await self._consumer.commit(offsets)
            self._tracker.mark_committed(offsets)

    async def _on_revoked(self, revoked: list[Any]) -> None:
        async def drained() -> None:
            while any(self._tracker.in_flight(tp) for tp in revoked):
                self._progress.clear()
                await self._progress.wait()

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drained(), self.settings.drain_timeout.total_seconds())
        try:
            await self._commit(revoked)
        except KafkaError as exc:
            log.warning("participant %s: commit on revoke failed: %s", self.name, exc)
        self._tracker.forget(revoked)

    async def _wait_drained(self, bound: timedelta) -> bool:
        async def drained() -> None:
            while self._tracker.in_flight():
                self._progress.clear()
                await self._progress.wait()

        try:
            await asyncio.wait_for(drained(), bound.total_seconds())
        except TimeoutError:
            return False
        return True

    # -- one message ----------------------------------------------------------------------

    async def _process(self, tp: Any, msg: Any, command: CommandEnvelope | None) -> None:
        assert self._processor is not None
        reply = await self._processor.process(msg, command)
        if reply is not None:
            await self._send_reply(reply)

    async def _answer_direct(self, record: Any) -> OutgoingReply | None:
        """A command from the direct lane: run in the lane its Kafka copy would take, so a
        step's phases stay in order; the reply goes back on the lane, not to Kafka."""
        assert self._processor is not None
        command = _decoded(record)
        lane = lane_of(record.key, command.step if command is not None else None,
                       len(self._direct_lanes), self.settings.saga_lanes)
        async with self._direct_lanes[lane]:
            return await self._processor.process(record, command, via=DIRECT_SYSTEM)

    async def _send_reply(self, reply: OutgoingReply) -> None:
        async def send() -> None:
            await self._producer.send_and_wait(
                reply.topic, reply.value, key=reply.key, headers=reply.headers
            )

        await _persist(send, f"reply on {reply.topic} for saga {reply.key.decode()}")

    async def _crash_hook(self, command: CommandEnvelope) -> None:
        flag = self.settings.crash_after_commit_flag
        if flag is None or flag.exists():
            return
        flag.write_text(str(command.message_id))
        log.critical("TEST HOOK: killing participant %s after commit", self.name)
        os.kill(os.getpid(), signal.SIGKILL)


def lane_of(key: bytes | None, step: str | None, lanes: int, saga_lanes: int) -> int:
    """The lane of a command: one of ``saga_lanes`` lanes from the saga's own, by step (a
    command that does not decode: the saga's own lane, where the processor dead-letters it)."""
    spread = zlib.crc32(step.encode()) % saga_lanes if step is not None else 0
    return (zlib.crc32(key or b"") + spread) % lanes


def _decoded(msg: Any) -> CommandEnvelope | None:
    """The command of a record, decoded once for its lane and its handler; ``None`` when it
    does not decode (the processor keeps it as a dead letter)."""
    try:
        return decode_command(msg.value) if msg.value is not None else None
    except ProtocolError:
        return None


async def _persist(op: Callable[[], Awaitable[None]], what: str) -> None:
    """Run ``op`` until it succeeds, backing off; only cancellation ends it otherwise."""
    delay = 0.05
    while True:
        try:
            await op()
            return
        except (KafkaError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("%s failed (%s); retrying in %.2fs", what, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def run_participant(
    participant: Participant,
    settings: ParticipantSettings | None = None,
    *,
    metrics: ParticipantMetrics | None = None,
    setup: Callable[[Any], Awaitable[None]] | None = None,
) -> None:
    """Entry point of a participant process: settings from the environment, logs to stderr,
    tracing from the ``OTEL_*`` environment (service name: the participant's name).

    ``setup(conn)`` runs once at start on a plain connection, e.g. to create business tables.
    """
    configure_logging(participant.name)
    configure_telemetry(participant.name)

    def body() -> int:
        resolved = settings if settings is not None else load_settings(ParticipantSettings)
        run_on_event_loop(main(resolved))
        return 0

    async def prepare(resolved: ParticipantSettings) -> None:
        assert setup is not None
        conn = await open_with_retry(lambda: asyncpg.connect(resolved.dsn), what="Postgres")
        try:
            await setup(conn)
        finally:
            await conn.close()

    async def main(resolved: ParticipantSettings) -> None:
        runner = ParticipantRunner(participant, resolved, metrics=metrics or ParticipantMetrics())
        if setup is not None:
            with StopSignals(runner.request_stop):
                began, _ = await until_stopped(prepare(resolved), runner._stop_requested)
            if not began:
                return
        await runner.run()

    code = run_cli(body, prog=participant.name, postgres_var="SAGAFLOW_PARTICIPANT_DSN",
                   kafka_var="SAGAFLOW_PARTICIPANT_KAFKA_BOOTSTRAP")
    if code:
        raise SystemExit(code)
