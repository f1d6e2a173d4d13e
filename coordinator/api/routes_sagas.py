"""Sagas: start, list, inspect, history, diagram, types, the dead-saga queue, repairs."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.errors import BadRequest, NotFound
from coordinator.api.models import (
    CancelRequest,
    CompensateRequest,
    DeadSagaPageOut,
    DiagramOut,
    HistoryOut,
    ResolveRequest,
    RetryRequest,
    SagaDetail,
    SagaFilter,
    SagaPageOut,
    SagaSort,
    SagaSummary,
    SagaTypeOut,
    SkipRequest,
    StartRequest,
    dead_saga,
    detail,
    history_entry,
    summary,
)
from coordinator.api.queries import children_of, id_range, list_sagas
from coordinator.api.repairs import RepairOptions, apply_repair
from coordinator.api.routes_results import saga_results
from coordinator.api.search import InvalidFilter, compile_query, declared_fields
from coordinator.engine import RepairVerb, Status
from coordinator.sagas.diagram import mermaid
from coordinator.store import SagaRecord, UnknownSagaType, UnknownSagaVersion
from coordinator.store.definitions import register_uploaded
from coordinator.store.records import StartResult
from coordinator.store.search_attributes import attributes_of
from coordinator.store.search_sql import SqlFilter

__all__ = ["router"]

audit = logging.getLogger("coordinator.api.audit")
router = APIRouter(responses=ERRORS)

Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]
Ctx = Annotated[Context, Depends(context)]
SagaId = Annotated[UUID, Path(description="The saga's id.")]


async def _record(ctx: Context, saga_id: UUID) -> SagaRecord:
    record = await ctx.store.get_saga(saga_id)
    if record is None:
        raise NotFound(f"no saga with id {saga_id}", code="saga_not_found")
    return record


async def _detail(ctx: Context, record: SagaRecord) -> SagaDetail:
    async with ctx.store.pool.acquire() as conn:
        stuck = record.saga_id in await ctx.stuck_ids(conn, among=[record.saga_id])
        return detail(record, stuck, await children_of(conn, record.saga_id),
                      saga_results(ctx.store, record),
                      search_attributes=await attributes_of(conn, record.saga_id))


def saga_filter(
    saga_type: Annotated[str | None, Query(alias="type", min_length=1, max_length=200)] = None,
    version: Annotated[int | None, Query(ge=1, le=2_147_483_647)] = None,
    status: Status | None = None,
    current_step: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    min_age_seconds: Annotated[float | None, Query(ge=0, le=3.2e9)] = None,
    max_age_seconds: Annotated[float | None, Query(ge=0, le=3.2e9)] = None,
    stuck: bool | None = None,
    min_retries: Annotated[int | None, Query(ge=0, le=1_000_000)] = None,
    business_key: Annotated[str | None, Query(
        min_length=1, max_length=200,
        description="Only sagas with this business key (the id their class declares).")] = None,
) -> SagaFilter:
    """The saga filter, from query parameters."""
    return _filter(saga_type=saga_type, version=version, status=status,
                   current_step=current_step, min_age_seconds=min_age_seconds,
                   max_age_seconds=max_age_seconds, stuck=stuck, min_retries=min_retries,
                   business_key=business_key)


def _filter(**fields: Any) -> SagaFilter:
    """A filter from query values; a value the model refuses (a NUL byte) is a 422, not a 500."""
    try:
        return SagaFilter(**fields)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("query", *e["loc"])} for e in exc.errors(include_url=False)]
        ) from exc


@router.post("/sagas", status_code=201, response_model=SagaDetail, tags=["sagas"],
             summary="Start a saga",
             responses={200: {"model": SagaDetail,
                              "description": "The saga already existed with this id and input"}})
async def start_saga(body: StartRequest, response: Response, ctx: Ctx,
                     who: Operator) -> SagaDetail:
    start_at = body.start_at if body.delay_seconds is None else (
        ctx.now() + timedelta(seconds=body.delay_seconds))
    async def start() -> StartResult:
        return await ctx.store.start_saga(body.type, body.input, saga_id=body.saga_id,
                                          version=body.version, actor=f"api:{who.name}",
                                          start_at=start_at, started_by=who.name)

    try:
        started = await start()
    except (UnknownSagaType, UnknownSagaVersion):
        # Perhaps uploaded through another API process since: register it, then try again.
        if not await register_uploaded(ctx.store.pool, ctx.registry):
            raise
        started = await start()
    if not started.created:
        response.status_code = 200
    response.headers["Location"] = f"/sagas/{started.record.saga_id}"
    audit.info("start %s saga=%s by=%s created=%s", body.type, started.record.saga_id,
               who.name, started.created)
    return await _detail(ctx, started.record)


@router.get("/sagas", response_model=SagaPageOut, tags=["sagas"], summary="List sagas")
async def get_sagas(
    ctx: Ctx, _: Viewer, f: Annotated[SagaFilter, Depends(saga_filter)],
    sort: SagaSort = SagaSort.CREATED_DESC,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(min_length=1, max_length=500)] = None,
    id_prefix: Annotated[str | None, Query(
        min_length=4, max_length=36, pattern="^[0-9a-fA-F]{4}[0-9a-fA-F-]*$",
        description="Only sagas whose id starts with these hex digits (at least 4; hyphens "
                    "after them ignored).",
    )] = None,
    q: Annotated[str | None, Query(
        min_length=1, max_length=2000,
        description="Only sagas matching this filter over their search attributes and "
                    "built-in fields, e.g. `customer_id = 'c-42' and amount > 1000` (the "
                    "grammar: docs/operating.md, Filtering sagas). An invalid filter is a 400 "
                    "`invalid_filter` naming the column.",
    )] = None,
) -> SagaPageOut:
    now = ctx.now()
    bounds = None if id_prefix is None else id_range(id_prefix)
    if id_prefix is not None and bounds is None:
        raise BadRequest("id_prefix: 1 to 32 hex digits", code="invalid_id_prefix")
    search = None if q is None else await _compiled(ctx, q, f.saga_type)
    async with ctx.store.pool.acquire() as conn:
        stuck = await ctx.stuck_ids(conn)
        page = await list_sagas(conn, f, now=now, stuck_ids=stuck, sort=sort,
                                limit=limit, cursor=cursor, id_range=bounds, search=search)
    return SagaPageOut(items=[SagaSummary(**summary(r, r.saga_id in stuck)) for r in page.items],
                       next_cursor=page.next_cursor)


async def _compiled(ctx: Context, q: str, saga_type: str | None) -> SqlFilter:
    """Filter ``q`` over the registered types' attributes; a field unknown here may belong
    to a definition uploaded through another API process since: register those, then try
    again."""
    try:
        return compile_query(q, ctx.registry.types(), saga_type)
    except InvalidFilter:
        if not await register_uploaded(ctx.store.pool, ctx.registry):
            raise
        return compile_query(q, ctx.registry.types(), saga_type)


@router.get("/sagas/{saga_id}", response_model=SagaDetail, tags=["sagas"],
            summary="A saga: status, input, steps, result")
async def get_saga(saga_id: SagaId, ctx: Ctx, _: Viewer) -> SagaDetail:
    return await _detail(ctx, await _record(ctx, saga_id))


@router.get("/sagas/{saga_id}/history", response_model=HistoryOut, tags=["sagas"],
            summary="The saga's full event history")
async def get_history(saga_id: SagaId, ctx: Ctx, _: Viewer) -> HistoryOut:
    await _record(ctx, saga_id)
    history = await ctx.store.get_history(saga_id)
    return HistoryOut(saga_id=saga_id, entries=[history_entry(h) for h in history])


@router.get("/sagas/{saga_id}/diagram", response_model=DiagramOut, tags=["sagas"],
            summary="Mermaid diagram with the current state marked")
async def get_diagram(saga_id: SagaId, ctx: Ctx, _: Viewer) -> DiagramOut:
    record = await _record(ctx, saga_id)
    definition = ctx.store.definition(record.saga_type, record.version)
    states = record.state.machine_states()
    text = mermaid(definition, [s for s in states if s in definition.states])
    return DiagramOut(saga_id=saga_id, state=states[0], states=states, mermaid=text)


@router.get("/saga-types", response_model=list[SagaTypeOut], tags=["sagas"],
            summary="Registered saga types and versions")
async def get_types(ctx: Ctx, _: Viewer) -> list[SagaTypeOut]:
    compiled = list(ctx.registry.types())
    latest = {c.name: max(d.version for d in compiled if d.name == c.name) for c in compiled}
    return [SagaTypeOut(name=c.name, version=c.version, latest=c.version == latest[c.name],
                        definition=c.to_json(), search_attributes=declared_fields([c]))
            for c in compiled]


@router.get("/dead-sagas", response_model=DeadSagaPageOut, tags=["dead sagas"],
            summary="The dead-saga queue")
async def get_dead(
    ctx: Ctx, _: Viewer,
    saga_type: Annotated[str | None, Query(alias="type", min_length=1, max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(min_length=1, max_length=500)] = None,
) -> DeadSagaPageOut:
    f = _filter(saga_type=saga_type, status=Status.DEAD)
    async with ctx.store.pool.acquire() as conn:
        page = await list_sagas(conn, f, now=ctx.now(), stuck_ids=(),
                                limit=limit, cursor=cursor)
    return DeadSagaPageOut(items=[dead_saga(r) for r in page.items],
                           next_cursor=page.next_cursor)


async def _repair(ctx: Context, saga_id: UUID, verb: RepairVerb, who: Principal, reason: str,
                  options: RepairOptions) -> SagaDetail:
    await apply_repair(ctx.store, saga_id, verb, principal=who.name, reason=reason,
                       options=options)
    return await _detail(ctx, await _record(ctx, saga_id))


_REPAIR = {"response_model": SagaDetail, "tags": ["repairs"]}


@router.post("/sagas/{saga_id}/retry", summary="Re-drive the failed or stuck step now",
             **_REPAIR)  # type: ignore[arg-type]
async def retry(saga_id: SagaId, body: RetryRequest, ctx: Ctx, who: Operator) -> SagaDetail:
    return await _repair(ctx, saga_id, RepairVerb.RETRY, who, body.reason,
                         RepairOptions(step=body.step, payload=body.payload))


@router.post("/sagas/{saga_id}/skip", summary="Mark the step done with a result and go on",
             **_REPAIR)  # type: ignore[arg-type]
async def skip(saga_id: SagaId, body: SkipRequest, ctx: Ctx, who: Operator) -> SagaDetail:
    return await _repair(ctx, saga_id, RepairVerb.SKIP, who, body.reason,
                         RepairOptions(step=body.step, result=body.result))


@router.post("/sagas/{saga_id}/compensate", summary="Force the rollback",
             **_REPAIR)  # type: ignore[arg-type]
async def compensate(saga_id: SagaId, body: CompensateRequest, ctx: Ctx,
                     who: Operator) -> SagaDetail:
    return await _repair(ctx, saga_id, RepairVerb.COMPENSATE, who, body.reason,
                         RepairOptions(step=body.step, payload=body.payload))


@router.post("/sagas/{saga_id}/cancel", summary="Stop a running saga and roll back",
             **_REPAIR)  # type: ignore[arg-type]
async def cancel(saga_id: SagaId, body: CancelRequest, ctx: Ctx, who: Operator) -> SagaDetail:
    return await _repair(ctx, saga_id, RepairVerb.CANCEL, who, body.reason, RepairOptions())


@router.post("/sagas/{saga_id}/resolve", summary="Close a dead saga as fixed by hand",
             **_REPAIR)  # type: ignore[arg-type]
async def resolve(saga_id: SagaId, body: ResolveRequest, ctx: Ctx,
                  who: Operator) -> SagaDetail:
    return await _repair(ctx, saga_id, RepairVerb.RESOLVE, who, body.reason,
                         RepairOptions(status=body.status))
