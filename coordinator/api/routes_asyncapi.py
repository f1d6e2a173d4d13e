"""``GET /asyncapi.json``: the wire protocol's AsyncAPI 3.0 document.

Public like ``/openapi.json``: it is the contract a participant team builds against, holds
nothing about any saga, and is generated from the envelope models this coordinator runs.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import APIRouter

from participant_sdk.asyncapi import asyncapi_document

__all__ = ["router"]

router = APIRouter(tags=["protocol"])


@cache
def _document() -> dict[str, Any]:
    return asyncapi_document()


# Out of the OpenAPI schema, like /openapi.json and /metrics: a public document, not an
# operator endpoint (the API's auth tests walk the schema and expect 401 without a token).
@router.get("/asyncapi.json", summary="The wire protocol as an AsyncAPI 3.0 document",
            include_in_schema=False)
async def get_asyncapi() -> dict[str, Any]:
    return _document()
