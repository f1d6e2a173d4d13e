"""Shared by the node-tree tests: a participant model with a real barrier, random trees, and
the invariant checks every run must pass."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from hypothesis import strategies as st
from pydantic import BaseModel

from coordinator.engine import (
    CompiledSaga,
    InvalidTransition,
    RepairVerb,
    ReplyReceived,
    SagaState,
    Status,
    StepPhase,
    advance,
    compile_saga,
)
from coordinator.engine.compiled import CompiledGroup, CompiledStep, GroupKind
from coordinator.engine.machine import SAGA_EDGES, node_edges
from coordinator.engine.simulate import Simulator
from coordinator.engine.updates import declared_updates
from coordinator.language.flow_nodes import Catch, Loop
from coordinator.language.nodes import (
    ChildSaga,
    Choice,
    ForEach,
    Parallel,
    Patched,
    Race,
    Sequence,
    Sleep,
    WaitForSignal,
)
from coordinator.language.saga import RetryPolicy, Saga, SagaStep, TccStep
from coordinator.language.tasks import Approval, Escalation, HumanTask
from coordinator.language.updates import Update
from coordinator.store.errors import TooManySignals
from coordinator.store.update_errors import SagaFinishedForUpdates
from coordinator.testing.updates import send_update
from participant_sdk.protocol import CommandEnvelope, ErrorKind, Outcome, Phase

FAST = RetryPolicy(max_attempts=2, initial_backoff=timedelta(milliseconds=10))
ENDS = {Status.COMPLETED, Status.COMPENSATED, Status.CANCELLED, Status.DEAD}


class TreeInput(BaseModel):
    n: int = 3
    flag: bool = True


@dataclass
class Participants:
    """Every participant at once, with the barrier of ``participant_sdk``: one stored outcome
    per (step, phase); an undo first marks its forward phase, so a late forward is refused
    and an undo with nothing applied is a null compensation."""

    stored: dict[tuple[str, Phase], tuple[Outcome, ErrorKind | None]] = field(
        default_factory=dict)
    applied: dict[str, bool] = field(default_factory=dict)
    undo_effects: dict[str, int] = field(default_factory=dict)
    confirmed: set[str] = field(default_factory=set)
    #: Confirms of a try that never succeeded (legal only after an operator's skip).
    blind_confirms: set[str] = field(default_factory=set)

    def answer(self, sim: Simulator, cmd: CommandEnvelope, want: Outcome = Outcome.OK,
               kind: ErrorKind | None = None) -> None:
        outcome, error = self._decide(cmd, want, kind)
        sim.reply_to(cmd, outcome, kind=error, result={"from": cmd.step})

    def _decide(self, cmd: CommandEnvelope, want: Outcome, kind: ErrorKind | None
                ) -> tuple[Outcome, ErrorKind | None]:
        key, phase = cmd.step, cmd.phase
        if (key, phase) in self.stored:
            return self.stored[(key, phase)]  # a duplicate gets the stored reply
        if phase.is_forward:
            if want is Outcome.OK:
                self.applied[key] = True
            if want is not Outcome.FAILED:
                self.stored[(key, phase)] = (want, kind)
            return want, kind
        forward = Phase.TRY if phase in (Phase.CONFIRM, Phase.CANCEL) else Phase.ACTION
        if phase is Phase.CONFIRM:
            if self.stored.get((key, forward), (None,))[0] is not Outcome.OK:
                self.blind_confirms.add(key)
            self.confirmed.add(key)
        else:
            if want is Outcome.FAILED:
                return want, ErrorKind.TRANSIENT  # rolled back: no effect, nothing stored
            if (key, forward) not in self.stored:  # null compensation; late try refused
                self.stored[(key, forward)] = (Outcome.REJECTED, ErrorKind.BARRIER_REFUSED)
            elif self.applied.get(key):
                self.applied[key] = False
                self.undo_effects[key] = self.undo_effects.get(key, 0) + 1
        self.stored[(key, phase)] = (Outcome.OK, None)
        return Outcome.OK, None


# -- random trees --------------------------------------------------------------------------


def _leaf(draw: st.DrawFn, names: itertools.count[int], in_race: bool) -> Any:
    name = f"s{next(names)}"
    guard = draw(st.sampled_from([None, None, None, "flag", "not_flag"]))
    when = None if guard is None else (
        (lambda ctx: ctx.input.flag) if guard == "flag" else (lambda ctx: not ctx.input.flag))
    kind = draw(st.sampled_from(["tcc", "tcc", "tcc", "saga", "saga", "saga", "child",
                                 "sleep", "wait", "task"]))
    if kind == "task":  # the random driver claims and completes it; its timeout ends it
        return HumanTask(name, title=name, users=("u",), groups=("g",),
                         remind_after=timedelta(minutes=30), max_reminders=1,
                         escalations=(Escalation(after=timedelta(minutes=40), to_users=("v",)),),
                         timeout=timedelta(hours=1),
                         on_timeout=draw(st.sampled_from(["reject", TIMEOUT_DECISION])))
    if kind == "wait":  # the random driver sends signals (some early, some twice)
        return WaitForSignal(name, draw(st.sampled_from(["go", "stop"])),
                             timeout=timedelta(hours=1),
                             on_timeout=draw(st.sampled_from(["fail", "continue"])))
    if kind == "sleep":  # a durable sleep: the random driver fires its timer whenever
        return Sleep(name, timedelta(days=draw(st.sampled_from([0, 1, 30]))))
    if kind == "child":  # answered like a participant: the Simulator plays the child
        return ChildSaga(name, "child_type", when=when, finish_retry=FAST,
                         **_timeout(draw))
    if kind == "tcc":
        return TccStep(name, f"p{name}", "do", retry=FAST, when=when)
    compensable = True if in_race else draw(st.sampled_from([True, True, True, False]))
    return SagaStep(name, f"p{name}", "do", compensable=compensable, retry=FAST, when=when)


@st.composite
def nodes(draw: st.DrawFn, names: itertools.count[int], depth: int = 0,
          in_race: bool = False, in_each: bool = False) -> Any:
    """A random node: up to three levels of composites, no for-each inside a for-each (the
    unit tests cover nesting; here it would only multiply the size)."""
    if depth >= 3 or draw(st.integers(0, 9)) < 4:
        return _leaf(draw, names, in_race)
    kinds = ["sequence", "parallel", "race", "choice", "patched", "catch"] + (
        [] if in_each else ["foreach", "loop"])
    kind = draw(st.sampled_from(kinds))
    name = f"g{next(names)}"
    race, each = in_race or kind == "race", in_each or kind in ("foreach", "loop")
    limit = _timeout(draw) if kind != "patched" else {}

    def branch() -> Any:
        width = draw(st.integers(1, 2))
        kids = tuple(draw(nodes(names, depth + 1, race, each)) for _ in range(width))
        if width > 1 and len(_before_guards(kids)) == 1:
            return kids[0]  # a guard beside a branch's only node: a definition error
        return kids if width > 1 else kids[0]

    if kind == "sequence":
        return Sequence(name, tuple(draw(nodes(names, depth + 1, race, each))
                                    for _ in range(draw(st.integers(1, 3)))), **limit)
    if kind == "parallel":
        return Parallel(name, tuple(branch() for _ in range(draw(st.integers(1, 3)))),
                        **limit)
    if kind == "race":
        count = draw(st.integers(1, 3))
        return Race(name, tuple(branch() for _ in range(count)),
                    quorum=draw(st.integers(1, count)),
                    verdicts=draw(st.sampled_from(["decided", "decided", "first_rejection",
                                                   "all"])), **limit)
    if kind == "foreach":
        body = branch()
        return ForEach(name, items=lambda ctx: list(range(ctx.input.n)),
                       body=body if isinstance(body, tuple) else (body,),
                       max_concurrency=draw(st.sampled_from([None, 1, 2])), max_items=5,
                       **limit)
    if kind == "loop":  # do-while: n iterations wanted, a cap that may cut it short
        body = branch()
        return Loop(name, body=body if isinstance(body, tuple) else (body,),
                    until=lambda ctx: ctx.index + 1 >= ctx.input.n,
                    max_iterations=draw(st.sampled_from([1, 2, 3])))
    if kind == "catch":  # undo="first" undoes the body: its steps must be reversible
        undo = draw(st.sampled_from(["first", "kept"]))
        width = draw(st.integers(1, 2))
        body = tuple(draw(nodes(names, depth + 1, race or undo == "first", each))
                     for _ in range(width))
        return Catch(name, body=body, fallback=branch(), undo=undo,
                     failures=draw(st.sampled_from(["all", "all", ("business",),
                                                   ("transient", "deadline"),
                                                   ("business", "timeout", "max_iterations")])))
    if kind == "patched":  # a version guard: a new saga takes ``new``
        return Patched(f"change-{name}", new=branch(),
                       old=branch() if draw(st.booleans()) else None)
    return Choice(name, ((lambda ctx: ctx.input.flag, branch()),),
                  otherwise=branch() if draw(st.booleans()) else None, **limit)


def _timeout(draw: st.DrawFn) -> dict[str, Any]:
    """A composite's (or a child saga's) own timeout, now and then: the random driver fires
    its timer whenever, so it passes at any point of the node's run."""
    limit = draw(st.sampled_from([None, None, timedelta(minutes=45)]), label="timeout")
    if limit is None:
        return {}
    return {"timeout": limit, "on_timeout": draw(st.sampled_from(["fail", "fail", "dead"]),
                                                 label="on_timeout")}


