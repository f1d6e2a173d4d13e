"""Business keys on the real stack: stored at the start, unique among sagas in flight (or
ever), a conflict refused naming the saga or answered with it, and sagas found by their key
through the API, the client and the ``saga`` CLI (issue 42)."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import BaseModel

from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.cli.ops import main as saga_cli
from coordinator.client import SagaApiError, SagaClient
from coordinator.engine import ReplyReceived
from coordinator.language import BusinessKey, DefinitionError, Saga, TccStep
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import BusinessKeyConflict, SagaStore
from participant_sdk.protocol import Outcome
from tests.integration.test_api_live import served_api
from tests.integration.test_api_support import OPERATOR, TOKENS, VIEWER, bearer
from tests.integration.test_store_support import ManualClock, migrated, outbox_commands, reply_to

pytestmark = pytest.mark.integration

PREFIX = "bizkeys"


class TripInput(BaseModel):
    trip_id: str
    nights: int = 1


def _hold() -> TccStep:
    return TccStep("hold_room", participant="hotels", action="hold")


class Trip(Saga):
    """Known by its trip id; a second trip with a running one's id is refused."""

    name = "trip"
    input_model = TripInput
    business_key = "trip_id"
    steps = (_hold(),)


class Booking(Saga):
    """A key computed from the input; a start with a running one's key returns it."""

    name = "booking"
    input_model = TripInput
    business_key = BusinessKey(lambda i: f"B-{i.trip_id}", on_conflict="return")
    steps = (_hold(),)


class Ledger(Saga):
    """A key that no two sagas of the type ever share."""

    name = "ledger"
    input_model = TripInput
    business_key = BusinessKey("trip_id", unique="always")
    steps = (_hold(),)


class Broken(Saga):
    """A key function that fails on some inputs: such a start is refused as bad input."""

    name = "broken"
    input_model = TripInput
    business_key = BusinessKey(lambda i: {"T-1": "ok"}[i.trip_id])
    steps = (_hold(),)


SAGAS = [Trip, Booking, Ledger, Broken]


@pytest.fixture
async def app_store(fresh_db: str) -> AsyncIterator[tuple[httpx.AsyncClient, SagaStore]]:
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=PREFIX, sagas=SAGAS)
    async with await SagaStore.open(fresh_db, registry, max_size=8, clock=ManualClock()
                                    ) as store:
        app = create_app(ApiSettings(), store=store, auth=TokenAuth.parse(TOKENS),
                         run_jobs=False)
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            yield client, store


async def _complete(store: SagaStore) -> None:
    """Answer every command in the outbox with ok until none is left (try, then confirm)."""
    while commands := await outbox_commands(store):
        for command in commands:
            await store.apply(command.saga_id,
                              ReplyReceived(reply=reply_to(command, Outcome.OK)))


async def _start(client: httpx.AsyncClient, saga_type: str, trip: str) -> httpx.Response:
    return await client.post("/sagas", json={"type": saga_type, "input": {"trip_id": trip}},
                             headers=bearer(OPERATOR))


def test_a_business_key_must_name_an_input_field() -> None:
    with pytest.raises(DefinitionError, match="names 'trip', which is not a field"):
        type("Bad", (Saga,), {"name": "bad", "input_model": TripInput, "business_key": "trip",
                              "steps": (_hold(),)})


async def test_a_second_start_with_a_running_sagas_key_is_refused_naming_it(
    app_store: tuple[httpx.AsyncClient, SagaStore],
) -> None:
    client, store = app_store
    first = await _start(client, "trip", "T-3002")
    assert first.status_code == 201 and first.json()["business_key"] == "T-3002"
    running = first.json()["saga_id"]
    second = await _start(client, "trip", "T-3002")
    assert second.status_code == 409
    error = second.json()["error"]
    assert error["code"] == "business_key_conflict" and running in error["message"]
    assert error["details"] == {"saga_id": running, "status": "running",
                                "business_key": "T-3002"}
    assert (await _start(client, "trip", "T-3003")).status_code == 201
    await _complete(store)
    again = await _start(client, "trip", "T-3002")  # the first one finished: the key is free
    assert again.status_code == 201
    found = (await client.get("/sagas", params={"business_key": "T-3002"},
                              headers=bearer(VIEWER))).json()["items"]
    assert {f["saga_id"] for f in found} == {again.json()["saga_id"], running}
    assert {f["business_key"] for f in found} == {"T-3002"}


