"""The FastAPI application: ``create_app(settings)`` or ``create_app(store=..., registry=...,
auth=...)`` for an app on objects the caller owns (tests, embedding)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from coordinator.api.auth import Authenticator, TokenAuth
from coordinator.api.deps import Context
from coordinator.api.errors import install_error_handlers
from coordinator.api.jobs import RepairJobRunner
from coordinator.api.routes_asyncapi import router as asyncapi_router
from coordinator.api.routes_dead_letters import router as dead_letters_router
from coordinator.api.routes_definitions import router as definitions_router
from coordinator.api.routes_health import router as health_router
from coordinator.api.routes_jobs import router as jobs_router
from coordinator.api.routes_migrations import router as migrations_router
from coordinator.api.routes_participants import router as participants_router
from coordinator.api.routes_results import router as results_router
from coordinator.api.routes_sagas import router as sagas_router
from coordinator.api.routes_schedules import router as schedules_router
from coordinator.api.routes_signals import router as signals_router
from coordinator.api.routes_tasks import router as tasks_router
from coordinator.api.routes_updates import router as updates_router
from coordinator.api.routes_verify import router as verify_router
from coordinator.api.routes_versions import router as versions_router
from coordinator.api.settings import ApiSettings
from coordinator.observability.api import ApiMetrics, mount_observability
from coordinator.observability.participants import ParticipantHealthMonitor, participant_topics
from coordinator.observability.settings import ObservabilitySettings
from coordinator.runtime.hints.results import SagaEndWaiters, start_saga_end_hints
from coordinator.runtime.hints.timers import start_timer_waker
from coordinator.runtime.publishing import start_command_publishing
from coordinator.store import SagaStore
from coordinator.store.definitions import register_uploaded
from participant_sdk.pools import create_pool

if TYPE_CHECKING:
    from coordinator.ui import UiSettings

__all__ = ["create_app"]

_DESCRIPTION = """
Operate sagas: start them, find them, read their history, and repair the ones that are dead or
stuck. Every call needs `Authorization: Bearer <token>` (a static token or, when configured, a
JWT from the team's identity provider) or `X-API-Key`; `viewer` reads,
`operator` starts and repairs, `admin` may also discard dead letters. Human tasks (`/tasks`)
are for every signed-in person: the engine decides who may claim and complete. Errors share
one body:
`{"error": {"code", "message", "details"}}`.

Guides and reference (running your own saga, the saga language, operating, deploying, every
setting) are on the documentation site: `make docs` serves it from a checkout at
[http://127.0.0.1:8000/](http://127.0.0.1:8000/); its pages are the repository's `docs/`.
"""


def _utcnow() -> datetime:
    return datetime.now(UTC)


def create_app(
    settings: ApiSettings | None = None,
    *,
    store: SagaStore | None = None,
    registry: Any = None,
    auth: Authenticator | TokenAuth | None = None,
    clock: Callable[[], datetime] = _utcnow,
    run_jobs: bool | None = None,
    ui: UiSettings | None = None,
) -> FastAPI:
    """The operator API.

    With ``store`` the app uses it and leaves it open at shutdown; without, it opens one on
    ``settings.dsn`` with the saga classes of ``settings.sagas`` (or ``registry``). ``auth``
    defaults to the tokens and JWT settings of the settings (a ``TokenAuth`` replaces only the
    tokens). The bulk-repair runner runs in the app unless
    ``run_jobs`` (default ``settings.api_run_jobs``) is false. The web UI (under ``/ui``) and
    the offline ``/docs`` use ``ui`` (default: ``SAGAFLOW_UI_*`` variables). There is no
    ``/redoc``: FastAPI's loads its scripts and fonts from public CDNs.
    """
    settings = settings or ApiSettings()
    authenticator = (auth if isinstance(auth, Authenticator)
                     else Authenticator.from_settings(settings, auth))
    with_runner = settings.api_run_jobs if run_jobs is None else run_jobs
    metrics = ApiMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = store is None
        the_store = store
        if the_store is None:
            reg = registry if registry is not None else _registry(settings)
            pool = await create_pool(
                settings.dsn, min_size=settings.pool_min_size, max_size=settings.pool_max_size,
                server_settings={"application_name": "sagaflow-api"})
            the_store = SagaStore(pool, reg, clock=clock, owns_pool=True, dsn=settings.dsn)
        metrics.observe(the_store)
        runner: RepairJobRunner | None = None
        if with_runner:
            runner = RepairJobRunner(the_store, lease=settings.api_job_lease,
                                     poll=settings.api_job_poll)
        # A passed store is the caller's: its commits only hint the relays.
        publishing = await start_command_publishing(
            the_store, settings, name="api", wait_for_kafka=False, direct=own,
            registry=metrics.registry)
        app.state.publishing = publishing
        timer_waker = await start_timer_waker(the_store, settings)
        end_hints = await start_saga_end_hints(the_store, settings)
        # A passed store opened from a pool alone has no DSN: its long polls only re-read.
        ends = (SagaEndWaiters(the_store.dsn) if settings.result_hints and the_store.dsn
                else None)
        participants = ParticipantHealthMonitor(
            settings.kafka_bootstrap, lambda: participant_topics(app.state.ctx.registry.types()),
            groups=settings.participant_groups,
            client_kwargs=settings.kafka_security.client_kwargs(), registry=metrics.registry)
        app.state.participants = participants
        app.state.ctx = Context(
            store=the_store, registry=the_store.registry, clock=clock,
            stuck_policy=ObservabilitySettings().stuck_policy(),
            wake_jobs=runner.wake if runner is not None else (lambda: None),
            wake_workers=timer_waker.wake if timer_waker is not None else (lambda: None),
            saga_ends=ends, participants=participants)
        try:
            await register_uploaded(the_store.pool, the_store.registry)
            if runner is not None:
                await runner.start()
            yield
        finally:
            if runner is not None:
                await runner.stop()
            if ends is not None:
                await ends.stop()
            await publishing.stop()
            await participants.close()
            if timer_waker is not None:
                await timer_waker.stop()
            if end_hints is not None:
                await end_hints.stop()
            if own:
                await the_store.close()

    app = FastAPI(title="sagaflow operator API", version="1", description=_DESCRIPTION,
                  lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.auth = authenticator
    install_error_handlers(app)
    app.include_router(sagas_router)
    app.include_router(versions_router)
    app.include_router(definitions_router)
    app.include_router(signals_router)
    app.include_router(updates_router)
    app.include_router(tasks_router)
    app.include_router(results_router)
    app.include_router(schedules_router)
    app.include_router(jobs_router)
    app.include_router(migrations_router)
    app.include_router(verify_router)
    app.include_router(dead_letters_router)
    app.include_router(participants_router)
    app.include_router(asyncapi_router)
    app.include_router(health_router)
    mount_observability(app, metrics=metrics)
    from coordinator.ui import mount_ui  # the UI imports the API's modules: import it late

    mount_ui(app, ui)
    return app


def _registry(settings: ApiSettings) -> Any:
    from coordinator.sagas.loading import build_registry

    return build_registry(settings.sagas, topic_prefix=settings.topic_prefix)


