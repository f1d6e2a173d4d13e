"""The console's "where" box in headless Chromium against the API in its own process and a
real Postgres: a filter over search attributes lists the matching sagas, stays in the URL,
a bad one points at its column, and a saga's page shows its attributes (issue 37)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse
from uuid import UUID

import pytest

from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from tests.e2e.browser import api_process, chromium, click_through, need_browser, sign_in
from tests.integration.search_support import SAGAS
from tests.integration.test_api_support import TOKENS, VIEWER
from tests.integration.test_store_support import ManualClock, migrated

pytestmark = pytest.mark.e2e


@pytest.fixture
async def seeded(fresh_db: str, topic_prefix: str) -> tuple[str, UUID, UUID]:
    need_browser()
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=SAGAS)
    async with await SagaStore.open(fresh_db, registry, max_size=2, clock=ManualClock()
                                    ) as store:
        big = (await store.start_saga("shop", {"order_id": "o-1", "customer_id": "c-42",
                                               "amount_cents": 1500})).record.saga_id
        small = (await store.start_saga("shop", {"order_id": "o-2", "customer_id": "c-9",
                                                 "amount_cents": 10})).record.saga_id
    return fresh_db, big, small


@pytest.fixture
def base(seeded: tuple[str, UUID, UUID], topic_prefix: str, tmp_path: Path) -> Iterator[str]:
    dsn = seeded[0]
    env = {"SAGAFLOW_API_TOKENS": TOKENS, "SAGAFLOW_UI_SESSION_SECRET": "e2e-secret-123",
           "SAGAFLOW_API_RUN_JOBS": "false", "SAGAFLOW_WAKE_RELAYS": "false"}
    args = ["--dsn", dsn, "--topic-prefix", topic_prefix]
    for saga in SAGAS:
        args += ["--saga", f"tests.integration.search_support:{saga.__name__}"]
    with api_process(env, args, tmp_path / "api.log") as url:
        yield url


def test_a_viewer_filters_sagas_by_their_attributes(
    base: str, seeded: tuple[str, UUID, UUID], tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    _, big, small = seeded
    shots = Path(os.environ.get("SAGAFLOW_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with chromium(tmp_path / "profile") as driver:
        sign_in(driver, base, "/ui/sagas", VIEWER)
        box = driver.find_element(By.ID, "where")
        box.send_keys("customer_id = 'c-42' and amount > 1000")
        click_through(driver, driver.find_element(By.ID, "apply-filter"))
        table = driver.find_element(By.ID, "saga-table").text
        assert str(big)[:8] in table and str(small)[:8] not in table
        driver.save_screenshot(str(shots / "sagas-where.png"))
        query = parse_qs(urlparse(driver.current_url).query)
        assert query["where"] == ["customer_id = 'c-42' and amount > 1000"]
        # The box keeps the filter (a reload of the URL shows the same list).
        driver.get(driver.current_url)
        assert driver.find_element(By.ID, "where").get_attribute("value") == \
            "customer_id = 'c-42' and amount > 1000"
        box = driver.find_element(By.ID, "where")
        box.clear()
        box.send_keys("amount > 'lots'")
        click_through(driver, driver.find_element(By.ID, "apply-filter"))
        error = driver.find_element(By.ID, "where-error").text
        assert "column 10: 'amount' holds numbers" in error and error.rstrip().endswith("^")
        assert str(big)[:8] not in driver.find_element(By.ID, "saga-table").text
        driver.save_screenshot(str(shots / "sagas-where-error.png"))
        driver.get(f"{base}/ui/sagas/{big}")
        card = driver.find_element(By.ID, "search-attributes").text
        assert "customer_id c-42" in card and "amount 1500" in card
        driver.save_screenshot(str(shots / "saga-search-attributes.png"))
