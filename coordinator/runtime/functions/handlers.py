"""The coordinator as functions: one call per batch of reply records, one per timer tick,
one per schedule tick.

A FaaS runtime (a Kafka-triggered function, a scheduled function) calls these with a
:class:`~coordinator.store.SagaStore`; the long-lived worker calls the very same functions.
Acknowledge the batch to the trigger only after :func:`handle_reply_batch` returned.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from coordinator.engine import ReplyReceived
from coordinator.runtime.reply_decoding import decode_reply_leniently
from coordinator.store import (
    ApplyOutcome,
    ApplyResult,
    PendingEvent,
    SagaStore,
    TransientStoreError,
)
from coordinator.store.store import CONNECTION_ERRORS
from coordinator.store.tracing import ReplySpans
from participant_sdk.dead_letters import DeadLetter
from participant_sdk.protocol import ProtocolError
from participant_sdk.records import KafkaRecord

if TYPE_CHECKING:  # the schedules' modules cost a reply handler's cold start ~100 ms
    from coordinator.schedules import FireReport, ScheduleFirer

__all__ = ["BatchResult", "ReplyRecord", "fire_due_schedules", "fire_due_timers",
           "handle_reply_batch"]

log = logging.getLogger(__name__)

#: ``source`` of the dead letters the reply path writes.
REPLY_SOURCE = "coordinator:replies"


#: A reply record: aiokafka's ``ConsumerRecord``, or a function trigger's ``InboundRecord``.
ReplyRecord = KafkaRecord


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What happened to a batch of reply records (all of it is committed)."""

    applied: int = 0
    ignored: int = 0
    #: Records kept as dead letters: undecodable, unknown saga, or refused by the core (a
    #: malformed but addressed reply is applied as a failed attempt *and* kept here).
    dead_lettered: int = 0
    results: list[ApplyResult] = field(default_factory=list)


async def handle_reply_batch(
    store: SagaStore, records: Sequence[ReplyRecord], *, source: str = REPLY_SOURCE
) -> BatchResult:
    """Decode and apply ``records`` in one transaction; bad records become dead letters.

    Raises only for database trouble, in which case nothing was committed and the whole batch
    should be redelivered (already-applied replies are then ignored as duplicates).
    """
    pending: list[PendingEvent] = []
    undecodable: list[DeadLetter] = []
    spans = ReplySpans()  # one span per reply, continuing the reply's trace
    for record in records:
        letter = DeadLetter(
            source=source,
            reason="",
            payload=record.value,
            key=record.key,
            headers=[(k, bytes(v)) for k, v in record.headers or ()],
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
        )
        if record.value is None:
            undecodable.append(_with_reason(letter, "record has no value"))
            continue
        try:
            decoded = decode_reply_leniently(record.value)
        except ProtocolError as exc:
            undecodable.append(_with_reason(letter, str(exc)))
            continue
        reply = decoded.reply
        if decoded.malformed is not None:
            # The attempt fails on the saga; the raw bytes stay for whoever fixes the sender.
            undecodable.append(_with_reason(
                letter, f"{decoded.malformed} (applied as a failed attempt)"))
        pending.append(
            PendingEvent(
                reply.saga_id,
                ReplyReceived(reply=reply),
                actor=f"participant:{reply.participant}",
                # Already kept above when malformed: one dead letter per record.
                dead_letter=letter if decoded.malformed is None else None,
                trace_context=spans.start(record, reply),
            )
        )
    try:
        results = await store.apply_many(pending, dead_letters=undecodable)
    except (TransientStoreError, *CONNECTION_ERRORS) as exc:
        spans.fail(exc)
        raise
    except Exception as exc:
        # Something in the batch fails for good (a poison event). Isolate it so the others
        # go through and it becomes a dead letter instead of blocking the partition.
        log.warning("reply batch failed (%s); applying its %d events one by one", exc,
                    len(pending))
        try:
            results = await _one_by_one(store, pending, undecodable)
        except BaseException as again:
            spans.fail(again)
            raise
    spans.finish(results)
    rejected = sum(
        r.outcome in (ApplyOutcome.NOT_FOUND, ApplyOutcome.REJECTED) for r in results
    )
    return BatchResult(
        applied=sum(r.outcome is ApplyOutcome.APPLIED for r in results),
        ignored=sum(r.outcome is ApplyOutcome.IGNORED for r in results),
        dead_lettered=len(undecodable) + rejected,
        results=results,
    )


async def fire_due_timers(
    store: SagaStore, now: datetime | None = None, limit: int = 100
) -> int:
    """Fire up to ``limit`` timers due at ``now`` (default: the store's clock); return the count."""
    return await store.fire_due_timers(now=now, limit=limit)


async def fire_due_schedules(
    firer: ScheduleFirer, now: datetime | None = None, limit: int = 100
) -> FireReport:
    """Fire the schedules due at ``now`` (up to ``limit`` of them): each is claimed with
    ``SKIP LOCKED`` and each run is an idempotent start, so any number of ticks may overlap.
    Build the firer once per process: ``ScheduleFirer(store, mappers=declared_mappers(reg))``.
    """
    return await firer.fire_due(now=now, limit=limit)


async def _one_by_one(
    store: SagaStore, pending: Sequence[PendingEvent], undecodable: Sequence[DeadLetter]
) -> list[ApplyResult]:
    results: list[ApplyResult] = []
    letters = list(undecodable)
    for item in pending:
        try:
            results.extend(await store.apply_many([item]))
        except (TransientStoreError, *CONNECTION_ERRORS):
            raise
        except Exception as exc:
            reason = f"applying the reply failed: {type(exc).__name__}: {exc}"
            log.error("saga %s: %s", item.saga_id, reason)
            results.append(ApplyResult(item.saga_id, ApplyOutcome.REJECTED, reason=reason))
            if item.dead_letter is not None:
                letters.append(_with_reason(item.dead_letter, reason))
    await store.record_dead_letters(letters)
    return results


def _with_reason(letter: DeadLetter, reason: str) -> DeadLetter:
    return replace(letter, reason=reason[:4000])
