"""The web UI in headless Chromium against the API in its own process and a real Postgres:
sign in, find a saga, open it, repair it, see the result; a viewer sees no repair buttons and
a forged POST is refused.

Screenshots go to ``$SAGAFLOW_SCREENSHOTS`` (the docs' come from
``SAGAFLOW_SCREENSHOTS=docs/screenshots``), else to the test's temporary directory.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from coordinator.engine import ReplyReceived
from coordinator.store import SagaStore
from participant_sdk.protocol import Outcome
from tests.e2e.browser import (
    api_process,
    chromium,
    click_through,
    need_browser,
    sign_in,
    sign_out,
)
from tests.integration.test_api_support import INPUT, OPERATOR, TOKENS, VIEWER, make_dead, pump
from tests.integration.test_store_support import (
    ManualClock,
    make_registry,
    migrated,
    outbox_commands,
    reply_to,
)

pytestmark = pytest.mark.e2e

SAGAS = ["tests.integration.test_store_support:TccOrder",
         "tests.integration.test_store_support:ShipOrder"]


@dataclass
class Site:
    base: str
    dead: list[UUID]
    completed: UUID
    shots: Path
    dsn: str
    prefix: str
    running: UUID


@pytest.fixture
async def seeded(fresh_db: str,
                 topic_prefix: str) -> AsyncIterator[tuple[str, list[UUID], UUID, UUID]]:
    need_browser()
    await migrated(fresh_db)
    clock = ManualClock()
    async with await SagaStore.open(fresh_db, make_registry(topic_prefix), max_size=2,
                                    clock=clock) as store:
        done = (await store.start_saga("ship_order", INPUT)).record.saga_id
        for _ in range(6):
            await pump(store, clock, script=lambda cmd: Outcome.OK)
        dead = await make_dead(store, clock, n=2)
        running = (await store.start_saga("ship_order", INPUT)).record.saga_id
    yield fresh_db, dead, done, running


@pytest.fixture
def site(seeded: tuple[str, list[UUID], UUID, UUID], topic_prefix: str,
         tmp_path: Path) -> Iterator[Site]:
    dsn, dead, done, running = seeded
    env = {"SAGAFLOW_API_TOKENS": TOKENS, "SAGAFLOW_UI_SESSION_SECRET": "e2e-secret-123",
           "SAGAFLOW_API_RUN_JOBS": "false", "SAGAFLOW_WAKE_RELAYS": "false"}
    args = ["--dsn", dsn, "--topic-prefix", topic_prefix]
    for saga in SAGAS:
        args += ["--saga", saga]
    shots = Path(os.environ.get("SAGAFLOW_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with api_process(env, args, tmp_path / "api.log") as base:
        yield Site(base, dead, done, shots, dsn, topic_prefix, running)




def test_an_operator_finds_a_dead_saga_and_repairs_it(site: Site, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    saga_id = site.dead[0]
    with chromium(tmp_path / "profile") as driver:
        sign_in(driver, site.base, "/ui/sagas", OPERATOR)
        assert "olga" in driver.find_element(By.ID, "whoami").text
        driver.save_screenshot(str(site.shots / "sagas.png"))
        driver.find_element(By.ID, "q").send_keys(str(saga_id)[:7])
        click_through(driver, driver.find_element(By.ID, "apply-filter"))
        rows = driver.find_elements(By.CSS_SELECTOR, "#saga-table tbody tr")
        assert len(rows) == 1 and "dead" in rows[0].text
        click_through(driver, rows[0].find_element(By.CSS_SELECTOR, "a"))
        assert driver.current_url.endswith(f"/ui/sagas/{saga_id}")
        assert "dead at step" in driver.find_element(By.ID, "failure").text
        current = driver.find_element(By.CSS_SELECTOR, "svg.machine g.current")
        assert current.get_attribute("data-state") == "dead"
        driver.save_screenshot(str(site.shots / "saga-dead.png"))
        driver.find_element(By.CSS_SELECTOR, "#verb-resolve summary").click()
        confirm = driver.find_element(By.ID, "confirm-resolve")
        confirm.click()  # no reason yet: the browser keeps the form (required field)
        assert driver.current_url.endswith(f"/ui/sagas/{saga_id}")
        assert not driver.find_elements(By.ID, "flash")
        driver.find_element(By.ID, "reason-resolve").send_keys("refund done by hand, INC-7")
        driver.save_screenshot(str(site.shots / "saga-repair.png"))
        click_through(driver, driver.find_element(By.ID, "confirm-resolve"))
        flash = driver.find_element(By.ID, "flash").text
        assert "resolve applied by olga: the saga is now completed" in flash
        assert "completed" in driver.find_element(By.CSS_SELECTOR, ".head .badge").text
        history = driver.find_element(By.ID, "history").text
        assert "refund done by hand, INC-7" in history and "operator:olga" in history
        driver.save_screenshot(str(site.shots / "saga-repaired.png"))
        driver.get(f"{site.base}/ui/")
        assert driver.find_element(By.ID, "dead-count").text.startswith("1")
        driver.save_screenshot(str(site.shots / "overview.png"))
        sign_out(driver)
        driver.get(f"{site.base}/ui/dead")
        assert "/ui/login" in driver.current_url


_POST = """
const [url, token, done] = arguments;
const body = new URLSearchParams({verb: "resolve", reason: "forged", status: "completed"});
if (token !== null) body.set("csrf_token", token);
fetch(url, {method: "POST", body, credentials: "same-origin", redirect: "manual"})
  .then((r) => done(r.status)).catch((e) => done(String(e)));
