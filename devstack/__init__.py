"""Local development services (Postgres, Kafka, Jaeger) for the demo, tests and benchmarks.

``python -m devstack up|down|status|env [postgres|kafka|jaeger|all] [--ha]`` drives them from a
shell (``--ha``: :class:`PostgresPair` and :class:`KafkaCluster`); :func:`provision` hands them
to the test fixtures.
"""

from devstack.config import Settings
from devstack.errors import DevstackError, ProvisionError, ServiceError
from devstack.ha_config import HaSettings
from devstack.ha_kafka import KafkaCluster
from devstack.ha_postgres import PostgresPair
from devstack.jaeger import Jaeger
from devstack.kafka import Kafka
from devstack.postgres import Postgres
from devstack.provision import provision
from devstack.service import Service, State, Status

__all__ = [
    "DevstackError",
    "HaSettings",
    "Jaeger",
    "Kafka",
    "KafkaCluster",
    "Postgres",
    "PostgresPair",
    "ProvisionError",
    "Service",
    "ServiceError",
    "Settings",
    "State",
    "Status",
    "provision",
]
