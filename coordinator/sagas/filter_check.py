"""Type-checking a parsed filter against the declared attributes, and evaluating it in Python.

The checked tree names each field's kind and whether it is a built-in column or an
attribute, with the values converted (times parsed): what the store compiles to SQL with bind
parameters (``coordinator.store.search_sql``). :func:`evaluate` gives the same answer in
Python; the tests hold the two to it, and the test kit filters with it.

Semantics: a comparison needs a value, so it is false on a saga that has none for the field
(an attribute not set, a saga without a business key), whatever the operator; ``not`` turns
that into true, and ``is null`` / ``is not null`` ask for it. On a keyword list ``=`` means
"contains", ``!=`` "does not contain", ``in`` "contains one of", ``not in`` "contains none
of"; lists are not ordered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from coordinator.engine import Status
from coordinator.language.search_attributes import BUILTIN_FIELDS, Kind
from coordinator.sagas.filters import And, Compare, FilterError, InList, IsNull, Node, Not, Or
from coordinator.sagas.search import Catalogue

__all__ = ["Checked", "CheckedCompare", "check_filter", "evaluate"]

#: Names that stand for a built-in field.
ALIASES: Final = {"type": "saga_type"}
_ORDERED: Final = frozenset({"str", "int", "float", "datetime"})


@dataclass(frozen=True)
class CheckedCompare:
    """One comparison, type-checked: ``op`` is one of ``= != < <= > >=``, ``in`` /
    ``not in`` (``value`` then a tuple) or ``is null`` / ``is not null``."""

    field: str
    kind: Kind
    builtin: bool
    op: str
    value: Any


@dataclass(frozen=True)
class CheckedAnd:
    parts: tuple[Checked, ...]


@dataclass(frozen=True)
class CheckedOr:
    parts: tuple[Checked, ...]


@dataclass(frozen=True)
class CheckedNot:
    part: Checked


Checked = CheckedCompare | CheckedAnd | CheckedOr | CheckedNot


def check_filter(node: Node, attributes: Catalogue) -> Checked:
    """``node`` with every field resolved and every value of its field's kind; raise
    :class:`FilterError` at the first unknown field, ambiguous one or mismatched value."""
    if isinstance(node, And):
        return CheckedAnd(tuple(check_filter(p, attributes) for p in node.parts))
    if isinstance(node, Or):
        return CheckedOr(tuple(check_filter(p, attributes) for p in node.parts))
    if isinstance(node, Not):
        return CheckedNot(check_filter(node.part, attributes))
    field, kind, builtin = _field(node.field, node.pos, attributes)
    if isinstance(node, IsNull):
        return CheckedCompare(field, kind, builtin, "is not null" if node.negated else "is null",
                              None)
    if isinstance(node, InList):
        values = tuple(_value(field, kind, v, p) for v, p in zip(node.values, node.value_pos,
                                                                  strict=True))
        return CheckedCompare(field, kind, builtin, "not in" if node.negated else "in", values)
    assert isinstance(node, Compare)
    if node.op not in ("=", "!=") and kind not in _ORDERED:
        raise FilterError(f"{node.field!r} is {_a(kind)}: only =, != and in compare it",
                          node.pos)
    if node.op not in ("=", "!=") and field == "status":
        raise FilterError("status compares with =, != and in only", node.pos)
    return CheckedCompare(field, kind, builtin, node.op,
                          _value(field, kind, node.value, node.value_pos))


def _a(kind: Kind) -> str:
    return {"str": "a text", "int": "a whole number", "float": "a number", "bool": "a flag",
            "datetime": "a time", "keywords": "a keyword list"}[kind]


def _field(name: str, pos: int, attributes: Catalogue) -> tuple[str, Kind, bool]:
    builtin = ALIASES.get(name.lower(), name.lower())
    if builtin in BUILTIN_FIELDS:
        return builtin, BUILTIN_FIELDS[builtin], True
    declared = attributes.get(name)
    if declared is None:
        known = ", ".join([*BUILTIN_FIELDS, *attributes]) or "none"
        raise FilterError(f"unknown field {name!r} (fields: {known})", pos)
    if declared.kind is None:
        raise FilterError(f"{name!r} is declared with different types ({declared.conflict()}); "
                          "narrow the list to one saga type", pos)
    return name, declared.kind, False


def _value(field: str, kind: Kind, value: Any, pos: int) -> Any:
    shown = f"{value!r}" if not isinstance(value, bool) else str(value).lower()
    if kind in ("str", "keywords"):
        if not isinstance(value, str):
            raise FilterError(f"{field!r} holds text: compare it with a quoted text, not "
                              f"{shown}", pos)
        if field == "status" and value not in _STATUSES:
            raise FilterError(f"{value!r} is not a status (statuses: "
                              f"{', '.join(_STATUSES)})", pos)
        return value
    if kind in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FilterError(f"{field!r} holds numbers: compare it with a number, not "
                              f"{shown}", pos)
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise FilterError(f"{field!r} is true or false: compare it with true or false, "
                              f"not {shown}", pos)
        return value
    if not isinstance(value, str):
        raise FilterError(f"{field!r} holds times: compare it with a quoted ISO 8601 time "
                          f"('2026-05-01T12:00:00Z'), not {shown}", pos)
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise FilterError(f"{value!r} is not an ISO 8601 time ('2026-05-01' or "
                          "'2026-05-01T12:00:00+02:00')", pos) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


_STATUSES: Final = tuple(s.value for s in Status)


# -- evaluation in Python ------------------------------------------------------------------


def evaluate(node: Checked, row: Mapping[str, Any]) -> bool:
    """Whether a saga matches: ``row`` maps each built-in field and attribute that has a
    value to it (a keyword list as a list); a missing or ``None`` field has no value."""
    if isinstance(node, CheckedAnd):
        return all(evaluate(p, row) for p in node.parts)
    if isinstance(node, CheckedOr):
        return any(evaluate(p, row) for p in node.parts)
    if isinstance(node, CheckedNot):
        return not evaluate(node.part, row)
    have = row.get(node.field)
    if node.op in ("is null", "is not null"):
        return (have is None) == (node.op == "is null")
    if have is None:
        return False
    if node.kind == "keywords":
        values = set(have)
        wanted = set(node.value) if node.op in ("in", "not in") else {node.value}
        hit = bool(values & wanted)
        return hit if node.op in ("=", "in") else not hit
    if node.op == "in":
        return bool(have in node.value)
    if node.op == "not in":
        return bool(have not in node.value)
    return bool(_COMPARE[node.op](have, node.value))


_COMPARE: Final = {
    "=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}
