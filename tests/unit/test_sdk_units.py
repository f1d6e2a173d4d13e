"""Unit tests of the participant SDK: offsets, harness, barrier logic, errors, public surface."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from pydantic import BaseModel

import participant_sdk
from participant_sdk import (
    BusinessRejection,
    ConfigurationError,
    ErrorKind,
    HandlerContext,
    Outcome,
    Participant,
    Phase,
    on_action,
    on_cancel,
    on_try,
)
from participant_sdk.barrier import BarrierKey, BarrierReason
from participant_sdk.errors import error_kind_for, is_transient
from participant_sdk.metrics import ParticipantMetrics
from participant_sdk.offsets import OffsetTracker
from participant_sdk.protocol import reply_message_id
from participant_sdk.testing import MemoryTransaction, ParticipantHarness


def test_offsets_commit_only_the_contiguous_finished_prefix() -> None:
    t: OffsetTracker[str] = OffsetTracker()
    for o in range(10, 15):
        t.started("p0", o)
    assert t.committable() == {"p0": 10}
    t.finished("p0", 12)
    t.finished("p0", 11)
    assert t.committable() == {"p0": 10}  # 10 still in flight
    t.finished("p0", 10)
    assert t.committable() == {"p0": 13}
    t.mark_committed({"p0": 13})
    assert t.committable() == {}
    t.finished("p0", 14)
    t.finished("p0", 13)
    assert t.committable() == {"p0": 15} and t.in_flight() == 0
    t.forget(["p0"])
    t.finished("p0", 99)  # revoked meanwhile: ignored
    assert t.committable() == {}


class Body(BaseModel):
    n: int


class Demo(Participant):
    name = "demo"

    def __init__(self) -> None:
        self.calls = 0

    @on_try("r")
    async def r_try(self, ctx: HandlerContext, body: Body) -> dict[str, int]:
        self.calls += 1
        assert isinstance(ctx.conn, MemoryTransaction)
        await ctx.conn.insert("t", {"n": body.n})
        if body.n < 0:
            raise BusinessRejection("negative")
        return {"n": body.n}

    @participant_sdk.on_confirm("r")
    async def r_confirm(self, ctx: HandlerContext, body: Body) -> None:
        self.calls += 1

    @on_cancel("r")
    async def r_cancel(self, ctx: HandlerContext, body: Body) -> None:
        self.calls += 1


async def test_harness_duplicate_rejection_and_barrier_rows() -> None:
    demo = Demo()
    h = ParticipantHarness(demo)
    saga = uuid.uuid4()
    cmd = h.command("r", Phase.TRY, {"n": -1}, saga_id=saga)
    r1, r2 = await h.send(cmd), await h.send(cmd)
    assert r1 == r2 and r1.outcome is Outcome.REJECTED and demo.calls == 1
    assert r1.message_id == reply_message_id(cmd.message_id)
    assert h.tables.get("t", []) == []  # rejected: writes rolled back
    row = h.barrier.rows[BarrierKey(saga, "r", Phase.TRY)]
    assert row.reason is BarrierReason.HANDLED and row.outcome is Outcome.REJECTED
    cancel = await h.send(h.command("r", Phase.CANCEL, {"n": -1}, saga_id=saga))
    assert cancel.outcome is Outcome.OK and demo.calls == 1
    assert h.barrier.rows[BarrierKey(saga, "r", Phase.CANCEL)].reason is (
        BarrierReason.NULL_COMPENSATION
    )


async def test_harness_transient_failures_are_retried_then_reported() -> None:
    h = ParticipantHarness(Demo())
    lost = asyncpg.exceptions.ConnectionDoesNotExistError("connection lost")
    h.fail_next_transactions(lost, times=2)
    ok = await h.send(h.command("r", Phase.TRY, {"n": 1}))
    assert ok.outcome is Outcome.OK
    h.fail_next_transactions(lost, times=10)
    failed = await h.send(h.command("r", Phase.TRY, {"n": 1}))
    assert failed.outcome is Outcome.FAILED and failed.error is not None
    assert failed.error.kind is ErrorKind.TRANSIENT
    assert failed.error.type == "ConnectionDoesNotExistError"


async def test_harness_dead_letters_and_metrics() -> None:
    metrics = ParticipantMetrics()
    h = ParticipantHarness(Demo(), metrics=metrics)
    assert await h.send_raw(b"{not json") is None
    bad = await h.send(h.command("nope", Phase.ACTION, {}))
    assert bad.error is not None and bad.error.kind is ErrorKind.BAD_COMMAND
    assert len(h.dead_letters) == 2
    await h.send(h.command("r", Phase.TRY, {"n": 2}))
    value = metrics.registry.get_sample_value(
        "sagaflow_participant_commands_total",
        {"participant": "demo", "action": "r", "phase": "try", "outcome": "ok", "error_kind": ""},
    )
    assert value == 1


def test_declaration_errors() -> None:
    class NoName(Participant):
        @on_action("a")
        async def a(self, ctx: HandlerContext, body: Body) -> None: ...

    with pytest.raises(ConfigurationError, match="name"):
        NoName().validate()

    class HalfTcc(Participant):
        name = "half"

        @on_try("a")
        async def a(self, ctx: HandlerContext, body: Body) -> None: ...

    with pytest.raises(ConfigurationError, match="try, confirm and cancel"):
        HalfTcc().validate()

    with pytest.raises(ConfigurationError, match="async def"):
        on_action("x")(lambda self, ctx, body: None)  # type: ignore[arg-type,return-value]


def test_error_classification() -> None:
    assert is_transient(asyncpg.exceptions.SerializationError("x"))
    assert is_transient(asyncpg.exceptions.DeadlockDetectedError("x"))
    assert is_transient(asyncpg.exceptions.ConnectionFailureError("x"))
    assert not is_transient(asyncpg.exceptions.UniqueViolationError("x"))
    assert not is_transient(ValueError("x"))
    assert error_kind_for(BusinessRejection("no")) is ErrorKind.BUSINESS
    assert error_kind_for(participant_sdk.TransientError("later")) is ErrorKind.TRANSIENT
    assert error_kind_for(KeyError("k")) is ErrorKind.UNEXPECTED


def test_public_surface_is_pinned() -> None:
    assert sorted(participant_sdk.__all__) == sorted([
        "BARRIER_TABLE", "DEAD_LETTER_TABLE", "PROTOCOL_VERSION", "BusinessRejection",
        "CommandBatchHandler", "CommandBatchResult",
        "CommandEnvelope", "ConfigurationError", "DeadLetter", "ErrorInfo", "ErrorKind",
        "HandlerContext", "LocalRetry", "Outcome", "Participant", "ParticipantError",
        "ParticipantMetrics", "ParticipantRunner", "ParticipantSettings", "Phase",
        "ProtocolError", "ReplyEnvelope", "TransientError", "command_topic", "handles",
        "install_barrier", "install_dead_letters", "list_dead_letters", "on_action",
        "on_cancel", "on_compensate", "on_confirm", "on_try", "purge_barrier",
        "record_dead_letter", "reply_topic", "run_participant",
    ])
    for name in participant_sdk.__all__:
        assert hasattr(participant_sdk, name)


def test_startup_retries_only_unavailable_services() -> None:
    import asyncpg
    from aiokafka.errors import KafkaConnectionError

    from participant_sdk.startup import is_unavailable

    assert is_unavailable(ConnectionRefusedError())
    assert is_unavailable(asyncpg.CannotConnectNowError("the database system is starting up"))
    assert is_unavailable(KafkaConnectionError())
    assert not is_unavailable(asyncpg.InvalidPasswordError("wrong password"))
    assert not is_unavailable(ValueError("bad dsn"))


async def test_local_retries_try_the_set_number_of_times_and_only_transient_failures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from participant_sdk import executor

    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(executor.asyncio, "sleep", sleep)
    retry = participant_sdk.LocalRetry(attempts=4, initial=timedelta(milliseconds=50),
                                       maximum=timedelta(milliseconds=120))
    calls = 0

    async def flaky() -> Any:
        nonlocal calls
        calls += 1
        raise asyncpg.exceptions.ConnectionDoesNotExistError("lost")

    with pytest.raises(asyncpg.exceptions.ConnectionDoesNotExistError):
        await executor._with_retries(retry, flaky)
    assert calls == 4 and len(slept) == 3
    # 50 ms, 100 ms, then capped at 120 ms; each with up to 50 ms of jitter under the cap.
    assert 0.05 <= slept[0] <= 0.1 and 0.1 <= slept[1] <= 0.12 and slept[2] == 0.12

    calls, slept[:] = 0, []

    async def broken() -> Any:
        nonlocal calls
        calls += 1
        raise ValueError("a bug, not a lost connection")

    with pytest.raises(ValueError):
        await executor._with_retries(retry, broken)
    assert calls == 1 and slept == []
