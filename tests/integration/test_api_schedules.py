# ruff: noqa: F811  (fixtures imported from the support modules share their names)
"""The schedules over the operator API (ASGI, real Postgres) and the ``saga schedules`` CLI
against the API served by ``python -m coordinator api``."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from datetime import timedelta
from typing import Any

import pytest

from coordinator.cli.ops import main as saga_cli
from coordinator.schedules import ScheduleFirer
from tests.integration.test_api_live import Live, live, seeded_store  # noqa: F401
from tests.integration.test_api_support import (
    OPERATOR,
    VIEWER,
    Api,
    api,  # noqa: F401
    api_store,  # noqa: F401
    bearer,
)

pytestmark = pytest.mark.integration

BODY: dict[str, Any] = {
    "id": "hourly-ship", "saga_type": "ship_order", "input": {"amount": 3},
    "fire_time_field": "order_id",
    "spec": {"cron": ["0 * * * *"], "timezone": "Europe/Berlin"},
    "overlap": "buffer_one", "catchup_window": "PT10M",
}


async def test_create_fire_and_inspect_a_schedule(api: Api, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.api.audit")
    # 2026-01-01T00:00Z is 01:00 in Berlin: the next hour is 01:00Z.
    r = await api.post("/schedules", BODY)
    assert r.status_code == 201, r.text
    assert r.json()["next_fire_at"] == "2026-01-01T01:00:00Z"
    assert r.headers["location"] == "/schedules/hourly-ship"
    assert r.json()["created_by"] == "olga"
    assert "schedule create id=hourly-ship type=ship_order by=olga" in caplog.text
    assert (await api.post("/schedules", BODY)).json()["error"]["code"] == "schedule_conflict"
    r = await api.get("/schedules/hourly-ship/preview", params={"count": 3})
    assert r.json()["times"] == ["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z",
                                 "2026-01-01T03:00:00Z"]
    api.clock.advance(timedelta(hours=1, seconds=2))
    await ScheduleFirer(api.store).fire_due(now=api.clock())
    detail = (await api.get("/schedules/hourly-ship")).json()
    assert detail["fired_count"] == 1 and detail["upcoming"][0] == "2026-01-01T02:00:00Z"
    run = detail["recent_runs"][0]
    assert run["outcome"] == "started" and run["saga_status"] == "running"
    assert run["lag_seconds"] == 2.0
    saga = (await api.get(f"/sagas/{run['saga_id']}")).json()
    assert saga["input"]["order_id"] == "2026-01-01T01:00:00+00:00"
    listed = (await api.get("/schedules", params={"type": "ship_order"})).json()
    assert [s["definition"]["id"] for s in listed["items"]] == ["hourly-ship"]


async def test_operator_actions_are_role_checked_and_audited(api: Api, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.api.audit")
    assert (await api.post("/schedules", BODY, token=VIEWER)).status_code == 403
    assert (await api.post("/schedules", BODY)).status_code == 201
    assert (await api.get("/schedules")).status_code == 200
    assert (await api.client.get("/schedules")).status_code == 401
    r = await api.post("/schedules/hourly-ship/pause", {"reason": "month end"}, token=VIEWER)
    assert r.status_code == 403
    r = await api.post("/schedules/hourly-ship/pause", {"reason": "month end"})
    assert r.json()["definition"]["paused"] is True
    assert r.json()["definition"]["note"] == "pause by olga: month end"
    api.clock.advance(timedelta(hours=3))
    assert (await ScheduleFirer(api.store).fire_due(now=api.clock())).schedules == 0
    r = await api.post("/schedules/hourly-ship/resume", {"reason": "done"})
    assert r.json()["next_fire_at"] == "2026-01-01T04:00:00Z"  # the pause is not caught up
    r = await api.post("/schedules/hourly-ship/trigger", {"reason": "rerun"})
    assert r.status_code == 201 and r.json()["outcome"] == "triggered"
    r = await api.post("/schedules/hourly-ship/backfill",
                       {"start": "2026-01-01T01:00:00Z", "end": "2026-01-01T02:30:00Z",
                        "reason": "the pause"})
    assert r.json() == {"outcomes": {"backfilled": 2}}
    runs = (await api.get("/schedules/hourly-ship/runs")).json()["items"]
    assert [r["outcome"] for r in runs] == ["triggered", "backfilled", "backfilled"]
    changed = {**BODY, "overlap": "skip", "spec": {"intervals": [{"every": "PT15M"}]}}
    r = await api.client.put("/schedules/hourly-ship", json=changed, headers=bearer(OPERATOR))
    assert r.status_code == 200 and r.json()["next_fire_at"] == "2026-01-01T03:15:00Z"
    assert r.json()["updated_by"] == "olga"
    r = await api.client.delete("/schedules/hourly-ship", headers=bearer(VIEWER))
    assert r.status_code == 403
    r = await api.client.delete("/schedules/hourly-ship", headers=bearer(OPERATOR))
    assert r.status_code == 204
    assert (await api.get("/schedules/hourly-ship")).json()["error"]["code"] == \
        "schedule_not_found"
    for verb in ("pause", "resume", "trigger", "backfill", "delete"):
        assert f"schedule {verb} id=hourly-ship" in caplog.text


@pytest.mark.parametrize(("change", "status", "code"), [
    ({"saga_type": "nope"}, 422, "unknown_saga_type"),
    ({"input": {"amount": "lots"}}, 422, "invalid_input"),
    ({"spec": {"cron": ["not cron"]}}, 422, "validation_error"),
    ({"spec": {"cron": ["0 9 * * *"], "timezone": "Nowhere/City"}}, 422, "validation_error"),
    ({"spec": {"cron": ["0 9 * * *"], "calendar": {"country": "ZZ"}}}, 422,
     "validation_error"),
    ({"overlap": "sometimes"}, 422, "validation_error"),
    ({"id": "no spaces please"}, 422, "validation_error"),
    ({"surprise": 1}, 422, "validation_error"),
])
async def test_bad_schedules_are_refused_with_a_stable_code(
    api: Api, change: dict[str, Any], status: int, code: str,
) -> None:
    r = await api.post("/schedules", {**BODY, **change})
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code


async def test_preview_an_unsaved_spec(api: Api) -> None:
    assert (await api.post("/schedules/preview", {"spec": {"cron": ["0 9 * * *"]}},
                           token=VIEWER)).status_code == 403
    spec = {"cron": ["0 9 * * *"], "timezone": "America/New_York",
            "calendar": {"country": "US", "on_closed": "shift"}}
    r = await api.post("/schedules/preview", {"spec": spec, "count": 2,
                                              "after": "2026-12-24T15:00:00Z"})
    assert r.json()["times"] == ["2026-12-28T14:00:00Z", "2026-12-29T14:00:00Z"]


def _cli(live: Live, *argv: str, token: str = OPERATOR) -> tuple[int, str]:
    out = io.StringIO()
    code = saga_cli(["--url", live.url, "--token", token, *argv], out=out)
    return code, out.getvalue()


async def test_cli_schedules(live: Live) -> None:
    def scenario() -> None:
        code, text = _cli(live, "schedules", "create", "nightly", "--type", "tcc_order",
                          "--input", '{"order_id": "n", "amount": 1}', "--cron", "0 2 * * *",
                          "--timezone", "Europe/Berlin", "--country", "DE",
                          "--subdivision", "BY", "--on-closed", "shift", "--overlap", "skip")
        assert code == 0, text
        assert "nightly" in text and "tcc_order" in text and "skip" in text
        code, text = _cli(live, "--json", "schedules", "show", "nightly", token=VIEWER)
        shown = json.loads(text)
        assert shown["definition"]["spec"]["calendar"]["subdivision"] == "BY"
        code, text = _cli(live, "schedules", "preview", "nightly", "--count", "3",
                          token=VIEWER)
        assert code == 0 and len(text.splitlines()) == 3
        code, text = _cli(live, "schedules", "pause", "nightly")
        assert code == 2  # --reason is required
        code, text = _cli(live, "schedules", "pause", "nightly", "-r", "audit week")
        assert code == 0 and "true" in text
        code, text = _cli(live, "schedules", "trigger", "nightly", "-r", "now please")
        assert code == 0 and "triggered" in text
        code, text = _cli(live, "schedules", "runs", "nightly", token=VIEWER)
        assert code == 0 and "triggered" in text and "running" in text
        code, text = _cli(live, "schedules", "list", token=VIEWER)
        assert code == 0 and "nightly" in text
        code, text = _cli(live, "schedules", "delete", "nightly", token=VIEWER)
        assert code == 1  # a viewer may not
        code, text = _cli(live, "schedules", "delete", "nightly")
        assert code == 0
        code, text = _cli(live, "schedules", "show", "nightly")
        assert code == 1

    await asyncio.to_thread(scenario)
