# ruff: noqa: F811  (fixtures imported from test_api_support share their names)
"""Sagas declared as data over the API, on the real Postgres: an admin uploads a YAML
definition, versions are listed, fetched and diffed, a saga of it starts, and another
process (a worker, a second API) picks the definition up without a restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from coordinator.store.definitions import register_stored
from tests.integration.test_api_support import (
    ADMIN,
    OPERATOR,
    VIEWER,
    Api,
    api,  # noqa: F401
    api_store,  # noqa: F401
    app_client,
    bearer,
)
from tests.integration.test_store_support import outbox_commands

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ORDER_YAML = (ROOT / "examples" / "order_saga.yaml").read_text()
ORDER = {"order_id": "o-1", "customer_id": "c-1", "amount_cents": 2500, "sku": "sku-1",
         "quantity": 2, "address": "1 Main St"}


def _v2() -> dict[str, Any]:
    data = yaml.safe_load(ORDER_YAML)
    data["version"] = 2
    data["steps"].append({"kind": "saga", "name": "notify", "participant": "shipping",
                          "action": "notify", "compensable": False,
                          "payload": "{order: input.order_id}"})
    return data


async def _upload(api: Api, body: str, token: str = ADMIN,
                  content_type: str = "application/yaml") -> Any:
    return await api.client.post("/saga-definitions", content=body.encode(),
                                 headers={**bearer(token), "Content-Type": content_type})


async def test_an_admin_uploads_lists_fetches_and_diffs_definitions_then_starts_one(
    api: Api,
) -> None:
    for token in (VIEWER, OPERATOR):
        assert (await _upload(api, ORDER_YAML, token)).status_code == 403
    first = await _upload(api, ORDER_YAML)
    assert first.status_code == 201, first.text
    body = first.json()
    assert (body["name"], body["version"], body["uploaded_by"], body["registered"]) == (
        "order", 1, "ada", True)
    assert first.headers["Location"] == "/saga-definitions/order/1"
    again = await _upload(api, ORDER_YAML)
    assert again.status_code == 200 and again.json()["digest"] == body["digest"]
    changed = await _upload(api, ORDER_YAML.replace("PT10S", "PT20S", 1))
    assert changed.status_code == 409
    assert changed.json()["error"]["code"] == "definition_taken"
    second = await _upload(api, json.dumps(_v2()), content_type="application/json")
    assert second.status_code == 201
    assert second.json()["compatibility"] == []  # v2 takes the same input
    v3 = _v2() | {"version": 3}
    v3["input"]["required"].append("coupon")
    v3["input"]["properties"]["coupon"] = {"type": "string"}
    third = await _upload(api, json.dumps(v3), content_type="application/json")
    assert third.json()["compatibility"] == [
        "BREAKING  input.coupon: new required field"], third.json()

    listed = (await api.get("/saga-definitions")).json()["items"]
    assert [(d["name"], d["version"], d["uploaded_by"]) for d in listed] == [
        ("order", 1, "ada"), ("order", 2, "ada"), ("order", 3, "ada")]
    fetched = (await api.get("/saga-definitions/order/1")).json()
    assert fetched["definition"] == json.loads(json.dumps(yaml.safe_load(ORDER_YAML)))
    diff = (await api.get("/saga-definitions/order/diff", params={"from": 1, "to": 2})).json()
    assert diff["steps_added"] == ["notify"] and not diff["steps_removed"]
    assert (await api.get("/saga-definitions/order/4")).status_code == 404

    started = await api.post("/sagas", {"type": "order", "input": ORDER | {"coupon": "c"}})
    assert started.status_code == 201, started.text
    assert started.json()["version"] == 3  # the latest uploaded version
    sent = await outbox_commands(api.store)
    assert [(c.step, c.payload) for c in sent] == [
        ("reserve_funds", {"customer": "c-1", "amount": 2500})]


async def test_a_bad_definition_is_refused_with_every_problem_and_never_stored(
    api: Api,
) -> None:
    bad = ORDER_YAML.replace("max_attempts: 5", "max_attempts: 0").replace(
        "kind: saga", "kind: sagga")
    refused = await _upload(api, bad)
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "invalid_definition"
    paths = {p["path"] for p in error["details"]["problems"]}
    assert {"steps[0].retry.max_attempts", "steps[1].retry.max_attempts",
            "steps[2]"} <= paths, paths
    assert (await _upload(api, "a: &x [1]\nb: *x\n")).status_code == 422
    assert (await api.get("/saga-definitions")).json()["items"] == []


async def test_another_process_picks_an_upload_up_without_a_restart(
    api: Api, fresh_db: str, topic_prefix: str
) -> None:
    assert (await _upload(api, ORDER_YAML)).status_code == 201
    worker_registry = SagaRegistry(topic_prefix=topic_prefix)  # a running worker's
    async with api.store.pool.acquire() as conn:
        assert await register_stored(conn, worker_registry) == [("order", 1)]
        assert await register_stored(conn, worker_registry) == []  # once
    assert worker_registry.latest("order").steps[0].name == "reserve_funds"

    # A second API process, started before the upload: a start registers it on demand.
    async with await SagaStore.open(fresh_db, SagaRegistry(topic_prefix=topic_prefix),
                                    max_size=2) as other_store, \
            app_client(other_store) as other:
        other_store.registry._by_key.clear()  # as if it had started before the upload
        started = await other.post("/sagas", json={"type": "order", "input": ORDER},
                                   headers=bearer(OPERATOR))
        assert started.status_code == 201, started.text


async def test_the_console_types_page_shows_who_uploaded_a_definition(
    api_store: tuple[SagaStore, Any],
) -> None:
    from coordinator.ui import UiSettings

    store, clock = api_store
    async with app_client(store, clock, base_url="https://ui.test",
                          ui=UiSettings(session_secret="test-secret-1")) as client:
        api = Api(client, store, clock)
        assert (await _upload(api, ORDER_YAML)).status_code == 201
        form = (await client.get("/ui/login")).text
        csrf = form.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        await client.post("/ui/login", data={"csrf_token": csrf, "token": VIEWER,
                                             "next": "/ui/types"})
        page = (await client.get("/ui/types")).text
    assert "Declared as data: uploaded by ada" in page
    assert "payload: &#39;{customer: input.customer_id" in page  # the YAML, escaped
