"""Every Python block of the README and of every docs page runs as written: per page, every
```python block in order, in one namespace (a later block may use what an earlier one defined,
as a reader would), top-level ``await`` allowed, against real Postgres where a block needs a
database. A block titled with a file name (``title="shop/sagas.py"``) runs too."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from coordinator.engine.compiled import compile_saga
from coordinator.sagas.diagram import mermaid
from coordinator.sagas.registry import SagaRegistry
from coordinator.schedules import DeclaredSchedule
from outbox_relay import RelayWaker

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```$", re.S | re.M)
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])


def blocks(page: Path) -> list[tuple[int, str]]:
    """(line number, source) of every Python block of ``page``."""
    text = page.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_the_pages_have_the_examples_this_test_knows() -> None:
    # A new block is run too; these counts only make a removed one visible.
    counts = {_name(p): len(blocks(p)) for p in PAGES}
    assert counts["README.md"] >= 2
    assert counts["docs/saga-language.md"] >= 9
    assert counts["docs/participants.md"] >= 2
    assert counts["docs/nodes.md"] >= 14


async def _run(page: Path, namespace: dict[str, Any]) -> None:
    for line, source in blocks(page):
        code = compile(source, f"{_name(page)}:{line}", "exec",
                       flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        try:
            result = eval(code, namespace)  # the page's own examples
            if inspect.iscoroutine(result):
                await result
        except Exception as exc:
            raise AssertionError(f"{_name(page)} line {line}: {type(exc).__name__}: {exc}"
                                 ) from exc


async def _release(namespace: dict[str, Any]) -> None:
    """Stop what the examples started (wakers, pools), as the reader's process would."""
    for value in namespace.values():
        if isinstance(value, RelayWaker):
            await value.stop()
    for value in namespace.values():
        if isinstance(value, asyncpg.Pool):
            await value.close()


#: What the pages' examples check of their results, beyond running.
def _check_saga_language(ns: dict[str, Any]) -> None:
    sagas = [ns[n] for n in ("OrderSaga", "CheckoutSaga", "Fulfilment", "NestedOrder",
                             "SettlementSaga", "PaidOrder", "TrackedOrder")]
    registry = SagaRegistry(topic_prefix="docs", sagas=sagas)
    assert {d.name for d in registry.types()} == {
        "order", "checkout", "order_fulfilment", "order_nested", "settlement",
        "order_paid_or_invoiced", "order_tracked"}
    assert all(isinstance(s, DeclaredSchedule) for s in ns["SettlementSaga"].schedules)


_DIAGRAM = re.compile(r"<!-- diagram: (\w+) -->\n```mermaid\n(.*?)\n```", re.S)


def _check_nodes(ns: dict[str, Any]) -> None:
    # Each node's diagram is the one the coordinator draws for the class above it today.
    drawn = _DIAGRAM.findall((ROOT / "docs" / "nodes.md").read_text())
    assert len(drawn) >= 13, drawn
    for name, diagram in drawn:
        assert diagram == mermaid(compile_saga(ns[name])).rstrip("\n"), name


async def _check_participants(ns: dict[str, Any]) -> None:
    # The outbox example committed its row with the business write.
    async with ns["pool"].acquire() as c:
        assert await c.fetchval("SELECT balance FROM accounts WHERE id = 7") == 90
        assert await c.fetchval("SELECT count(*) FROM sagaflow_outbox "
                                "WHERE topic = 'billing.events'") == 1


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=_name)
async def test_every_example_on_the_page_runs(page: Path, fresh_db: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # What the examples assume of the reader's own service: its DSN, an accounts table, the
    # settings a function reads, and a saga type to load.
    for var in ("SAGAFLOW_DSN", "SAGAFLOW_PARTICIPANT_DSN"):
        monkeypatch.setenv(var, fresh_db)
    monkeypatch.setenv("SAGAFLOW_SAGAS", "examples.order_saga:OrderSaga")
    conn = await asyncpg.connect(fresh_db)
    try:
        await conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int)")
        await conn.execute("INSERT INTO accounts VALUES (7, 100)")
    finally:
        await conn.close()
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    try:
        await _run(page, namespace)
        if _name(page) == "docs/saga-language.md":
            _check_saga_language(namespace)
        elif _name(page) == "docs/participants.md":
            await _check_participants(namespace)
        elif _name(page) == "docs/nodes.md":
            _check_nodes(namespace)
    finally:
        await _release(namespace)
