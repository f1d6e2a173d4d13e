"""The shortcuts of a participant command's path give what the general code gave."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from aiokafka.partitioner import DefaultPartitioner

from participant_sdk.handlers import HandlerContext, Participant, on_cancel, on_confirm, on_try
from participant_sdk.metrics import ParticipantMetrics
from participant_sdk.partitioning import KeyHashPartitioner
from participant_sdk.protocol import (
    REPLY_ID_NAMESPACE,
    CommandEnvelope,
    ErrorInfo,
    ErrorKind,
    Outcome,
    Phase,
    make_reply,
    reply_message_id,
)
from participant_sdk.testing import ParticipantHarness, _StagedBarrier


def test_reply_message_id_is_uuid5() -> None:
    for _ in range(2000):
        command_id = uuid.uuid4()
        assert reply_message_id(command_id) == uuid.uuid5(REPLY_ID_NAMESPACE, str(command_id))
    fixed = uuid.UUID("00000000-0000-0000-0000-000000000000")
    assert reply_message_id(fixed) == uuid.uuid5(REPLY_ID_NAMESPACE, str(fixed))


def test_key_hash_partitioner_is_the_default_partitioner() -> None:
    rng = random.Random(7)
    default = DefaultPartitioner()
    cached = KeyHashPartitioner(size=50)
    keys = [str(uuid.UUID(int=rng.getrandbits(128))).encode() for _ in range(120)]
    keys += [rng.randbytes(rng.randrange(0, 9)) for _ in range(40)]  # every tail length
    for _ in range(3):  # hits, misses and clears of the kept hashes
        for key in keys:
            partitions = list(range(rng.randrange(1, 13)))
            assert cached(key, partitions, partitions) == default(key, partitions, partitions)


def test_key_hash_partitioner_spreads_keyless_records_like_the_default() -> None:
    cached = KeyHashPartitioner()
    assert {cached(None, [0, 1, 2], [2]) for _ in range(20)} == {2}
    assert {cached(None, [0, 1], []) for _ in range(200)} == {0, 1}
    with pytest.raises(ValueError):
        KeyHashPartitioner(size=0)


def test_metrics_count_every_command_on_the_kept_children() -> None:
    metrics = ParticipantMetrics()
    command = CommandEnvelope(
        message_id=uuid.uuid4(), saga_id=uuid.uuid4(), saga_type="t", step="s",
        phase=Phase.TRY, attempt=1, participant="p", action="a", reply_to="r")
    ok = make_reply(command, Outcome.OK)
    refused = make_reply(command, Outcome.REJECTED,
                         error=ErrorInfo(kind=ErrorKind.BUSINESS, message="no"))
    for reply in (ok, ok, refused, ok):
        metrics.observe(command, reply, 0.002)
    sample = metrics.registry.get_sample_value
    labels = {"participant": "p", "action": "a", "phase": "try"}
    assert sample("sagaflow_participant_commands_total",
                  {**labels, "outcome": "ok", "error_kind": ""}) == 3
    assert sample("sagaflow_participant_commands_total",
                  {**labels, "outcome": "rejected", "error_kind": "business"}) == 1
    assert sample("sagaflow_participant_command_duration_seconds_count", labels) == 4


class _Holds(Participant):
    name = "holds"

    @on_try("hold")
    async def hold(self, ctx: HandlerContext, body: dict[str, Any]) -> dict[str, Any]:
        return {"held": True}

    @on_confirm("hold")
    async def confirm(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        return None

    @on_cancel("hold")
    async def cancel(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        return None


async def _rollback_story() -> tuple[list[tuple[str, str | None]], dict[Any, Any]]:
    harness = ParticipantHarness(_Holds())
    tried, untried = uuid.uuid4(), uuid.uuid4()
    for saga, phase in ((tried, Phase.TRY), (tried, Phase.CANCEL), (tried, Phase.CANCEL),
                        (untried, Phase.CANCEL), (untried, Phase.TRY)):
        await harness.send(harness.command("hold", phase, {}, saga_id=saga, step="s"))
    replies = [(r.outcome.value, r.error.kind.value if r.error else None)
               for r in harness.replies]
    rows = {(k.saga_id == tried, k.phase.value): (v.reason.value, v.outcome)
            for k, v in harness.barrier.rows.items()}
    return replies, rows


async def test_a_barrier_store_without_the_claim_answers_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store written before ``claim_rollback`` (insert, get and settle only) still serves
    cancels: the executor claims in steps."""
    with_claim = await _rollback_story()
    monkeypatch.delattr(_StagedBarrier, "claim_rollback")
    assert await _rollback_story() == with_claim
    replies, rows = with_claim
    assert replies == [("ok", None), ("ok", None), ("ok", None), ("ok", None),
                       ("rejected", "barrier_refused")]
    assert rows[(False, "cancel")][0] == "null_compensation"
    assert rows[(True, "cancel")][0] == "handled"
