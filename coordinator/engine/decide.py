"""``advance`` and ``replay``: the pure core's entry points."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from pydantic import ValidationError

from coordinator.engine import timeouts
from coordinator.engine.decision import (
    Decision,
    HistoryEntry,
    InvalidInput,
    InvalidTransition,
)
from coordinator.engine.driver import drive
from coordinator.engine.events import (
    Event,
    Migrated,
    ParentRequest,
    ReplyReceived,
    SagaStarted,
    SignalReceived,
    TaskActed,
    TimerFired,
    UpdateApplied,
)
from coordinator.engine.migrate import plan_migration
from coordinator.engine.nested import answer_parent, on_parent_request
from coordinator.engine.nodes.task import on_task
from coordinator.engine.repair import on_repair
from coordinator.engine.replies import on_reply, on_timer
from coordinator.engine.signals import on_signal
from coordinator.engine.starting import schedule_start
from coordinator.engine.state import PatchChoice, SagaState, Status, StepState, trusted
from coordinator.engine.tree import CompiledGroup, CompiledNode, CompiledSaga, GroupKind
from coordinator.engine.updates import on_update
from coordinator.engine.work import Work, message_id, timer_id

__all__ = ["advance", "message_id", "recorded_patches", "replay", "replay_from", "timer_id"]


def advance(
    definition: CompiledSaga, state: SagaState | None, event: Event, now: datetime, *,
    known_patches: Mapping[str, PatchChoice] | None = None,
) -> Decision:
    """Apply one event to a saga. Pure: same arguments, same decision.

    Raises :class:`InvalidTransition` when the event is not legal here (nothing is to be
    stored then) and :class:`InvalidInput` when a start's input does not validate.
    An event that changes nothing (duplicate or stale) yields a decision with ``ignored`` set,
    the state unchanged and one history entry saying why.

    ``known_patches`` (replay only): every version-guard decision recorded for the saga; a
    guard with none takes its old path, unrecorded (see ``nodes.patched``).
    """
    if isinstance(event, SagaStarted):
        if state is not None:
            return _ignored(state, event, now, f"saga {state.saga_id} already started")
        later = event.start_at is not None and event.start_at > now
        work = Work(definition, _initial(definition, event, now, later), now, known_patches)
        if event.start_at is not None and later:
            schedule_start(work, event.start_at)
        else:
            work.note(f"started {definition.name} v{definition.version}")
            drive(work)
        return _decision(work, event)
    if state is None:
        raise InvalidTransition(f"no saga to apply {event.type} to: it was never started")
    if isinstance(event, Migrated):
        return _migrated(definition, state, event, now)
    if (state.saga_type, state.version) != (definition.name, definition.version):
        raise InvalidTransition(
            f"saga {state.saga_id} is {state.saga_type} v{state.version}, but the definition "
            f"given is {definition.name} v{definition.version}")
    work = Work(definition, state, now, known_patches)
    ignored: str | None = None
    if isinstance(event, ReplyReceived):
        ignored = on_reply(work, event) if not state.status.is_terminal else "saga finished"
    elif isinstance(event, TimerFired):
        ignored = on_timer(work, event) if not state.status.is_terminal else "saga finished"
    elif isinstance(event, ParentRequest):
        ignored = on_parent_request(work, event)
    elif isinstance(event, SignalReceived):
        ignored = on_signal(work, event) if not state.status.is_terminal else "saga finished"
    elif isinstance(event, UpdateApplied):
        ignored = on_update(work, event) if not state.status.is_terminal else "saga finished"
    elif isinstance(event, TaskActed):
        on_task(work, event)
        drive(work)
    else:
        on_repair(work, event)
    if ignored is not None:
        return _ignored(state, event, now, ignored)
    return _decision(work, event, state)


def replay(definition: CompiledSaga, history: Iterable[tuple[Event, datetime]], *,
           known_patches: Mapping[str, PatchChoice] | None = None) -> SagaState:
    """Rebuild a saga's state by folding :func:`advance` over its stored history.

    ``known_patches``: the version-guard decisions recorded in the saga's snapshot. A saga
    that reached a guard only after it was deployed decided by what it had run then; replay
    from the start must take that same path, not re-apply the rule at an earlier event."""
    state = replay_from(definition, None, history, known_patches=known_patches)
    if state is None:
        raise InvalidTransition("empty history: nothing to replay")
    return state


def replay_from(definition: CompiledSaga, state: SagaState | None,
                history: Iterable[tuple[Event, datetime]], *,
                known_patches: Mapping[str, PatchChoice] | None = None) -> SagaState | None:
    """Fold ``history`` over ``state`` (a checkpoint, or ``None``), switching to a newer
    version's definition at a ``Migrated`` event and following recorded guard decisions."""
    events = list(history)
    known = {**recorded_patches(e for e, _ in events), **(known_patches or {})}
    for event, at in events:
        state = advance(_definition_at(definition, state, event), state, event, at,
                        known_patches=known).state
    return state


