"""The human-task API on real Postgres: inboxes, the task with its form, each action and
its refusals (a second claim names the holder, completing another's task is a 403, a bad
form lists every field), the chain with four eyes, paging, and the audit log."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from tests.integration.task_api_support import TaskApi, task_api

pytestmark = pytest.mark.integration

MANAGER, FIN_1, FIN_2 = "manager_approval", "finance_1", "finance_2"


@pytest.fixture
async def api(fresh_db: str, topic_prefix: str) -> AsyncIterator[TaskApi]:
    async with task_api(fresh_db, topic_prefix) as api:
        yield api


async def approved_by_manager(api: TaskApi) -> str:
    """A saga whose manager approved: the three finance tasks are open."""
    saga_id = await api.start()
    task = await api.task_id(saga_id, MANAGER)
    assert (await api.post(f"/tasks/{task}/claim")).status_code == 200
    done = await api.post(f"/tasks/{task}/complete", {"data": {"outcome": "approve"}})
    assert done.status_code == 200, done.text
    return str(saga_id)


async def test_the_inbox_shows_a_task_to_its_candidates_only(api: TaskApi) -> None:
    saga_id = await api.start()
    mine = (await api.get("/tasks")).json()
    assert [t["node"] for t in mine["items"]] == [MANAGER] and mine["next_cursor"] is None
    item = mine["items"][0]
    assert item["saga_id"] == str(saga_id) and item["candidate_users"] == ["mia"]
    assert item["title"] == "Expense x-1: 120.00 EUR for erin" and not item["overdue"]
    assert (await api.get("/tasks", who="erin")).json()["items"] == []
    assert (await api.get("/tasks", who="fay")).json()["items"] == []
    assert (await api.get("/tasks/counts")).json() == {"total": 1, "overdue": 0, "mine": 0,
                                                        "unclaimed": 1}
    one = (await api.get(f"/tasks/{item['id']}", who="fay")).json()
    assert one["form_schema"]["properties"]["outcome"]["enum"] == ["approve", "reject"]
    assert one["description"] == "train tickets" and one["excluded_users"] == ["erin"]
    assert one["comments"] == []
    listed = (await api.get(f"/sagas/{saga_id}/tasks", who="erin")).json()
    assert [t["id"] for t in listed] == [item["id"]]


async def test_scope_all_is_for_admins(api: TaskApi) -> None:
    await api.start()
    refused = await api.get("/tasks", params={"scope": "all"}, who="fred")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    every = await api.get("/tasks", params={"scope": "all"}, who="ada")
    assert [t["node"] for t in every.json()["items"]] == [MANAGER]


async def test_claim_complete_and_the_saga_moves_on(api: TaskApi,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.api.audit")
    saga_id = await api.start()
    task = await api.task_id(saga_id, MANAGER)
    claimed = await api.post(f"/tasks/{task}/claim")
    assert claimed.status_code == 200, claimed.text
    assert claimed.json()["task"]["assignee"] == "mia"
    assert (await api.get("/tasks", params={"scope": "mine"})).json()["items"][0]["id"] == task
    done = await api.post(f"/tasks/{task}/complete", {"data": {"outcome": "approve"}})
    body = done.json()
    assert body["task"]["state"] == "completed" and body["task"]["completed_by"] == "mia"
    assert body["saga_status"] == "running"
    finance = (await api.get("/tasks", who="fay")).json()["items"]
    assert sorted(t["node"] for t in finance) == [FIN_1, FIN_2, "finance_3"]
    history = (await api.get(f"/sagas/{saga_id}/history", who="ada")).json()["entries"]
    assert {"task:mia"} <= {h["actor"] for h in history}
    audited = [r.getMessage() for r in caplog.records if r.name == "coordinator.api.audit"]
    assert f"task claim id={task} saga={saga_id} by=mia" in audited
    assert f"task complete id={task} saga={saga_id} by=mia" in audited


async def test_a_second_claim_is_a_409_naming_the_holder(api: TaskApi) -> None:
    saga_id = await approved_by_manager(api)
    task = await api.task_id(saga_id, FIN_1)  # type: ignore[arg-type]
    assert (await api.post(f"/tasks/{task}/claim", who="fay")).status_code == 200
    second = await api.post(f"/tasks/{task}/claim", who="finn")
    assert second.status_code == 409
    error = second.json()["error"]
    assert error["code"] == "task_claimed" and "claimed by fay" in error["message"]
    assert (await api.post(f"/tasks/{task}/claim", who="erin")).status_code == 403


async def test_completing_someone_elses_task_is_a_403(api: TaskApi) -> None:
    saga_id = await approved_by_manager(api)
    task = await api.task_id(saga_id, FIN_1)  # type: ignore[arg-type]
    await api.post(f"/tasks/{task}/claim", who="fay")
    other = await api.post(f"/tasks/{task}/complete", {"data": {"outcome": "approve"}},
                           who="finn")
    assert other.status_code == 403 and other.json()["error"]["code"] == "task_not_assignee"
    assert (await api.get(f"/tasks/{task}")).json()["state"] == "open"
    # An admin may complete it in the holder's place.
    admin = await api.post(f"/tasks/{task}/complete", {"data": {"outcome": "approve"}},
                           who="ada")
    assert admin.status_code == 200 and admin.json()["task"]["completed_by"] == "ada"


async def test_four_eyes_keeps_the_manager_out_of_the_finance_quorum(api: TaskApi) -> None:
    saga_id = await approved_by_manager(api)
    task = await api.task_id(saga_id, FIN_1)  # type: ignore[arg-type]
    # mia is in finance too, but approved the manager's task of the same chain.
    assert task not in {t["id"] for t in (await api.get("/tasks")).json()["items"]}
    refused = await api.post(f"/tasks/{task}/claim")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "task_four_eyes"


async def test_a_bad_form_is_a_422_listing_every_field(api: TaskApi) -> None:
    saga_id = await approved_by_manager(api)
    task = await api.task_id(saga_id, FIN_1)  # type: ignore[arg-type]
    await api.post(f"/tasks/{task}/claim", who="fay")
    bad = await api.post(f"/tasks/{task}/complete",
                         {"data": {"outcome": "maybe", "cost_center": "c" * 51}}, who="fay")
    assert bad.status_code == 422
    error = bad.json()["error"]
    assert error["code"] == "validation_error"
    assert sorted(tuple(d["loc"]) for d in error["details"]) == [
        ("body", "data", "cost_center"), ("body", "data", "outcome")]
    assert (await api.get(f"/tasks/{task}")).json()["state"] == "open"
    missing = await api.post(f"/tasks/{task}/complete", {"data": {}}, who="fay")
    assert [d["loc"] for d in missing.json()["error"]["details"]] == [
        ["body", "data", "outcome"]]


async def test_unclaim_reassign_delegate_and_comment(api: TaskApi) -> None:
    saga_id = await approved_by_manager(api)
    task = await api.task_id(saga_id, FIN_1)  # type: ignore[arg-type]
    await api.post(f"/tasks/{task}/claim", who="fay")
    back = await api.post(f"/tasks/{task}/unclaim", who="fay")
    assert back.status_code == 200 and back.json()["task"]["assignee"] is None
    assert (await api.post(f"/tasks/{task}/unclaim", who="fay")).status_code == 403
    await api.post(f"/tasks/{task}/claim", who="fay")
    moved = await api.post(f"/tasks/{task}/reassign", {"to_user": "finn"}, who="fay")
    assert moved.json()["task"]["assignee"] == "finn"
    delegated = await api.post(f"/tasks/{task}/delegate",
                               {"to_user": "fred", "return_to_owner": True}, who="finn")
    assert delegated.json()["task"]["owner"] == "finn"
    assert delegated.json()["task"]["delegation"] == "pending"
    said = await api.post(f"/tasks/{task}/comments", {"text": "receipt attached"}, who="fred")
    assert [(c["by"], c["text"]) for c in said.json()["task"]["comments"]] == [
        ("fred", "receipt attached")]
    proposed = await api.post(f"/tasks/{task}/complete",
                              {"data": {"outcome": "approve"}}, who="fred")
    assert proposed.json()["task"]["assignee"] == "finn"  # back to the owner to confirm
    assert proposed.json()["task"]["proposal"]["outcome"] == "approve"
    refused = await api.post(f"/tasks/{task}/comments", {"text": "me too"}, who="erin")
    assert refused.status_code == 403
    assert (await api.post(f"/tasks/{task}/reassign", {"to_user": ""},
                           who="finn")).status_code == 422


async def test_unknown_and_closed_tasks(api: TaskApi) -> None:
    missing = await api.post("/tasks/no-such-task/claim")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "task_not_found"
    assert (await api.get("/tasks/no-such-task")).status_code == 404
    saga_id = await approved_by_manager(api)
    task = await api.task_id(saga_id, MANAGER)  # type: ignore[arg-type]
    closed = await api.post(f"/tasks/{task}/claim")
    assert closed.status_code == 409 and closed.json()["error"]["code"] == "task_closed"


async def test_filters_paging_and_overdue(api: TaskApi) -> None:
    for i in range(3):
        await api.start(expense_id=f"x-{i}", amount_cents=100 + i)
        api.clock.advance(timedelta(hours=1))
    first = (await api.get("/tasks", params={"limit": 2})).json()
    assert len(first["items"]) == 2 and first["next_cursor"]
    rest = (await api.get("/tasks", params={"limit": 2, "cursor": first["next_cursor"]})).json()
    assert len(rest["items"]) == 1 and rest["next_cursor"] is None
    titles = [t["title"] for t in first["items"] + rest["items"]]
    assert titles == [f"Expense x-{i}: {(100 + i) / 100:.2f} EUR for erin" for i in range(3)]
    found = (await api.get("/tasks", params={"text": "x-1:"})).json()["items"]
    assert [t["title"][:12] for t in found] == ["Expense x-1:"]
    assert (await api.get("/tasks", params={"overdue": True})).json()["items"] == []
    api.clock.advance(timedelta(days=7))
    overdue = (await api.get("/tasks", params={"overdue": True})).json()["items"]
    assert len(overdue) == 3 and all(t["overdue"] for t in overdue)
    assert (await api.get("/tasks/counts")).json()["overdue"] == 3
    bad = await api.get("/tasks", params={"cursor": "nonsense"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_cursor"
    assert (await api.get("/tasks", params={"state": "nope"})).status_code == 422


def _metric(text: str, line_start: str) -> float:
    """The value of the sample line starting with ``line_start`` in a /metrics page."""
    (value,) = [line.rsplit(" ", 1)[1] for line in text.splitlines()
                if line.startswith(line_start)]
    return float(value)


async def test_metrics_count_open_and_overdue_tasks_and_time_claims(api: TaskApi) -> None:
    saga_id = await api.start()
    api.clock.advance(timedelta(minutes=10))
    task = await api.task_id(saga_id, MANAGER)
    await api.post(f"/tasks/{task}/claim")
    api.clock.advance(timedelta(minutes=20))
    await api.post(f"/tasks/{task}/complete", {"data": {"outcome": "approve"}})
    api.clock.advance(timedelta(days=7))  # the finance tasks are overdue now
    text = (await api.client.get("/metrics")).text
    assert _metric(text, 'sagaflow_tasks_open{candidate_group="finance"}') == 3
    assert _metric(text, 'sagaflow_tasks_overdue{candidate_group="finance"}') == 3
    claim = 'sagaflow_task_time_to_claim_seconds_bucket{le="%s",saga_type="expense",' \
            'task="manager_approval"}'
    assert _metric(text, claim % "300.0") == 0 and _metric(text, claim % "900.0") == 1
    done = 'sagaflow_task_time_to_complete_seconds_bucket{le="%s",saga_type="expense",' \
           'state="completed",task="manager_approval"}'
    assert _metric(text, done % "1800.0") == 1 and _metric(text, done % "900.0") == 0
