"""Filtering sagas by search attributes through the API (GET /sagas?q=, with the other
filters and pagination), the saga detail and types, the ``saga`` CLI's ``list --where`` and
the console's "where" box (issue 37)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from coordinator.engine import ReplyReceived
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from coordinator.ui import UiSettings
from participant_sdk.protocol import Outcome, make_reply
from tests.integration.search_support import SAGAS
from tests.integration.test_api_live import served_api
from tests.integration.test_api_support import (
    ADMIN,
    OPERATOR,
    TOKENS,
    VIEWER,
    app_client,
    bearer,
)
from tests.integration.test_business_keys import _cli
from tests.integration.test_store_support import ManualClock, migrated, outbox_commands
from tests.integration.test_ui import Browser

pytestmark = pytest.mark.integration

PREFIX = "searchapi"


@pytest.fixture
async def store(fresh_db: str) -> AsyncIterator[SagaStore]:
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=PREFIX, sagas=SAGAS)
    async with await SagaStore.open(fresh_db, registry, max_size=8, clock=ManualClock()
                                    ) as s:
        yield s


async def _shop(client: httpx.AsyncClient, order: str, customer: str, amount: int,
                **more: Any) -> str:
    body = {"type": "shop", "input": {"order_id": order, "customer_id": customer,
                                      "amount_cents": amount, **more}}
    started = await client.post("/sagas", json=body, headers=bearer(OPERATOR))
    assert started.status_code == 201, started.text
    return str(started.json()["saga_id"])


async def _ship(store: SagaStore, carriers: dict[str, str]) -> None:
    """Answer the outbox: pay ok, ship ok with the saga's carrier (sagas not in
    ``carriers`` are left at ship)."""
    for _ in range(2):
        for command in await outbox_commands(store):
            saga = str(command.saga_id)
            if command.step == "ship" and saga not in carriers:
                continue
            result = {"carrier": carriers[saga]} if command.step == "ship" else {}
            await store.apply(command.saga_id, ReplyReceived(
                reply=make_reply(command, Outcome.OK, result=result)))


async def _ids(client: httpx.AsyncClient, **params: Any) -> list[str]:
    answer = await client.get("/sagas", params=params, headers=bearer(VIEWER))
    assert answer.status_code == 200, answer.text
    return [item["saga_id"] for item in answer.json()["items"]]


async def test_the_list_filters_by_attributes_with_the_other_filters_and_pages(
    store: SagaStore,
) -> None:
    async with app_client(store) as client:
        a = await _shop(client, "o-1", "c-42", 1500, tags=["gift"])
        b = await _shop(client, "o-2", "c-42", 900, vip=True)
        c = await _shop(client, "o-3", "c-7", 5000)
        ret = (await client.post("/sagas", json={"type": "shop_return", "input": {
            "customer_id": "c-42"}}, headers=bearer(OPERATOR))).json()["saga_id"]
        await _ship(store, {a: "ups", c: "dhl"})
        assert set(await _ids(client, q="customer_id = 'c-42' and amount > 1000")) == {a}
        assert set(await _ids(client, q="customer_id = 'c-42'")) == {a, b, ret}
        assert set(await _ids(client, q="customer_id = 'c-42'", type="shop")) == {a, b}
        assert set(await _ids(client, q="carrier in ('ups', 'dhl')")) == {a, c}
        assert set(await _ids(client, q="not carrier = 'ups' and type = 'shop'")) == {b, c}
        assert set(await _ids(client, q="vip = true or tags = 'gift'")) == {a, b}
        assert set(await _ids(client, q="amount >= 900", status="running")) == {a, b, c}
        # Pages of two, following the cursor: each saga once.
        first = (await client.get("/sagas", params={"q": "amount > 0", "limit": 2},
                                  headers=bearer(VIEWER))).json()
        second = (await client.get("/sagas", params={
            "q": "amount > 0", "limit": 2, "cursor": first["next_cursor"]},
            headers=bearer(VIEWER))).json()
        paged = [i["saga_id"] for i in first["items"] + second["items"]]
        assert len(first["items"]) == 2 and sorted(paged) == sorted([a, b, c])
        assert second["next_cursor"] is None
        # The detail shows the values; the types list what they declare.
        shown = (await client.get(f"/sagas/{a}", headers=bearer(VIEWER))).json()
        assert shown["search_attributes"] == {
            "customer_id": "c-42", "amount": 1500, "euros": 15.0, "vip": False,
            "tags": ["gift"], "carrier": "ups"}
        types = (await client.get("/saga-types", headers=bearer(VIEWER))).json()
        assert {t["name"]: t["search_attributes"] for t in types}["shop"]["tags"] == "keywords"


@pytest.mark.parametrize(("q", "column", "reason"), [
    ("amount >", 9, "expected a value"),
    ("carrier = 'x' and colour = 'red'", 19, "unknown field 'colour'"),
    ("amount = 'ten'", 10, "'amount' holds numbers"),
    ("customer_id = 'x'; DELETE FROM sagas", 18, "unexpected character ';'"),
])
async def test_an_invalid_filter_is_a_400_naming_the_column(
    store: SagaStore, q: str, column: int, reason: str,
) -> None:
    async with app_client(store) as client:
        answer = await client.get("/sagas", params={"q": q}, headers=bearer(VIEWER))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_filter" and error["details"]["column"] == column
    assert reason in error["details"]["reason"] and f"column {column}: " in error["message"]


async def test_the_console_where_box_filters_keeps_the_query_and_points_at_errors(
    store: SagaStore,
) -> None:
    async with app_client(store, base_url="https://ui.test",
                          ui=UiSettings(session_secret="test-secret-1")) as client:
        a = await _shop(client, "o-1", "c-42", 1500)
        b = await _shop(client, "o-2", "c-9", 10)
        browser = Browser(client, store, ManualClock())
        assert (await browser.sign_in(VIEWER)).status_code == 303
        page = await client.get("/ui/sagas", params={"where": "amount > 1000"})
        assert page.status_code == 200 and a in page.text and b not in page.text
        assert 'value="amount &gt; 1000"' in page.text  # kept in the box (and the URL)
        bad = await client.get("/ui/sagas", params={"where": "amount > 'x'"})
        assert bad.status_code == 200 and 'id="where-error"' in bad.text
        assert "column 10: &#39;amount&#39; holds numbers" in bad.text
        assert a not in bad.text and b not in bad.text
        assert "the filter above is not valid" in bad.text
        assert "amount: int" in page.text  # the box's hint names the declared fields
        detail = await client.get(f"/ui/sagas/{a}")
        assert 'id="search-attributes"' in detail.text and "c-42" in detail.text


async def test_the_cli_lists_sagas_matching_a_filter(fresh_db: str) -> None:
    sagas = [f"tests.integration.search_support:{s.__name__}" for s in SAGAS]
    async with served_api(fresh_db, sagas, TOKENS, PREFIX) as served, \
            httpx.AsyncClient(base_url=served.url) as client:
        a = await _shop(client, "o-1", "c-42", 1500)
        b = await _shop(client, "o-2", "c-9", 10)

        def scenario() -> None:
            code, text, _ = _cli(served.url, "list", "--where", "amount > 1000")
            assert code == 0 and a in text and b not in text
            code, text, _ = _cli(served.url, "list", "-w", "customer_id in ('c-9')",
                                 "--status", "running")
            assert code == 0 and b in text and a not in text
            code, _, err = _cli(served.url, "list", "--where", "amount >> 3")
            assert code == 1 and "invalid_filter" in err and "column 9" in err
            code, text, _ = _cli(served.url, "show", a)
            assert code == 0 and "customer_id=c-42" in text and "amount=1500" in text

        env_token = os.environ.pop("SAGAFLOW_API_TOKEN", None)
        try:
            await asyncio.to_thread(scenario)
        finally:
            if env_token is not None:
                os.environ["SAGAFLOW_API_TOKEN"] = env_token


async def test_text_that_looks_like_sql_is_only_ever_a_value(store: SagaStore) -> None:
    async with app_client(store) as client:
        sly = await _shop(client, "o-1", "x' OR '1'='1", 1)
        other = await _shop(client, "o-2", "c-1", 1)
        assert await _ids(client, q=r"customer_id = 'x\' OR \'1\'=\'1'") == [sly]
        doubled = await client.get("/sagas", params={
            "q": "customer_id = '''; DROP TABLE sagas; --'"}, headers=bearer(VIEWER))
        assert doubled.status_code == 400  # '' is no escape: the rest is a syntax error
        assert "unexpected text '; DROP TABLE sagas; --'" in doubled.json()["error"]["message"]
        assert await _ids(client, q="customer_id = \"'; DROP TABLE sagas; --\"") == []
        assert set(await _ids(client, q="amount = 1")) == {sly, other}  # the table is there


UPLOADED = """
name: parcel
version: 1
input:
  type: object
  properties: {customer_id: {type: string}}
  required: [customer_id]
