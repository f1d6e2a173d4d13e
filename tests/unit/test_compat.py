"""The input compatibility check: which model changes break clients of the old version."""

from __future__ import annotations

import subprocess
import sys

from pydantic import BaseModel, Field

from coordinator.language.saga import Saga, TccStep
from coordinator.versioning.compat import compare_models


class Address(BaseModel):
    street: str
    city: str


class AddressWithZip(Address):
    zip: str


class OrderV1(BaseModel):
    order_id: str = Field(min_length=1)
    amount: int
    note: str | None = None
    address: Address


class _Step:
    steps = (TccStep("pay", "payments", "charge"),)


class ShopV1(Saga):
    name = "shop"
    version = 1
    input_model = OrderV1
    steps = _Step.steps


class OrderV2Renamed(BaseModel):
    """``amount`` renamed ``amount_cents``, as a refactoring would."""

    order_id: str = Field(min_length=1)
    amount_cents: int
    note: str | None = None
    address: Address


class ShopV2Renamed(Saga):
    name = "shop"
    version = 2
    input_model = OrderV2Renamed
    steps = _Step.steps


class OrderV2Additive(OrderV1):
    """A new optional field and a documented one: nothing a v1 client sends breaks."""

    order_id: str = Field(min_length=1, description="The shop's order number.")
    coupon: str | None = None


class ShopV2Additive(Saga):
    name = "shop"
    version = 2
    input_model = OrderV2Additive
    steps = _Step.steps


def _lines(old: type[BaseModel], new: type[BaseModel]) -> list[str]:
    return [str(c) for c in compare_models(old, new)]


def test_identical_and_documentation_only_changes_are_compatible() -> None:
    assert _lines(OrderV1, OrderV1) == []
    assert _lines(OrderV1, OrderV2Additive) == ["ok  input.coupon: new optional field"]


def test_a_renamed_field_is_a_removal_and_a_new_required_field() -> None:
    assert _lines(OrderV1, OrderV2Renamed) == [
        "BREAKING  input.amount: required field removed",
        "BREAKING  input.amount_cents: new required field",
    ]


def test_retyped_required_optional_and_nested_changes() -> None:
    class Retyped(BaseModel):
        order_id: str = Field(min_length=1)
        amount: str
        note: str
        address: AddressWithZip

    lines = _lines(OrderV1, Retyped)
    assert "BREAKING  input.address.zip: new required field" in lines
    assert any(line.startswith("BREAKING  input.amount: type or constraints changed")
               for line in lines)
    assert "BREAKING  input.note: optional field became required" in lines
    back = _lines(Retyped, OrderV1)
    assert "ok  input.note: required field became optional" in back
    assert "BREAKING  input.address.zip: required field removed" in back


def _compat(*refs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordinator", "compat", *refs],
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_command_fails_ci_on_a_breaking_change_only() -> None:
    here = "tests.unit.test_compat"
    broken = _compat(f"{here}:ShopV1", f"{here}:ShopV2Renamed")
    assert broken.returncode == 1, broken.stderr
    assert broken.stdout.splitlines() == [
        "BREAKING  input.amount: required field removed",
        "BREAKING  input.amount_cents: new required field",
        "shop v1 -> shop v2: 2 breaking change(s)",
    ]
    fine = _compat(f"{here}:ShopV1", f"{here}:ShopV2Additive")
    assert fine.returncode == 0, fine.stderr
    assert fine.stdout.splitlines()[-1] == "shop v1 -> shop v2: compatible"
    missing = _compat(f"{here}:ShopV1", "nowhere.at_all:Shop")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().startswith("sagaflow-coordinator compat: error: cannot import")


class Paid(BaseModel):
    amount_cents: int


class PaidWithCurrency(Paid):
    currency: str


class Status(BaseModel):
    stage: str
    eta: str


class StatusLoose(BaseModel):
    stage: str
    eta: str | None = None
    carrier: str = ""


def _status(_: object) -> Status:
    return Status(stage="x", eta="y")


def _status_loose(_: object) -> StatusLoose:
    return StatusLoose(stage="x")


def _waiting(version: int, payload: type[BaseModel], query: object,
             signal: str = "paid") -> type[Saga]:
    from coordinator.language.nodes import Parallel, WaitForSignal

    return type(f"Wait{version}", (Saga,), {
        "name": "wait", "version": version, "input_model": OrderV1,
        "steps": (Parallel("both", (TccStep("pay", "payments", "charge"),
                                    WaitForSignal("w", signal, payload=payload))),),
        "queries": {"status": query}})


def test_signals_are_compared_as_sent_and_queries_as_read() -> None:
    from coordinator.versioning.compat import compare_sagas

    same = compare_sagas(_waiting(1, Paid, _status), _waiting(2, Paid, _status))
    assert not any(c.breaking for c in same)
    changed = {c.path: c for c in compare_sagas(_waiting(1, Paid, _status),
                                                _waiting(2, PaidWithCurrency, _status_loose))}
    # The sender of ``paid`` must now send a currency: breaking, found inside a parallel group.
    assert changed["signal.paid.currency"].breaking
    # A reader of ``status`` may now get no eta: breaking; a new result field is not.
    assert changed["query.status.eta"].breaking
    assert not changed["query.status.carrier"].breaking
    gone = {c.path: c for c in compare_sagas(_waiting(1, Paid, _status),
                                             _waiting(2, Paid, _status, signal="settled"))}
    assert gone["signal.paid"].breaking and not gone["signal.settled"].breaking
