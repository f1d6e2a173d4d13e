"""What a function instance keeps between invocations, and the batch entry point's shape."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from participant_sdk.records import InboundRecord

if TYPE_CHECKING:
    from participant_sdk.batch import CommandBatchHandler

__all__ = ["FunctionLoop", "RecordBatch", "command_batch"]

T = TypeVar("T")

#: A batch entry point: answers the records, returns the indexes of those to redeliver.
RecordBatch = Callable[[Sequence[InboundRecord]], Awaitable[Sequence[int]]]


def command_batch(handler: CommandBatchHandler) -> RecordBatch:
    """The participant's command batch as a :data:`RecordBatch`."""

    async def run(records: Sequence[InboundRecord]) -> Sequence[int]:
        return (await handler.handle(records)).failed

    return run


class FunctionLoop:
    """One event loop for the life of a warm instance.

    A synchronous handler (AWS Lambda's Python runtime) runs each invocation on it, so the
    connection pool and the producer opened by the first invocation serve the next ones: a
    fresh ``asyncio.run`` per call would strand them on a closed loop.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def close(self, cleanup: Coroutine[Any, Any, Any] | None = None) -> None:
        """Run ``cleanup`` (closing pools and producers) on the loop, then close the loop."""
        if self._loop is None or self._loop.is_closed():
            if cleanup is not None:
                cleanup.close()
            return
        try:
            if cleanup is not None:
                self._loop.run_until_complete(cleanup)
        finally:
            self._loop.close()
