"""Errors of the operator API and the one exception handler that renders every error.

Hierarchy::

    ApiError                 root of the API's own errors (status, stable code, message)
    ├── Unauthenticated      401: no or unknown credentials (sends WWW-Authenticate)
    ├── Forbidden            403: the principal's role does not allow the call
    ├── NotFound             404
    ├── Conflict             409
    ├── TooManyAttempts      429: too many failed credentials (sends Retry-After)
    └── BadRequest           400 (also 422 for semantically invalid bodies)

Errors of the store (``StoreError``) and of the engine (``InvalidTransition``,
``InvalidInput``, ``TaskRefused`` by its ``code``) are mapped here too, so every error body
has the same shape::

    {"error": {"code": "invalid_transition", "message": "...", "details": ...}}
"""

from __future__ import annotations

import logging
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from coordinator.engine import InvalidInput as EngineInvalidInput
from coordinator.engine import InvalidTransition
from coordinator.engine.decision import TaskRefused
from coordinator.sagas.queries import QueryFailed, UnknownQuery
from coordinator.store import (
    BusinessKeyConflict,
    InvalidInput,
    InvalidSignalPayload,
    SagaConflict,
    SagaFinished,
    SagaNotFound,
    StoreError,
    TooManySignals,
    TransientStoreError,
    UnknownSagaType,
    UnknownSagaVersion,
    UnknownSignal,
)

__all__ = [
    "ApiError",
    "BadRequest",
    "Conflict",
    "ErrorBody",
    "ErrorDetail",
    "Forbidden",
    "NotFound",
    "TooManyAttempts",
    "Unauthenticated",
    "install_error_handlers",
]

log = logging.getLogger(__name__)

WWW_AUTHENTICATE = 'Bearer realm="sagaflow"'


class ErrorDetail(BaseModel):
    #: Stable, machine-readable code (``saga_not_found``, ``invalid_transition``, ...).
    code: str
    message: str
    details: Any = None


class ErrorBody(BaseModel):
    """Body of every 4xx/5xx answer."""

    error: ErrorDetail


class ApiError(Exception):
    status: int = 400
    code: str = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 details: Any = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.details = details
        self.headers = headers


class Unauthenticated(ApiError):
    status = 401
    code = "unauthenticated"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message, code=code, headers={"WWW-Authenticate": WWW_AUTHENTICATE})


class Forbidden(ApiError):
    status = 403
    code = "forbidden"


class NotFound(ApiError):
    status = 404
    code = "not_found"


class Conflict(ApiError):
    status = 409
    code = "conflict"


class TooManyAttempts(ApiError):
    status = 429
    code = "too_many_attempts"

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many failed credentials from this address or for this "
                         f"credential: retry in {retry_after} s",
                         details={"retry_after": retry_after},
                         headers={"Retry-After": str(retry_after)})


class BadRequest(ApiError):
    status = 400
    code = "bad_request"


#: A person may not act on a task: the engine's reason, as a status.
_TASK_REFUSED = {"unknown": 404, "closed": 409, "claimed": 409, "not_candidate": 403,
                 "not_assignee": 403, "four_eyes": 403, "bad_request": 400}
_TASK_CODES = {"unknown": "task_not_found"}


def _body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


def _store_status(exc: StoreError) -> int:
    declared = getattr(exc, "http_status", None)  # errors that name their own status
    if isinstance(declared, int):
        return declared
    if isinstance(exc, (UnknownSagaType, UnknownSagaVersion, InvalidInput,
                        InvalidSignalPayload)):
        return 422
    if isinstance(exc, (SagaNotFound, UnknownSignal)):
        return 404
    if isinstance(exc, (SagaConflict, SagaFinished, TooManySignals)):
        return 409
    if isinstance(exc, TransientStoreError):
        return 503
    return 400


def _store_details(exc: StoreError) -> Any:
    if hasattr(exc, "api_details"):
        return exc.api_details
    if isinstance(exc, (UnknownSagaType, UnknownSagaVersion)):
        return {"known": exc.known}
    if isinstance(exc, UnknownSignal):
        return {"known": exc.known}
    if isinstance(exc, BusinessKeyConflict):
        return {"saga_id": str(exc.saga_id), "status": exc.status,
                "business_key": exc.business_key}
    if isinstance(exc, InvalidInput | InvalidSignalPayload):
        return [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg")),
                 "type": str(e.get("type", ""))} for e in exc.errors]
    return None


def _validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg")),
             "type": str(e.get("type", ""))} for e in exc.errors()]


def _validation_message(details: list[dict[str, Any]]) -> str:
    parts = [f"{'.'.join(d['loc']) or 'request'}: {d['msg']}" for d in details[:5]]
    more = f" (+{len(details) - 5} more)" if len(details) > 5 else ""
    return "invalid request: " + "; ".join(parts) + more


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    headers: dict[str, str] | None = None
    if isinstance(exc, ApiError):
        status, body, headers = exc.status, _body(exc.code, exc.message, exc.details), exc.headers
    elif isinstance(exc, RequestValidationError):
        details = _validation_details(exc)
        status, body = 422, _body("validation_error", _validation_message(details), details)
    elif isinstance(exc, StoreError):
        status = _store_status(exc)
        body = _body(exc.code, str(exc), _store_details(exc))
    elif isinstance(exc, UnknownQuery):
        status, body = 404, _body("unknown_query", str(exc), {"known": exc.known})
    elif isinstance(exc, QueryFailed):
        log.error("query failed on %s: %s", request.url.path, exc)
        status, body = 500, _body("query_failed", str(exc))
    elif isinstance(exc, TaskRefused):
        status = _TASK_REFUSED.get(exc.code, 409)
        body = _body(_TASK_CODES.get(exc.code, f"task_{exc.code}"), str(exc),
                     {"reason": exc.code})
    elif isinstance(exc, InvalidTransition):
        status, body = 409, _body("invalid_transition", str(exc))
    elif isinstance(exc, EngineInvalidInput):
        status, body = 422, _body("invalid_input", str(exc))
    elif isinstance(exc, asyncpg.DataError):
        # Class 22: Postgres refused a value that came from the request (NUL bytes, ...).
        status, body = 400, _body("invalid_value", f"value refused by the database: {exc}")
    elif isinstance(exc, StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        status, body = exc.status_code, _body(code, str(exc.detail))
        headers = dict(exc.headers) if exc.headers else None
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": _allowed_methods(request)}
    else:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        status, body = 500, _body("internal_error", "internal error; see the server log")
    return JSONResponse(body, status_code=status, headers=headers)


def _allowed_methods(request: Request) -> str:
    """Every method some route serves on this path: Starlette's 405 names only those of the
    first route that matched the path, while one path may have several (GET and DELETE)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": "\x00"})
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


def install_error_handlers(app: FastAPI) -> None:
    """Route every error class through :func:`_handle` (one handler, one body shape)."""
    for cls in (ApiError, RequestValidationError, StoreError, InvalidTransition,
                EngineInvalidInput, UnknownQuery, QueryFailed, asyncpg.DataError,
                StarletteHTTPException, Exception):
        app.add_exception_handler(cls, _handle)
