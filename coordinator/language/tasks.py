"""Human tasks: a node that waits for a person, and the approval chains built from it.

A :class:`HumanTask` opens a task in the inbox of its candidate users and groups; someone
claims it and completes its form (a pydantic model). The completed form is the node's result;
its outcome field says approve, reject or any declared choice, and a rejection fails the node
like a rejected step (the saga rolls back). Reminders, escalation tiers and the final timeout
are durable timers of the node, counted in business time on a :class:`BusinessCalendar` when
the task names one::

    HumanTask("manager", title=lambda ctx: f"Expense {ctx.input.id}: {ctx.input.amount}",
              users=lambda ctx: [ctx.input.manager], due=timedelta(days=2),
              calendar=BusinessCalendar(country="DE"), remind_after=timedelta(days=1),
              escalations=(Escalation(after=timedelta(days=3), to_groups=("finance-leads",)),),
              timeout=timedelta(days=5), on_timeout="reject")

Chains are the existing composites: a tuple runs tasks in order, :func:`all_of` is a
:class:`Parallel`, :func:`any_of` and :func:`quorum` are a :class:`Race`;
:func:`approval_chain` marks every task of a chain so that the saga's starter and earlier
approvers may not approve (four eyes, enforced by the engine, not the UI).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field

from coordinator.language.calendars import BusinessCalendar
from coordinator.language.nodes import Parallel, Race
from coordinator.language.nodes import Sequence as SequenceNode
from coordinator.language.steps import StepContext

__all__ = [
    "Approval",
    "Escalation",
    "HumanTask",
    "all_of",
    "any_of",
    "approval_chain",
    "approvers",
    "quorum",
    "task_problems",
]

#: Priorities run from 0 to 100 (Camunda's scale); 50 is the default.
MAX_PRIORITY = 100
#: Most reminders one task sends, whatever ``max_reminders`` says.
REMINDER_CEILING = 50

Text = str | Callable[[StepContext[Any]], str]
People = Sequence[str] | Callable[[StepContext[Any]], Sequence[str]]


class Approval(BaseModel):
    """The default form: approve or reject, with an optional comment."""

    model_config = ConfigDict(extra="forbid")

    outcome: Literal["approve", "reject"]
    comment: str = Field(default="", max_length=2000)


@dataclass(frozen=True)
class Escalation:
    """A tier: ``after`` the task opened (counted like ``due``), the task goes to ``to_users``
    and ``to_groups`` as well (``replace=True``: instead), and its priority rises to
    ``priority`` when given. A claimed task stays with its holder; the new candidates see it
    too."""

    after: timedelta
    _: KW_ONLY
    to_users: tuple[str, ...] = ()
    to_groups: tuple[str, ...] = ()
    replace: bool = False
    priority: int | None = None


@dataclass(frozen=True)
class HumanTask:
    """Wait for a person to complete a form. See the module's docstring.

    ``users`` and ``groups`` are the candidates (static, or a mapper of the saga's data);
    ``due`` is the SLA (a duration, or a mapper giving a duration or a time); ``timeout`` ends
    the wait for good, with ``on_timeout``: ``"reject"`` (the saga rolls back), ``"fail"``
    (the saga goes dead at the task for an operator) or a form instance, completed as the
    default decision. ``reject`` lists the outcomes that are a rejection.
    """

    name: str
    _: KW_ONLY
    title: Text
    description: Text = ""
    form: type[BaseModel] = Approval
    outcome_field: str = "outcome"
    reject: tuple[str, ...] = ("reject",)
    users: People = ()
    groups: People = ()
    priority: int = 50
    due: timedelta | Callable[[StepContext[Any]], timedelta | datetime] | None = None
    #: Count ``due``, reminders, escalations and the timeout in business time: whole days
    #: are business days of this calendar (in ``timezone``), the rest is added as is.
    calendar: BusinessCalendar | None = None
    timezone: str = "UTC"
    remind_after: timedelta | None = None
    remind_every: timedelta | None = None
    max_reminders: int = 3
    escalations: tuple[Escalation, ...] = ()
    timeout: timedelta | None = None
    on_timeout: Literal["reject", "fail"] | BaseModel = "reject"
    #: The saga's starter and the approvers of earlier tasks of ``chain`` may not complete it.
    four_eyes: bool = False
    #: The approval chain this task belongs to: nobody completes two tasks of one chain.
    chain: str | None = None


def task_problems(at: str, node: HumanTask) -> list[str]:
    """Every problem of one task's declaration (its name is checked with the others')."""
    out: list[str] = []

    def positive(label: str, value: Any, optional: bool = True) -> None:
        if value is None and optional:
            return
        if not isinstance(value, timedelta) or value <= timedelta(0):
            out.append(f"{at}: {label} must be a positive timedelta, got {value!r}")

    if not (isinstance(node.title, str) and node.title.strip()) and not callable(node.title):
        out.append(f"{at}: title must be a non-empty string or a mapper")
    if not isinstance(node.description, str) and not callable(node.description):
        out.append(f"{at}: description must be a string or a mapper")
    form = node.form
    if not (isinstance(form, type) and issubclass(form, BaseModel)):
        out.append(f"{at}: form must be a pydantic model class, got {form!r}")
    elif node.outcome_field not in form.model_fields:
        out.append(f"{at}: form {form.__name__} has no outcome field {node.outcome_field!r}")
    if not isinstance(node.reject, tuple) or not all(isinstance(r, str) for r in node.reject):
        out.append(f"{at}: reject must be a tuple of outcome strings")
    for label, people in (("users", node.users), ("groups", node.groups)):
        if callable(people):
            continue
        if isinstance(people, str) or not all(isinstance(p, str) and p for p in people):
            out.append(f"{at}: {label} must be a tuple of names or a mapper, got {people!r}")
    if not callable(node.users) and not callable(node.groups) and not node.users \
            and not node.groups:
        out.append(f"{at}: a task needs candidate users or groups")
    if not isinstance(node.priority, int) or not 0 <= node.priority <= MAX_PRIORITY:
        out.append(f"{at}: priority must be an int from 0 to {MAX_PRIORITY}")
    if node.due is not None and not callable(node.due):
        positive("due", node.due)
    positive("remind_after", node.remind_after)
    positive("remind_every", node.remind_every)
    if not isinstance(node.max_reminders, int) or not 0 <= node.max_reminders \
            <= REMINDER_CEILING:
        out.append(f"{at}: max_reminders must be an int from 0 to {REMINDER_CEILING}")
    for i, tier in enumerate(node.escalations):
        if not isinstance(tier, Escalation):
            out.append(f"{at}: escalations[{i}] must be an Escalation")
            continue
        positive(f"escalations[{i}].after", tier.after, optional=False)
        if tier.priority is not None and not 0 <= tier.priority <= MAX_PRIORITY:
            out.append(f"{at}: escalations[{i}].priority must be from 0 to {MAX_PRIORITY}")
        if not tier.to_users and not tier.to_groups and tier.priority is None:
            out.append(f"{at}: escalations[{i}] names no users, groups or priority")
    positive("timeout", node.timeout)
    outcome = node.on_timeout
    if isinstance(outcome, BaseModel):
        if isinstance(form, type) and not isinstance(outcome, form):
            out.append(f"{at}: on_timeout's default decision must be a {form.__name__}")
    elif outcome not in ("reject", "fail"):
        out.append(f"{at}: on_timeout must be 'reject', 'fail' or a form instance")
    if node.calendar is not None and not isinstance(node.calendar, BusinessCalendar):
        out.append(f"{at}: calendar must be a BusinessCalendar")
    try:
        ZoneInfo(node.timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        out.append(f"{at}: unknown timezone {node.timezone!r}")
    return out


def all_of(name: str, *tasks: HumanTask | Any) -> Parallel:
    """Every task must approve; the first rejection fails the group (the saga rolls back)."""
    return Parallel(name, branches=tuple(tasks))


def any_of(name: str, *tasks: HumanTask | Any) -> Race:
    """The first approval wins; the other tasks are cancelled. Fails when all reject."""
    return Race(name, branches=tuple(tasks), quorum=1)


def quorum(name: str, k: int, *tasks: HumanTask | Any,
           verdicts: Literal["decided", "first_rejection", "all"] = "decided") -> Race:
    """``k`` of the tasks must approve. ``verdicts``: ``"decided"`` (the rest are cancelled
    once ``k`` approved; the group fails as soon as rejections make ``k`` approvals
    impossible), ``"first_rejection"`` (any rejection fails the group at once: a veto) or
    ``"all"`` (every approver decides before the group does)."""
    return Race(name, branches=tuple(tasks), quorum=k, verdicts=verdicts)


def approvers(name: str, n: int, **task: Any) -> tuple[HumanTask, ...]:
    """``n`` equal tasks ``{name}_1`` ... ``{name}_n`` (for :func:`quorum` or :func:`all_of`),
    each built from the :class:`HumanTask` fields in ``task``."""
    return tuple(HumanTask(f"{name}_{i}", **task) for i in range(1, n + 1))


def approval_chain(name: str, *levels: Any, four_eyes: bool = True) -> SequenceNode:
    """The levels in order (a task, or a group of tasks such as :func:`quorum`); every task
    in them joins chain ``name`` and, with ``four_eyes``, may not be completed by the saga's
    starter nor by anyone who approved an earlier task of the chain."""
    return SequenceNode(name, steps=tuple(_in_chain(level, name, four_eyes) for level in levels))


def _in_chain(node: Any, chain: str, four_eyes: bool) -> Any:
    if isinstance(node, HumanTask):
        return dataclasses.replace(node, chain=chain, four_eyes=four_eyes or node.four_eyes)
    if isinstance(node, Parallel | Race):
        return dataclasses.replace(
            node, branches=tuple(_in_chain(b, chain, four_eyes) for b in node.branches))
    if isinstance(node, SequenceNode):
        return dataclasses.replace(
            node, steps=tuple(_in_chain(s, chain, four_eyes) for s in node.steps))
    if isinstance(node, tuple | list):
        return tuple(_in_chain(n, chain, four_eyes) for n in node)
    return node