"""


def test_a_viewer_sees_no_repair_buttons_and_a_forged_post_is_refused(
        site: Site, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    saga_id = site.dead[1]
    url = f"{site.base}/ui/sagas/{saga_id}/repair"
    with chromium(tmp_path / "profile") as driver:
        sign_in(driver, site.base, "/ui/sagas", VIEWER)
        driver.get(f"{site.base}/ui/sagas/{saga_id}")
        driver.implicitly_wait(0)
        assert not driver.find_elements(By.CSS_SELECTOR, "details.verb, [id^=confirm-]")
        assert "can look but not repair" in driver.find_element(By.ID, "no-repair").text
        driver.get(f"{site.base}/ui/dead")
        assert not driver.find_elements(By.ID, "bulk")
        driver.get(f"{site.base}/ui/sagas/{saga_id}")
        token = driver.find_element(By.NAME, "csrf_token").get_attribute("value")
        # A viewer's valid token: the role gate on the server refuses it.
        assert driver.execute_async_script(_POST, url, token) == 403
        _sign_in_again_as(driver, site, OPERATOR)
        # An operator's session, but the request carries no token, or a wrong one.
        assert driver.execute_async_script(_POST, url, None) == 403
        assert driver.execute_async_script(_POST, url, "A" * 43) == 403
        driver.get(f"{site.base}/ui/sagas/{saga_id}")
        assert "dead" in driver.find_element(By.CSS_SELECTOR, ".head .badge").text


def _sign_in_again_as(driver: Any, site: Site, token: str) -> None:

    sign_out(driver)
    sign_in(driver, site.base, "/ui/sagas", token)


async def _answer_outstanding(site: Site) -> None:
    """Play the participant: answer the running saga's command, as its reply would."""
    async with await SagaStore.open(site.dsn, make_registry(site.prefix), max_size=1) as store:
        for cmd in await outbox_commands(store):
            if cmd.saga_id == site.running:
                await store.apply(cmd.saga_id, ReplyReceived(reply=reply_to(cmd, Outcome.OK)),
                                  actor=f"participant:{cmd.participant}")


def test_a_running_saga_page_follows_the_saga_live(site: Site, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with chromium(tmp_path / "profile") as driver:
        sign_in(driver, site.base, "/ui/sagas", VIEWER)
        driver.get(f"{site.base}/ui/sagas/{site.running}")
        assert driver.find_element(By.ID, "live-toggle").is_selected()
        assert "reply_received" not in driver.find_element(By.ID, "history").text
        asyncio.run(_answer_outstanding(site))
        WebDriverWait(driver, 15).until(
            lambda d: "reply_received" in d.find_element(By.ID, "history").text)
        assert "updated" in driver.find_element(By.ID, "live-note").text
