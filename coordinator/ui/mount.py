"""Adding the UI to the API's FastAPI app."""

from __future__ import annotations

import logging

from fastapi import Depends, FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from coordinator.ui import actions, pages, schedules, tasks
from coordinator.ui.docs import mount_docs
from coordinator.ui.session import CsrfRefused
from coordinator.ui.settings import UiSettings
from coordinator.ui.web import HERE, SignInNeeded, UiError, UiState, page, resolve_session

__all__ = ["mount_ui"]

log = logging.getLogger(__name__)


def mount_ui(app: FastAPI, settings: UiSettings | None = None) -> None:
    """Pages under ``/ui``, their assets under ``/ui/static``, and the offline ``/docs``."""
    settings = settings or UiSettings()
    if not settings.session_secret.get_secret_value():
        log.warning("SAGAFLOW_UI_SESSION_SECRET is not set: UI sessions end when this "
                    "process restarts, and replicas cannot share them")
    app.state.ui = UiState.build(settings)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")
    # Who signed in, then their count of open tasks for the navigation.
    per_request = [Depends(resolve_session), Depends(tasks.inbox_count)]
    for router in (pages.router, actions.router, schedules.router, tasks.router):
        app.include_router(router, prefix="/ui", dependencies=per_request)
    mount_docs(app)

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    @app.exception_handler(SignInNeeded)
    async def sign_in(request: Request, exc: SignInNeeded) -> Response:
        if request.method != "GET":
            return page(request, "error.html", status=401,
                        message="Your session has ended: sign in again.")
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/ui/login?next={_quote(target)}", status_code=303)

    @app.exception_handler(UiError)
    async def ui_error(request: Request, exc: UiError) -> Response:
        return page(request, "error.html", status=exc.status, message=exc.message)

    @app.exception_handler(CsrfRefused)
    async def csrf_refused(request: Request, exc: CsrfRefused) -> Response:
        log.warning("refused a UI POST to %s: %s", request.url.path, exc)
        return page(request, "error.html", status=403, message=f"Refused: {exc}.")


def _quote(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/")
