"""Fixtures of the chaos scenarios: a process stack on fresh databases and topics."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.chaos.support.stack import ChaosStack

MakeStack = Callable[..., Awaitable[ChaosStack]]


@pytest.fixture
async def make_stack(
    pg_url: str, kafka_bootstrap: str, tmp_path: Path
) -> AsyncIterator[MakeStack]:
    """Build :class:`ChaosStack` instances (shared services unless told otherwise)."""
    stacks: list[ChaosStack] = []

    async def make(**kw: Any) -> ChaosStack:
        kw.setdefault("pg_url", pg_url)
        kw.setdefault("kafka", kafka_bootstrap)
        kw.setdefault("logs", tmp_path / f"logs{len(stacks)}")
        stack = await ChaosStack.create(**kw)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        try:
            await stack.drop()
        except (OSError, asyncpg.PostgresError) as exc:  # its own server may be gone already
            print(f"dropping the databases of {stack.prefix} failed: {exc!r}")
