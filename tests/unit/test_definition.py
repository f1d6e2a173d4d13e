"""Saga classes: validation messages, policies and the registry."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from coordinator.language.policies import DEFAULT_ROLLBACK_RETRY, deterministic_fraction
from coordinator.language.saga import (
    DefinitionError,
    RetryPolicy,
    Saga,
    SagaStep,
    TccStep,
)
from coordinator.sagas.registry import SagaRegistry, UnknownSaga
from examples.order_saga import OrderSaga
from participant_sdk.protocol import ErrorKind


class In(BaseModel):
    x: int = 0


def make(name: str = "s", version: int = 1, steps: Any = None, **attrs: Any) -> type[Saga]:
    body: dict[str, Any] = {
        "name": name, "version": version, "input_model": In,
        "steps": steps if steps is not None else (TccStep("a", "pa", "reserve"),), **attrs,
    }
    return type("Demo", (Saga,), body)


def test_valid_class_is_accepted() -> None:
    cls = make(steps=(TccStep("a", "pa", "r"), SagaStep("b", "pb", "do", compensable=True),
                      SagaStep("c", "pc", "do", compensable=False),
                      SagaStep("d", "pd", "do", compensable=False)))
    assert [s.name for s in cls.steps] == ["a", "b", "c", "d"]


def test_duplicate_step_names_are_named_in_the_error() -> None:
    with pytest.raises(DefinitionError, match=r"Demo\.a: duplicate node name 'a'"):
        make(steps=(TccStep("a", "p", "r"), TccStep("a", "q", "r")))


def test_compensable_must_be_said_explicitly() -> None:
    with pytest.raises(DefinitionError, match=r"Demo\.b: saga step must say compensable=True"):
        make(steps=(SagaStep("b", "p", "do"),))
    with pytest.raises(DefinitionError, match=r"Demo\.b: compensable must be True or False"):
        make(steps=(SagaStep("b", "p", "do", compensable="undo"),))  # type: ignore[arg-type]


def test_bad_policies_and_deadlines_name_class_and_step() -> None:
    with pytest.raises(DefinitionError, match=r"Demo\.a: bad retry: max_attempts"):
        make(steps=(TccStep("a", "p", "r", retry={"max_attempts": 0}),))
    with pytest.raises(DefinitionError, match=r"Demo\.a: bad cancel_retry: .*max_backoff"):
        make(steps=(TccStep("a", "p", "r", cancel_retry={
            "initial_backoff": timedelta(seconds=10), "max_backoff": timedelta(seconds=1)}),))
    with pytest.raises(DefinitionError, match=r"Demo\.a: deadline must be a positive"):
        make(steps=(TccStep("a", "p", "r", deadline=timedelta(0)),))


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(DefinitionError) as info:
        make(name="bad name", version=0, steps=(SagaStep("x", "p", "do"), TccStep("x", "p", "r")))
    text = str(info.value)
    for fragment in ("`name`", "`version`", "Demo.x: saga step must say", "duplicate node"):
        assert fragment in text


def test_class_level_problems() -> None:
    with pytest.raises(DefinitionError, match="non-empty"):
        make(steps=())
    with pytest.raises(DefinitionError, match="input_model"):
        make(input_model=dict)
    with pytest.raises(DefinitionError, match=r"node 0 is"):
        make(steps=("nope",))


def test_abstract_base_skips_validation() -> None:
    base = type("Base", (Saga,), {"abstract": True})
    assert issubclass(base, Saga)


def test_retry_policy_is_frozen_validated_and_deterministic() -> None:
    policy = RetryPolicy(max_attempts=5, initial_backoff=timedelta(seconds=1), multiplier=2,
                         max_backoff=timedelta(seconds=5), jitter=0.0)
    assert [policy.backoff(n, "seed").total_seconds() for n in (1, 2, 3, 4, 10_000)] == \
        [1, 2, 4, 5, 5]
    jittery = policy.model_copy(update={"jitter": 0.5})
    delays = {jittery.backoff(3, f"s{i}") for i in range(20)}
    assert all(timedelta(seconds=2) <= d <= timedelta(seconds=4) for d in delays)
    assert jittery.backoff(3, "same") == jittery.backoff(3, "same")
    assert 0 <= deterministic_fraction("x") < 1
    with pytest.raises(ValidationError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValidationError):
        RetryPolicy(jitter=2)
    with pytest.raises(ValidationError):
        policy.max_attempts = 9  # type: ignore[misc]
    assert RetryPolicy(non_retryable=frozenset({ErrorKind.TRANSIENT})).retries(
        ErrorKind.TRANSIENT) is False
    assert RetryPolicy().retries(ErrorKind.BUSINESS) is False
    assert DEFAULT_ROLLBACK_RETRY.max_attempts >= 1000


class OrderSagaV2(Saga):
    """Version 2 of ``order`` with other steps: stock first, no shipment."""

    name = "order"
    version = 2
    input_model = OrderSaga.input_model
    steps = (
        TccStep("hold_stock", "inventory", "reserve"),
        TccStep("take_payment", "payments", "charge"),
    )


def test_registry_versions_latest_and_types() -> None:
    registry = SagaRegistry({"payments", "inventory", "shipping"})
    registry.register(OrderSaga)
    registry.register(OrderSagaV2)
    assert registry.register(OrderSaga).version == 1  # same class again: no-op
    v1, latest = registry.get("order", 1), registry.latest("order")
    assert v1.saga_class is OrderSaga and latest.saga_class is OrderSagaV2
    assert [s.name for s in v1.steps] == ["reserve_funds", "reserve_stock", "create_shipment"]
    assert [s.name for s in latest.steps] == ["hold_stock", "take_payment"]
    assert [s.name for s in registry.get("order", 2).steps] == ["hold_stock", "take_payment"]
    assert [(c.name, c.version) for c in registry.types()] == [("order", 1), ("order", 2)]
    with pytest.raises(UnknownSaga, match=r"version 3 .*versions: \[1, 2\]"):
        registry.get("order", 3)
    with pytest.raises(UnknownSaga, match="no saga 'nope'"):
        registry.latest("nope")
    clash = type("Other", (OrderSaga,), {})
    with pytest.raises(DefinitionError, match="already registered by OrderSaga"):
        registry.register(clash)


def test_strict_registry_rejects_unknown_participants() -> None:
    registry = SagaRegistry({"payments", "inventory"})
    with pytest.raises(DefinitionError, match=r"OrderSaga\.create_shipment: unknown participant"):
        registry.register(OrderSaga)
    assert len(registry) == 0


def test_registry_topic_prefix_reaches_the_compiled_saga() -> None:
    compiled = SagaRegistry(topic_prefix="acme").register(OrderSaga)
    assert compiled.reply_topic == "acme.replies"
    assert compiled.command_topic(compiled.steps[0]) == "acme.payments.commands"
