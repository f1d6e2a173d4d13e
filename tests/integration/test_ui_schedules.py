# ruff: noqa: F811  (fixtures are imported from test_ui and test_api_support)
"""The web UI's schedules pages over HTTP on a real database: list, detail with runs and
next times, pause/resume/trigger with CSRF and the operator role."""

from __future__ import annotations

import pytest

from coordinator.schedules import ScheduleDefinition, ScheduleFirer, ScheduleSpec
from coordinator.schedules import repository as repo
from tests.integration.test_api_support import OPERATOR, VIEWER, api_store  # noqa: F401
from tests.integration.test_ui import Browser, ui  # noqa: F401

pytestmark = pytest.mark.integration


async def test_schedules_pages_and_actions(ui: Browser) -> None:
    d = ScheduleDefinition(id="hourly", saga_type="ship_order",
                           input={"order_id": "h", "amount": 1},
                           spec=ScheduleSpec(cron=("0 * * * *",)))
    async with ui.store.pool.acquire() as conn:
        await repo.insert(conn, d, now=ui.clock(), actor="test")
    await ScheduleFirer(ui.store).fire_due(now=ui.clock().replace(hour=1))
    assert (await ui.sign_in(VIEWER)).status_code == 303
    listing = await ui.client.get("/ui/schedules")
    assert listing.status_code == 200
    assert 'href="/ui/schedules/hourly"' in listing.text and "ship_order" in listing.text
    assert '<a href="/ui/schedules" class="on">Schedules</a>' in listing.text
    detail = await ui.client.get("/ui/schedules/hourly")
    assert "started" in detail.text and "2026-01-01 02:00" in detail.text
    assert "Confirm pause" not in detail.text  # a viewer sees no action
    csrf = await ui.csrf("/ui/schedules/hourly")
    refused = await ui.client.post("/ui/schedules/hourly/pause",
                                   data={"csrf_token": csrf, "reason": "x"})
    assert refused.status_code == 403
    await ui.client.post("/ui/logout", data={"csrf_token": csrf})
    assert (await ui.sign_in(OPERATOR)).status_code == 303
    csrf = await ui.csrf("/ui/schedules/hourly")
    no_csrf = await ui.client.post("/ui/schedules/hourly/pause", data={"reason": "x"})
    assert no_csrf.status_code == 403
    done = await ui.client.post("/ui/schedules/hourly/pause",
                                data={"csrf_token": csrf, "reason": "month end"})
    assert done.status_code == 303
    page = await ui.client.get("/ui/schedules/hourly")
    assert "paused" in page.text and "pause by olga: month end" in page.text
    assert "Confirm resume" in page.text
    csrf = await ui.csrf("/ui/schedules/hourly")
    await ui.client.post("/ui/schedules/hourly/trigger",
                         data={"csrf_token": csrf, "reason": "rerun"})
    page = await ui.client.get("/ui/schedules/hourly")
    assert "triggered" in page.text and "run started by olga" in page.text
    missing = await ui.client.get("/ui/schedules/nope")
    assert missing.status_code == 404
