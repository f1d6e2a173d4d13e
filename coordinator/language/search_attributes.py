"""Search attributes: typed, indexed fields a saga sets from its input and its results.

A saga class lists them in ``search``; the store recomputes them when the saga starts and
whenever its results change (in the same transaction as the change), and the API, the CLI
and the web console filter on them (``customer_id = 'c-42' and amount > 1000``)::

    class OrderSaga(Saga):
        search = (
            SearchAttribute("customer_id", str, lambda ctx: ctx.input.customer_id),
            SearchAttribute("amount", int, lambda ctx: ctx.input.amount_cents),
            SearchAttribute("carrier", str,
                            lambda ctx: (ctx.results.get("ship") or {}).get("carrier")),
        )

A function that returns ``None`` or raises (a result not there yet) leaves the attribute
unset: a filter on it does not match the saga until it has a value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, get_args, get_origin
from uuid import UUID

__all__ = [
    "BUILTIN_FIELDS",
    "KINDS",
    "MAX_KEYWORDS",
    "MAX_TEXT",
    "AttributeValueError",
    "Kind",
    "SearchAttribute",
    "SearchContext",
    "declared_attributes",
    "normalise",
    "search_problems",
]

#: What an attribute holds: text, a whole number, a number, a flag, an instant, or a list of
#: keywords (a filter's ``=`` on it means "contains").
Kind = Literal["str", "int", "float", "bool", "datetime", "keywords"]
KINDS: Final[tuple[Kind, ...]] = ("str", "int", "float", "bool", "datetime", "keywords")

#: Fields every saga has, filterable by name: an attribute may not take one of these names.
BUILTIN_FIELDS: Final[Mapping[str, Kind]] = {
    "status": "str", "saga_type": "str", "version": "int", "business_key": "str",
    "created_at": "datetime", "updated_at": "datetime",
}
#: Longest text value stored (and each keyword); longer values leave the attribute unset.
MAX_TEXT: Final = 500
#: Most keywords in one list.
MAX_KEYWORDS: Final = 100
#: Most attributes a saga class declares.
MAX_ATTRIBUTES: Final = 50
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_BY_TYPE: Final[Mapping[object, Kind]] = {
    str: "str", int: "int", float: "float", bool: "bool", datetime: "datetime",
}


@dataclass(frozen=True)
class SearchContext:
    """What an attribute's function sees: the saga's validated input and its results so far
    (by node key, as the API shows them)."""

    saga_id: UUID
    saga_type: str
    version: int
    input: Any
    results: Mapping[str, Any]


@dataclass(frozen=True)
class SearchAttribute:
    """One attribute: its name, its type (``str``, ``int``, ``float``, ``bool``,
    ``datetime`` or ``list[str]`` for keywords) and the function computing it."""

    name: str
    type: Any
    source: Callable[[SearchContext], Any]
    description: str = ""

    @property
    def kind(self) -> Kind:
        """The type as a kind name (``"keywords"`` for ``list[str]``)."""
        kind = kind_of(self.type)
        if kind is None:
            raise ValueError(f"search attribute {self.name!r}: unsupported type {self.type!r}")
        return kind


def kind_of(tp: Any) -> Kind | None:
    """The kind of a declared type (a kind's name is accepted too), or ``None``."""
    if isinstance(tp, str):
        return tp if tp in KINDS else None
    if get_origin(tp) in (list, tuple, Seq) and get_args(tp)[:1] == (str,):
        return "keywords"
    return _BY_TYPE.get(tp)


class AttributeValueError(ValueError):
    """A value that is not of its attribute's type (or over a size limit)."""


def normalise(kind: Kind, value: Any) -> Any:
    """``value`` as stored for ``kind``, ``None`` for unset; raise
    :class:`AttributeValueError` for a value of another type."""
    if value is None:
        return None
    ok: bool
    if kind == "str":
        ok = isinstance(value, str) and len(value) <= MAX_TEXT and "\x00" not in value
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**18
    elif kind == "float":
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(value))
        value = float(value) if ok else value
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "datetime":
        if isinstance(value, str):  # a JSON value (a declarative definition's expression)
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                raise AttributeValueError(f"{value!r} is not an ISO 8601 time") from None
        ok = isinstance(value, datetime) and value.tzinfo is not None
    else:
        ok = (isinstance(value, (list, tuple)) and len(value) <= MAX_KEYWORDS
              and all(isinstance(v, str) and len(v) <= MAX_TEXT and "\x00" not in v
                      for v in value))
        value = sorted(set(value)) if ok else value
        if ok and not value:
            return None
    if not ok:
        raise AttributeValueError(f"{_shown(value)} is not a {_KIND_TEXT[kind]}")
    return value


_KIND_TEXT: Final[Mapping[str, str]] = {
    "str": f"text of at most {MAX_TEXT} characters", "int": "whole number (|n| < 10^18)",
    "float": "finite number", "bool": "true or false",
    "datetime": "time with a time zone",
    "keywords": f"list of at most {MAX_KEYWORDS} texts of at most {MAX_TEXT} characters",
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def declared_attributes(cls: type) -> tuple[SearchAttribute, ...]:
    """The class's search attributes (none: an empty tuple)."""
    return tuple(getattr(cls, "search", None) or ())


def search_problems(where: str, cls: type) -> list[str]:
    """Every problem of the class's ``search`` declaration."""
    value = getattr(cls, "search", None) or ()
    if not isinstance(value, (list, tuple)):
        return [f"{where}: `search` must be a tuple of SearchAttribute, got {value!r}"]
    if len(value) > MAX_ATTRIBUTES:
        return [f"{where}: `search` declares {len(value)} attributes, more than "
                f"{MAX_ATTRIBUTES}"]
    out: list[str] = []
    seen: set[str] = set()
    for index, attr in enumerate(value):
        at = f"{where}.search[{index}]"
        if not isinstance(attr, SearchAttribute):
            out.append(f"{at}: must be a SearchAttribute, got {attr!r}")
            continue
        if not isinstance(attr.name, str) or not _NAME.match(attr.name):
            out.append(f"{at}: name must be a letter or _ then letters, digits or _ "
                       f"(at most 63), got {attr.name!r}")
        elif attr.name.lower() in BUILTIN_FIELDS or attr.name.lower() in _KEYWORDS:
            out.append(f"{at}: {attr.name!r} is a built-in field or a word of the filter "
                       "language; choose another name")
        elif attr.name in seen:
            out.append(f"{at}: duplicate search attribute {attr.name!r}")
        seen.add(str(attr.name))
        if kind_of(attr.type) is None:
            out.append(f"{at}: type must be str, int, float, bool, datetime or list[str], "
                       f"got {attr.type!r}")
        if not callable(attr.source):
            out.append(f"{at}: source must be a function of the SearchContext, "
                       f"got {attr.source!r}")
    return out


#: The filter language's words (``coordinator.sagas.filters``) and the alias ``type`` (of
#: ``saga_type``): not usable as names.
_KEYWORDS: Final = frozenset({"and", "or", "not", "in", "true", "false", "null", "is", "type"})
