"""The API's /docs page (its OpenAPI description) leads to the documentation site."""

from __future__ import annotations

import uuid

import httpx

from coordinator.api.app import create_app
from coordinator.api.auth import TokenAuth
from coordinator.api.settings import ApiSettings


async def test_the_openapi_description_links_the_docs_site() -> None:
    app = create_app(ApiSettings(dsn="postgresql://unused/none"),
                     auth=TokenAuth.parse(f"alice:admin:{uuid.uuid4().hex}"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as client:
        resp = await client.get("/openapi.json")
    description = resp.json()["info"]["description"]
    assert "`make docs`" in description
    assert "[http://127.0.0.1:8000/](http://127.0.0.1:8000/)" in description
