"""Migrations of running sagas, the pure core: the dry run's verdicts, the ``Migrated``
event, and replay across it (the history before it runs on the old version's definition)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from coordinator.engine import InvalidTransition, Stage, Status, compile_saga
from coordinator.engine.decide import replay, replay_from
from coordinator.engine.events import Migrated
from coordinator.engine.migrate import plan_migration, rename_key
from coordinator.language.nodes import ChildSaga
from coordinator.language.saga import DefinitionError, Migration, Saga, SagaStep, TccStep
from participant_sdk.protocol import Outcome
from tests.unit.test_child_sagas import Family, Order, Shipping
from tests.unit.test_engine_tree import act, sent
from tests.unit.tree_support import TreeInput, drain, new_run


class V1(Saga):
    name = "mig"
    version = 1
    input_model = TreeInput
    steps = (act("pay"), act("ship"), act("end"))


def _tag(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "input": {**data["input"], "n": data["input"]["n"] + 100}}


class V2(Saga):
    """v2: ``ship`` is now ``dispatch`` (same command), and a ``notify`` step is added."""

    name = "mig"
    version = 2
    input_model = TreeInput
    steps = (act("pay"), act("dispatch"), act("end"), act("notify"))
    migrate_from: ClassVar[Any] = {1: Migration(V1, renames={"ship": "dispatch"},
                                                transform=_tag)}


def _migrate(run: Any) -> None:
    run.sim.definition = compile_saga(V2)
    run.sim.apply(Migrated(from_version=1, to_version=2, migration="v1->v2", actor="ops"))


def test_a_saga_between_changed_nodes_moves_and_finishes_on_v2() -> None:
    run = new_run(compile_saga(V1))  # pay in flight: pay is the same in v2
    plan = plan_migration(compile_saga(V2), run.sim.current)
    assert (plan.ok, plan.problems, plan.migration) == (True, (), "v1->v2")
    assert plan.state is not None and plan.state.input["n"] == 103  # the transform ran
    assert list(plan.state.steps) == ["pay", "dispatch", "end"]
    _migrate(run)
    assert run.sim.current.version == 2
    assert "migrated v1 -> v2 by v1->v2 (ops)" in run.sim.history[-1].note
    drain(run)
    assert run.sim.current.status is Status.COMPLETED
    assert [s for s, p in sent(run.sim)] == ["pay", "dispatch", "end", "notify"]
    # Replay across the Migrated event: v1's definition before it, v2's after; from a
    # checkpoint taken on v1 too.
    assert run.sim.replayed().to_json() == run.sim.current.to_json()
    first, *rest = [(h.event, h.at) for h in run.sim.history]
    checkpoint = replay(compile_saga(V1), [first])
    assert replay_from(compile_saga(V2), checkpoint, rest) == run.sim.current


def test_a_saga_with_a_command_out_on_a_renamed_node_cannot_move() -> None:
    run = new_run(compile_saga(V1))
    run.world.answer(run.sim, run.sim.last())  # ship in flight
    plan = plan_migration(compile_saga(V2), run.sim.current)
    assert not plan.ok and plan.state is None
    assert plan.problems == ("ship: a command or timer is outstanding on a node that is "
                             "renamed or changed in the new version",)
    with pytest.raises(InvalidTransition, match="cannot move to v2"):
        _migrate(run)


def test_the_dry_run_names_every_other_reason() -> None:
    class V3(Saga):
        name = "mig"
        version = 3
        input_model = TreeInput
        steps = (act("pay"), act("end"))
        migrate_from: ClassVar[Any] = {1: Migration(V1, transform=lambda d: {**d, "input": {
            "n": "not a number"}})}

    state = new_run(compile_saga(V1)).sim.current
    problems = plan_migration(compile_saga(V3), state).problems
    assert problems[0] == "ship: node 'ship' has no node in v3"
    assert problems[1] == ("input does not validate against v3's input model: n: Input should "
                           "be a valid integer, unable to parse string as an integer")
    assert plan_migration(compile_saga(V1), state).problems == (
        "mig v1 declares no migration from v1",)


def test_keys_inside_for_each_items_are_renamed_segment_by_segment() -> None:
    assert rename_key("lines[3].reserve", {"lines": "items", "reserve": "hold"}) == \
        "items[3].hold"


def test_a_migration_must_come_from_an_older_version_of_the_same_type() -> None:
    with pytest.raises(DefinitionError, match=r"source is mig v1, not mig v2"):
        type("Bad", (Saga,), {"name": "mig", "version": 3, "input_model": TreeInput,
                              "steps": (act("pay"),), "migrate_from": {2: Migration(V1)}})


class ParentV1(Saga):
    name = "parent_mig"
    version = 1
    input_model = Order
    steps = (TccStep("reserve", "payments", "reserve"), ChildSaga("ship", Shipping),
             SagaStep("notify", "mailer", "send", compensable=True))


class ParentV2(Saga):
    name = "parent_mig"
    version = 2
    input_model = Order
    steps = (TccStep("reserve", "payments", "reserve"), ChildSaga("dispatch", Shipping),
             SagaStep("notify", "mailer", "send", compensable=True))
    migrate_from: ClassVar[Any] = {1: Migration(ParentV1, renames={"ship": "dispatch"})}


def test_a_parent_cannot_rename_a_child_node_while_its_child_lives() -> None:
    family = Family(ParentV1, Shipping)
    parent = family.start(ParentV1)
    family.run(lambda cmd: None if cmd.step in ("book", "notify") else Outcome.OK)
    # The child is running: the parent's node has its try out.
    plan = plan_migration(compile_saga(ParentV2), parent.current)
    assert plan.problems == ("ship: a command or timer is outstanding on a node that is "
                             "renamed or changed in the new version",)
    family.run(lambda cmd: None if cmd.step == "notify" else Outcome.OK)
    (child,) = family.children_of(parent)
    assert child.current.stage is Stage.PREPARED  # done, waiting for its parent's confirm
    # Nothing is outstanding now, but the parent's confirm would go to the id derived from
    # "dispatch": a saga that does not exist. The dry run says so.
    plan = plan_migration(compile_saga(ParentV2), parent.current)
    assert plan.problems == ("ship: its child saga is still live and its id derives from the "
                             "node's key; rename the node once the child has finished",)
    family.run()
    assert parent.current.status is Status.COMPLETED and child.current.status is Status.COMPLETED
