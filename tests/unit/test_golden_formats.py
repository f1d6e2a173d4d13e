"""The golden files of every stored and wire format still decode with today's readers.

``tests/golden/format-<N>/`` holds what release format N wrote (see
``tests/golden/generate.py``). For each file: today's reader decodes it, and writing the
result back contains every field of the file with the same value, so a stored field that is
renamed, retyped or dropped fails here. Readers also ignore fields they do not know (a newer
build, or a rollback reading what it wrote) and read rows written before format versions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args
from uuid import UUID

import pytest
from pydantic import ValidationError

from coordinator.engine import SagaState, event_from_json
from coordinator.engine.events import Event
from coordinator.engine.state import StepState
from coordinator.runtime.signal_wire import decode_signal
from coordinator.schedules.repository import definition_of
from coordinator.store.nodes import dumps, spine_json, state_from_rows, steps_json
from coordinator.store.store import _Timer
from participant_sdk.protocol import decode_command, decode_reply
from tests.golden.generate import schedule_row

GOLDEN = Path(__file__).parent.parent / "golden"
FORMATS = sorted(GOLDEN.glob("format-*"))


def _snapshot(doc: Any) -> Any:
    return SagaState.from_json(doc).to_json()


def _event(doc: Any) -> Any:
    return event_from_json(doc).to_json()


def _history(doc: Any) -> Any:
    return [{**row, "event": _event(row["event"])} for row in doc]


def _timer(doc: Any) -> Any:
    """A ``timers`` row through the store's own reader, back to the row's columns."""
    row = _Timer(doc["id"], UUID(doc["saga_id"]), None, doc["step"],  # type: ignore[arg-type]
                 doc["phase"], doc["attempt"], doc["kind"],
                 None if doc["event"] is None else json.dumps(doc["event"]))
    event = row.pending().event
    if doc["event"] is not None:
        return {**doc, "event": event.to_json()}
    fired = event.to_json()
    return {**doc, "id": fired["timer_id"], "phase": fired["phase"], "kind": fired["kind"],
            "attempt": fired["attempt"], "step": fired["step"]}


def _nodes(doc: Any) -> Any:
    return [{**row, "state": StepState.model_validate(row["state"]).model_dump(mode="json")}
            for row in doc]


def _spine(doc: Any) -> Any:
    """The spine column read as the store reads it: with the input and node rows."""
    state = state_from_rows(dumps(doc), "{}", "{}", "[]")
    return json.loads(spine_json(state))


def _schedule(doc: Any) -> Any:
    """A ``schedules`` row through the repository's reader, back to its columns."""
    row = {**doc, "input": json.dumps(doc["input"]), "spec": json.dumps(doc["spec"])}
    return schedule_row(definition_of(row))


def _command(doc: Any) -> Any:
    return decode_command(json.dumps(doc).encode()).model_dump(mode="json")


def _reply(doc: Any) -> Any:
    return decode_reply(json.dumps(doc).encode()).model_dump(mode="json")


def _signal(doc: Any) -> Any:
    return decode_signal(json.dumps(doc).encode()).model_dump(mode="json")


def _reader(name: str) -> Callable[[Any], Any]:
    if name.startswith("stored/snapshot-"):
        return _snapshot
    if name.startswith("stored/spine-"):
        return _spine
    readers: dict[str, Callable[[Any], Any]] = {
        "stored/history.json": _history, "stored/nodes-running.json": _nodes,
        "wire/command.json": _command, "wire/doc-command-example.json": _command,
        "wire/signal.json": _signal,
    }
    if name in readers:
        return readers[name]
    if name.startswith("stored/event-"):
        return _event
    if name.startswith("stored/timer-"):
        return _timer
    if name.startswith("wire/reply-"):
        return _reply
    if name.startswith("stored/schedule-"):
        return _schedule
    raise AssertionError(f"no reader for golden file {name}: add one")


def _files() -> list[tuple[str, Path]]:
    return [(f"{fmt.name}/{p.relative_to(fmt)}", p) for fmt in FORMATS
            for p in sorted(fmt.rglob("*.json"))]


