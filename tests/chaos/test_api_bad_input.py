"""The operator API under hostile requests: every route, every parameter.

Walks the app's own route table (so new routes are covered without editing this file) and
sends: no credentials, a wrong token, a role too low; then, with an admin token, injection
strings, control characters and oversized values in every path and query parameter, and
malformed or oversized JSON bodies. Nothing may answer 500, and no answer to a request aimed at
something else may contain the id of a stored saga.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest

from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.migrations import migrate
from coordinator.runtime.worker import build_registry
from coordinator.store import SagaStore
from participant_sdk.dead_letters import DeadLetter, record_dead_letter
from tests.chaos.support.driver import plan_orders
from tests.chaos.support.stack import SAGAS

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]

VIEWER, ADMIN = "viewer-token-chaos", "admin-token-chaos"
TOKENS = f"vic:viewer:{VIEWER},ann:admin:{ADMIN}"
HOSTILE = [
    "' OR '1'='1",
    "1; DROP TABLE sagas; --",
    "%' OR saga_type LIKE '%",
    "../../../../etc/passwd",
    "<script>alert(1)</script>",
    "${jndi:ldap://x/a}",
    "\u0000nul",
    "\udcff",
    "🧨" * 50,
    "-1",
    "99999999999999999999999999",
    "x" * 70_000,
]
BODIES: list[Any] = [
    None, "", "null", "[]", "{", "[" * 50_000, '{"type": "order", "input": "\' OR 1=1"}',
    {"type": "' OR 1=1 --", "input": {}},
    {"type": "order", "input": {"order_id": "x" * 200_000, "customer_id": "a",
                                "amount_cents": 1, "sku": "s", "quantity": 1, "address": "a"}},
    {"reason": "x" * 300_000, "step": "'; --", "payload": {"a": ["b"] * 50_000}},
    {"nested": "[" * 5000},
]


@pytest.fixture
async def client(fresh_db: str, topic_prefix: str) -> AsyncIterator[tuple[httpx.AsyncClient,
                                                                         list[str]]]:
    conn = await asyncpg.connect(fresh_db)
    try:
        await migrate(conn)
        await record_dead_letter(conn, DeadLetter(source="coordinator:replies", reason="x",
                                                  payload=b"junk", topic="t", partition=0,
                                                  offset=1))
    finally:
        await conn.close()
    registry = build_registry(list(SAGAS), topic_prefix=topic_prefix)
    async with await SagaStore.open(fresh_db, registry, max_size=4) as store:
        ids = []
        for order in plan_orders(9107, 3):
            await store.start_saga("order", order.input, saga_id=order.saga_id)
            ids.append(str(order.saga_id))
        # No failure limit: every route must answer each wrong token with 401, not 429 (the
        # limit has its own test in tests/integration/test_api_jwt.py).
        app = create_app(ApiSettings(api_auth_max_failures=0), store=store,
                         auth=TokenAuth.parse(TOKENS), run_jobs=False)
        async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
            base_url="http://api",
        ) as http:
            http.app_routes = _routes(app.openapi())  # type: ignore[attr-defined]
            yield http, ids


@dataclass(frozen=True)
class _Route:
    path: str
    method: str
    path_params: list[str]
    query_params: list[str]


def _routes(schema: dict[str, Any]) -> list[_Route]:
    """Every operation of the app, from its own OpenAPI document."""
    out = []
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            params = op.get("parameters", [])
            out.append(_Route(path, method.upper(),
                              [p["name"] for p in params if p["in"] == "path"],
                              [p["name"] for p in params if p["in"] == "query"]))
    return out


def _path(route: _Route, value: str) -> str:
    quoted = quote(value.encode("utf-8", "surrogatepass"), safe="") or "%20"
    path = route.path
    for name in route.path_params:
        path = path.replace("{" + name + "}", quoted)
    return path


async def test_api_refuses_and_survives_hostile_requests(
    client: tuple[httpx.AsyncClient, list[str]],
) -> None:
    http, saga_ids = client
    routes: list[_Route] = http.app_routes  # type: ignore[attr-defined]
    started = time.monotonic()
    sent = 0
    violations: list[str] = []

    async def call(method: str, url: str, token: str | None, *, params: Any = None,
                   body: Any = None, raw: str | None = None) -> httpx.Response:
        nonlocal sent
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        if raw is not None:
            headers["content-type"] = "application/json"
        sent += 1
        try:
            resp = await http.request(method, url, headers=headers, params=params,
                                      json=body if raw is None else None,
                                      content=raw.encode("utf-8", "surrogatepass")
                                      if raw is not None else None)
        except (httpx.InvalidURL, UnicodeEncodeError):
            return httpx.Response(400)  # the client itself refuses to send it
        if resp.status_code >= 500:
            violations.append(f"{method} {url[:120]} params={str(params)[:80]} -> "
                              f"{resp.status_code}: {resp.text[:200]}")
        return resp

    some_id = saga_ids[0]
    for route in routes:
        method = route.method
        url = _path(route, some_id)
        for token in (None, "not-a-token", "Bearer-ish " + "x" * 9000):
            resp = await call(method, url, token)
            if resp.status_code != 401:
                violations.append(f"{method} {route.path} with token {token!r:.20} -> "
                                  f"{resp.status_code}, expected 401")
        # Acting on a human task is for every signed-in person (the engine decides who may).
        if method != "GET" and not route.path.startswith("/tasks/"):
            resp = await call(method, url, VIEWER, body={"reason": "r"})
            if resp.status_code != 403:
                violations.append(f"{method} {route.path} as viewer -> {resp.status_code}")
        queries = route.query_params
        for value in HOSTILE:
            if route.path_params:
                resp = await call(method, _path(route, value), ADMIN, body={"reason": "r"})
                _no_leak(resp, saga_ids, violations, f"{method} {route.path} path={value!r:.30}")
            for name in queries:
                resp = await call(method, url, ADMIN, params={name: value})
                if route.path_params:
                    continue  # the saga in the path is legitimately in the answer
                _no_leak(resp, saga_ids, violations, f"{method} {route.path} {name}={value!r:.30}")
        if method in ("POST", "PUT", "PATCH"):
            for body in BODIES:
                raw = body if isinstance(body, str) else None
                await call(method, url, ADMIN, body=None if raw is not None else body, raw=raw)
    # Unknown routes and methods are 404/405, never 500.
    for method, path in itertools.product(["GET", "POST", "DELETE"],
                                          ["/nope", "/sagas/" + "a" * 5000, "/%00"]):
        await call(method, path, ADMIN)
    seconds = time.monotonic() - started
    print(f"\n[chaos] api-hostile-requests: routes={len(routes)} requests={sent} "
          f"invariant violations={len(violations)} in {seconds:.1f}s")
    for v in violations[:30]:
        print(f"[chaos] api-hostile-requests:   VIOLATION {v}")
    assert len(violations) == 0, violations
    # Every route of the app was attacked, each with every hostile value.
    assert len(routes) >= 20, [r.path for r in routes]
    assert sent >= len(routes) * (3 + len(HOSTILE)), sent


def _no_leak(resp: httpx.Response, saga_ids: list[str], violations: list[str],
             what: str) -> None:
    """A request that names no stored saga must not get one back."""
    if resp.status_code < 300:
        leaked = [s for s in saga_ids if s in resp.text]
        if leaked:
            violations.append(f"{what} -> {resp.status_code} returned sagas {leaked}")
