"""Stop promptly when told: SIGTERM or SIGINT ends a process within two seconds, whatever it
is doing (starting, retrying an unreachable service, running, draining).

The first signal asks the process to stop gracefully (``request_stop``); start-up, wherever it
waits, gives up at once (:func:`until_stopped`). If the process is still draining after
:data:`GRACE`, its main task is cancelled: unfinished work is rolled back and redelivered,
which invariant 4 (a process may die at any moment) already allows. If even that has not
ended it by :data:`DEADLINE` (a blocked thread, a stuck close), a watchdog thread ends the
process with :func:`os._exit`. A second signal cancels at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["DEADLINE", "GRACE", "STOP_SIGNALS", "StopSignals", "until_stopped"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds a process may spend draining after the first signal before its main task is
#: cancelled.
GRACE = 1.2
#: Seconds after the first signal when the watchdog ends the process, whatever it does.
DEADLINE = 1.8
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """SIGTERM/SIGINT handlers of a process's main task (install from inside that task).

    ``request_stop`` starts the graceful stop; the grace timer, a second signal and the
    watchdog bound it. ``signalled`` tells a caller whether a cancellation came from here.
    """

    def __init__(self, request_stop: Callable[[], object], *, grace: float = GRACE,
                 deadline: float = DEADLINE, exit_code: int = 0) -> None:
        self._request_stop = request_stop
        self._grace = grace
        self._deadline = deadline
        self._exit_code = exit_code
        self._task: asyncio.Task[object] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.signalled = False

    def install(self) -> None:
        """Handle the signals on the running loop (no-op where it cannot, e.g. off the main
        thread: an embedding application owns the signals there)."""
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        for sig in STOP_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                self._loop.add_signal_handler(sig, self._on_signal, sig)

    def remove(self) -> None:
        if self._loop is None:
            return
        for sig in STOP_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                self._loop.remove_signal_handler(sig)

    def __enter__(self) -> StopSignals:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _on_signal(self, sig: int) -> None:
        if self.signalled:  # a second signal: no more patience
            self._cancel("a second signal")
            return
        self.signalled = True
        # The heap lives until the process ends: spare the interpreter's final collection of
        # it, which takes a second or more for the API's modules on a busy machine.
        gc.freeze()
        log.info("%s received: stopping (at most %.1fs)", signal.Signals(sig).name,
                 self._deadline)
        self._request_stop()
        assert self._loop is not None
        self._loop.call_later(self._grace, self._cancel, f"still stopping after {self._grace}s")
        watchdog = threading.Timer(self._deadline, self._exit_now)
        watchdog.daemon = True
        watchdog.start()

    def _cancel(self, why: str) -> None:
        if self._task is not None and not self._task.done():
            log.warning("%s: abandoning the work in flight (it will be redelivered)", why)
            self._task.cancel()

    def _exit_now(self) -> None:
        sys.stderr.write(f"still running {self._deadline:.1f}s after the stop signal: "
                         "exiting now\n")
        sys.stderr.flush()
        os._exit(self._exit_code)


async def until_stopped(work: Awaitable[T], stop: asyncio.Event) -> tuple[bool, T | None]:
    """Await ``work`` unless ``stop`` is set first, in which case it is cancelled.

    Returns ``(True, result)`` when the work finished, ``(False, None)`` when stopped.
    """
    if stop.is_set():
        if asyncio.iscoroutine(work):
            work.close()  # never awaited: no "coroutine was never awaited" warning
        return False, None
    task = asyncio.ensure_future(work)
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return True, task.result()
        return False, None
    finally:
        stopper.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
