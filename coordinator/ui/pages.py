"""The UI's read pages: overview, sagas, a saga, dead sagas, repair jobs, dead letters, types.

Every page calls the same query functions as the JSON API (no HTTP loopback), and keeps its
view state (filters, cursor) in the URL, so a link can be shared and Back works.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from coordinator.api.deps import Context
from coordinator.api.errors import BadRequest
from coordinator.api.jobs import get_job
from coordinator.api.models import (
    SagaFilter,
    SagaSort,
    dead_saga,
    detail,
    history_entry,
    summary,
)
from coordinator.api.queries import Page, children_of, list_sagas, matching_ids
from coordinator.api.routes_definitions import uploaded_definitions
from coordinator.api.search import declared_fields
from coordinator.engine import Status
from coordinator.observability.stuck import node_name
from coordinator.store import SagaRecord
from coordinator.store.queries import get_history, list_timers
from coordinator.store.search_attributes import attributes_of
from coordinator.ui import queries
from coordinator.ui.diagram_svg import state_svg
from coordinator.ui.retries import phase_policies, step_retries, waiting_on_no_consumer
from coordinator.ui.search import search, where_condition
from coordinator.ui.steps import step_tree
from coordinator.ui.story import node_counts, null_compensation, saga_marks
from coordinator.ui.trace import fetch_trace, trace_id_of
from coordinator.ui.web import (
    UiError,
    api_context,
    finish,
    page,
    redirect,
    safe_next,
    session_of,
    signed_in,
    ui_state,
)
from outbox_relay import list_dead_letters as list_outbox
from participant_sdk.dead_letters import list_dead_letters

__all__ = ["router"]

router = APIRouter()

#: History rows a saga page shows at first (newest); ``?history=all`` shows every row.
HISTORY_ROWS = 500
#: Statuses in which an unfinished step is running (a dead saga's steps wait for a person).
_MOVING = frozenset({Status.RUNNING.value, Status.COMPENSATING.value})
Text = Annotated[str | None, Query(max_length=200)]


def _verbs(status: str) -> list[str]:
    """The repair verbs the engine accepts in ``status`` (the engine still has the last word)."""
    return {"dead": ["retry", "skip", "compensate", "resolve"],
            "running": ["retry", "skip", "cancel"],
            "compensating": ["retry", "skip"]}.get(status, [])


@router.get("/", include_in_schema=False)
async def overview(request: Request) -> Response:
    me = signed_in(request)
    ctx = api_context(request)
    async with ctx.store.pool.acquire() as conn:
        figures = await queries.overview(conn, ctx.now())
        stuck = await ui_state(request).stuck_count(lambda: ctx.stuck_ids(conn), ctx.now())
        dead = await list_sagas(conn, SagaFilter(status=Status.DEAD), now=ctx.now(),
                                stuck_ids=(), limit=8)
        jobs = [j for j in await queries.recent_jobs(conn, 5) if j["status"] != "done"]
    participants = await ctx.participants.snapshot() if ctx.participants is not None else []
    by_type: dict[str, dict[str, int]] = {}
    totals: dict[str, int] = {}
    for saga_type, status, n in figures.in_flight:
        by_type.setdefault(saga_type, {})[status] = n
        totals[status] = totals.get(status, 0) + n
    finished = sum(figures.last_day.get(s, 0) for s in ("completed", "compensated", "dead",
                                                         "cancelled"))
    return page(request, "overview.html", me=me, o=figures, by_type=by_type, stuck=stuck,
                totals=totals, dead=[dead_saga(r) for r in dead.items], jobs=jobs,
                finished=finished, participants=participants)


def _filter(**fields: Any) -> SagaFilter:
    try:
        return SagaFilter(**{k: v for k, v in fields.items() if v not in (None, "")})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise UiError(400, f"bad filter {'.'.join(map(str, first['loc']))}: "
                           f"{first['msg']}") from None


@router.get("/sagas", include_in_schema=False)
async def sagas(
    request: Request, type: Text = None, status: Text = None, version: Text = None,
    current_step: Text = None, stuck: Text = None, min_retries: Text = None, q: Text = None,
    where: Annotated[str | None, Query(max_length=2000)] = None,
    sort: SagaSort = SagaSort.CREATED_DESC,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Response:
    me = signed_in(request)
    ctx = api_context(request)
    f = _filter(saga_type=type, status=status, version=version, current_step=current_step,
                stuck={"yes": True, "no": False}.get(stuck or ""), min_retries=min_retries)
    bounds, searched = None, ""
    q = (q or "").strip()
    where = (where or "").strip()
    condition, where_error = where_condition(where, ctx.registry.types(), f.saga_type)
    async with ctx.store.pool.acquire() as conn:
        if q:
            f, bounds, searched, found_one = await search(conn, f, q, now=ctx.now())
            if found_one is not None:  # a whole id, or the only saga with the key
                return redirect(request, f"/ui/sagas/{found_one}")
        # Only the stuck filter needs every stuck saga; otherwise check the page's rows.
        stuck_ids = await ctx.stuck_ids(conn) if f.stuck is not None else frozenset()
        try:
            found = Page([], None) if where_error else await list_sagas(
                conn, f, now=ctx.now(), stuck_ids=stuck_ids, sort=sort, limit=limit,
                cursor=cursor, id_range=bounds, search=condition)
        except BadRequest as exc:  # a cursor of another sort order, or garbled
            raise UiError(400, exc.message) from None
        if f.stuck is None:
            stuck_ids = await ctx.stuck_ids(conn, among=[r.saga_id for r in found.items])
    params = {k: v for k, v in request.query_params.items() if k != "cursor" and v}
    rows = [summary(r, r.saga_id in stuck_ids) for r in found.items]
    return page(request, "sagas.html", me=me, rows=rows, next_cursor=found.next_cursor,
                params=params, f=f, q=q, sort=sort, searched=searched, where=where,
                where_error=where_error, fields=declared_fields(ctx.registry.types()),
                types=sorted({c.name for c in ctx.registry.types()}),
                statuses=[s.value for s in Status], sorts=[s.value for s in SagaSort])


async def _record(ctx: Context, saga_id: UUID) -> SagaRecord:
    record = await ctx.store.get_saga(saga_id)
    if record is None:
        raise UiError(404, f"no saga with id {saga_id}")
    return record


@router.get("/sagas/{saga_id}", include_in_schema=False)
async def saga(request: Request, saga_id: UUID, history: Text = None,
               task: Text = None) -> Response:
    me = signed_in(request)
    ctx = api_context(request)
    record = await _record(ctx, saga_id)
    after = 0 if history == "all" else max(record.history_seq - HISTORY_ROWS, 0)
    async with ctx.store.pool.acquire() as conn:
        stuck = record.saga_id in await ctx.stuck_ids(conn, among=[saga_id])
        d = detail(record, stuck, await children_of(conn, saga_id),
                   search_attributes=await attributes_of(conn, saga_id))
        entries = [history_entry(h) for h in await get_history(conn, saga_id, after_seq=after)]
        timers = await list_timers(conn, saga_id)
    entries.reverse()
    definition = ctx.store.definition(record.saga_type, record.version)
    policies = {s.name: phase_policies(s) for s in definition.steps}
    unheard = await waiting_on_no_consumer(ctx.participants, definition, record.state)
    reversible = {s.name for s in definition.steps if s.reversible}
    diagram = state_svg(definition, [s for s in record.state.machine_states()
                                     if s in definition.states],
                        marks=saga_marks(record.state, reversible),
                        focus=node_name(task) if task else None)
    nulls = {k for k, st in record.state.steps.items() if null_compensation(st)}
    steps = step_tree([s.model_dump() for s in d.steps],
                      now=ctx.now() if record.status in _MOVING else None)
    tasks = await ctx.store.saga_tasks(saga_id)
    return page(request, "saga.html", me=me, s=d, steps=steps, history=entries, tasks=tasks,
                focus=task,
                history_cut=after, diagram=diagram, verbs=_verbs(d.status.value),
                retries=step_retries(definition, record.state, timers), policies=policies,
                unheard=unheard, nulls=nulls,
                trace_id=trace_id_of(record.trace_context), started=record.created_at)


@router.get("/sagas/{saga_id}/live", include_in_schema=False)
async def saga_live(request: Request, saga_id: UUID) -> Response:
    """What the page polls: it reloads its content only when ``seq`` moved."""
    signed_in(request)
    record = await _record(api_context(request), saga_id)
    return finish(request, JSONResponse({"seq": record.history_seq, "status": record.status,
                                         "terminal": Status(record.status).is_terminal}))


@router.get("/sagas/{saga_id}/trace", include_in_schema=False)
async def saga_trace(request: Request, saga_id: UUID) -> Response:
    """The trace panel (an HTML fragment the saga page loads after it painted)."""
    signed_in(request)
    record = await _record(api_context(request), saga_id)
    settings = ui_state(request).settings
    trace_id = trace_id_of(record.trace_context)
    got = await fetch_trace(settings.jaeger_query, trace_id,
                            wait=settings.remote_timeout.total_seconds())
    link = (f"{settings.jaeger_ui.rstrip('/')}/trace/{trace_id}"
            if settings.jaeger_ui and trace_id else None)
    return page(request, "_trace.html", flash=None, t=got.view, problem=got.problem, link=link,
                trace_id=trace_id)


@router.get("/dead", include_in_schema=False)
async def dead(
    request: Request, type: Text = None, current_step: Text = None,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> Response:
    me = signed_in(request)
    ctx = api_context(request)
    f = _filter(saga_type=type, status="dead", current_step=current_step)
    async with ctx.store.pool.acquire() as conn:
        try:
            found = await list_sagas(conn, f, now=ctx.now(), stuck_ids=(), limit=100,
                                     cursor=cursor)
            matched = len(await matching_ids(conn, f, now=ctx.now(), stuck_ids=(),
                                             limit=queries.BULK_LIMIT + 1))
        except BadRequest as exc:
            raise UiError(400, exc.message) from None
    params = {k: v for k, v in request.query_params.items() if k != "cursor" and v}
    return page(request, "dead.html", me=me, rows=[dead_saga(r) for r in found.items],
                next_cursor=found.next_cursor, params=params, f=f,
                matched=matched, limit=queries.BULK_LIMIT,
                types=sorted({c.name for c in ctx.registry.types()}))


@router.get("/jobs", include_in_schema=False)
async def jobs(request: Request) -> Response:
    me = signed_in(request)
    async with api_context(request).store.pool.acquire() as conn:
        found = await queries.recent_jobs(conn)
    return page(request, "jobs.html", me=me, jobs=found)


@router.get("/jobs/{job_id}", include_in_schema=False)
async def job(request: Request, job_id: UUID) -> Response:
    me = signed_in(request)
    async with api_context(request).store.pool.acquire() as conn:
        found = await get_job(conn, job_id)
    if found is None:
        raise UiError(404, f"no repair job {job_id}")
    done = sum(n for outcome, n in found.counts.items() if outcome != "pending")
    return page(request, "job.html", me=me, j=found, done=done)


@router.get("/dead-letters", include_in_schema=False)
async def dead_letters(request: Request) -> Response:
    me = signed_in(request)
    ctx = api_context(request)
    settings = ui_state(request).settings
    async with ctx.store.pool.acquire() as conn:
        own = await list_dead_letters(conn, limit=100)
        relay = await list_outbox(conn, limit=100)
    participants = await asyncio.gather(*(
        queries.participant_letters(name, dsn, wait=settings.remote_timeout.total_seconds())
        for name, dsn in sorted(settings.participant_dsns.items())))
    return page(request, "dead_letters.html", me=me, own=own, relay=relay,
                participants=participants)


@router.get("/types", include_in_schema=False)
async def types(request: Request) -> Response:
    me = signed_in(request)
    ctx = api_context(request)
    uploads = await uploaded_definitions(ctx)
    compiled = sorted(ctx.registry.types(), key=lambda c: (c.name, -c.version))
    latest = {c.name: max(d.version for d in compiled if d.name == c.name) for c in compiled}
    async with ctx.store.pool.acquire() as conn:
        counts = await node_counts(conn)
    shown = []
    for c in compiled:
        here = counts.get((c.name, c.version), {})
        shown.append({"c": c, "latest": c.version == latest[c.name], "counts": here,
                      "svg": state_svg(c, marks=dict.fromkeys(here, "here"), counts=here),
                      "json": c.to_json(), "upload": uploads.get((c.name, c.version))})
    return page(request, "types.html", me=me, types=shown)


@router.get("/login", include_in_schema=False)
async def login_form(request: Request, next: Text = None) -> Response:
    session = session_of(request)
    if session.principal is not None:
        return redirect(request, "/ui/")
    return page(request, "login.html", next=safe_next(next))
