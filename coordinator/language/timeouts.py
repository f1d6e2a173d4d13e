"""Timeouts of a whole saga and of a composite node: what a definition may declare.

A saga class bounds its forward run with class attributes::

    class OrderSaga(Saga):
        ...
        timeout = timedelta(hours=2)      # counted from the start (a delayed start: start_at)
        on_timeout = "rollback"           # or "dead": park it for a person

A composite node (``Sequence``, ``Parallel``, ``ForEach``, ``Race``, ``Choice``) and a
``ChildSaga`` take ``timeout=`` and ``on_timeout="fail" | "dead"``: counted from when the node
was entered, ``"fail"`` fails that node (its failure's kind is ``timeout``), as a step's
failure would; the node above decides what that means (a race may still win, a catch may
handle it, else the saga rolls back). Signal waits and human tasks have timeouts of their own.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

__all__ = ["NODE_ACTIONS", "SAGA_ACTIONS", "human", "node_timeout_problems",
           "saga_timeout_problems"]

#: What a saga does when its own timeout passes.
SAGA_ACTIONS = ("rollback", "dead")
#: What a node's timeout does: fail the node, or park the saga as dead.
NODE_ACTIONS = ("fail", "dead")


def human(delta: timedelta) -> str:
    """``2h``, ``1h30m``, ``45s``, ``1d2h``, ``0.5s``: a duration as people write it."""
    total = delta.total_seconds()
    if total < 1:
        return f"{total:g}s"
    out, rest = [], int(total)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if rest >= size:
            out.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(out)


def _problems(at: str, timeout: Any, action: Any, actions: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    if timeout is not None and (not isinstance(timeout, timedelta)
                                or timeout <= timedelta(0)):
        out.append(f"{at}: timeout must be None or a positive timedelta, got {timeout!r}")
    if action not in actions:
        allowed = " or ".join(repr(a) for a in actions)
        out.append(f"{at}: on_timeout must be {allowed}, got {action!r}")
    return out


def saga_timeout_problems(where: str, cls: type) -> list[str]:
    """The class attributes ``timeout`` and ``on_timeout`` of a saga class."""
    return _problems(where, getattr(cls, "timeout", None),
                     getattr(cls, "on_timeout", "rollback"), SAGA_ACTIONS)


def node_timeout_problems(at: str, node: Any) -> list[str]:
    """``timeout`` and ``on_timeout`` of a composite node or a child saga node."""
    return _problems(at, getattr(node, "timeout", None), getattr(node, "on_timeout", "fail"),
                     NODE_ACTIONS)