async def test_return_gives_the_running_saga_and_always_never_frees_the_key(
    app_store: tuple[httpx.AsyncClient, SagaStore],
) -> None:
    client, store = app_store
    booked = await _start(client, "booking", "T-1")
    assert booked.status_code == 201 and booked.json()["business_key"] == "B-T-1"
    same = await _start(client, "booking", "T-1")
    assert same.status_code == 200 and same.json()["saga_id"] == booked.json()["saga_id"]
    assert (await _start(client, "ledger", "T-1")).status_code == 201  # keys are per type
    await _complete(store)
    refused = await _start(client, "ledger", "T-1")
    assert refused.status_code == 409 and "completed" in refused.json()["error"]["message"]


async def test_a_key_that_cannot_be_computed_or_is_too_long_is_a_422(
    app_store: tuple[httpx.AsyncClient, SagaStore],
) -> None:
    client, _ = app_store
    assert (await _start(client, "broken", "T-1")).status_code == 201
    failed = await _start(client, "broken", "T-2")
    assert failed.status_code == 422
    assert "business key could not be computed: KeyError" in failed.json()["error"]["message"]
    long = await _start(client, "trip", "T" * 201)
    assert long.status_code == 422 and "1 to 200 characters" in long.text


async def test_concurrent_starts_with_one_key_make_one_saga(
    app_store: tuple[httpx.AsyncClient, SagaStore],
) -> None:
    _, store = app_store
    outcomes = await asyncio.gather(
        *(store.start_saga("trip", {"trip_id": "T-race"}) for _ in range(6)),
        return_exceptions=True)
    created = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(created) == 1, outcomes
    assert all(isinstance(o, BusinessKeyConflict) for o in outcomes if o not in created)


async def test_the_client_finds_sagas_by_their_key(
    app_store: tuple[httpx.AsyncClient, SagaStore],
) -> None:
    client, _ = app_store
    transport = client._transport  # the app's ASGI transport
    async with SagaClient("http://api", token=OPERATOR, transport=transport) as sagas:
        saga_id = await sagas.start(Trip, {"trip_id": "T-42"})
        with pytest.raises(SagaApiError) as refused:
            await sagas.start(Trip, {"trip_id": "T-42"})
        assert refused.value.status == 409
        assert refused.value.details["saga_id"] == str(saga_id)
        assert [s["saga_id"] for s in await sagas.find("T-42")] == [str(saga_id)]
        assert await sagas.find("T-42", saga_type="booking") == []
        with pytest.raises(ValueError, match="must not be empty"):
            await sagas.find("")


@pytest.fixture
async def live_url(fresh_db: str) -> AsyncIterator[tuple[str, str]]:
    """``python -m coordinator api`` serving this module's saga types; (url, dsn)."""
    sagas = [f"{__name__}:{s.__name__}" for s in SAGAS]
    async with served_api(fresh_db, sagas, TOKENS, PREFIX) as served:
        yield served.url, served.dsn


def _cli(url: str, *argv: str, token: str | None = VIEWER) -> tuple[int, str, str]:
    out = io.StringIO()
    given = ["--token", token] if token else []
    err = io.StringIO()
    real, sys.stderr = sys.stderr, err
    try:
        code = saga_cli(["--url", url, *given, *argv], out=out)
    finally:
        sys.stderr = real
    return code, out.getvalue(), err.getvalue()


async def test_the_cli_finds_a_saga_by_its_business_key(live_url: tuple[str, str]) -> None:
    url, _ = live_url
    async with httpx.AsyncClient(base_url=url) as client:
        started = await _start(client, "trip", "T-3002")
        assert started.status_code == 201, started.text
        saga_id = started.json()["saga_id"]

    def scenario() -> None:
        code, text, _ = _cli(url, "show", "T-3002")
        assert code == 0 and saga_id in text and "hold_room" in text
        code, text, _ = _cli(url, "list", "--business-key", "T-3002")
        assert code == 0 and saga_id in text and "BUSINESS_KEY" in text and "T-3002" in text
        code, _, err = _cli(url, "show", "T-9999")
        assert code == 1 and "no saga has the business key 'T-9999'" in err
        code, _, err = _cli(url, "show", "T-3002", token=None)
        assert code == 1 and "--token" in err and "SAGAFLOW_API_TOKEN" in err

    env_token = os.environ.pop("SAGAFLOW_API_TOKEN", None)
    try:
        await asyncio.to_thread(scenario)
    finally:
        if env_token is not None:
            os.environ["SAGAFLOW_API_TOKEN"] = env_token


