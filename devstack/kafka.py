"""A single-node Apache Kafka 4.x broker in KRaft mode, jars resolved from Maven Central."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from devstack import procs
from devstack.config import HOST, RESOURCES
from devstack.errors import ServiceError
from devstack.service import Service

KAFKA_VERSION = "4.4.0"
HEALTH_TOPIC = "devstack-health"
HEAP = "-Xmx768m"
T = TypeVar("T")

log = logging.getLogger(__name__)


class Kafka(Service):
    name = "kafka"
    start_timeout = 120.0
    heap = HEAP

    @property
    def address(self) -> str:
        return self.settings.kafka_bootstrap

    @property
    def log_file(self) -> Path:
        return self.dir / "server.log"

    @property
    def stdout_file(self) -> Path:
        return self.dir / "stdout.log"

    @property
    def properties(self) -> Path:
        return self.dir / "server.properties"

    @property
    def libs(self) -> Path:
        return self.settings.cache / f"kafka-{KAFKA_VERSION}" / "libs"

    def ports(self) -> list[int]:
        return [self.settings.kafka_port, self.settings.kafka_controller_port]

    def pid(self) -> int | None:
        return procs.pid_running(self.dir / "kafka.pid", str(self.properties))

    def healthy(self) -> bool:
        if not procs.port_open(self.settings.kafka_port):
            return False
        return run_sync(roundtrip(self.address, within=15.0))

    def install(self) -> None:
        fetch_libs(self.libs)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.properties.write_text(self._server_properties())
        shutil.copyfile(RESOURCES / "kafka" / "log4j2.properties", self.dir / "log4j2.properties")
        if not (self.dir / "data" / "meta.properties").is_file():
            self._java("kafka.tools.StorageTool", "format", "-t", self.cluster_id(),
                       "-c", str(self.properties), *self.format_args())

    def cluster_id(self) -> str:
        """The id the storage is formatted with (a cluster's nodes share one)."""
        return self._java("kafka.tools.StorageTool", "random-uuid").strip()

    def format_args(self) -> list[str]:
        """More ``StorageTool format`` arguments (a broker with SCRAM users adds them)."""
        return []

    def _server_properties(self) -> str:
        return "".join(f"{k}={v}\n" for k, v in self.server_props().items())

    def server_props(self) -> dict[str, str]:
        """The broker's ``server.properties`` (the HA cluster's nodes change some)."""
        s = self.settings
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{HOST}:{s.kafka_controller_port}",
            "listeners": f"PLAINTEXT://{HOST}:{s.kafka_port},CONTROLLER://{HOST}:{s.kafka_controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{s.kafka_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(self.dir / "data"),
            "num.partitions": "8",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }

    def _java_argv(self, main: str, *args: str) -> list[str]:
        return [
            _java(),
            self.heap,
            f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.dir}",
            "-cp",
            f"{self.libs}/*",
            main,
            *args,
        ]

    def _java(self, main: str, *args: str) -> str:
        return procs.run(self._java_argv(main, *args), timeout=120, cwd=self.dir)

    def jmx_options(self) -> list[str]:
        """JMX on 127.0.0.1 only, without authentication: the broker's own request metrics
        for ``python -m bench.kafka_cost`` (a local development broker, never a deployed one).

        None when the port is taken (another broker of this machine has it: a test's own
        broker beside devstack's): the JVM would refuse to start rather than go without."""
        port = self.settings.kafka_jmx_port
        if procs.port_open(port):
            log.info("%s: JMX port %d is taken; starting without JMX", self.name, port)
            return []
        return [
            "-Dcom.sun.management.jmxremote",
            f"-Dcom.sun.management.jmxremote.port={port}",
            f"-Dcom.sun.management.jmxremote.rmi.port={port}",
            f"-Dcom.sun.management.jmxremote.host={HOST}",
            f"-Djava.rmi.server.hostname={HOST}",
            "-Dcom.sun.management.jmxremote.authenticate=false",
            "-Dcom.sun.management.jmxremote.ssl=false",
        ]

    def start(self) -> None:
        argv = self._java_argv("kafka.Kafka", str(self.properties))
        procs.spawn_detached(
            [argv[0], *self.jmx_options(), *argv[1:]],
            pid_file=self.dir / "kafka.pid",
            log_file=self.stdout_file,
            cwd=self.dir,
        )

    def stop(self, pid: int) -> None:
        procs.terminate(pid, timeout=60)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java:
        raise ServiceError("Kafka needs Java 17+: install a JDK or set JAVA_HOME")
    return java


def fetch_libs(libs: Path) -> None:
    """Resolve the broker's jars with Maven into ``libs`` unless the cached copy is current."""
    pom = RESOURCES / "kafka" / "pom.xml"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    stamp = libs.parent / ".complete"
    if stamp.is_file() and stamp.read_text().strip() == digest and libs.is_dir():
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceError("Kafka's jars are fetched with Maven: install maven (mvn) first")
    build = libs.parent / "build"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    shutil.copyfile(pom, build / "pom.xml")
    staging = libs.parent / "libs.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    log.info("fetching Kafka %s jars with Maven into %s", KAFKA_VERSION, libs)
    procs.run(
        [
            mvn,
            "-q",
            "-B",
            "-f",
            str(build / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
        ],
        timeout=900,
        cwd=build,
    )
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    shutil.rmtree(build, ignore_errors=True)
    stamp.write_text(digest + "\n")


async def roundtrip(bootstrap: str, *, within: float) -> bool:
    """True when the broker takes an acks=all write and serves it back to a fetch."""
    try:
        async with asyncio.timeout(within):
            return await _roundtrip(bootstrap)
    except Exception as exc:  # any failure just means "not ready yet"
        log.debug("kafka round trip failed: %r", exc)
        return False


async def _roundtrip(bootstrap: str) -> bool:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    value = uuid.uuid4().bytes
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    try:
        await producer.start()
        meta = await producer.send_and_wait(HEALTH_TOPIC, value, partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        await consumer.start()
        tp = TopicPartition(HEALTH_TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, meta.offset)
        msg = await consumer.getone()
        return bool(msg.value == value)
    finally:
        await consumer.stop()


async def topic_names(bootstrap: str) -> set[str]:
    """The broker's topics, internal ones left out."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {name for name in await admin.list_topics() if not name.startswith("__")}
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, names: set[str], *, chunk: int = 200) -> None:
    """Delete ``names`` (in chunks: one request per ``chunk`` topics); absent ones are fine."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60_000)
    await admin.start()
    try:
        ordered = sorted(names)
        for start in range(0, len(ordered), chunk):
            await admin.delete_topics(ordered[start:start + chunk], timeout_ms=60_000)
    finally:
        await admin.close()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion, on a helper thread when this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
