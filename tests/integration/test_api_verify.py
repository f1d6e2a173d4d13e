# ruff: noqa: F811  (fixtures imported from test_api_support share their names)
"""Replay verification over the API, on a real Postgres: one saga, and a filter as a durable
job run by the bulk-repair runner (stopped mid-job and resumed by another)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from coordinator.api import RepairJobRunner
from tests.integration.test_api_support import (
    INPUT,
    OPERATOR,
    VIEWER,
    Api,
    api,  # noqa: F401
    api_store,  # noqa: F401
    bearer,
)

pytestmark = pytest.mark.integration


async def _start(api: Api, saga_type: str = "tcc_order") -> str:
    r = await api.post("/sagas", {"type": saga_type, "input": INPUT})
    assert r.status_code == 201, r.text
    return str(r.json()["saga_id"])


async def _tamper(api: Api, saga_id: str) -> None:
    """Make the stored snapshot disagree with what the history replays to."""
    async with api.store.pool.acquire() as conn:
        await conn.execute(
            "UPDATE sagas SET snapshot = jsonb_set(snapshot::jsonb, '{reason}',"
            " '\"edited by hand\"')::json WHERE id = $1", UUID(saga_id))


async def test_verify_one_saga(api: Api) -> None:
    good, bad = await _start(api), await _start(api)
    await _tamper(api, bad)
    before = len((await api.get(f"/sagas/{good}/history")).json()["entries"])
    r = await api.get(f"/sagas/{good}/verify")
    assert r.status_code == 200, r.text
    assert r.json() == {"saga_id": good, "ok": True, "from_seq": 0,
                        "replayed_events": before, "differences": []}
    r = await api.get(f"/sagas/{bad}/verify")
    assert r.status_code == 200 and r.json()["ok"] is False
    assert r.json()["differences"] == [
        ".reason: stored 'edited by hand' != replayed None"]
    # Verifying changes nothing and needs credentials; an unknown saga is a 404.
    assert len((await api.get(f"/sagas/{good}/history")).json()["entries"]) == before
    assert (await api.client.get(f"/sagas/{good}/verify")).status_code == 401
    missing = await api.get(f"/sagas/{uuid4()}/verify")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "saga_not_found"
    assert (await api.get("/sagas/not-a-uuid/verify")).status_code == 422


async def test_verify_job_over_a_filter_survives_a_runner_stop(api: Api) -> None:
    sagas = [await _start(api) for _ in range(3)]
    other = await _start(api, "ship_order")  # not matched by the filter
    await _tamper(api, sagas[1])
    body = {"filter": {"saga_type": "tcc_order"}, "reason": "after the 1.4.2 upgrade"}
    as_viewer = await api.client.post("/verifications", json=body, headers=bearer(VIEWER))
    assert as_viewer.status_code == 403
    empty = await api.post("/verifications", {"filter": {}})
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "empty_filter"
    big = await api.post("/verifications", {**body, "max_sagas": 2})
    assert big.status_code == 422 and big.json()["error"]["code"] == "too_many_sagas"
    r = await api.post("/verifications", body, token=OPERATOR)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    assert (r.json()["total"], r.json()["status"], r.json()["actor"]) == (3, "pending", "olga")

    reached = asyncio.Event()

    async def after_item(job: UUID, saga: UUID) -> None:
        reached.set()
        await asyncio.Event().wait()  # hang after the first saga until stopped

    first = RepairJobRunner(api.store, name="first", after_item=after_item,
                            poll=timedelta(milliseconds=50))
    await first.start()
    await asyncio.wait_for(reached.wait(), 10)
    await first.stop()
    job = (await api.get(f"/verifications/{job_id}")).json()
    assert job["status"] == "running" and job["counts"]["pending"] == 2
    assert sum(job["counts"].values()) == 3

    assert await RepairJobRunner(api.store, name="second").run_once()
    job = (await api.get(f"/verifications/{job_id}")).json()
    assert job["status"] == "done" and job["counts"] == {"verified": 2, "differs": 1}
    outcome = {i["saga_id"]: (i["outcome"], i["status"]) for i in job["items"]}
    assert set(outcome) == set(sagas) and other not in outcome
    assert outcome[sagas[1]] == ("differs", "running")
    (differs,) = [i for i in job["items"] if i["outcome"] == "differs"]
    assert differs["message"] == ".reason: stored 'edited by hand' != replayed None"
    # A verify job is not a repair job, and the other way round.
    assert (await api.get(f"/repairs/{job_id}")).status_code == 404
    repair = await api.post("/repairs", {"verb": "cancel", "reason": "x",
                                         "filter": {"saga_type": "ship_order"}})
    assert repair.status_code == 202, repair.text
    gone = await api.get(f"/verifications/{repair.json()['job_id']}")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "job_not_found"
