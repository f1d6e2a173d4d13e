"""``GET /sagas/{id}/result``, the saga's detail and ``SagaClient.result`` give a composite
node's result (a for-each's list, a race's winner's, ...) as its mappers and queries see it,
on real Postgres."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.client import SagaClient
from coordinator.engine import ReplyReceived
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import Outcome, make_reply
from tests.integration.test_api_support import OPERATOR, TOKENS
from tests.integration.test_store_support import ManualClock, migrated, outbox_commands
from tests.unit.test_node_results import COMPOSITES, Composite, Order

pytestmark = pytest.mark.integration


@pytest.fixture
async def app_store(fresh_db: str, topic_prefix: str) -> AsyncIterator[tuple[Any, SagaStore]]:
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[Composite])
    async with await SagaStore.open(fresh_db, registry, max_size=4, clock=ManualClock()
                                    ) as store:
        app = create_app(ApiSettings(), store=store, auth=TokenAuth.parse(TOKENS),
                         run_jobs=False)
        async with app.router.lifespan_context(app):
            yield app, store


async def _run_to_end(store: SagaStore) -> dict[str, Any]:
    """Answer every command (each result names its step, with its payload) until none is
    left; the payload the last step's mapper built."""
    recorded: dict[str, Any] = {}
    while commands := await outbox_commands(store):
        for command in commands:
            if command.step == "record":
                recorded = command.payload
            result = {"by": command.step, **command.payload}
            await store.apply(command.saga_id, ReplyReceived(
                reply=make_reply(command, Outcome.OK, result=result)))
    return recorded


async def test_the_api_and_the_client_give_composite_results(
    app_store: tuple[Any, SagaStore],
) -> None:
    app, store = app_store
    client = SagaClient("http://api", token=OPERATOR,
                        transport=httpx.ASGITransport(app=app))
    async with client:
        saga_id = await client.start(Composite, Order(skus=["a", "b"]))
        seen_by_mapper = await _run_to_end(store)
        assert seen_by_mapper["lines"] == [{"by": "lines[0].reserve", "sku": "a"},
                                           {"by": "lines[1].reserve", "sku": "b"}]
        outcome = await client.result(saga_id)
        assert outcome["status"] == "completed"
        assert {k: outcome["results"][k] for k in COMPOSITES} == seen_by_mapper
        detail = await client.get(saga_id)
        assert {k: detail["result"][k] for k in COMPOSITES} == seen_by_mapper
