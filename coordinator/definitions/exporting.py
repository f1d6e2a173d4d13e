"""A saga class written as a definition: ``export(cls)`` and its text forms.

A class loaded from a definition exports as it was declared. A written class has Python
functions where a definition has expressions; they cannot be read back into JMESPath, so
``export`` needs each one given in ``expressions``, keyed by node and field
(``{"reserve_funds.payload": "{customer: input.customer_id}"}``, ``"lines.items"``,
``"pick.branches[0].when"``, ``"queries.progress"``), and lists every one missing at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import yaml

from coordinator.definitions import format as fmt
from coordinator.definitions.errors import InvalidDefinition, Problem
from coordinator.definitions.expressions import expression_of
from coordinator.definitions.schemas import schema_from_model
from coordinator.definitions.search import export_search
from coordinator.definitions.updates import export_updates
from coordinator.language import nodes as flow
from coordinator.language.flow_nodes import Catch, Loop
from coordinator.language.policies import DEFAULT_DEADLINE, DEFAULT_RETRY, DEFAULT_ROLLBACK_RETRY
from coordinator.language.steps import SagaStep, TccStep, resolve_policy
from coordinator.language.tasks import Approval, HumanTask

__all__ = ["export", "plain_definition", "to_json", "to_yaml"]


class _Exporter:
    def __init__(self, expressions: Mapping[str, str]) -> None:
        self.expressions = expressions
        self.problems: list[Problem] = []

    def expr(self, mapper: Any, key: str) -> str | None:
        if mapper is None:
            return None
        source = expression_of(mapper) or self.expressions.get(key)
        if source is None:
            self.problems.append(Problem(key, "is a Python function: give its JMESPath "
                                              f"expression as expressions[{key!r}]"))
            return "@"
        return source

    def value(self, value: Any, key: str) -> Any:
        if callable(value) and not isinstance(value, type):
            return fmt.Expr(expr=self.expr(value, key) or "@")
        return value

    def schema(self, model: Any, key: str) -> Any:
        try:
            return schema_from_model(model)
        except ValueError as exc:
            self.problems.append(Problem(key, f"{model.__name__} cannot be written as the "
                                              f"format's JSON Schema: {exc}"))
            return None

    def branch(self, nodes: Any) -> list[Any]:
        return [self.node(n) for n in flow.branch_nodes(nodes)]

    def node(self, n: Any) -> Any:
        if isinstance(n, TccStep | SagaStep):
            return self.step(n)
        if isinstance(n, HumanTask):
            return self.task(n)
        at, common = getattr(n, "name", ""), _given(description=n.description or None)
        if isinstance(n, _TIMED) and n.timeout is not None:
            common |= _given(timeout=n.timeout, on_timeout=_unless(n.on_timeout, "fail"))
        if isinstance(n, flow.Sequence):
            return fmt.SequenceDef(kind="sequence", name=at, steps=self.branch(n.steps), **common)
        if isinstance(n, flow.Parallel | flow.Race):
            branches = [self.branch(b) for b in n.branches]
            if isinstance(n, flow.Parallel):
                return fmt.ParallelDef(kind="parallel", name=at, branches=branches, **common)
            return fmt.RaceDef(kind="race", name=at, branches=branches,
                               **_given(quorum=n.quorum if n.quorum != 1 else None,
                                        verdicts=n.verdicts if n.verdicts != "decided"
                                        else None), **common)
        if isinstance(n, flow.ForEach):
            return fmt.ForEachDef(kind="foreach", name=at, items=self.expr(n.items, f"{at}.items"),
                                  body=self.branch(n.body), max_items=n.max_items,
                                  **_given(max_concurrency=n.max_concurrency), **common)
        if isinstance(n, flow.Choice):
            return fmt.ChoiceDef(
                kind="choice", name=at, **common,
                branches=[fmt.ChoiceBranchDef(when=self.expr(g, f"{at}.branches[{i}].when"),
                                              steps=self.branch(b))
                          for i, (g, b) in enumerate(n.branches)],
                **_given(otherwise=None if n.otherwise is None else self.branch(n.otherwise)))
        if isinstance(n, Catch):
            return fmt.CatchDef(kind="catch", name=at, body=self.branch(n.body),
                                fallback=self.branch(n.fallback),
                                failures=n.failures if isinstance(n.failures, str)
                                else list(n.failures or ()),
                                **_given(undo=_unless(n.undo, "first")), **common)
        if isinstance(n, Loop):
            return fmt.LoopDef(kind="loop", name=at, body=self.branch(n.body),
                               until=self.expr(n.until, f"{at}.until"),
                               max_iterations=n.max_iterations, **common)
        if isinstance(n, flow.Patched):
            return fmt.PatchedDef(kind="patched", change=n.change, new=self.branch(n.new),
                                  **_given(old=None if n.old is None else self.branch(n.old),
                                           name=n.name or None), **common)
        if isinstance(n, flow.ChildSaga):
            saga = n.saga if isinstance(n.saga, str) else n.saga.name
            return fmt.ChildDef(kind="child", name=at, saga=saga, **common, **_given(
                input=self.expr(n.input, f"{at}.input"), when=self.expr(n.when, f"{at}.when"),
                version=n.version, deadline=_unless(n.deadline, timedelta(hours=1)),
                finish_retry=_policy(n.finish_retry, DEFAULT_ROLLBACK_RETRY)))
        if isinstance(n, flow.Sleep):
            return fmt.SleepDef(kind="sleep", name=at, **common,
                                duration=self.value(n.duration, f"{at}.duration"))
        if isinstance(n, flow.SleepUntil):
            return fmt.SleepUntilDef(kind="sleep_until", name=at, **common,
                                     until=self.value(n.until, f"{at}.until"))
        assert isinstance(n, flow.WaitForSignal), n
        return fmt.WaitDef(kind="wait", name=at, signal=n.signal, **common, **_given(
            payload=None if n.payload is None else self.schema(n.payload, f"{at}.payload"),
            timeout=n.timeout, on_timeout=None if n.on_timeout == "fail" else n.on_timeout))

    def step(self, n: TccStep | SagaStep) -> Any:
        at = n.name
        common = _given(
            description=n.description or None, payload=self.expr(n.payload, f"{at}.payload"),
            when=self.expr(n.when, f"{at}.when"), retry=_policy(n.retry, DEFAULT_RETRY),
            deadline=_unless(n.deadline, DEFAULT_DEADLINE),
            rollback_deadline=_unless(n.rollback_deadline, DEFAULT_DEADLINE))
        if isinstance(n, TccStep):
            return fmt.TccStepDef(
                kind="tcc", name=at, participant=n.participant, action=n.action, **common,
                **_given(confirm_retry=_policy(n.confirm_retry, DEFAULT_ROLLBACK_RETRY),
                         cancel_retry=_policy(n.cancel_retry, DEFAULT_ROLLBACK_RETRY),
                         finish_payload=self.expr(n.finish_payload, f"{at}.finish_payload")))
        return fmt.SagaStepDef(
            kind="saga", name=at, participant=n.participant, action=n.action,
            compensable=n.reversible, **common,
            **_given(compensation_retry=_policy(n.compensation_retry, DEFAULT_ROLLBACK_RETRY),
                     compensation_payload=self.expr(n.compensation_payload,
                                                    f"{at}.compensation_payload")))

    def task(self, n: HumanTask) -> fmt.TaskDef:
        at = n.name
        form = None if n.form is Approval else self.schema(n.form, f"{at}.form")
        timeout = n.on_timeout.model_dump(mode="json") if not isinstance(n.on_timeout, str) \
            else _unless(n.on_timeout, "reject")
        return fmt.TaskDef(kind="task", name=at, title=self.value(n.title, f"{at}.title"), **_given(
            description=self.value(n.description, f"{at}.description") or None, form=form,
            outcome_field=_unless(n.outcome_field, "outcome"),
            reject=_unless(list(n.reject), ["reject"]),
            users=self.value(n.users, f"{at}.users") or None,
            groups=self.value(n.groups, f"{at}.groups") or None,
            priority=_unless(n.priority, 50), due=self.value(n.due, f"{at}.due"),
            calendar=n.calendar, timezone=_unless(n.timezone, "UTC"),
            remind_after=n.remind_after, remind_every=n.remind_every,
            max_reminders=_unless(n.max_reminders, 3), timeout=n.timeout, on_timeout=timeout,
            four_eyes=n.four_eyes or None, chain=n.chain,
            escalations=[fmt.EscalationDef(after=e.after, **_given(
                to_users=list(e.to_users) or None, to_groups=list(e.to_groups) or None,
                replace=e.replace or None, priority=e.priority)) for e in n.escalations]
            or None))


#: The nodes that may have a timeout of their own (``format.Timed``).
_TIMED = (flow.Sequence, flow.Parallel, flow.Race, flow.ForEach, flow.Choice, flow.ChildSaga,
          Catch, Loop)


def export(cls: type[Any], expressions: Mapping[str, str] | None = None) -> fmt.Definition:
    """The definition of saga class ``cls``; :class:`InvalidDefinition` lists every mapper
    that is a Python function with no expression given, and every input the format cannot
    state."""
    ex = _Exporter(expressions or {})
    input_schema = ex.schema(cls.input_model, "input")
    steps = ex.branch(tuple(cls.steps))
    queries = {q: ex.expr(fn, f"queries.{q}") for q, fn in (cls.queries or {}).items()}
    updates = export_updates(getattr(cls, "updates", ()), ex.schema, ex.expressions,
                             ex.problems)
    search = export_search(cls, ex.problems, ex.expressions)
    if ex.problems:
        raise InvalidDefinition(ex.problems, f"export of {cls.__qualname__}")
    return fmt.Definition(name=cls.name, version=cls.version, input=input_schema, steps=steps,
                          **_given(description=cls.description or None, queries=queries or None,
                                   timeout=getattr(cls, "timeout", None),
                                   on_timeout=_unless(getattr(cls, "on_timeout", "rollback"),
                                                      "rollback"),
                                   updates=updates or None,
                                   search=search or None))


def plain_definition(definition: fmt.Definition) -> dict[str, Any]:
    """The definition as JSON-ready data, as written (fields left out stay out)."""
    data = definition.model_dump(mode="json", exclude_unset=True, exclude={"format"})
    plain: dict[str, Any] = _kind_first({"format": definition.format, **data})
    return plain


def _kind_first(value: Any) -> Any:
    """A node's ``kind`` first, so a reader sees what each node is before its fields."""
    if isinstance(value, list):
        return [_kind_first(v) for v in value]
    if not isinstance(value, dict):
        return value
    head = {"kind": value["kind"]} if isinstance(value.get("kind"), str) else {}
    return head | {k: _kind_first(v) for k, v in value.items() if k not in head}


def to_json(definition: fmt.Definition) -> str:
    return json.dumps(plain_definition(definition), indent=2) + "\n"


def to_yaml(definition: fmt.Definition) -> str:
    text: str = yaml.safe_dump(plain_definition(definition), sort_keys=False, allow_unicode=True,
                               width=100)
    return text


def _given(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _unless(value: Any, default: Any) -> Any:
    return None if value == default else value


def _policy(policy: Any, default: Any) -> Any:
    resolved = resolve_policy(policy)
    return None if resolved == default else resolved
