"""The inbox's form generated from a task form's JSON Schema, and a posted form read back."""

from __future__ import annotations

from enum import Enum
from typing import Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from coordinator.ui.task_form import field_errors, fields_of, read_form


class Risk(Enum):
    LOW = "low"
    HIGH = "high"


class Review(BaseModel):
    outcome: Literal["approve", "reject", "ask"]
    risk: Risk = Risk.LOW
    amount: int | None = None
    rate: float = 1.5
    urgent: bool = False
    code: str = Field(default="", max_length=20, description="cost center")
    note: str = Field(default="", max_length=2000)
    tags: list[str] = Field(default_factory=list)


SCHEMA = Review.model_json_schema()


def test_each_type_gets_its_input() -> None:
    fields = {f.name: f for f in fields_of(SCHEMA)}
    assert {n: f.kind for n, f in fields.items()} == {
        "outcome": "select", "risk": "select", "amount": "integer", "rate": "number",
        "urgent": "checkbox", "code": "text", "note": "textarea", "tags": "json"}
    assert fields["outcome"].options == ["approve", "reject", "ask"]
    assert fields["outcome"].required and not fields["risk"].required
    assert fields["risk"].options == ["low", "high"] and fields["risk"].value == "low"
    assert fields["rate"].value == 1.5 and fields["code"].help == "cost center"
    assert fields["tags"].value is None and fields["outcome"].input == "f.outcome"
    assert fields_of(SCHEMA, {"tags": ["a"]})[-1].value == '["a"]'
    assert fields_of(None) == []


def test_a_posted_form_is_read_by_the_types_and_refused_per_field() -> None:
    data, typed, errors = read_form(SCHEMA, {
        "f.outcome": "approve", "f.risk": "high", "f.amount": "12", "f.rate": "",
        "f.urgent": "on", "f.code": "c7", "f.tags": '["a"]'})
    assert errors == {}
    assert data == {"outcome": "approve", "risk": "high", "amount": 12, "urgent": True,
                    "code": "c7", "tags": ["a"]}
    assert Review.model_validate(data).risk is Risk.HIGH
    data, typed, errors = read_form(SCHEMA, {"f.amount": "twelve", "f.rate": "x",
                                             "f.tags": "[", "f.note": "hi"})
    assert errors == {"amount": "must be a whole number", "rate": "must be a number",
                      "tags": "must be JSON"}
    assert typed["amount"] == "twelve" and data == {"urgent": False, "note": "hi"}
    with pytest.raises(ValidationError) as refused:
        Review.model_validate({"outcome": "maybe", "code": "x" * 21})
    problems = field_errors(refused.value)
    assert set(problems) == {"outcome", "code"}
    again = fields_of(SCHEMA, typed, problems)
    assert [f.name for f in again if f.error] == ["outcome", "code"]
