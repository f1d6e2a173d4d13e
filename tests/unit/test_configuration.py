"""One duration syntax, one-line settings errors, and a configuration reference that is current."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError

from coordinator.api.settings import ApiSettings
from coordinator.cli.config_reference import field_docs, render
from coordinator.config.settings import CoordinatorSettings
from coordinator.observability.settings import ObservabilitySettings
from coordinator.ui.settings import UiSettings
from outbox_relay.settings import RelaySettings
from participant_sdk.durations import format_duration, parse_duration
from participant_sdk.kafka_security import KafkaSecurity
from participant_sdk.settings import ParticipantSettings
from participant_sdk.startup import StartupSettings
from participant_sdk.startup_errors import (
    ExitCode,
    ServiceUnavailable,
    SettingsError,
    explain,
    load_settings,
)

ROOT = Path(__file__).resolve().parents[2]
ALL_SETTINGS = (CoordinatorSettings, ApiSettings, ObservabilitySettings, UiSettings,
                RelaySettings, ParticipantSettings, KafkaSecurity, StartupSettings)


@pytest.mark.parametrize(("text", "seconds"), [
    ("100ms", 0.1), ("5s", 5), ("5m", 300), ("1.5m", 90), ("2h", 7200), ("7d", 604800),
    ("90", 90), ("0.2", 0.2), ("PT10S", 10), ("P1DT2H", 93600), ("pt1m30s", 90), ("5 M", 300),
])
def test_every_duration_form_parses(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "abc", "5 minutes", "-5s", "P", "PT", "5x"])
def test_a_bad_duration_names_itself_and_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a duration: .* \(use e\.g\. 250ms, 5s"):
        parse_duration(text)


@pytest.mark.parametrize("value", [timedelta(0), timedelta(milliseconds=250),
                                   timedelta(minutes=5), timedelta(seconds=90),
                                   timedelta(days=2)])
def test_formatted_durations_read_back(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value


@pytest.mark.parametrize(("cls", "variable", "field"), [
    (CoordinatorSettings, "SAGAFLOW_REPLY_FETCH_TIMEOUT", "reply_fetch_timeout"),
    (ApiSettings, "SAGAFLOW_API_JOB_POLL", "api_job_poll"),
    (ObservabilitySettings, "SAGAFLOW_STUCK_AFTER", "stuck_after"),
    (UiSettings, "SAGAFLOW_UI_SESSION_MAX_AGE", "session_max_age"),
    (RelaySettings, "SAGAFLOW_RELAY_POLL_INTERVAL", "poll_interval"),
    (ParticipantSettings, "SAGAFLOW_PARTICIPANT_COMMIT_INTERVAL", "commit_interval"),
])
def test_every_process_reads_the_same_duration_forms(
        cls: type, variable: str, field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGAFLOW_PARTICIPANT_DSN", "postgresql://x/y")
    for text, expected in (("100ms", timedelta(milliseconds=100)), ("5m", timedelta(minutes=5)),
                           ("PT10S", timedelta(seconds=10)), ("0.5", timedelta(seconds=0.5))):
        monkeypatch.setenv(variable, text)
        assert getattr(load_settings(cls), field) == expected
    monkeypatch.setenv(variable, "soon")
    with pytest.raises(SettingsError) as caught:
        load_settings(cls)
    assert str(caught.value) == (f"{variable}: not a duration: 'soon' (use e.g. 250ms, 5s, 5m, "
                                 "1h, 2d, plain seconds or ISO 8601 PT10S)")


def test_a_missing_participant_dsn_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAGAFLOW_PARTICIPANT_DSN", raising=False)
    with pytest.raises(SettingsError, match=r"^SAGAFLOW_PARTICIPANT_DSN is not set$"):
        load_settings(ParticipantSettings)


def test_a_bad_number_names_the_variable_and_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGAFLOW_RELAY_BATCH_SIZE", "0")
    with pytest.raises(SettingsError) as caught:
        load_settings(RelaySettings)
    assert str(caught.value) == ("SAGAFLOW_RELAY_BATCH_SIZE: Input should be greater than or "
                                 "equal to 1 (got '0')")


def test_the_relay_reads_the_coordinators_dsn_and_keeps_its_own_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    multi = "postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write"
    monkeypatch.setenv("SAGAFLOW_DSN", multi)
    assert load_settings(RelaySettings).postgres_dsn == multi
    monkeypatch.setenv("SAGAFLOW_RELAY_POSTGRES_DSN", "postgresql://own/db")
    assert load_settings(RelaySettings).postgres_dsn == "postgresql://own/db"
    assert load_settings(CoordinatorSettings).dsn == multi


def test_unreachable_services_are_explained_with_what_to_set() -> None:
    kafka = explain(KafkaConnectionError("no broker"), postgres_var="A", kafka_var="B")
    assert kafka is not None and kafka[0].startswith("cannot reach Kafka") and "set B" in kafka[0]
    assert kafka[1] is ExitCode.KAFKA == 4
    refused = explain(ConnectionRefusedError(111, "Connection refused"), postgres_var="A",
                      kafka_var="B")
    assert refused is not None and "set A" in refused[0] and refused[1] is ExitCode.POSTGRES
    gave_up = explain(ServiceUnavailable("Kafka", "no broker", 120), postgres_var="A",
                      kafka_var="B")
    assert gave_up == ("cannot reach Kafka after 120s: no broker (is it running? check B; "
                       "SAGAFLOW_STARTUP_TIMEOUT sets how long start-up waits)", ExitCode.KAFKA)
    assert explain(ExceptionGroup("x", [SettingsError("X is not set")]), postgres_var="A",
                   kafka_var="B") == ("X is not set", ExitCode.SETTINGS)
    assert explain(KeyError("bug"), postgres_var="A", kafka_var="B") is None


def test_every_setting_is_documented() -> None:
    for cls in ALL_SETTINGS:
        docs = field_docs(cls)
        missing = [name for name in cls.model_fields
                   if name not in docs and not any(name in field_docs(b) for b in cls.__mro__[1:]
                                                   if b in ALL_SETTINGS)]
        assert not missing, f"{cls.__name__}: no #: comment for {missing}"
        assert all(docs[name] for name in docs), cls.__name__


def test_the_configuration_reference_is_current() -> None:
    assert (ROOT / "docs" / "configuration.md").read_text() == render(), (
        "docs/configuration.md is stale: run "
        "`python -m coordinator.cli.config_reference --write docs/configuration.md`")
