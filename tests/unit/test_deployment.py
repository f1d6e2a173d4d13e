"""The Kubernetes manifests and compose.yaml use only settings and commands that exist."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "docs" / "configuration.md").read_text()
SCRIPTS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


def _manifests() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "docs/deploy/kubernetes.yaml").read_text()) if d]


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return list(spec.get("containers", []))


def test_every_variable_the_deployments_set_is_in_the_reference() -> None:
    texts = [(ROOT / name).read_text() for name in ("docs/deploy/kubernetes.yaml", "compose.yaml")]
    used = {name for text in texts for name in re.findall(r"\b((?:SAGAFLOW|OTEL)_[A-Z_]+)", text)}
    example_only = {"SAGAFLOW_CARRIER_DELAY_MS"}  # the demo's slow carrier, not a product setting
    unknown = {name for name in used - example_only if f"`{name}`" not in REFERENCE}
    assert not unknown, f"not in docs/configuration.md: {sorted(unknown)}"


def test_every_deployment_has_probes_a_grace_period_and_a_real_command() -> None:
    deployments = [d for d in _manifests() if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {
        "sagaflow-coordinator", "sagaflow-relay", "sagaflow-api", "payments"}
    for doc in deployments:
        assert doc["spec"]["replicas"] >= 2, doc["metadata"]["name"]
        assert doc["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 30
        for container in _containers(doc):
            assert container["livenessProbe"] and container["readinessProbe"]
            command = container["command"]
            assert command[0] in SCRIPTS or command[:2] == ["python", "-m"], command
    api = next(d for d in deployments if d["metadata"]["name"] == "sagaflow-api")
    (container,) = _containers(api)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
