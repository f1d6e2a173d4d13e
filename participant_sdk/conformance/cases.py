"""The contract cases: each drives the participant over Kafka and checks what comes back.

Every case uses a fresh saga id, so the participant's barrier starts empty for it. The cases
follow ``docs/wire-protocol.md``: each phase, duplicates answered from the barrier, null
compensation, a hanging try refused, unknown actions and participants, unknown fields
ignored, undecodable and future-protocol commands left unanswered, trace context continued,
reply ids and headers.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from participant_sdk.conformance.wire import KitWire, Received
from participant_sdk.protocol import (
    HEADER_MESSAGE_ID,
    HEADER_MESSAGE_KIND,
    HEADER_PROTOCOL,
    HEADER_TRACEPARENT,
    KIND_REPLY,
    PROTOCOL_VERSION,
    CommandEnvelope,
    ErrorKind,
    Outcome,
    Phase,
    ReplyEnvelope,
    encode,
    reply_message_id,
)

__all__ = ["ActionSpec", "CaseResult", "KitConfig", "run_cases"]

#: How long a case waits, after a later command of the same saga was answered, for a reply
#: that must not come (commands of one saga are handled in order).
QUIET_GRACE = 0.5
STEP = "conformance-step"
SAGA_TYPE = "conformance"
UNKNOWN_ACTION = "conformance-unknown-action"


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One action the participant handles: its name, its kind and a payload it accepts."""

    name: str
    kind: Literal["tcc", "saga"] = "tcc"
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def forward(self) -> Phase:
        return Phase.TRY if self.kind == "tcc" else Phase.ACTION

    @property
    def rollback(self) -> Phase:
        return Phase.CANCEL if self.kind == "tcc" else Phase.COMPENSATE


@dataclass(frozen=True, slots=True)
class KitConfig:
    bootstrap: str
    prefix: str
    participant: str
    actions: tuple[ActionSpec, ...]
    #: Seconds to wait for one reply.
    timeout: float = 10.0
    #: Seconds to wait for the very first reply (the participant may still be joining).
    startup_timeout: float = 30.0
    #: An existing topic for the replies (kept); default: a private one made for the run.
    reply_topic: str | None = None


