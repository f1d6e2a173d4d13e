# ruff: noqa: F811  (the api_store fixture is imported from test_api_support)
"""UI sessions end on the server: a cookie captured at sign-in stops working after sign-out (on
every replica), once its token leaves the configuration, and after the idle timeout; a role
change applies to live sessions. Real app, real Postgres."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI

from coordinator.api import ApiSettings, Authenticator, TokenAuth, create_app
from coordinator.store import SagaStore
from coordinator.ui import UiSettings
from tests.integration.test_api_support import (  # noqa: F401
    OPERATOR,
    TOKENS,
    VIEWER,
    api_store,
    make_dead,
)
from tests.integration.test_store_support import ManualClock

pytestmark = pytest.mark.integration

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
SETTINGS = UiSettings(session_secret="test-secret-1", session_idle_timeout=timedelta(minutes=5))


@asynccontextmanager
async def replica(store: SagaStore, clock: ManualClock) -> AsyncIterator[FastAPI]:
    """One API process over ``store`` (its lifespan running)."""
    app = create_app(ApiSettings(), store=store, auth=TokenAuth.parse(TOKENS), run_jobs=False,
                     clock=clock, ui=SETTINGS)
    async with app.router.lifespan_context(app):
        yield app


def tab(app: FastAPI, cookies: httpx.Cookies | None = None) -> httpx.AsyncClient:
    """A browser tab on ``app``, with ``cookies`` (a captured copy) if given."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://ui.test",
                             cookies=cookies)


async def sign_in(client: httpx.AsyncClient, token: str = VIEWER) -> httpx.Cookies:
    """Sign in and return a copy of the cookies, as an attacker would capture them."""
    csrf = _CSRF.search((await client.get("/ui/login")).text)
    assert csrf
    answer = await client.post("/ui/login", data={"csrf_token": csrf[1], "token": token,
                                                  "next": "/ui/sagas"})
    assert answer.status_code == 303, answer.text[:300]
    return httpx.Cookies(client.cookies)


async def works(app: FastAPI, cookies: httpx.Cookies) -> bool:
    async with tab(app, cookies) as replay:
        answer = await replay.get("/ui/sagas")
    assert answer.status_code in (200, 303), answer.status_code
    return answer.status_code == 200


async def test_a_captured_cookie_dies_at_sign_out_on_every_replica(
        api_store: tuple[SagaStore, ManualClock]) -> None:
    store, clock = api_store
    async with replica(store, clock) as one, replica(store, clock) as two, tab(one) as client:
        captured = await sign_in(client)
        assert await works(one, captured) and await works(two, captured)
        page = await client.get("/ui/sagas")
        out = await client.post("/ui/logout", data={"csrf_token": _CSRF.findall(page.text)[0]})
        assert out.status_code == 303
        assert not await works(one, captured)
        assert not await works(two, captured)


async def test_a_removed_token_ends_its_sessions_and_a_new_role_applies(
        api_store: tuple[SagaStore, ManualClock]) -> None:
    store, clock = api_store
    [saga_id] = await make_dead(store, clock)
    async with replica(store, clock) as app, tab(app) as one, tab(app) as two:
        vera = await sign_in(one)
        olga = await sign_in(two, OPERATOR)
        assert await works(app, vera)
        # A restart (or reload) with vera's token removed and olga made a viewer.
        app.state.auth = Authenticator(TokenAuth.parse(f"olga:viewer:{OPERATOR}"))
        assert not await works(app, vera)
        assert await works(app, olga)
        page = await two.get(f"/ui/sagas/{saga_id}")
        answer = await two.post(f"/ui/sagas/{saga_id}/repair", data={
            "csrf_token": _CSRF.findall(page.text)[0], "verb": "retry", "reason": "r"})
        assert answer.status_code == 403 and "olga has role viewer" in answer.text


async def test_an_idle_session_ends_and_use_keeps_it_alive(
        api_store: tuple[SagaStore, ManualClock]) -> None:
    store, clock = api_store
    async with replica(store, clock) as app, tab(app) as client:
        captured = await sign_in(client)
        for _ in range(3):  # used every 4 min: alive for 12 min, beyond the 5 min timeout
            clock.advance(timedelta(minutes=4))
            assert await works(app, captured)
        clock.advance(timedelta(minutes=5, seconds=1))
        assert not await works(app, captured)
        clock.advance(timedelta(seconds=1))
        assert not await works(app, captured)  # gone for good, not revived by the attempt
        rows = await store.pool.fetchval("SELECT count(*) FROM ui_sessions")
        assert rows == 0
