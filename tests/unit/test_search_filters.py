"""The saga filter language: parsing, every error with its column, type-checking against the
declared attributes, the SQL it compiles to (values only as parameters), and the Python
evaluator (issue 37)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from coordinator.engine import compile_saga
from coordinator.language import Saga, SearchAttribute, TccStep
from coordinator.sagas.filter_check import (
    CheckedAnd,
    CheckedCompare,
    CheckedNot,
    CheckedOr,
    check_filter,
    evaluate,
)
from coordinator.sagas.filters import (
    And,
    Compare,
    FilterError,
    InList,
    IsNull,
    Not,
    Or,
    parse_filter,
)
from coordinator.sagas.search import catalogue
from coordinator.store.search_sql import filter_sql


class In(BaseModel):
    customer_id: str
    amount: int


def _saga(name: str, *attrs: SearchAttribute) -> type[Saga]:
    return type(name.title(), (Saga,), {"name": name, "input_model": In, "search": attrs,
                                        "steps": (TccStep("pay", "payments", "charge"),)})


ORDER = _saga(
    "order",
    SearchAttribute("customer_id", str, lambda c: c.input.customer_id),
    SearchAttribute("amount", int, lambda c: c.input.amount),
    SearchAttribute("ratio", float, lambda c: 0.5),
    SearchAttribute("vip", bool, lambda c: True),
    SearchAttribute("tags", list[str], lambda c: ["a"]),
    SearchAttribute("due", datetime, lambda c: None),
)
REFUND = _saga("refund", SearchAttribute("amount", str, lambda c: "x"))
ATTRS = catalogue([compile_saga(ORDER)])


def _check(text: str) -> object:
    return check_filter(parse_filter(text), ATTRS)


def test_precedence_not_then_and_then_or_and_parentheses() -> None:
    tree = parse_filter("a = 1 or not b = 'x' and c in (1, 2)")
    assert tree == Or((Compare("a", "=", 1, 0, 4),
                       And((Not(Compare("b", "=", "x", 13, 17)),
                            InList("c", (1, 2), False, 25, (31, 34))))))
    grouped = parse_filter("(a = 1 OR a = 2) AND NOT (b <> 3)")
    assert isinstance(grouped, And) and isinstance(grouped.parts[0], Or)
    assert grouped.parts[1] == Not(Compare("b", "!=", 3, 26, 31))


def test_literals_text_numbers_and_flags() -> None:
    tree = parse_filter(r"""a = 'it\'s' and b = "say \"hi\" \\" and c = -1.5e2 and d = TRUE""")
    assert isinstance(tree, And)
    assert [p.value for p in tree.parts if isinstance(p, Compare)] == [
        "it's", 'say "hi" \\', -150.0, True]
    assert parse_filter("x not in ('a')") == InList("x", ("a",), True, 0, (10,))
    assert parse_filter("x IS NULL or y is not null") == Or((IsNull("x", False, 0),
                                                            IsNull("y", True, 13)))


@pytest.mark.parametrize(("text", "message", "column"), [
    (r"a = 'x\y'", "a backslash in text escapes only ' or \\", 7),
    ("a = 'x\x00'", "may not hold a NUL", 7),
    ("a = 'open", "has no closing '", 5),
    ("a = 12abc", "'12a'... is not a number", 5),
    ("a = 1e999", "too large a number", 5),
    ("a = 1000000000000000000", "too large a whole number", 5),
    ("a = 1; DROP TABLE sagas", "unexpected character ';'", 6),
    ("(a = 1", "expected ')' to close the '('", 7),
    ("a = 1 b = 2", "unexpected 'b'; join conditions with 'and' or 'or'", 7),
    ("a = 1 )", "unexpected ')'", 7),
    ("not " * 22 + "a = 1", "nests deeper than 20 levels", 85),
    ("= 1", "expected a field name (or 'not', or '('), found '='", 1),
    ("true = 1", "expected a field name, found 'true'", 1),
    (" or ".join(["a = 1"] * 51), "more than 50 comparisons", 451),
    ("a not = 1", "expected 'in' after 'a not', found '='", 7),
    ("a in 1", "expected '(' to open the list after 'in'", 6),
    ("a in (" + ", ".join(["1"] * 101) + ")", "an 'in' list holds at most 100 values", 307),
    ("a in (1, 2", "expected ',' or ')' to close the list, found the end of the filter", 11),
    ("a 1", "expected an operator (=, !=, <, <=, >, >=) or 'in' after 'a'", 3),
    ("a == 1", "expected a value (a quoted text, a number, true or false), found '='", 4),
    ("a = b", "found 'b' (a text value is quoted: 'b')", 5),
    ("a = ", "found the end of the filter", 5),
    ("a is 1", "expected 'null' or 'not null' after 'a is', found '1'", 6),
    ("a is not 'x'", "expected 'null' or 'not null' after 'a is', found text 'x'", 10),
    ("null = 1", "expected a field name, found 'null'", 1),
    ("a" * 2001, "2001 characters long, more than 2000", 2001),
    ("  ", "the filter is empty", 1),
])
def test_every_syntax_error_names_its_column(text: str, message: str, column: int) -> None:
    with pytest.raises(FilterError, match=re.escape(message)) as caught:
        parse_filter(text)
    assert caught.value.column == column
    assert str(caught.value).startswith(f"column {column}: ")


@pytest.mark.parametrize(("text", "message", "column"), [
    ("carrier = 'ups'", "unknown field 'carrier' (fields: status, saga_type, version, "
                        "business_key, created_at, updated_at, amount, customer_id", 1),
    ("vip > true", "'vip' is a flag: only =, != and in compare it", 1),
    ("tags < 'a'", "'tags' is a keyword list: only =, != and in compare it", 1),
    ("status > 'a'", "status compares with =, != and in only", 1),
    ("customer_id = 42", "'customer_id' holds text: compare it with a quoted text, not 42", 15),
    ("status in ('running', 'done')", "'done' is not a status (statuses: scheduled, running",
     23),
    ("amount >= '10'", "'amount' holds numbers: compare it with a number, not '10'", 11),
    ("ratio = true", "'ratio' holds numbers: compare it with a number, not true", 9),
    ("vip = 1", "'vip' is true or false: compare it with true or false, not 1", 7),
    ("due < 5", "'due' holds times: compare it with a quoted ISO 8601 time", 7),
    ("created_at > 'yesterday'", "'yesterday' is not an ISO 8601 time", 14),
])
def test_every_type_error_names_its_column(text: str, message: str, column: int) -> None:
    with pytest.raises(FilterError, match=re.escape(message)) as caught:
        _check(text)
    assert caught.value.column == column


def test_a_name_two_types_declare_differently_needs_one_type() -> None:
    both = catalogue([compile_saga(ORDER), compile_saga(REFUND)])
    with pytest.raises(FilterError, match=re.escape(
            "'amount' is declared with different types (int by order; str by refund); "
            "narrow the list to one saga type")):
        check_filter(parse_filter("amount > 1"), both)
    assert check_filter(parse_filter("customer_id = 'c'"), both)


def test_checking_resolves_builtins_aliases_and_times() -> None:
    tree = _check("TYPE = 'order' and Status = 'dead' and due >= '2026-05-01' "
                  "and not tags in ('a', 'b')")
    assert tree == CheckedAnd((
        CheckedCompare("saga_type", "str", True, "=", "order"),
        CheckedCompare("status", "str", True, "=", "dead"),
        CheckedCompare("due", "datetime", False, ">=", datetime(2026, 5, 1, tzinfo=UTC)),
        CheckedNot(CheckedCompare("tags", "keywords", False, "in", ("a", "b")))))


INJECTIONS = [
    "'; DROP TABLE sagas; --",
    "x' OR '1'='1",
    "$1",
    "{x} {}",
    "\\' OR true --",
    "a\") OR (1=1",
]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_text_never_reaches_the_sql_only_its_parameters(payload: str) -> None:
    quoted = "'" + payload.replace("\\", "\\\\").replace("'", "\\'") + "'"
    compiled = filter_sql(_check(f"customer_id = {quoted} or customer_id in ({quoted}, 'b')"))
    assert compiled.args == ["customer_id", payload, "customer_id", [payload, "b"]]
    assert payload not in compiled.sql and "DROP" not in compiled.sql
    # The SQL is made of fixed fragments and {n} markers, one per parameter.
    assert set(re.findall(r"\{(\d+)\}", compiled.sql)) == {str(i) for i in
                                                           range(len(compiled.args))}


@pytest.mark.parametrize("text", [
    "customer_id = 'a'; DROP TABLE sagas", "customer_id = 'a' -- comment",
    "customer_id = 'a' /* x */", "customer_id = 0x10", "customer_id = 'a' || 'b'",
    "amount > (SELECT 1)", "pg_sleep(10) = 1", "customer_id = E'\\x41'",
])
def test_sql_in_the_filter_text_is_a_syntax_error(text: str) -> None:
    with pytest.raises(FilterError):
        _check(text)


def test_sql_of_each_kind_uses_the_column_of_its_kind() -> None:
    compiled = filter_sql(_check(
        "amount > 10 and vip = true and due < '2026-01-01T00:00:00Z' and tags != 'x' "
        "and customer_id >= 'c' and business_key = 'k' and version in (1, 2)"))
    sql = compiled.sql
    assert "a.num_value > {1}::numeric" in sql and "a.bool_value = {3}::boolean" in sql
    assert "a.time_value < {5}::timestamptz" in sql
    assert "AND NOT EXISTS" in sql and "a.text_value = ANY({7}::text[])" in sql
    assert "sagas.business_key IS NOT NULL AND sagas.business_key = " in sql
    assert "sagas.saga_version = ANY(" in sql
    held = filter_sql(_check("tags is null and business_key is not null")).sql
    assert held.startswith("(NOT EXISTS (SELECT 1 FROM saga_search_attributes a WHERE ")
    assert "(sagas.business_key IS NOT NULL)" in held


def test_python_evaluation_follows_the_documented_semantics() -> None:
    row = {"customer_id": "c-42", "amount": 1500, "tags": ["gift", "eu"], "vip": False,
           "status": "running", "saga_type": "order", "business_key": None}

    def ok(text: str) -> bool:
        return evaluate(_check(text), row)  # type: ignore[arg-type]

    assert ok("customer_id = 'c-42' and amount > 1000")
    assert not ok("customer_id = 'c-42' and amount > 2000")
    assert ok("tags = 'gift' and tags != 'vip' and tags in ('x', 'eu')")
    assert not ok("tags not in ('x', 'eu')")
    assert not ok("ratio = 0.5") and not ok("ratio != 0.5")  # unset: no comparison holds
    assert ok("not ratio = 0.5")
    assert not ok("business_key != 'k'") and ok("not business_key = 'k'")
    assert ok("ratio is null and amount is not null and business_key is null")
    assert not ok("ratio is not null") and not ok("tags is null")
    assert ok("status in ('running', 'dead') or vip = true")
    assert not ok("(status = 'dead' or vip = true) and amount > 0")
    assert isinstance(_check("a = 1 or b = 2".replace("a", "amount").replace("b", "ratio")),
                      CheckedOr)
