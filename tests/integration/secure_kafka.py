"""A real Kafka broker that only speaks SASL_SSL to clients: a test-owned KRaft node.

It runs the jars devstack fetched, with a throwaway CA and a server certificate for
127.0.0.1 (openssl), the PLAIN user in the listener's JAAS config and the SCRAM-SHA-256 and
SCRAM-SHA-512 credentials written at format time. Brokers and the controller talk plain TCP on
their own listeners; clients get the SASL_SSL port only. It is devstack's broker with those
listeners, started and stopped the way devstack does.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devstack import procs
from devstack.config import HOST, Settings
from devstack.kafka import Kafka

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


class SecureKafka(Kafka):
    """devstack's broker with a SASL_SSL client listener and plain internal ones."""

    name = "kafka-sasl-ssl"
    heap = "-Xmx512m"

    def __init__(self, settings: Settings, internal_port: int, server_pem: Path) -> None:
        super().__init__(settings)
        self.internal_port = internal_port
        self.server_pem = server_pem

    def server_props(self) -> dict[str, str]:
        client, controller = self.settings.kafka_port, self.settings.kafka_controller_port
        plain = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                 f'user_{USER}="{PASSWORD}";')
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {
            **super().server_props(),
            "listeners": (f"SASL_SSL://{HOST}:{client},INTERNAL://{HOST}:{self.internal_port},"
                          f"CONTROLLER://{HOST}:{controller}"),
            "advertised.listeners": f"SASL_SSL://{HOST}:{client},INTERNAL://{HOST}:{self.internal_port}",
            "listener.security.protocol.map":
                "SASL_SSL:SASL_SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.server_pem),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
        }

    def format_args(self) -> list[str]:
        return ["--add-scram", f"SCRAM-SHA-256=[name={USER},password={PASSWORD}]",
                "--add-scram", f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"]

    def healthy(self) -> bool:
        """The client port listens (the PLAINTEXT round trip devstack uses cannot reach it)."""
        return procs.port_open(self.settings.kafka_port)


@contextlib.contextmanager
def secure_broker(work: Path) -> Iterator[SecureBroker]:
    """Start the broker in ``work``; stop it on exit."""
    cafile, server_pem = certificates(work)
    settings = Settings(home=work, cache=Settings.from_env().cache,
                        kafka_port=_free_port(), kafka_controller_port=_free_port())
    broker = SecureKafka(settings, _free_port(), server_pem)
    try:
        broker.up()
        yield SecureBroker(bootstrap=broker.address, cafile=cafile)
    finally:
        broker.down()
