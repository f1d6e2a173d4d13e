"""Old import paths of modules that moved in 0.2, kept working for one release.

``import coordinator.flow`` (or ``from coordinator.definition import Saga``, or a function
handler named ``coordinator.serverless.handle_reply_batch``) still works: it loads the module
at its new place, under both names, and warns with a :class:`DeprecationWarning` naming the
new path. Removed in 0.3; the CHANGELOG lists every move.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

#: Old module (or package) -> its new place.
MOVED: dict[str, str] = {
    "coordinator.definition": "coordinator.language.saga",
    "coordinator.definition_policies": "coordinator.language.policies",
    "coordinator.flow": "coordinator.language.nodes",
    "coordinator.registry": "coordinator.sagas.registry",
    "coordinator.saga_queries": "coordinator.sagas.queries",
    "coordinator.diagram": "coordinator.sagas.diagram",
    "coordinator.patterns": "coordinator.sagas.patterns",
    "coordinator.worker.loading": "coordinator.sagas.loading",
    "coordinator.worker": "coordinator.runtime.worker",
    "coordinator.compat": "coordinator.versioning.compat",
    "coordinator.drain": "coordinator.versioning.drain",
    "coordinator.machine_diff": "coordinator.versioning.machine_diff",
    "coordinator.serverless": "coordinator.runtime.functions.handlers",
    "coordinator.functions": "coordinator.runtime.functions",
    "coordinator.function_settings": "coordinator.config.functions",
    "coordinator.settings": "coordinator.config.settings",
    "coordinator.command_publishing": "coordinator.runtime.publishing",
    "coordinator.reply_decoding": "coordinator.runtime.reply_decoding",
    "coordinator.signal_batch": "coordinator.runtime.signal_batch",
    "coordinator.signal_wire": "coordinator.runtime.signal_wire",
    "coordinator.topics": "coordinator.runtime.topics",
    "coordinator.gc_tuning": "coordinator.config.gc_tuning",
    "coordinator.hint_listener": "coordinator.runtime.hints.listener",
    "coordinator.relay_wake": "coordinator.runtime.hints.relay",
    "coordinator.result_hints": "coordinator.runtime.hints.results",
    "coordinator.timer_hints": "coordinator.runtime.hints.timers",
    "coordinator.config_reference": "coordinator.cli.config_reference",
    "coordinator.opscli": "coordinator.cli.ops",
    "coordinator.observability.tracing": "coordinator.store.tracing",
    "coordinator.schedules.calendars": "coordinator.language.calendars",
    "coordinator.schedules.declared_fields": "coordinator.language.declared",
}


def new_name(old: str) -> str | None:
    """The new module name for ``old`` (a moved module, or one inside a moved package)."""
    head, rest = old, ""
    while head:
        if head in MOVED:
            return MOVED[head] + rest
        head, dot, leaf = head.rpartition(".")
        rest = f"{dot}{leaf}{rest}"
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new}; the old name goes in 0.3",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """The module at its new place is already executed."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        new = new_name(fullname) if fullname.startswith("coordinator.") else None
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once: a module inside a moved package would
    otherwise be found again through the package's path and run a second time."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
