"""Applying a batch of signal records from ``{prefix}.signals``; bad ones become dead letters.

Each signal is its own transaction (:meth:`SagaStore.signal`): a saga row locked, the signal
row inserted once per id, the core applied. A record that cannot be decoded, or that the
store refuses for good (unknown saga or signal, a payload failing its model, a finished saga)
is kept as a dead letter with the reason; only database trouble raises, so the batch is
fetched again (signals already applied are then duplicates, applied once). The worker's
signal loop and the signal function (:mod:`coordinator.functions`) both call it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from coordinator.engine import EngineError
from coordinator.signal_wire import decode_signal
from coordinator.store import SagaStore, StoreError, TransientStoreError
from coordinator.store.store import CONNECTION_ERRORS
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
            result = await store.signal(envelope.saga_id, envelope.name, envelope.payload,
                                        signal_id=envelope.signal_id,
                                        actor=f"kafka:{envelope.sender or 'unknown'}")
        except (TransientStoreError, *CONNECTION_ERRORS):
            raise
        except (ProtocolError, StoreError, EngineError) as exc:
            await store.record_dead_letters([replace(letter, reason=str(exc))])
            out.dead_lettered += 1
            continue
        if result.duplicate:
            out.duplicates += 1
        else:
            out.applied += 1
    return out
