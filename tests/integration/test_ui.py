# ruff: noqa: F811  (the api_store fixture is imported from test_api_support)
"""The web UI over HTTP on a real database: sign-in, CSRF, roles, repairs, search, offline docs.

(The browser tests in tests/e2e/test_ui_browser.py drive the same pages in Chromium.)
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import httpx
import pytest

from coordinator.store import SagaStore
from coordinator.ui import UiSettings
from participant_sdk.dead_letters import DeadLetter, install_dead_letters, record_dead_letter
from tests.integration.test_api_support import (
    ADMIN,
    OPERATOR,
    VIEWER,
    api_store,  # noqa: F401
    app_client,
    make_dead,
)
from tests.integration.test_store_support import ManualClock

pytestmark = pytest.mark.integration

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Browser:
    """An httpx client that keeps cookies, like a browser tab."""

    client: httpx.AsyncClient
    store: SagaStore
    clock: ManualClock

    async def csrf(self, path: str = "/ui/login") -> str:
        page = await self.client.get(path)
        found = _CSRF.search(page.text)
        assert found, page.text[:500]
        return found.group(1)

    async def sign_in(self, token: str) -> httpx.Response:
        return await self.client.post("/ui/login", data={
            "csrf_token": await self.csrf(), "token": token, "next": "/ui/sagas"})


@pytest.fixture
async def ui(api_store: tuple[SagaStore, ManualClock]) -> AsyncIterator[Browser]:
    store, clock = api_store
    async with app_client(store, clock, base_url="https://ui.test",
                          ui=UiSettings(session_secret="test-secret-1")) as client:
        yield Browser(client, store, clock)


async def test_pages_need_a_session_and_a_known_token(ui: Browser) -> None:
    first = await ui.client.get("/ui/sagas?status=dead")
    assert first.status_code == 303
    assert first.headers["location"] == "/ui/login?next=/ui/sagas%3Fstatus%3Ddead"
    refused = await ui.sign_in("not-a-token-at-all")
    assert refused.status_code == 401 and "Unknown token" in refused.text
    signed = await ui.sign_in(VIEWER)
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/sagas"
    cookie = signed.headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert VIEWER not in cookie
    page = await ui.client.get("/ui/sagas")
    assert page.status_code == 200 and "vera" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]


async def test_a_forged_post_is_refused(ui: Browser) -> None:
    [saga_id] = await make_dead(ui.store, ui.clock)
    await ui.sign_in(OPERATOR)
    good = await ui.csrf(f"/ui/sagas/{saga_id}")
    body = {"verb": "resolve", "reason": "forged", "status": "completed"}
    for forged in ({**body}, {**body, "csrf_token": "x" * 43}):
        answer = await ui.client.post(f"/ui/sagas/{saga_id}/repair", data=forged)
        assert answer.status_code == 403 and "CSRF" in answer.text
    cross = await ui.client.post(f"/ui/sagas/{saga_id}/repair",
                                 data={**body, "csrf_token": good},
                                 headers={"Origin": "http://evil.example"})
    assert cross.status_code == 403 and "another origin" in cross.text
    record = await ui.store.get_saga(saga_id)
    assert record is not None and record.status == "dead"


async def test_a_viewer_sees_no_repair_buttons_and_cannot_repair(ui: Browser) -> None:
    [saga_id] = await make_dead(ui.store, ui.clock)
    await ui.sign_in(VIEWER)
    page = await ui.client.get(f"/ui/sagas/{saga_id}")
    assert page.status_code == 200
    assert 'id="confirm-retry"' not in page.text and 'id="no-repair"' in page.text
    dead = await ui.client.get("/ui/dead")
    assert 'id="bulk"' not in dead.text
    answer = await ui.client.post(f"/ui/sagas/{saga_id}/repair", data={
        "csrf_token": await ui.csrf(f"/ui/sagas/{saga_id}"), "verb": "retry", "reason": "r"})
    assert answer.status_code == 403 and "needs operator" in answer.text


async def test_an_operator_repairs_with_a_reason_and_sees_the_result(ui: Browser) -> None:
    [saga_id] = await make_dead(ui.store, ui.clock)
    await ui.sign_in(OPERATOR)
    token = await ui.csrf(f"/ui/sagas/{saga_id}")
    page = await ui.client.get(f"/ui/sagas/{saga_id}")
    assert 'id="confirm-resolve"' in page.text and 'class="state dead current"' in page.text
    blank = await ui.client.post(f"/ui/sagas/{saga_id}/repair", data={
        "csrf_token": token, "verb": "resolve", "reason": "  "})
    assert blank.status_code == 422
    done = await ui.client.post(f"/ui/sagas/{saga_id}/repair", data={
        "csrf_token": token, "verb": "resolve", "reason": "refunded by hand, ticket 7",
        "status": "compensated"})
    assert done.status_code == 303
    after = await ui.client.get(done.headers["location"])
    assert "resolve applied by olga: the saga is now compensated" in after.text
    assert "refunded by hand, ticket 7" in after.text and "operator:olga" in after.text
    again = await ui.client.post(f"/ui/sagas/{saga_id}/repair", data={
        "csrf_token": token, "verb": "retry", "reason": "once more"})
    refused = await ui.client.get(again.headers["location"])
    assert "retry refused" in refused.text


async def test_search_by_id_prefix_and_whole_id(ui: Browser) -> None:
    ids = await make_dead(ui.store, ui.clock, n=3)
    await ui.sign_in(VIEWER)
    prefix = str(ids[1])[:6]
    listed = await ui.client.get(f"/ui/sagas?q={prefix}")
    assert str(ids[1])[:8] in listed.text
    assert all(str(i)[:8] not in listed.text for i in ids if not str(i).startswith(prefix))
    jump = await ui.client.get(f"/ui/sagas?q={ids[2]}")
    assert jump.status_code == 303 and jump.headers["location"] == f"/ui/sagas/{ids[2]}"
    unknown = await ui.client.get("/ui/sagas?q=not-hex!&status=dead")  # never a dead end
    assert unknown.status_code == 200
    assert "No saga with the id, id prefix or business key “not-hex!” among these" in (
        unknown.text)
    assert 'id="saga-filter"' in unknown.text and 'value="not-hex!"' in unknown.text


async def test_bulk_repair_needs_the_typed_count(ui: Browser) -> None:
    await make_dead(ui.store, ui.clock, n=2)
    await ui.sign_in(ADMIN)
    token = await ui.csrf("/ui/dead")
    form = {"csrf_token": token, "verb": "resolve", "reason": "incident 42", "type": "ship_order"}
    wrong = await ui.client.post("/ui/repairs", data={**form, "confirm": "3"})
    assert "matches 2 dead sagas" in (await ui.client.get(wrong.headers["location"])).text
    started = await ui.client.post("/ui/repairs", data={**form, "confirm": "2"})
    assert started.headers["location"].startswith("/ui/jobs/")
    job = await ui.client.get(started.headers["location"])
    assert "incident 42" in job.text and "0/2" in job.text


async def test_docs_and_every_asset_are_served_by_the_app(ui: Browser) -> None:
    docs = await ui.client.get("/docs")
    assert docs.status_code == 200
    assert (await ui.client.get("/redoc")).status_code == 404  # it would load CDN scripts
    urls = re.findall(r'(?:src|href)="([^"]+)"', docs.text)
    assert urls and all(u.startswith("/") for u in urls), urls
    for url in urls:
        assert (await ui.client.get(url)).status_code == 200, url
    await ui.sign_in(VIEWER)
    page = await ui.client.get("/ui/")
    for url in re.findall(r'(?:src|href)="(/ui/static/[^"]+)"', page.text):
        assert (await ui.client.get(url)).status_code == 200, url


async def test_every_page_of_the_menu_renders(ui: Browser) -> None:
    [saga_id] = await make_dead(ui.store, ui.clock)
    await ui.sign_in(ADMIN)
    menu = re.findall(r'<nav>(.*?)</nav>', (await ui.client.get("/ui/")).text, re.S)[0]
    paths = re.findall(r'href="(/ui/[^"]*)"', menu)
    assert len(paths) == 8  # with Schedules and the Inbox
    for path in [*paths, f"/ui/sagas/{saga_id}", f"/ui/sagas/{saga_id}/trace",
                 f"/ui/sagas/{saga_id}/live", "/ui/sagas?status=dead&sort=updated_at"]:
        answer = await ui.client.get(path)
        assert answer.status_code == 200, (path, answer.text[:300])
    assert "ship_order" in (await ui.client.get("/ui/types")).text
    trace = (await ui.client.get(f"/ui/sagas/{saga_id}/trace")).text
    assert "SAGAFLOW_JAEGER_QUERY" in trace


async def test_participants_dead_letters_are_read_from_their_own_databases(
        api_store: tuple[SagaStore, ManualClock], pg_url: str) -> None:
    name = f"t_part_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    dsn = pg_url.rsplit("/", 1)[0] + "/" + name
    try:
        conn = await asyncpg.connect(dsn)
        try:
            await install_dead_letters(conn)
            await record_dead_letter(conn, DeadLetter(
                source="participant:payments", reason="undecodable command: not JSON",
                payload=b"\xff", topic="t.payments.commands", partition=0, offset=7))
        finally:
            await conn.close()
        store, clock = api_store
        settings = UiSettings(session_secret="test-secret-1", participant_dsns={
            "payments": dsn, "shipping": "postgresql://nobody:s3cret@127.0.0.1:1/none"})
        async with app_client(store, clock, base_url="https://ui.test", ui=settings) as client:
            ui = Browser(client, store, clock)
            await ui.sign_in(VIEWER)
            page = (await client.get("/ui/dead-letters")).text
        section = page[page.index('id="dl-participants"'):]
        assert "undecodable command: not JSON" in section and "t.payments.commands" in section
        assert "cannot connect" in section and "s3cret" not in page
    finally:
        admin = await asyncpg.connect(pg_url)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
