"""``/healthz`` and ``/readyz`` for load balancers and Kubernetes probes (no credentials).

``/healthz``: the process serves requests (a liveness probe: restart when it fails).
``/readyz``: it can also reach its database within a second (a readiness probe: send no
traffic while it fails, e.g. during a Postgres failover).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

__all__ = ["router"]

router = APIRouter()


@router.get("/healthz", include_in_schema=False)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", include_in_schema=False)
async def readyz(request: Request) -> JSONResponse:
    ctx = getattr(request.app.state, "ctx", None)
    if ctx is None:
        return JSONResponse({"status": "starting"}, status_code=503)
    try:
        async with asyncio.timeout(1.0):
            await ctx.store.pool.fetchval("SELECT 1")
    except Exception as exc:  # any failure means "not ready": the probe says which
        return JSONResponse({"status": "unavailable", "reason": type(exc).__name__},
                            status_code=503)
    return JSONResponse({"status": "ready"})
