"""Many signals in one transaction (``SagaStore.signal_many``, the Kafka signal path): each
answer is what a lone ``signal`` would give, refusals keep their dead letters, and nothing of
a refused signal is written."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from pydantic import BaseModel

from coordinator.language.nodes import WaitForSignal
from coordinator.language.saga import Saga
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import (
    InvalidSignalPayload,
    PendingSignal,
    SagaFinished,
    SagaNotFound,
    SagaStart,
    SagaStore,
    SignalResult,
    UnknownSignal,
)
from participant_sdk.dead_letters import DeadLetter
from tests.integration.test_store_support import migrated, verify_all

pytestmark = pytest.mark.integration


class Nothing(BaseModel):
    pass


class Approval(BaseModel):
    approver: str


class TwoApprovals(Saga):
    name = "two_approvals"
    input_model = Nothing
    steps = (WaitForSignal("first", "approved", payload=Approval),
             WaitForSignal("second", "approved", payload=Approval))


@pytest.fixture
async def store(fresh_db: str, topic_prefix: str) -> AsyncIterator[SagaStore]:
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[TwoApprovals])
    async with await SagaStore.open(fresh_db, registry, max_size=2) as store:
        yield store


def _letter(offset: int) -> DeadLetter:
    return DeadLetter(source="test:signals", reason="", payload=b"{}", topic="t", partition=0,
                      offset=offset)


async def test_a_batch_applies_in_order_once_per_id_in_one_transaction(store: SagaStore
                                                                       ) -> None:
    a = (await store.start_saga("two_approvals", {})).record.saga_id
    b = (await store.start_saga("two_approvals", {})).record.saga_id
    done = (await store.start_saga("two_approvals", {})).record.saga_id
    await store.signal(done, "approved", {"approver": "x"}, signal_id="d1")
    await store.signal(done, "approved", {"approver": "y"}, signal_id="d2")
    await store.signal(a, "approved", {"approver": "early"}, signal_id="a0")
    ghost = uuid.uuid4()

    def ask(saga: uuid.UUID, signal_id: str, approver: object, offset: int,
            name: str = "approved") -> PendingSignal:
        return PendingSignal(saga, name, signal_id, {"approver": approver}, actor="kafka:t",
                             dead_letter=_letter(offset))

    answers = await store.signal_many([
        ask(a, "a0", "resent", 0),          # applied before this batch: a duplicate
        ask(b, "b1", "ada", 1),
        ask(b, "b1", "ada again", 2),       # the same id twice in one batch: once
        ask(b, "b2", 7, 3),                 # fails its model
        ask(b, "b3", "bob", 4),             # b's second wait: b completes
        ask(b, "b4", "late", 5),            # b is finished by now
        ask(ghost, "g1", "who", 6),
        ask(a, "a1", "cy", 7, name="nope"),
        ask(a, "a2", "dee", 8),             # a's second wait
        ask(done, "d3", "z", 9),
    ], dead_letters=[_letter(10)])

    assert [type(x) for x in answers] == [
        SignalResult, SignalResult, SignalResult, InvalidSignalPayload, SignalResult,
        SagaFinished, SagaNotFound, UnknownSignal, SignalResult, SagaFinished]
    results = [x for x in answers if isinstance(x, SignalResult)]
    assert [(r.signal_id, r.duplicate) for r in results] == [
        ("a0", True), ("b1", False), ("b1", True), ("b3", False), ("a2", False)]
    for saga_id, approvers in ((a, ("early", "dee")), (b, ("ada", "bob"))):
        record = await store.get_saga(saga_id)
        assert record is not None and record.status == "completed"
        assert [record.state.steps[k].result for k in ("first", "second")] == [
            {"approver": who} for who in approvers]
    async with store.pool.acquire() as conn:
        batch = await conn.fetch(
            "SELECT saga_id, signal_id, xmin::text AS xmin FROM saga_signals "
            "WHERE signal_id = ANY($1::text[]) ORDER BY signal_id", ["a2", "b1", "b3"])
        letters = await conn.fetch(
            'SELECT "offset", reason, xmin::text AS xmin FROM sagaflow_dead_letters '
            'ORDER BY "offset"')
        stored = await conn.fetchval("SELECT count(*) FROM saga_signals")
    assert [r["signal_id"] for r in batch] == ["a2", "b1", "b3"]
    assert stored == 3 + 3  # d1, d2, a0 before; a2, b1, b3 now: nothing of a refusal
    assert [r["offset"] for r in letters] == [3, 5, 6, 7, 9, 10]
    assert letters[0]["reason"].startswith("invalid payload for signal 'approved'")
    assert len({r["xmin"] for r in [*batch, *letters]}) == 1  # one transaction wrote them all
    await verify_all(store, [a, b, done])


async def test_a_lone_signal_still_raises_its_refusal(store: SagaStore) -> None:
    with pytest.raises(SagaNotFound):
        await store.signal(uuid.uuid4(), "approved", {"approver": "x"})
    assert await store.signal_many([]) == []


class Opened(BaseModel):
    account: str


class AccountOpening(Saga):
    name = "account_opening"
    input_model = Opened
    steps = (WaitForSignal("kyc", "approved", payload=Approval),)


async def test_signal_with_start_in_a_batch_starts_once_and_refuses_bad_starts(
        fresh_db: str, topic_prefix: str) -> None:
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[AccountOpening])
    async with await SagaStore.open(fresh_db, registry, max_size=2) as store:
        new, other = uuid.uuid4(), uuid.uuid4()
        start = SagaStart("account_opening", {"account": "a-1"})

        def ask(saga: uuid.UUID, signal_id: str, begin: SagaStart | None) -> PendingSignal:
            return PendingSignal(saga, "approved", signal_id, {"approver": "kyc-bot"},
                                 actor="kafka:kyc", dead_letter=_letter(len(signal_id)),
                                 start=begin)

        answers = await store.signal_many([
            ask(new, "s1", start),
            ask(new, "s1", start),  # a redelivery: the saga exists, the signal is a duplicate
            ask(new, "s22", SagaStart("account_opening", {"account": "a-2"})),  # other input
            ask(other, "s333", SagaStart("account_opening", {"account": 7})),  # bad input
            ask(other, "s4444", SagaStart("no_such_saga", {})),
            PendingSignal(other, "nope", "s5", {}, start=start),  # a signal it would refuse
        ])
        assert [type(a).__name__ for a in answers] == [
            "SignalResult", "SignalResult", "SagaConflict", "InvalidInput", "UnknownSagaType",
            "UnknownSignal"]
        first, again = answers[0], answers[1]
        assert isinstance(first, SignalResult) and isinstance(again, SignalResult)
        assert (first.started, first.duplicate) == (True, False)
        assert (again.started, again.duplicate) == (False, True)
        record = await store.get_saga(new)
        assert record is not None and record.status == "completed"
        assert await store.get_saga(other) is None  # no start without its signal
        async with store.pool.acquire() as conn:
            letters = await conn.fetchval("SELECT count(*) FROM sagaflow_dead_letters")
        assert letters == 3
        await verify_all(store, [new])
