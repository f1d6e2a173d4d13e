"""A definition built into a real :class:`~coordinator.language.saga.Saga` subclass.

The class is made of the language's own nodes (``TccStep``, ``ForEach``, ...), with
:class:`~coordinator.definitions.expressions.Expression` objects where a class has mappers,
so it is validated by the same checks, compiles to the same tree and runs on the same engine
as a written class. Every problem is collected, with its path in the file, before anything
is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, RootModel

from coordinator.definitions import format as fmt
from coordinator.definitions.errors import InvalidDefinition, Problem
from coordinator.definitions.expressions import Expression, Returns, compile_expression
from coordinator.definitions.schemas import JsonSchema, model_from_schema
from coordinator.definitions.search import build_search
from coordinator.definitions.updates import build_updates
from coordinator.language import nodes as flow
from coordinator.language.flow_nodes import Catch, Loop
from coordinator.language.steps import DefinitionError, SagaStep, TccStep
from coordinator.language.tasks import Escalation, HumanTask

if TYPE_CHECKING:
    from coordinator.sagas.queries import QueryContext

__all__ = ["QueryAnswer", "QueryExpression", "build_saga_class"]


class QueryAnswer(RootModel[Any]):
    """A declared query's answer: whatever JSON its expression gives."""


class QueryExpression:
    """A query of a loaded definition: an expression over ``{status, input, results}``."""

    def __init__(self, expression: Expression) -> None:
        self.expression = expression
        #: What ``typing.get_type_hints`` reads (the compatibility check of query results).
        self.__annotations__ = {"return": QueryAnswer}

    def __call__(self, q: QueryContext[Any]) -> QueryAnswer:
        return QueryAnswer(self.expression.evaluate(
            {"status": q.status, "input": q.input.model_dump(mode="json"),
             "results": dict(q.results)}))


