"""The inbox in headless Chromium against the API in its own process, driven as a person
would: sign in, find the task in the queue (an overdue one marked and first), claim it, send
the form wrongly and see the error beside the field, send it rightly, and see the saga move
on to the finance quorum, with the task's node marked in the saga's diagram; then a finance
approver claims one of its tasks from their group's queue and approves it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.e2e.browser import (
    api_process,
    chromium,
    click_through,
    need_browser,
    sign_in,
    sign_out,
)
from tests.integration.task_api_support import EXPENSE, expense_store, token
from tests.integration.test_human_tasks_store import answer_commands

pytestmark = pytest.mark.e2e

TOKENS = f"mia:viewer:{token('mia')},fay:viewer+finance:{token('fay')}"


@pytest.fixture
async def seeded(fresh_db: str, topic_prefix: str) -> AsyncIterator[tuple[str, str]]:
    """Two expense sagas waiting for mia; the second one's task is overdue."""
    need_browser()
    async with expense_store(fresh_db, topic_prefix, lambda: datetime.now(UTC)) as store:
        ids = []
        for expense in ("x-1", "x-late"):
            started = await store.start_saga("expense", EXPENSE | {"expense_id": expense},
                                             started_by="erin")
            await answer_commands(store, started.record.saga_id)
            ids.append(started.record.saga_id)
        async with store.pool.acquire() as conn:
            await conn.execute("UPDATE human_tasks SET due_at = $2 WHERE saga_id = $1",
                               ids[1], datetime.now(UTC) - timedelta(hours=2))
    yield fresh_db, str(ids[0])


@pytest.fixture
def base(seeded: tuple[str, str], topic_prefix: str, tmp_path: Path) -> Iterator[str]:
    env = {"SAGAFLOW_API_TOKENS": TOKENS, "SAGAFLOW_UI_SESSION_SECRET": "e2e-secret-123",
           "SAGAFLOW_API_RUN_JOBS": "false", "SAGAFLOW_WAKE_RELAYS": "false"}
    args = ["--dsn", seeded[0], "--topic-prefix", topic_prefix,
            "--saga", "examples.expense_saga:ExpenseSaga"]
    with api_process(env, args, tmp_path / "api.log") as url:
        yield url


def test_a_manager_approves_an_expense_in_the_inbox(
        base: str, seeded: tuple[str, str], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    saga_id = seeded[1]
    with chromium(tmp_path / "profile") as driver:
        sign_in(driver, base, "/ui/tasks", token("mia"))
        assert driver.find_element(By.ID, "inbox-count").text == "2"
        assert "You hold no task" in driver.find_element(By.ID, "no-tasks").text
        click_through(driver, driver.find_element(By.ID, "view-queue"))
        rows = driver.find_elements(By.CSS_SELECTOR, "#task-table tbody tr")
        assert "x-late" in rows[0].text and "overdue" in rows[0].text  # first, and marked
        assert "x-1:" in rows[1].text and "overdue" not in rows[1].text
        click_through(driver, rows[1].find_element(By.CSS_SELECTOR, "a.task-link"))
        assert "120.00 EUR for erin" in driver.find_element(By.ID, "task-title").text
        click_through(driver, driver.find_element(By.ID, "claim"))
        assert "claim done by mia" in driver.find_element(By.ID, "flash").text
        assert driver.find_element(By.ID, "assignee").text == "mia"

        # Wrongly: no outcome chosen. The error stands beside the field, the comment stays.
        driver.find_element(By.ID, "in-comment").send_keys("train to the customer")
        click_through(driver, driver.find_element(By.ID, "complete"))
        assert driver.find_element(By.ID, "error-outcome").text == "Field required"
        assert "invalid" in driver.find_element(By.ID, "field-outcome").get_attribute("class")
        assert driver.find_element(By.ID, "in-comment").get_attribute("value") == \
            "train to the customer"

        # Rightly.
        Select(driver.find_element(By.ID, "in-outcome")).select_by_visible_text("approve")
        click_through(driver, driver.find_element(By.ID, "complete"))
        assert "complete done by mia; saga running" in driver.find_element(By.ID, "flash").text
        assert "approve" in driver.find_element(By.ID, "task-outcome").text
        assert driver.find_element(By.ID, "inbox-count").text == "1"

        # The saga moved on: the finance quorum's three tasks are open.
        click_through(driver, driver.find_element(By.ID, "in-diagram"))
        assert driver.current_url.endswith(f"/ui/sagas/{saga_id}?task=manager_approval#diagram")
        marked = driver.find_element(By.CSS_SELECTOR, 'g.state.focus')
        assert marked.get_attribute("data-state") == "manager_approval"
        tasks = driver.find_elements(By.CSS_SELECTOR, "#saga-tasks tbody tr")
        states = sorted(r.find_elements(By.TAG_NAME, "td")[1].text for r in tasks)
        assert states == ["completed", "open", "open", "open"]

        # A finance approver finds the quorum's tasks in their group's queue.
        sign_out(driver)
        sign_in(driver, base, "/ui/tasks?view=queue", token("fay"))
        rows = driver.find_elements(By.CSS_SELECTOR, "#task-table tbody tr")
        mine = [r for r in rows if "x-1:" in r.text]
        assert len(mine) == 3 and all("finance" in r.text for r in mine)
        click_through(driver, mine[0].find_element(By.CSS_SELECTOR, "button.claim"))
        assert "claim done by fay" in driver.find_element(By.ID, "flash").text
        Select(driver.find_element(By.ID, "in-outcome")).select_by_visible_text("approve")
        driver.find_element(By.ID, "in-cost_center").send_keys("cc-7")
        click_through(driver, driver.find_element(By.ID, "complete"))
        assert "complete done by fay; saga running" in driver.find_element(By.ID, "flash").text
        assert '"cost_center": "cc-7"' in driver.find_element(By.ID, "task-result").text
