"""Reading a definition from JSON or YAML text, within limits, every problem with its path.

The limits hold before any model sees the data: at most :data:`MAX_DEFINITION_BYTES` of
text, nesting at most :data:`MAX_NESTING` deep, at most :data:`MAX_NODES` values in all, and
no YAML anchors or aliases (an alias can make a small file expand to a huge one). Malformed
text never raises anything but :class:`~coordinator.definitions.errors.InvalidDefinition`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from coordinator.definitions.building import build_saga_class
from coordinator.definitions.errors import InvalidDefinition, Problem, render_loc
from coordinator.definitions.format import Definition

__all__ = [
    "MAX_DEFINITION_BYTES",
    "MAX_NESTING",
    "MAX_NODES",
    "load_definition",
    "load_saga",
    "load_saga_file",
    "parse_definition",
]

MAX_DEFINITION_BYTES: Final = 512 * 1024
MAX_NESTING: Final = 64
MAX_NODES: Final = 50_000


def parse_definition(text: str | bytes, source: str = "definition") -> Definition:
    """The definition in ``text`` (JSON or YAML), validated against the format."""
    data = _read(text, source)
    try:
        return Definition.model_validate(data)
    except ValidationError as exc:
        problems = [Problem(render_loc(e["loc"]), e["msg"]) for e in exc.errors()]
        raise InvalidDefinition(problems, source) from None
    except (RecursionError, TypeError, ValueError) as exc:  # a model's own check, said plainly
        raise InvalidDefinition([Problem("", f"{type(exc).__name__}: {exc}")], source) from None


def load_definition(definition: Definition, source: str = "definition") -> type[Any]:
    """The saga class of a parsed definition."""
    return build_saga_class(definition, source)


def load_saga(text: str | bytes, source: str = "definition") -> type[Any]:
    """The saga class of a definition's JSON or YAML text."""
    return build_saga_class(parse_definition(text, source), source)


def load_saga_file(path: str | Path) -> type[Any]:
    """The saga class of a definition file (``.yaml``, ``.yml`` or ``.json``)."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_DEFINITION_BYTES:
            raise InvalidDefinition([Problem("", _too_big(size))], str(file))
        text = file.read_bytes()
    except OSError as exc:
        raise InvalidDefinition([Problem("", f"cannot read: {exc.strerror}")], str(file)) \
            from None
    return load_saga(text, str(file))


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last
    one silently, so a pasted second ``retry:`` would hide the first)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | int | float | bool):
                continue  # an unhashable key is refused by the format's models
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        twice = next(k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i]))
        raise ValueError(f"key {twice!r} given twice")
    return out


def _too_big(size: int) -> str:
    return f"{size} bytes, more than the {MAX_DEFINITION_BYTES} a definition may have"


def _read(text: str | bytes, source: str) -> Any:
    def refuse(message: str) -> InvalidDefinition:
        return InvalidDefinition([Problem("", message)], source)

    if len(text) > MAX_DEFINITION_BYTES:
        raise refuse(_too_big(len(text)))
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise refuse(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError as exc:
            raise refuse(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") \
                from None
        except RecursionError:
            raise refuse(f"nests deeper than {MAX_NESTING} levels") from None
        except ValueError as exc:  # a key given twice
            raise refuse(f"not a definition: {exc}") from None
    else:
        data = _read_yaml(text, refuse)
    _check_shape(data, refuse)
    return data


def _read_yaml(text: str, refuse: Any) -> Any:
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise refuse("YAML anchors and aliases are not allowed in a definition")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_NESTING:
                    raise refuse(f"nests deeper than {MAX_NESTING} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader: no Python objects
    except InvalidDefinition:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise refuse(f"not YAML: {exc.problem or exc}{where}") from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        raise refuse(f"not YAML: {type(exc).__name__}: {exc}") from None


def _check_shape(data: Any, refuse: Any) -> None:
    """Depth and size of the parsed data, walked without recursion."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    seen = 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise refuse(f"has more than {MAX_NODES} values")
        if depth > MAX_NESTING:
            raise refuse(f"nests deeper than {MAX_NESTING} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    if not isinstance(data, dict):
        raise refuse(f"a definition is an object (a mapping), got {type(data).__name__}")
