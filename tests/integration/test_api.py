# ruff: noqa: F811  (fixtures imported from test_api_support share their names)
"""The operator API against a real Postgres: auth, starts, queries, repairs, dead letters."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.api import AuthConfigError, Role, TokenAuth
from coordinator.engine import ReplyReceived
from coordinator.store import PendingEvent
from participant_sdk.dead_letters import DeadLetter, record_dead_letter
from participant_sdk.protocol import Outcome, encode, make_reply
from tests.integration.test_api_support import (
    ADMIN,
    INPUT,
    OPERATOR,
    VIEWER,
    Api,
    api,  # noqa: F401
    api_store,  # noqa: F401
    bearer,
    make_dead,
)
from tests.integration.test_store_support import outbox_commands, reply_to

pytestmark = pytest.mark.integration


def test_token_table_parses_hashes_and_refuses_bad_entries() -> None:
    import hashlib

    digest = hashlib.sha256(b"s3cret-token").hexdigest()
    auth = TokenAuth.parse(f"a:admin:sha256:{digest}, b:viewer:with:colons:ok")
    assert auth.authenticate("s3cret-token").role is Role.ADMIN  # type: ignore[union-attr]
    assert auth.authenticate("with:colons:ok").name == "b"  # type: ignore[union-attr]
    assert auth.authenticate("nope") is None
    for bad in ("x:root:12345678", "x:viewer", "x:viewer:short"):
        with pytest.raises(AuthConfigError) as err:
            TokenAuth.parse(bad)
        assert "12345678" not in str(err.value)


async def test_auth_matrix(api: Api) -> None:
    c = api.client
    none = await c.get("/sagas")
    assert none.status_code == 401 and none.headers["www-authenticate"].startswith("Bearer")
    assert none.json()["error"]["code"] == "unauthenticated"
    bad = await c.get("/sagas", headers=bearer("not-a-token"))
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "invalid_token"
    assert (await c.get("/sagas", headers={"X-API-Key": VIEWER})).status_code == 200
    body = {"type": "ship_order", "input": INPUT}
    matrix = [
        ("GET", "/sagas", None, {VIEWER: 200, OPERATOR: 200, ADMIN: 200}),
        ("POST", "/sagas", body, {VIEWER: 403, OPERATOR: 201, ADMIN: 201}),
        ("POST", f"/sagas/{uuid.uuid4()}/resolve", {"reason": "x"},
         {VIEWER: 403, OPERATOR: 404, ADMIN: 404}),
        ("DELETE", "/dead-letters/999", None, {VIEWER: 403, OPERATOR: 403, ADMIN: 404}),
        ("DELETE", "/outbox/dead-letters/999", None, {VIEWER: 403, OPERATOR: 403, ADMIN: 404}),
    ]
    for method, path, payload, expected in matrix:
        for token, status in expected.items():
            r = await c.request(method, path, json=payload, headers=bearer(token))
            assert r.status_code == status, (method, path, token, r.text)
            if status == 403:
                assert r.json()["error"]["code"] == "forbidden"


async def test_start_is_idempotent_by_saga_id(api: Api) -> None:
    sid = str(uuid.uuid4())
    body = {"type": "ship_order", "input": INPUT, "saga_id": sid}
    first = await api.post("/sagas", body)
    assert first.status_code == 201, first.text
    assert first.json()["saga_id"] == sid and first.json()["status"] == "running"
    assert first.headers["location"] == f"/sagas/{sid}"
    again = await api.post("/sagas", body)
    assert again.status_code == 200 and again.json()["saga_id"] == sid
    other = await api.post("/sagas", {**body, "input": {**INPUT, "amount": 11}})
    assert other.status_code == 409 and other.json()["error"]["code"] == "saga_conflict"
    unknown = await api.post("/sagas", {"type": "nope", "input": {}})
    assert unknown.status_code == 422
    assert unknown.json()["error"]["details"]["known"] == ["ship_order", "tcc_order"]
    invalid = await api.post("/sagas", {"type": "ship_order", "input": {"order_id": ""}})
    assert invalid.status_code == 422 and invalid.json()["error"]["code"] == "invalid_input"
    extra = await api.post("/sagas", {"type": "ship_order", "input": INPUT, "x": 1})
    assert extra.status_code == 422 and "x" in extra.json()["error"]["message"]
    (entry,) = (await api.get(f"/sagas/{sid}/history")).json()["entries"]
    assert entry["actor"] == "api:olga" and entry["type"] == "saga_started"


async def test_show_history_diagram_and_types(api: Api) -> None:
    sid = (await api.post("/sagas", {"type": "tcc_order", "input": INPUT})).json()["saga_id"]
    saga = (await api.get(f"/sagas/{sid}")).json()
    assert saga["input"] == INPUT and saga["current_step"] == "reserve"
    assert saga["active_steps"] == ["reserve"] and saga["states"] == ["reserve.trying"]
    assert [s["key"] for s in saga["steps"]] == ["reserve", "hold"]
    assert saga["steps"][0]["phase"] == "trying" and saga["steps"][0]["attempts"] == {"try": 1}
    diagram = (await api.get(f"/sagas/{sid}/diagram")).json()
    assert diagram["state"] == "reserve.trying" and diagram["states"] == ["reserve.trying"]
    assert "stateDiagram-v2" in diagram["mermaid"] and "class n_reserve current" in \
        diagram["mermaid"]
    types = (await api.get("/saga-types")).json()
    assert {(t["name"], t["version"], t["latest"]) for t in types} == {
        ("ship_order", 1, True), ("tcc_order", 1, True)}
    assert types[1]["definition"]["steps"][0]["name"] == "reserve"
    missing = await api.get(f"/sagas/{uuid.uuid4()}")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "saga_not_found"
    assert (await api.get("/sagas/not-a-uuid")).status_code == 422


async def test_list_filters_sorts_and_pages(api: Api) -> None:
    from datetime import timedelta

    ids = []
    for i in range(5):
        body = {"type": "tcc_order" if i % 2 else "ship_order",
                "input": {"order_id": f"o{i}", "amount": i}}
        ids.append((await api.post("/sagas", body)).json()["saga_id"])
        api.clock.advance(timedelta(seconds=10))
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await api.get("/sagas", params=params)).json()
        seen += [s["saga_id"] for s in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]
    asc = (await api.get("/sagas", params={"sort": "created_at"})).json()["items"]
    assert [s["saga_id"] for s in asc] == ids
    tcc = (await api.get("/sagas", params={"type": "tcc_order"})).json()["items"]
    assert {s["saga_id"] for s in tcc} == {ids[1], ids[3]}
    step = (await api.get("/sagas", params={"current_step": "charge"})).json()["items"]
    assert {s["saga_id"] for s in step} == {ids[0], ids[2], ids[4]}
    old = (await api.get("/sagas", params={"min_age_seconds": 25})).json()["items"]
    assert {s["saga_id"] for s in old} == {ids[0], ids[1], ids[2]}
    assert (await api.get("/sagas", params={"stuck": "true"})).json()["items"] == []
    api.clock.advance(timedelta(minutes=10))
    stuck = (await api.get("/sagas", params={"stuck": "true"})).json()["items"]
    assert len(stuck) == 5 and all(s["stuck"] for s in stuck)
    assert (await api.get("/sagas", params={"min_retries": 1})).json()["items"] == []
    bad = await api.get("/sagas", params={"cursor": "garbage"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_cursor"
    wrong = await api.get("/sagas", params={"status": "sleeping"})
    assert wrong.status_code == 422 and "status" in wrong.json()["error"]["message"]


async def test_dead_queue_and_repairs_on_dead_sagas(api: Api) -> None:
    a, b, c = await make_dead(api.store, api.clock, 3)
    dead = (await api.get("/dead-sagas")).json()["items"]
    assert {d["saga_id"] for d in dead} == {str(a), str(b), str(c)}
    entry = dead[0]
    step = entry["step"]
    other = "charge" if step == "ship" else "ship"
    assert step in ("ship", "charge") and entry["attempts"]["compensate"] >= 2
    assert entry["last_error"]["message"] == "scripted" and entry["reason"]
    # Illegal verbs say why.
    r = await api.post(f"/sagas/{a}/cancel", {"reason": "stop it"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_transition"
    assert "running" in r.json()["error"]["message"]
    r = await api.post(f"/sagas/{a}/retry", {"reason": "x", "step": other})
    assert r.status_code == 409 and step in r.json()["error"]["message"]
    assert (await api.post(f"/sagas/{a}/retry", {"reason": "   "})).status_code == 422
    assert (await api.post(f"/sagas/{a}/retry", {})).status_code == 422
    # Legal ones commit and are in the history with actor and reason.
    r = await api.post(f"/sagas/{a}/retry", {"reason": "refund service fixed",
                                             "payload": {"note": "edited"}})
    assert r.status_code == 200 and r.json()["status"] == "compensating"
    (cmd,) = [c for c in await outbox_commands(api.store) if str(c.saga_id) == str(a)]
    assert cmd.payload == {"note": "edited"}
    r = await api.post(f"/sagas/{b}/resolve", {"reason": "refunded by hand",
                                               "status": "compensated"})
    assert r.status_code == 200 and r.json()["status"] == "compensated"
    assert r.json()["resolution"]["actor"] == "olga"
    r = await api.post(f"/sagas/{b}/resolve", {"reason": "again"})
    assert r.status_code == 409 and "compensated" in r.json()["error"]["message"]
    r = await api.post(f"/sagas/{c}/skip", {"reason": "refund not needed"})
    assert r.status_code == 200, r.text
    history = (await api.get(f"/sagas/{a}/history")).json()["entries"]
    last = history[-1]
    assert last["actor"] == "operator:olga" and last["reason"] == "refund service fixed"
    assert last["event"]["verb"] == "retry"
    assert (await api.get("/dead-sagas")).json()["items"] == []


async def test_repairs_on_a_running_saga(api: Api) -> None:
    sid = (await api.post("/sagas", {"type": "ship_order", "input": INPUT})).json()["saga_id"]
    r = await api.post(f"/sagas/{sid}/retry", {"reason": "nudge"})
    assert r.status_code == 409 and "in flight" in r.json()["error"]["message"]
    r = await api.post(f"/sagas/{sid}/resolve", {"reason": "x"})
    assert r.status_code == 409 and "only a dead saga" in r.json()["error"]["message"]
    r = await api.post(f"/sagas/{sid}/compensate", {"reason": "customer called"})
    assert r.status_code == 200 and r.json()["status"] == "compensating"
    sid2 = (await api.post("/sagas", {"type": "tcc_order", "input": INPUT})).json()["saga_id"]
    r = await api.post(f"/sagas/{sid2}/cancel", {"reason": "duplicate order"})
    # Its first try was written to the outbox and may have taken effect: cancelling must
    # send that try's cancel (compensating), never jump to cancelled.
    assert r.status_code == 200 and r.json()["status"] == "compensating", r.json()
    sent = [(c.step, c.phase.value) for c in await outbox_commands(api.store)
            if str(c.saga_id) == sid2]
    assert sent == [("reserve", "try"), ("reserve", "cancel")]
    r = await api.post(f"/sagas/{uuid.uuid4()}/cancel", {"reason": "x"})
    assert r.status_code == 404


async def test_dead_letters_list_inspect_requeue_discard(api: Api) -> None:
    sid = (await api.post("/sagas", {"type": "ship_order", "input": INPUT})).json()["saga_id"]
    (cmd,) = await outbox_commands(api.store)
    good = encode(make_reply(cmd, Outcome.OK, result={"charged": True}))
    async with api.store.pool.acquire() as conn:
        await record_dead_letter(conn, DeadLetter(
            source="coordinator:replies", reason="not valid JSON", payload=b"\xff\x00junk",
            key=b"k", headers=[("h", b"v")], topic="t.replies", partition=0, offset=1))
        await record_dead_letter(conn, DeadLetter(
            source="coordinator:replies", reason="saga was busy", payload=good,
            topic="t.replies", partition=0, offset=2))
    letters = (await api.get("/dead-letters")).json()["items"]
    assert [d["offset"] for d in letters] == [2, 1]
    junk_id, good_id = letters[1]["id"], letters[0]["id"]
    junk = (await api.get(f"/dead-letters/{junk_id}")).json()
    assert base64.b64decode(junk["payload_base64"]) == b"\xff\x00junk"
    assert junk["reason"] == "not valid JSON" and junk["decoded"] is None
    assert (await api.get(f"/dead-letters/{good_id}")).json()["decoded"]["step"] == "charge"
    r = await api.post(f"/dead-letters/{junk_id}/requeue")
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_requeueable"
    r = await api.post(f"/dead-letters/{good_id}/requeue")
    assert r.status_code == 200, r.text
    saga = (await api.get(f"/sagas/{sid}")).json()
    assert saga["steps"][0]["phase"] == "succeeded"
    assert (await api.delete(f"/dead-letters/{junk_id}")).status_code == 200
    assert (await api.get("/dead-letters")).json() == {"items": [], "next_cursor": None}
    assert (await api.get(f"/dead-letters/{junk_id}")).status_code == 404


async def test_outbox_dead_letters(api: Api) -> None:
    await api.post("/sagas", {"type": "ship_order", "input": INPUT})
    async with api.store.pool.acquire() as conn:
        (row_id,) = [r["id"] for r in await conn.fetch("SELECT id FROM sagaflow_outbox")]
        await conn.execute(
            """
            WITH d AS (DELETE FROM sagaflow_outbox WHERE id = $1 RETURNING *)
            INSERT INTO sagaflow_outbox_dead_letter
                (id, shard, topic, key, payload, message_id, headers, created_at, failed_at,
                 error_class, reason)
            SELECT id, shard, topic, key, payload, message_id, headers, created_at, now(),
                   'MessageSizeTooLargeError', 'too big' FROM d
            """, row_id)
    (letter,) = (await api.get("/outbox/dead-letters")).json()["items"]
    assert letter["id"] == row_id and letter["reason"] == "too big"
    one = (await api.get(f"/outbox/dead-letters/{row_id}")).json()
    assert json.loads(base64.b64decode(one["payload_base64"]))["step"] == "charge"
    assert (await api.post(f"/outbox/dead-letters/{row_id}/requeue")).status_code == 200
    assert (await api.get("/outbox/dead-letters")).json() == {"items": [], "next_cursor": None}
    assert (await api.delete(f"/outbox/dead-letters/{row_id}")).status_code == 404


async def test_metrics_route_reports_what_the_api_and_the_store_did(api: Api) -> None:
    """``/metrics`` of the API: counters of its own changes, step durations on its clock, and
    gauges refreshed from the database, as sample values (not merely the metric names)."""
    sid = (await api.post("/sagas", {"type": "tcc_order", "input": INPUT})).json()["saga_id"]
    (cmd,) = await outbox_commands(api.store)
    api.clock.advance(timedelta(milliseconds=300))
    await api.store.apply_many([PendingEvent(cmd.saga_id, ReplyReceived(
        reply=reply_to(cmd, Outcome.OK)))])
    r = await api.client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(r.text) for s in family.samples}

    def sample(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    step = {"saga_type": "tcc_order", "step": "reserve", "phase": "try", "outcome": "ok"}
    assert sample("sagaflow_sagas_started_total", saga_type="tcc_order") == 1
    assert sample("sagaflow_step_duration_seconds_count", **step) == 1
    assert sample("sagaflow_step_duration_seconds_sum", **step) == pytest.approx(0.3)
    assert sample("sagaflow_step_duration_seconds_bucket", le="0.25", **step) == 0
    assert sample("sagaflow_step_duration_seconds_bucket", le="0.5", **step) == 1
    assert sample("sagaflow_sagas_in_flight", saga_type="tcc_order", status="running") == 1
    assert sample("sagaflow_outbox_backlog_rows") == 1  # the hold step's try
    assert (await api.get(f"/sagas/{sid}")).json()["steps"][0]["phase"] == "tried"
