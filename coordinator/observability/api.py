"""What the operator API mounts: ``/metrics`` and FastAPI tracing.

The lead wires it in ``coordinator.api.app.create_app``::

    from coordinator.observability.api import mount_observability
    metrics = mount_observability(app)            # GET /metrics + FastAPI server spans
    # in the lifespan, once the store exists:
    metrics.observe(the_store)                    # counters of starts/repairs made by the API
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from coordinator.observability.metrics import CoordinatorMetrics
from coordinator.observability.settings import ObservabilitySettings, StuckPolicy
from participant_sdk.tracing import enabled

if TYPE_CHECKING:
    from coordinator.store import SagaStore

__all__ = ["ApiMetrics", "metrics_router", "mount_observability"]

StoreOf = Callable[[Request], "SagaStore | None"]


def _store_from_state(request: Request) -> SagaStore | None:
    ctx = getattr(request.app.state, "ctx", None)
    return getattr(ctx, "store", None)


class ApiMetrics(CoordinatorMetrics):
    """Coordinator metrics whose gauges refresh on scrape (at most every ``refresh_every`` s)."""

    def __init__(self, *, policy: StuckPolicy | None = None, refresh_every: float = 5.0,
                 registry: Any = None) -> None:
        super().__init__(registry)
        self.policy = policy or ObservabilitySettings().stuck_policy()
        self.refresh_every = refresh_every
        self._refreshed = 0.0
        self._lock = asyncio.Lock()
        self._observed: set[int] = set()

    def observe(self, store: SagaStore) -> None:
        """Count the changes ``store`` commits (sagas started, repairs) in this registry."""
        if id(store) not in self._observed:
            self._observed.add(id(store))
            store.add_change_listener(self.observe_changes)

    async def refresh(self, store: SagaStore) -> None:
        """Re-run the gauge queries unless they ran less than ``refresh_every`` s ago."""
        from coordinator.observability.scan import WorkerObservability

        async with self._lock:
            if time.monotonic() - self._refreshed < self.refresh_every:
                return
            scanner = WorkerObservability(store, metrics=self, name="api")
            scanner.policy = self.policy
            await scanner.scan(log_changes=False)  # the worker logs newly stuck sagas
            self._refreshed = time.monotonic()


def metrics_router(
    metrics: CoordinatorMetrics, *, store_of: StoreOf | None = _store_from_state
) -> APIRouter:
    """``GET /metrics`` in the Prometheus text format, for ``app.include_router(...)``.

    With an :class:`ApiMetrics` and a store (from ``store_of(request)``), the in-flight,
    dead, stuck, dead-letter and outbox gauges are refreshed before rendering.
    """
    router = APIRouter()

    @router.get("/metrics", include_in_schema=False)
    async def render(request: Request) -> Response:
        store = store_of(request) if store_of is not None else None
        if isinstance(metrics, ApiMetrics) and store is not None:
            await metrics.refresh(store)
        participants = getattr(request.app.state, "participants", None)
        if participants is not None:  # the participant gauges (a cached admin query)
            await participants.snapshot()
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return router


def mount_observability(
    app: FastAPI,
    *,
    metrics: CoordinatorMetrics | None = None,
    store_of: StoreOf | None = _store_from_state,
) -> CoordinatorMetrics:
    """Add ``GET /metrics`` and, when tracing is configured, FastAPI server spans to ``app``.

    Call :func:`participant_sdk.telemetry.configure` before (the API CLI does). Returns the
    metrics object, whose :meth:`ApiMetrics.observe` the lifespan calls with its store.
    """
    chosen = metrics if metrics is not None else ApiMetrics()
    app.include_router(metrics_router(chosen, store_of=store_of))
    if enabled():
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(app, excluded_urls="metrics,healthz,readyz")
    return chosen
