"""Writing the effects of decisions: history rows, saga state (spine and the nodes that
changed, see ``nodes``), outbox rows and timers.

Everything here runs inside the caller's transaction, after the saga rows are locked, and
batches each table's writes into one statement whatever the number of sagas.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final
from uuid import UUID

import asyncpg

from coordinator.engine import Decision, Event, SagaState, Status, TimerRequest
from coordinator.engine.decision import Delivery
from coordinator.engine.work import ACTIVE_PHASE
from coordinator.store.nodes import UPSERT_NODES, dumps, node_writes, spine_json
from coordinator.store.signals import mark_consumed
from coordinator.store.tasks import TaskWrite, task_messages, write_tasks
from outbox_relay.message import (
    LeasedRow,
    OutboxMessage,
    insert_args,
    insert_select,
    leased_rows,
)
from participant_sdk.protocol import (
    HEADER_MESSAGE_KIND,
    HEADER_PROTOCOL,
    HEADER_TRACEPARENT,
    HEADER_TRACESTATE,
    KIND_COMMAND,
    encode,
)

__all__ = ["DELIVERY_KIND", "WRITE_SAGAS", "Change", "LockedSaga", "write_at_once", "write_changes"]

#: ``timers.kind`` of a delivery: an event for another saga, due at once (see 0004).
DELIVERY_KIND: Final = "deliver"


@dataclass(slots=True)
class LockedSaga:
    """The columns of a locked saga row the writer needs, updated as events are applied."""

    saga_id: UUID
    saga_type: str
    version: int
    trace_context: dict[str, str]
    history_seq: int
    #: The state as stored when the row was locked (``None``: a new saga, nothing stored
    #: yet). The store fills it in, from its cache or from the node rows.
    base: SagaState | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> LockedSaga:
        return cls(
            saga_id=row["id"],
            saga_type=row["saga_type"],
            version=row["saga_version"],
            trace_context=json.loads(row["trace_context"]),
            history_seq=row["history_seq"],
        )


@dataclass(frozen=True, slots=True)
class Change:
    """One applied event: its history row and its decision's effects."""

    saga: LockedSaga
    seq: int
    event: Event
    decision: Decision
    now: datetime
    actor: str
    #: A timer this event consumed (a fired timer), deleted with the change.
    fired_timer: str | None = None
    #: Trace context of the commands this change writes (default: the saga's stored one).
    trace_context: Mapping[str, str] | None = None


def recorded_event(change: Change) -> Event:
    """The event as its history row keeps it: with the version-guard decisions its decision
    took (``Event.patches``), which replay follows."""
    decided = {k: v for h in change.decision.history for k, v in h.event.patches.items()}
    if not decided:
        return change.event
    return change.event.model_copy(update={"patches": {**change.event.patches, **decided}})


LOCK_SAGAS: Final = """
SELECT id, saga_type, saga_version, trace_context, history_seq
FROM sagas WHERE id = ANY($1::uuid[]) ORDER BY id FOR NO KEY UPDATE
"""

LOCK_SAGAS_SKIP_LOCKED: Final = """
SELECT id, saga_type, saga_version, trace_context, history_seq
FROM sagas WHERE id = ANY($1::uuid[]) ORDER BY id FOR NO KEY UPDATE SKIP LOCKED
"""

_INSERT_HISTORY: Final = """
INSERT INTO saga_history (saga_id, seq, event, recorded_at, actor, annotation, ignored)
SELECT * FROM unnest($16::uuid[], $17::bigint[], $18::json[], $19::timestamptz[], $20::text[],
                     $21::jsonb[], $22::text[]) AS h(saga_id, seq, event, recorded_at, actor,
                                                     annotation, ignored)
WHERE h.saga_id IN (SELECT id FROM saga)
"""

_DELETE_TIMERS: Final = """
DELETE FROM timers WHERE id = ANY($23::text[]) AND saga_id IN (SELECT id FROM saga)
"""

#: A saga that ended keeps no timer ($35; the core cancels its own, this is the backstop):
#: none is inserted for it and its others are deleted (deliveries, which carry an event, stay).
_INSERT_TIMERS: Final = """
INSERT INTO timers (id, saga_id, due_at, step, phase, attempt, kind)
SELECT * FROM unnest($24::text[], $25::uuid[], $26::timestamptz[], $27::text[], $28::text[],
                     $29::int[], $30::text[]) AS t(id, saga_id, due_at, step, phase, attempt, kind)
WHERE t.saga_id IN (SELECT id FROM saga) AND t.saga_id <> ALL($35::uuid[])
ON CONFLICT (id) DO NOTHING
"""

