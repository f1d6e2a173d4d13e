"""A time-skipping test kit: run a saga class in memory against participant handlers.

::

    env = SagaTestEnv(Trial, [Accounts(), Billing()])
    run = await env.start(TrialInput(account="a-1", ends_at=...))
    await run.run_to_end()           # a 30-day sleep passes in microseconds
    assert run.status == "completed"

It drives the same pure core as production (:class:`coordinator.engine.simulate.Simulator`
folds every event through ``advance``) and answers each command with the participant's real
handlers behind the SDK's in-memory barrier (``participant_sdk.testing.ParticipantHarness``).
The clock is virtual: when nothing is in flight it jumps to the next due timer (a sleep's
wake-up, a signal's timeout, a retry backoff, a delayed start, a task's reminder), so days
take no time. Signals, updates, queries and operator repairs go through the same checks as
the API (a signal or update id is applied once, a finished saga refuses them with
``SagaFinished``). Human tasks
are completed as a given person (``run.complete``), their reminders, escalations and timeouts
skipped to (``run.skip_to``), and what they published read back (``run.notifications``).
Child sagas run too, each its
own saga with its own history, started with the parent's decision and answered through
deliveries applied in the receiver's own ``advance``, as the store and the timer loop do:
pass their classes as ``children`` (those a ``ChildSaga`` names by class are found alone),
and ``run.child("node")`` is the child a node started.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel

from coordinator.engine import (
    CompiledSaga,
    OperatorRepair,
    ParentRequest,
    RepairVerb,
    ReplyReceived,
    SagaStarted,
    SagaState,
    SignalReceived,
    advance,
    compile_saga,
    node_results,
)
from coordinator.engine.decision import (
    ChildStart,
    Decision,
    Delivery,
    TaskChange,
    TimerRequest,
)
from coordinator.engine.events import TimerKind
from coordinator.engine.nested import answer_unknown_child, refuse_child
from coordinator.engine.signals import kept_over_bound
from coordinator.engine.simulate import Simulator
from coordinator.engine.updates import update_signal_id
from coordinator.language.business_key import business_key_of
from coordinator.language.nodes import ChildSaga
from coordinator.language.saga import Saga
from coordinator.sagas.filter_match import matches
from coordinator.sagas.queries import run_query
from coordinator.sagas.search import search_values
from coordinator.store.errors import SagaConflict, SagaFinished, TooManySignals
from coordinator.store.records import SignalResult
from coordinator.store.signals import signal_payload
from coordinator.store.updates import UpdateAnswer
from coordinator.testing.updates import send_update, stored_answer
from participant_sdk import Participant
from participant_sdk.testing import ParticipantHarness

__all__ = ["SagaRun", "SagaTestEnv"]

M = TypeVar("M", bound=BaseModel)


class SagaTestEnv:
    """One saga class (and its child saga classes) and the participants they talk to, on a
    virtual clock."""

    def __init__(self, saga: type[Saga], participants: Iterable[Participant], *,
                 children: Iterable[type[Saga]] = (), now: datetime | None = None) -> None:
        self.definition: CompiledSaga = compile_saga(saga)
        self.types: dict[str, dict[int, CompiledSaga]] = {}
        for cls in {saga, *_child_classes(saga), *children}:
            compiled = self.definition if cls is saga else compile_saga(cls)
            self.types.setdefault(compiled.name, {})[compiled.version] = compiled
        self.harnesses = {p.name: ParticipantHarness(p) for p in participants}
        missing = {s.participant for versions in self.types.values()
                   for d in versions.values() for s in d.steps if s.child is None
                   } - set(self.harnesses)
        if missing:
            raise ValueError(f"{saga.name} sends to participants not given: "
                             f"{', '.join(sorted(missing))}")
        self.now = now or datetime(2026, 1, 1, tzinfo=UTC)
        #: The sagas this env started, by id (signal-with-start finds them here).
        self.runs: dict[uuid.UUID, SagaRun] = {}

    async def start(self, input: BaseModel | dict[str, Any], *,
                    saga_id: uuid.UUID | None = None, start_at: datetime | None = None,
                    started_by: str | None = None) -> SagaRun:
        """Start the saga and run it until it waits (for time, a signal, or its end)."""
        family = _Family(self)
        sim = family.add(Simulator(self.definition, saga_id=saga_id or uuid.uuid4(),
                                   now=self.now))
        data = input.model_dump(mode="json") if isinstance(input, BaseModel) else dict(input)
        sim.start(data, start_at=start_at, started_by=started_by)
        run = SagaRun(self, sim, family)
        self.runs[sim.saga_id] = run
        await run.run_until_idle()
        return run

    async def signal_with_start(self, input: BaseModel | dict[str, Any], name: str,
                                payload: BaseModel | dict[str, Any] | None = None, *,
                                saga_id: uuid.UUID, signal_id: str | None = None
                                ) -> tuple[SagaRun, SignalResult]:
        """Start the saga ``saga_id`` if this env has not (the same id with another input:
        :class:`SagaConflict`), then signal it, as the API's ``/signal-with-start``: a
        signal refused starts nothing."""
        data = input.model_dump(mode="json") if isinstance(input, BaseModel) else dict(input)
        data = self.definition.input_model.model_validate(data).model_dump(mode="json")
        run = self.runs.get(saga_id)
        first = run.sim.history[0].event if run is not None else None
        if isinstance(first, SagaStarted) and first.input != data:
            raise SagaConflict(saga_id, "with a different input")
        if run is None:
            body = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
            signal_payload(self.definition, name, body)  # refused: nothing starts
            run = await self.start(data, saga_id=saga_id)
            return run, dataclasses.replace(
                await run.signal(name, payload, signal_id=signal_id), started=True)
        return run, await run.signal(name, payload, signal_id=signal_id)


def _child_classes(saga: type[Saga]) -> set[type[Saga]]:
    """The saga classes ``ChildSaga`` nodes of ``saga`` name by class, and theirs."""
    found: set[type[Saga]] = set()

    def visit(value: Any) -> None:
        if isinstance(value, ChildSaga) and isinstance(value.saga, type):
            if value.saga not in found:
                found.add(value.saga)
                visit(tuple(value.saga.steps))
        elif isinstance(value, tuple | list):
            for item in value:
                visit(item)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for field in dataclasses.fields(value):
                visit(getattr(value, field.name))

    visit(tuple(saga.steps))
    return found


class _Family:
    """Every saga of one run, by id, on one clock: child starts and deliveries routed as the
    store and the timer loop route them."""

    def __init__(self, env: SagaTestEnv) -> None:
        self.env = env
        self.sagas: dict[uuid.UUID, Simulator] = {}
        self._seen: dict[uuid.UUID, int] = {}
        #: (saga id, signal id) of every signal applied, consumed or not: the store's rows.
        self.signal_ids: set[tuple[uuid.UUID, str]] = set()
        #: The answer of every update id sent, by (saga id, update id): the store's rows.
        self.update_answers: dict[tuple[uuid.UUID, str], UpdateAnswer] = {}

    def add(self, sim: Simulator) -> Simulator:
        self.sagas[sim.saga_id] = sim
        self._seen[sim.saga_id] = 0
        return sim

    def settle(self) -> None:
        """Start the children and apply the deliveries the decisions so far asked for,
        until none is left."""
        moved = True
        while moved:
            moved = False
            for saga_id, sim in list(self.sagas.items()):
                while self._seen[saga_id] < len(sim.decisions):
                    decision = sim.decisions[self._seen[saga_id]]
                    self._seen[saga_id] += 1
                    for start in decision.children:
                        self._start_child(start, sim.now)
                    for delivery in decision.deliveries:
                        self._deliver(delivery)
                    moved = True

    def _start_child(self, start: ChildStart, now: datetime) -> None:
        versions = self.env.types.get(start.saga_type, {})
        version = start.version if start.version is not None else max(versions, default=0)
        definition = versions.get(version)
        if definition is None:
            self._deliver(refuse_child(start, f"no saga {start.saga_type!r} version "
                                              f"{start.version or 'latest'} in the test env "
                                              "(pass its class as children=)"))
            return
        child = self.add(Simulator(definition, saga_id=start.saga_id, now=now))
        child.apply(SagaStarted(saga_id=start.saga_id, saga_type=definition.name,
                                version=definition.version, input=start.input,
                                trace_context=start.trace_context, parent=start.parent))

    def _deliver(self, delivery: Delivery) -> None:
        target = self.sagas.get(delivery.saga_id)
        if target is None and isinstance(delivery.event, ParentRequest):
            self._deliver(answer_unknown_child(delivery.saga_id, delivery.event))
        elif target is None:
            raise LookupError(f"delivery to saga {delivery.saga_id}, which does not exist")
        else:
            target.apply(delivery.event)

    def next_timer(self) -> tuple[Simulator, TimerRequest] | None:
        timers = [(sim, t) for sim in self.sagas.values() if (t := sim.next_timer())]
        return min(timers, key=lambda st: (st[1].due_at, st[1].timer_id), default=None)

    def fire(self, sim: Simulator, timer: TimerRequest) -> None:
        self.set_clock(max(sim.now, timer.due_at))
        sim.fire(timer)

    def set_clock(self, now: datetime) -> None:
        for sim in self.sagas.values():
            sim.now = max(sim.now, now)


class SagaRun:
    """One saga in the kit: answer its commands, skip time, signal it, query it."""

    def __init__(self, env: SagaTestEnv, sim: Simulator, family: _Family) -> None:
        self.env, self.sim, self.family = env, sim, family

    @property
    def state(self) -> SagaState:
        return self.sim.current

    @property
    def status(self) -> str:
        return self.state.status.value

    @property
    def now(self) -> datetime:
        """The virtual clock."""
        return self.sim.now

    def results(self) -> dict[str, Any]:
        """Every succeeded node's result, composites included, as the API gives them."""
        return node_results(self.sim.definition, self.state)

    def search_attributes(self) -> dict[str, Any]:
        """The saga's search attribute values now, as the store would keep them; an
        attribute function that returns a value of the wrong type raises here."""
        return search_values(self.sim.definition, self.state, strict=True)

    def matches(self, filter: str) -> bool:
        """Whether the saga matches ``filter`` (``GET /sagas?q=``'s language), by its
        attributes and built-in fields; ``FilterError`` for a filter that does not fit."""
        definition = self.sim.definition
        key = None
        if definition.saga_class is not None:
            key, _ = business_key_of(definition.saga_class,
                                     definition.input_model.model_validate(self.state.input))
        return matches(definition, self.state, filter, key)

    def child(self, node: str) -> SagaRun:
        """The child saga the ``ChildSaga`` node ``node`` of this saga started."""
        for sim in self.family.sagas.values():
            link = sim.current.parent
            if link is not None and link.saga_id == self.sim.saga_id and link.step == node:
                return SagaRun(self.env, sim, self.family)
        raise LookupError(f"node {node!r} of saga {self.sim.saga_id} started no child saga")

    async def run_until_idle(self) -> None:
        """Deliver every command in flight (of this saga and its family) to its participant
        and apply the replies, until none is left (time does not move)."""
        self.family.settle()
        while command := next((c for s in self.family.sagas.values()
                               for c in s.pending.values()), None):
            sim = self.family.sagas[command.saga_id]
            reply = await self.env.harnesses[command.participant].send(command)
            sim.pending.pop(command.message_id, None)
            sim.apply(ReplyReceived(reply=reply))
            self.family.settle()

    async def skip(self, delta: timedelta | None = None) -> bool:
        """Jump the clock to the next due timer (or by ``delta``, firing every timer due
        by then) and run until idle. False when there was no timer to jump to."""
        if delta is not None:
            until = self.sim.now + delta
            while (due := self.family.next_timer()) is not None and due[1].due_at <= until:
                self.family.fire(*due)
                await self.run_until_idle()
            self.family.set_clock(until)
            return True
        due = self.family.next_timer()
        if due is None:
            return False
        self.family.fire(*due)
        await self.run_until_idle()
        return True

    async def run_to_end(self, *, max_jumps: int = 10_000) -> str:
        """Skip time until the saga finishes, goes dead, or waits for a signal with no
        timer left; its status then."""
        for _ in range(max_jumps):
            await self.run_until_idle()
            if self.state.status.is_terminal or self.status == "dead":
                return self.status
            if not await self.skip():
                return self.status
        raise AssertionError(f"saga did not settle in {max_jumps} timer jumps")

    async def signal(self, name: str, payload: BaseModel | dict[str, Any] | None = None, *,
                     signal_id: str | None = None) -> SignalResult:
        """Send a signal as the API does, then run until idle: the payload validated, an id
        already applied answered ``duplicate`` (even once a wait consumed it), a finished
        saga refusing it with :class:`SagaFinished`, one signal more than the class keeps
        with :class:`TooManySignals`."""
        body = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
        data = signal_payload(self.sim.definition, name, body)
        sid = signal_id or str(uuid.uuid4())
        if (self.sim.saga_id, sid) in self.family.signal_ids:
            return SignalResult(self.sim.saga_id, sid, name, duplicate=True)
        if self.state.status.is_terminal:
            raise SagaFinished(self.sim.saga_id, self.status)
        event = SignalReceived(signal_id=sid, name=name, payload=data)
        why = kept_over_bound(self.sim.definition, advance(
            self.sim.definition, self.state, event, self.sim.now).state, name)
        if why is not None:
            raise TooManySignals(self.sim.saga_id, why)
        self.sim.apply(event)
        self.family.signal_ids.add((self.sim.saga_id, sid))
        await self.run_until_idle()
        return SignalResult(self.sim.saga_id, sid, name, duplicate=False)

    async def update(self, name: str, payload: BaseModel | dict[str, Any] | None = None, *,
                     update_id: str | None = None) -> UpdateAnswer:
        """Send an update as the API does, then run until idle; the answer (``outcome``,
        ``result`` or ``reason``), refusals as the store's (see ``coordinator.testing.updates``)."""
        body = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
        answer = send_update(self.sim, self.family.update_answers, name, body,
                             update_id or str(uuid.uuid4()))
        if not answer.duplicate and answer.accepted:
            self.family.signal_ids.add((self.sim.saga_id, update_signal_id(answer.update_id)))
        await self.run_until_idle()
        return answer

    def update_answer(self, update_id: str) -> UpdateAnswer:
        """The stored answer of ``update_id`` (``UpdateNotFound`` when none is)."""
        return stored_answer(self.sim.saga_id, self.family.update_answers, update_id)

    async def repair(self, verb: RepairVerb | str, reason: str, *, actor: str = "kit",
                     step: str | None = None, payload: dict[str, Any] | None = None,
                     result: dict[str, Any] | None = None, status: str | None = None) -> str:
        """An operator repair (retry, skip, compensate, cancel, resolve), checked by the
        engine as the API's (``InvalidTransition`` says why not), then run until idle; the
        saga's status then."""
        verb = RepairVerb(verb)
        if verb is RepairVerb.RESOLVE:
            payload = {"status": status or "completed"}
        self.sim.apply(OperatorRepair(verb=verb, actor=actor, reason=reason, step=step,
                                      payload=payload, result=result))
        await self.run_until_idle()
        return self.status

    # -- human tasks ----------------------------------------------------------------------

    def tasks(self, state: str | None = "open") -> list[dict[str, Any]]:
        """The saga's human tasks as the tasks table holds them (``state`` None: all)."""
        return [t for t in self.sim.tasks.values() if state is None or t["state"] == state]

    def task(self, node: str) -> dict[str, Any]:
        """The latest task the node ``node`` opened."""
        found = [t for t in self.sim.tasks.values() if t["node"] == node]
        if not found:
            raise LookupError(f"node {node!r} opened no task")
        return found[-1]

    @property
    def notifications(self) -> list[TaskChange]:
        """Every task change published so far (what ``{prefix}.tasks`` would carry)."""
        return list(self.sim.task_changes)

    async def act(self, node: str, action: str, user: str, **kwargs: Any) -> Decision:
        """``user`` acts on the node's open task (``groups``, ``admin``, ``data``, ``to_user``,
        ``return_to_owner``, ``comment``), refused as the API refuses; then run until idle."""
        decision = self.sim.act(self.task(node)["id"], action, user, **kwargs)
        await self.run_until_idle()
        return decision

    async def complete(self, node: str, user: str, form: BaseModel | dict[str, Any], *,
                       groups: Iterable[str] = (), claim: bool = True) -> Decision:
        """Complete the node's task as ``user`` (claiming it first unless they hold it)."""
        if claim and self.task(node)["assignee"] != user:
            await self.act(node, "claim", user, groups=list(groups))
        data = form.model_dump(mode="json") if isinstance(form, BaseModel) else dict(form)
        return await self.act(node, "complete", user, groups=list(groups), data=data)

    async def skip_to(self, kind: str) -> TimerRequest:
        """Jump the clock to the next task timer of ``kind`` (``reminder``, ``escalation`` or
        ``timeout``), fire it and run until idle; the timer fired."""
        wanted = TimerKind(f"task_{kind}")
        timer = self.sim.next_timer(wanted)
        if timer is None:
            raise LookupError(f"no pending task {kind}")
        self.family.fire(self.sim, timer)
        await self.run_until_idle()
        return timer

    def query(self, name: str, model: type[M] | None = None) -> M | dict[str, Any]:
        answer = run_query(self.env.definition, self.state, name)
        return model.model_validate(answer) if model is not None else answer

