"""The configuration reference (``docs/configuration.md``), generated from the settings models.

``python -m coordinator.cli.config_reference`` prints it; ``--write PATH`` rewrites the checked-in
copy, which a test keeps current. A field's text is its ``#:`` comment; a field with none shares
the comment of the field above it (a group such as the compaction settings).
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from participant_sdk.durations import format_duration
from participant_sdk.startup_errors import env_names

__all__ = ["field_docs", "render"]

_FIELD = re.compile(r"^    (\w+)\s*:")


def _sections() -> list[tuple[str, str, type[BaseSettings]]]:
    from coordinator.api.settings import ApiSettings
    from coordinator.config.settings import CoordinatorSettings
    from coordinator.observability.settings import ObservabilitySettings
    from coordinator.ui.settings import UiSettings
    from outbox_relay.settings import RelaySettings
    from participant_sdk.kafka_security import KafkaSecurity
    from participant_sdk.settings import ParticipantSettings
    from participant_sdk.startup import StartupSettings

    return [
        ("Coordinator", "the worker (`sagaflow-coordinator worker`) and the API",
         CoordinatorSettings),
        ("Operator API", "`sagaflow-coordinator api`, on top of the coordinator's", ApiSettings),
        ("Metrics and stuck detection", "the worker and the API", ObservabilitySettings),
        ("Web console", "the API process", UiSettings),
        ("Relay", "`sagaflow-relay`", RelaySettings),
        ("Participant", "a participant service (`run_participant`)", ParticipantSettings),
        ("Kafka TLS and SASL", "every Kafka client: the worker, the relay, participants and "
         "`sagaflow-coordinator topics`", KafkaSecurity),
        ("Start-up", "every long-running process: the worker, the API, the relay and "
         "participants (see [operations](operations.md))", StartupSettings),
    ]



def field_docs(cls: type[BaseSettings]) -> dict[str, str]:
    """Each field's ``#:`` comment, from the class's own source."""
    docs: dict[str, str] = {}
    pending: list[str] = []
    previous = ""
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        match = _FIELD.match(line)
        if match is not None:
            docs[match[1]] = " ".join(pending) if pending else ("(as above)" if previous else "")
            previous = docs[match[1]]
        elif not line.startswith("        "):
            previous = ""
        pending = []
    return docs


def _type(info: FieldInfo) -> str:
    annotation = info.annotation
    union = get_origin(annotation) in (Union, UnionType)
    for choice in get_args(annotation) if union else (annotation,):
        if isinstance(choice, type) and issubclass(choice, Enum):
            values = ", ".join(f"`{m.value}`" for m in choice)
            return f"one of {values}, optional" if union else f"one of {values}"
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation).replace("typing.", "").replace("pathlib.", "")
    if text.startswith("list"):
        return "list (comma-separated)"
    if text.startswith("dict"):
        return "map (`key=value,…`)"
    if "timedelta" in text:
        return "duration"
    names = {"SecretStr": "secret", "Path": "path", "str": "text", "int": "integer",
             "bool": "boolean (true/false)"}
    optional = text.endswith(" | None")
    text = names.get(text.removesuffix(" | None"), text.removesuffix(" | None"))
    return f"{text}, optional" if optional else text


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "**required**"
    if info.default_factory is not None:
        made: Any = info.default_factory()  # type: ignore[call-arg]
        return "(empty)" if made in ([], {}) else "(generated per process)"
    value = info.default
    if value is None:
        return "(unset)"
    if isinstance(value, timedelta):
        return f"`{format_duration(value)}`"
    if isinstance(value, SecretStr):
        return "(empty)" if not value.get_secret_value() else "(set)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _table(cls: type[BaseSettings], skip: set[str]) -> list[str]:
    docs = field_docs(cls)
    rows = ["| Variable | Type | Default | Meaning |", "|---|---|---|---|"]
    for name, info in cls.model_fields.items():
        nested = isinstance(info.annotation, type) and issubclass(info.annotation, BaseSettings)
        if name in skip or nested:
            continue
        names = env_names(cls, name)
        variable = " or ".join(f"`{n}`" for n in names)
        text = docs.get(name, "").replace("|", "\\|")
        rows.append(f"| {variable} | {_type(info)} | {_default(info)} | {text} |")
    return rows


def render() -> str:
    """The whole reference, as Markdown."""
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m coordinator.cli.config_reference --write "
        "docs/configuration.md`; a test checks it is current. -->",
        "",
        "Every process reads its settings from environment variables; command-line flags, "
        "where a command has them, override them. Where two variables are listed, the first "
        "one set wins. A bad or missing value stops the process at start with one line naming "
        "the variable.",
        "",
        "A **duration** is `250ms`, `5s`, `1.5m`, `2h`, `7d`, plain seconds (`90`, `0.2`) or "
        "ISO 8601 (`PT10S`). A DSN is passed to asyncpg as given (libpq URL or key/value "
        "form, several hosts and `target_session_attrs` included); for TLS to Postgres put "
        "`sslmode=verify-full&sslrootcert=/path/ca.pem` (and `sslcert`, `sslkey` for a client "
        "certificate) in the DSN.",
    ]
    seen: set[str] = set()
    for title, who, cls in _sections():
        parents = {f for base in cls.__mro__[1:] if isinstance(base, type)
                   and issubclass(base, BaseSettings) and base is not BaseSettings
                   for f in base.model_fields}
        out += ["", f"## {title}", "", f"Read by {who}.", "", *_table(cls, parents & seen)]
        seen |= set(cls.model_fields)
    out += ["", "## Logging, tracing and the `saga` CLI", "",
            "Read directly from the environment by every process (the CLI: by `saga`).", "",
            "| Variable | Type | Default | Meaning |", "|---|---|---|---|",
            *(f"| `{name}` | {kind} | {default} | {text} |"
              for name, kind, default, text in _PLAIN)]
    return "\n".join(out) + "\n"


_PLAIN = (
    ("SAGAFLOW_LOG_FORMAT", "`plain` or `json`", "`plain`",
     "One JSON object per line (service, saga and trace ids as fields), or readable lines."),
    ("SAGAFLOW_LOG_LEVEL", "text", "`INFO`", "Root log level."),
    ("SAGAFLOW_EVENT_LOOP", "`auto`, `uvloop` or `asyncio`", "`auto`",
     "The processes' event loop: `auto` runs uvloop when it is installed (a dependency on "
     "Linux and macOS), else asyncio's; `uvloop` refuses to start without it."),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "URL", "(unset)",
     "Export traces over OTLP/HTTP here; unset, tracing is off (a no-op)."),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "text", "`http/protobuf`",
     "OTLP transport; sagaflow exports over HTTP (`http/protobuf`)."),
    ("OTEL_SERVICE_NAME", "text", "the process's name",
     "Service name of the process's spans."),
    ("SAGAFLOW_API_URL", "URL", "`http://127.0.0.1:8080`", "`saga`: the operator API."),
    ("SAGAFLOW_API_TOKEN", "secret", "(unset)", "`saga`: the bearer token it sends."),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coordinator.cli.config_reference",
                                     description=__doc__)
    parser.add_argument("--write", type=Path, metavar="PATH", help="write the reference here")
    args = parser.parse_args(argv)
    text = render()
    if args.write is None:
        sys.stdout.write(text)
    else:
        args.write.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
