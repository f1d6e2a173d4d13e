"""``python -m devstack COMMAND [postgres|kafka|jaeger|pgbouncer|all] [--ha]``.

Commands: ``up``, ``down``, ``status``, ``install`` (fetch or build only), ``env``, ``app-env``.

``env`` prints the ``SAGAFLOW_TEST_*`` variables of the test fixtures; ``app-env`` the
variables that point sagaflow's own processes (coordinator, API, relay) at the local services.
``--ha``: a Postgres primary with a synchronous standby and a three-broker Kafka cluster.
``--jaeger-in-background`` (``make demo``): Jaeger's first build does not hold up the rest.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from collections.abc import Sequence

from devstack import procs, stack
from devstack.acquire import (
    ENV_JAEGER_OTLP,
    ENV_JAEGER_QUERY,
    ENV_KAFKA,
    ENV_KAFKA_JMX,
    ENV_PGBOUNCER,
    ENV_POSTGRES,
)
from devstack.config import Settings
from devstack.errors import DevstackError
from devstack.ha_config import HaSettings
from devstack.jaeger import Jaeger
from devstack.pgbouncer import Pgbouncer
from devstack.requirements import require
from devstack.service import Service, State


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m devstack", description=__doc__)
    p.add_argument("command", choices=["up", "down", "status", "install", "env", "app-env"])
    p.add_argument("service", nargs="?", default="all", choices=[*stack.NAMES, "all"])
    p.add_argument("--ha", action="store_true",
                   help="Postgres primary + synchronous standby, three Kafka brokers")
    p.add_argument("--jaeger-in-background", action="store_true",
                   help="up: do not wait for Jaeger's first build (minutes); it runs in the "
                        "background and the spans sent meanwhile are kept for it")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def fixture_env(settings: Settings, *, ha: bool = False) -> dict[str, str]:
    """The SAGAFLOW_TEST_* variables that point the test fixtures at the local services."""
    ha_settings = HaSettings.from_env() if ha else None
    env = {
        ENV_POSTGRES: ha_settings.postgres_url if ha_settings else settings.postgres_url,
        ENV_KAFKA: ha_settings.kafka_bootstrap if ha_settings else settings.kafka_bootstrap,
        ENV_JAEGER_OTLP: settings.jaeger_otlp_url,
        ENV_JAEGER_QUERY: settings.jaeger_query_url,
        ENV_PGBOUNCER: Pgbouncer(settings).url,
    }
    if ha_settings is None:  # the cluster's nodes open no JMX port
        env[ENV_KAFKA_JMX] = str(settings.kafka_jmx_port)
    return env


def app_env(settings: Settings, *, ha: bool = False) -> dict[str, str]:
    """What ``sagaflow-coordinator``, ``sagaflow-relay`` and the API read to use these services."""
    ha_settings = HaSettings.from_env() if ha else None
    return {
        "SAGAFLOW_DSN": ha_settings.postgres_url if ha_settings else settings.postgres_url,
        "SAGAFLOW_KAFKA_BOOTSTRAP": (ha_settings.kafka_bootstrap if ha_settings
                                     else settings.kafka_bootstrap),
        "OTEL_EXPORTER_OTLP_ENDPOINT": settings.jaeger_otlp_url,
        "SAGAFLOW_JAEGER_QUERY": settings.jaeger_query_url,
    }


def _install(services: list[stack.Unit]) -> int:
    """Fetch or build what the services need, starting nothing (``make demo`` runs this for
    Postgres and Kafka while it installs the virtual environment: standard library only)."""
    for service in services:
        if not isinstance(service, Service):
            print(f"{service.name:<9} FAILED     install takes single services", file=sys.stderr)
            return 1
        try:
            with procs.file_lock(service.settings.home / f".{service.name}.lock"):
                service.dir.mkdir(parents=True, exist_ok=True)
                service.install()
        except DevstackError as exc:
            print(f"{service.name:<9} FAILED     {exc}", file=sys.stderr)
            return 1
        print(f"{service.name:<9} installed")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="devstack: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    settings = Settings.from_env()
    if args.command in ("env", "app-env"):
        chosen = (fixture_env(settings, ha=args.ha) if args.command == "env"
                  else app_env(settings, ha=args.ha))
        for key, value in chosen.items():
            print(f"export {key}={shlex.quote(value)}")
        return 0
    services = stack.select(settings, args.service, ha=args.ha)
    if args.command == "install":
        return _install(services)
    if args.command != "down":
        try:
            require(s.name for s in services)
        except DevstackError as exc:
            print(f"devstack: {exc}", file=sys.stderr)
            return 2
    if args.command == "down":
        services.reverse()
    ok = True
    for service in services:
        started = time.monotonic()
        try:
            if args.command == "up" and args.jaeger_in_background and isinstance(service, Jaeger):
                status = service.up_in_background()
            elif args.command == "up":
                status = service.up()
            elif args.command == "down":
                status = service.down()
            else:
                status = service.status()
        except DevstackError as exc:
            print(f"{service.name:<9} FAILED     {exc}", file=sys.stderr)
            ok = False
            continue
        took = time.monotonic() - started
        print(status.line() + (f" ({took:.1f}s)" if args.command != "status" else ""))
        if args.command == "up" and not status.usable and status.state is not State.BUILDING:
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
