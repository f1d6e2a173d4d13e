"""The module paths that moved in 0.2 still import, with a DeprecationWarning naming the new one."""

from __future__ import annotations

import importlib
import sys

import pytest

from coordinator._moved import MOVED, new_name


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_imports_the_moved_module_and_warns(old: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=MOVED[old].replace(".", r"\.")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])


def test_a_module_inside_a_moved_package_follows_it() -> None:
    assert new_name("coordinator.worker.worker") == "coordinator.runtime.worker.worker"
    sys.modules.pop("coordinator.opscli.render", None)
    with pytest.warns(DeprecationWarning):
        from coordinator.opscli.render import page_params  # type: ignore[import-not-found]
    from coordinator.cli.ops.render import page_params as moved
    assert page_params is moved


def test_an_old_name_from_the_docs_still_works() -> None:
    sys.modules.pop("coordinator.definition", None)
    with pytest.warns(DeprecationWarning):
        from coordinator.definition import Saga, TccStep  # type: ignore[import-not-found]
    from coordinator.language import Saga as NewSaga
    from coordinator.language import TccStep as NewStep
    assert (Saga, TccStep) == (NewSaga, NewStep)


def test_unmoved_names_are_left_alone() -> None:
    assert new_name("coordinator.store") is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("coordinator.no_such_module")
