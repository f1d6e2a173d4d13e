"""Search attributes of a definition: JMESPath expressions over ``{"input", "results"}``
built into the language's :class:`SearchAttribute`, and exported back from a class."""

from __future__ import annotations

from typing import Any

from coordinator.definitions import format as fmt
from coordinator.definitions.errors import Problem
from coordinator.definitions.expressions import Expression, compile_expression, expression_of
from coordinator.language.search_attributes import (
    SearchAttribute,
    SearchContext,
    declared_attributes,
)

__all__ = ["SearchExpression", "build_search", "export_search"]


class SearchExpression:
    """An attribute's function in a loaded definition: its expression over the input and
    the results (``null``: unset)."""

    def __init__(self, expression: Expression) -> None:
        self.expression = expression

    def __call__(self, ctx: SearchContext) -> Any:
        data = ctx.input.model_dump(mode="json") if hasattr(ctx.input, "model_dump") \
            else ctx.input
        return self.expression.evaluate({"input": data, "results": dict(ctx.results)})


def build_search(definition: fmt.Definition, problems: list[Problem]
                 ) -> tuple[SearchAttribute, ...]:
    """The definition's attributes; a bad expression is a problem at ``search[i].expr``."""
    out: list[SearchAttribute] = []
    for index, attr in enumerate(definition.search):
        try:
            expression = compile_expression(attr.expr)
        except ValueError as exc:
            problems.append(Problem(f"search[{index}].expr", str(exc)))
            continue
        out.append(SearchAttribute(attr.name, attr.type, SearchExpression(expression),
                                   attr.description))
    return tuple(out)


def export_search(cls: type[Any], problems: list[Problem],
                  expressions: dict[str, str] | Any) -> list[fmt.SearchAttributeDef]:
    """The class's attributes in the format; a Python function needs its expression given
    as ``expressions["search.<name>"]``."""
    out: list[fmt.SearchAttributeDef] = []
    for attr in declared_attributes(cls):
        key = f"search.{attr.name}"
        source = expression_of(attr.source) or expressions.get(key)
        if source is None:
            problems.append(Problem(key, "is a Python function: give its JMESPath "
                                         f"expression as expressions[{key!r}]"))
            continue
        out.append(fmt.SearchAttributeDef(name=attr.name, type=attr.kind, expr=source,
                                          description=attr.description))
    return out