def _before_guards(kids: tuple[Any, ...]) -> list[Any]:
    """A branch's nodes before its guards were written (each guard by its old path)."""
    out: list[Any] = []
    for kid in kids:
        if isinstance(kid, Patched):
            old = kid.old if isinstance(kid.old, tuple) else (kid.old,)
            out.extend(_before_guards(old) if kid.old is not None else ())
        else:
            out.append(kid)
    return out


@st.composite
def tree_steps(draw: st.DrawFn) -> tuple[Any, ...]:
    names = itertools.count()
    return tuple(draw(nodes(names)) for _ in range(draw(st.integers(1, 3))))


def _even(ctx: Any, update: dict[str, Any]) -> str | None:
    return None if update["n"] % 2 == 0 else "odd numbers are refused"


def _noted(ctx: Any, update: dict[str, Any]) -> dict[str, Any]:
    return {"n": update["n"], "at": ctx.now.isoformat(), "done": sorted(ctx.results)}


def updates_for(signals: Any) -> tuple[Update, ...]:
    """An update the random driver sends to every tree (a validator refusing odd numbers, a
    result from the context), and one per signal its waits declare that delivers it."""
    return (Update("note", validate=_even, apply=_noted),
            *(Update(f"{name}_now", validate=_even, apply=_noted, signal=name)
              for name in sorted(signals)))


