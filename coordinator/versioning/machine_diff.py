"""What changed between two exported machines (``CompiledSaga.to_json()``) of one saga type:
states, transitions and steps added, removed or changed, and whether the input schema moved.

Used by the drain report to show what an old version's sagas still run that new ones do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MachineDiff", "diff_machines"]


@dataclass(frozen=True, slots=True)
class MachineDiff:
    states_added: list[str]
    states_removed: list[str]
    #: ``"from -> to (on)"`` lines.
    transitions_added: list[str]
    transitions_removed: list[str]
    steps_added: list[str]
    steps_removed: list[str]
    #: Steps in both whose exported definition (participant, action, retry, ...) differs.
    steps_changed: list[str]
    input_schema_changed: bool

    @property
    def empty(self) -> bool:
        return not any((self.states_added, self.states_removed, self.transitions_added,
                        self.transitions_removed, self.steps_added, self.steps_removed,
                        self.steps_changed, self.input_schema_changed))


def _transitions(machine: dict[str, Any]) -> set[str]:
    return {f"{t['from']} -> {t['to']} ({t['on']})" for t in machine["transitions"]}


def _steps(machine: dict[str, Any]) -> dict[str, Any]:
    return {s["name"]: s for s in machine["steps"]}


def diff_machines(old: dict[str, Any], new: dict[str, Any]) -> MachineDiff:
    """``new`` compared with ``old``."""
    old_states, new_states = set(old["states"]), set(new["states"])
    old_t, new_t = _transitions(old), _transitions(new)
    old_s, new_s = _steps(old), _steps(new)
    return MachineDiff(
        states_added=sorted(new_states - old_states),
        states_removed=sorted(old_states - new_states),
        transitions_added=sorted(new_t - old_t),
        transitions_removed=sorted(old_t - new_t),
        steps_added=sorted(new_s.keys() - old_s.keys()),
        steps_removed=sorted(old_s.keys() - new_s.keys()),
        steps_changed=sorted(k for k in old_s.keys() & new_s.keys() if old_s[k] != new_s[k]),
        input_schema_changed=old.get("input_schema") != new.get("input_schema"),
    )
