"""Schedules declared in code, next to their saga class, and synced by the worker at start-up.

::

    class SettlementSaga(Saga):
        name = "settlement"
        ...
        schedules = (
            DeclaredSchedule("nightly-settlement",
                             ScheduleSpec(cron=("0 2 * * *",), timezone="Europe/Berlin"),
                             input=lambda fire_time: {"day": fire_time.date().isoformat()}),
        )

A declared schedule is stored like an API one (``source = 'code'``); syncing rewrites its
definition when the code changed but keeps an operator's pause. An input given as a function
of the fire time is called by the replica that fires the run, so every replica must load the
same saga classes (they do: ``SAGAFLOW_SAGAS``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from coordinator.schedules import repository as repo
from coordinator.schedules.errors import InvalidSchedule, ScheduleConflict
from coordinator.schedules.firing import InputMapper
from coordinator.schedules.model import Overlap, ScheduleDefinition
from coordinator.schedules.spec import ScheduleSpec
from coordinator.store import SagaStore

__all__ = ["DeclaredSchedule", "declared_mappers", "declared_schedules", "sync_declared"]

log = logging.getLogger(__name__)

CODE_ACTOR = "code"


@dataclass(frozen=True)
class DeclaredSchedule:
    """A schedule of the saga class it is declared on (``schedules = (...)``)."""

    id: str
    spec: ScheduleSpec
    #: A fixed input, or a function of the nominal fire time returning the input.
    input: Mapping[str, Any] | InputMapper = field(default_factory=dict)
    overlap: Overlap = Overlap.SKIP
    catchup_window: timedelta = timedelta(minutes=1)
    jitter: timedelta = timedelta(0)
    fire_time_field: str | None = None
    #: Pin the saga version (default: the latest registered).
    saga_version: int | None = None
    note: str = ""

    def definition(self, saga_type: str) -> ScheduleDefinition:
        return ScheduleDefinition(
            id=self.id, saga_type=saga_type, saga_version=self.saga_version,
            input={} if callable(self.input) else dict(self.input),
            fire_time_field=self.fire_time_field, spec=self.spec, overlap=self.overlap,
            catchup_window=self.catchup_window, jitter=self.jitter, note=self.note)


def declared_schedules(registry: Any) -> list[tuple[str, DeclaredSchedule]]:
    """(saga type, declaration) of every registered class, each class once."""
    seen: set[int] = set()
    found: list[tuple[str, DeclaredSchedule]] = []
    for compiled in registry.types():
        cls = getattr(compiled, "saga_class", None)
        if cls is None or id(cls) in seen:
            continue
        seen.add(id(cls))
        for decl in getattr(cls, "schedules", ()) or ():
            if not isinstance(decl, DeclaredSchedule):
                raise InvalidSchedule(f"{cls.__qualname__}.schedules must hold "
                                      f"DeclaredSchedule objects, got {decl!r}")
            try:
                decl.definition(compiled.name)
            except ValidationError as exc:
                raise InvalidSchedule(f"{cls.__qualname__}.schedules: {decl.id!r}: "
                                      f"{exc.errors(include_url=False)[0]['msg']}") from None
            found.append((compiled.name, decl))
    ids = [d.id for _, d in found]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise InvalidSchedule(f"schedule ids declared twice: {', '.join(dupes)}")
    return found


def declared_mappers(registry: Any) -> dict[str, InputMapper]:
    """The input functions of the declared schedules, by id (for a serverless firer)."""
    return {d.id: d.input for _, d in declared_schedules(registry) if callable(d.input)}


async def sync_declared(store: SagaStore, registry: Any, *, now: datetime
                        ) -> dict[str, InputMapper]:
    """Create or update the declared schedules; return their input functions by id."""
    mappers: dict[str, InputMapper] = {}
    for saga_type, decl in declared_schedules(registry):
        wanted = decl.definition(saga_type)
        if callable(decl.input):
            mappers[decl.id] = decl.input
        async with store.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "SELECT source, paused FROM schedules WHERE id = $1 FOR UPDATE", decl.id)
            if row is None:
                try:
                    await repo.insert(conn, wanted, now=now, actor=CODE_ACTOR, source="code")
                except ScheduleConflict:  # another replica starting at the same moment
                    continue
                log.info("declared schedule %s created", decl.id)
                continue
            if row["source"] != "code":
                log.error("schedule %s is declared in code but an API schedule has that id; "
                          "left as it is", decl.id)
                continue
            wanted = wanted.model_copy(update={"paused": row["paused"]})
            current = repo.definition_of(await repo.get(conn, decl.id))
            if current != wanted:
                await repo.update(conn, wanted, now=now, actor=CODE_ACTOR)
                log.info("declared schedule %s updated from code", decl.id)
    return mappers
