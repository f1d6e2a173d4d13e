"""The schedules pages in headless Chromium against the API in its own process: an operator
finds a schedule from the nav, reads its runs and next times, pauses it with a reason, and
triggers a run; a viewer sees no action buttons."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from coordinator.schedules import IntervalSpec, ScheduleDefinition, ScheduleFirer, ScheduleSpec
from coordinator.schedules import repository as repo
from coordinator.store import SagaStore
from tests.e2e.browser import (
    api_process,
    chromium,
    click_through,
    need_browser,
    sign_in,
    sign_out,
)
from tests.integration.test_api_support import OPERATOR, TOKENS, VIEWER
from tests.integration.test_store_support import make_registry, migrated

pytestmark = pytest.mark.e2e

SAGAS = ["tests.integration.test_store_support:ShipOrder"]


@pytest.fixture
async def seeded(fresh_db: str, topic_prefix: str) -> AsyncIterator[str]:
    need_browser()
    await migrated(fresh_db)
    async with await SagaStore.open(fresh_db, make_registry(topic_prefix),
                                    max_size=2) as store:
        now = datetime.now(UTC)
        d = ScheduleDefinition(
            id="every-minute", saga_type="ship_order", input={"order_id": "m", "amount": 1},
            spec=ScheduleSpec(intervals=(IntervalSpec(every=timedelta(minutes=1)),)),
            overlap="skip", catchup_window=timedelta(hours=1))
        async with store.pool.acquire() as conn:
            await repo.insert(conn, d, now=now - timedelta(minutes=3), actor="seed")
        await ScheduleFirer(store).fire_due(now=now)  # one started, two skipped
    yield fresh_db


@pytest.fixture
def base(seeded: str, topic_prefix: str, tmp_path: Path) -> Iterator[str]:
    env = {"SAGAFLOW_API_TOKENS": TOKENS, "SAGAFLOW_UI_SESSION_SECRET": "e2e-secret-123",
           "SAGAFLOW_API_RUN_JOBS": "false", "SAGAFLOW_WAKE_RELAYS": "false"}
    args = ["--dsn", seeded, "--topic-prefix", topic_prefix, "--saga", SAGAS[0]]
    with api_process(env, args, tmp_path / "api.log") as url:
        yield url




def test_an_operator_pauses_a_schedule_and_triggers_a_run(base: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    with chromium(tmp_path / "profile") as driver:
        sign_in(driver, base, "/ui/schedules", VIEWER)
        row = driver.find_element(By.CSS_SELECTOR, "#schedules tbody tr")
        assert "every-minute" in row.text and "active" in row.text
        click_through(driver, row.find_element(By.CSS_SELECTOR, "a"))
        outcomes = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr")]
        assert sum("skipped" in o for o in outcomes) == 2
        assert sum("started" in o for o in outcomes) == 1
        assert len(driver.find_elements(By.CSS_SELECTOR, "#upcoming li")) == 5
        assert not driver.find_elements(By.ID, "actions")  # a viewer: no buttons
        sign_out(driver)

        sign_in(driver, base, "/ui/schedules", OPERATOR)
        click_through(driver, driver.find_element(By.CSS_SELECTOR, "#schedules tbody tr a"))
        driver.find_element(By.CSS_SELECTOR, "#action-pause summary").click()
        driver.find_element(By.ID, "reason-pause").send_keys("month-end freeze")
        click_through(driver, driver.find_element(By.ID, "confirm-pause"))
        assert "paused by olga" in driver.find_element(By.ID, "flash").text
        assert "pause by olga: month-end freeze" in driver.page_source
        driver.find_element(By.CSS_SELECTOR, "#action-trigger summary").click()
        driver.find_element(By.ID, "reason-trigger").send_keys("rerun for finance")
        click_through(driver, driver.find_element(By.ID, "confirm-trigger"))
        assert "run started by olga" in driver.find_element(By.ID, "flash").text
        first = driver.find_element(By.CSS_SELECTOR, "#runs tbody tr").text
        assert "triggered" in first and "running" in first
        driver.save_screenshot(str(tmp_path / "schedule.png"))