class _Builder:
    def __init__(self, definition: fmt.Definition) -> None:
        self.definition = definition
        self.problems: list[Problem] = []
        self.models: dict[str, type[BaseModel]] = {}

    def expr(self, source: str | None, returns: Returns, path: str) -> Expression | None:
        if source is None:
            return None
        try:
            return compile_expression(source, returns)
        except ValueError as exc:
            self.problems.append(Problem(path, str(exc)))
            return None

    def model(self, schema: JsonSchema, name: str, path: str) -> type[BaseModel] | None:
        key = schema.model_dump_json(exclude_unset=True)
        if key not in self.models:
            try:
                self.models[key] = model_from_schema(schema, name)
            except Exception as exc:  # pydantic's own schema errors too: data, not a crash
                self.problems.append(Problem(path, str(exc).splitlines()[0]))
                return None
        return self.models[key]

    def value(self, raw: Any, returns: Returns, path: str) -> Any:
        """A fixed value as is, or ``{"expr": ...}`` as an expression."""
        return self.expr(raw.expr, returns, f"{path}.expr") if isinstance(raw, fmt.Expr) else raw

    def branch(self, nodes: list[Any], path: str) -> tuple[Any, ...]:
        return tuple(self.node(n, f"{path}[{i}]") for i, n in enumerate(nodes))

    def node(self, n: Any, at: str) -> Any:
        build: Callable[[Any, str], Any] = getattr(self, f"_{n.kind}")
        built = build(n, at)
        if isinstance(n, fmt.Timed) and n.timeout is not None:  # a node's own timeout
            built = replace(built, timeout=n.timeout, on_timeout=n.on_timeout)
        return built

    def _step_kwargs(self, n: fmt.TccStepDef | fmt.SagaStepDef, at: str) -> dict[str, Any]:
        out = _set(description=n.description, retry=n.retry, deadline=n.deadline,
                   rollback_deadline=n.rollback_deadline)
        return out | _set(payload=self.expr(n.payload, "object", f"{at}.payload"),
                          when=self.expr(n.when, "bool", f"{at}.when"))

    def _tcc(self, n: fmt.TccStepDef, at: str) -> TccStep:
        return TccStep(n.name, n.participant, n.action, **self._step_kwargs(n, at), **_set(
            confirm_retry=n.confirm_retry, cancel_retry=n.cancel_retry,
            finish_payload=self.expr(n.finish_payload, "object", f"{at}.finish_payload")))

    def _saga(self, n: fmt.SagaStepDef, at: str) -> SagaStep:
        return SagaStep(n.name, n.participant, n.action, compensable=n.compensable,
                        **self._step_kwargs(n, at), **_set(
                            compensation_retry=n.compensation_retry,
                            compensation_payload=self.expr(n.compensation_payload, "object",
                                                           f"{at}.compensation_payload")))

    def _sequence(self, n: fmt.SequenceDef, at: str) -> flow.Sequence:
        return flow.Sequence(n.name, self.branch(n.steps, f"{at}.steps"),
                             description=n.description)

    def _parallel(self, n: fmt.ParallelDef, at: str) -> flow.Parallel:
        return flow.Parallel(n.name, tuple(self.branch(b, f"{at}.branches[{i}]")
                                           for i, b in enumerate(n.branches)),
                             description=n.description)

    def _race(self, n: fmt.RaceDef, at: str) -> flow.Race:
        return flow.Race(n.name, tuple(self.branch(b, f"{at}.branches[{i}]")
                                       for i, b in enumerate(n.branches)),
                         quorum=n.quorum, verdicts=n.verdicts, description=n.description)

    def _foreach(self, n: fmt.ForEachDef, at: str) -> flow.ForEach:
        items = self.expr(n.items, "list", f"{at}.items")
        return flow.ForEach(n.name, items=items or _never, body=self.branch(n.body, f"{at}.body"),
                            max_concurrency=n.max_concurrency, max_items=n.max_items,
                            description=n.description)

    def _choice(self, n: fmt.ChoiceDef, at: str) -> flow.Choice:
        pairs = tuple(
            (self.expr(b.when, "bool", f"{at}.branches[{i}].when") or _never,
             self.branch(b.steps, f"{at}.branches[{i}].steps"))
            for i, b in enumerate(n.branches))
        otherwise = None if n.otherwise is None else self.branch(n.otherwise, f"{at}.otherwise")
        return flow.Choice(n.name, pairs, otherwise=otherwise, description=n.description)

    def _patched(self, n: fmt.PatchedDef, at: str) -> flow.Patched:
        old = None if n.old is None else self.branch(n.old, f"{at}.old")
        return flow.Patched(n.change, self.branch(n.new, f"{at}.new"), old,
                            name=n.name or "", description=n.description)

    def _child(self, n: fmt.ChildDef, at: str) -> flow.ChildSaga:
        return flow.ChildSaga(n.name, n.saga, version=n.version, description=n.description,
                              **_set(input=self.expr(n.input, "object", f"{at}.input"),
                                     when=self.expr(n.when, "bool", f"{at}.when"),
                                     deadline=n.deadline, finish_retry=n.finish_retry))

    def _catch(self, n: fmt.CatchDef, at: str) -> Catch:
        return Catch(n.name, self.branch(n.body, f"{at}.body"),
                     self.branch(n.fallback, f"{at}.fallback"),
                     failures=n.failures if isinstance(n.failures, str)
                     else tuple(n.failures), undo=n.undo,
                     description=n.description)

    def _loop(self, n: fmt.LoopDef, at: str) -> Loop:
        return Loop(n.name, self.branch(n.body, f"{at}.body"),
                    until=self.expr(n.until, "bool", f"{at}.until") or _never,
                    max_iterations=n.max_iterations, description=n.description)

    def _sleep(self, n: fmt.SleepDef, at: str) -> flow.Sleep:
        duration = self.value(n.duration, "duration", f"{at}.duration")
        return flow.Sleep(n.name, duration or timedelta(0), description=n.description)

    def _sleep_until(self, n: fmt.SleepUntilDef, at: str) -> flow.SleepUntil:
        until = self.value(n.until, "datetime", f"{at}.until")
        return flow.SleepUntil(n.name, until or _never, description=n.description)

    def _wait(self, n: fmt.WaitDef, at: str) -> flow.WaitForSignal:
        payload = None if n.payload is None else self.model(
            n.payload, f"{_camel(n.signal)}Signal", f"{at}.payload")
        return flow.WaitForSignal(n.name, n.signal, payload=payload, timeout=n.timeout,
                                  on_timeout=n.on_timeout, description=n.description)

    def _task(self, n: fmt.TaskDef, at: str) -> HumanTask:
        form = None if n.form is None else self.model(n.form, f"{_camel(n.name)}Form",
                                                      f"{at}.form")
        on_timeout: Any = n.on_timeout
        if isinstance(on_timeout, dict) and form is not None:
            try:
                on_timeout = form.model_validate(on_timeout)
            except ValueError as exc:
                self.problems.append(Problem(f"{at}.on_timeout", str(exc)))
        elif isinstance(on_timeout, dict):
            self.problems.append(Problem(f"{at}.on_timeout", "a default decision needs a form"))
        return HumanTask(
            n.name, title=self.value(n.title, "text", f"{at}.title") or "?",
            description=self.value(n.description, "text", f"{at}.description") or "",
            users=_people(self.value(n.users, "names", f"{at}.users")),
            groups=_people(self.value(n.groups, "names", f"{at}.groups")),
            due=self.value(n.due, "duration", f"{at}.due"), outcome_field=n.outcome_field,
            reject=tuple(n.reject), priority=n.priority, calendar=n.calendar,
            timezone=n.timezone, remind_after=n.remind_after, remind_every=n.remind_every,
            max_reminders=n.max_reminders, timeout=n.timeout, on_timeout=on_timeout,
            four_eyes=n.four_eyes, chain=n.chain,
            escalations=tuple(Escalation(e.after, to_users=tuple(e.to_users),
                                         to_groups=tuple(e.to_groups), replace=e.replace,
                                         priority=e.priority) for e in n.escalations),
            **_set(form=form))


