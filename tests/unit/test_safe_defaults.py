"""Safe defaults: every probe and metrics port binds only this host unless configured, and the
API serves no documentation page that loads scripts from a CDN."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from coordinator.api import ApiSettings, create_app
from coordinator.observability.settings import ObservabilitySettings
from outbox_relay.settings import RelaySettings
from participant_sdk.probes import ProbeServer
from participant_sdk.settings import ParticipantSettings


def test_every_process_binds_its_probe_port_to_loopback_by_default() -> None:
    assert ObservabilitySettings().metrics_addr == "127.0.0.1"  # the worker (and the API's scan)
    assert RelaySettings().metrics_addr == "127.0.0.1"
    assert ParticipantSettings(dsn="postgresql://x@127.0.0.1/db").metrics_addr == "127.0.0.1"


async def test_a_probe_server_started_without_an_address_listens_on_loopback_only() -> None:
    server = ProbeServer(registry=CollectorRegistry(), live=lambda: None, ready=_ready,
                         name="test")
    await server.start(0)
    try:
        assert server._server is not None
        assert {s.getsockname()[0] for s in server._server.sockets} == {"127.0.0.1"}
    finally:
        await server.stop()


async def _ready() -> None:
    return None


def test_the_api_has_no_cdn_backed_redoc() -> None:
    paths = {getattr(route, "path", "") for route in create_app(ApiSettings()).routes}
    assert "/redoc" not in paths and "/docs" in paths
