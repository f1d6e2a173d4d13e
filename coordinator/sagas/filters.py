"""The saga filter language: parsed by hand into a small tree, never pasted into SQL.

::

    customer_id = 'c-42' and (amount >= 1000 or vip = true) and status in ('running', 'dead')
    not carrier = 'ups' and created_at > '2026-01-01T00:00:00Z' and tags = 'gift'

Grammar (words are case-insensitive)::

    filter     := or EOF
    or         := and ("or" and)*
    and        := unary ("and" unary)*
    unary      := "not" unary | "(" or ")" | comparison
    comparison := NAME OP literal | NAME ["not"] "in" "(" literal ("," literal)* ")"
                | NAME "is" ["not"] "null"
    OP         := "=" | "!=" | "<>" | "<" | "<=" | ">" | ">="
    literal    := 'text' | "text" | number | true | false

A text literal escapes its quote and backslash with a backslash. Times are text literals in
ISO 8601 (``'2026-05-01'``, ``'2026-05-01T12:00:00+02:00'``; no zone: UTC). Every error names
its column (1-based) in the filter text. :mod:`coordinator.sagas.filter_check` type-checks a
parsed filter against the declared attributes and evaluates it in Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "MAX_FILTER_CHARS",
    "And",
    "Compare",
    "FilterError",
    "InList",
    "IsNull",
    "Node",
    "Not",
    "Or",
    "parse_filter",
]

#: Longest filter text.
MAX_FILTER_CHARS: Final = 2000
#: Most comparisons in one filter, values in one ``in`` list, and nesting levels.
MAX_COMPARISONS: Final = 50
MAX_IN_VALUES: Final = 100
MAX_NESTING: Final = 20
#: Comparison operators (``<>`` is read as ``!=``).
OPERATORS: Final = ("=", "!=", "<", "<=", ">", ">=")
_WORDS: Final = frozenset({"and", "or", "not", "in", "true", "false", "is", "null"})


class FilterError(ValueError):
    """A filter that cannot be parsed or does not fit the declared attributes."""

    def __init__(self, message: str, position: int) -> None:
        self.position = position
        self.column = position + 1
        self.reason = message
        super().__init__(f"column {self.column}: {message}")


@dataclass(frozen=True)
class Compare:
    field: str
    op: str
    value: Any
    #: Where the field's name starts, and where the value starts, in the filter text.
    pos: int
    value_pos: int


@dataclass(frozen=True)
class InList:
    field: str
    values: tuple[Any, ...]
    negated: bool
    pos: int
    value_pos: tuple[int, ...]


@dataclass(frozen=True)
class IsNull:
    """``field is null`` (no value), or with ``negated`` ``field is not null``."""

    field: str
    negated: bool
    pos: int


@dataclass(frozen=True)
class And:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    part: Node


Node = Compare | InList | IsNull | And | Or | Not


@dataclass(frozen=True)
class _Token:
    kind: str  # name, word, text, number, op, "(", ")", ",", end
    value: Any
    pos: int


_SPACE = re.compile(r"\s+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_OP = re.compile(r"!=|<>|<=|>=|=|<|>")


def _text(source: str, start: int) -> tuple[str, int]:
    """The text literal starting at ``start`` (its quote) and the position after it."""
    quote, out, i = source[start], [], start + 1
    while i < len(source):
        char = source[i]
        if char == "\\":
            if i + 1 >= len(source) or source[i + 1] not in (quote, "\\"):
                raise FilterError(f"a backslash in text escapes only {quote} or \\", i)
            out.append(source[i + 1])
            i += 2
            continue
        if char == quote:
            return "".join(out), i + 1
        if char == "\x00":
            raise FilterError("text may not hold a NUL character", i)
        out.append(char)
        i += 1
    raise FilterError(f"text started here has no closing {quote}", start)


def _tokens(source: str) -> list[_Token]:
    out: list[_Token] = []
    i = 0
    while i < len(source):
        if m := _SPACE.match(source, i):
            i = m.end()
            continue
        char = source[i]
        if char in "'\"":
            value, end = _text(source, i)
            out.append(_Token("text", value, i))
            i = end
        elif char in "(),":
            out.append(_Token(char, char, i))
            i += 1
        elif m := _NUMBER.match(source, i):
            raw = m.group()
            if (m.end() < len(source) and (source[m.end()].isalnum() or source[m.end()] == "_")):
                raise FilterError(f"{raw + source[m.end()]!r}... is not a number", i)
            number: Any = float(raw) if any(c in raw for c in ".eE") else int(raw)
            if isinstance(number, float) and number in (float("inf"), float("-inf")):
                raise FilterError(f"{raw} is too large a number", i)
            if isinstance(number, int) and abs(number) >= 10**18:
                raise FilterError(f"{raw} is too large a whole number (|n| < 10^18)", i)
            out.append(_Token("number", number, i))
            i = m.end()
        elif m := _NAME.match(source, i):
            word = m.group()
            if word.lower() in _WORDS:
                out.append(_Token("word", word.lower(), i))
            else:
                out.append(_Token("name", word, i))
            i = m.end()
        elif m := _OP.match(source, i):
            op = m.group()
            out.append(_Token("op", "!=" if op == "<>" else op, i))
            i = m.end()
        else:
            raise FilterError(f"unexpected character {char!r}", i)
    out.append(_Token("end", None, len(source)))
    return out


def _shown(token: _Token) -> str:
    if token.kind == "end":
        return "the end of the filter"
    if token.kind == "text":
        return f"text {token.value!r}"
    return repr(str(token.value))


class _Parser:
    def __init__(self, source: str) -> None:
        self.tokens = _tokens(source)
        self.at = 0
        self.comparisons = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def is_word(self, word: str) -> bool:
        return self.token.kind == "word" and self.token.value == word

    def expect(self, kind: str, what: str) -> _Token:
        if self.token.kind != kind:
            raise FilterError(f"expected {what}, found {_shown(self.token)}", self.token.pos)
        return self.take()

    def parse(self) -> Node:
        node = self.disjunction(0)
        if self.token.kind != "end":
            hint = ("; join conditions with 'and' or 'or'"
                    if self.token.kind in ("name", "word", "(") else "")
            raise FilterError(f"unexpected {_shown(self.token)}{hint}", self.token.pos)
        return node

    def disjunction(self, depth: int) -> Node:
        parts = [self.conjunction(depth)]
        while self.is_word("or"):
            self.take()
            parts.append(self.conjunction(depth))
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def conjunction(self, depth: int) -> Node:
        parts = [self.unary(depth)]
        while self.is_word("and"):
            self.take()
            parts.append(self.unary(depth))
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def unary(self, depth: int) -> Node:
        if depth > MAX_NESTING:
            raise FilterError(f"nests deeper than {MAX_NESTING} levels", self.token.pos)
        if self.is_word("not"):
            self.take()
            return Not(self.unary(depth + 1))
        if self.token.kind == "(":
            self.take()
            node = self.disjunction(depth + 1)
            self.expect(")", "')' to close the '('")
            return node
        return self.comparison()

    def comparison(self) -> Node:
        if self.token.kind == "word" and self.token.value in ("true", "false", "in", "is",
                                                               "null"):
            raise FilterError(f"expected a field name, found {_shown(self.token)}",
                              self.token.pos)
        name = self.expect("name", "a field name (or 'not', or '(')")
        self.comparisons += 1
        if self.comparisons > MAX_COMPARISONS:
            raise FilterError(f"more than {MAX_COMPARISONS} comparisons", name.pos)
        if self.is_word("is"):
            self.take()
            negated = self.is_word("not")
            if negated:
                self.take()
            if not self.is_word("null"):
                raise FilterError(f"expected 'null' or 'not null' after '{name.value} is', "
                                  f"found {_shown(self.token)}", self.token.pos)
            self.take()
            return IsNull(name.value, negated, name.pos)
        negated = False
        if self.is_word("not"):
            self.take()
            negated = True
            if not self.is_word("in"):
                raise FilterError(f"expected 'in' after '{name.value} not', found "
                                  f"{_shown(self.token)}", self.token.pos)
        if self.is_word("in"):
            self.take()
            self.expect("(", "'(' to open the list after 'in'")
            values, positions = [self.literal()], []
            positions.append(self.tokens[self.at - 1].pos)
            while self.token.kind == ",":
                self.take()
                values.append(self.literal())
                positions.append(self.tokens[self.at - 1].pos)
                if len(values) > MAX_IN_VALUES:
                    raise FilterError(f"an 'in' list holds at most {MAX_IN_VALUES} values",
                                      positions[-1])
            self.expect(")", "',' or ')' to close the list")
            return InList(name.value, tuple(values), negated, name.pos, tuple(positions))
        op = self.expect("op", f"an operator ({', '.join(OPERATORS)}) or 'in' after "
                               f"{name.value!r}")
        value = self.literal()
        return Compare(name.value, op.value, value, name.pos, self.tokens[self.at - 1].pos)

    def literal(self) -> Any:
        token = self.token
        if token.kind in ("text", "number"):
            return self.take().value
        if token.kind == "word" and token.value in ("true", "false"):
            self.take()
            return token.value == "true"
        hint = (f" (a text value is quoted: '{token.value}')" if token.kind == "name" else "")
        raise FilterError(f"expected a value (a quoted text, a number, true or false), found "
                          f"{_shown(token)}{hint}", token.pos)


def parse_filter(source: str) -> Node:
    """The tree of ``source``; :class:`FilterError` (with the column) if it is not a filter."""
    if not isinstance(source, str):
        raise FilterError("a filter is text", 0)
    if len(source) > MAX_FILTER_CHARS:
        raise FilterError(f"the filter is {len(source)} characters long, more than "
                          f"{MAX_FILTER_CHARS}", MAX_FILTER_CHARS)
    if not source.strip():
        raise FilterError("the filter is empty", 0)
    return _Parser(source).parse()
