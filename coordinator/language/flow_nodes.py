"""Catch-and-fallback and loops: the composites that change a saga's control flow.

::

    Catch("pay", body=TccStep("card", "payments", "charge"),
          fallback=SagaStep("invoice", "billing", "send_invoice", compensable=True),
          failures=("business", "deadline"))
    Loop("poll", body=SagaStep("check", "carrier", "status", compensable=False),
         until=lambda ctx: ctx.results["check"]["delivered"], max_iterations=20)

A :class:`Catch` runs ``body``; when the body fails for good with a failure it catches, the
body's completed steps are undone (``undo="first"``, the default) or kept
(``undo="kept"``), then ``fallback`` runs in its place. A :class:`Loop` runs ``body`` once,
then again until ``until`` holds, at most ``max_iterations`` times.
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
from dataclasses import KW_ONLY, dataclass
from datetime import timedelta
from typing import Any, Final, Literal

from coordinator.language.steps import Guard, SagaStep

__all__ = [
    "CATCHABLE",
    "ITERATIONS_CEILING",
    "Catch",
    "Loop",
    "catch_kinds",
    "flow_problems",
]

#: What a :class:`Catch` can name in ``failures``, and what each failure is:
CATCHABLE: Final[dict[str, str]] = {
    "business": "a participant rejected the command, a child saga failed, or a person "
                "rejected a human task",
    "deadline": "no reply before the step's deadline, retries used up",
    "timeout": "a wait for a signal, a human task or a node timed out",
    "transient": "transient errors until the retries were used up",
    "unexpected": "unexpected errors until the retries were used up",
    "bad_command": "the participant could not decode or route the command",
    "barrier_refused": "the participant's barrier refused the command",
    "malformed_reply": "the participant's reply was malformed",
    "mapper": "a payload mapper, guard, item list or loop condition raised",
    "max_iterations": "a loop reached max_iterations without its condition met",
    "node": "any other node failure (a race lost, too many items)",
}
#: Hard ceiling on a loop's ``max_iterations`` (each iteration keeps its nodes' state).
ITERATIONS_CEILING: Final = 10_000


@dataclass(frozen=True)
class Catch:
    """Run ``body``; on a failure it catches (``failures``: kinds of :data:`CATCHABLE`, or
    ``"all"``) run ``fallback`` instead. The fallback's outcome is the node's: its result is
    the node's result, and its failure fails the node (an outer catch or the saga's rollback
    takes it). ``undo="first"`` undoes what the body completed before the fallback starts;
    ``undo="kept"`` keeps it (a tried TCC step is confirmed with the rest), undoing only what
    failed or was in flight (its effect is unknown). The fallback's mappers see the caught
    failure as ``ctx.caught`` (``{"kind", "reason", "node"}``). Without a match the failure
    goes on up, as if there were no catch; the innermost matching catch wins."""

    name: str
    body: Any
    fallback: Any
    _: KW_ONLY
    #: The failure kinds caught (required: say ``"all"`` to catch everything).
    failures: str | tuple[str, ...] | None = None
    undo: Literal["first", "kept"] = "first"
    #: Fail the node (``"fail"``, kind ``timeout``) or park the saga as dead (``"dead"``)
    #: once it has run this long (``None``: no limit); see :mod:`coordinator.language.timeouts`.
    timeout: timedelta | None = None
    on_timeout: Literal["fail", "dead"] = "fail"
    description: str = ""


@dataclass(frozen=True)
class Loop:
    """Do-while: run ``body`` (a node or a tuple of nodes, in order), then evaluate
    ``until`` on the results; run it again while ``until`` is false. ``until`` sees the
    iteration just finished: its nodes by their bare names in ``ctx.results``, its number
    (from 0) as ``ctx.index``. Iteration ``i`` runs under the keys ``name[i].<node>``, like a
    for-each item. Reaching ``max_iterations`` (required) without ``until`` true fails the node
    (failure kind ``"max_iterations"``, which a :class:`Catch` can catch). The result is the
    list of iteration results (each the body's last result), in order."""

    name: str
    body: Any
    _: KW_ONLY
    until: Guard | None = None
    max_iterations: int | None = None
    #: Fail the node (``"fail"``, kind ``timeout``) or park the saga as dead (``"dead"``)
    #: once it has run this long (``None``: no limit); see :mod:`coordinator.language.timeouts`.
    timeout: timedelta | None = None
    on_timeout: Literal["fail", "dead"] = "fail"
    description: str = ""


def catch_kinds(node: Catch) -> tuple[str, ...]:
    """The kinds a catch names, ``("all",)`` for all (as compiled and exported)."""
    return (node.failures,) if isinstance(node.failures, str) else tuple(node.failures or ())


def flow_branches(node: Catch | Loop) -> list[tuple[str, Any]]:
    if isinstance(node, Catch):
        return [("body", node.body), ("fallback", node.fallback)]
    return [("body", node.body)]


def flow_problems(at: str, node: Catch | Loop) -> list[str]:
    """The node's own problems (its branches are checked like every composite's)."""
    out: list[str] = []
    if isinstance(node, Loop):
        if node.until is None or not callable(node.until):
            out.append(f"{at}: until must be a function of the context returning true when "
                       f"the loop is done, got {node.until!r}")
        cap = node.max_iterations
        if cap is None:
            out.append(f"{at}: max_iterations is required (a loop needs a bound: "
                       "reaching it fails the node)")
        elif not isinstance(cap, int) or isinstance(cap, bool) or \
                not 1 <= cap <= ITERATIONS_CEILING:
            out.append(f"{at}: max_iterations must be an int from 1 to {ITERATIONS_CEILING}, "
                       f"got {cap!r}")
        return out
    on = node.failures
    if on is None:
        out.append(f"{at}: failures is required: the failure kinds caught ("
                   + ", ".join(CATCHABLE) + ') or "all"')
    elif isinstance(on, str):
        if on != "all" and on not in CATCHABLE:
            out.append(_unknown_kind(at, on))
    elif not isinstance(on, tuple | list) or not on:
        out.append(f"{at}: failures must be \"all\" or a non-empty tuple of failure kinds, "
                   f"got {on!r}")
    else:
        out.extend(_unknown_kind(at, k) for k in on if k not in CATCHABLE)
    if node.undo not in ("first", "kept"):
        out.append(f"{at}: undo must be 'first' (undo the failed branch, then run the "
                   f"fallback) or 'kept' (keep what it completed), got {node.undo!r}")
    if node.undo == "first":
        out.extend(f"{at}: body step {name!r} cannot be undone (compensable=False); with "
                   "undo='first' the catch must undo it: make it compensable or declare "
                   "undo='kept'" for name in _irreversible(node.body))
    return out


def _unknown_kind(at: str, kind: Any) -> str:
    return f"{at}: unknown failure kind {kind!r} in failures (known: {', '.join(CATCHABLE)}, all)"


def _irreversible(value: Any) -> cabc.Iterator[str]:
    """Names of the saga steps under ``value`` (a branch, or any node's fields) that declare
    no compensation."""
    if isinstance(value, SagaStep):
        if value.compensable is False:
            yield value.name
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _irreversible(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _irreversible(getattr(value, f.name))
