"""The array codecs a function's pool registers from fixed catalog rows are the ones asyncpg
would have introspected: same values back, no introspection, and a fallback that still works."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import asyncpg
import pytest

from coordinator.store import codecs

pytestmark = pytest.mark.integration

ROUND_TRIP = """
SELECT $1::uuid[], $2::timestamptz[], $3::json[], $4::jsonb[], $5::bool[], $6::int4[],
       $7::int8[], $8::bytea[]
"""
VALUES = ([uuid.uuid4(), None], [dt.datetime(2026, 12, 2, 15, 0, 0, 123456, tzinfo=dt.UTC)],
          ['{"a": 1}', None], ['{"b": [1, "x"]}'], [True, False, None], [1, -2], [2**40],
          [b"\x00\xff", b""])


async def _round_trip(pg_url: str, init: Any) -> tuple[Any, ...]:
    conn = await asyncpg.connect(pg_url)
    try:
        if init is not None:
            await init(conn)
        return tuple(await conn.fetchrow(ROUND_TRIP, *VALUES))
    finally:
        await conn.close()


async def test_registered_codecs_give_what_introspected_ones_give(
        pg_url: str, introspected: list[set[int]]) -> None:
    registered = await _round_trip(pg_url, codecs.prime_array_codecs)
    assert introspected == []
    plain = await _round_trip(pg_url, None)
    assert introspected == [{oid for oid, *_ in codecs.ARRAY_TYPES}]
    assert registered == plain == VALUES


async def test_without_the_hook_one_statement_introspects_them_all(
        pg_url: str, introspected: list[set[int]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codecs, "register_builtin_arrays", lambda conn: False)
    everything = {oid for oid, *_ in codecs.ARRAY_TYPES}

    async def init(conn: Any) -> None:
        await codecs.prime_array_codecs(conn)
        assert introspected == [everything]  # in the init, before any statement of the store

    assert await _round_trip(pg_url, init) == VALUES
    assert introspected == [everything]


def test_an_asyncpg_without_the_hook_is_detected() -> None:
    assert codecs.register_builtin_arrays(object()) is False
