"""FunctionSettings reads what CoordinatorSettings reads, without pydantic-settings."""

from __future__ import annotations

import pytest
from pydantic_settings import NoDecode

from coordinator.config.functions import FunctionSettings
from coordinator.config.settings import CoordinatorSettings
from participant_sdk.startup_errors import SettingsError

ENV = {
    "SAGAFLOW_DSN": "postgresql://u@db:5432/coord",
    "sagaflow_topic_prefix": "acme",  # pydantic-settings matches names case-insensitively
    "SAGAFLOW_SAGAS": "examples.order_saga:OrderSaga, examples.checkout:Checkout,",
    "SAGAFLOW_POOL_MAX_SIZE": "3",
    "SAGAFLOW_TIMER_BATCH_SIZE": "50",
    "SAGAFLOW_KAFKA_BOOTSTRAP": "k:9092",  # a worker's setting: ignored here
}


def test_fields_defaults_and_bounds_match_coordinator_settings() -> None:
    for name, field in FunctionSettings.model_fields.items():
        theirs = CoordinatorSettings.model_fields[name]
        assert field.get_default(call_default_factory=True) == theirs.get_default(
            call_default_factory=True), name
        assert field.annotation == theirs.annotation, name
        bounds = [m for m in theirs.metadata if m is not NoDecode]  # env parsing, not a bound
        assert [repr(m) for m in field.metadata] == [repr(m) for m in bounds], name


def test_reads_the_same_environment_as_coordinator_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    ours = FunctionSettings.from_env()
    theirs = CoordinatorSettings()
    assert ours.model_dump() == {name: getattr(theirs, name) for name in ours.model_dump()}
    assert ours.sagas == ["examples.order_saga:OrderSaga", "examples.checkout:Checkout"]
    assert ours.topic_prefix == "acme" and ours.pool_max_size == 3


def test_overrides_win_over_the_environment() -> None:
    settings = FunctionSettings.from_env({"SAGAFLOW_POOL_MAX_SIZE": "3"}, pool_max_size=2)
    assert settings.pool_max_size == 2
    assert settings.dsn == FunctionSettings().dsn


@pytest.mark.parametrize(("env", "message"), [
    ({"SAGAFLOW_POOL_MAX_SIZE": "0"},
     "SAGAFLOW_POOL_MAX_SIZE: Input should be greater than or equal to 1 (got '0')"),
    ({"SAGAFLOW_TIMER_BATCH_SIZE": "many"}, "SAGAFLOW_TIMER_BATCH_SIZE: Input should be a valid "
     "integer, unable to parse string as an integer (got 'many')"),
])
def test_a_bad_value_names_its_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        FunctionSettings.from_env(env)
    assert str(caught.value) == message


def test_a_bad_dsn_is_not_echoed() -> None:
    with pytest.raises(SettingsError) as caught:
        FunctionSettings.from_env({}, dsn=None)
    assert str(caught.value) == "SAGAFLOW_DSN: Input should be a valid string"
