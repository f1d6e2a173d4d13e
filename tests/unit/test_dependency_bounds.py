"""The dependency ranges users get: what a plain ``pip install 'sagaflow-tcc[all]'`` resolves."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        listed += extra
    return [Requirement(r) for r in listed]


def test_the_opentelemetry_instrumentations_stay_on_one_release() -> None:
    # Mixed releases made pip 23.2 give up (ResolutionImpossible): see pyproject.toml.
    ranges = {r.name: str(r.specifier) for r in _requirements()
              if r.name.startswith("opentelemetry-instrumentation-")}
    assert set(ranges) == {"opentelemetry-instrumentation-aiokafka",
                           "opentelemetry-instrumentation-asyncpg",
                           "opentelemetry-instrumentation-fastapi"}
    assert len(set(ranges.values())) == 1, ranges
    upper = next(iter(ranges.values()))
    assert "<" in upper, "without an upper bound a newer, partial release can be picked"


def test_constraints_pin_versions_inside_the_ranges() -> None:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    for req in _requirements():
        if req.name == "sagaflow-tcc":
            continue
        pinned = pins.get(req.name.lower().replace("_", "-"))
        assert pinned is not None, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pinned, prereleases=True), (req.name, pinned)
