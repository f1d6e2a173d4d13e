"""The event loop sagaflow's processes run on: uvloop when it is installed, else asyncio's.

A participant command, a relay batch and a reply applied are mostly socket round trips, and
uvloop's loop and transports cost less CPU per round trip than asyncio's (measured on a
participant answering over the direct lane, same client and database, three interleaved
rounds: 0.91x the CPU per command at 1 in flight, 0.92x at 16; ``bench/README.md``).
``SAGAFLOW_EVENT_LOOP`` chooses: ``auto`` (the default: uvloop if importable), ``uvloop``
(refuse to start without it) or ``asyncio``. uvicorn makes the same choice for the API.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from participant_sdk.startup_errors import SettingsError

__all__ = ["EVENT_LOOP_SETTING", "loop_factory", "run"]

T = TypeVar("T")

EVENT_LOOP_SETTING = "SAGAFLOW_EVENT_LOOP"
_CHOICES = ("auto", "uvloop", "asyncio")


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory ``choice`` (default: ``$SAGAFLOW_EVENT_LOOP``, else ``auto``) names;
    None means asyncio's default loop."""
    given = os.environ.get(EVENT_LOOP_SETTING, "") if choice is None else choice
    kind = given.strip().lower() or "auto"
    if kind not in _CHOICES:
        raise SettingsError(f"{EVENT_LOOP_SETTING}={given!r}: give auto, uvloop or asyncio")
    if kind == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if kind == "uvloop":
            raise SettingsError(f"{EVENT_LOOP_SETTING}=uvloop, but uvloop is not installed "
                                f"(pip install uvloop, or {EVENT_LOOP_SETTING}=asyncio)") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the chosen loop."""
    try:
        factory = loop_factory()
    except BaseException:
        main.close()  # never awaited: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