def _definition_at(definition: CompiledSaga, state: SagaState | None, event: Event
                   ) -> CompiledSaga:
    """The version the saga runs on at ``event``: a history that crossed a migration runs on
    the older version's definition until its ``Migrated`` event."""
    if isinstance(event, Migrated):
        version = event.to_version
    elif state is None:
        version = event.version if isinstance(event, SagaStarted) else definition.version
    else:
        version = state.version
    try:
        return definition.for_version(version)
    except KeyError as exc:
        raise InvalidTransition(str(exc.args[0])) from exc


def _migrated(definition: CompiledSaga, state: SagaState, event: Migrated, now: datetime
              ) -> Decision:
    """Apply a migration the dry run allows; refused (nothing stored) otherwise."""
    if (state.version, definition.version) != (event.from_version, event.to_version):
        raise InvalidTransition(
            f"saga {state.saga_id} is v{state.version}; the migration is v{event.from_version}"
            f" -> v{event.to_version} and the definition given is v{definition.version}")
    plan = plan_migration(definition, state)
    if plan.state is None:
        raise InvalidTransition(f"saga {state.saga_id} cannot move to v{definition.version}: "
                                + "; ".join(plan.problems))
    work = Work(definition, plan.state, now)
    for key in (*state.steps, *plan.state.steps):
        work.touched[key] = None  # every node is rewritten; a renamed key's old one is gone
    work.note(f"migrated v{event.from_version} -> v{event.to_version} by "
              f"{plan.migration} ({event.actor})")
    timeouts.settle(work)  # a renamed node's timeout moves to its new key (every key touched)
    return _decision(work, event, state)


def recorded_patches(events: Iterable[Event]) -> dict[str, PatchChoice]:
    """The version-guard decisions recorded on a history's events."""
    out: dict[str, PatchChoice] = {}
    for event in events:
        out.update(event.patches)
    return out


def _initial(definition: CompiledSaga, event: SagaStarted, now: datetime,
             later: bool = False) -> SagaState:
    if (event.saga_type, event.version) != (definition.name, definition.version):
        raise InvalidTransition(
            f"start asks for {event.saga_type} v{event.version}, but the definition given is "
            f"{definition.name} v{definition.version}")
    try:
        model = definition.input_model.model_validate(event.input)
    except ValidationError as exc:
        raise InvalidInput(f"invalid input for {definition.name} v{definition.version}: "
                           f"{exc}") from exc
    steps = {key: StepState(key=key, node=key, parent=parent or None)
             for key, parent in static_nodes(definition)}
    return SagaState(
        saga_id=event.saga_id,
        saga_type=definition.name,
        version=definition.version,
        status=Status.SCHEDULED if later else Status.RUNNING,
        start_at=event.start_at if later else None,
        input=model.model_dump(mode="json"),
        steps=steps,
        trace_context=dict(event.trace_context),
        parent=event.parent,
        started_by=event.started_by,
        started_at=now,
        updated_at=now,
    )


#: Composites whose children are made at run time (for-each items, loop iterations).
_DYNAMIC = (GroupKind.FOREACH, GroupKind.LOOP)


def static_nodes(definition: CompiledSaga) -> list[tuple[str, str]]:
    """(key, parent key) of every node outside for-each bodies: they exist from the start,
    pending, so a new saga shows its whole static tree."""
    out: list[tuple[str, str]] = []

    def visit(node: CompiledNode, parent: str) -> None:
        if isinstance(node, CompiledGroup) and node.kind is GroupKind.PATCHED:
            # A guard has no state; its new path is entered when taken. Its old path's
            # nodes exist from the start as they did before the guard was written.
            for child in node.path("old"):
                visit(child, parent)
            return
        if node.name:
            out.append((node.name, parent))
        if isinstance(node, CompiledGroup) and node.kind not in _DYNAMIC:
            for child in node.children:
                visit(child, node.name)

    visit(definition.root, "")
    return out


def _decision(work: Work, event: Event, before: SagaState | None = None) -> Decision:
    answer_parent(work)
    decided = {k: v for k, v in work.state.patches.items()
               if before is None or k not in before.patches}
    if decided:  # recorded on the history's event: replay follows it
        event = event.model_copy(update={"patches": {**event.patches, **decided}})
    work.update(updated_at=work.now, events_applied=work.state.events_applied + 1)
    note = "; ".join(work.notes) or "applied"
    # Built without validation: every value here has its field's type by construction.
    return trusted(
        Decision,
        state=work.state,
        history=[trusted(HistoryEntry, event=event, at=work.now, note=note)],
        commands=work.commands,
        timers=work.timers,
        cancel_timers=work.cancel_timers,
        children=work.children,
        deliveries=work.deliveries,
        consumed_signals=work.consumed_signals,
        tasks=work.tasks,
        ignored=None,
        moves=work.moves,
        touched=list(work.touched),
    )


def _ignored(state: SagaState, event: Event, now: datetime, why: str) -> Decision:
    return Decision(
        state=state,
        history=[HistoryEntry(event=event, at=now, note=f"ignored: {why}")],
        ignored=why,
    )
