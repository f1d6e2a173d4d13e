"""A three-node Apache Kafka 4.x KRaft cluster (each node broker and controller), loopback only.

Topics default to replication factor 3 with ``min.insync.replicas=2``, so an ``acks=all`` write
is on two brokers before it is acknowledged and the cluster keeps taking writes with one broker
lost for good. The controller quorum (three voters) survives one loss too.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from devstack import procs
from devstack.config import HOST, Settings
from devstack.ha_config import HaSettings
from devstack.kafka import Kafka, roundtrip, run_sync
from devstack.service import State, Status

NODE_HEAP = "-Xmx256m"
log = logging.getLogger(__name__)


class KafkaNode(Kafka):
    """One combined broker+controller of the cluster."""

    heap = NODE_HEAP

    def __init__(
        self, settings: Settings, node_id: int, voters: str, cluster_id_file: Path
    ) -> None:
        super().__init__(settings)
        self.node_id = node_id
        self.name = f"kafka-{node_id}"
        self.voters = voters
        self.cluster_id_file = cluster_id_file

    def server_props(self) -> dict[str, str]:
        return {
            **super().server_props(),
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "unclean.leader.election.enable": "false",
            "offsets.topic.replication.factor": "3",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "share.coordinator.state.topic.replication.factor": "3",
            "share.coordinator.state.topic.min.isr": "2",
        }

    def healthy(self) -> bool:
        return procs.port_open(self.settings.kafka_port)

    def jmx_options(self) -> list[str]:
        return []  # three nodes would share the one port

    def cluster_id(self) -> str:
        return self.ensure_cluster_id()

    def ensure_cluster_id(self) -> str:
        """One id for every node, made by the first node formatted."""
        path = self.cluster_id_file
        if not path.is_file():
            path.write_text(new_cluster_id() + "\n")
        return path.read_text().strip()


def new_cluster_id() -> str:
    """A Kafka cluster id: a random UUID in URL-safe base64 that does not start with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


class KafkaCluster:
    """Three :class:`KafkaNode` processes, started, checked and stopped as one."""

    name = "kafka-ha"
    start_timeout = 180.0

    def __init__(self, settings: HaSettings) -> None:
        self.settings = settings
        voters = ",".join(
            f"{i + 1}@{HOST}:{controller}" for i, (_, controller) in enumerate(settings.kafka_nodes)
        )
        settings.base.home.mkdir(parents=True, exist_ok=True)
        id_file = settings.base.home / "kafka-ha.cluster-id"
        self.nodes = [
            KafkaNode(settings.kafka_node(i), i + 1, voters, id_file)
            for i in range(len(settings.kafka_nodes))
        ]

    @property
    def address(self) -> str:
        return self.settings.kafka_bootstrap

    def healthy(self) -> bool:
        """Every node listens and the cluster takes an ``acks=all`` write and serves it back."""
        if not all(node.healthy() for node in self.nodes):
            return False
        return run_sync(roundtrip(self.address, within=15.0))

    def status(self) -> Status:
        pids = [node.pid() for node in self.nodes]
        if all(pid is None for pid in pids):
            state = State.STOPPED
        else:
            state = State.RUNNING if None not in pids and self.healthy() else State.UNHEALTHY
        return Status(name=self.name, state=state, address=self.address, pid=pids[0],
                      log_file=self.nodes[0].log_file)

    def up(self) -> Status:
        """Start every node that is not running, then wait until the cluster serves."""
        with procs.file_lock(self.settings.base.home / f".{self.name}.lock"):
            stopped = [node for node in self.nodes if node.pid() is None]
            if stopped:
                stopped[0].ensure_cluster_id()
            with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:  # formats in parallel
                for done in [pool.submit(node.install) for node in stopped]:
                    done.result()
            for node in stopped:
                log.info("starting %s", node.name)
                node.start()
            started = time.monotonic()
            procs.wait_until(
                self.healthy,
                timeout=self.start_timeout,
                what=f"{self.name} start",
                alive=lambda: all(node.pid() is not None for node in self.nodes),
                log_file=self.nodes[0].stdout_file,
                interval=1.0,
            )
            log.info("%s serving after %.1fs", self.name, time.monotonic() - started)
            return self.status()

    def down(self) -> Status:
        with procs.file_lock(self.settings.base.home / f".{self.name}.lock"):
            # All at once: the last node of a sequential stop would wait for a quorum gone.
            running = [(node, pid) for node in self.nodes if (pid := node.pid()) is not None]
            with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
                for done in [pool.submit(node.stop, pid) for node, pid in running]:
                    done.result()
            return self.status()
