"""``/saga-definitions``: sagas declared as data, uploaded, listed, fetched and diffed.

An admin uploads a definition (JSON, or YAML with ``Content-Type: application/yaml``); it is
validated as ``sagaflow-coordinator validate`` does (every problem with its path, a 422),
compiled, stored with who uploaded it and when, and registered in this process at once.
Workers register it within seconds (``coordinator.store.definitions.register_stored``), and
sagas already running stay on their version: a name and version, once stored, never change.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import BaseModel, Field

from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.errors import ApiError, BadRequest, Conflict, NotFound
from coordinator.definitions import (
    Definition,
    InvalidDefinition,
    load_definition,
    parse_definition,
    to_yaml,
)
from coordinator.definitions.loading import MAX_DEFINITION_BYTES
from coordinator.engine.compiled import compile_saga
from coordinator.language.steps import DefinitionError
from coordinator.store.definitions import (
    DefinitionTaken,
    StoredDefinition,
    get_definition,
    list_definitions,
    register_stored,
    register_uploaded,
    save_definition,
)
from coordinator.versioning.compat import compare_sagas
from coordinator.versioning.machine_diff import diff_machines

__all__ = ["router"]

router = APIRouter(responses=ERRORS, tags=["definitions"])
audit = logging.getLogger("coordinator.api.audit")

Ctx = Annotated[Context, Depends(context)]
Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
Admin = Annotated[Principal, Depends(require(Role.ADMIN))]
SagaName = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z_][\w\-]*$")]
Version = Annotated[int, Path(ge=1, le=2_147_483_647)]


class DefinitionOut(BaseModel):
    name: str
    version: int
    uploaded_by: str
    uploaded_at: datetime
    digest: str = Field(description="sha256 of the definition's JSON: equal uploads, equal digest.")
    definition: dict[str, Any] | None = Field(
        default=None, description="The definition (in a fetch; left out of the list).")
    registered: bool = Field(description="Whether this API process has registered it.")
    compatibility: list[str] = Field(
        default_factory=list,
        description="On upload: what clients of the previous version see change (its input, "
                    "signals and queries), each line BREAKING or ok.")


class DefinitionsOut(BaseModel):
    items: list[DefinitionOut]


class DefinitionDiffOut(BaseModel):
    name: str
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


class InvalidDefinitionError(ApiError):
    status = 422
    code = "invalid_definition"


async def uploaded_definitions(ctx: Context) -> dict[tuple[str, int], dict[str, Any]]:
    """Every upload (registered here first), by name and version: who, when, and its YAML
    (for the web console's saga types page)."""
    await register_uploaded(ctx.store.pool, ctx.registry)
    async with ctx.store.pool.acquire() as conn:
        try:
            rows = await list_definitions(conn)
        except asyncpg.UndefinedTableError:
            return {}
    return {(r.name, r.version): {"by": r.uploaded_by, "at": r.uploaded_at,
                                  "yaml": to_yaml(Definition.model_validate(r.definition))}
            for r in rows}


def _out(ctx: Context, stored: StoredDefinition, *, full: bool) -> DefinitionOut:
    return DefinitionOut(name=stored.name, version=stored.version,
                         uploaded_by=stored.uploaded_by, uploaded_at=stored.uploaded_at,
                         digest=stored.digest, definition=stored.definition if full else None,
                         registered=(stored.name, stored.version) in ctx.registry)


def _invalid(exc: InvalidDefinition) -> InvalidDefinitionError:
    return InvalidDefinitionError(
        f"the definition has {len(exc.problems)} problem(s)",
        details={"problems": [{"path": p.path, "message": p.message} for p in exc.problems]})


@router.post("/saga-definitions", status_code=201, response_model=DefinitionOut,
             summary="Upload a saga definition (admin)",
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": {"type": "object"}},
                 "application/yaml": {"schema": {"type": "string"}}}}},
             responses={200: {"model": DefinitionOut,
                              "description": "This very definition was already uploaded"}})
