"""Schedules: create, list, inspect, change, pause, resume, trigger, backfill, preview, delete.

Reads need ``viewer``, changes ``operator``; every change is written to the audit log with the
caller's name (and kept as ``updated_by`` on the schedule, ``actor`` on the runs).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from coordinator.api import cursors
from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.errors import ApiError, BadRequest, Conflict, NotFound
from coordinator.api.models import Reason
from coordinator.schedules import (
    ScheduleConflict,
    ScheduleDefinition,
    ScheduleFirer,
    ScheduleNotFound,
    ScheduleSpec,
    ScheduleState,
)
from coordinator.schedules import repository as repo
from coordinator.store import InvalidInput

__all__ = ["router"]

audit = logging.getLogger("coordinator.api.audit")
router = APIRouter(responses=ERRORS, tags=["schedules"])

Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]
Ctx = Annotated[Context, Depends(context)]
ScheduleId = Annotated[str, Path(min_length=1, max_length=128, description="The schedule's id.")]


class ScheduleOut(BaseModel):
    """A schedule: its definition and where its firing stands."""

    definition: ScheduleDefinition
    source: str
    next_fire_at: datetime | None
    last_saga_id: str | None
    buffered: list[datetime]
    fired_count: int
    skipped_count: int
    missed_count: int
    last_fired_at: datetime | None
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str


class RunOut(BaseModel):
    nominal_at: datetime
    outcome: str
    saga_id: str | None
    saga_status: str | None
    reason: str | None
    recorded_at: datetime
    started_at: datetime | None
    #: Nominal fire time -> the saga started.
    lag_seconds: float | None
    actor: str


class SchedulePageOut(BaseModel):
    items: list[ScheduleOut]
    #: Pass back as ``cursor`` for the next page; null on the last one.
    next_cursor: str | None


class RunPageOut(BaseModel):
    items: list[RunOut]
    #: Pass back as ``cursor`` for the next page; null on the last one.
    next_cursor: str | None


class ScheduleDetail(ScheduleOut):
    recent_runs: list[RunOut]
    upcoming: list[datetime]


class ReasonRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Reason


class BackfillRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: datetime
    end: datetime
    reason: Reason
    max_runs: int = Field(default=1000, ge=1, le=10_000)


class BackfillOut(BaseModel):
    outcomes: dict[str, int]


class PreviewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spec: ScheduleSpec
    after: datetime | None = None
    count: int = Field(default=10, ge=1, le=500)


class PreviewOut(BaseModel):
    times: list[datetime]


@contextmanager
def _schedule_errors() -> Iterator[None]:
    try:
        yield
    except ScheduleNotFound as exc:
        raise NotFound(str(exc), code=exc.code) from exc
    except ScheduleConflict as exc:
        raise Conflict(str(exc), code=exc.code) from exc
    except ValueError as exc:  # a spec that validates but has no fire time (calendar...)
        raise ApiError(str(exc), code="invalid_schedule", status=422) from exc


def _out(state: ScheduleState) -> ScheduleOut:
    return ScheduleOut.model_validate(state.model_dump(exclude={"due_at"}))


def _run(row: dict[str, Any]) -> RunOut:
    started = row["started_at"]
    return RunOut(
        nominal_at=row["nominal_at"], outcome=row["outcome"],
        saga_id=str(row["saga_id"]) if row["saga_id"] else None,
        saga_status=row["saga_status"], reason=row["reason"], recorded_at=row["recorded_at"],
        started_at=started, actor=row["actor"],
        lag_seconds=(started - row["nominal_at"]).total_seconds() if started else None)


def _check_target(ctx: Context, d: ScheduleDefinition) -> None:
    """The saga type exists and the input validates (with a sample fire time), so a broken
    schedule is refused now rather than failing at its first fire time."""
    definition = ctx.store.definition(d.saga_type, d.saga_version)
    data = dict(d.input)
    if d.fire_time_field:
        data[d.fire_time_field] = ctx.now().isoformat()
    try:
        definition.input_model.model_validate(data)
    except ValueError as exc:
        errors = exc.errors(include_url=False) if hasattr(exc, "errors") else []
        raise InvalidInput(d.saga_type, errors) from exc


@router.get("/schedules", response_model=SchedulePageOut, summary="List schedules, by id")
async def list_schedules(
    ctx: Ctx, _: Viewer,
    saga_type: Annotated[str | None, Query(alias="type", min_length=1, max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: cursors.CursorParam = None,
) -> SchedulePageOut:
    after = None
    if cursor is not None:
        after, of_type = cursors.decode(cursor, _SCHEDULES, 2)
        if of_type != (saga_type or "") or not isinstance(after, str):
            raise BadRequest("the cursor belongs to another filter; start again without it",
                             code="invalid_cursor")
    async with ctx.store.pool.acquire() as conn:
        rows = await repo.list_all(conn, saga_type=saga_type, limit=limit + 1, after_id=after)
    items, nxt = cursors.split_page(rows, limit, _SCHEDULES,
                                    lambda s: (s.definition.id, saga_type or ""))
    return SchedulePageOut(items=[_out(s) for s in items], next_cursor=nxt)


_SCHEDULES: Final = "schedules"
_RUNS: Final = "schedule-runs"


@router.post("/schedules", response_model=ScheduleOut, status_code=201,
             summary="Create a schedule")
async def create_schedule(body: ScheduleDefinition, ctx: Ctx, who: Operator,
                          response: Response) -> ScheduleOut:
    _check_target(ctx, body)
    with _schedule_errors():
        async with ctx.store.pool.acquire() as conn:
            state = await repo.insert(conn, body, now=ctx.now(), actor=who.name)
    ctx.wake_workers()
    audit.info("schedule create id=%s type=%s by=%s", body.id, body.saga_type, who.name)
    response.headers["Location"] = f"/schedules/{body.id}"
    return _out(state)


@router.post("/schedules/preview", response_model=PreviewOut,
             summary="The next fire times of a spec (nothing is saved)")
async def preview_spec(body: PreviewRequest, ctx: Ctx, _: Operator) -> PreviewOut:
    # Operator, like every POST of the API (a viewer's token never reaches a POST handler);
    # viewers preview a saved schedule with GET /schedules/{id}/preview.
    with _schedule_errors():
        return PreviewOut(times=body.spec.preview(body.after or ctx.now(), body.count))


@router.get("/schedules/{schedule_id}", response_model=ScheduleDetail,
            summary="A schedule with its latest runs and next fire times")
async def get_schedule(
    schedule_id: ScheduleId, ctx: Ctx, _: Viewer,
    runs: Annotated[int, Query(ge=0, le=500)] = 20,
    upcoming: Annotated[int, Query(ge=0, le=100)] = 5,
) -> ScheduleDetail:
    with _schedule_errors():
        async with ctx.store.pool.acquire() as conn:
            state = repo.state_of(await repo.get(conn, schedule_id))
            recent = await repo.list_runs(conn, schedule_id, limit=runs)
        nxt = state.next_fire_at
        times = ([] if nxt is None or upcoming == 0 else
                 [nxt, *state.definition.spec.preview(nxt, upcoming - 1)])
    return ScheduleDetail(**_out(state).model_dump(), recent_runs=[_run(r) for r in recent],
                          upcoming=times)


@router.get("/schedules/{schedule_id}/runs", response_model=RunPageOut,
            summary="A schedule's runs, newest nominal time first")
async def list_schedule_runs(
    schedule_id: ScheduleId, ctx: Ctx, _: Viewer,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    since: datetime | None = None,
    cursor: cursors.CursorParam = None,
) -> RunPageOut:
    before = _run_cursor(cursor, schedule_id) if cursor is not None else None
    with _schedule_errors():
        async with ctx.store.pool.acquire() as conn:
            await repo.get(conn, schedule_id)
            rows = await repo.list_runs(conn, schedule_id, limit=limit + 1, since=since,
                                        before=before)
    items, nxt = cursors.split_page(rows, limit, _RUNS,
                                    lambda r: (r["nominal_at"].isoformat(), schedule_id))
    return RunPageOut(items=[_run(r) for r in items], next_cursor=nxt)


def _run_cursor(cursor: str, schedule_id: str) -> datetime:
    at, of = cursors.decode(cursor, _RUNS, 2)
    try:
        before = datetime.fromisoformat(at)
    except (TypeError, ValueError):
        before = None
    if before is None or before.tzinfo is None or of != schedule_id:
        raise BadRequest("the cursor belongs to another list; start again without it",
                         code="invalid_cursor")
    return before


@router.get("/schedules/{schedule_id}/preview", response_model=PreviewOut,
            summary="The schedule's next fire times")
async def preview_schedule(
    schedule_id: ScheduleId, ctx: Ctx, _: Viewer,
    count: Annotated[int, Query(ge=1, le=500)] = 10,
) -> PreviewOut:
    with _schedule_errors():
        async with ctx.store.pool.acquire() as conn:
            state = repo.state_of(await repo.get(conn, schedule_id))
        # From the next time not handled yet (it may be due already) or, when none, from now.
        after = ctx.now() if state.next_fire_at is None else \
            state.next_fire_at - timedelta(microseconds=1)
        return PreviewOut(times=state.definition.spec.preview(after, count))


@router.put("/schedules/{schedule_id}", response_model=ScheduleOut,
            summary="Replace a schedule's definition")
async def update_schedule(schedule_id: ScheduleId, body: ScheduleDefinition, ctx: Ctx,
                          who: Operator) -> ScheduleOut:
    if body.id != schedule_id:
        raise ApiError(f"the body's id {body.id!r} is not {schedule_id!r}",
                       code="id_mismatch", status=422)
    _check_target(ctx, body)
    with _schedule_errors():
        async with ctx.store.pool.acquire() as conn, conn.transaction():
            state = await repo.update(conn, body, now=ctx.now(), actor=who.name)
    ctx.wake_workers()
    audit.info("schedule update id=%s by=%s", schedule_id, who.name)
    return _out(state)


@router.delete("/schedules/{schedule_id}", status_code=204,
               summary="Delete a schedule and its run records (its sagas stay)")
async def delete_schedule(schedule_id: ScheduleId, ctx: Ctx, who: Operator) -> Response:
    with _schedule_errors():
        async with ctx.store.pool.acquire() as conn:
            await repo.delete(conn, schedule_id)
    audit.info("schedule delete id=%s by=%s", schedule_id, who.name)
    return Response(status_code=204)


async def _set_paused(ctx: Context, schedule_id: str, paused: bool, who: Principal,
                      reason: str) -> ScheduleOut:
    verb = "pause" if paused else "resume"
    with _schedule_errors():
        async with ctx.store.pool.acquire() as conn, conn.transaction():
            state = await repo.set_paused(conn, schedule_id, paused, now=ctx.now(),
                                          actor=who.name, note=f"{verb} by {who.name}: {reason}")
    ctx.wake_workers()
    audit.info("schedule %s id=%s by=%s reason=%r", verb, schedule_id, who.name, reason)
    return _out(state)


@router.post("/schedules/{schedule_id}/pause", response_model=ScheduleOut,
             summary="Stop firing until resumed")
async def pause_schedule(schedule_id: ScheduleId, body: ReasonRequest, ctx: Ctx,
                         who: Operator) -> ScheduleOut:
    return await _set_paused(ctx, schedule_id, True, who, body.reason)


@router.post("/schedules/{schedule_id}/resume", response_model=ScheduleOut,
             summary="Fire again from the next time after now")
async def resume_schedule(schedule_id: ScheduleId, body: ReasonRequest, ctx: Ctx,
                          who: Operator) -> ScheduleOut:
    return await _set_paused(ctx, schedule_id, False, who, body.reason)


@router.post("/schedules/{schedule_id}/trigger", response_model=RunOut, status_code=201,
             summary="Start a run now, whatever the overlap policy")
async def trigger_schedule(schedule_id: ScheduleId, body: ReasonRequest, ctx: Ctx,
                           who: Operator) -> RunOut:
    with _schedule_errors():
        run = await ScheduleFirer(ctx.store, actor=f"operator:{who.name}").trigger(
            schedule_id, actor=who.name, now=ctx.now())
    audit.info("schedule trigger id=%s by=%s reason=%r", schedule_id, who.name, body.reason)
    return _run(run)


@router.post("/schedules/{schedule_id}/backfill", response_model=BackfillOut,
             summary="Run the past fire times of a range that did not run")
async def backfill_schedule(schedule_id: ScheduleId, body: BackfillRequest, ctx: Ctx,
                            who: Operator) -> BackfillOut:
    if body.end < body.start:
        raise ApiError("`end` must not be before `start`", code="invalid_range", status=422)
    with _schedule_errors():
        report = await ScheduleFirer(ctx.store, actor=f"operator:{who.name}").backfill(
            schedule_id, body.start, body.end, actor=who.name, limit=body.max_runs,
            now=ctx.now())
    audit.info("schedule backfill id=%s by=%s reason=%r", schedule_id, who.name, body.reason)
    return BackfillOut(outcomes=report.outcomes)
