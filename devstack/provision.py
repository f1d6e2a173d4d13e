"""Provide one test service: a Docker container when an engine answers, else a local process.

Called by :mod:`devstack.acquire` for ``postgres``, ``kafka``, ``jaeger_otlp`` and
``jaeger_query`` when no ``SAGAFLOW_TEST_*`` variable names the service.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

from devstack.config import Settings
from devstack.errors import DevstackError, ProvisionError
from devstack.jaeger import Jaeger
from devstack.kafka import Kafka
from devstack.postgres import Postgres
from devstack.service import Service

POSTGRES_IMAGE = "postgres:15"
KAFKA_IMAGE = "confluentinc/cp-kafka:8.0.0"  # Apache Kafka 4.0 in KRaft mode
JAEGER_IMAGE = "jaegertracing/jaeger:2.13.0"

log = logging.getLogger(__name__)

NAMES = ("postgres", "kafka", "jaeger_otlp", "jaeger_query")


def provision(name: str, stack: contextlib.ExitStack) -> str:
    """Return the address of service ``name``, starting it if needed.

    Containers are stopped when ``stack`` closes; local processes are left running so the
    next session reuses them.
    """
    if name not in NAMES:
        raise ProvisionError(f"unknown service {name!r}; expected one of {NAMES}")
    errors: list[str] = []
    if docker_available():
        try:
            return _from_docker(name, stack)
        except Exception as exc:  # fall back to local processes, but say why
            log.warning("docker could not provide %s: %r", name, exc)
            errors.append(f"docker: {exc!r}")
    try:
        return _from_local(name, Settings.from_env())
    except DevstackError as exc:
        errors.append(f"local: {exc}")
    ci = " (CI=true: this is a failure, never a skip)" if _ci() else ""
    raise ProvisionError(
        f"cannot provide test service {name!r}{ci}. Set its SAGAFLOW_TEST_* variable, "
        "start Docker, or fix the local service (`python -m devstack up`):\n" + "\n".join(errors)
    )


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def docker_available(timeout: float = 3.0) -> bool:
    """True when a Docker engine answers ``docker info`` quickly."""
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        done = subprocess.run(
            [docker, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


def _from_local(name: str, settings: Settings) -> str:
    service: Service
    if name == "postgres":
        service = Postgres(settings)
        service.up()
        return settings.postgres_url
    if name == "kafka":
        service = Kafka(settings)
        service.up()
        return settings.kafka_bootstrap
    Jaeger(settings).up()
    return settings.jaeger_otlp_url if name == "jaeger_otlp" else settings.jaeger_query_url


# One Jaeger container serves both jaeger_* names; keyed by the ExitStack that owns it.
_jaeger_containers: dict[int, Any] = {}


def _from_docker(name: str, stack: contextlib.ExitStack) -> str:
    if name == "postgres":
        from testcontainers.community.postgres import PostgresContainer

        pg = _started(stack, lambda: PostgresContainer(POSTGRES_IMAGE, driver=None))
        host, port = pg.get_container_host_ip(), pg.get_exposed_port(5432)
        return f"postgresql://{pg.username}:{pg.password}@{host}:{port}/{pg.dbname}"
    if name == "kafka":
        from testcontainers.community.kafka import KafkaContainer

        kafka = _started(stack, lambda: KafkaContainer(KAFKA_IMAGE).with_kraft())
        return str(kafka.get_bootstrap_server())
    jaeger = _jaeger_containers.get(id(stack))
    if jaeger is None:
        jaeger = _started(stack, _jaeger_container)
        _jaeger_containers[id(stack)] = jaeger
        stack.callback(_jaeger_containers.pop, id(stack), None)
        _wait_jaeger(jaeger)
    port = 4318 if name == "jaeger_otlp" else 16686
    return f"http://{jaeger.get_container_host_ip()}:{jaeger.get_exposed_port(port)}"


def _started(stack: contextlib.ExitStack, make: Callable[[], Any]) -> Any:
    container = make()
    container.start()
    stack.callback(container.stop)
    return container


def _jaeger_container() -> Any:
    from testcontainers.core.container import DockerContainer

    return DockerContainer(JAEGER_IMAGE).with_exposed_ports(4317, 4318, 16686)


def _wait_jaeger(container: Any, timeout: float = 60.0) -> None:
    import urllib.request

    from devstack import procs

    url = (
        f"http://{container.get_container_host_ip()}:{container.get_exposed_port(16686)}"
        "/api/services"
    )

    def answers() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=3) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    procs.wait_until(answers, timeout=timeout, what="jaeger container")
