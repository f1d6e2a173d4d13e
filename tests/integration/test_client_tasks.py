"""``SagaClient.tasks`` against the real API on real Postgres: the inbox, one task with its
form, claim, a refused second claim, a form refused per field, completion moving the saga
on, and the other verbs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import BaseModel

from coordinator.client import SagaApiError, SagaClient
from examples.expense_saga import FinanceReview
from tests.integration.task_api_support import TaskApi, task_api, token

pytestmark = pytest.mark.integration


@pytest.fixture
async def api(fresh_db: str, topic_prefix: str) -> AsyncIterator[TaskApi]:
    async with task_api(fresh_db, topic_prefix) as api:
        yield api


def client(api: TaskApi, who: str) -> SagaClient:
    transport = api.client._transport
    assert isinstance(transport, httpx.ASGITransport)
    return SagaClient("https://api", token=token(who), transport=transport)


class Approve(BaseModel):
    outcome: str = "approve"


async def test_the_task_verbs(api: TaskApi) -> None:
    saga_id = await api.start()
    async with client(api, "mia") as mia, client(api, "fay") as fay, \
            client(api, "finn") as finn:
        (task,) = await mia.tasks.list()
        assert task["node"] == "manager_approval"
        assert await mia.tasks.counts() == {"total": 1, "overdue": 0, "mine": 0,
                                            "unclaimed": 1}
        detail = await fay.tasks.get(task["id"])
        assert detail["form_schema"]["required"] == ["outcome"]
        assert (await mia.tasks.claim(task["id"]))["task"]["assignee"] == "mia"
        assert (await mia.tasks.list(scope="mine"))[0]["id"] == task["id"]
        await mia.tasks.unclaim(task["id"])
        await mia.tasks.claim(task["id"])
        await mia.tasks.comment(task["id"], "looks fine")
        done = await mia.tasks.complete(task["id"], Approve())
        assert done["task"]["state"] == "completed"
        assert [c["text"] for c in done["task"]["comments"]] == ["looks fine"]

        finance = await fay.tasks.list(saga_id=saga_id, overdue=False)
        assert sorted(t["node"] for t in finance) == ["finance_1", "finance_2", "finance_3"]
        first = finance[0]["id"]
        await fay.tasks.claim(first)
        with pytest.raises(SagaApiError) as refused:
            await finn.tasks.claim(first)
        assert refused.value.status == 409 and "claimed by fay" in refused.value.message
        with pytest.raises(SagaApiError) as bad:
            await fay.tasks.complete(first, {"outcome": "maybe", "cost_center": "c" * 99})
        assert bad.value.status == 422 and len(bad.value.details) == 2
        await fay.tasks.delegate(first, "finn", return_to_owner=True)
        await finn.tasks.complete(first, FinanceReview(outcome="approve", cost_center="c7"))
        back = await fay.tasks.get(first)
        assert back["assignee"] == "fay" and back["proposal"]["cost_center"] == "c7"
        await fay.tasks.reassign(first, "fred")
        assert (await fay.tasks.get(first))["assignee"] == "fred"
        assert len(await fay.tasks.of_saga(saga_id)) == 4
