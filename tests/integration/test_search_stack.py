"""Search attributes on the real stack: worker, relay, Kafka and SDK participants. Sagas
started with their input's attributes are found, once their participants answered, by the
attributes set from those answers, through the operator API (issue 37)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from pydantic import BaseModel

from coordinator.language import RetryPolicy, Saga, SagaStep, SearchAttribute, TccStep
from coordinator.store import SagaStore
from participant_sdk import (
    BusinessRejection,
    HandlerContext,
    Participant,
    on_action,
    on_cancel,
    on_compensate,
    on_confirm,
    on_try,
)
from tests.integration.inprocess_stack import inprocess_stack
from tests.integration.test_api_support import VIEWER, app_client, bearer

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=2, initial_backoff=timedelta(milliseconds=50))


class ParcelInput(BaseModel):
    customer_id: str
    amount_cents: int
    destination: str


class Parcel(Saga):
    name = "parcel"
    input_model = ParcelInput
    steps = (
        TccStep("pay", "wallet", "charge", retry=QUICK,
                payload=lambda ctx: {"amount": ctx.input.amount_cents}),
        SagaStep("ship", "courier", "ship", compensable=True, retry=QUICK,
                 payload=lambda ctx: {"destination": ctx.input.destination}),
    )
    search = (
        SearchAttribute("customer_id", str, lambda ctx: ctx.input.customer_id),
        SearchAttribute("amount", int, lambda ctx: ctx.input.amount_cents),
        SearchAttribute("carrier", str, lambda ctx: ctx.results["ship"]["carrier"]),
        SearchAttribute("tracking", list[str], lambda ctx: ctx.results["ship"]["codes"]),
    )


class Charge(BaseModel):
    amount: int


class Ship(BaseModel):
    destination: str


class Wallet(Participant):
    name = "wallet"

    @on_try("charge")
    async def charge(self, ctx: HandlerContext, body: Charge) -> dict[str, int]:
        return {"charged": body.amount}

    @on_confirm("charge")
    async def confirm(self, ctx: HandlerContext, body: Charge) -> None:
        return None

    @on_cancel("charge")
    async def cancel(self, ctx: HandlerContext, body: Charge) -> None:
        return None


class Courier(Participant):
    """Picks the carrier by destination, as a real courier's answer would; refuses Mars."""

    name = "courier"

    @on_action("ship")
    async def ship(self, ctx: HandlerContext, body: Ship) -> dict[str, Any]:
        if body.destination == "mars":
            raise BusinessRejection("no route")
        carrier = "ups" if body.destination.startswith("us") else "dhl"
        return {"carrier": carrier, "codes": [f"{carrier}-{ctx.saga_id.hex[:6]}"]}

    @on_compensate("ship")
    async def unship(self, ctx: HandlerContext, body: Ship) -> None:
        return None


@pytest.fixture
async def stack(fresh_db: str, pg_url: str, kafka_bootstrap: str, topic_prefix: str
                ) -> AsyncIterator[tuple[SagaStore, asyncpg.Connection]]:
    async with inprocess_stack(fresh_db, pg_url, kafka_bootstrap, topic_prefix,
                               sagas=[Parcel], participants=[Wallet(), Courier()]) as running:
        yield running


async def _settled(store: SagaStore, ids: list[UUID], within: float = 60) -> dict[UUID, str]:
    deadline = time.monotonic() + within
    while True:
        records = {i: await store.get_saga(i) for i in ids}
        status = {i: r.status if r else "?" for i, r in records.items()}
        if all(s in ("completed", "compensated", "dead") for s in status.values()):
            return status
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.1)


async def test_sagas_are_found_by_attributes_their_participants_answers_set(
    stack: tuple[SagaStore, asyncpg.Connection],
) -> None:
    store, _ = stack
    trips = [("c-1", 500, "us-east"), ("c-1", 2500, "eu-west"), ("c-2", 4000, "us-west"),
             ("c-2", 100, "mars")]
    ids = [(await store.start_saga("parcel", {"customer_id": c, "amount_cents": a,
                                              "destination": d})).record.saga_id
           for c, a, d in trips]
    status = await _settled(store, ids)
    assert [status[i] for i in ids] == ["completed"] * 3 + ["compensated"]
    async with app_client(store) as client:
        async def found(q: str) -> set[UUID]:
            answer = await client.get("/sagas", params={"q": q}, headers=bearer(VIEWER))
            assert answer.status_code == 200, answer.text
            return {UUID(i["saga_id"]) for i in answer.json()["items"]}

        assert await found("carrier = 'ups'") == {ids[0], ids[2]}
        assert await found("carrier = 'dhl' and customer_id = 'c-1'") == {ids[1]}
        assert await found("customer_id = 'c-2' and not carrier in ('ups', 'dhl')") == {ids[3]}
        assert await found("amount > 1000 and status = 'completed'") == {ids[1], ids[2]}
        code = f"ups-{ids[2].hex[:6]}"
        assert await found(f"tracking = '{code}'") == {ids[2]}
        detail = (await client.get(f"/sagas/{ids[2]}", headers=bearer(VIEWER))).json()
        assert detail["search_attributes"] == {"customer_id": "c-2", "amount": 4000,
                                               "carrier": "ups", "tracking": [code]}