def _contains(written: Any, golden: Any, where: str = "") -> None:
    """Every field of ``golden`` is in ``written`` with the same value (new ones may be added)."""
    if isinstance(golden, dict):
        assert isinstance(written, dict), f"{where}: {written!r} is no longer an object"
        for key, value in golden.items():
            assert key in written, f"{where}.{key}: the stored field is gone (renamed?)"
            _contains(written[key], value, f"{where}.{key}")
    elif isinstance(golden, list):
        assert isinstance(written, list) and len(written) == len(golden), where
        for i, (w, g) in enumerate(zip(written, golden, strict=True)):
            _contains(w, g, f"{where}[{i}]")
    else:
        assert written == golden, f"{where}: {golden!r} now reads as {written!r}"


#: Mappings of free-form data (user input, results) or of typed values, not stored models:
#: an unknown key there would be data, not a field a newer build added.
_NOT_MODELS = frozenset({"input", "payload", "result", "trace_context", "attempts",
                         "budget_from", "resolution", "patches"})


def _map_objects(doc: Any, change: Callable[[dict[str, Any]], dict[str, Any]],
                 *, model: bool = True) -> Any:
    """``change`` applied to every stored model object in ``doc`` (``steps`` maps node keys to
    models: its values are models, itself is not)."""
    if isinstance(doc, dict):
        inner = {k: v if k in _NOT_MODELS else _map_objects(v, change, model=k != "steps")
                 for k, v in doc.items()}
        return change(inner) if model else inner
    if isinstance(doc, list):
        return [_map_objects(v, change) for v in doc]
    return doc


def test_there_are_golden_files_of_every_format() -> None:
    assert [f.name for f in FORMATS] == ["format-1"]
    names = {name.split("/", 1)[1] for name, _ in _files()}
    kinds = {get_args(t)[0] for t in
             (c.model_fields["type"].annotation for c in get_args(get_args(Event)[0]))}
    assert {f"stored/event-{k}.json" for k in kinds} <= names, "an event kind has no golden file"
    assert {"stored/snapshot-running.json", "stored/spine-running.json",
            "stored/nodes-running.json", "stored/history.json", "stored/timer-delivery.json",
            "wire/command.json", "wire/reply-ok.json", "wire/signal.json",
            "stored/snapshot-scheduled.json", "stored/snapshot-sleeping.json",
            "stored/snapshot-waiting.json", "stored/schedule-cron.json",
            "stored/schedule-calendar.json"} <= names


@pytest.mark.parametrize(("name", "path"), _files(), ids=[n for n, _ in _files()])
def test_golden_file_decodes_and_keeps_every_field(name: str, path: Path) -> None:
    golden = json.loads(path.read_text())
    _contains(_reader(name.split("/", 1)[1])(golden), golden, name)


@pytest.mark.parametrize(("name", "path"), _files(), ids=[n for n, _ in _files()])
def test_readers_ignore_unknown_fields(name: str, path: Path) -> None:
    golden = json.loads(path.read_text())
    newer = _map_objects(golden, lambda obj: {**obj, "added_by_a_newer_build": {"x": 1}})
    _contains(_reader(name.split("/", 1)[1])(newer), golden, name)


@pytest.mark.parametrize(("name", "path"), _files(), ids=[n for n, _ in _files()])
def test_rows_written_before_format_versions_read_as_format_1(name: str, path: Path) -> None:
    golden = json.loads(path.read_text())
    older = _map_objects(golden, lambda obj: {k: v for k, v in obj.items()
                                              if k != "format_version"})
    _contains(_reader(name.split("/", 1)[1])(older), golden, name)


def test_the_node_rows_and_spine_assemble_the_snapshot() -> None:
    stored = FORMATS[-1] / "stored"
    snapshot = json.loads((stored / "snapshot-running.json").read_text())
    spine = json.loads((stored / "spine-running.json").read_text())
    rows = json.loads((stored / "nodes-running.json").read_text())
    nodes = [(r["key"], dumps(r["state"])) for r in sorted(rows, key=lambda r: r["ordinal"])]
    state = state_from_rows(dumps(spine), dumps(snapshot["input"]), steps_json(nodes),
                            "[]")
    _contains(state.to_json(), snapshot, "assembled")


def test_a_format_newer_than_the_reader_is_refused() -> None:
    stored = FORMATS[-1] / "stored"
    snapshot = json.loads((stored / "snapshot-running.json").read_text())
    with pytest.raises(ValidationError, match="format_version"):
        SagaState.from_json({**snapshot, "format_version": 99})
    event = json.loads((stored / "event-timer_fired.json").read_text())
    with pytest.raises(ValidationError, match="format_version"):
        event_from_json({**event, "format_version": 99})