_END_TIMERS: Final = """
DELETE FROM timers WHERE saga_id = ANY($35::uuid[]) AND event IS NULL
  AND saga_id IN (SELECT id FROM saga)
"""

_UPDATE_SAGAS: Final = """
UPDATE sagas AS s
SET status = u.status, snapshot = u.snapshot, history_seq = u.seq, updated_at = u.now,
    last_progress_at = CASE WHEN u.progress THEN u.now ELSE s.last_progress_at END,
    stage = u.stage, active_steps = string_to_array(u.active, ' '),
    busiest_step = u.step, busiest_phase = u.phase, busiest_attempt = u.attempt,
    waiting = u.waiting, wait_due_at = u.wait_due, saga_version = u.version
FROM unnest($1::uuid[], $2::text[], $3::json[], $4::bigint[], $5::timestamptz[], $6::bool[],
            $7::text[], $8::text[], $9::text[], $10::text[], $11::int[], $31::bool[],
            $32::timestamptz[], $33::int[], $34::bigint[])
     AS u(id, status, snapshot, seq, now, progress, stage, active, step, phase, attempt,
          waiting, wait_due, version, expected)
WHERE s.id = u.id AND s.history_seq = u.expected
RETURNING s.id
"""

#: The saga rows, history rows, changed nodes, consumed and new timers and the outbox rows of
#: a batch of changes in ONE statement. Each saga's row is updated only if its history seq is
#: still the one the changes were decided on ($34: compare and set); everything else of a saga
#: is written only if its row was (``saga``). Returns the ids of the sagas written and the
#: outbox rows leased to this writer ($41 > 0: it publishes them itself after the commit, see
#: ``outbox_relay.direct``). Inside a transaction that locked the rows every saga is written;
#: alone (autocommit) it is a whole state change in one round trip, which a stale cached state
#: cannot write.
WRITE_SAGAS: Final = (
    "WITH saga AS (" + _UPDATE_SAGAS + "), nodes AS ("  # noqa: S608 - constants
    + UPSERT_NODES
    + "), history AS (" + _INSERT_HISTORY + "), gone AS (" + _DELETE_TIMERS
    + "), due AS (" + _INSERT_TIMERS + "), ended AS (" + _END_TIMERS + "), outbox AS ("
    + insert_select(36, only_keys="SELECT id::text FROM saga", lease="$41::interval") + ")"
    + """
SELECT (SELECT array_agg(id) FROM saga) AS sagas, l.shards, l.ids, l.message_ids
FROM (SELECT array_agg(shard::int) AS shards, array_agg(id) AS ids, array_agg(message_id)
          AS message_ids
      FROM outbox WHERE leased) AS l
"""
)

#: Step phase of an active step -> the protocol phase whose attempts it is on.
_ATTEMPT_PHASE: Final = {step: phase for phase, step in ACTIVE_PHASE.items()}


def activity(state: SagaState) -> tuple[str, str | None, str | None, int]:
    """The active step keys (space-separated; keys hold no spaces) and the active step with
    the most attempts in its phase, its phase and that number: the stuck scan's columns.
    Attempts count in the current retry budget, so an operator's retry restarts them."""
    keys = state.active_steps()
    best: tuple[int, str] | None = None
    for key in keys:
        step = state.steps[key]
        attempt = step.used(_ATTEMPT_PHASE[step.phase])
        if best is None or attempt > best[0]:
            best = (attempt, key)
    if best is None:
        return "", None, None, 0
    return " ".join(keys), best[1], state.steps[best[1]].phase.value, best[0]


def deliberate_wait(state: SagaState) -> tuple[bool, datetime | None]:
    """Whether the saga only waits on purpose (a delayed start, a sleep, a wait for a signal;
    no command in flight), and the latest time one of those waits ends (None: one has no
    timeout)."""
    if state.status is Status.SCHEDULED:
        return True, state.start_at
    waits = state.waiting_nodes()
    if not waits or state.active_steps():
        return False, None
    due = [state.steps[k].due_at for k in waits]
    return True, (None if any(d is None for d in due) else max(d for d in due if d))


_INSERT_DELIVERIES: Final = """
INSERT INTO timers (id, saga_id, due_at, kind, event)
SELECT u.id, u.saga_id, u.due_at, 'deliver', u.event
FROM unnest($1::text[], $2::uuid[], $3::timestamptz[], $4::json[]) AS u(id, saga_id, due_at, event)
ON CONFLICT (id) DO NOTHING
"""


