"""Moving a running saga from version N to version M by M's declared ``Migration``.

:func:`plan_migration` is the dry run: the renames and the transform applied in memory, and
every reason the saga cannot move. The ``Migrated`` event applies the same plan, so what the
dry run said is what the migration does. A saga can move when every node it has maps to a
node of M, no renamed or changed node has a command or timer outstanding (its reply and timer
ids name the node as it was) and no renamed child saga node has a live child (the child's id
derives from the node's key), the transform returns a state that validates and the input
validates against M's input model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from coordinator.engine.state import SagaState, StepPhase
from coordinator.engine.tree import (
    CompiledMigration,
    CompiledSaga,
    CompiledStep,
    StepKind,
    walk,
)

__all__ = ["MigrationPlan", "plan_migration", "rename_key"]


@dataclass(frozen=True)
class MigrationPlan:
    """What migrating one saga would do: ``state`` is the migrated state when ``ok``."""

    saga_id: Any
    from_version: int
    to_version: int
    migration: str
    problems: tuple[str, ...]
    state: SagaState | None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"saga_id": str(self.saga_id), "from_version": self.from_version,
                "to_version": self.to_version, "migration": self.migration,
                "can_move": self.ok, "problems": list(self.problems)}


def plan_migration(target: CompiledSaga, state: SagaState) -> MigrationPlan:
    """The dry run of moving ``state`` to ``target``'s version (pure: changes nothing)."""
    migration = target.migrations.get(state.version)
    label = migration.name if migration else ""

    def refused(*why: str) -> MigrationPlan:
        return MigrationPlan(state.saga_id, state.version, target.version, label, why, None)

    if state.saga_type != target.name:
        return refused(f"saga is {state.saga_type}, not {target.name}")
    if state.status.is_terminal:
        return refused(f"saga is {state.status.value}: nothing to migrate")
    if migration is None:
        return refused(f"{target.name} v{target.version} declares no migration from "
                       f"v{state.version}")
    problems = _node_problems(target, migration, state)
    data = _renamed(state.to_json(), migration.renames)
    if migration.transform is not None:
        try:
            data = migration.transform(data)
        except Exception as exc:
            problems.append(f"transform raised {type(exc).__name__}: {exc}")
            return refused(*problems)
    data["version"] = target.version
    try:
        moved = SagaState.from_json(data)
    except (ValidationError, TypeError, ValueError) as exc:
        problems.append(f"migrated state does not validate: {_first_error(exc)}")
        return refused(*problems)
    try:
        target.input_model.model_validate(moved.input)
    except ValidationError as exc:
        problems.append(f"input does not validate against v{target.version}'s input model: "
                        f"{_first_error(exc)}")
    if problems:
        return refused(*problems)
    return MigrationPlan(state.saga_id, state.version, target.version, label, (), moved)


def _node_problems(target: CompiledSaga, migration: CompiledMigration, state: SagaState
                   ) -> list[str]:
    source = migration.source
    known = {n.name for n in walk(target.root) if n.name}
    changed = {n.name for n in walk(source.root) if n.name and (
        migration.renames.get(n.name, n.name) not in known
        or migration.renames.get(n.name, n.name) != n.name
        or _shape(n) != _shape(target.node(migration.renames.get(n.name, n.name))))}
    out: list[str] = []
    for key, node in state.steps.items():
        base = node.node.removesuffix("[]")
        new = migration.renames.get(base, base) + ("[]" if node.node.endswith("[]") else "")
        if new not in known:
            out.append(f"{key}: node {node.node!r} has no node in v{target.version}")
            continue
        busy = node.outstanding is not None or node.retry_timer or node.timer
        if busy and base in changed:
            out.append(f"{key}: a command or timer is outstanding on a node that is renamed "
                       "or changed in the new version")
        elif new != node.node and node.phase in _CHILD_LIVE and _is_child(source, base):
            out.append(f"{key}: its child saga is still live and its id derives from the "
                       "node's key; rename the node once the child has finished")
    return out


#: Phases of a child saga node whose child still takes the parent's requests.
_CHILD_LIVE = frozenset({StepPhase.TRYING, StepPhase.TRIED, StepPhase.CONFIRMING,
                         StepPhase.CANCELLING})


def _is_child(source: CompiledSaga, name: str) -> bool:
    node = source.node(name)
    return isinstance(node, CompiledStep) and node.kind is StepKind.CHILD


def _shape(node: Any) -> Any:
    """What the saga relies on in a node: its JSON without its children."""
    data = dict(node.to_json())
    data.pop("children", None)
    return data


def rename_key(key: str, renames: dict[str, str] | Any) -> str:
    """A node key with each segment's node name renamed (``lines[3].reserve``)."""
    out = []
    for segment in key.split("."):
        name, bracket, rest = segment.partition("[")
        out.append(renames.get(name, name) + bracket + rest)
    return ".".join(out)


def _renamed(data: dict[str, Any], renames: Any) -> dict[str, Any]:
    if not renames:
        return data
    steps = {}
    for key, node in data["steps"].items():
        new_key = rename_key(key, renames)
        base = node["node"].removesuffix("[]")
        suffix = "[]" if node["node"].endswith("[]") else ""
        steps[new_key] = {**node, "key": new_key, "node": renames.get(base, base) + suffix,
                          "parent": None if node.get("parent") is None
                          else rename_key(node["parent"], renames)}
    out = {**data, "steps": steps}
    for field in ("cause", "dead_step"):
        if out.get(field):
            out[field] = rename_key(out[field], renames)
    out["undoing"] = [rename_key(k, renames) for k in out.get("undoing", [])]
    return out


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        return f"{'.'.join(map(str, err['loc']))}: {err['msg']}"
    return str(exc)
