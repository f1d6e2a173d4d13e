"""Which Kafka offsets may be committed when messages finish out of order.

Messages of one partition run in parallel lanes (one lane per saga key), so they finish out of
order. A partition's committable offset is the lowest offset still in flight, or one past the
highest offset seen when nothing is in flight: everything below it is finished, i.e. its reply
was acknowledged by Kafka. Committing it never skips an unfinished message.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

P = TypeVar("P", bound=Hashable)


@dataclass(slots=True)
class _Partition:
    in_flight: list[int] = field(default_factory=list)  # min-heap, lazily cleaned
    finished: set[int] = field(default_factory=set)
    next_offset: int = 0  # one past the highest offset seen
    committed: int | None = None


class OffsetTracker(Generic[P]):
    """Track started and finished offsets per partition; compute what may be committed."""

    def __init__(self) -> None:
        self._parts: dict[P, _Partition] = {}

    def started(self, partition: P, offset: int) -> None:
        """A message was fetched and handed to a lane (offsets arrive in increasing order)."""
        part = self._parts.setdefault(partition, _Partition())
        heapq.heappush(part.in_flight, offset)
        part.next_offset = max(part.next_offset, offset + 1)

    def finished(self, partition: P, offset: int) -> None:
        """The message at ``offset`` is done: its reply (or dead letter) is durable."""
        part = self._parts.get(partition)
        if part is None:
            return  # partition revoked meanwhile; its new owner re-processes, the barrier dedupes
        part.finished.add(offset)
        while part.in_flight and part.in_flight[0] in part.finished:
            part.finished.discard(heapq.heappop(part.in_flight))

    def in_flight(self, partition: P | None = None) -> int:
        parts = self._parts.values() if partition is None else [self._parts.get(partition)]
        return sum(len(p.in_flight) for p in parts if p is not None)

    def committable(self) -> dict[P, int]:
        """Per partition, the offset to commit (next to read) if it moved since the last commit."""
        out: dict[P, int] = {}
        for tp, part in self._parts.items():
            position = part.in_flight[0] if part.in_flight else part.next_offset
            if position > 0 and position != part.committed:
                out[tp] = position
        return out

    def mark_committed(self, offsets: dict[P, int]) -> None:
        for tp, offset in offsets.items():
            part = self._parts.get(tp)
            if part is not None:
                part.committed = offset

    def forget(self, partitions: list[P]) -> None:
        """Drop partitions that were revoked from this consumer."""
        for tp in partitions:
            self._parts.pop(tp, None)

    def partitions(self) -> list[P]:
        return list(self._parts)
