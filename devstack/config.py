"""Where devstack keeps its files and which ports it binds, read from environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from devstack.errors import DevstackError

REPO_ROOT = Path(__file__).resolve().parent.parent
RESOURCES = Path(__file__).resolve().parent / "resources"
HOST = "127.0.0.1"

ENV_HOME = "SAGAFLOW_DEVSTACK_HOME"
ENV_CACHE = "SAGAFLOW_CACHE_DIR"

# env var -> default port
PORT_DEFAULTS: dict[str, int] = {
    "SAGAFLOW_PG_PORT": 55432,
    "SAGAFLOW_KAFKA_PORT": 19092,
    "SAGAFLOW_KAFKA_CONTROLLER_PORT": 19093,
    # the broker's JMX (127.0.0.1 only): its own request metrics, read by bench.kafka_cost
    "SAGAFLOW_KAFKA_JMX_PORT": 19098,
    "SAGAFLOW_JAEGER_OTLP_GRPC_PORT": 4317,
    "SAGAFLOW_JAEGER_OTLP_HTTP_PORT": 4318,
    "SAGAFLOW_JAEGER_QUERY_PORT": 16686,
    "SAGAFLOW_JAEGER_QUERY_GRPC_PORT": 16685,
    # Jaeger's own OTLP/HTTP receiver while devstack.trace_buffer holds the usual port
    "SAGAFLOW_JAEGER_OTLP_HTTP_BEHIND_PORT": 14318,
}


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Paths and ports of the local stack.

    Attributes:
        home: logs, data and pid files (git-ignored), default ``<repo>/.local``.
        cache: downloaded and built artifacts, default ``<repo>/.cache``.
    """

    home: Path
    cache: Path
    pg_port: int = 55432
    kafka_port: int = 19092
    kafka_controller_port: int = 19093
    kafka_jmx_port: int = 19098
    jaeger_otlp_grpc_port: int = 4317
    jaeger_otlp_http_port: int = 4318
    jaeger_query_port: int = 16686
    jaeger_query_grpc_port: int = 16685
    jaeger_otlp_http_behind_port: int = 14318

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        ports = {name: _port(env, name, default) for name, default in PORT_DEFAULTS.items()}
        return cls(
            home=Path(env.get(ENV_HOME) or REPO_ROOT / ".local").resolve(),
            cache=Path(env.get(ENV_CACHE) or REPO_ROOT / ".cache").resolve(),
            pg_port=ports["SAGAFLOW_PG_PORT"],
            kafka_port=ports["SAGAFLOW_KAFKA_PORT"],
            kafka_controller_port=ports["SAGAFLOW_KAFKA_CONTROLLER_PORT"],
            kafka_jmx_port=ports["SAGAFLOW_KAFKA_JMX_PORT"],
            jaeger_otlp_grpc_port=ports["SAGAFLOW_JAEGER_OTLP_GRPC_PORT"],
            jaeger_otlp_http_port=ports["SAGAFLOW_JAEGER_OTLP_HTTP_PORT"],
            jaeger_query_port=ports["SAGAFLOW_JAEGER_QUERY_PORT"],
            jaeger_query_grpc_port=ports["SAGAFLOW_JAEGER_QUERY_GRPC_PORT"],
            jaeger_otlp_http_behind_port=ports["SAGAFLOW_JAEGER_OTLP_HTTP_BEHIND_PORT"],
        )

    @property
    def postgres_url(self) -> str:
        return f"postgresql://postgres@{HOST}:{self.pg_port}/postgres"

    @property
    def kafka_bootstrap(self) -> str:
        return f"{HOST}:{self.kafka_port}"

    @property
    def jaeger_otlp_url(self) -> str:
        """OTLP/HTTP base URL (append ``/v1/traces``)."""
        return f"http://{HOST}:{self.jaeger_otlp_http_port}"

    @property
    def jaeger_query_url(self) -> str:
        return f"http://{HOST}:{self.jaeger_query_port}"


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        raise DevstackError(f"{name}={raw!r} is not a port number") from None
    if not 0 < port < 65536:
        raise DevstackError(f"{name}={port} is out of range")
    return port
