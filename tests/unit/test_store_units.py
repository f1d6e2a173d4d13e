"""Store, worker and CLI pieces that need no services."""

from __future__ import annotations

from pathlib import Path

import pytest

import coordinator.runtime.worker as worker_pkg
import coordinator.store as store_pkg
from coordinator.cli.main import _parser
from coordinator.config.settings import CoordinatorSettings
from coordinator.migrations import discover
from coordinator.runtime.worker import SagaImportError, import_saga
from coordinator.store import InvalidInput, UnknownSagaType, UnknownSagaVersion
from coordinator.store._writes import command_headers
from coordinator.store.queries import _decode_cursor, _encode_cursor


def test_public_surface_is_pinned() -> None:
    assert set(store_pkg.__all__) == {
        "ApplyOutcome", "ApplyResult", "HistoryRecord", "InvalidInput", "PendingEvent",
        "PendingSignal", "SagaStart",
        "SagaConflict", "SagaNotFound", "SagaPage", "SagaRecord", "SagaStore", "StartResult",
        "StoreError", "TimerRecord", "TransientStoreError", "UnknownSagaType",
        "UnknownSagaVersion", "VerifyResult", "InvalidSignalPayload", "SagaFinished",
        "SignalResult", "TooManySignals", "UnknownSignal", "BusinessKeyConflict",
        "InvalidUpdatePayload", "UnknownUpdate", "UpdateAnswer", "UpdateBroken",
        "UpdateIdConflict", "UpdateNotFound", "UpdateTimedOut",
    }
    assert set(worker_pkg.__all__) == {
        "SagaImportError", "Worker", "WorkerStateError", "build_registry", "import_saga",
    }


def test_migrations_are_numbered_and_ordered() -> None:
    migrations = discover()
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    assert "CREATE TABLE sagas" in migrations[0].sql
    assert len(migrations[0].checksum) == 64


def test_settings_read_saga_list_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGAFLOW_SAGAS", "a.b:C, d.e:F")
    monkeypatch.setenv("SAGAFLOW_REPLY_BATCH_SIZE", "50")
    settings = CoordinatorSettings()
    assert settings.sagas == ["a.b:C", "d.e:F"] and settings.reply_batch_size == 50


def test_compaction_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import timedelta

    from pydantic import ValidationError

    assert CoordinatorSettings().compact_interval == timedelta(0)  # off unless asked for
    monkeypatch.setenv("SAGAFLOW_COMPACT_INTERVAL", "PT10M")
    monkeypatch.setenv("SAGAFLOW_COMPACT_MIN_EVENTS", "50")
    monkeypatch.setenv("SAGAFLOW_COMPACT_ARCHIVE", "true")
    settings = CoordinatorSettings()
    assert (settings.compact_interval, settings.compact_min_events, settings.compact_archive) \
        == (timedelta(minutes=10), 50, True)
    for name, bad in (("SAGAFLOW_COMPACT_INTERVAL", "-PT5S"), ("SAGAFLOW_COMPACT_MIN_EVENTS", "0")):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ValidationError):
            CoordinatorSettings()
        monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("spec", "message"),
    [("nocolon", "must look like"), ("no_such_module_x:Saga", "cannot import"),
     ("coordinator.config.settings:Nope", "no attribute"),
     ("coordinator.config.settings:CoordinatorSettings", "not a Saga subclass")],
)
def test_import_saga_explains_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(SagaImportError, match=message):
        import_saga(spec)


def test_errors_are_readable() -> None:
    assert "known types: a, b" in str(UnknownSagaType("x", ["b", "a"]))
    assert "registered versions: 1, 2" in str(UnknownSagaVersion("a", 3, [2, 1]))
    err = InvalidInput("a", [{"loc": ("amount",), "msg": "too small"}])
    assert "amount: too small" in str(err) and err.errors[0]["loc"] == ("amount",)
    assert not InvalidInput.retryable


def test_cursor_round_trips_and_rejects_garbage() -> None:
    from datetime import UTC, datetime
    from uuid import uuid4

    at, sid = datetime(2026, 1, 1, tzinfo=UTC), uuid4()
    assert _decode_cursor(_encode_cursor(at, sid)) == (at, sid)
    with pytest.raises(store_pkg.StoreError, match="invalid cursor"):
        _decode_cursor("bm9wZQ==")


def test_command_headers_carry_kind_protocol_and_trace() -> None:
    headers = command_headers({"traceparent": "00-a-b-01", "other": "x"})
    assert headers == {"saga-message-kind": "command", "saga-protocol": "1",
                       "traceparent": "00-a-b-01"}


def test_cli_parses_every_verb() -> None:
    parser = _parser()
    args = parser.parse_args(["worker", "--saga", "a:B", "--saga", "c:D", "--migrate"])
    assert args.saga == ["a:B", "c:D"] and args.migrate
    args = parser.parse_args(["verify", "00000000-0000-0000-0000-000000000001"])
    assert len(args.saga_id) == 1
    args = parser.parse_args(["compact", "--min-events", "5", "--archive"])
    assert args.min_events == 5 and args.archive and args.saga_id == []
    assert parser.parse_args(["migrate", "--dsn", "postgresql://x"]).dsn == "postgresql://x"


def test_a_saga_module_not_found_names_pythonpath(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SagaImportError) as elsewhere:
        import_saga("shop_sagas_nowhere.orders:OrderSaga")
    assert "add the folder that holds it to PYTHONPATH" in str(elsewhere.value)
    (tmp_path / "shop_sagas_here").mkdir()
    with pytest.raises(SagaImportError) as here:
        import_saga("shop_sagas_here.orders:OrderSaga")
    assert "is in the current folder" in str(here.value) and "PYTHONPATH=." in str(here.value)
