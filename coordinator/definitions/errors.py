"""What goes wrong with a definition, each problem with its path in the file::

    DefinitionError (coordinator.language.DefinitionError, a ValueError)
      InvalidDefinition   a file or definition refused: ``problems`` lists every one
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from coordinator.language.steps import DefinitionError

__all__ = ["MAX_PROBLEMS", "DefinitionError", "InvalidDefinition", "Problem", "render_loc"]

#: Most problems one report lists (a garbled file would otherwise list thousands).
MAX_PROBLEMS = 100


@dataclass(frozen=True)
class Problem:
    """One problem: where (``steps[2].retry.max_attempts``; ``""``: the whole file) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '(file)'}: {self.message}"


class InvalidDefinition(DefinitionError):
    """A definition was refused; ``problems`` has every problem found, with its path."""

    def __init__(self, problems: Sequence[Problem], source: str = "definition") -> None:
        self.problems = list(problems)[:MAX_PROBLEMS]
        self.source = source
        lines = "\n  ".join(str(p) for p in self.problems)
        super().__init__(f"invalid saga definition {source}:\n  {lines}")


#: Tags pydantic puts in an error's location for the member of a union it tried.
_KINDS = {"tcc", "saga", "sequence", "parallel", "race", "foreach", "choice", "patched",
          "child", "sleep", "sleep_until", "wait", "task", "catch", "loop"}
_TYPE_TAGS = {"str", "int", "float", "bool", "Expr", "timedelta", "datetime", "JsonSchema",
              "RetryPolicy", "BusinessCalendar", "none"}


def render_loc(loc: Iterable[int | str]) -> str:
    """``("steps", 0, "tcc", "retry")`` -> ``steps[0].retry``: union tags left out."""
    out, previous = "", None
    for part in loc:
        after_index, previous = isinstance(previous, int), part
        if isinstance(part, int):
            out += f"[{part}]"
        elif (after_index and part in _KINDS) or _is_type_tag(part):
            continue
        else:
            out += f".{part}" if out else part
    return out


def _is_type_tag(part: str) -> bool:
    return part in _TYPE_TAGS or "[" in part or part.startswith(
        ("function-", "constrained-", "lax-", "json-or-python"))
