"""``/docs`` without a CDN: Swagger UI's files come from the ``swagger-ui-bundle-v2`` wheel.

FastAPI's default page loads Swagger UI from a CDN, so it is blank on a closed network. The
wheel ships the same ``swagger-ui-bundle.js``/``.css`` (Swagger UI 5, which reads FastAPI's
OpenAPI 3.1); the API serves them under ``/docs/assets``.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["mount_docs"]


def mount_docs(app: FastAPI) -> None:
    """Serve ``/docs`` from local assets (the app must be built with ``docs_url=None``)."""
    import swagger_ui_bundle

    app.mount("/docs/assets", StaticFiles(directory=swagger_ui_bundle.swagger_ui_path),
              name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - docs",
            swagger_js_url=f"{root}/docs/assets/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/docs/assets/swagger-ui.css",
            swagger_favicon_url=f"{root}/docs/assets/favicon-32x32.png")
