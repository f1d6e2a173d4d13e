"""``sagaflow-coordinator compat OLD NEW``: is version NEW of a saga compatible with the
inputs clients send to OLD? For CI, before a deploy makes NEW the latest version.

Compared on the models' JSON schemas, field by field and into nested models:

- **breaking**: a field OLD had is gone (a client still sends it; the new model forbids or
  silently drops it), a field's type or constraints changed, a new field is required, or an
  optional field became required;
- **compatible**: a new optional field, a required field that became optional.

A changed constraint is flagged even when it loosens: the check errs on the side of a person
looking. Each signal's payload model is compared the same way (clients send it); each
query's result model the other way round (clients read it: a field no longer required
breaks them, a new one does not), and each update's payload model like a signal's. A removed
signal, query or update breaks clients; a new one does not. Exit code: 0 compatible, 1 breaking,
2 a reference that does not import.
"""

from __future__ import annotations

import argparse
import sys
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, TextIO

from pydantic import BaseModel

from coordinator.language.nodes import WaitForSignal, branch_nodes, child_branches
from participant_sdk.version import version_line

__all__ = ["Change", "compare_models", "compare_sagas", "main_compat", "query_models",
           "signal_models", "update_models"]

#: Schema keys that document a field without changing what it accepts.
_DOC_KEYS: Final = frozenset({"title", "description", "examples", "default", "deprecated"})


@dataclass(frozen=True, slots=True)
class Change:
    #: ``input.address.zip``: the model, then the field path.
    path: str
    breaking: bool
    what: str

    def __str__(self) -> str:
        return f"{'BREAKING' if self.breaking else 'ok'}  {self.path}: {self.what}"


def _resolve(schema: Any, defs: dict[str, Any]) -> Any:
    """``schema`` with every ``$ref`` replaced by its definition and doc keys dropped."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            return _resolve(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
        return {k: _resolve(v, defs) for k, v in schema.items()
                if k not in _DOC_KEYS and k != "$defs"}
    if isinstance(schema, list):
        return [_resolve(v, defs) for v in schema]
    return schema


def _is_object(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "object" and "properties" in schema


def _compare(old: dict[str, Any], new: dict[str, Any], path: str, *, read: bool = False
             ) -> list[Change]:
    """Changes for a client that writes the model (``read=False``: inputs, signal payloads)
    or reads it (``read=True``: query results). Both break on a removed or retyped field; a
    writer breaks on a new or newly required field, a reader on a field no longer required."""
    changes: list[Change] = []
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    old_req, new_req = set(old.get("required", ())), set(new.get("required", ()))
    for name in old_props:
        where = f"{path}.{name}"
        if name not in new_props:
            kind = "required" if name in old_req else "optional"
            changes.append(Change(where, True, f"{kind} field removed"))
            continue
        before, after = old_props[name], new_props[name]
        if _is_object(before) and _is_object(after):
            changes += _compare(before, after, where, read=read)
        elif before != after:
            changes.append(Change(where, True, f"type or constraints changed: {before} -> "
                                               f"{after}"))
        if name in new_req and name not in old_req:
            changes.append(Change(where, not read, "optional field became required"))
        elif name in old_req and name not in new_req:
            changes.append(Change(where, read, "required field became optional"))
    for name in new_props.keys() - old_props.keys():
        where = f"{path}.{name}"
        if name in new_req:
            changes.append(Change(where, not read, "new required field"))
        else:
            changes.append(Change(where, False, "new optional field"))
    return sorted(changes, key=lambda c: c.path)


def compare_models(old: type[BaseModel], new: type[BaseModel], *, name: str = "input",
                   read: bool = False) -> list[Change]:
    """What changed from ``old`` to ``new``, for a client that speaks ``old`` (writing the
    model, or reading it with ``read=True``)."""
    schemas = []
    for model in (old, new):
        schema = model.model_json_schema()
        schemas.append(_resolve(schema, schema.get("$defs", {})))
    return _compare(schemas[0], schemas[1], name, read=read)


def compare_sagas(old: type[Any], new: type[Any]) -> list[Change]:
    """Everything a client of ``old`` speaks: the input model, each signal's and update's
    payload model (sent, like the input) and each query's result model (read)."""
    changes = compare_models(old.input_model, new.input_model, name="input")
    changes += _compare_named("signal", signal_models(old), signal_models(new), read=False)
    changes += _compare_named("query", query_models(old), query_models(new), read=True)
    changes += _compare_named("update", update_models(old), update_models(new), read=False)
    return changes


def _compare_named(kind: str, old: dict[str, type[BaseModel] | None],
                   new: dict[str, type[BaseModel] | None], *, read: bool) -> list[Change]:
    changes: list[Change] = []
    for name, before in sorted(old.items()):
        if name not in new:
            changes.append(Change(f"{kind}.{name}", True, f"{kind} removed"))
            continue
        after = new[name]
        if before is not None and after is not None:
            changes += compare_models(before, after, name=f"{kind}.{name}", read=read)
        elif before is not after:
            changes.append(Change(f"{kind}.{name}", True, "payload model added or removed"))
    changes += [Change(f"{kind}.{name}", False, f"new {kind}")
                for name in sorted(new.keys() - old.keys())]
    return changes


def signal_models(saga: type[Any]) -> dict[str, type[BaseModel] | None]:
    """Signal name -> payload model (None: any object) of every wait in the saga's tree."""
    found: dict[str, type[BaseModel] | None] = {}

    def walk(nodes: Any) -> None:
        for node in branch_nodes(nodes):
            if isinstance(node, WaitForSignal):
                found[node.signal] = node.payload
            for branch in child_branches(node):
                walk(branch)

    walk(tuple(saga.steps))
    return found


def update_models(saga: type[Any]) -> dict[str, type[BaseModel] | None]:
    """Update name -> its payload model (None: any object)."""
    return {update.name: update.model for update in getattr(saga, "updates", ())}


def query_models(saga: type[Any]) -> dict[str, type[BaseModel] | None]:
    """Query name -> the result model its function is annotated with (None: not a model)."""
    found: dict[str, type[BaseModel] | None] = {}
    for name, fn in getattr(saga, "queries", {}).items():
        returned = typing.get_type_hints(fn).get("return")
        found[name] = returned if isinstance(returned, type) and issubclass(
            returned, BaseModel) else None
    return found


def main_compat(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """CLI entry: ``OLD NEW`` (two saga classes as ``module:Class``); exit code."""
    from coordinator.sagas.loading import SagaImportError, import_saga

    parser = argparse.ArgumentParser(
        prog="sagaflow-coordinator compat",
        description="Compare the input models of two versions of a saga; exit 1 when a "
                    "change breaks clients of the old one.")
    parser.add_argument("--version", action="version",
                        version=version_line("sagaflow-coordinator compat"))
    parser.add_argument("old", help="the deployed saga class, module:Class")
    parser.add_argument("new", help="the saga class about to be deployed, module:Class")
    args = parser.parse_args(argv)
    stream = out if out is not None else sys.stdout
    try:
        old, new = import_saga(args.old), import_saga(args.new)
    except SagaImportError as exc:
        print(f"sagaflow-coordinator compat: error: {exc}", file=sys.stderr)
        return 2
    changes = compare_sagas(old, new)
    label = f"{old.name} v{old.version} -> {new.name} v{new.version}"
    stream.writelines(f"{c}\n" for c in changes)
    breaking = sum(c.breaking for c in changes)
    stream.write(f"{label}: {breaking} breaking change(s)\n" if breaking
                 else f"{label}: compatible\n")
    return 1 if breaking else 0
