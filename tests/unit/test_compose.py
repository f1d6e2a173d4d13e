"""compose.yaml offers the whole stack to Docker users."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from coordinator.engine.compiled import compile_saga
from coordinator.sagas.diagram import load_saga_class
from examples.stack import SAGAS

ROOT = Path(__file__).resolve().parents[2]
INFRA = {"postgres", "kafka", "jaeger"}
APPS = {"coordinator", "api", "relay", "payments", "inventory", "shipping", "carrier_a",
        "carrier_b"}


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def test_services_present() -> None:
    assert INFRA | APPS <= set(_compose()["services"])


def test_infra_images() -> None:
    services = _compose()["services"]
    assert services["postgres"]["image"].startswith("postgres:15")
    assert services["kafka"]["image"].startswith("apache/kafka:4.")
    assert services["jaeger"]["image"].startswith("jaegertracing/jaeger:2.")


def test_apps_build_from_repo_dockerfile() -> None:
    services = _compose()["services"]
    assert (ROOT / "Dockerfile").is_file()
    for name in APPS:
        assert services[name]["build"]["context"] == ".", name
        assert services[name]["command"], name


def test_the_coordinator_runs_every_example_saga_and_each_participant_is_a_service() -> None:
    services = _compose()["services"]
    sagas = services["coordinator"]["environment"]["SAGAFLOW_SAGAS"].split(",")
    assert sagas == list(SAGAS)
    for spec in sagas:
        participants = {s.participant for s in compile_saga(load_saga_class(spec)).steps
                        if s.child is None}  # a child saga node runs a saga, not a service
        assert participants <= set(services), (spec, participants - set(services))
        for name in participants:  # each with a database of its own
            dsn = services[name]["environment"]["SAGAFLOW_PARTICIPANT_DSN"]
            assert dsn.endswith(f"/{name}"), dsn
            init = _compose()["configs"]["create-databases"]["content"]
            assert f"CREATE DATABASE {name};" in init


def test_the_api_serves_the_same_sagas_beyond_its_container() -> None:
    services = _compose()["services"]
    api, worker = services["api"], services["coordinator"]
    assert api["command"] == ["python", "-m", "coordinator", "api"]
    assert api["environment"]["SAGAFLOW_SAGAS"] == worker["environment"]["SAGAFLOW_SAGAS"]
    assert api["environment"]["SAGAFLOW_DSN"] == worker["environment"]["SAGAFLOW_DSN"]
    assert api["environment"]["SAGAFLOW_API_HOST"] == "0.0.0.0"
    assert api["environment"]["SAGAFLOW_API_TOKENS"].count(":") == 2
    assert api["ports"] == ["127.0.0.1:8080:8080"]
    assert "/readyz" in " ".join(api["healthcheck"]["test"])