async def upload_definition(request: Request, response: Response, ctx: Ctx,
                            who: Admin) -> DefinitionOut:
    body = await request.body()
    if len(body) > MAX_DEFINITION_BYTES:
        raise BadRequest(f"a definition may have at most {MAX_DEFINITION_BYTES} bytes",
                         code="definition_too_large")
    try:
        definition = parse_definition(body, "upload")
        cls = load_definition(definition, "upload")
        compile_saga(cls, topic_prefix=ctx.registry.topic_prefix)
    except InvalidDefinition as exc:
        raise _invalid(exc) from None
    key = (definition.name, definition.version)
    known = ctx.registry.get(*key) if key in ctx.registry else None
    if known is not None and getattr(known.saga_class, "definition", None) != definition:
        raise Conflict(f"saga {definition.name!r} version {definition.version} is already "
                       "registered by this deployment: upload it as a new version",
                       code="definition_taken")
    try:
        async with ctx.store.pool.acquire() as conn:
            stored, created = await save_definition(conn, definition, by=who.name,
                                                    now=ctx.now())
            await register_stored(conn, ctx.registry)
    except DefinitionTaken as exc:
        raise Conflict(str(exc), code="definition_taken") from None
    except DefinitionError as exc:  # another process registered a class meanwhile
        raise Conflict(str(exc), code="definition_taken") from None
    audit.info("upload definition %s v%s by=%s created=%s", stored.name, stored.version,
               who.name, created)
    if not created:
        response.status_code = 200
    response.headers["Location"] = f"/saga-definitions/{stored.name}/{stored.version}"
    out = _out(ctx, stored, full=True)
    out.compatibility = _compatibility(ctx, definition.name, definition.version, cls)
    return out


def _compatibility(ctx: Context, name: str, version: int, cls: type[Any]) -> list[str]:
    """The input compatibility check against the newest earlier version this process has."""
    earlier = [c for c in ctx.registry.types() if c.name == name and c.version < version]
    if not earlier or earlier[-1].saga_class is None:
        return []
    return [str(change) for change in compare_sagas(earlier[-1].saga_class, cls)]


@router.get("/saga-definitions", response_model=DefinitionsOut,
            summary="Uploaded saga definitions: every version, who uploaded it and when")
async def get_definitions(
    ctx: Ctx, _: Viewer,
    name: Annotated[str | None, Query(min_length=1, max_length=100)] = None,
) -> DefinitionsOut:
    async with ctx.store.pool.acquire() as conn:
        rows = await list_definitions(conn, name)
    return DefinitionsOut(items=[_out(ctx, r, full=False) for r in rows])


async def _stored(ctx: Context, name: str, version: int) -> StoredDefinition:
    async with ctx.store.pool.acquire() as conn:
        stored = await get_definition(conn, name, version)
    if stored is None:
        raise NotFound(f"no uploaded definition {name!r} version {version}",
                       code="definition_not_found")
    return stored


@router.get("/saga-definitions/{name}/diff", response_model=DefinitionDiffOut,
            summary="What changed between two uploaded versions (the machine diff)")
async def diff_definitions(
    name: SagaName, ctx: Ctx, _: Viewer,
    from_version: Annotated[int, Query(alias="from", ge=1, le=2_147_483_647)],
    to_version: Annotated[int, Query(alias="to", ge=1, le=2_147_483_647)],
) -> DefinitionDiffOut:
    machines = []
    for version in (from_version, to_version):
        stored = await _stored(ctx, name, version)
        try:
            cls = load_definition(parse_definition(json.dumps(stored.definition), "stored"))
        except InvalidDefinition as exc:
            raise _invalid(exc) from None
        machines.append(compile_saga(cls).to_json())
    d = diff_machines(machines[0], machines[1])
    return DefinitionDiffOut(name=name, from_version=from_version, to_version=to_version,
                             **asdict(d))


@router.get("/saga-definitions/{name}/{version}", response_model=DefinitionOut,
            summary="One uploaded definition, as uploaded")
async def get_one_definition(name: SagaName, version: Version, ctx: Ctx,
                             _: Viewer) -> DefinitionOut:
    return _out(ctx, await _stored(ctx, name, version), full=True)
