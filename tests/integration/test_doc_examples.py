"""The README's Python examples run as written: every ```python block, in order, in one
namespace (a later block may use what an earlier one defined, as a reader would), top-level
``await`` allowed, against real Postgres where a block needs a database."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from coordinator.sagas.registry import SagaRegistry
from coordinator.schedules import DeclaredSchedule

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def blocks() -> list[tuple[int, str]]:
    """(line number, source) of every Python block of the README."""
    text = README.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def test_the_readme_has_the_examples_this_test_knows() -> None:
    # A new block is run too; this count only makes a removed one visible.
    assert len(blocks()) >= 8


async def test_every_readme_example_runs(fresh_db: str, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    # What the examples assume of the reader's own service: its DSN and an accounts table.
    monkeypatch.setenv("SAGAFLOW_DSN", fresh_db)
    conn = await asyncpg.connect(fresh_db)
    try:
        await conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int)")
        await conn.execute("INSERT INTO accounts VALUES (7, 100)")
    finally:
        await conn.close()
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    for line, source in blocks():
        code = compile(source, f"README.md:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        try:
            result = eval(code, namespace)  # the README's own examples
            if inspect.iscoroutine(result):
                await result
        except Exception as exc:
            raise AssertionError(f"README.md line {line}: {type(exc).__name__}: {exc}") from exc
    try:
        # The sagas defined there are valid definitions, registrable side by side.
        sagas = [namespace[n] for n in ("OrderSaga", "CheckoutSaga", "Fulfilment",
                                        "NestedOrder", "SettlementSaga")]
        registry = SagaRegistry(topic_prefix="readme", sagas=sagas)
        assert {d.name for d in registry.types()} == {
            "order", "checkout", "order_fulfilment", "order_nested", "settlement"}
        assert all(isinstance(s, DeclaredSchedule) for s in namespace["SettlementSaga"].schedules)
        # The outbox example committed its row with the business write.
        async with namespace["pool"].acquire() as c:
            assert await c.fetchval("SELECT balance FROM accounts WHERE id = 7") == 90
            assert await c.fetchval("SELECT count(*) FROM sagaflow_outbox "
                                    "WHERE topic = 'billing.events'") == 1
    finally:
        await namespace["waker"].stop()
        await namespace["pool"].close()
