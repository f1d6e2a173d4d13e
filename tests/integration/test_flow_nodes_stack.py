"""Done when: on a real stack (Postgres, relay, Kafka, a worker, participants over Kafka) a
catch's fallback runs in place of a declined payment and a loop polls until delivered, the
saga completing with the fallback's result as the node's; and a loop that reaches its cap
rolls back, its iterations undone latest first."""

from __future__ import annotations

import uuid

import pytest
from pydantic import BaseModel

from coordinator.language import Catch, Loop, Saga, SagaStep, TccStep
from coordinator.runtime.worker import Worker
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import (
    CommandEnvelope,
    Outcome,
    Phase,
    ReplyEnvelope,
    command_topic,
    make_reply,
)
from tests.integration.test_api_support import OPERATOR, app_client, bearer
from tests.integration.test_saga_versions import (
    DEADLINE,
    FAST,
    FAST_ROLLBACK,
    PARTICIPANTS,
    _settings,
    _wait,
    relay,  # noqa: F401  (fixture)
)
from tests.integration.test_store_support import verify_all
from tests.integration.test_worker_support import ScriptedParticipant, reply_to

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class Parcel(BaseModel):
    customer: str
    polls: int


def _saga(name: str, participant: str, action: str, **kw: object) -> SagaStep:
    return SagaStep(name, participant, action, compensable=True, retry=FAST,
                    compensation_retry=FAST_ROLLBACK, deadline=DEADLINE,
                    rollback_deadline=DEADLINE, **kw)  # type: ignore[arg-type]


class Delivery(Saga):
    name = "flow_delivery"
    input_model = Parcel
    steps = (
        Catch("pay",
              body=TccStep("card", "payments", "charge", retry=FAST,
                           confirm_retry=FAST_ROLLBACK, cancel_retry=FAST_ROLLBACK,
                           deadline=DEADLINE, rollback_deadline=DEADLINE,
                           payload=lambda ctx: {"customer": ctx.input.customer}),
              fallback=_saga("invoice", "shipping", "invoice",
                             payload=lambda ctx: {"why": ctx.caught["kind"]}),
              failures=("business",)),
        Loop("track", body=_saga("poll", "inventory", "track",
                                 payload=lambda ctx: {"i": ctx.index,
                                                      "polls": ctx.input.polls}),
             until=lambda ctx: ctx.results["poll"]["delivered"], max_iterations=3),
    )


def _script(command: CommandEnvelope) -> list[ReplyEnvelope]:
    """A 'broke' customer's card is declined; the carrier says delivered on poll ``polls``."""
    if command.phase is Phase.TRY and command.payload.get("customer") == "broke":
        return [reply_to(command, Outcome.REJECTED)]
    if command.action == "track" and command.phase is Phase.ACTION:
        done = command.payload["i"] + 1 >= command.payload["polls"]
        return [make_reply(command, Outcome.OK, result={"delivered": done})]
    if command.action == "invoice" and command.phase is Phase.ACTION:
        return [make_reply(command, Outcome.OK, result={"invoiced": command.payload["why"]})]
    return [reply_to(command, Outcome.OK)]


async def test_a_fallback_runs_a_loop_iterates_and_a_capped_loop_rolls_back(
    relay: None, fresh_db: str, kafka_bootstrap: str, topic_prefix: str  # noqa: F811
) -> None:
    participants = ScriptedParticipant(
        kafka_bootstrap, [command_topic(p, topic_prefix) for p in PARTICIPANTS], _script)
    settings = _settings(fresh_db, kafka_bootstrap, topic_prefix)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[Delivery])
    await participants.start()
    try:
        async with Worker(settings, registry), \
                await SagaStore.open(fresh_db, registry, max_size=3) as store, \
                app_client(store) as api:
            async def start(customer: str, polls: int) -> uuid.UUID:
                r = await api.post("/sagas", json={"type": "flow_delivery", "input": {
                    "customer": customer, "polls": polls}}, headers=bearer(OPERATOR))
                assert r.status_code == 201, r.text
                return uuid.UUID(r.json()["saga_id"])

            caught = await start("broke", 2)
            capped = await start("ann", 9)
            await _wait(store, caught, "the caught saga did not end")
            await _wait(store, capped, "the capped saga did not end")
            result = await api.get(f"/sagas/{caught}/result", headers=bearer(OPERATOR))
            assert result.status_code == 200, result.text
            ended = {s: await store.get_saga(s) for s in (caught, capped)}
            await verify_all(store, ended)
    finally:
        await participants.stop()
    assert [ended[s].status for s in (caught, capped)] == [  # type: ignore[union-attr]
        "completed", "compensated"]
    results = result.json()["results"]
    assert results["pay"] == {"invoiced": "business"}  # the fallback's result is the node's
    assert results["track"] == [{"delivered": False}, {"delivered": True}]
    state = ended[caught].state  # type: ignore[union-attr]
    assert state.steps["pay"].payload["kind"] == "business"  # type: ignore[index]
    got = [(c.saga_id, c.step, c.phase.value) for c in participants.received]
    assert (caught, "card", "cancel") in got and (caught, "card", "confirm") not in got
    assert [s for i, s, p in got if i == caught and p == "action"] == [
        "invoice", "track[0].poll", "track[1].poll"]
    undone = [s for i, s, p in got if i == capped and p in ("compensate", "cancel")]
    assert undone == ["track[2].poll", "track[1].poll", "track[0].poll", "card"]
    assert "max_iterations=3 reached" in (ended[capped].state.reason or "")  # type: ignore