def compile_tree(steps: tuple[Any, ...], **attrs: Any) -> CompiledSaga:
    base = {"name": "tree", "version": 1, "input_model": TreeInput, "steps": steps, **attrs}
    if "updates" not in attrs:  # the waits' signals decide which signalling updates exist
        bare = compile_saga(type("RandomTree", (Saga,), base))
        base["updates"] = updates_for(bare.signals)
    return compile_saga(type("RandomTree", (Saga,), base))


@st.composite
def definitions(draw: st.DrawFn) -> CompiledSaga:
    """A random tree, now and then with a timeout of the saga's own (rollback or dead)."""
    limit = draw(st.sampled_from([None, None, None, timedelta(hours=2)]), label="saga timeout")
    attrs = {} if limit is None else {
        "timeout": limit, "on_timeout": draw(st.sampled_from(["rollback", "dead"]))}
    return compile_tree(draw(tree_steps()), **attrs)


# -- a guard written into a tree while a saga runs ---------------------------------------------


@dataclass
class _Wrap:
    """Rebuilds a tree with its ``target``-th site guarded: a node of a sequence (the body, a
    ``Sequence``, a for-each body, a branch of several nodes) replaced or preceded by a guard,
    or a whole parallel, race or choice branch replaced by a guard alone."""

    target: int
    new: Any
    insert: bool
    seen: int = 0
    #: What the guard went around: "node", "added" (before a node) or "branch".
    site: str = ""
    #: The dry run's sites by kind ("node": in a sequence, "branch": a whole branch).
    sites: dict[str, list[int]] = field(default_factory=dict)

    def _hit(self, kind: str) -> bool:
        self.sites.setdefault(kind, []).append(self.seen)
        self.seen += 1
        return self.seen - 1 == self.target

    def _guard(self, old: Any) -> Patched:
        return Patched("deployed", new=self.new, old=old)

    def nodes(self, items: tuple[Any, ...]) -> tuple[Any, ...]:
        out: list[Any] = []
        for item in items:
            if self._hit("node"):
                self.site = "added" if self.insert else "node"
                out.extend((self._guard(None), self.node(item)) if self.insert
                           else (self._guard(item),))
            else:
                out.append(self.node(item))
        return tuple(out)

    def branch(self, branch: Any) -> Any:
        if self._hit("branch"):
            self.site = "branch"
            return self._guard(branch)
        return self.nodes(branch) if isinstance(branch, tuple) else self.node(branch)

    def node(self, node: Any) -> Any:
        if isinstance(node, Sequence):
            return replace(node, steps=self.nodes(node.steps))
        if isinstance(node, ForEach | Loop):
            return replace(node, body=self.nodes(node.body))
        if isinstance(node, Catch):
            return replace(node, body=self.nodes(node.body), fallback=self.branch(node.fallback))
        if isinstance(node, Parallel | Race):
            return replace(node, branches=tuple(self.branch(b) for b in node.branches))
        if isinstance(node, Choice):
            return replace(node, branches=tuple((g, self.branch(b)) for g, b in node.branches),
                           otherwise=None if node.otherwise is None
                           else self.branch(node.otherwise))
        return node  # a leaf, or a guard already there: wrapped whole, never entered


