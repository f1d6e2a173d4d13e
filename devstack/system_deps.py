"""The system packages ``make test`` needs beyond the stated prerequisites, installed by one step.

``make test`` and ``.ci/run`` both run ``python3.11 -m devstack.system_deps`` (standard library
only: it runs before the virtual environment exists). It looks at what the machine has, installs
what is missing with apt-get (as root, or through ``sudo -n``), and when it cannot, names every
missing package and the one line that installs them, and exits 1 so no test runs half-equipped.

The decision is a pure function of what was found (:func:`plan`), so it is tested without
changing the machine.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

#: What the tests need, by what provides it: (apt package, why).
POSTGRES = ("postgresql-15", "the Postgres server binaries devstack runs")
CHROMIUM = ("chromium", "the web UI's browser tests (headless Chromium)")
CHROMEDRIVER = ("chromium-driver", "the browser tests' WebDriver (same source as chromium)")
PGBOUNCER = ("pgbouncer", "tests/integration/test_pgbouncer.py (the function paths via PgBouncer)")
MAKE = ("make", "the project's commands")
VENV = ("python3.11-venv", "python3.11 -m venv (make bootstrap creates .venv with it)")

#: Prerequisites the README states; not installed here, only named when absent.
PREREQUISITES = ("python3.11", "java", "mvn", "go")

#: Keeps the Debian package from creating (and starting) a cluster on port 5432.
CREATECLUSTER = "/etc/postgresql-common/createcluster.conf"


@dataclass(frozen=True, kw_only=True)
class Machine:
    """What was found: commands on PATH, a Postgres server, ensurepip, who we are."""

    commands: frozenset[str]
    has_pg_server: bool
    has_ensurepip: bool
    is_root: bool
    has_sudo: bool
    has_apt: bool


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What to do: packages to install, and whether this process can install them."""

    packages: tuple[tuple[str, str], ...] = ()
    missing_prerequisites: tuple[str, ...] = ()
    via: tuple[str, ...] | None = None  # the prefix that runs apt-get as root, if any
    cannot_because: str = ""  # why ``via`` is None
    keep_pg_from_creating_a_cluster: bool = False

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.packages]

    @property
    def install_line(self) -> str:
        return ("sudo apt-get update && sudo apt-get install -y --no-install-recommends "
                + " ".join(self.names))

    @property
    def can_install(self) -> bool:
        return self.via is not None


def plan(machine: Machine, *, demo_only: bool = False) -> Plan:
    """The packages ``machine`` lacks, and how (whether) they can be installed.

    ``demo_only``: what ``make demo`` needs (no browser, no PgBouncer: only tests use them).
    """
    has = machine.commands.__contains__
    wanted: list[tuple[str, str]] = []
    if not machine.has_pg_server:
        wanted.append(POSTGRES)
    if not demo_only:
        if not has("chromium"):
            wanted.append(CHROMIUM)
        if not has("chromedriver"):
            wanted.append(CHROMEDRIVER)
        if not has("pgbouncer"):
            wanted.append(PGBOUNCER)
    if not has("make"):
        wanted.append(MAKE)
    if not machine.has_ensurepip:
        wanted.append(VENV)
    via: tuple[str, ...] | None = None
    cannot_because = ""
    if not machine.has_apt:
        cannot_because = "no apt-get on this machine"
    elif machine.is_root:
        via = ()
    elif machine.has_sudo:
        via = ("sudo", "-n")
    else:
        cannot_because = "not root, and sudo is absent or asks for a password"
    return Plan(
        packages=tuple(wanted),
        missing_prerequisites=tuple(t for t in PREREQUISITES if not has(t)),
        via=via,
        cannot_because=cannot_because,
        keep_pg_from_creating_a_cluster=POSTGRES in wanted,
    )


def survey() -> Machine:
    """Look at this machine (read-only)."""
    commands = {c for c in ("make", "apt-get", "sudo", *PREREQUISITES) if shutil.which(c)}
    # Where the tests look (tests/e2e/browser.py, devstack/pgbouncer.py), overrides included.
    at = {"chromium": os.environ.get("SAGAFLOW_CHROMIUM", "/usr/bin/chromium"),
          "chromedriver": os.environ.get("SAGAFLOW_CHROMEDRIVER", "/usr/bin/chromedriver"),
          "pgbouncer": (os.environ.get("SAGAFLOW_PGBOUNCER_BIN") or shutil.which("pgbouncer")
                        or "/usr/sbin/pgbouncer")}
    commands |= {name for name, path in at.items() if shutil.which(path)}
    pg_server = bool(os.environ.get("SAGAFLOW_PG_BINDIR")
                     or glob.glob("/usr/lib/postgresql/*/bin/initdb")
                     or shutil.which("initdb"))
    is_root = os.geteuid() == 0
    has_sudo = False
    if not is_root and "sudo" in commands:
        has_sudo = subprocess.run(["sudo", "-n", "true"], capture_output=True,
                                  check=False).returncode == 0
    return Machine(commands=frozenset(commands), has_pg_server=pg_server,
                   has_ensurepip=importlib.util.find_spec("ensurepip") is not None,
                   is_root=is_root, has_sudo=has_sudo, has_apt="apt-get" in commands)


def describe(p: Plan) -> str:
    """What is missing, why each is needed, and the one line that installs them."""
    lines = [f"  {name:<16} {why}" for name, why in p.packages]
    return "\n".join(["these system packages are missing:", *lines,
                      "install them with:", f"  {p.install_line}"])


def apply(p: Plan) -> None:
    """Install what ``p`` names (it must be installable)."""
    assert p.via is not None
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    if p.keep_pg_from_creating_a_cluster and not os.path.exists(CREATECLUSTER):
        subprocess.run([*p.via, "mkdir", "-p", os.path.dirname(CREATECLUSTER)], check=True)
        subprocess.run([*p.via, "tee", CREATECLUSTER], input=b"create_main_cluster = false\n",
                       stdout=subprocess.DEVNULL, check=True)
    subprocess.run([*p.via, "apt-get", "update", "-qq"], check=True)
    subprocess.run([*p.via, *env, "apt-get", "install", "-y", "-qq", "--no-install-recommends",
                    *p.names], check=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3.11 -m devstack.system_deps",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only say what is missing; install nothing (exit 1 if anything is)")
    parser.add_argument("--demo", action="store_true",
                        help="only what make demo needs (no browser, no PgBouncer)")
    args = parser.parse_args(argv)
    p = plan(survey(), demo_only=args.demo)
    prog = "system-deps"
    if p.missing_prerequisites:
        print(f"{prog}: install the prerequisites first (README, Quickstart): "
              f"{' '.join(p.missing_prerequisites)}", file=sys.stderr)
        return 1
    if not p.packages:
        return 0
    if args.check:
        print(f"{prog}: {describe(p)}", file=sys.stderr)
        return 1
    if not p.can_install:
        print(f"{prog}: cannot install them ({p.cannot_because}); {describe(p)}",
              file=sys.stderr)
        return 1
    print(f"{prog}: installing {' '.join(p.names)}", file=sys.stderr)
    apply(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
