"""Participants that SIGKILL themselves after a commit and before their reply, kept running.

The SDK's test hook (``SAGAFLOW_PARTICIPANT_CRASH_AFTER_COMMIT_FLAG``) kills the process right
after the first command it commits when the flag file does not exist yet; an existing flag
disables it.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.chaos.support.stack import ChaosStack

FLAG = "SAGAFLOW_PARTICIPANT_CRASH_AFTER_COMMIT_FLAG"


async def supervise(stack: ChaosStack, service: str, flags: Path, crashes: list[str], *,
                    armed: int) -> None:
    """Keep ``service`` running: each SIGKILL is a crash (appended to ``crashes``) and a restart
    with a new flag file; the first ``armed`` starts arm the crash hook, later ones do not."""
    starts = 0
    while True:
        proc = stack.procs[service]
        if not proc.alive:
            if proc.popen is not None:
                assert proc.popen.returncode == -signal.SIGKILL, stack.log_tail(service)
                crashes.append(service)
            flag = flags / f"{service}-{starts}"
            if starts >= armed:
                flag.touch()
            stack.start(service, **{FLAG: str(flag)})
            starts += 1
        await asyncio.sleep(0.05)
