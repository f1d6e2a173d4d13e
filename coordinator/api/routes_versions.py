"""``GET /saga-types/{name}/versions``: the drain report of a saga type, with the exported
machine of each registered version and, on request, a diff between two versions."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, Field

from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.errors import BadRequest, NotFound
from coordinator.versioning.drain import VersionDrain, drain_report
from coordinator.versioning.machine_diff import diff_machines

__all__ = ["router"]

router = APIRouter(responses=ERRORS, tags=["sagas"])

Ctx = Annotated[Context, Depends(context)]
Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]


class VersionOut(BaseModel):
    version: int
    registered: bool = Field(description="Whether this API process registers the version.")
    latest: bool
    live: int = Field(description="Sagas scheduled, running or compensating on this version.")
    by_status: dict[str, int] = Field(description="In-flight sagas by status (dead included).")
    oldest_live_id: UUID | None
    oldest_live_at: datetime | None
    last_timer_due: datetime | None = Field(
        description="The latest timer (sleep, deadline, backoff) of a live saga.")
    unbounded: int = Field(description="Live sagas with no timer: their end is not known.")
    expected_last_finish: datetime | None = Field(
        description="last_timer_due when every live saga has a timer, else null.")
    machine: dict[str, Any] | None = Field(
        description="The exported machine, when this process registers the version.")
    guards: dict[str, dict[str, int]] = Field(
        description="Version guards: change id -> live sagas that took old, took new, or are "
                    "undecided. Retire a guard once old and undecided are 0.")


class DiffOut(BaseModel):
    from_version: int
    to_version: int
    states_added: list[str]
    states_removed: list[str]
    transitions_added: list[str]
    transitions_removed: list[str]
    steps_added: list[str]
    steps_removed: list[str]
    steps_changed: list[str]
    input_schema_changed: bool


class VersionsOut(BaseModel):
    saga_type: str
    versions: list[VersionOut]
    diff: DiffOut | None = None


def _version(entry: VersionDrain) -> VersionOut:
    return VersionOut(
        version=entry.version, registered=entry.registered, latest=entry.latest,
        live=entry.live, by_status=entry.by_status, oldest_live_id=entry.oldest_live_id,
        oldest_live_at=entry.oldest_live_at, last_timer_due=entry.last_timer_due,
        unbounded=entry.unbounded, expected_last_finish=entry.expected_last_finish,
        machine=entry.machine, guards=entry.guards)


@router.get("/saga-types/{name}/versions", response_model=VersionsOut,
            summary="Drain report: sagas in flight per version, and a diff of two versions")
async def get_versions(
    ctx: Ctx, _: Viewer,
    name: Annotated[str, Path(min_length=1, max_length=200, description="Saga type.")],
    diff_from: Annotated[int | None, Query(ge=1, description="Diff from this version.")] = None,
    diff_to: Annotated[int | None, Query(ge=1, description="Diff to this version.")] = None,
) -> VersionsOut:
    async with ctx.store.pool.acquire() as conn:
        report = await drain_report(conn, ctx.registry, name)
    if not report:
        raise NotFound(f"no saga type {name!r} is registered or in flight",
                       code="saga_type_not_found")
    out = VersionsOut(saga_type=name, versions=[_version(e) for e in report])
    if (diff_from is None) != (diff_to is None):
        raise BadRequest("give both diff_from and diff_to", code="diff_needs_two_versions")
    if diff_from is not None and diff_to is not None:
        machines = {e.version: e.machine for e in report if e.machine is not None}
        missing = [v for v in (diff_from, diff_to) if v not in machines]
        if missing:
            raise BadRequest(f"{name!r} version {missing[0]} is not registered here "
                             f"(registered: {sorted(machines)})", code="version_not_registered")
        d = diff_machines(machines[diff_from], machines[diff_to])
        out.diff = DiffOut(from_version=diff_from, to_version=diff_to,
                           states_added=d.states_added, states_removed=d.states_removed,
                           transitions_added=d.transitions_added,
                           transitions_removed=d.transitions_removed,
                           steps_added=d.steps_added, steps_removed=d.steps_removed,
                           steps_changed=d.steps_changed,
                           input_schema_changed=d.input_schema_changed)
    return out
