# ruff: noqa: F811  (fixtures imported from test_api_support share their names)
"""Bulk repair jobs: durable, resumed after a runner stops or dies, one repair per saga."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from uuid import UUID

import pytest

from coordinator.api import RepairJobRunner
from coordinator.api.jobs import job_marker
from tests.integration.test_api_support import (
    Api,
    api,  # noqa: F401
    api_store,  # noqa: F401
    make_dead,
)

pytestmark = pytest.mark.integration


async def _repairs(api: Api, saga_id: UUID, job_id: str) -> int:
    history = (await api.get(f"/sagas/{saga_id}/history")).json()["entries"]
    return sum(job_marker(UUID(job_id)) in (e["reason"] or "") for e in history)


async def test_bulk_job_resumes_after_restart_and_repairs_each_saga_once(api: Api) -> None:
    dead = await make_dead(api.store, api.clock, 4)
    bad = await api.post("/repairs", {"verb": "resolve", "reason": "x", "filter": {}})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "empty_filter"
    big = await api.post("/repairs", {"verb": "resolve", "reason": "x", "max_sagas": 2,
                                      "filter": {"status": "dead"}})
    assert big.status_code == 422 and big.json()["error"]["code"] == "too_many_sagas"
    r = await api.post("/repairs", {"verb": "resolve", "reason": "refunded by hand",
                                    "status": "compensated", "filter": {"status": "dead"}})
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    assert r.headers["location"] == f"/repairs/{job_id}"
    assert r.json()["total"] == 4 and r.json()["status"] == "pending"

    # Runner 1 stops (as on a coordinator restart) after its second saga.
    reached = asyncio.Event()
    done_items = 0

    async def after_item(job: UUID, saga: UUID) -> None:
        nonlocal done_items
        done_items += 1
        if done_items == 2:
            reached.set()
            await asyncio.Event().wait()  # hang here until stopped

    first = RepairJobRunner(api.store, name="first", after_item=after_item,
                            poll=timedelta(milliseconds=50))
    await first.start()
    await asyncio.wait_for(reached.wait(), 10)
    await first.stop()
    job = (await api.get(f"/repairs/{job_id}")).json()
    assert job["status"] == "running" and job["counts"] == {"applied": 2, "pending": 2}

    async with RepairJobRunner(api.store, name="second", poll=timedelta(milliseconds=50)):
        for _ in range(200):
            job = (await api.get(f"/repairs/{job_id}")).json()
            if job["status"] == "done":
                break
            await asyncio.sleep(0.05)
    assert job["status"] == "done" and job["counts"] == {"applied": 4}
    assert {i["status"] for i in job["items"]} == {"compensated"}
    for saga_id in dead:
        assert await _repairs(api, saga_id, job_id) == 1
        assert (await api.get(f"/sagas/{saga_id}")).json()["status"] == "compensated"


async def test_a_dead_runners_job_is_taken_over_when_its_lease_ends(api: Api) -> None:
    dead = await make_dead(api.store, api.clock, 2)
    running = (await api.post("/sagas", {"type": "ship_order",
                                         "input": {"order_id": "r", "amount": 1}})).json()
    r = await api.post("/repairs", {"verb": "resolve", "reason": "cleanup",
                                    "filter": {"saga_type": "ship_order"}})
    job_id = r.json()["job_id"]
    async with api.store.pool.acquire() as conn:
        # A runner claimed it, repaired the first saga, and died before recording it.
        await conn.execute("UPDATE repair_jobs SET status = 'running', owner = 'dead-replica',"
                           " lease_until = clock_timestamp() + interval '1 second' "
                           "WHERE id = $1", UUID(job_id))
    from coordinator.api.repairs import RepairOptions, apply_repair
    from coordinator.engine import RepairVerb

    await apply_repair(api.store, dead[0], RepairVerb.RESOLVE, principal="olga",
                       reason="cleanup" + job_marker(UUID(job_id)), options=RepairOptions())
    runner = RepairJobRunner(api.store, name="standby", poll=timedelta(milliseconds=100))
    assert not await runner.run_once()  # the lease still holds
    await asyncio.sleep(1.1)
    assert await runner.run_once()
    job = (await api.get(f"/repairs/{job_id}")).json()
    outcomes = {i["saga_id"]: (i["outcome"], i["message"]) for i in job["items"]}
    assert outcomes[str(dead[0])] == ("applied", "applied before the job was resumed")
    assert outcomes[str(dead[1])] == ("applied", None)
    outcome, message = outcomes[running["saga_id"]]
    assert outcome == "refused" and "only a dead saga" in message
    assert job["status"] == "done" and job["counts"] == {"applied": 2, "refused": 1}
    assert await _repairs(api, dead[0], job_id) == 1
    assert (await api.get(f"/repairs/{UUID(int=5)}")).status_code == 404


async def test_repair_jobs_are_listed_newest_first_in_cursor_pages(api: Api) -> None:
    await make_dead(api.store, api.clock, 2)
    ids = []
    for reason in ("first", "second"):
        r = await api.post("/repairs", {"verb": "resolve", "reason": reason,
                                        "filter": {"status": "dead"}})
        assert r.status_code == 202, r.text
        ids.append(r.json()["job_id"])
    verify = await api.post("/verifications", {"reason": "audit", "filter": {"status": "dead"}})
    assert verify.status_code == 202, verify.text  # a verify job is not a repair job
    page = (await api.get("/repairs?limit=1")).json()
    assert [(j["job_id"], j["reason"]) for j in page["items"]] == [(ids[1], "second")]
    assert page["next_cursor"]
    rest = (await api.get(f"/repairs?limit=1&cursor={page['next_cursor']}")).json()
    assert [(j["job_id"], j["reason"]) for j in rest["items"]] == [(ids[0], "first")]
    assert rest["next_cursor"] is None
    bad = await api.get("/repairs?cursor=nonsense")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_cursor"
