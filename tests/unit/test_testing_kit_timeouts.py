"""The test kit and timeouts: skipping the clock past a saga's (or a node's) timeout fires it,
as it fires sleeps, against the participants' real handlers; a parent that times out cancels
its child saga."""

from __future__ import annotations

from datetime import timedelta

from coordinator.language.nodes import ChildSaga, Sequence, WaitForSignal
from coordinator.language.saga import Saga, SagaStep
from coordinator.testing import SagaTestEnv
from tests.unit.test_testing_kit import Account, Accounts, Delivery, _ledger


class Approval(Saga):
    """Open an account, wait up to two hours for a person's go, then bill."""

    name = "approval_timeout"
    input_model = Account
    timeout = timedelta(hours=2)
    steps = (
        SagaStep("open", "accounts", "open", compensable=True),
        WaitForSignal("go", "go"),
        SagaStep("bill", "accounts", "bill", compensable=True),
    )


async def test_skipping_past_the_timeout_rolls_the_saga_back() -> None:
    env = SagaTestEnv(Approval, [Accounts()])
    run = await env.start({"account": "a-1"})
    assert run.state.steps["go"].phase.value == "waiting"
    await run.skip(timedelta(hours=1, minutes=59))
    assert run.status == "running"  # not yet
    await run.skip(timedelta(minutes=1))
    assert run.status == "compensated"
    assert run.state.reason == "timed out after 2h in go"
    assert _ledger(env) == ["open", "close"]
    assert run.sim.replayed() == run.state


async def test_a_saga_that_gets_its_signal_in_time_is_untouched_by_its_timeout() -> None:
    env = SagaTestEnv(Approval, [Accounts()])
    run = await env.start({"account": "a-2"})
    await run.skip(timedelta(hours=1))
    await run.signal("go")
    assert run.status == "completed"
    assert await run.skip(timedelta(days=1))  # nothing left to fire
    assert run.status == "completed" and run.state.timed_out is None
    assert _ledger(env) == ["open", "bill"]


class SlowParent(Saga):
    """The child sleeps a day before its pick-up: longer than the parent may run."""

    name = "slow_parent"
    input_model = Account
    timeout = timedelta(hours=2)
    steps = (
        SagaStep("bill", "accounts", "bill", compensable=True),
        ChildSaga("ship", Delivery, deadline=timedelta(days=2)),
    )


async def test_a_parent_that_times_out_cancels_its_child_which_rolls_back() -> None:
    env = SagaTestEnv(SlowParent, [Accounts()])
    run = await env.start({"account": "a-3"})
    assert run.child("ship").state.steps["pickup"].phase.value == "sleeping"
    assert await run.run_to_end() == "compensated"
    assert run.state.reason == "timed out after 2h in ship"
    assert run.child("ship").status == "compensated"  # cancelled through its parent link
    assert _ledger(env) == ["bill", "open", "close", "refund"]
    assert run.now == env.now + timedelta(hours=2)


class NodeTimeout(Saga):
    name = "node_timeout"
    input_model = Account
    steps = (
        SagaStep("open", "accounts", "open", compensable=True),
        Sequence("fulfil", (ChildSaga("ship", Delivery, deadline=timedelta(days=2)),),
                 timeout=timedelta(hours=3)),
    )


async def test_a_child_saga_inside_a_timed_node_is_cancelled_when_the_node_times_out() -> None:
    env = SagaTestEnv(NodeTimeout, [Accounts()])
    run = await env.start({"account": "a-4"})
    assert await run.run_to_end() == "compensated"
    assert run.state.steps["fulfil"].last_error.kind == "timeout"  # type: ignore[union-attr]
    assert run.state.reason == "timed out after 3h in fulfil (at fulfil > ship)"
    assert run.child("ship").status == "compensated"
