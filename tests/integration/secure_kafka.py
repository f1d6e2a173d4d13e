"""A real Kafka broker that only speaks SASL_SSL to clients: a test-owned KRaft node.

It runs the jars devstack fetched, with a throwaway CA and a server certificate for
127.0.0.1 (openssl), the PLAIN user in the listener's JAAS config and the SCRAM-SHA-256 and
SCRAM-SHA-512 credentials written at format time. Brokers and the controller talk plain TCP on
their own listeners; clients get the SASL_SSL port only.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devstack import procs
from devstack.config import Settings
from devstack.kafka import KAFKA_VERSION, _java, fetch_libs

USER = "alice"
PASSWORD = "alice-secret-pw"


@dataclass(frozen=True)
class SecureBroker:
    bootstrap: str
    cafile: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def certificates(work: Path) -> tuple[Path, Path]:
    """(CA certificate, server key+certificate PEM) for 127.0.0.1 and localhost."""
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=work, check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=sagaflow-test-ca")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost")
    (work / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "san.ext")
    server = work / "server.pem"
    server.write_text((work / "server.key").read_text() + (work / "server.crt").read_text())
    return work / "ca.pem", server


def _properties(work: Path, server_pem: Path, client: int, internal: int,
                controller: int) -> str:
    plain = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
             f'user_{USER}="{PASSWORD}";')
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listeners": (f"SASL_SSL://127.0.0.1:{client},INTERNAL://127.0.0.1:{internal},"
                      f"CONTROLLER://127.0.0.1:{controller}"),
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{client},INTERNAL://127.0.0.1:{internal}",
        "listener.security.protocol.map":
            "SASL_SSL:SASL_SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(server_pem),
        "log.dirs": str(work / "data"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


@contextlib.contextmanager
def secure_broker(work: Path) -> Iterator[SecureBroker]:
    """Start the broker in ``work``; stop it on exit."""
    libs = Settings.from_env().cache / f"kafka-{KAFKA_VERSION}" / "libs"
    fetch_libs(libs)
    cafile, server_pem = certificates(work)
    client, internal, controller = _free_port(), _free_port(), _free_port()
    properties = work / "server.properties"
    properties.write_text(_properties(work, server_pem, client, internal, controller))
    log4j = Path(procs.__file__).parent / "resources" / "kafka" / "log4j2.properties"

    def java(main: str, *args: str) -> list[str]:
        return [_java(), "-Xmx512m", f"-Dlog4j2.configurationFile={log4j}",
                f"-Dkafka.logs.dir={work}", "-cp", f"{libs}/*", main, *args]

    cluster = procs.run(java("kafka.tools.StorageTool", "random-uuid"), timeout=120,
                        cwd=work).strip()
    procs.run(java("kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(properties),
                   "--add-scram", f"SCRAM-SHA-256=[name={USER},password={PASSWORD}]",
                   "--add-scram", f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"),
              timeout=120, cwd=work)
    with (work / "stdout.log").open("wb") as out:
        proc = subprocess.Popen(java("kafka.Kafka", str(properties)), cwd=work, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while not procs.port_open(client):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the SASL_SSL broker did not start:\n"
                                   + procs.tail(work / "stdout.log", 30))
            time.sleep(0.3)
        yield SecureBroker(bootstrap=f"127.0.0.1:{client}", cafile=cafile)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