@st.composite
def guarded(draw: st.DrawFn, steps: tuple[Any, ...]) -> tuple[tuple[Any, ...], str]:
    """``steps`` with one site put under the version guard ``deployed`` (its new path: one or
    two fresh TCC steps, reversible so that a race may hold them), and the site's kind."""
    dry = _Wrap(target=-1, new=None, insert=False)
    dry.nodes(steps)
    fresh = tuple(TccStep(f"new{i}", f"pnew{i}", "do", retry=FAST)
                  for i in range(draw(st.integers(1, 2), label="new path")))
    kind = draw(st.sampled_from(sorted(dry.sites)), label="site kind")  # branches as often
    wrap = _Wrap(target=draw(st.sampled_from(dry.sites[kind]), label="site"),
                 new=fresh if len(fresh) > 1 else fresh[0],
                 insert=draw(st.booleans(), label="added (old=None)"))
    return wrap.nodes(steps), wrap.site


# -- driving ----------------------------------------------------------------------------------


def outstanding(sim: Simulator) -> list[CommandEnvelope]:
    ids = {s.outstanding.message_id for s in sim.current.steps.values() if s.outstanding}
    return [c for c in sim.sent if c.message_id in ids]


TIMEOUT_DECISION = Approval(outcome="approve", comment="timed out")
#: (action, person, outcome): claims by a candidate and by a stranger, completions either way.
TASK_ACTS = [("claim", "u", "approve"), ("claim", "x", "approve"), ("unclaim", "u", "approve"),
             ("complete", "u", "approve"), ("complete", "u", "reject"),
             ("complete", "v", "approve")]
REPLIES = [Outcome.OK, Outcome.OK, Outcome.OK, Outcome.REJECTED, Outcome.FAILED]
ACTIONS = ["reply", "reply", "reply", "reply", "duplicate", "timer", "timer", "drop",
           "repair", "signal", "task", "update"]


@dataclass
class Run:
    sim: Simulator
    world: Participants
    #: Accepted repairs that may leave an effect applied on purpose (skip, resolve).
    by_hand: bool = False
    cancelled: bool = False
    #: The updates' stored answers, by (saga id, update id), as the store keeps them.
    answers: dict[Any, Any] = field(default_factory=dict)


