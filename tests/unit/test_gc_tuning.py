"""The worker's garbage-collector thresholds: applied as configured, checked when read."""

from __future__ import annotations

import gc

import pytest
from pydantic import ValidationError

from coordinator.config.gc_tuning import WORKER_GC_THRESHOLDS, tune_gc
from coordinator.config.settings import CoordinatorSettings


def test_tune_gc_sets_the_thresholds_and_freezes_what_start_up_allocated() -> None:
    before = gc.get_threshold()
    try:
        tune_gc((12_345, 7, 9))
        assert gc.get_threshold() == (12_345, 7, 9)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_the_setting_defaults_to_the_worker_thresholds_and_refuses_bad_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert CoordinatorSettings().gc_thresholds == WORKER_GC_THRESHOLDS
    monkeypatch.setenv("SAGAFLOW_GC_THRESHOLDS", "[700, 10, 10]")
    assert CoordinatorSettings().gc_thresholds == (700, 10, 10)
    monkeypatch.setenv("SAGAFLOW_GC_THRESHOLDS", "[0, 10, 10]")
    with pytest.raises(ValidationError, match="greater than 0"):
        CoordinatorSettings()
