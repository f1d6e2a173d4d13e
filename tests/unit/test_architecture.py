"""The layer contracts (architecture.toml) hold and catch a forbidden import; modules stay small
and the coordinator's top level holds only its entry modules."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("coordinator", "outbox_relay", "participant_sdk")
CONTRACT_ROOTS = (*PACKAGES, "bench")


def lint_imports(where: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the packages in ``where`` (it puts that folder first on the path)."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")),
         str(ROOT / "architecture.toml"), "--no-cache"],
        cwd=where, capture_output=True, text=True, timeout=240, check=False)


def test_the_tree_keeps_every_contract() -> None:
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


def test_a_forbidden_import_breaks_its_contract(tmp_path: Path) -> None:
    for name in CONTRACT_ROOTS:
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__", "static", "templates"))
    with (tmp_path / "coordinator/engine/decide.py").open("a") as f:
        f.write("\nimport asyncpg  # noqa\n")  # the pure engine doing I/O
    with (tmp_path / "coordinator/store/queries.py").open("a") as f:
        f.write("\nimport coordinator.api.auth  # noqa\n")  # the store reaching above itself
    with (tmp_path / "outbox_relay/errors.py").open("a") as f:
        f.write("\nimport coordinator.store  # noqa\n")  # the relay knowing the coordinator

    run = lint_imports(tmp_path)

    assert run.returncode != 0
    out = run.stdout
    for contract in ("The coordinator's layers", "The engine and the saga language do no I/O",
                     "The relay knows nothing of the coordinator"):
        assert f"{contract} BROKEN" in out, out
    assert "coordinator.store.queries -> coordinator.api.auth" in out
    assert "The participant SDK stands alone KEPT" in out


def test_no_module_of_the_three_packages_is_over_500_lines() -> None:
    long = {str(path.relative_to(ROOT)): n for name in PACKAGES
            for path in (ROOT / name).rglob("*.py")
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 500}
    assert long == {}


#: The only modules at the coordinator's top level: everything else sits in its package by
#: role (docs/architecture.md), so a newcomer reads the architecture from the tree.
TOP_LEVEL = {"__init__.py", "__main__.py", "_moved.py", "client.py"}


def test_the_coordinators_top_level_holds_only_its_entry_modules() -> None:
    assert {p.name for p in (ROOT / "coordinator").glob("*.py")} == TOP_LEVEL
