"""The bench's client-side count of Kafka requests by type (bench/kafka_requests.py) and the
per-message figures made from it (bench/measure.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.conn import AIOKafkaConnection

from bench import kafka_requests
from bench.measure import _request_deltas, kafka_request_costs


class FetchRequest:
    pass


class OffsetCommitRequest:
    pass


def _fetch_response(*records: bytes | None) -> Any:
    parts = [(i, 0, 10, 0, 0, [], -1, r) for i, r in enumerate(records)]
    return SimpleNamespace(topics=[("replies", parts)])


def test_a_fetch_is_empty_only_when_no_partition_carried_records() -> None:
    assert kafka_requests._records_empty(_fetch_response(b"", None)) is True
    assert kafka_requests._records_empty(_fetch_response(b"", b"\x00records")) is False
    assert kafka_requests._records_empty(SimpleNamespace()) is False  # not a FetchResponse


def test_every_request_is_counted_by_type_and_dumped(tmp_path: Path, monkeypatch: Any) -> None:
    responses = iter([_fetch_response(b""), _fetch_response(b"x")])

    def original(self: Any, request: Any, expect_response: bool = True) -> Any:
        async def answer() -> Any:
            return next(responses) if isinstance(request, FetchRequest) else None
        return answer()

    monkeypatch.setattr(AIOKafkaConnection, "send", original)
    monkeypatch.setattr(kafka_requests, "COUNTS", kafka_requests.collections.Counter())
    out = tmp_path / "counts.json"
    kafka_requests.install(str(out))

    async def run() -> None:
        conn: Any = object()
        await AIOKafkaConnection.send(conn, FetchRequest())
        await AIOKafkaConnection.send(conn, FetchRequest())
        await AIOKafkaConnection.send(conn, OffsetCommitRequest())

    asyncio.run(run())
    expected = {"Fetch": 2, "FetchEmpty": 1, "OffsetCommit": 1}
    deadline = time.monotonic() + 5
    while kafka_requests.read_counts(str(out)) != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    assert kafka_requests.read_counts(str(out)) == expected
    assert kafka_requests.read_counts(str(tmp_path / "none.json")) == {}


def test_requests_per_message_by_type_and_process() -> None:
    a = {"payments": {"Produce": 10, "Fetch": 10}, "coordinator1": {"Fetch": 5}}
    b = {"payments": {"Produce": 30, "Fetch": 20, "FetchEmpty": 2},
         "coordinator1": {"Fetch": 15, "OffsetCommit": 4}}
    deltas = _request_deltas(a, b)
    assert deltas == {"payments": {"Produce": 20, "Fetch": 10, "FetchEmpty": 2},
                      "coordinator1": {"Fetch": 10, "OffsetCommit": 4}}
    costs = kafka_request_costs(deltas, messages=40, sagas=4, seconds=2.0)["kafka_requests"]
    assert costs["per_message"] == {"Fetch": 0.5, "FetchEmpty": 0.05, "OffsetCommit": 0.1,
                                    "Produce": 0.5}
    # FetchEmpty is a subset of Fetch, not counted twice.
    assert costs["per_message_total"] == pytest.approx(44 / 40)
    assert costs["per_saga_total"] == 11 and costs["per_s_total"] == 22
    assert costs["per_message_by_process"] == {"coordinator1": 14 / 40, "payments": 30 / 40}
    assert _request_deltas(None, b) is None