def drive_randomly(data: st.DataObject, run: Run, steps: int = 60) -> None:
    sim, world = run.sim, run.world
    for _ in range(data.draw(st.integers(0, steps), label="length")):
        if sim.current.status.is_terminal:
            return
        action = data.draw(st.sampled_from(ACTIONS), label="action")
        if action == "reply" and sim.pending:
            cmd = data.draw(st.sampled_from(list(sim.pending.values())), label="command")
            want = data.draw(st.sampled_from(REPLIES), label="outcome")
            world.answer(sim, cmd, want, ErrorKind.BUSINESS if want is Outcome.REJECTED
                         else ErrorKind.TRANSIENT if want is Outcome.FAILED else None)
        elif action == "duplicate" and sim.sent:
            world.answer(sim, data.draw(st.sampled_from(sim.sent), label="old"))
        elif action == "timer" and sim.timers:
            sim.fire(sim.timers[data.draw(st.sampled_from(sorted(sim.timers)), label="t")])
        elif action == "signal" and sim.definition.signals:
            name = data.draw(st.sampled_from(sorted(sim.definition.signals)), label="signal")
            sim.signal(name, signal_id=data.draw(st.sampled_from(["s1", "s2", "s3"]),
                                                 label="signal id"))
        elif action == "update" and (names := sorted(declared_updates(sim.definition))):
            name = data.draw(st.sampled_from(names), label="update")
            n = data.draw(st.integers(0, 3), label="update n")
            update_id = f"{name}-{data.draw(st.integers(0, 2), label='update id')}"
            try:
                answer = send_update(sim, run.answers, name, {"n": n}, update_id)
            except (SagaFinishedForUpdates, TooManySignals):
                continue
            assert (answer.outcome == "accepted") is (n % 2 == 0) or answer.duplicate, answer
        elif action == "task" and (open_ := sorted(
                t["id"] for t in sim.tasks.values() if t["state"] == "open")):
            task = data.draw(st.sampled_from(open_), label="task")
            verb = data.draw(st.sampled_from(TASK_ACTS), label="task act")
            try:
                sim.act(task, verb[0], verb[1], groups=["g"], data={"outcome": verb[2]})
            except InvalidTransition:
                continue
        elif action == "drop" and sim.pending:
            del sim.pending[data.draw(st.sampled_from(sorted(sim.pending, key=str)))]
        elif action == "repair":
            verb = data.draw(st.sampled_from(list(RepairVerb)), label="verb")
            active = sim.current.active_steps() or [None]
            step = data.draw(st.sampled_from([None, *active]), label="step")
            was_dead = sim.current.status is Status.DEAD
            try:
                sim.repair(verb, step=step, result={"manual": True},
                           payload={"status": "compensated"} if verb is RepairVerb.RESOLVE
                           else None)
            except InvalidTransition:
                continue
            # skip, resolve and compensate of a dead saga (a step that cannot be undone is
            # left as is) settle by hand: effects may stay.
            run.by_hand = run.by_hand or verb in (RepairVerb.SKIP, RepairVerb.RESOLVE) or (
                verb is RepairVerb.COMPENSATE and was_dead)
            run.cancelled = run.cancelled or verb is RepairVerb.CANCEL


def busy(state: SagaState) -> bool:
    return any(s.outstanding is not None or s.retry_timer is not None or s.timer is not None
               for s in state.steps.values())


def drain(run: Run) -> None:
    """Participants recover and answer OK; timers fire in order. Must reach an end."""
    sim = run.sim
    for _ in range(20_000):
        if sim.current.status in ENDS and not busy(sim.current):
            return
        live = outstanding(sim)
        if live:
            run.world.answer(sim, live[0])
        elif sim.timers:
            sim.fire_next()
        else:
            raise AssertionError(f"stuck: no command in flight and no timer\n{sim.current}")
    raise AssertionError("did not finish")


# -- invariants -------------------------------------------------------------------------------


