"""The set of local services, addressed by name."""

from __future__ import annotations

from devstack.config import Settings
from devstack.jaeger import Jaeger
from devstack.kafka import Kafka
from devstack.postgres import Postgres
from devstack.service import Service

NAMES = ("postgres", "kafka", "jaeger")


def build(settings: Settings) -> dict[str, Service]:
    services: list[Service] = [Postgres(settings), Kafka(settings), Jaeger(settings)]
    return {s.name: s for s in services}


def select(settings: Settings, which: str) -> list[Service]:
    """Services named by ``which`` (a service name or ``all``), in start order."""
    services = build(settings)
    if which == "all":
        return list(services.values())
    return [services[which]]
