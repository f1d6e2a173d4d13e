"""Builds the explicit state machine of a compiled saga (for validation, JSON and Mermaid).

Forward steps run one at a time in declaration order. Once every forward step succeeded, all
TCC steps are confirmed together: one state, ``confirming``, covers the confirms in flight
(each step's own phase, attempts and timers are in its ``StepState``), and the saga completes
when every confirm is acknowledged. Rollback runs one step at a time, in reverse order of
completion. A guarded step may be skipped, so edges that enter a guarded step also bypass it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coordinator.engine.compiled import CompiledStep, Transition

__all__ = ["CONFIRMING", "END_STATES", "build_machine", "forward_state", "rollback_state"]

END_STATES = ("completed", "compensated", "cancelled", "dead")
#: The state of a saga whose TCC steps are being confirmed, all at once.
CONFIRMING = "confirming"


def forward_state(step: CompiledStep) -> str:
    return f"{step.name}.{'trying' if step.kind.value == 'tcc' else 'executing'}"


def rollback_state(step: CompiledStep) -> str:
    return f"{step.name}.{'cancelling' if step.kind.value == 'tcc' else 'compensating'}"


def build_machine(
    steps: Sequence[CompiledStep],
) -> tuple[tuple[str, ...], tuple[Transition, ...]]:
    from coordinator.engine.compiled import StepKind, Transition

    states: list[str] = ["start"]
    edges: list[Transition] = []
    seen: set[tuple[str, str, str]] = set()

    def edge(source: str, target: str, label: str) -> None:
        if (source, target, label) not in seen:
            seen.add((source, target, label))
            edges.append(Transition(source, target, label))

    tcc = [s for s in steps if s.kind is StepKind.TCC]
    confirm_entry = CONFIRMING if tcc else "completed"

    def forward_targets(i: int) -> list[tuple[str, str]]:
        """States reachable when forward position ``i`` is next, with guard labels."""
        out: list[tuple[str, str]] = []
        prefix = ""
        while i < len(steps):
            step = steps[i]
            if step.when is None:
                out.append((forward_state(step), prefix))
                return out
            out.append((forward_state(step), f"{prefix} [{step.name} runs]"))
            prefix += f" [{step.name} skipped]"
            i += 1
        out.append((confirm_entry, prefix))
        return out

    def rollback_targets(i: int, label: str) -> list[tuple[str, str]]:
        """States reachable when rollback must next look at positions ``i``, ``i-1``, ..."""
        out: list[tuple[str, str]] = []
        prefix = label
        while i >= 0:
            step = steps[i]
            target = rollback_state(step) if step.reversible else "dead"
            here = prefix if step.reversible else f"{prefix} [{step.name} cannot be undone]"
            if step.when is None:
                out.append((target, here))
                return out
            out.append((target, f"{here} [{step.name} ran]"))
            prefix += f" [{step.name} skipped]"
            i -= 1
        out.append(("compensated", prefix))
        out.append(("cancelled", f"{prefix} [operator cancel]"))
        return out

    for state, label in forward_targets(0):
        edge("start", state, f"started{label}")
    for i, step in enumerate(steps):
        fwd = forward_state(step)
        states.append(fwd)
        for state, label in forward_targets(i + 1):
            edge(fwd, state, f"ok{label}")
        if step.reversible:
            edge(fwd, rollback_state(step), "failed / cancelled")
        else:
            edge(fwd, "dead", "outcome unknown [cannot be undone]")
            for state, label in rollback_targets(i - 1, "failed / cancelled"):
                edge(fwd, state, label)
    if tcc:
        states.append(CONFIRMING)
        names = ", ".join(s.name for s in tcc)
        edge(CONFIRMING, "completed", f"all confirmed [{names}]")
        edge(CONFIRMING, "dead", "a confirm exhausted / rejected")
    for i, step in enumerate(steps):
        if not step.reversible:
            continue
        name = rollback_state(step)
        states.append(name)
        for state, label in rollback_targets(i - 1, "ok"):
            edge(name, state, label)
        edge(name, "dead", "exhausted / rejected")
    states.extend(END_STATES)
    edge("dead", "completed", "operator resolve")
    edge("dead", "compensated", "operator resolve")
    return tuple(states), tuple(edges)
