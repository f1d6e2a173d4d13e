"""Running one command: routing, the barrier algorithm, local retries and error mapping.

This module is shared by the Kafka runner and the in-memory test harness, so both answer a
command the same way. Only the transaction differs: a :class:`CommandTransaction` is an open
transaction with a barrier store and the ``conn`` object handlers write through. Handlers run
without a savepoint: a business rejection rolls the whole transaction back and the refusal is
recorded in a second, short one (:func:`record_rejection`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import pydantic

from participant_sdk.barrier import (
    BarrierKey,
    BarrierReason,
    BarrierRecord,
    BarrierStore,
    claim_rollback_in_steps,
)
from participant_sdk.errors import BusinessRejection, error_kind_for, is_transient
from participant_sdk.handlers import Handler, HandlerContext
from participant_sdk.metrics import ParticipantMetrics
from participant_sdk.protocol import (
    CommandEnvelope,
    ErrorInfo,
    ErrorKind,
    Outcome,
    ReplyEnvelope,
    make_reply,
)

log = logging.getLogger(__name__)

_REFUSED = ErrorInfo(
    kind=ErrorKind.BARRIER_REFUSED,
    message="refused: this step was already cancelled/compensated (hanging request)",
)


class CommandTransaction(Protocol):
    """An open transaction as the executor sees it."""

    @property
    def conn(self) -> Any:
        """What handlers receive as ``ctx.conn``."""

    @property
    def barrier(self) -> BarrierStore: ...


#: Opens a transaction: commits on a clean exit, rolls back when the block raises.
BeginTransaction = Callable[[], AbstractAsyncContextManager[CommandTransaction]]


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalRetry:
    """How transient local failures are retried before a FAILED/TRANSIENT reply."""

    attempts: int = 5
    initial: timedelta = timedelta(milliseconds=50)
    maximum: timedelta = timedelta(seconds=2)


@dataclass(frozen=True, slots=True)
class Execution:
    """The reply to send, and why the command belongs in the dead letters (if it does)."""

    reply: ReplyEnvelope
    dead_letter_reason: str | None = None
    committed: bool = False


async def execute(
    command: CommandEnvelope,
    *,
    participant: str,
    handlers: dict[tuple[str, Any], Handler],
    begin: BeginTransaction,
    retry: LocalRetry = LocalRetry(),
    metrics: ParticipantMetrics | None = None,
    after_commit: Callable[[CommandEnvelope], Awaitable[None] | None] | None = None,
) -> Execution:
    """Answer ``command``: never raises for a handler failure, it becomes the reply."""
    started = time.perf_counter()
    execution = await _execute(command, participant, handlers, begin, retry, after_commit)
    if metrics is not None:
        metrics.observe(command, execution.reply, time.perf_counter() - started)
    return execution


async def _execute(
    command: CommandEnvelope,
    participant: str,
    handlers: dict[tuple[str, Any], Handler],
    begin: BeginTransaction,
    retry: LocalRetry,
    after_commit: Callable[[CommandEnvelope], Awaitable[None] | None] | None,
) -> Execution:
    handler = handlers.get((command.action, command.phase))
    if command.participant != participant or handler is None:
        reason = (
            f"participant {participant!r} has no handler for action {command.action!r} "
            f"phase {command.phase.value!r} (command addressed to {command.participant!r})"
        )
        return _bad_command(command, reason)
    try:
        body = handler.parse(command.payload)
    except pydantic.ValidationError as exc:
        return _bad_command(command, f"invalid payload for {command.action!r}: {exc}")

    try:
        reply = await _with_retries(retry, lambda: _attempt(begin, handler, command, body))
    except Exception as exc:
        kind = error_kind_for(exc)
        log.log(
            logging.WARNING if kind is ErrorKind.TRANSIENT else logging.ERROR,
            "command %s (saga %s step %s %s attempt %d) failed: %s",
            command.message_id,
            command.saga_id,
            command.step,
            command.phase.value,
            command.attempt,
            kind.value,
            exc_info=exc,
        )
        error = ErrorInfo(kind=kind, message=str(exc)[:8192] or repr(exc), type=type(exc).__name__)
        return Execution(make_reply(command, Outcome.FAILED, error=error))
    if after_commit is not None:
        maybe = after_commit(command)
        if maybe is not None:
            await maybe
    return Execution(reply, committed=True)


async def _attempt(begin: BeginTransaction, handler: Handler, command: CommandEnvelope,
                   body: Any) -> ReplyEnvelope:
    try:
        async with begin() as tx:
            return await run_in_transaction(tx, handler, command, body)
    except _Rejected as rejected:
        # The handler's transaction rolled back (its writes and the pending row); record the
        # refusal alone.
        async with begin() as tx:
            return await record_rejection(tx, command, rejected.record)


async def _with_retries(retry: LocalRetry, attempt: Callable[[], Awaitable[ReplyEnvelope]]
                        ) -> ReplyEnvelope:
    """Run ``attempt`` until it succeeds, a failure is not transient or ``retry.attempts`` are
    spent (the last error is raised); between tries wait ``initial * 2**(n-1)`` plus up to
    ``initial`` of jitter, at most ``maximum``. (A plain loop: tenacity's machinery cost
    ~40 us per command, on every command, for the rare retry.)"""
    initial, maximum = retry.initial.total_seconds(), retry.maximum.total_seconds()
    number = 1
    while True:
        try:
            return await attempt()
        except Exception as exc:
            if number >= retry.attempts or not is_transient(exc):
                raise
        await asyncio.sleep(max(0.0, min(initial * 2 ** (number - 1)
                                         + random.uniform(0, initial), maximum)))
        number += 1


def _bad_command(command: CommandEnvelope, reason: str) -> Execution:
    log.error("bad command %s: %s", command.message_id, reason)
    error = ErrorInfo(kind=ErrorKind.BAD_COMMAND, message=reason[:8192])
    return Execution(make_reply(command, Outcome.REJECTED, error=error), dead_letter_reason=reason)


async def run_in_transaction(
    tx: CommandTransaction, handler: Handler, command: CommandEnvelope, body: Any
) -> ReplyEnvelope:
    """The barrier algorithm, inside one open transaction.

    Rollback phases first insert a ``blocked`` marker for their forward phase: if it goes in,
    the try/action never ran (null compensation), and the marker refuses it if it comes late
    (:meth:`~participant_sdk.barrier.BarrierStore.claim_rollback`, one statement on
    Postgres). Then every phase inserts its own row; a conflict means a duplicate, answered
    from the row. Insert-before-read makes concurrent try and cancel serialise on the unique
    key.

    The own row goes in with the outcome it will have if the handler returns nothing
    (``ok``): until this transaction commits no one else can read it, and a handler that
    fails or refuses rolls it back. Only a handler's result (or a verdict the claim could not
    reach) costs a second write, the settle.
    """
    key = BarrierKey(command.saga_id, command.step, command.phase)
    null_compensation: bool | None = False
    claimed = BarrierRecord(BarrierReason.HANDLED, Outcome.OK, message_id=command.message_id)
    if command.phase.is_rollback:
        marker = BarrierRecord(
            BarrierReason.BLOCKED, Outcome.REJECTED, error=_REFUSED, message_id=command.message_id
        )
        claim_rollback = getattr(tx.barrier, "claim_rollback", None)
        claim = await (claim_rollback(key, marker, command.message_id)
                       if claim_rollback is not None  # a store written before the claim
                       else claim_rollback_in_steps(tx.barrier, key, marker, command.message_id))
        inserted, null_compensation = claim.inserted, claim.null_compensation
        if null_compensation:
            claimed = BarrierRecord(BarrierReason.NULL_COMPENSATION, Outcome.OK,
                                    message_id=command.message_id)
    else:
        inserted = await tx.barrier.insert(key, claimed)
    if not inserted:
        stored = await tx.barrier.get(key)
        if stored is None or stored.outcome is None:  # pragma: no cover - impossible once committed
            raise RuntimeError(f"barrier row {key} vanished or is unsettled")
        log.info("duplicate command %s for %s: replaying stored reply", command.message_id, key)
        return make_reply(command, stored.outcome, result=stored.result, error=stored.error)
    if null_compensation is None:  # the forward row committed while the claim waited for it
        origin = await tx.barrier.get(key.origin())
        null_compensation = origin is None or origin.outcome is not Outcome.OK

    if null_compensation:
        record = claimed if claimed.reason is BarrierReason.NULL_COMPENSATION else BarrierRecord(
            BarrierReason.NULL_COMPENSATION, Outcome.OK, message_id=command.message_id
        )
    else:
        ctx = HandlerContext(command=command, conn=tx.conn)
        try:
            result = await handler.run(ctx, body)
        except BusinessRejection as exc:
            error = ErrorInfo(kind=ErrorKind.BUSINESS, message=exc.message[:8192],
                              type=type(exc).__name__)
            raise _Rejected(BarrierRecord(
                BarrierReason.HANDLED, Outcome.REJECTED, result=exc.details, error=error,
                message_id=command.message_id,
            )) from exc
        record = claimed if result is None else BarrierRecord(
            BarrierReason.HANDLED, Outcome.OK, result=result, message_id=command.message_id
        )
    if record != claimed:
        await tx.barrier.settle(key, record)
    return make_reply(command, record.outcome or Outcome.OK, result=record.result,
                      error=record.error)


class _Rejected(Exception):
    """The handler refused: roll its transaction back, then :func:`record_rejection`."""

    def __init__(self, record: BarrierRecord) -> None:
        super().__init__(record.error.message if record.error is not None else "rejected")
        self.record = record


async def record_rejection(
    tx: CommandTransaction, command: CommandEnvelope, record: BarrierRecord
) -> ReplyEnvelope:
    """Store a business rejection in a fresh transaction (no handler writes in it).

    The handler ran without a savepoint, so its rejection rolled back the whole transaction,
    the pending barrier row included. Between that rollback and this insert another
    transaction may have taken the key: a duplicate of this command (settled, or still
    running: the insert waits for it), or a cancel/compensation that wrote its ``blocked``
    marker because the forward phase looked absent. Then the stored row is the answer, as for
    any duplicate; either way the handler's writes are gone and the reply is consistent with
    the barrier.
    """
    key = BarrierKey(command.saga_id, command.step, command.phase)
    if not await tx.barrier.insert(key, record):
        stored = await tx.barrier.get(key)
        if stored is None or stored.outcome is None:  # pragma: no cover - impossible once committed
            raise RuntimeError(f"barrier row {key} vanished or is unsettled")
        log.info("command %s rejected, but %s was settled meanwhile: replying from the row",
                 command.message_id, key)
        return make_reply(command, stored.outcome, result=stored.result, error=stored.error)
    return make_reply(command, Outcome.REJECTED, result=record.result, error=record.error)
