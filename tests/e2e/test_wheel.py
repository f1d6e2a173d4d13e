"""The wheel as a user installs it: built from this tree, installed the way the README says (no
constraints file) in a clean venv outside the source tree, with the pip a new Python 3.11 venv
ships and with the newest pip, every extra; every console script answering ``--help`` and
``--version``."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_PACKAGES = {"coordinator", "outbox_relay", "participant_sdk"}


def _run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of this tree."""
    work = tmp_path_factory.mktemp("wheel")
    # A copy without build/ and *.egg-info: setuptools puts whatever an earlier build left in
    # build/lib into the wheel, so building in the tree could pass or fail for stale reasons.
    source = work / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".local", ".cache", "build", "dist", "*.egg-info", "__pycache__",
        ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", "results", ".site",
        ".constraints-venv"))
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work),
                  str(source)], cwd=work)
    assert built.returncode == 0, built.stderr
    (built_wheel,) = work.glob("*.whl")
    return built_wheel


def _venv(work: Path, *, newest_pip: bool) -> Path:
    """A new venv's bin directory, with the pip ``python3.11 -m venv`` bundles or the newest."""
    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=work)
    assert made.returncode == 0, made.stderr
    if newest_pip:
        upgraded = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                         "--disable-pip-version-check", "--upgrade", "pip"], cwd=work)
        assert upgraded.returncode == 0, upgraded.stderr
    return venv / "bin"


def _install(bin_dir: Path, requirement: str) -> None:
    """``pip install <requirement>`` as the README says: no constraints file."""
    pip = _run([str(bin_dir / "python"), "-m", "pip", "install", "-q",
                "--disable-pip-version-check", requirement], cwd=bin_dir)
    assert pip.returncode == 0, f"pip install {requirement}:\n{pip.stderr[-4000:]}"


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, the clean venv's bin directory) with the wheel installed, no extras."""
    bin_dir = _venv(tmp_path_factory.mktemp("base"), newest_pip=False)
    _install(bin_dir, str(wheel))
    return wheel, bin_dir


@pytest.mark.parametrize("newest_pip", [False, True], ids=["bundled-pip", "newest-pip"])
def test_every_extra_installs_without_constraints(
        wheel: Path, tmp_path_factory: pytest.TempPathFactory, newest_pip: bool) -> None:
    # The bundled pip (23.2 with Python 3.11) once backtracked the OpenTelemetry
    # instrumentations into a ResolutionImpossible; the lower bounds keep it from doing so.
    bin_dir = _venv(tmp_path_factory.mktemp("extras"), newest_pip=newest_pip)
    if not newest_pip:  # really the pip that ensurepip bundles, not one upgraded since
        pip = _run([str(bin_dir / "python"), "-m", "pip", "--version"], cwd=bin_dir)
        bundled = _run([str(bin_dir / "python"), "-c",
                        "import ensurepip; print(ensurepip.version())"], cwd=bin_dir)
        assert pip.stdout.split()[1] == bundled.stdout.strip(), pip.stdout
    _install(bin_dir, f"{wheel}[coordinator,all,dev]")
    probe = _run([str(bin_dir / "python"), "-c",
                  "import coordinator.api, coordinator.ui, fastapi, pytest, mkdocs"],
                 cwd=bin_dir, timeout=120)
    assert probe.returncode == 0, probe.stderr
    check = _run([str(bin_dir / "python"), "-m", "pip", "check"], cwd=bin_dir, timeout=120)
    assert check.returncode == 0, check.stdout


def _scripts(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt"))
        parser = configparser.ConfigParser()
        parser.read_string(zf.read(name).decode())
    return dict(parser["console_scripts"])


def test_wheel_holds_the_three_runtime_packages_and_the_license(
        installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    assert wheel.name.startswith("sagaflow_tcc-")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    top = {n.split("/")[0] for n in names if "/" in n and ".dist-info/" not in n}
    assert top == RUNTIME_PACKAGES
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "coordinator/migrations/0001_initial.sql" in names


def test_every_console_script_answers_help_and_version(installed: tuple[Path, Path]) -> None:
    wheel, bin_dir = installed
    scripts = _scripts(wheel)
    assert set(scripts) == {"saga", "sagaflow-coordinator", "sagaflow-relay", "sagaflow-barrier"}
    for script in scripts:
        shown = _run([str(bin_dir / script), "--help"], cwd=bin_dir, timeout=60)
        assert shown.returncode == 0, f"{script} --help: {shown.stderr}"
        assert shown.stdout.startswith(f"usage: {script}"), shown.stdout
        version = _run([str(bin_dir / script), "--version"], cwd=bin_dir, timeout=60)
        assert version.returncode == 0, f"{script} --version: {version.stderr}"
        assert version.stdout.strip() == f"{script} (sagaflow-tcc) 0.1.0"


def test_without_extras_the_sdk_imports_and_the_coordinator_names_its_extra(
        installed: tuple[Path, Path]) -> None:
    _, bin_dir = installed
    probe = _run([str(bin_dir / "python"), "-c",
                  "import participant_sdk, outbox_relay.cli, coordinator.cli.ops\n"
                  "try:\n    import fastapi\nexcept ModuleNotFoundError:\n    print('no fastapi')"],
                 cwd=bin_dir, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "no fastapi"
    worker = _run([str(bin_dir / "sagaflow-coordinator"), "worker", "--saga", "x:Y",
                   "--dsn", "postgresql://nobody@127.0.0.1:1/none"], cwd=bin_dir, timeout=60)
    assert worker.returncode == 2
    assert worker.stderr.strip().splitlines() == [
        "sagaflow-coordinator: error: this command needs the coordinator extra: "
        "pip install 'sagaflow-tcc[coordinator]' (missing module 'yaml')"]
    saga = _run([str(bin_dir / "saga"), "types", "--url", "http://127.0.0.1:9"],
                cwd=bin_dir, timeout=60)
    assert saga.returncode == 2
    assert saga.stderr.startswith("error: cannot reach the API at http://127.0.0.1:9"), saga.stderr
