"""Updates declared as data: ``require``/``reason`` rules, an ``apply`` expression and a
signal, run in the test kit like a written class's; bad expressions reported at their path;
exported back as declared."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.definitions import InvalidDefinition, export, load_saga, to_yaml
from coordinator.store import InvalidUpdatePayload, SagaFinished
from coordinator.testing import SagaTestEnv
from participant_sdk import HandlerContext, Participant, on_action, on_compensate

YAML = """
name: yaml_ship
version: 1
input:
  type: object
  properties: {address: {type: string}}
  required: [address]
updates:
  change_address:
    payload:
      type: object
      properties: {address: {type: string}}
      required: [address]
    validate:
      - require: "results.ship == null"
        reason: the order has shipped
      - require: "length(payload.address) > `0`"
        reason: the address is empty
    apply: "{address: payload.address, previous: updates.change_address.address || input.address}"
  pay:
    payload:
      type: object
      properties: {amount: {type: integer}}
      required: [amount]
    validate: [{require: "payload.amount > `0`", reason: nothing to pay}]
    signal: paid
steps:
  - {kind: saga, name: reserve, participant: shop, action: reserve, compensable: true}
  - {kind: wait, name: payment, signal: paid, timeout: P3D}
  - kind: saga
    name: ship
    participant: shop
    action: ship
    compensable: true
    payload: "{to: updates.change_address.address || input.address}"
"""


class Shop(Participant):
    name = "shop"

    @on_action("reserve")
    async def reserve(self, ctx: HandlerContext, body: dict[str, Any]) -> None: ...

    @on_compensate("reserve")
    async def release(self, ctx: HandlerContext, body: dict[str, Any]) -> None: ...

    @on_action("ship")
    async def ship(self, ctx: HandlerContext, body: dict[str, Any]) -> dict[str, Any]:
        return {"shipped_to": body["to"]}

    @on_compensate("ship")
    async def recall(self, ctx: HandlerContext, body: dict[str, Any]) -> None: ...


async def test_a_yaml_saga_takes_updates_as_a_written_class_does() -> None:
    env = SagaTestEnv(load_saga(YAML), [Shop()])
    run = await env.start({"address": "1 Old Road"})
    first = await run.update("change_address", {"address": "2 New St"})
    assert first.result == {"address": "2 New St", "previous": "1 Old Road"}
    second = await run.update("change_address", {"address": "3 Third"})
    assert second.result == {"address": "3 Third", "previous": "2 New St"}
    empty = await run.update("change_address", {"address": ""})
    assert (empty.outcome, empty.reason) == ("rejected", "the address is empty")
    with pytest.raises(InvalidUpdatePayload):
        await run.update("pay", {"amount": "lots"})
    assert (await run.update("pay", {"amount": 0})).reason == "nothing to pay"
    assert run.state.steps["payment"].phase.value == "waiting"
    paid = await run.update("pay", {"amount": 5})
    assert paid.result == {"amount": 5}
    assert run.status == "completed"
    assert run.results()["ship"] == {"shipped_to": "3 Third"}
    assert run.results()["payment"] == {"amount": 5}
    with pytest.raises(SagaFinished):
        await run.update("change_address", {"address": "4 Late"})


def test_bad_update_declarations_are_reported_at_their_path() -> None:
    bad = YAML.replace('"results.ship == null"', '"results.["').replace(
        "apply: \"{address", "apply: \"[address")
    with pytest.raises(InvalidDefinition) as problems:
        load_saga(bad)
    text = str(problems.value)
    assert "updates.change_address.validate[0].require: Value error, not a JMESPath" in text
    assert "updates.change_address.apply: Value error, not a JMESPath" in text


def test_a_signal_no_wait_declares_is_refused() -> None:
    with pytest.raises(InvalidDefinition, match="signal 'nobody' is not one the saga's waits"):
        load_saga(YAML.replace("signal: paid\n", "signal: nobody\n"))


def test_updates_export_as_declared() -> None:
    cls = load_saga(YAML)
    again = load_saga(to_yaml(export(cls)))
    assert export(again) == export(cls)
    assert [u.name for u in again.updates] == ["change_address", "pay"]
    assert "require: results.ship == null" in to_yaml(export(cls))
