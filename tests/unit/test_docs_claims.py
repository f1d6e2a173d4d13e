"""What the README and the docs pages say, checked against the code, for each kind of line that
went stale once: timer kinds listed short, a keyword argument that no longer exists
(``compensation=``), a command, target or variable that is not there, the docs site's address.
"""

from __future__ import annotations

import importlib
import inspect
import re
import shlex
from pathlib import Path

import pytest
import yaml

from coordinator.engine import TimerKind
from devstack.cli import _parser as devstack_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
#: Where the public keyword arguments a page may name in prose are defined.
PUBLIC_MODULES = ("coordinator.language", "coordinator.language.nodes", "coordinator.schedules",
                  "coordinator.client", "coordinator.testing", "coordinator.store",
                  "coordinator.sagas.patterns", "participant_sdk", "participant_sdk.testing",
                  "participant_sdk.functions", "outbox_relay", "coordinator.runtime.functions")
#: Keyword-looking spans that are not Python arguments: Kafka and Postgres settings, DSN
#: parameters, URL query parameters of the API.
NOT_PYTHON = {"acks", "sslmode", "target_session_attrs", "synchronous_commit", "partitioner",
              "key", "trace", "stuck", "status", "type", "name",
              "server_settings"}  # asyncpg's own


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _prose(page: Path) -> str:
    """The page without its fenced code blocks."""
    return re.sub(r"^```.*?^```$", "", _text(page), flags=re.S | re.M)


def _ids(pages: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in pages]


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_a_list_of_timer_kinds_names_every_kind(page: Path) -> None:
    kinds = {k.value for k in TimerKind}
    for paragraph in _prose(page).split("\n\n"):
        if not re.search(r"timer", paragraph, re.I) or not re.search(r"\bkinds\b", paragraph):
            continue
        named = set(re.findall(r"`([a-z_]+)`", paragraph)) & kinds
        if len(named) >= 2:
            assert named == kinds, (
                f"{page.name} lists timer kinds {sorted(named)}; the engine has {sorted(kinds)}:"
                f"\n{paragraph}")


def _public_parameters() -> set[str]:
    names: set[str] = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for attr in getattr(module, "__all__", dir(module)):
            obj = getattr(module, attr, None)
            candidates = [obj]
            if inspect.isclass(obj):
                candidates += [m for _, m in inspect.getmembers(obj, inspect.isfunction)]
                names |= set(getattr(obj, "model_fields", {}))
            for fn in candidates:
                try:
                    names |= set(inspect.signature(fn).parameters)  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    continue
    return names


def test_every_keyword_argument_named_in_prose_exists() -> None:
    known = _public_parameters()
    unknown = []
    for page in PAGES:
        for name in re.findall(r"`([a-z_]+)=[^`]*`", _prose(page)):
            if name not in known and name not in NOT_PYTHON:
                unknown.append(f"{page.name}: {name}=")
    assert not unknown, unknown


def test_every_make_target_named_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.M))
    for page in PAGES:
        for target in re.findall(r"`make ([a-z][a-z-]*)", _text(page)):
            assert target in targets, f"{page.name}: make {target}"


def test_every_devstack_command_named_parses() -> None:
    parser = devstack_parser()
    for page in PAGES:
        for line in re.findall(r"python -m devstack ([^`\n#|]+)", _text(page)):
            argv = shlex.split(line.replace(")", " ").replace('"', " "))
            if not argv or "[" in line:  # a synopsis, not a command
                continue
            try:
                parser.parse_args(argv[:3] if argv[0] != "up" else argv)
            except SystemExit:
                pytest.fail(f"{page.name}: python -m devstack {line.strip()}")


def test_every_sagaflow_variable_named_is_read_somewhere() -> None:
    code = "\n".join(p.read_text(encoding="utf-8", errors="replace")
                     for folder in ("coordinator", "participant_sdk", "outbox_relay",
                                    "devstack", "tests", "examples", "bench")
                     for p in (ROOT / folder).rglob("*.py"))
    code += (ROOT / "compose.yaml").read_text() + (ROOT / "Makefile").read_text()
    missing = []
    for page in PAGES:
        for var in set(re.findall(r"\bSAGAFLOW_[A-Z0-9_]*[A-Z0-9]\b", _text(page))):
            # Settings models read SAGAFLOW_[<PROCESS>_]<FIELD>: match the field's name too.
            field = var.removeprefix("SAGAFLOW_").lower()
            fields = {field, field.split("_", 1)[-1]}
            if var not in code and not any(re.search(rf"\b{f}\b", code) for f in fields):
                missing.append(f"{page.name}: {var}")
    assert not missing, missing


def test_the_docs_site_is_where_the_readme_and_the_api_say() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python/name:", ""))
    address = f"http://{config['dev_addr']}"
    assert address in (ROOT / "README.md").read_text()
    assert f"{address}/" in (ROOT / "coordinator" / "api" / "app.py").read_text()
    nav_files = re.findall(r":\s*([\w/-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    for page in (ROOT / "docs").rglob("*.md"):
        assert str(page.relative_to(ROOT / "docs")) in nav_files, f"{page.name} is not in nav"