def build_saga_class(definition: fmt.Definition, source: str = "definition") -> type[Any]:
    """The saga class of ``definition``; :class:`InvalidDefinition` lists every problem."""
    from coordinator.language.saga import Saga

    b = _Builder(definition)
    cls_name = class_name(definition.name)
    input_model = b.model(definition.input, f"{cls_name}Input", "input")
    steps = b.branch(definition.steps, "steps")
    queries = {}
    for qname, text in definition.queries.items():
        expression = b.expr(text, "any", f"queries.{qname}")
        if expression is not None:
            queries[qname] = QueryExpression(expression)
    updates = build_updates(definition.updates, b.model, b.problems, cls_name)
    search = build_search(definition, b.problems)
    if b.problems:
        raise InvalidDefinition(b.problems, source)
    namespace: dict[str, Any] = {"search": search,
        "name": definition.name, "version": definition.version, "input_model": input_model,
        "steps": steps, "description": definition.description, "queries": queries,
        "updates": updates, "__doc__": definition.description or None, "__module__": __name__,
        "__qualname__": cls_name, "definition": definition,
        **_set(timeout=definition.timeout), "on_timeout": definition.on_timeout}
    try:
        return type(cls_name, (Saga,), namespace)
    except DefinitionError as exc:
        raise InvalidDefinition(_class_problems(str(exc), cls_name), source) from None


def _class_problems(message: str, cls_name: str) -> list[Problem]:
    """The class validation's lines (``Cls.node: what``) as problems at their node."""
    out = []
    for line in message.splitlines()[1:] or [message]:
        where, _, what = line.strip().partition(": ")
        node = where.removeprefix(cls_name).lstrip(".")
        out.append(Problem(f"node {node}" if node else "", what or line.strip()))
    return out


def class_name(saga_name: str) -> str:
    """``order_fulfilment`` -> ``OrderFulfilmentSaga`` (as the pattern library names them)."""
    return _camel(saga_name) + "Saga"


def _camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.replace("-", "_").split("_"))


def _set(**values: Any) -> dict[str, Any]:
    """The keyword arguments that were given, so the language's defaults apply to the rest."""
    return {k: v for k, v in values.items() if v is not None}


def _people(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else (value or ())


def _never(ctx: Any) -> Any:
    raise AssertionError("a definition with problems is never built")
