"""A person signed in through their SSO (a JWT from the identity provider, with their groups)
completes the finance approval of an expense through the API, on real Postgres; four eyes
holds for them as for a token user."""

from __future__ import annotations

import time
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.engine import ReplyReceived
from participant_sdk.protocol import Outcome, decode_command, make_reply
from tests.integration.task_api_support import expense_store, monday_clock, tokens

pytestmark = pytest.mark.integration

ISS, AUD = "https://idp.test/realms/acme", "sagaflow-api"
EXPENSE = {"expense_id": "x-7", "employee": "erin", "manager": "mia", "amount_cents": 9_900}


def sso(key: rsa.RSAPrivateKey, user: str, *groups: str) -> dict[str, str]:
    now = int(time.time())
    claims: dict[str, Any] = {"iss": ISS, "aud": AUD, "exp": now + 300, "sub": f"id-{user}",
                              "preferred_username": user, "groups": list(groups)}
    return {"Authorization": f"Bearer {jwt.encode(claims, key, algorithm='RS256')}"}


async def test_a_jwt_signed_in_person_completes_a_task(fresh_db: str, topic_prefix: str) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    settings = ApiSettings(api_jwt_key=pem.decode(), api_jwt_issuer=ISS, api_jwt_audience=AUD,
                           api_jwt_algorithms=["RS256"], api_jwt_default_role="viewer",
                           api_jwt_roles={"finance-ops": "operator"})
    clock = monday_clock()
    async with expense_store(fresh_db, topic_prefix, clock) as store:
        app = create_app(settings, store=store, auth=TokenAuth.parse(tokens()), run_jobs=False,
                         clock=clock)
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="https://api") as client:
            erin = sso(key, "erin", "staff", "finance-ops")
            started = await client.post("/sagas", json={"type": "expense", "input": EXPENSE},
                                        headers=erin)
            assert started.status_code == 201, started.text
            saga_id = started.json()["saga_id"]
            async with store.pool.acquire() as conn:
                command = await conn.fetchval(
                    "SELECT payload FROM sagaflow_outbox WHERE topic LIKE '%.commands'")
            await store.apply(saga_id, ReplyReceived(
                reply=make_reply(decode_command(command), Outcome.OK)))
            mia = sso(key, "mia", "managers")
            (manager,) = (await client.get("/tasks", headers=mia)).json()["items"]
            for verb, body in (("claim", None), ("complete", {"data": {"outcome": "approve"}})):
                answer = await client.post(f"/tasks/{manager['id']}/{verb}", json=body,
                                           headers=mia)
                assert answer.status_code == 200, answer.text

            fatima = sso(key, "fatima", "finance")
            inbox = (await client.get("/tasks?scope=available", headers=fatima)).json()
            assert {t["node"] for t in inbox["items"]} == {"finance_1", "finance_2",
                                                           "finance_3"}
            assert (await client.get("/tasks?scope=available", headers=erin)).json()[
                "items"] == []  # the starter sees none: four eyes
            task = next(t for t in inbox["items"] if t["node"] == "finance_1")
            claimed = await client.post(f"/tasks/{task['id']}/claim", headers=fatima)
            assert claimed.status_code == 200, claimed.text
            done = await client.post(f"/tasks/{task['id']}/complete", headers=fatima,
                                     json={"data": {"outcome": "approve",
                                                    "cost_center": "cc-1"}})
            assert done.status_code == 200, done.text
            shown = (await client.get(f"/tasks/{task['id']}", headers=fatima)).json()
            assert (shown["state"], shown["completed_by"]) == ("completed", "fatima")
            history = (await client.get(f"/sagas/{saga_id}/history", headers=erin)).json()
            assert any(e["actor"] == "task:fatima" for e in history["entries"])
