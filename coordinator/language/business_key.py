"""A saga's business key: the id people know it by (a trip number, an order number).

A saga class declares it as a field of its input, or as a :class:`BusinessKey` with a
function of the validated input; the store keeps it on the saga row, indexed, and the API,
the CLI and the web console find sagas by it::

    class TripSaga(Saga):
        business_key = "trip_id"                     # a field of the input
        # or BusinessKey(lambda i: f"T-{i.trip_id}", on_conflict="return")

By default a key is unique per saga type among sagas in flight (scheduled, running,
compensating or dead): a second start with the key of a running saga is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel

__all__ = ["MAX_KEY_LENGTH", "BusinessKey", "business_key_of", "business_key_problems"]

#: Longest business key stored (longer ones are refused at the start, with the reason).
MAX_KEY_LENGTH: Final = 200


@dataclass(frozen=True)
class BusinessKey:
    """Where a saga's business key comes from and how unique it must be."""

    #: A field of the input model, or a function of the validated input returning the key.
    source: str | Callable[[Any], str]
    #: ``"in_flight"``: no two sagas of the type in flight share it; ``"always"``: no two
    #: sagas of the type ever do; ``"none"``: only a search key.
    unique: Literal["in_flight", "always", "none"] = "in_flight"
    #: A start whose key is taken: ``"refuse"`` it (HTTP 409 naming the saga that holds the
    #: key) or ``"return"`` that saga instead (HTTP 200, like an idempotent start).
    on_conflict: Literal["refuse", "return"] = "refuse"

    def of(self, data: BaseModel) -> str:
        value = (getattr(data, self.source) if isinstance(self.source, str)
                 else self.source(data))
        return str(value)


def declared(cls: type) -> BusinessKey | None:
    """The class's business key as a :class:`BusinessKey` (a plain field name is one)."""
    value = getattr(cls, "business_key", None)
    return BusinessKey(value) if isinstance(value, str) else value


def business_key_of(cls: type, data: BaseModel) -> tuple[str | None, BusinessKey | None]:
    """The key of a validated input, and its declaration (``None``, ``None``: none declared)."""
    spec = declared(cls)
    return (None, None) if spec is None else (spec.of(data), spec)


def business_key_problems(where: str, cls: type) -> list[str]:
    value = getattr(cls, "business_key", None)
    if value is None:
        return []
    if not isinstance(value, (str, BusinessKey)):
        return [f"{where}: `business_key` must be an input field's name or a BusinessKey, "
                f"got {value!r}"]
    spec = declared(cls)
    assert spec is not None
    out: list[str] = []
    model = getattr(cls, "input_model", None)
    fields = getattr(model, "model_fields", {})
    if isinstance(spec.source, str) and spec.source not in fields:
        out.append(f"{where}: `business_key` names {spec.source!r}, which is not a field of "
                   f"the input model (fields: {', '.join(fields) or 'none'})")
    elif not isinstance(spec.source, str) and not callable(spec.source):
        out.append(f"{where}: `business_key` source must be a field name or a function")
    if spec.unique not in ("in_flight", "always", "none"):
        out.append(f"{where}: `business_key` unique must be in_flight, always or none")
    if spec.on_conflict not in ("refuse", "return"):
        out.append(f"{where}: `business_key` on_conflict must be refuse or return")
    return out
