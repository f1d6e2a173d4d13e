"""Applying a batch of signal records from ``{prefix}.signals``; bad ones become dead letters.

The whole batch is ONE transaction (:meth:`SagaStore.signal_many`): an envelope with
``start`` starts its saga first unless it exists, then the sagas are locked in id order, each
signal row inserted once per id, the core applied to each in record order. A record that
cannot be decoded, or that the store refuses for good (unknown saga or signal, a payload
failing its model, a finished saga, a start refused) is kept as a dead letter with the
reason, in that transaction; only database trouble raises, so the batch is fetched again
(signals already applied are then duplicates, applied once). The worker's signal loop and
the signal function (:mod:`coordinator.runtime.functions.instance`) both call it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from coordinator.runtime.signal_wire import decode_signal
from coordinator.store import PendingSignal, SagaStart, SagaStore, SignalResult
from participant_sdk.dead_letters import DeadLetter
from participant_sdk.protocol import ProtocolError

__all__ = ["SIGNAL_SOURCE", "SignalBatch", "handle_signal_batch"]

log = logging.getLogger(__name__)

SIGNAL_SOURCE = "coordinator:signals"


@dataclass(slots=True)
class SignalBatch:
    applied: int = 0
    duplicates: int = 0
    dead_lettered: int = 0


async def handle_signal_batch(store: SagaStore, records: Sequence[Any]) -> SignalBatch:
    out = SignalBatch()
    requests: list[PendingSignal] = []
    undecodable: list[DeadLetter] = []
    for record in records:
        letter = DeadLetter(source=SIGNAL_SOURCE, reason="", payload=record.value,
                            key=record.key,
                            headers=[(k, bytes(v)) for k, v in record.headers or ()],
                            topic=record.topic, partition=record.partition,
                            offset=record.offset)
        try:
            if record.value is None:
                raise ProtocolError("record has no value")
            envelope = decode_signal(record.value)
        except ProtocolError as exc:
            undecodable.append(replace(letter, reason=str(exc)))
            continue
        start = envelope.start
        requests.append(PendingSignal(
            envelope.saga_id, envelope.name, envelope.signal_id, envelope.payload,
            actor=f"kafka:{envelope.sender or 'unknown'}", dead_letter=letter,
            start=SagaStart(start.saga_type, start.input, start.version) if start else None))
    for answer in await store.signal_many(requests, dead_letters=undecodable):
        if not isinstance(answer, SignalResult):
            out.dead_lettered += 1
        elif answer.duplicate:
            out.duplicates += 1
        else:
            out.applied += 1
    out.dead_lettered += len(undecodable)
    return out
