"""compose.yaml offers the whole stack to Docker users."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
INFRA = {"postgres", "kafka", "jaeger"}
APPS = {"coordinator", "relay", "payments", "inventory", "shipping"}


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