def command_headers(trace_context: Mapping[str, str]) -> dict[str, str]:
    """Kafka headers of a command: its kind, the protocol and the saga's trace context."""
    from participant_sdk.protocol import PROTOCOL_VERSION

    headers = {HEADER_MESSAGE_KIND: KIND_COMMAND, HEADER_PROTOCOL: str(PROTOCOL_VERSION)}
    for name in (HEADER_TRACEPARENT, HEADER_TRACESTATE):
        value = trace_context.get(name)
        if value:
            headers[name] = value
    return headers


class _Batch:
    """The parameters of :data:`WRITE_SAGAS` for a list of changes, and what else they need."""

    __slots__ = ("args", "consumed", "finals", "headers", "messages", "nodes", "tasks",
                 "timers")

    def __init__(self, changes: Sequence[Change]) -> None:
        # One history row per change; one spine update per saga, the last change of each
        # winning; the nodes that changed since the row was locked.
        last: dict[UUID, Change] = {}
        first_seq: dict[UUID, int] = {}
        progressed: dict[UUID, bool] = {}
        touched: dict[UUID, dict[str, None]] = {}
        for change in changes:
            saga_id = change.saga.saga_id
            last[saga_id] = change
            first_seq.setdefault(saga_id, change.seq)
            touched.setdefault(saga_id, {}).update(dict.fromkeys(change.decision.touched))
            progressed[saga_id] = progressed.get(saga_id, False) or change.decision.ignored is None
        finals = self.finals = list(last.values())
        active = [activity(c.decision.state) for c in finals]
        waits = [deliberate_wait(c.decision.state) for c in finals]
        self.nodes = node_writes((c.saga.saga_id, c.saga.base, c.decision.state,
                                  touched[c.saga.saga_id]) for c in finals)
        deletes, timers = self.timers = _timer_rows(changes)
        self.consumed = [(c.saga.saga_id, s.signal_id, s.node, c.now) for c in changes
                         for s in c.decision.consumed_signals]
        messages = self.messages = [
            OutboxMessage(
                topic=cmd.topic,
                key=str(c.saga.saga_id),
                payload=encode(cmd.envelope),
                message_id=cmd.envelope.message_id,
                headers=command_headers(c.trace_context or c.saga.trace_context),
            )
            for c in changes
            for cmd in c.decision.commands
        ]
        self.tasks = [TaskWrite(c.saga.saga_id, c.seq, i, c.now, task)
                      for c in changes for i, task in enumerate(c.decision.tasks)]
        messages.extend(task_messages(self.tasks))
        outbox = insert_args(messages)
        self.headers: list[str] = outbox[4]
        self.args: list[Any] = [
            [c.saga.saga_id for c in finals],
            [c.decision.state.status.value for c in finals],
            [spine_json(c.decision.state) for c in finals],
            [c.seq for c in finals],
            [c.now for c in finals],
            [progressed[c.saga.saga_id] for c in finals],
            [c.decision.state.stage.value for c in finals],
            [a[0] for a in active], [a[1] for a in active], [a[2] for a in active],
            [a[3] for a in active],
            *self.nodes.upsert_args(),
            [c.saga.saga_id for c in changes],
            [c.seq for c in changes],
            [dumps(recorded_event(c).to_json()) for c in changes],
            [c.now for c in changes],
            [c.actor for c in changes],
            [dumps([h.note for h in c.decision.history]) for c in changes],
            [c.decision.ignored for c in changes],
            deletes,
            [t.timer_id for _, t in timers],
            [saga_id for saga_id, _ in timers],
            [t.due_at for _, t in timers],
            [t.step for _, t in timers],
            [t.phase.value if t.phase is not None else None for _, t in timers],
            [t.attempt for _, t in timers],
            [t.kind.value for _, t in timers],
            [w[0] for w in waits],
            [w[1] for w in waits],
            # A migration moves the saga to another version; every other change keeps it.
            [c.decision.state.version for c in finals],
            # The history seq each saga's changes were decided on.
            [first_seq[c.saga.saga_id] - 1 for c in finals],
            [c.saga.saga_id for c in finals if c.decision.state.status.is_terminal],
            *outbox,
        ]

    def leased(self, row: Any) -> list[LeasedRow]:
        """The outbox rows leased to this writer, from the statement's result ``row``."""
        return leased_rows(row["shards"], row["ids"], row["message_ids"], self.messages,
                           self.headers)

    def earliest(self, written: set[UUID] | None = None) -> datetime | None:
        """The earliest due time of the timers inserted (of the sagas ``written``)."""
        finished = {c.saga.saga_id for c in self.finals if c.decision.state.status.is_terminal}
        return min((t.due_at for saga_id, t in self.timers[1]
                    if saga_id not in finished and (written is None or saga_id in written)),
                   default=None)


