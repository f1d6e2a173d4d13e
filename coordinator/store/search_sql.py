"""A checked saga filter (:mod:`coordinator.sagas.filter_check`) as a SQL condition on
``sagas``, its values all bind parameters: no text of the filter reaches the SQL.

The fragment numbers its parameters ``{0}``, ``{1}``, ... for the caller to place (the API's
query builder renumbers them after its own). A built-in field compares its column; an
attribute is an ``EXISTS`` over ``saga_search_attributes`` that the index of its kind answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from coordinator.sagas.filter_check import Checked, CheckedAnd, CheckedCompare, CheckedNot

__all__ = ["SqlFilter", "filter_sql"]

#: Built-in field -> its column of ``sagas``.
_COLUMNS: Final = {"status": "sagas.status", "saga_type": "sagas.saga_type",
                   "version": "sagas.saga_version", "business_key": "sagas.business_key",
                   "created_at": "sagas.created_at", "updated_at": "sagas.updated_at"}
#: Kind -> (value column, Postgres type of a parameter).
_STORED: Final = {"str": ("text_value", "text"), "keywords": ("text_value", "text"),
                  "int": ("num_value", "numeric"), "float": ("num_value", "numeric"),
                  "bool": ("bool_value", "boolean"), "datetime": ("time_value", "timestamptz")}
_BUILTIN_TYPES: Final = {"str": "text", "int": "integer", "datetime": "timestamptz"}
_SQL_OP: Final = {"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_EXISTS: Final = ("EXISTS (SELECT 1 FROM saga_search_attributes a WHERE a.saga_id = sagas.id "
                  "AND a.name = {name}::text{cond})")


@dataclass
class SqlFilter:
    """A condition and its parameters, in order."""

    sql: str = ""
    args: list[Any] = field(default_factory=list)

    def param(self, value: Any) -> str:
        self.args.append(value)
        return "{" + str(len(self.args) - 1) + "}"


def filter_sql(node: Checked) -> SqlFilter:
    """The SQL condition of ``node`` with its parameters."""
    out = SqlFilter()
    out.sql = _sql(node, out)
    return out


def _sql(node: Checked, out: SqlFilter) -> str:
    if isinstance(node, CheckedNot):
        return f"NOT ({_sql(node.part, out)})"
    if not isinstance(node, CheckedCompare):
        glue = " AND " if isinstance(node, CheckedAnd) else " OR "
        return "(" + glue.join(_sql(p, out) for p in node.parts) + ")"
    if node.builtin:
        return _builtin(node, out)
    return _attribute(node, out)


def _param(value: Any) -> Any:
    """A number as the exact decimal Postgres compares (no float rounding on either side)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Decimal(str(value))
    return value


def _builtin(node: CheckedCompare, out: SqlFilter) -> str:
    column = _COLUMNS[node.field]
    if node.op in ("is null", "is not null"):
        return f"({column} {node.op.upper()})"
    pg = _BUILTIN_TYPES[node.kind]
    if node.kind == "int" and any(isinstance(v, float) for v in _listed(node)):
        pg = "numeric"
    # Bytewise text order, as the attributes' (equality keeps the column's index usable).
    collate = ' COLLATE "C"' if node.kind == "str" and node.op not in ("=", "!=") else ""
    # business_key may be NULL: a comparison needs a value, so NULL never matches (not even
    # under NOT, which a bare `column <> $1` would turn into NULL, then false).
    guard = f"{column} IS NOT NULL AND " if node.field == "business_key" else ""
    if node.op in ("in", "not in"):
        values = [_param(v) for v in node.value]
        test = "= ANY" if node.op == "in" else "<> ALL"
        return f"({guard}{column} {test}({out.param(values)}::{pg}[]))"
    value = out.param(_param(node.value))
    return f"({guard}{column}{collate} {_SQL_OP[node.op]} {value}::{pg}{collate})"


def _listed(node: CheckedCompare) -> tuple[Any, ...]:
    return node.value if node.op in ("in", "not in") else (node.value,)


def _attribute(node: CheckedCompare, out: SqlFilter) -> str:
    column, pg = _STORED[node.kind]
    name = out.param(node.field)
    if node.op in ("is null", "is not null"):
        held = _EXISTS.format(name=name, cond="")
        return held if node.op == "is not null" else f"NOT {held}"
    if node.kind == "keywords":
        # Contains (one of) the values; != and not in: has the list, and not those.
        values = [node.value] if node.op in ("=", "!=") else list(node.value)
        hit = _EXISTS.format(name=name, cond=f" AND a.{column} = ANY({out.param(values)}"
                                             f"::{pg}[])")
        if node.op in ("=", "in"):
            return hit
        return f"({_EXISTS.format(name=name, cond='')} AND NOT {hit})"
    if node.op in ("in", "not in"):
        values = [_param(v) for v in node.value]
        test = "= ANY" if node.op == "in" else "<> ALL"
        cond = f" AND a.{column} {test}({out.param(values)}::{pg}[])"
    else:
        value = out.param(_param(node.value))
        cond = f" AND a.{column} {_SQL_OP[node.op]} {value}::{pg}"
    return _EXISTS.format(name=name, cond=cond)
