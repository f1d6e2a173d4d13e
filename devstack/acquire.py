"""Find or start the services tests need: env vars, then testcontainers, then local processes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

ENV_POSTGRES = "SAGAFLOW_TEST_POSTGRES_URL"
ENV_KAFKA = "SAGAFLOW_TEST_KAFKA_BOOTSTRAP"
ENV_JAEGER_OTLP = "SAGAFLOW_TEST_JAEGER_OTLP"  # OTLP/HTTP base URL, e.g. http://127.0.0.1:4318
ENV_PGBOUNCER = "SAGAFLOW_TEST_PGBOUNCER_URL"  # PgBouncer (transaction mode) in front of Postgres
ENV_JAEGER_QUERY = "SAGAFLOW_TEST_JAEGER_QUERY"  # query API base URL, e.g. http://127.0.0.1:16686
ENV_KAFKA_JMX = "SAGAFLOW_TEST_KAFKA_JMX_PORT"  # the single broker's JMX port (bench.kafka_cost)


@dataclass
class Endpoints:
    """Addresses of the services, resolved lazily so a unit run starts nothing."""

    _cache: dict[str, str] = field(default_factory=dict)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def postgres_url(self) -> str:
        return self._get("postgres", ENV_POSTGRES)

    def kafka_bootstrap(self) -> str:
        return self._get("kafka", ENV_KAFKA)

    def jaeger_otlp(self) -> str:
        return self._get("jaeger_otlp", ENV_JAEGER_OTLP)

    def jaeger_query(self) -> str:
        return self._get("jaeger_query", ENV_JAEGER_QUERY)

    def _get(self, name: str, env: str) -> str:
        if name not in self._cache:
            value = os.environ.get(env)
            if not value:
                from devstack.provision import provision

                value = provision(name, self._stack)
            self._cache[name] = value
        return self._cache[name]


@contextlib.contextmanager
def acquire_services() -> Iterator[Endpoints]:
    endpoints = Endpoints()
    with endpoints._stack:
        yield endpoints
