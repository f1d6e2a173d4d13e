"""What a Kafka record is to the code that handles one, whoever delivered it.

A consumer hands over aiokafka's ``ConsumerRecord``; a function trigger (Lambda, Knative) hands
over an :class:`InboundRecord` decoded from its event. Both fit :class:`KafkaRecord`. This
module imports nothing heavy, so the function adapters and the coordinator's reply path can
use it without the participant runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["InboundRecord", "KafkaRecord"]


class KafkaRecord(Protocol):
    """A Kafka record as the handlers need it (aiokafka's ``ConsumerRecord`` fits)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass(frozen=True, slots=True)
class InboundRecord:
    """A Kafka record delivered by something other than a consumer (a function trigger)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]] = ()