def check_moves(sim: Simulator) -> None:
    """Every phase and status change the engine made is an edge of the exported machine."""
    saga_edges = {(a, b) for a, b, _ in SAGA_EDGES}
    for decision in sim.decisions:
        for key, node, source, target in decision.moves:
            if not key:
                assert (source, target) in saga_edges, f"saga move {source} -> {target}"
                continue
            edges = {(a, b) for a, b, _ in node_edges(sim.definition.node(node))}
            assert (source, target) in edges, f"{key} ({node}): move {source} -> {target}"


def check_commands(sim: Simulator) -> None:
    """No undo of a step never sent, no confirm after a cancel, and each command's outcome
    applied once (a late success after a failure is news, not a duplicate)."""
    seen: dict[str, list[Phase]] = {}
    for cmd in sim.sent:
        phases = seen.setdefault(cmd.step, [])
        if cmd.phase.is_rollback:
            assert any(p.is_forward for p in phases), f"{cmd.step}: undo of a step never sent"
        if cmd.phase is Phase.CONFIRM:
            assert Phase.CANCEL not in phases, f"{cmd.step}: confirm after cancel"
        phases.append(cmd.phase)
    applied = [(d.history[0].event.reply.in_reply_to, d.history[0].event.reply.outcome)
               for d in sim.decisions
               if isinstance(d.history[0].event, ReplyReceived) and d.ignored is None]
    assert len(applied) == len(set(applied)), "a reply was applied twice"


def _ordered_pair(sim: Simulator, a: str, b: str) -> bool:
    """Must ``a`` and ``b`` be undone in reverse order of completion? Yes when their closest
    common node runs its children in order and no race lies between them and it (a race
    undoes its losers when it decides, not as part of the saga's rollback)."""
    steps = sim.current.steps

    def chain(key: str) -> list[str]:
        out = []
        parent = steps[key].parent
        while parent is not None:
            out.append(parent)
            parent = steps[parent].parent
        return out

    def kind(key: str) -> GroupKind:
        node = sim.definition.node(steps[key].node)
        assert isinstance(node, CompiledGroup)
        return node.kind

    def caught_body(key: str) -> bool:
        """The body of a catch that caught: undone (or kept) when it failed, not in the
        saga's rollback."""
        up = steps[key].parent
        return (up is not None and kind(up) is GroupKind.CATCH
                and steps[up].payload is not None and steps[key].node.endswith(".body"))

    up_a, up_b = chain(a), chain(b)
    common = next((p for p in up_a if p in set(up_b)), None)
    below = up_a[:up_a.index(common)] + up_b[:up_b.index(common)] if common else up_a + up_b
    if any(kind(k) is GroupKind.RACE or caught_body(k) for k in below):
        return False
    return common is None or kind(common) in (GroupKind.SEQUENCE, GroupKind.CHOICE,
                                              GroupKind.LOOP, GroupKind.CATCH)


def check_invariants(run: Run) -> None:
    sim, world, state = run.sim, run.world, run.sim.current
    assert state.status in ENDS
    assert state.status is not Status.CANCELLED or run.cancelled
    for step in state.steps.values():
        assert step.outstanding is None and step.retry_timer is None and step.timer is None
        assert step.phase is not StepPhase.SLEEPING, f"{step.key} still sleeping at the end"
    for timer in list(sim.timers.values()):  # leftovers are harmless: all stale
        assert sim.fire(timer).ignored is not None
    check_commands(sim)
    assert all(n <= 1 for n in world.undo_effects.values()), "an effect was undone twice"
    _check_undo_order(sim)
    if run.by_hand:
        return  # an operator skipped or resolved by hand: effects may stay on purpose
    assert not world.blind_confirms, f"confirm of a failed try: {world.blind_confirms}"
    left = {k for k, on in world.applied.items() if on}
    if state.status in (Status.COMPENSATED, Status.CANCELLED):
        assert not left, f"effects left after rollback: {sorted(left)}\n{_describe(sim)}"
        assert not world.confirmed, "confirmed in a saga that rolled back"
    if state.status is Status.COMPLETED:
        for key in left:
            spec = sim.definition.node(state.steps[key].node)
            assert isinstance(spec, CompiledStep)
            assert not spec.confirms or key in world.confirmed, \
                f"{key}: tried but never confirmed"
        losers = _race_losers(sim)
        assert not (left & losers), (f"a race loser's effect stayed: {sorted(left & losers)}"
                                     f"\n{_describe(sim)}")


