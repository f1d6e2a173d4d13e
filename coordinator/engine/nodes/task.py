"""A human task: a leaf that opens a task for people and waits until one completes it.

Entered, it builds the task from the saga's data (title, candidates, due time, who may not
approve) into the node's ``payload``, asks for its durable timers (reminders, escalation
tiers, the final timeout) and reports the task as ``created``. A :class:`TaskActed` event
claims, hands over, comments or completes it; the completed form becomes the node's result,
and an outcome listed in ``reject`` fails the node, so the saga rolls back like after a
rejected step. Undone while open (the saga rolls back, a race was won elsewhere) it is
cancelled. Every change is a :class:`TaskChange` in the decision, which the store writes to
the tasks table and publishes in the same transaction. Who may act is decided here, not by
the UI: candidates claim, the holder completes, and with four eyes neither the saga's
starter nor an earlier approver of the chain may complete.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from coordinator.engine.decision import (
    InvalidInput,
    InvalidTransition,
    TaskChange,
    TaskRefused,
    TimerRequest,
)
from coordinator.engine.events import TaskActed, TaskAction, TimerFired, TimerKind
from coordinator.engine.nodes.base import Kind, Progress, Scope, context
from coordinator.engine.nodes.leaf import go_dead
from coordinator.engine.state import StepPhase, StepState
from coordinator.engine.tree import CompiledNode, CompiledTask, WaitKind
from coordinator.language.calendars import add_business_days
from coordinator.language.tasks import HumanTask
from participant_sdk.task_events import tasks_topic

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = ["KIND", "is_task", "on_task", "on_timer", "reopen", "skip", "task_id"]

#: Namespace of task ids (uuid5); fixed forever, ids must stay reproducible.
TASK_NAMESPACE = uuid.UUID("0b6f3f7e-2c55-4a8e-9d1a-7c6e4f2b9a13")
#: Comments kept per task (the oldest go first).
MAX_COMMENTS = 100
OPEN = "open"


def task_id(saga_id: uuid.UUID, key: str, entry: int) -> str:
    """The id of one opening of a task node: the same inputs always give the same id."""
    return str(uuid.uuid5(TASK_NAMESPACE, f"{saga_id}/{key}/{entry}"))


def forward(w: Work, node: CompiledTask, key: str, scope: Scope) -> Progress:
    state = w.steps.get(key)
    if state is None:
        state = w.create(key, node.name, scope.parent)
    if state.phase is StepPhase.SUCCEEDED:
        return Progress.DONE
    if state.phase is StepPhase.WAITING:
        return Progress.WAITING
    if state.phase is not StepPhase.PENDING:
        return Progress.FAILED
    entry = (state.count or 0) + 1
    try:
        task = _opened(w, node.spec, key, scope, entry)
    except Exception as exc:  # a user function failing is this node failing for good
        reason = f"{key}: opening the task: {type(exc).__name__}: {exc}"
        w.update_step(key, phase=StepPhase.FAILED, started_at=w.now, finished_at=w.now,
                      note=reason)
        w.failed(key, reason)
        return Progress.FAILED
    timers = _timers(w, node.spec, key, entry)
    task["timers"] = {t.timer_id: t.attempt for t in timers}
    final = next((t for t in timers if t.kind is TimerKind.TASK_TIMEOUT), None)
    w.timers.extend(timers)
    w.update_step(key, phase=StepPhase.WAITING, count=entry, started_at=w.now,
                  finished_at=None, abandoned=False, payload=task, result=None,
                  timer=final.timer_id if final else None,
                  due_at=datetime.fromisoformat(task["due_at"]) if task["due_at"] else None)
    _report(w, key, "created", None, form_schema=node.form_schema)
    w.note(f"{key}: task {task['id']} opened for {_people(task)}")
    return Progress.WAITING


def _opened(w: Work, spec: HumanTask, key: str, scope: Scope, entry: int) -> dict[str, Any]:
    """The task's record when it opens, built from the saga's data (mappers run here)."""
    ctx = context(w, scope)

    def text(value: Any) -> str:
        return str(value(ctx) if callable(value) else value)

    def people(value: Any) -> list[str]:
        got = value(ctx) if callable(value) else value
        if isinstance(got, str) or not all(isinstance(p, str) and p for p in got):
            raise TypeError(f"candidates must be a list of names, got {got!r}")
        return sorted(set(got))

    due: datetime | None = None
    if spec.due is not None:
        value = spec.due(ctx) if callable(spec.due) else spec.due
        if isinstance(value, timedelta):
            due = later(spec, w.now, value)
        elif isinstance(value, datetime) and value.tzinfo is not None:
            due = value
        else:
            raise TypeError(f"due must give a timedelta or an aware datetime, got {value!r}")
    users, groups = people(spec.users), people(spec.groups)
    if not users and not groups:
        raise ValueError("the task has no candidate users or groups")
    return {
        "id": task_id(w.saga_id, key, entry), "state": OPEN, "title": text(spec.title)[:500],
        "description": text(spec.description)[:10_000], "candidate_users": users,
        "candidate_groups": groups, "excluded_users": _excluded(w, spec, key),
        "assignee": None, "owner": None, "delegation": None, "proposal": None,
        "priority": spec.priority, "due_at": due.isoformat() if due else None,
        "escalation_tier": 0, "reminders": 0, "chain": spec.chain, "outcome": None,
        "result": None, "completed_by": None, "comments": [],
        "created_at": w.now.isoformat(), "claimed_at": None, "closed_at": None,
    }


def later(spec: HumanTask, start: datetime, delta: timedelta) -> datetime:
    """``start`` plus ``delta``; on the task's calendar whole days count as business days
    (in the task's time zone) and a time landing on a closed day moves to the next open one."""
    if spec.calendar is None:
        return start + delta
    days = delta.days
    moved = add_business_days(spec.calendar, start, days, spec.timezone) + (delta - timedelta(
        days=days))
    return add_business_days(spec.calendar, moved, 0, spec.timezone)


def _excluded(w: Work, spec: HumanTask, key: str) -> list[str]:
    """Four eyes: the saga's starter and whoever completed an earlier task of the chain."""
    if not spec.four_eyes:
        return []
    out = {w.get("started_by")} | {p for p in _chain_approvers(w, spec.chain, key)}
    return sorted(p for p in out if p)


def _chain_approvers(w: Work, chain: str | None, but: str) -> set[str]:
    if chain is None:
        return set()
    return {s.payload["completed_by"] for k, s in w.steps.items()
            if k != but and s.payload and s.payload.get("chain") == chain
            and s.payload.get("completed_by") and s.phase is StepPhase.SUCCEEDED
            and is_task(w, s)}


def is_task(w: Work, state: StepState) -> bool:
    """Whether the node instance ``state`` is a human task."""
    node = w.definition.node(state.node)
    return getattr(node, "kind", None) is WaitKind.TASK


def _timers(w: Work, spec: HumanTask, key: str, entry: int) -> list[TimerRequest]:
    """Reminder, escalation tiers and the final timeout. ``attempt`` numbers the reminder or
    the tier (ids stay unique: ``{saga}:{key}:{kind}:{entry}.{n}``)."""
    out: list[TimerRequest] = []

    def add(kind: TimerKind, n: int, delta: timedelta) -> None:
        out.append(TimerRequest(timer_id=f"{w.saga_id}:{key}:{kind.value}:{entry}.{n}",
                                due_at=later(spec, w.now, delta), step=key, phase=None,
                                attempt=n, kind=kind))

    first = spec.remind_after or spec.remind_every
    if first is not None and spec.max_reminders > 0:
        add(TimerKind.TASK_REMINDER, 1, first)
    for tier, escalation in enumerate(spec.escalations, 1):
        add(TimerKind.TASK_ESCALATION, tier, escalation.after)
    if spec.timeout is not None:
        add(TimerKind.TASK_TIMEOUT, 0, spec.timeout)
    return out


# -- people acting --------------------------------------------------------------------------

def on_task(w: Work, event: TaskActed) -> None:
    """Apply a person's action, or raise :class:`TaskRefused` saying why they may not. The
    caller walks the tree afterwards (a completion moves the saga on)."""
    key = _find(w, event.task_id)
    state = w.step(key)
    node = w.definition.node(state.node)
    assert isinstance(node, CompiledTask)
    task = dict(state.payload or {})
    if w.get("status").is_terminal or state.phase is not StepPhase.WAITING:
        raise TaskRefused(f"task {event.task_id} is closed ({task.get('state')})", "closed")
    who = event.actor
    if event.action is TaskAction.CLAIM:
        _may_see(task, event)
        if who in task["excluded_users"]:
            raise TaskRefused(f"{who} may not take this task (four eyes)", "four_eyes")
        holder = task["assignee"]
        if holder is not None and holder != who:
            raise TaskRefused(f"task {event.task_id} is claimed by {holder}", "claimed")
        _change(w, key, task, "claimed", who, assignee=who, claimed_at=w.now.isoformat())
    elif event.action is TaskAction.UNCLAIM:
        _must_hold(task, event)
        _change(w, key, task, "unclaimed", who, assignee=None, claimed_at=None)
    elif event.action in (TaskAction.REASSIGN, TaskAction.DELEGATE):
        _must_hold(task, event)
        if not event.to_user:
            raise TaskRefused(f"{event.action.value} needs the person it goes to", "bad_request")
        if event.action is TaskAction.REASSIGN:
            _change(w, key, task, "reassigned", who, assignee=event.to_user,
                    claimed_at=w.now.isoformat(), owner=None, delegation=None)
        else:
            _change(w, key, task, "delegated", who, assignee=event.to_user,
                    owner=task["owner"] or who,
                    delegation="pending" if event.return_to_owner else None)
    elif event.action is TaskAction.COMMENT:
        _may_see(task, event)
        if not event.comment.strip():
            raise TaskRefused("a comment needs text", "bad_request")
        comment = {"by": who, "at": w.now.isoformat(), "text": event.comment}
        _change(w, key, task, "commented", who,
                comments=[*task["comments"], comment][-MAX_COMMENTS:])
    else:
        _complete(w, node, key, task, event)


def _find(w: Work, wanted: str) -> str:
    for key, state in w.steps.items():
        if state.payload and state.payload.get("id") == wanted and is_task(w, state):
            return key
    raise TaskRefused(f"saga {w.saga_id} has no task {wanted}", "unknown")


def _may_see(task: dict[str, Any], event: TaskActed) -> None:
    who = event.actor
    if event.admin or who in (task["assignee"], task["owner"]) \
            or who in task["candidate_users"] or set(event.groups) & set(task["candidate_groups"]):
        return
    raise TaskRefused(f"{who} is not a candidate for this task", "not_candidate")


def _must_hold(task: dict[str, Any], event: TaskActed) -> None:
    if event.admin or event.actor == task["assignee"]:
        return
    holder = task["assignee"]
    raise TaskRefused(f"only the task's holder ({holder or 'nobody: claim it first'}) or an "
                      f"admin may {event.action.value} it", "not_assignee")


def _complete(w: Work, node: CompiledTask, key: str, task: dict[str, Any],
              event: TaskActed) -> None:
    spec, who = node.spec, event.actor
    _must_hold(task, event)
    if who in task["excluded_users"] or who in _chain_approvers(w, spec.chain, key):
        raise TaskRefused(f"{who} may not approve this task: four eyes (the saga's starter "
                          "and earlier approvers of the chain may not)", "four_eyes")
    data = _valid(spec.form, event.data or {})
    if task["delegation"] == "pending" and who == task["assignee"] and who != task["owner"]:
        _change(w, key, task, "resolved", who, assignee=task["owner"], delegation="resolved",
                proposal=data)
        return
    _close(w, key, task, spec, data, who, "completed")


def _valid(form: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    try:
        return form.model_validate(data).model_dump(mode="json")
    except ValidationError as exc:
        raise InvalidInput(f"the form does not validate: {exc}") from exc


def _close(w: Work, key: str, task: dict[str, Any], spec: HumanTask, data: dict[str, Any],
           who: str, how: str) -> None:
    """Finish the task with ``data``: the node succeeds, or fails when the outcome rejects."""
    outcome = str(data.get(spec.outcome_field))
    rejected = outcome in spec.reject
    change = "rejected" if rejected else how
    _drop_timers(w, task)
    _change(w, key, task, change, who, state="rejected" if rejected else "completed",
            outcome=outcome, result=data, completed_by=who, closed_at=w.now.isoformat(),
            timers={})
    if rejected:
        comment = data.get("comment") or ""
        reason = f"{key}: rejected by {who}" + (f": {comment}" if comment else "")
        w.update_step(key, phase=StepPhase.FAILED, timer=None, finished_at=w.now, note=reason)
        w.failed(key, reason)
    else:
        w.update_step(key, phase=StepPhase.SUCCEEDED, timer=None, finished_at=w.now,
                      result=data, completed_seq=w.next_completion())
    w.note(f"{key}: {change} by {who} ({outcome})")


def _change(w: Work, key: str, task: dict[str, Any], change: str, actor: str | None,
            **fields: Any) -> None:
    """Record a change of the task in the node's payload and report it."""
    task.update(fields)
    w.update_step(key, payload=task)
    _report(w, key, change, actor)
    if change not in ("completed", "rejected"):
        w.note(f"{key}: task {change}" + (f" by {actor}" if actor else ""))


def _report(w: Work, key: str, change: str, actor: str | None,
            form_schema: dict[str, Any] | None = None) -> None:
    task = w.step(key).payload or {}
    record = {k: v for k, v in task.items() if k not in ("timers",)}
    record.update(saga_id=str(w.saga_id), saga_type=w.get("saga_type"), node=key,
                  updated_at=w.now.isoformat())
    if form_schema is not None:
        record["form_schema"] = form_schema
    w.tasks.append(TaskChange(task_id=task["id"], node=key, change=change, actor=actor,
                              record=record, topic=tasks_topic(w.definition.topic_prefix)))


def _people(task: dict[str, Any]) -> str:
    return ", ".join([*task["candidate_users"], *(f"group {g}" for g in task["candidate_groups"])])


def _drop_timers(w: Work, task: dict[str, Any]) -> None:
    for timer in task.get("timers") or {}:
        w.drop_timer(timer)


# -- timers ---------------------------------------------------------------------------------

def on_timer(w: Work, event: TimerFired) -> str | None:
    """A reminder, an escalation tier or the final timeout of an open task came due."""
    state = w.step(event.step)
    task = dict(state.payload or {})
    if state.phase is not StepPhase.WAITING or event.timer_id not in (task.get("timers") or {}):
        return f"stale task timer {event.timer_id}"
    node = w.definition.node(state.node)
    assert isinstance(node, CompiledTask)
    spec, key = node.spec, event.step
    timers = {k: v for k, v in task["timers"].items() if k != event.timer_id}
    task["timers"] = timers
    if event.kind is TimerKind.TASK_REMINDER:
        sent = task["reminders"] + 1
        if spec.remind_every is not None and sent < spec.max_reminders:
            nxt = TimerRequest(
                timer_id=event.timer_id.rsplit(".", 1)[0] + f".{sent + 1}",
                due_at=later(spec, w.now, spec.remind_every), step=key, phase=None,
                attempt=sent + 1, kind=TimerKind.TASK_REMINDER)
            w.timers.append(nxt)
            timers[nxt.timer_id] = nxt.attempt
        _change(w, key, task, "reminded", None, reminders=sent)
    elif event.kind is TimerKind.TASK_ESCALATION:
        tier = spec.escalations[event.attempt - 1]
        users = set(tier.to_users) | (set() if tier.replace else set(task["candidate_users"]))
        groups = set(tier.to_groups) | (set() if tier.replace else
                                         set(task["candidate_groups"]))
        _change(w, key, task, "escalated", None, escalation_tier=event.attempt,
                candidate_users=sorted(users), candidate_groups=sorted(groups),
                priority=tier.priority if tier.priority is not None else task["priority"])
    else:
        _expire(w, node, key, task)
    return None


def _expire(w: Work, node: CompiledTask, key: str, task: dict[str, Any]) -> None:
    spec = node.spec
    wait = spec.timeout.total_seconds() if spec.timeout else 0
    if isinstance(spec.on_timeout, BaseModel):
        _close(w, key, task, spec, spec.on_timeout.model_dump(mode="json"), "timeout",
               "completed")
        return
    _drop_timers(w, task)
    _change(w, key, task, "expired", None, state="expired", closed_at=w.now.isoformat(),
            timers={})
    reason = f"{key}: nobody completed the task within {wait:g}s"
    w.update_step(key, phase=StepPhase.FAILED, timer=None, finished_at=w.now, note=reason)
    if spec.on_timeout == "fail":
        go_dead(w, key, reason)
        return
    w.failed(key, reason)
    w.note(reason)


# -- operator repairs -----------------------------------------------------------------------

def skip(w: Work, key: str, result: dict[str, Any] | None, actor: str, note: str) -> None:
    """An operator decides in place of the people: ``result`` is the form (validated), the
    task closes as completed by the operator and the node succeeds."""
    state = w.step(key)
    node = w.definition.node(state.node)
    assert isinstance(node, CompiledTask)
    if result is None:
        raise InvalidTransition(f"{key}: skipping a human task needs the form's result")
    try:
        data = _valid(node.spec.form, result)
    except InvalidInput as exc:  # refused like a signal wait's result (HTTP 409)
        raise InvalidTransition(f"{key}: result is not a valid {node.spec.form.__name__} "
                                f"form: {exc}") from exc
    task = dict(state.payload or {})
    if state.phase is StepPhase.WAITING:
        _close(w, key, task, node.spec, data, f"operator:{actor}", "completed")
    else:  # dead after its timeout: the task is closed already
        w.update_step(key, phase=StepPhase.SUCCEEDED, finished_at=w.now, result=data,
                      completed_seq=w.next_completion())
    w.update_step(key, note=note)


def reopen(w: Work, key: str) -> None:
    """An operator retry of a task the saga died at: it opens again (a new task) on the
    next walk."""
    w.update_step(key, phase=StepPhase.PENDING, finished_at=None, abandoned=False)


# -- the node kind ---------------------------------------------------------------------------

def undo(w: Work, node: CompiledTask, key: str, scope: Scope) -> Progress:
    """An open task is cancelled (its saga rolls back, its race was decided elsewhere);
    a completed one applied nothing that needs undoing."""
    state = w.steps.get(key)
    if state is not None and state.phase is StepPhase.WAITING:
        task = dict(state.payload or {})
        _drop_timers(w, task)
        _change(w, key, task, "cancelled", None, state="cancelled",
                closed_at=w.now.isoformat(), timers={})
        w.update_step(key, phase=StepPhase.FAILED, timer=None, finished_at=w.now,
                      abandoned=True, note="abandoned: its branch is being undone")
    return Progress.DONE


def result(w: Work, node: CompiledTask, key: str, scope: Scope) -> Any:
    state = w.steps.get(key)
    return state.result if state is not None and state.phase is StepPhase.SUCCEEDED else None


def children(w: Work, node: CompiledTask, key: str, scope: Scope
             ) -> Iterator[tuple[CompiledNode, str, Scope]]:
    return iter(())


def edges(node: CompiledTask) -> Iterable[tuple[str, str, str]]:
    out = [
        ("pending", "waiting", "entered: the task opens"),
        ("pending", "failed", "a title, candidate or due mapper raised"),
        ("waiting", "succeeded", "completed by a person, or operator skip"),
        ("waiting", "failed", "rejected; or cancelled: rollback, race lost, operator cancel"),
        ("failed", "pending", "operator retry (the task opens again)"),
    ]
    if node.spec.timeout is not None:
        target = "succeeded" if isinstance(node.spec.on_timeout, BaseModel) else "failed"
        out.append(("waiting", target, f"timeout ({_timeout_label(node.spec)})"))
    return out


def _timeout_label(spec: HumanTask) -> str:
    return spec.on_timeout if isinstance(spec.on_timeout, str) else "default decision"


KIND = Kind(forward, undo, result, children, edges)
