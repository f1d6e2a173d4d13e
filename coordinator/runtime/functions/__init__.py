"""The coordinator as serverless functions: :mod:`~coordinator.runtime.functions.handlers` (the
code the long-running worker runs too) and the warm instance that calls them
(:class:`CoordinatorFunctions`, configured by :class:`FunctionSettings`)."""

from typing import TYPE_CHECKING

from participant_sdk.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from coordinator.config.functions import FunctionSettings
    from coordinator.runtime.functions.instance import CoordinatorFunctions

#: Loaded on first use, so that importing the handlers (as the worker does) skips the instance.
_LAZY = {
    "CoordinatorFunctions": "coordinator.runtime.functions.instance",
    "FunctionSettings": "coordinator.config.functions",
}

__getattr__ = lazy_exports(__name__, globals(), _LAZY)

__all__ = ["CoordinatorFunctions", "FunctionSettings"]