async def write_changes(conn: asyncpg.Connection, changes: Sequence[Change],
                        deliveries: Sequence[tuple[Delivery, datetime]] = (), *,
                        leased: list[LeasedRow] | None = None,
                        lease: timedelta = timedelta(0)) -> datetime | None:
    """Persist ``changes`` (in order) and their deliveries, and ``deliveries`` made by the
    store itself, in the caller's transaction, whose saga rows are locked; return the earliest
    due time of the timers inserted. With ``leased`` (and a ``lease``), the commands' outbox
    rows are leased to the caller, who publishes them after the commit: they are appended to
    ``leased``."""
    sent = [(d, c.now) for c in changes for d in c.decision.deliveries] + list(deliveries)
    if sent:
        await write_deliveries(conn, sent)
    if not changes:
        return min(at for _, at in sent) if sent else None
    batch = _Batch(changes)
    row = await conn.fetchrow(WRITE_SAGAS, *batch.args,
                              lease if leased is not None else timedelta(0))
    assert row is not None
    if len(row["sagas"] or ()) != len(batch.finals):
        raise RuntimeError("a locked saga row changed under its lock: history seq moved")
    if leased is not None:
        leased.extend(batch.leased(row))
    await batch.nodes.delete(conn)
    await mark_consumed(conn, batch.consumed)
    await write_tasks(conn, batch.tasks)
    earliest = batch.earliest()
    if sent:
        first = min(at for _, at in sent)
        earliest = first if earliest is None else min(earliest, first)
    return earliest


async def write_at_once(conn: asyncpg.Connection, changes: Sequence[Change], *,
                        lease: timedelta = timedelta(0)
                        ) -> tuple[set[UUID], datetime | None, list[LeasedRow]] | None:
    """Write ``changes``, decided on states read from no lock, as ONE autocommitted statement:
    each saga's part only if its row is still at the history seq its changes were decided on.
    Returns the ids of the sagas written, the earliest timer they inserted and the outbox rows
    leased to the caller (with a ``lease``); ``None`` (and nothing written) when the changes
    need more than that statement (deliveries, consumed signals, human tasks, deleted nodes):
    the caller takes the locking path then."""
    if any(c.decision.deliveries or c.decision.consumed_signals or c.decision.tasks
           for c in changes):
        return None
    batch = _Batch(changes)
    if batch.nodes.deleted:
        return None
    row = await conn.fetchrow(WRITE_SAGAS, *batch.args, lease)
    assert row is not None
    written = set(row["sagas"] or ())
    return written, batch.earliest(written), batch.leased(row)


async def write_deliveries(conn: asyncpg.Connection,
                           deliveries: Sequence[tuple[Delivery, datetime]]) -> None:
    """Deliveries as timers due at once; a re-sent one (same message id) is stored once."""
    await conn.execute(
        _INSERT_DELIVERIES,
        [f"{d.saga_id}:deliver:{d.message_id}" for d, _ in deliveries],
        [d.saga_id for d, _ in deliveries],
        [at for _, at in deliveries],
        [dumps(d.event.to_json()) for d, _ in deliveries],
    )


def _timer_rows(changes: Sequence[Change]) -> tuple[list[str], list[tuple[UUID, TimerRequest]]]:
    """The timer ids to delete (cancelled or fired) and the timers to insert, in id order;
    a timer inserted then consumed within ``changes`` is not inserted."""
    inserts: dict[str, tuple[UUID, TimerRequest]] = {}
    deletes: set[str] = set()
    for change in changes:
        consumed = list(change.decision.cancel_timers)
        if change.fired_timer is not None:
            consumed.append(change.fired_timer)
        for timer_id in consumed:
            inserts.pop(timer_id, None)
            deletes.add(timer_id)
        for timer in change.decision.timers:
            inserts[timer.timer_id] = (change.saga.saga_id, timer)
            deletes.discard(timer.timer_id)
    return sorted(deletes), [inserts[k] for k in sorted(inserts)]
