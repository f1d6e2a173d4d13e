"""Ports of the HA mode's extra processes (the standby, brokers 2 and 3), from the environment.

The primary and broker 1 keep the single-node ports (``SAGAFLOW_PG_PORT``,
``SAGAFLOW_KAFKA_PORT``, ``SAGAFLOW_KAFKA_CONTROLLER_PORT``), so ``up --ha`` replaces the
single-node stack rather than running beside it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from devstack.config import HOST, Settings, _port

# env var -> default port
HA_PORT_DEFAULTS: dict[str, int] = {
    "SAGAFLOW_PG_STANDBY_PORT": 55433,
    "SAGAFLOW_KAFKA2_PORT": 19094,
    "SAGAFLOW_KAFKA2_CONTROLLER_PORT": 19095,
    "SAGAFLOW_KAFKA3_PORT": 19096,
    "SAGAFLOW_KAFKA3_CONTROLLER_PORT": 19097,
}


@dataclass(frozen=True, kw_only=True)
class HaSettings:
    """The single-node settings plus the standby's port and every broker's two ports.

    Attributes:
        base: paths and the primary's / broker 1's ports.
        pg_standby_port: the synchronous standby's port.
        kafka_nodes: ``(broker port, controller port)`` of brokers 1, 2 and 3.
    """

    base: Settings
    pg_standby_port: int
    kafka_nodes: tuple[tuple[int, int], ...]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HaSettings:
        env = os.environ if env is None else env
        base = Settings.from_env(env)
        ports = {name: _port(env, name, default) for name, default in HA_PORT_DEFAULTS.items()}
        return cls(
            base=base,
            pg_standby_port=ports["SAGAFLOW_PG_STANDBY_PORT"],
            kafka_nodes=(
                (base.kafka_port, base.kafka_controller_port),
                (ports["SAGAFLOW_KAFKA2_PORT"], ports["SAGAFLOW_KAFKA2_CONTROLLER_PORT"]),
                (ports["SAGAFLOW_KAFKA3_PORT"], ports["SAGAFLOW_KAFKA3_CONTROLLER_PORT"]),
            ),
        )

    @property
    def standby(self) -> Settings:
        """The base settings with the standby's port as ``pg_port``."""
        return replace(self.base, pg_port=self.pg_standby_port)

    def kafka_node(self, index: int) -> Settings:
        """The base settings with broker ``index``'s (0-based) ports."""
        port, controller = self.kafka_nodes[index]
        return replace(self.base, kafka_port=port, kafka_controller_port=controller)

    @property
    def postgres_url(self) -> str:
        """A multi-host DSN that always lands on the writable server, primary or promoted."""
        hosts = f"{HOST}:{self.base.pg_port},{HOST}:{self.pg_standby_port}"
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(f"{HOST}:{port}" for port, _ in self.kafka_nodes)
