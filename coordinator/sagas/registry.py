"""Which saga definitions this deployment knows, by name and version.

Several versions of one saga name can be registered at once: a running saga stays pinned to
the version it started with (``SagaState.version``), new sagas usually start on ``latest``.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.engine.compiled import CompiledSaga, compile_saga
from coordinator.language.saga import DefinitionError, Saga
from participant_sdk.protocol import DEFAULT_TOPIC_PREFIX

__all__ = ["SagaRegistry", "UnknownSaga"]


class UnknownSaga(KeyError):
    """No definition is registered under this name (and version)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown saga"


class SagaRegistry:
    """Compiled saga definitions by ``(name, version)``.

    ``strict_participants``, when given, is the set of participant names that exist; a step
    naming any other participant is a registration error. ``topic_prefix`` decides the
    command and reply topics of every definition registered here.
    """

    def __init__(
        self,
        strict_participants: set[str] | None = None,
        *,
        topic_prefix: str = DEFAULT_TOPIC_PREFIX,
        sagas: Iterable[type[Saga]] = (),
    ) -> None:
        self._strict = frozenset(strict_participants) if strict_participants is not None else None
        self.topic_prefix = topic_prefix
        self._by_key: dict[tuple[str, int], CompiledSaga] = {}
        for cls in sagas:
            self.register(cls)

    def register(self, cls: type[Saga]) -> CompiledSaga:
        """Validate and compile ``cls``; registering the very same class twice is a no-op."""
        if not (isinstance(cls, type) and issubclass(cls, Saga)):
            raise DefinitionError(f"{cls!r} is not a Saga subclass")
        compiled = compile_saga(cls, topic_prefix=self.topic_prefix,
                                strict_participants=self._strict)
        key = (compiled.name, compiled.version)
        existing = self._by_key.get(key)
        if existing is not None:
            if existing.saga_class is cls:
                return existing
            other = existing.saga_class.__qualname__ if existing.saga_class else "another class"
            raise DefinitionError(
                f"{cls.__qualname__}: saga {compiled.name!r} version {compiled.version} is "
                f"already registered by {other}")
        self._by_key[key] = compiled
        return compiled

    def get(self, name: str, version: int) -> CompiledSaga:
        try:
            return self._by_key[(name, version)]
        except KeyError:
            have = sorted(v for n, v in self._by_key if n == name)
            raise UnknownSaga(f"no saga {name!r} version {version} is registered "
                              f"(versions: {have or 'none'})") from None

    def latest(self, name: str) -> CompiledSaga:
        versions = [v for n, v in self._by_key if n == name]
        if not versions:
            raise UnknownSaga(f"no saga {name!r} is registered (known: {self.names()})")
        return self._by_key[(name, max(versions))]

    def types(self) -> list[CompiledSaga]:
        """Every registered definition, sorted by name then version."""
        return [self._by_key[k] for k in sorted(self._by_key)]

    def names(self) -> list[str]:
        return sorted({n for n, _ in self._by_key})

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __len__(self) -> int:
        return len(self._by_key)
