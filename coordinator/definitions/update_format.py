"""The definition format's updates (``language.updates``), declared as data::

    updates:
      change_address:
        payload: {type: object, properties: {address: {type: string}}, required: [address]}
        validate:
          - require: "results.ship == null"
            reason: the order has shipped
        apply: "{address: payload.address, previous: input.address}"
      pay:
        payload: {type: object, properties: {amount_cents: {type: integer}}}
        validate: [{require: "payload.amount_cents > `0`", reason: nothing to pay}]
        signal: paid

Each ``require`` is a JMESPath expression over ``{"input", "results", "updates", "status",
"payload", "now"}``; the first one that is false (JMESPath falsy) rejects the update with its
``reason``. ``apply`` is an expression over the same data giving the result (an object;
default: the payload)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from coordinator.definitions.expressions import compile_expression
from coordinator.definitions.schemas import JsonSchema

__all__ = ["UpdateDef", "UpdateRuleDef"]


def _parses(source: str) -> str:
    compile_expression(source)
    return source


_Expression = Annotated[str, Field(min_length=1, max_length=2000), AfterValidator(_parses)]
_Name = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_\-]{0,99}$")]


class UpdateRuleDef(BaseModel):
    """One check of an update's validator: ``require`` must hold, else ``reason``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    require: _Expression
    reason: str = Field(min_length=1, max_length=2000)


class UpdateDef(BaseModel):
    """An update the saga takes: its payload, its checks, its result, the signal it sends."""

    #: ``validate`` is written ``validate_`` here (``BaseModel.validate`` is taken).
    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True,
                              validate_by_name=True, validate_by_alias=True)

    description: str = Field(default="", max_length=2000)
    #: The payload as JSON Schema; absent: any object.
    payload: JsonSchema | None = None
    #: Checked in order; the first that fails rejects the update with its reason.
    validate_: list[UpdateRuleDef] = Field(default_factory=list, max_length=50,
                                           alias="validate")
    #: The result (an object); absent: the payload.
    apply: _Expression | None = None
    #: A signal the saga's waits declare, delivered with the result when accepted.
    signal: _Name | None = None
