"""The reply producer's partitioner: Kafka's default choice, without hashing a key twice.

aiokafka's ``DefaultPartitioner`` hashes the key with a pure-Python murmur2 on every send
(~9 us). A participant sends every reply of a saga under the saga id, usually more than once
(a try and its confirm, a for-each's items), so the hashes of recent keys are kept. The
partition is exactly the default one (the Java client's too): replies of one saga stay in one
partition, in order.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka.partitioner import DefaultPartitioner, murmur2

__all__ = ["KeyHashPartitioner"]


class KeyHashPartitioner:
    """``DefaultPartitioner`` with the murmur2 hashes of up to ``size`` keys kept."""

    def __init__(self, size: int = 4096) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self._size = size
        self._hashes: dict[bytes, int] = {}
        self._default = DefaultPartitioner()

    def __call__(self, key: bytes | None, all_partitions: Sequence[int],
                 available: Sequence[int]) -> int:
        if key is None:
            return int(self._default(key, list(all_partitions), list(available)))
        hashed = self._hashes.get(key)
        if hashed is None:
            hashed = murmur2(key) & 0x7FFFFFFF
            if len(self._hashes) >= self._size:
                self._hashes.clear()  # a for-each's keys repeat soon; old sagas' rarely
            self._hashes[key] = hashed
        return all_partitions[hashed % len(all_partitions)]
