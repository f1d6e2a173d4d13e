"""The set of local services, addressed by name (``ha``: the failover-ready variants)."""

from __future__ import annotations

from devstack.config import Settings
from devstack.ha_config import HaSettings
from devstack.ha_kafka import KafkaCluster
from devstack.ha_postgres import PostgresPair
from devstack.jaeger import Jaeger
from devstack.kafka import Kafka
from devstack.pgbouncer import Pgbouncer
from devstack.postgres import Postgres
from devstack.service import Service

NAMES = ("postgres", "kafka", "jaeger", "pgbouncer")

#: A single service, or a group of them driven as one (the HA pair and cluster).
Unit = Service | PostgresPair | KafkaCluster


def build(settings: Settings, *, ha: bool = False) -> dict[str, Unit]:
    if ha:
        ha_settings = HaSettings.from_env()
        return {"postgres": PostgresPair(ha_settings), "kafka": KafkaCluster(ha_settings),
                "jaeger": Jaeger(settings), "pgbouncer": Pgbouncer(settings)}
    return {"postgres": Postgres(settings), "kafka": Kafka(settings), "jaeger": Jaeger(settings),
            "pgbouncer": Pgbouncer(settings)}


def select(settings: Settings, which: str, *, ha: bool = False) -> list[Unit]:
    """Services named by ``which`` (a service name or ``all``), in start order.

    ``all`` leaves PgBouncer out when it is not installed: only the tests of the pooler path
    need it (``.ci/run`` installs it), not the demo; by name it is always selected, so a
    missing binary is then the usual one-line error.
    """
    services = build(settings, ha=ha)
    if which == "all":
        return [s for s in services.values()
                if not (isinstance(s, Pgbouncer) and not s.installed())]
    return [services[which]]