def _race_losers(sim: Simulator) -> set[str]:
    steps = sim.current.steps
    out: set[str] = set()
    for key, state in steps.items():
        node = sim.definition.node(state.node)
        if isinstance(node, CompiledGroup) and node.kind is GroupKind.RACE and state.winners:
            for leaf_key, leaf_state in steps.items():
                if isinstance(sim.definition.node(leaf_state.node), CompiledStep):
                    chain, parent = [leaf_key], leaf_state.parent
                    while parent is not None and parent != key:
                        chain.append(parent)
                        parent = steps[parent].parent
                    if parent == key and not set(chain) & set(state.winners):
                        out.add(leaf_key)
    return out


def _check_undo_order(sim: Simulator) -> None:
    """Along each path (keys whose closest common node runs its children in order), a step
    that completed later is undone before one that completed earlier."""
    state = sim.current
    first_undo: dict[str, int] = {}
    for index, cmd in enumerate(sim.sent):
        if cmd.phase.is_rollback:
            first_undo.setdefault(cmd.step, index)
    done = [k for k in first_undo if state.steps[k].completed_seq is not None]
    for a, b in itertools.combinations(done, 2):
        early, late = sorted((a, b), key=lambda k: state.steps[k].completed_seq or 0)
        if _ordered_pair(sim, early, late):
            assert first_undo[late] < first_undo[early], \
                f"{early} completed before {late} but was undone first\n{_describe(sim)}"


def check_replay(sim: Simulator) -> None:
    assert sim.replayed().to_json() == sim.current.to_json()
    state = None
    for entry, decision in zip(sim.history, sim.decisions, strict=True):
        again = advance(sim.definition, state, entry.event, entry.at)
        assert again == decision, "advance is not deterministic"
        assert SagaState.from_json(again.state.to_json()) == again.state
        state = again.state


def new_run(definition: CompiledSaga, **input: Any) -> Run:
    sim = Simulator(definition, saga_id=uuid.UUID(int=7), play_children=True)
    sim.start(TreeInput(**input).model_dump())
    return Run(sim, Participants())


def all_phases(state: SagaState) -> dict[str, StepPhase]:
    return {k: s.phase for k, s in state.steps.items()}


def _describe(sim: Simulator) -> str:
    """The tree and what was sent, for a failing example."""
    def show(node: Any, pad: str) -> list[str]:
        kids = getattr(node, "children", ())
        extra = f" quorum={node.quorum}" if getattr(node, "kind", None) is GroupKind.RACE else ""
        lines = [f"{pad}{node.kind.value} {node.name}{extra}"]
        for kid in kids:
            lines += show(kid, pad + "  ")
        return lines
    sent = [(c.step, c.phase.value, c.attempt) for c in sim.sent]
    return "\n".join(show(sim.definition.root, "")) + f"\nsent: {sent}\n" + "\n".join(
        h.note for h in sim.history)


@st.composite
def flow_steps(draw: st.DrawFn) -> tuple[Any, ...]:
    """A catch and a loop at the top, each around random subtrees: what the random trees
    reach only now and then, drawn every time."""
    names = itertools.count()
    undo = draw(st.sampled_from(["first", "kept"]))
    body = tuple(draw(nodes(names, 1, undo == "first")) for _ in range(draw(st.integers(1, 2))))
    catch = Catch("catch", body=body, fallback=draw(nodes(names, 1)), undo=undo,
                  failures=draw(st.sampled_from(["all", ("business",), ("deadline",)])))
    loop = Loop("loop", body=(draw(nodes(names, 1, in_each=True)),),
                until=lambda ctx: ctx.index + 1 >= ctx.input.n,
                max_iterations=draw(st.sampled_from([1, 2, 3])))
    return draw(st.permutations([catch, loop]))  # type: ignore[no-any-return]