@dataclass(frozen=True, slots=True)
class CaseResult:
    name: str
    passed: bool
    detail: str
    seconds: float

    def line(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return f"{verdict}  {self.name} ({self.seconds:.2f}s): {self.detail}"


class CaseFailed(Exception):
    """The participant broke the contract; the message says how."""


class _Session:
    """What every case needs: the wire, the config, and command/reply helpers."""

    def __init__(self, wire: KitWire, config: KitConfig) -> None:
        self.wire = wire
        self.config = config
        self.sent: dict[uuid.UUID, CommandEnvelope] = {}
        self._answered_once = False
        #: Why the remaining cases are not worth running (the participant never answered).
        self.unreachable: str | None = None

    def command(self, action: ActionSpec | str, phase: Phase, saga_id: uuid.UUID, *,
                attempt: int = 1, participant: str | None = None) -> CommandEnvelope:
        spec = action if isinstance(action, ActionSpec) else ActionSpec(action)
        return CommandEnvelope(
            message_id=uuid.uuid4(), saga_id=saga_id, saga_type=SAGA_TYPE, step=STEP,
            phase=phase, attempt=attempt, participant=participant or self.config.participant,
            action=spec.name, payload=spec.payload, reply_to=self.wire.reply_topic)

    async def ask(self, command: CommandEnvelope, *, body: bytes | None = None,
                  extra_headers: list[tuple[str, bytes]] | None = None) -> Received:
        """Send and wait for the reply; fail the case unless it answers this command."""
        self.sent[command.message_id] = command
        seen = len(self.wire.replies_to(command.message_id))
        await self.wire.send(command, body=body, extra_headers=extra_headers)
        timeout = self.config.timeout if self._answered_once else self.config.startup_timeout
        try:
            received = await self.wire.reply(command.message_id, timeout, seen=seen)
        except TimeoutError as exc:
            if not self.wire.received:  # not one reply yet: every other case would wait too
                self.unreachable = (
                    f"no reply at all; is {self.config.participant!r} running, consuming "
                    f"{self.wire.command_topic!r} and replying to the command's reply_to?")
            raise CaseFailed(f"{command.phase.value} attempt {command.attempt}: {exc}") from None
        self._answered_once = True
        assert received.reply is not None
        _check_addressed(command, received.reply)
        return received

    async def answer(self, command: CommandEnvelope) -> ReplyEnvelope:
        reply = (await self.ask(command)).reply
        assert reply is not None
        return reply

    async def expect(self, command: CommandEnvelope, outcome: Outcome,
                     kind: ErrorKind | None = None) -> ReplyEnvelope:
        reply = await self.answer(command)
        got_kind = reply.error.kind if reply.error is not None else None
        if reply.outcome is not outcome or (kind is not None and got_kind is not kind):
            want = f"{outcome.value}" + (f"/{kind.value}" if kind else "")
            raise CaseFailed(
                f"{command.phase.value} attempt {command.attempt}: expected {want}, got "
                f"{reply.outcome.value}/{got_kind.value if got_kind else None}"
                + (f" ({reply.error.message[:200]})" if reply.error else ""))
        return reply

    async def quiet_then_answered(self, saga_id: uuid.UUID, probe: CommandEnvelope) -> None:
        """Nothing but the probe's reply arrives for ``saga_id`` (sent after the bad one)."""
        await self.ask(probe)
        await asyncio.sleep(QUIET_GRACE)
        stray = [r for r in self.wire.for_saga(saga_id)
                 if r.reply is None or r.reply.in_reply_to != probe.message_id]
        if stray:
            raise CaseFailed(f"answered a command it must ignore: {stray[0].value!r:.300}")


def _check_addressed(command: CommandEnvelope, reply: ReplyEnvelope) -> None:
    copied = ("saga_id", "step", "phase", "attempt", "participant")
    wrong = [f"{name}={getattr(reply, name)!r} (command: {getattr(command, name)!r})"
             for name in copied if getattr(reply, name) != getattr(command, name)]
    if reply.protocol > command.protocol:
        wrong.append(f"protocol={reply.protocol} (newer than the command's {command.protocol})")
    if wrong:
        raise CaseFailed("reply does not copy the command's " + ", ".join(wrong))


def _same_answer(first: ReplyEnvelope, again: ReplyEnvelope, what: str) -> None:
    def answer(r: ReplyEnvelope) -> tuple[Any, ...]:
        return (r.outcome, r.result, r.error.kind if r.error else None)

    if answer(first) != answer(again):
        raise CaseFailed(
            f"{what} was not answered from the barrier: first {answer(first)}, "
            f"then {answer(again)}")


# -- cases per action ------------------------------------------------------------------------

Case = Callable[[_Session, ActionSpec], Awaitable[str]]


async def forward_then_finish(s: _Session, a: ActionSpec) -> str:
    saga = uuid.uuid4()
    await s.expect(s.command(a, a.forward, saga), Outcome.OK)
    if a.kind == "tcc":
        await s.expect(s.command(a, Phase.CONFIRM, saga), Outcome.OK)
        return "try ok, confirm ok"
    return "action ok"


async def forward_then_rollback(s: _Session, a: ActionSpec) -> str:
    saga = uuid.uuid4()
    await s.expect(s.command(a, a.forward, saga), Outcome.OK)
    await s.expect(s.command(a, a.rollback, saga), Outcome.OK)
    return f"{a.forward.value} ok, {a.rollback.value} ok"


async def duplicate_forward(s: _Session, a: ActionSpec) -> str:
    saga = uuid.uuid4()
    first = s.command(a, a.forward, saga)
    original = await s.expect(first, Outcome.OK)
    _same_answer(original, await s.answer(first), "a re-sent command")
    retry = s.command(a, a.forward, saga, attempt=2)
    _same_answer(original, await s.answer(retry), "a retry (attempt 2)")
    await s.expect(s.command(a, a.rollback, saga), Outcome.OK)
    return f"re-sent and retried {a.forward.value} got the stored reply"


async def duplicate_confirm(s: _Session, a: ActionSpec) -> str:
    saga = uuid.uuid4()
    await s.expect(s.command(a, a.forward, saga), Outcome.OK)
    first = await s.expect(s.command(a, Phase.CONFIRM, saga), Outcome.OK)
    again = await s.expect(s.command(a, Phase.CONFIRM, saga, attempt=2), Outcome.OK)
    _same_answer(first, again, "a retried confirm")
    return "retried confirm got the stored reply"


async def duplicate_rollback(s: _Session, a: ActionSpec) -> str:
    saga = uuid.uuid4()
    await s.expect(s.command(a, a.forward, saga), Outcome.OK)
    first = await s.expect(s.command(a, a.rollback, saga), Outcome.OK)
    again = await s.expect(s.command(a, a.rollback, saga, attempt=2), Outcome.OK)
    _same_answer(first, again, f"a retried {a.rollback.value}")
    return f"retried {a.rollback.value} got the stored reply"


async def null_compensation(s: _Session, a: ActionSpec) -> str:
    await s.expect(s.command(a, a.rollback, uuid.uuid4()), Outcome.OK)
    return f"{a.rollback.value} without {a.forward.value} is ok"


async def hanging_forward(s: _Session, a: ActionSpec) -> str:
    saga = uuid.uuid4()
    await s.expect(s.command(a, a.rollback, saga), Outcome.OK)
    refused = ErrorKind.BARRIER_REFUSED
    await s.expect(s.command(a, a.forward, saga), Outcome.REJECTED, refused)
    await s.expect(s.command(a, a.forward, saga, attempt=2), Outcome.REJECTED, refused)
    return f"{a.forward.value} after {a.rollback.value}: rejected/barrier_refused, twice"


#: (name, case, the action kinds it applies to).
PER_ACTION: tuple[tuple[str, Case, frozenset[str]], ...] = (
    ("each phase", forward_then_finish, frozenset({"tcc", "saga"})),
    ("rollback after forward", forward_then_rollback, frozenset({"tcc", "saga"})),
    ("duplicate forward answered from the barrier", duplicate_forward,
     frozenset({"tcc", "saga"})),
    ("duplicate confirm answered from the barrier", duplicate_confirm, frozenset({"tcc"})),
    ("duplicate rollback answered from the barrier", duplicate_rollback,
     frozenset({"tcc", "saga"})),
    ("null compensation", null_compensation, frozenset({"tcc", "saga"})),
    ("hanging forward refused", hanging_forward, frozenset({"tcc", "saga"})),
)


# -- cases run once, with the first action -----------------------------------------------------

async def unknown_action(s: _Session, a: ActionSpec) -> str:
    command = s.command(ActionSpec(UNKNOWN_ACTION, a.kind, a.payload), a.forward, uuid.uuid4())
    await s.expect(command, Outcome.REJECTED, ErrorKind.BAD_COMMAND)
    return f"action {UNKNOWN_ACTION!r}: rejected/bad_command"


async def other_participant(s: _Session, a: ActionSpec) -> str:
    name = f"{s.config.participant}-not"
    command = s.command(a, a.forward, uuid.uuid4(), participant=name)
    reply = await s.answer(command)
    if reply.outcome is not Outcome.REJECTED or reply.error is None or (
            reply.error.kind is not ErrorKind.BAD_COMMAND):
        raise CaseFailed(f"a command for {name!r} got {reply.outcome.value}, not bad_command")
    return f"addressed to {name!r}: rejected/bad_command"


async def unknown_fields_ignored(s: _Session, a: ActionSpec) -> str:
    saga = uuid.uuid4()
    command = s.command(a, a.forward, saga)
    body = json.loads(encode(command))
    body["conformance_future_field"] = {"added": "in a later minor revision"}
    received = await s.ask(command, body=json.dumps(body).encode())
    if received.reply is None or received.reply.outcome is not Outcome.OK:
        outcome = received.reply.outcome.value if received.reply else None
        raise CaseFailed(f"a command with an unknown field got {outcome}, not ok")
    await s.expect(s.command(a, a.rollback, saga), Outcome.OK)
    return "an extra envelope field changed nothing"


async def undecodable_ignored(s: _Session, a: ActionSpec) -> str:
    saga = uuid.uuid4()
    await s.wire.send(s.command(a, a.forward, saga), body=b"\x00conformance: not JSON")
    await s.quiet_then_answered(saga, s.command(a, a.rollback, saga))
    return "no reply to garbage; the next command of the saga was answered"


async def future_protocol_ignored(s: _Session, a: ActionSpec) -> str:
    saga = uuid.uuid4()
    future = s.command(a, a.forward, saga).model_copy(update={"protocol": PROTOCOL_VERSION + 1})
    await s.wire.send(future)
    await s.quiet_then_answered(saga, s.command(a, a.rollback, saga))
    return f"no reply to protocol {PROTOCOL_VERSION + 1}; the next command was answered"


async def trace_continued(s: _Session, a: ActionSpec) -> str:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    parent = f"00-{trace_id}-{span_id}-01"
    received = await s.ask(s.command(a, a.rollback, uuid.uuid4()),
                           extra_headers=[(HEADER_TRACEPARENT, parent.encode())])
    values = received.header_values(HEADER_TRACEPARENT)
    if len(values) != 1:
        raise CaseFailed(f"the reply carries {len(values)} traceparent headers, not 1: {values}")
    parts = values[0].split("-")
    if len(parts) != 4 or parts[1] != trace_id or not int(parts[3] or "0", 16) & 1:
        raise CaseFailed(f"reply traceparent {values[0]!r} does not continue {parent!r}")
    return "one traceparent, same trace, still sampled"


async def reply_ids(s: _Session, a: ActionSpec) -> str:
    del a
    checked = 0
    for r in s.wire.received:
        if r.reply is None or r.reply.in_reply_to not in s.sent:
            continue
        want = reply_message_id(r.reply.in_reply_to)
        if r.reply.message_id != want:
            raise CaseFailed(f"reply to {r.reply.in_reply_to} has message_id "
                             f"{r.reply.message_id}, the rule gives {want}")
        checked += 1
    return f"{checked} replies, each uuid5(REPLY_ID_NAMESPACE, command message_id)"


async def reply_keys_and_headers(s: _Session, a: ActionSpec) -> str:
    del a
    checked = 0
    for r in s.wire.received:
        reply = r.reply
        if reply is None or reply.in_reply_to not in s.sent:
            continue
        problems = []
        if r.key != str(reply.saga_id).encode():
            problems.append(f"key {r.key!r} is not the saga id")
        if r.header_values(HEADER_MESSAGE_ID) != [str(reply.message_id)]:
            problems.append(f"{HEADER_MESSAGE_ID} {r.header_values(HEADER_MESSAGE_ID)}")
        if r.header_values(HEADER_MESSAGE_KIND) != [KIND_REPLY]:
            problems.append(f"{HEADER_MESSAGE_KIND} {r.header_values(HEADER_MESSAGE_KIND)}")
        if r.header_values(HEADER_PROTOCOL) != [str(reply.protocol)]:
            problems.append(f"{HEADER_PROTOCOL} {r.header_values(HEADER_PROTOCOL)}")
        if problems:
            raise CaseFailed(f"reply to {reply.in_reply_to}: " + "; ".join(problems))
        checked += 1
    return f"{checked} replies keyed by saga id with the three protocol headers"


ONCE: tuple[tuple[str, Case], ...] = (
    ("unknown action refused", unknown_action),
    ("command for another participant refused", other_participant),
    ("unknown envelope fields ignored", unknown_fields_ignored),
    ("undecodable command not answered", undecodable_ignored),
    ("future-protocol command not answered", future_protocol_ignored),
    ("trace context continued", trace_continued),
    # Last: they check every reply the run received.
    ("reply ids deterministic", reply_ids),
    ("reply keys and headers", reply_keys_and_headers),
)


async def run_cases(
    config: KitConfig, on_result: Callable[[CaseResult], None] | None = None
) -> list[CaseResult]:
    """Run every case against the participant; never raises for a contract violation."""
    if not config.actions:
        raise ValueError("name at least one action")
    results: list[CaseResult] = []
    async with KitWire(config.bootstrap, config.prefix, config.participant,
                       config.reply_topic) as wire:
        session = _Session(wire, config)
        plan = [(f"{config.participant}/{a.name} {a.kind}: {name}", case, a)
                for a in config.actions for name, case, kinds in PER_ACTION if a.kind in kinds]
        plan += [(f"{config.participant}: {name}", case, config.actions[0])
                 for name, case in ONCE]
        for name, case, action in plan:
            started = time.monotonic()
            if session.unreachable:
                detail, passed = "not run: " + session.unreachable, False
            else:
                try:
                    detail, passed = await case(session, action), True
                except CaseFailed as exc:
                    detail, passed = str(exc), False
            result = CaseResult(name, passed, detail, time.monotonic() - started)
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results
