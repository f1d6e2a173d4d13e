"""The one set-up step of ``make test`` and ``.ci/run``: what it would install, given what is
present, and what it says when it cannot install (no root, no sudo)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from devstack import system_deps
from devstack.system_deps import Machine, plan

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = frozenset({"chromium", "chromedriver", "pgbouncer", "make", "apt-get", "sudo",
                        "python3.11", "java", "mvn", "go"})
FULL = Machine(commands=EVERYTHING, has_pg_server=True, has_ensurepip=True, is_root=False,
               has_sudo=False, has_apt=True)
#: The README's fresh machine: only the prerequisites (and apt), as root (CI).
FRESH = Machine(commands=frozenset({"python3.11", "java", "mvn", "go", "apt-get"}),
                has_pg_server=False, has_ensurepip=False, is_root=True, has_sudo=False,
                has_apt=True)


def test_a_fully_equipped_machine_needs_nothing() -> None:
    p = plan(FULL)
    assert p.packages == () and p.missing_prerequisites == ()


def test_a_fresh_machine_gets_every_package_the_tests_need() -> None:
    p = plan(FRESH)
    assert p.names == ["postgresql-15", "chromium", "chromium-driver", "pgbouncer", "make",
                       "python3.11-venv"]
    assert p.via == () and p.keep_pg_from_creating_a_cluster


@pytest.mark.parametrize(("absent", "package"), [
    ("chromium", "chromium"), ("chromedriver", "chromium-driver"), ("pgbouncer", "pgbouncer"),
    ("make", "make")])
def test_each_missing_command_maps_to_its_package(absent: str, package: str) -> None:
    p = plan(replace(FULL, commands=EVERYTHING - {absent}))
    assert p.names == [package]
    assert not p.keep_pg_from_creating_a_cluster


def test_the_postgres_server_and_ensurepip_are_looked_for_apart_from_commands() -> None:
    assert plan(replace(FULL, has_pg_server=False)).names == ["postgresql-15"]
    assert plan(replace(FULL, has_ensurepip=False)).names == ["python3.11-venv"]


def test_who_installs() -> None:
    missing = replace(FULL, commands=EVERYTHING - {"pgbouncer"})
    assert plan(replace(missing, is_root=True)).via == ()
    assert plan(replace(missing, has_sudo=True)).via == ("sudo", "-n")
    nobody = plan(missing)
    assert nobody.via is None and "not root" in nobody.cannot_because
    no_apt = plan(replace(missing, is_root=True, has_apt=False))
    assert no_apt.via is None and "apt-get" in no_apt.cannot_because


def test_without_root_it_names_each_package_and_the_one_line_then_stops(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(system_deps, "survey", lambda: replace(
        FULL, commands=EVERYTHING - {"chromium", "chromedriver"}))
    monkeypatch.setattr(system_deps, "apply", lambda p: pytest.fail("must not install"))
    assert system_deps.main([]) == 1
    err = capsys.readouterr().err
    assert "cannot install them (not root, and sudo is absent or asks for a password)" in err
    assert "  chromium " in err and "  chromium-driver " in err
    assert err.rstrip().endswith("sudo apt-get update && sudo apt-get install -y "
                                 "--no-install-recommends chromium chromium-driver")


def test_missing_prerequisites_are_named_not_installed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(system_deps, "survey", lambda: replace(
        FRESH, commands=frozenset({"python3.11", "apt-get"})))
    monkeypatch.setattr(system_deps, "apply", lambda p: pytest.fail("must not install"))
    assert system_deps.main([]) == 1
    assert "install the prerequisites first (README, Quickstart): java mvn go" in (
        capsys.readouterr().err)


def test_installable_packages_are_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    applied: list[list[str]] = []
    monkeypatch.setattr(system_deps, "survey", lambda: replace(
        FULL, commands=EVERYTHING - {"pgbouncer"}, has_sudo=True))
    monkeypatch.setattr(system_deps, "apply", lambda p: applied.append(p.names))
    assert system_deps.main([]) == 0
    assert applied == [["pgbouncer"]]


def test_make_test_and_ci_run_the_same_step_before_the_tests() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "-m devstack.system_deps" in makefile
    test_target = next(line for line in makefile.splitlines() if line.startswith("test:"))
    assert test_target.split(":", 1)[1].split()[0] == "system-deps", test_target
    ci = (ROOT / ".ci" / "run").read_text()
    assert "-m devstack.system_deps" in ci and ci.rstrip().endswith("exec make test")
    # Nothing else in .ci/run installs packages: the logic lives in one place.
    assert "apt-get" not in ci


def test_the_demo_asks_only_for_what_it_runs() -> None:
    p = plan(FRESH, demo_only=True)
    assert p.names == ["postgresql-15", "make", "python3.11-venv"]


def test_make_demo_runs_the_step_for_the_demo_first() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndemo:\n", 1)[1].splitlines()
    assert recipe[0].strip() == "$(PYTHON) -m devstack.system_deps --demo"
