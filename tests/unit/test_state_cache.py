"""The store's cache of committed states: good only for its history seq, bounded by nodes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from coordinator.engine import SagaState, Status, StepState
from coordinator.store.nodes import StateCache

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _state(nodes: int) -> SagaState:
    steps = {f"s{i}": StepState(key=f"s{i}", node=f"s{i}") for i in range(nodes)}
    return SagaState(saga_id=uuid.uuid4(), saga_type="t", version=1, status=Status.RUNNING,
                     input={}, steps=steps, started_at=NOW, updated_at=NOW)


def test_an_entry_is_good_only_for_the_seq_it_was_written_at() -> None:
    cache, state = StateCache(100), _state(3)
    cache.put(state.saga_id, 4, state)
    assert cache.get(state.saga_id, 4) is state
    assert cache.get(state.saga_id, 5) is None  # another replica moved it on
    assert cache.get(state.saga_id, 3) is None
    cache.drop(state.saga_id)
    assert cache.get(state.saga_id, 4) is None


def test_the_bound_counts_nodes_and_drops_the_least_recently_used() -> None:
    cache = StateCache(20)  # each state below costs its nodes + 1
    a, b, c = _state(5), _state(5), _state(5)
    for seq, state in enumerate((a, b, c), start=1):
        cache.put(state.saga_id, seq, state)
    assert cache.get(a.saga_id, 1) is a  # a is now the most recently used
    big = _state(7)
    cache.put(big.saga_id, 1, big)  # 6 + 6 + 6 + 8 > 20: b, the least recently used, goes
    assert cache.get(b.saga_id, 2) is None
    assert [cache.get(s.saga_id, seq) for s, seq in ((c, 3), (a, 1), (big, 1))] == [c, a, big]
    huge = _state(30)
    cache.put(huge.saga_id, 1, huge)  # larger than the whole cache: not kept, nothing dropped
    assert cache.get(huge.saga_id, 1) is None and len(cache) == 3
    small = _state(1)
    cache.put(c.saga_id, 4, small)  # replacing an entry frees its old size: 2 + 6 + 8 = 16
    cache.put(b.saga_id, 2, _state(3))  # 16 + 4 = 20: fits, nothing dropped
    assert len(cache) == 4 and cache.get(c.saga_id, 4) is small


def test_a_negative_size_is_refused() -> None:
    with pytest.raises(ValueError, match="state cache size"):
        StateCache(-1)
