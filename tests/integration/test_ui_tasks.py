"""The inbox of the web UI over HTTP on a real database: the navigation's count, my tasks and
my groups' queue with overdue ones first, claim, a generated form refused field by field
with the values kept, completion, refusals shown as the engine gave them, and the task's
node marked in its saga's diagram. (tests/e2e/test_ui_tasks_browser.py drives it in
Chromium.)"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from coordinator.ui import UiSettings
from tests.integration.task_api_support import TaskApi, task_api, token
from tests.integration.test_ui import _CSRF

pytestmark = pytest.mark.integration


@pytest.fixture
async def ui(fresh_db: str, topic_prefix: str) -> AsyncIterator[TaskApi]:
    async with task_api(fresh_db, topic_prefix,
                        ui=UiSettings(session_secret="test-secret-1")) as api:
        yield api


async def sign_in(ui: TaskApi, who: str) -> str:
    """Sign ``who`` in (a fresh session); the CSRF token of their session."""
    ui.client.cookies.clear()
    found = _CSRF.search((await ui.client.get("/ui/login")).text)
    assert found
    signed = await ui.client.post("/ui/login", data={"csrf_token": found.group(1),
                                                     "token": token(who), "next": "/ui/tasks"})
    assert signed.status_code == 303, signed.text[:300]
    found = _CSRF.search((await ui.client.get("/ui/tasks")).text)
    assert found
    return found.group(1)


async def post(ui: TaskApi, path: str, csrf: str, **form: str) -> tuple[int, str]:
    answer = await ui.client.post(path, data={"csrf_token": csrf, **form})
    if answer.status_code == 303:
        answer = await ui.client.get(answer.headers["location"])
    return answer.status_code, answer.text


async def test_a_person_claims_fills_in_and_completes_a_task(ui: TaskApi) -> None:
    saga_id = await ui.start()
    late = await ui.start(expense_id="x-late")
    manager, late_task = [await ui.task_id(s, "manager_approval") for s in (saga_id, late)]
    ui.clock.advance(timedelta(days=1))
    async with ui.store.pool.acquire() as conn:  # the second one is due already
        await conn.execute("UPDATE human_tasks SET due_at = $2 WHERE id = $1", late_task,
                           ui.clock.now - timedelta(hours=1))
    csrf = await sign_in(ui, "mia")
    queue = (await ui.client.get("/ui/tasks?view=queue")).text
    assert re.search(r'id="inbox-count">2<', queue)
    rows = re.findall(r'data-task="([^"]+)"', queue)
    assert rows == [late_task, manager]  # overdue first
    assert queue.count("overdue-badge") == 1
    assert "You hold no task" in (await ui.client.get("/ui/tasks")).text

    status, text = await post(ui, f"/ui/tasks/{manager}/claim", csrf)
    assert status == 200 and "claim done by mia" in text and 'id="assignee">mia<' in text
    assert re.search(r'<option >approve</option>', text)  # the Literal as a select
    status, text = await post(ui, f"/ui/tasks/{manager}/complete", csrf,
                              **{"f.outcome": "", "f.comment": "x" * 2001})
    assert status == 422
    assert re.search(r'id="error-outcome"[^>]*>Field required<', text)
    assert re.search(r'id="error-comment"[^>]*>String should have at most 2000', text)
    assert "x" * 2001 in text  # what the person typed is kept
    status, text = await post(ui, f"/ui/tasks/{manager}/complete", csrf,
                              **{"f.outcome": "approve", "f.comment": "fine"})
    assert status == 200 and "saga running" in text and "Outcome <b>approve</b>" in text

    csrf = await sign_in(ui, "fay")
    queue = (await ui.client.get("/ui/tasks?view=queue")).text
    finance = re.findall(r'data-task="([^"]+)"', queue)
    assert len(finance) == 3
    await post(ui, f"/ui/tasks/{finance[0]}/claim", csrf)
    csrf = await sign_in(ui, "finn")
    status, text = await post(ui, f"/ui/tasks/{finance[0]}/claim", csrf)
    assert 'class="flash error"' in text and "claimed by fay" in text
    status, text = await post(ui, f"/ui/tasks/{finance[0]}/comment", csrf, text="hello")
    assert "comment done by finn" in text and "hello" in text

    page = (await ui.client.get(f"/ui/tasks/{manager}")).text
    link = re.search(r'id="in-diagram" href="([^"]+)"', page)
    assert link and link.group(1) == f"/ui/sagas/{saga_id}?task=manager_approval#diagram"
    saga_page = (await ui.client.get(link.group(1).split("#")[0])).text
    assert re.search(r'<g class="state[^"]*focus[^"]*" data-state="manager_approval">',
                     saga_page)
    assert 'id="saga-tasks"' in saga_page


async def test_the_form_is_generated_from_the_schema(ui: TaskApi) -> None:
    saga_id = await ui.start()
    task = await ui.task_id(saga_id, "manager_approval")
    csrf = await sign_in(ui, "ada")  # an admin may complete in anyone's place
    text = (await ui.client.get(f"/ui/tasks/{task}")).text
    assert '<select name="f.outcome" id="in-outcome">' in text
    assert '<textarea name="f.comment" id="in-comment"' in text
    status, text = await post(ui, f"/ui/tasks/{task}/complete", csrf, **{"f.outcome": "nah"})
    assert status == 422 and "Input should be &#39;approve&#39; or &#39;reject&#39;" in text
    status, text = await post(ui, f"/ui/tasks/{task}/explode", csrf)
    assert status == 404
