"""One tree: a definition loads into a saga class that compiles to the same tree, machine
and diagram as the class it was exported from, for the examples and the pattern library."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator.definitions import (
    InvalidDefinition,
    export,
    load_saga,
    load_saga_file,
    parse_definition,
    to_json,
    to_yaml,
)
from coordinator.engine.compiled import compile_saga
from coordinator.language.saga import Saga
from coordinator.sagas.diagram import mermaid
from coordinator.sagas.patterns import (
    approval_saga,
    etl_batch_saga,
    onboarding_saga,
    order_saga,
    participant_approval_saga,
    refund_saga,
)
from examples.checkout_saga import CheckoutSaga
from examples.order_saga import (
    FulfilmentSaga,
    NestedOrderSaga,
    OrderSaga,
    ParallelOrderSaga,
)
from tests.unit.definitions import equivalents as eq

ROOT = Path(__file__).resolve().parents[3]

CLASSES: list[tuple[type[Saga], dict[str, str]]] = [
    (OrderSaga, eq.ORDER), (ParallelOrderSaga, eq.ORDER), (FulfilmentSaga, eq.ORDER),
    (NestedOrderSaga, eq.ORDER), (CheckoutSaga, eq.CHECKOUT),
    (approval_saga(participant="erp", action="post"), eq.APPROVAL),
    (approval_saga(participant="erp", action="post", approvers_needed=2, approvers_asked=3,
                   users=("ann",)), eq.APPROVAL),
    (participant_approval_saga(participant="erp", action="post"), eq.APPROVAL),
    (order_saga(), eq.ORDER_PATTERN), (order_saga(shipping=None), eq.ORDER_PATTERN),
    (onboarding_saga(), eq.ONBOARDING), (onboarding_saga(billing=None), eq.ONBOARDING),
    (etl_batch_saga(), eq.ETL), (refund_saga(), eq.REFUND), (refund_saga(inventory=None),
                                                              eq.REFUND),
]


def _machine(cls: type[Saga]) -> dict[str, Any]:
    return compile_saga(cls).to_json()


@pytest.mark.parametrize(("cls", "expressions"), CLASSES,
                         ids=[f"{c.name}-{i}" for i, (c, _) in enumerate(CLASSES)])
@pytest.mark.parametrize("text", [to_yaml, to_json])
def test_a_class_exported_and_loaded_back_is_the_same_tree(
    cls: type[Saga], expressions: dict[str, str], text: Any
) -> None:
    definition = export(cls, expressions)
    loaded = load_saga(text(definition))
    assert issubclass(loaded, Saga) and loaded is not cls
    assert _machine(loaded) == _machine(cls)  # nodes, policies, states, moves, input schema
    assert mermaid(compile_saga(loaded)) == mermaid(compile_saga(cls))
    assert export(loaded) == definition  # and a loaded class exports as it was declared


@pytest.mark.parametrize(("file", "cls"), [("order_saga.yaml", OrderSaga),
                                           ("checkout_saga.yaml", CheckoutSaga)])
def test_the_yaml_examples_are_their_classes(file: str, cls: type[Saga]) -> None:
    path = ROOT / "examples" / file
    loaded = load_saga_file(path)
    assert _machine(loaded) == _machine(cls)
    assert mermaid(compile_saga(loaded)) == mermaid(compile_saga(cls))
    assert export(loaded) == parse_definition(path.read_text())


def test_exporting_python_mappers_needs_their_expressions_and_lists_every_missing_one() -> None:
    with pytest.raises(InvalidDefinition) as refused:
        export(CheckoutSaga)
    assert [p.path for p in refused.value.problems] == [
        "reserve_funds.payload", "lines.items", "reserve_stock.payload", "carrier_a.payload",
        "carrier_b.payload"]
    assert "expressions['lines.items']" in str(refused.value)


def test_the_package_surface_is_deliberate() -> None:
    import coordinator.definitions as package

    assert set(package.__all__) == {
        "FORMAT", "Definition", "Expression", "ExpressionFailed", "InvalidDefinition",
        "Problem", "compile_expression", "export", "load_definition", "load_saga",
        "load_saga_file", "parse_definition", "to_json", "to_yaml"}
    assert all(hasattr(package, name) for name in package.__all__)
