"""A definition's updates built into the language's :class:`Update` (and exported back):
the validator is a list of ``require``/``reason`` rules, the result an expression, both over
``{"input", "results", "updates", "status", "payload", "now"}`` (see ``update_format``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from coordinator.definitions.errors import Problem
from coordinator.definitions.expressions import Expression, compile_expression, expression_of
from coordinator.definitions.schemas import JsonSchema
from coordinator.definitions.update_format import UpdateDef, UpdateRuleDef
from coordinator.language.updates import Update, UpdateContext

__all__ = ["ApplyExpression", "UpdateRules", "build_updates", "export_updates"]


def _data(ctx: UpdateContext[Any], payload: Any) -> dict[str, Any]:
    return {"input": ctx.input.model_dump(mode="json"), "results": dict(ctx.results),
            "updates": dict(ctx.updates), "status": ctx.status, "now": ctx.now.isoformat(),
            "payload": payload.model_dump(mode="json") if isinstance(payload, BaseModel)
            else payload}


class UpdateRules:
    """A loaded definition's validator: the first rule whose ``require`` is false rejects."""

    def __init__(self, rules: list[tuple[Expression, str]]) -> None:
        self.rules = rules

    def __call__(self, ctx: UpdateContext[Any], payload: Any) -> str | None:
        data = _data(ctx, payload)
        for require, reason in self.rules:
            if not require.evaluate(data):
                return reason
        return None


class ApplyExpression:
    """A loaded definition's update handler: its result is the expression's object."""

    def __init__(self, expression: Expression) -> None:
        self.expression = expression

    def __call__(self, ctx: UpdateContext[Any], payload: Any) -> Any:
        return self.expression.evaluate(_data(ctx, payload))


def build_updates(updates: Mapping[str, UpdateDef],
                  model: Callable[[JsonSchema, str, str], type[BaseModel] | None],
                  problems: list[Problem], cls_name: str) -> tuple[Update, ...]:
    """The :class:`Update` of each declared update; a bad expression is a problem at its
    path (``updates.<name>.validate[0].require``)."""
    out: list[Update] = []
    for name, u in updates.items():
        at = f"updates.{name}"
        rules: list[tuple[Expression, str]] = []
        for i, rule in enumerate(u.validate_):
            expr = _expr(rule.require, "bool", f"{at}.validate[{i}].require", problems)
            if expr is not None:
                rules.append((expr, rule.reason))
        apply = _expr(u.apply, "object", f"{at}.apply", problems)
        payload = model(u.payload, f"{cls_name}{_camel(name)}Update", f"{at}.payload") \
            if u.payload is not None else None
        out.append(Update(name, model=payload, validate=UpdateRules(rules) if rules else None,
                          apply=ApplyExpression(apply) if apply is not None else None,
                          signal=u.signal, description=u.description))
    return tuple(out)


def export_updates(updates: Any, schema: Callable[[Any, str], Any],
                   expressions: Mapping[str, str], problems: list[Problem]
                   ) -> dict[str, UpdateDef]:
    """The definition form of a class's updates: a loaded definition's as declared; a
    written class's ``apply`` from ``expressions["updates.<name>.apply"]``, and a Python
    validator cannot be written as rules (a problem naming it)."""
    out: dict[str, UpdateDef] = {}
    for u in updates or ():
        at = f"updates.{u.name}"
        fields: dict[str, Any] = {}
        if u.description:
            fields["description"] = u.description
        if u.model is not None:
            fields["payload"] = schema(u.model, f"{at}.payload")
        if isinstance(u.validate, UpdateRules):
            fields["validate_"] = [UpdateRuleDef(require=e.source, reason=r)
                                   for e, r in u.validate.rules]
        elif u.validate is not None:
            problems.append(Problem(f"{at}.validate", "a Python validator cannot be written "
                                                      "as the format's require/reason rules"))
        if u.apply is not None:
            source = expression_of(u.apply) or expressions.get(f"{at}.apply")
            if source is None:
                problems.append(Problem(f"{at}.apply", "a Python function: give its JMESPath "
                                                       f"expression as {at}.apply"))
            fields["apply"] = source
        if u.signal is not None:
            fields["signal"] = u.signal
        out[u.name] = UpdateDef(**fields)
    return out


def _expr(source: str | None, returns: Any, path: str, problems: list[Problem]
          ) -> Expression | None:
    if source is None:
        return None
    try:
        return compile_expression(source, returns)
    except ValueError as exc:
        problems.append(Problem(path, str(exc)))
        return None


def _camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.replace("-", "_").split("_"))
