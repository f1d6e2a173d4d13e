# ruff: noqa: F811  (the api_store fixture is imported from test_api_support)
"""JWTs on the real app and real Postgres: keys made here, a JWKS served from 127.0.0.1 (with a
key rotation), each refusal's 401 code, the actor in the history, a UI sign-in whose session
ends with the JWT, and the limit on failed credentials (429 with Retry-After)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI

from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.store import SagaStore
from coordinator.ui import UiSettings
from tests.integration.test_api_support import (  # noqa: F401
    INPUT,
    OPERATOR,
    TOKENS,
    api_store,
    bearer,
)
from tests.integration.test_store_support import ManualClock

pytestmark = pytest.mark.integration

ISS, AUD = "https://idp.test/realms/acme", "sagaflow-api"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "use": "sig", "alg": "RS256"}


def _token(key: rsa.RSAPrivateKey, kid: str, **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISS, "aud": AUD, "exp": now + 300, "sub": "0b7c", "groups": ["finance-ops"],
            "preferred_username": "fatima", **claims}
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": kid})


class Jwks:
    """A JWKS document served over HTTP on 127.0.0.1, counting fetches."""

    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = []
        self.fetches = 0
        jwks = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                jwks.fetches += 1
                body = json.dumps({"keys": jwks.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/certs"


@pytest.fixture
def jwks() -> Iterator[Jwks]:
    served = Jwks()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.server.shutdown()
        served.server.server_close()
        thread.join(5)


@asynccontextmanager
async def jwt_app(store: SagaStore, clock: ManualClock | None = None,
                  **settings: Any) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app = create_app(
        ApiSettings(api_jwt_issuer=ISS, api_jwt_audience=AUD, api_jwt_leeway=timedelta(0),
                    api_jwt_roles={"finance-ops": "operator", "staff": "viewer"},
                    **settings),
        store=store, auth=TokenAuth.parse(TOKENS), run_jobs=False,
        ui=UiSettings(session_secret="test-secret-1"), **({"clock": clock} if clock else {}))
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="https://api.test") as client:
        yield app, client


async def test_a_jwks_user_starts_a_saga_as_themself_and_bad_jwts_get_clear_401s(
        api_store: tuple[SagaStore, ManualClock], jwks: Jwks) -> None:
    store, clock = api_store
    key, other = _key(), _key()
    jwks.keys = [_jwk(key, "k1")]
    async with jwt_app(store, clock, api_jwt_jwks_url=jwks.url,
                       api_jwks_min_refresh=timedelta(0)) as (_, client):
        started = await client.post("/sagas", json={"type": "ship_order", "input": INPUT},
                                    headers=bearer(_token(key, "k1")))
        assert started.status_code == 201, started.text
        history = await client.get(f"/sagas/{started.json()['saga_id']}/history",
                                   headers=bearer(_token(key, "k1")))
        assert history.json()["entries"][0]["actor"] == "api:fatima"
        assert (await client.get("/sagas", headers=bearer(OPERATOR))).status_code == 200
        for token, code in [
            (_token(key, "k1", exp=int(time.time()) - 5), "token_expired"),
            (_token(key, "k1", aud="another-api"), "invalid_audience"),
            (_token(key, "k1", iss="https://evil.test"), "invalid_issuer"),
            (_token(other, "k1"), "invalid_signature"),
            (_token(other, "k9"), "unknown_key"),
            (_token(key, "k1", nbf=int(time.time()) + 600), "token_not_yet_valid"),
        ]:
            answer = await client.get("/sagas", headers=bearer(token))
            assert answer.status_code == 401, (code, answer.text)
            assert answer.json()["error"]["code"] == code
            assert answer.headers["www-authenticate"].startswith("Bearer")
        viewer_only = await client.post("/sagas", json={"type": "ship_order",
                                                        "input": INPUT},
                                        headers=bearer(_token(key, "k1", groups=["staff"])))
        assert viewer_only.status_code == 403
        no_role = await client.get("/sagas", headers=bearer(_token(key, "k1", groups=["x"])))
        assert no_role.status_code == 403 and no_role.json()["error"]["code"] == "no_role"
        # The provider rotates to k2: the unknown key id makes the API fetch the keys again.
        fetched = jwks.fetches
        jwks.keys = [_jwk(other, "k2")]
        rotated = await client.get("/sagas", headers=bearer(_token(other, "k2")))
        assert rotated.status_code == 200, rotated.text
        assert jwks.fetches == fetched + 1


async def test_unknown_key_ids_do_not_hammer_the_provider(
        api_store: tuple[SagaStore, ManualClock], jwks: Jwks) -> None:
    store, _ = api_store
    key = _key()
    jwks.keys = [_jwk(key, "k1")]
    async with jwt_app(store, api_jwt_jwks_url=jwks.url, api_auth_max_failures=0) as (_, client):
        assert (await client.get("/sagas", headers=bearer(_token(key, "k1")))).status_code == 200
        for n in range(5):
            made_up = await client.get("/sagas", headers=bearer(_token(key, f"made-up-{n}")))
            assert made_up.json()["error"]["code"] == "unknown_key"
        assert jwks.fetches == 1  # within the 30 s minimum between refreshes


async def test_a_jwt_signs_in_to_the_ui_until_it_expires(
        api_store: tuple[SagaStore, ManualClock]) -> None:
    store, _ = api_store
    key = _key()
    from cryptography.hazmat.primitives import serialization

    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    async with jwt_app(store, api_jwt_key=pem.decode()) as (_, client):  # the real clock
        csrf = _CSRF.findall((await client.get("/ui/login")).text)[0]
        token = _token(key, "any", exp=int(time.time()) + 3)
        signed = await client.post("/ui/login", data={"csrf_token": csrf, "token": token,
                                                      "next": "/ui/sagas"})
        assert signed.status_code == 303, signed.text[:500]
        page = await client.get("/ui/sagas")
        assert page.status_code == 200 and "fatima" in page.text
        await asyncio.sleep(4)  # the JWT's exp passes: the session ends with it
        assert (await client.get("/ui/sagas")).status_code == 303


async def test_failed_credentials_are_limited_per_address_and_per_credential(
        api_store: tuple[SagaStore, ManualClock]) -> None:
    store, clock = api_store
    app = create_app(ApiSettings(api_auth_max_failures=3), store=store,
                     auth=TokenAuth.parse(TOKENS), run_jobs=False, clock=clock,
                     ui=UiSettings(session_secret="test-secret-1"))

    def client_from(address: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(address, 5000)),
                                 base_url="https://api.test")

    async with app.router.lifespan_context(app), client_from("10.0.0.1") as one, \
            client_from("10.0.0.2") as two, client_from("10.0.0.3") as three:
        for n in range(3):  # three different guesses from one address
            assert (await one.get("/sagas", headers=bearer(f"guess-{n}-xyz"))).status_code == 401
        blocked = await one.get("/sagas", headers=bearer(OPERATOR))
        assert blocked.status_code == 429, blocked.text
        assert blocked.json()["error"]["code"] == "too_many_attempts"
        assert 1 <= int(blocked.headers["retry-after"]) <= 60
        assert (await two.get("/sagas", headers=bearer(OPERATOR))).status_code == 200
        for n in range(3):  # one credential tried from three addresses
            async with client_from(f"10.0.1.{n}") as elsewhere:
                answer = await elsewhere.get("/sagas", headers=bearer("stolen-xyz"))
                assert answer.status_code == 401
        assert (await two.get("/sagas", headers=bearer("stolen-xyz"))).status_code == 429
        # Sign-in counts too: failed ones block the address, answered with Retry-After.
        for n in range(4):
            csrf = _CSRF.findall((await three.get("/ui/login")).text)[0]
            ui = await three.post("/ui/login", data={"csrf_token": csrf, "token": f"ui-{n}-xyz"})
            assert ui.status_code == (401 if n < 3 else 429), (n, ui.text[:300])
        assert "retry-after" in ui.headers and "retry in" in ui.text
