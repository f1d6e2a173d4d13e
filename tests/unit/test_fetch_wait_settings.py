"""The broker-side fetch wait of the worker's and the participants' consumers (bounded,
2 s by default: an idle consumer costs the broker one empty fetch per wait), and the
participants' producer linger (none by default: a lone reply goes at once)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from coordinator.config.settings import CoordinatorSettings
from participant_sdk import ParticipantSettings


def test_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CoordinatorSettings(dsn="postgresql://x").reply_fetch_max_wait == timedelta(seconds=2)
    assert ParticipantSettings(dsn="postgresql://x").fetch_max_wait == timedelta(seconds=2)
    monkeypatch.setenv("SAGAFLOW_REPLY_FETCH_MAX_WAIT", "500ms")
    monkeypatch.setenv("SAGAFLOW_PARTICIPANT_FETCH_MAX_WAIT", "5s")
    assert CoordinatorSettings(dsn="postgresql://x").reply_fetch_max_wait == timedelta(
        milliseconds=500)
    assert ParticipantSettings(dsn="postgresql://x").fetch_max_wait == timedelta(seconds=5)


@pytest.mark.parametrize("wait", [timedelta(0), timedelta(milliseconds=99), timedelta(seconds=31)])
def test_out_of_bounds_waits_are_refused_by_name(wait: timedelta) -> None:
    with pytest.raises(ValidationError, match="reply_fetch_max_wait must be between"):
        CoordinatorSettings(dsn="postgresql://x", reply_fetch_max_wait=wait)
    with pytest.raises(ValidationError, match="fetch_max_wait must be between"):
        ParticipantSettings(dsn="postgresql://x", fetch_max_wait=wait)


def test_participant_linger_defaults_to_none_and_is_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert ParticipantSettings(dsn="postgresql://x").linger == timedelta(0)
    monkeypatch.setenv("SAGAFLOW_PARTICIPANT_LINGER", "5ms")
    assert ParticipantSettings(dsn="postgresql://x").linger == timedelta(milliseconds=5)
    for bad in (timedelta(milliseconds=-1), timedelta(seconds=2)):
        with pytest.raises(ValidationError, match="linger must be between 0 and 1s"):
            ParticipantSettings(dsn="postgresql://x", linger=bad)
