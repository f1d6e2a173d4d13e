"""Expressions of a saga definition: JMESPath over ``{"input", "results", "item", "index",
"caught"}`` (``caught``: in a catch's fallback, the failure it caught).

JMESPath rather than JSONata: it has a maintained pure-Python implementation (``jmespath``,
the one the AWS SDKs use), a written specification with a compliance suite shared by every
implementation, and no evaluation of code: an expression can only select, filter, project
and call a fixed set of functions. So a definition written by a team that does not use Python
runs no Python of theirs, and the same expression means the same thing in their tools.

JMESPath has no time limit of its own, so every bound here is on work, never on the clock
(a clock would make a replay decide differently from the first run):

* the text: at most :data:`MAX_EXPRESSION_CHARS` characters, parsed once at load time into at
  most :data:`MAX_AST_NODES` nodes nested at most :data:`MAX_AST_DEPTH` deep (an unparsable
  expression is a load error, with its path);
* the work of one evaluation: a budget of :data:`EVALUATION_BUDGET` units; each node visited
  costs one, each list or object it builds costs its length, and each comparison and function
  call costs the size of its operands (counted up to what is left of the budget). Multi-selects
  can double a value's size with every few characters, so sizes are counted, not assumed;
* the result: it is counted the same way, so a payload cannot outgrow the budget either.

An expression that fails when it runs (over budget, a function given the wrong type, a payload
that is not an object) raises :class:`ExpressionFailed`, whose message names the expression; the
engine puts that message in the failed node's reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Literal

import jmespath
from jmespath import exceptions as jmespath_errors
from jmespath import functions, visitor
from pydantic import BaseModel, TypeAdapter, ValidationError

from coordinator.language.steps import StepContext

__all__ = [
    "EVALUATION_BUDGET",
    "MAX_AST_NODES",
    "MAX_EXPRESSION_CHARS",
    "Expression",
    "ExpressionFailed",
    "Returns",
    "compile_expression",
    "expression_of",
]

MAX_EXPRESSION_CHARS: Final = 2_000
MAX_AST_NODES: Final = 400
#: Deepest nesting of an expression's parts (the interpreter recurses once per level).
MAX_AST_DEPTH: Final = 50
EVALUATION_BUDGET: Final = 200_000

#: What an expression must return where it is used.
Returns = Literal["object", "bool", "list", "text", "names", "duration", "datetime", "any"]

_DURATION: Final = TypeAdapter(timedelta)
_DATETIME: Final = TypeAdapter(datetime)


class ExpressionFailed(ValueError):
    """An expression did not give a usable value at run time; the message names it."""


class _OverBudget(Exception):
    pass


#: Longest list ``repeat`` builds.
MAX_REPEAT: Final = 10_000


class _Functions(functions.Functions):
    """JMESPath's functions and one extension, ``repeat(value, count)``: a list of ``count``
    copies (a command that lists one entry per unit, such as a shipment's items)."""

    @functions.signature({"types": []}, {"types": ["number"]})
    def _func_repeat(self, value: Any, count: float) -> list[Any]:
        if not 0 <= count <= MAX_REPEAT or count != int(count):
            raise jmespath_errors.JMESPathError(
                f"repeat() count must be a whole number from 0 to {MAX_REPEAT}, got {count}")
        return [value] * int(count)


_FUNCTIONS: Final = _Functions()


class _BudgetedInterpreter(visitor.TreeInterpreter):
    """JMESPath's interpreter, charging every step of work to a budget."""

    def __init__(self, budget: int) -> None:
        super().__init__(jmespath.Options(custom_functions=_FUNCTIONS))
        self.left = budget

    def charge(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            raise _OverBudget

    def charge_size(self, value: Any) -> None:
        stack = [value]
        while stack:
            item = stack.pop()
            self.charge(1)
            if isinstance(item, Mapping):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, str):
                self.charge(len(item) // 64)

    def visit(self, node: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        self.charge(1)
        result = super().visit(node, *args, **kwargs)
        if isinstance(result, list | dict):
            self.charge(len(result))
        return result

    def visit_comparator(self, node: dict[str, Any], value: Any) -> Any:
        left, right = (_whole(self.visit(child, value)) for child in node["children"])
        self.charge_size(left)
        self.charge_size(right)
        compare = self.COMPARATOR_FUNC[node["value"]]
        if node["value"] in self._EQUALITY_OPS:
            return compare(left, right)
        return compare(left, right) if visitor._is_comparable(left) and \
            visitor._is_comparable(right) else None

    def visit_function_expression(self, node: dict[str, Any], value: Any) -> Any:
        args = [_whole(self.visit(child, value)) for child in node["children"]]
        for arg in args:
            if not isinstance(arg, visitor._Expression):
                self.charge_size(arg)
        return self._functions.call_function(node["value"], args)


def _ast_shape(node: Any) -> tuple[int, int]:
    """How many parts a parsed expression has, and how deep they nest."""
    if not isinstance(node, dict):
        return 0, 0
    shapes = [_ast_shape(c) for c in node.get("children", ())]
    return 1 + sum(s for s, _ in shapes), 1 + max((d for _, d in shapes), default=0)


@dataclass(frozen=True)
class Expression:
    """A parsed expression, callable as a mapper or guard of the saga language.

    ``returns`` says what the place it is used in needs; a value of another shape fails the
    node with the expression in the reason."""

    source: str
    returns: Returns = "any"
    _parsed: Any = field(default=None, repr=False, compare=False)

    def __call__(self, ctx: StepContext[Any]) -> Any:
        data = {"input": _plain(ctx.input), "results": _Results(ctx.results),
                "item": ctx.item, "index": ctx.index, "updates": dict(ctx.updates),
                "caught": dict(ctx.caught) if ctx.caught is not None else None}
        return self.evaluate(data)

    def evaluate(self, data: Mapping[str, Any]) -> Any:
        """The value of the expression over ``data``, of the shape ``returns`` asks for."""
        interpreter = _BudgetedInterpreter(EVALUATION_BUDGET)
        try:
            value = _whole(interpreter.visit(self._parsed.parsed, dict(data)))
            interpreter.charge_size(value)
        except _OverBudget:
            raise self._failed(f"more than {EVALUATION_BUDGET} units of work") from None
        except RecursionError:  # a deep value compared or converted by a function
            raise self._failed("met a value nested too deeply") from None
        except jmespath_errors.JMESPathError as exc:
            raise self._failed("failed: " + str(exc).replace("\n", " ")) from None
        return self._shaped(value)

    def _shaped(self, value: Any) -> Any:
        kind = self.returns
        if kind == "bool":
            return not (value is None or value is False or value in ("", [], {}))
        if kind == "object" and not isinstance(value, dict):
            raise self._failed(f"gave {_kind(value)}, not an object")
        if kind == "list" and not isinstance(value, list):
            raise self._failed(f"gave {_kind(value)}, not a list")
        if kind == "text":
            return value if isinstance(value, str) else ("" if value is None else str(value))
        if kind == "names":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self._failed(f"gave {_kind(value)}, not a list of names")
            return tuple(value)
        if kind in ("duration", "datetime"):
            adapter = _DURATION if kind == "duration" else _DATETIME
            try:
                return adapter.validate_python(value)
            except ValidationError:
                raise self._failed(f"gave {value!r}, not a {kind}") from None
        return value

    def _failed(self, why: str) -> ExpressionFailed:
        return ExpressionFailed(f"expression {self.source!r} {why}")


def compile_expression(source: Any, returns: Returns = "any") -> Expression:
    """Parse ``source`` within the limits; raise ``ValueError`` saying what is wrong."""
    if not isinstance(source, str) or not source.strip():
        raise ValueError("an expression must be a non-empty string")
    if len(source) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression is {len(source)} characters long, more than "
                         f"{MAX_EXPRESSION_CHARS}")
    try:
        parsed = jmespath.compile(source)
    except jmespath_errors.JMESPathError as exc:
        message = str(exc).splitlines()[0]
        raise ValueError(f"not a JMESPath expression: {message}") from None
    except (RecursionError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"not a JMESPath expression: {type(exc).__name__}") from None
    size, depth = _ast_shape(parsed.parsed)
    if size > MAX_AST_NODES:
        raise ValueError(f"expression has more than {MAX_AST_NODES} parts")
    if depth > MAX_AST_DEPTH:
        raise ValueError(f"expression nests deeper than {MAX_AST_DEPTH} levels")
    return Expression(source, returns, parsed)


def expression_of(value: Any) -> str | None:
    """The source of a mapper that is an :class:`Expression` (or wraps one, as a loaded
    definition's query does), else ``None``."""
    inner = getattr(value, "expression", value)
    return inner.source if isinstance(inner, Expression) else None


class _Results(dict[str, Any]):
    """The results so far, as JMESPath sees them. ``results.name`` looks one result up (a
    for-each item's own steps by their bare names, as the engine's mapping does); only an
    expression that lists them all (``results.*``, ``keys(results)``) reads every one, so a
    payload of item 9,000 of a for-each does not read the other 8,999 results."""

    def __init__(self, results: Mapping[str, Any]) -> None:
        super().__init__()
        self._lookup = results
        self._filled = False

    def _fill(self) -> None:
        if not self._filled:
            self._filled = True
            super().update({key: _plain(self._lookup[key]) for key in self._lookup})

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return _plain(self._lookup[key])
        except (KeyError, TypeError):
            return default

    def keys(self) -> Any:
        self._fill()
        return super().keys()

    def values(self) -> Any:
        self._fill()
        return super().values()

    def items(self) -> Any:
        self._fill()
        return super().items()

    def __iter__(self) -> Any:
        self._fill()
        return super().__iter__()

    def __len__(self) -> int:
        self._fill()
        return super().__len__()


def _whole(value: Any) -> Any:
    """Every result read, where a value is compared, passed to a function or returned."""
    return dict(value.items()) if isinstance(value, _Results) else value


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")