search:
  - {name: parcel_customer, type: str, expr: input.customer_id}
steps:
  - {kind: tcc, name: pay, participant: payments, action: charge}
"""


async def test_a_filter_knows_the_attributes_of_a_definition_uploaded_elsewhere(
    fresh_db: str, store: SagaStore,
) -> None:
    other_registry = SagaRegistry(topic_prefix=PREFIX, sagas=SAGAS)
    async with await SagaStore.open(fresh_db, other_registry, max_size=2,
                                    clock=ManualClock()) as other, \
            app_client(store) as here, app_client(other) as there:
        uploaded = await here.post("/saga-definitions", content=UPLOADED, headers={
            **bearer(ADMIN), "Content-Type": "application/yaml"})
        assert uploaded.status_code == 201, uploaded.text
        started = await here.post("/sagas", json={"type": "parcel", "input": {
            "customer_id": "c-5"}}, headers=bearer(OPERATOR))
        assert started.status_code == 201, started.text
        # The other API process learns the type (and its attributes) when a filter names one.
        assert await _ids(there, q="parcel_customer = 'c-5'") == [started.json()["saga_id"]]
        unknown = await there.get("/sagas", params={"q": "colour = 'red'"},
                                  headers=bearer(VIEWER))
        assert unknown.status_code == 400 and "parcel_customer" in unknown.text
