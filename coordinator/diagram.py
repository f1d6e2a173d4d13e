"""Draw a compiled saga's state machine as Mermaid, or export it as JSON.

``main_diagram(["examples.order_saga:OrderSaga"])`` prints the Mermaid text;
``--json`` prints the JSON export and ``--state NAME`` highlights a state.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections.abc import Sequence
from typing import TextIO

from coordinator.definition import DefinitionError, Saga
from coordinator.engine.compiled import CompiledSaga, compile_saga
from participant_sdk.protocol import DEFAULT_TOPIC_PREFIX

__all__ = ["load_saga_class", "main_diagram", "mermaid"]

_TERMINAL = {"completed", "compensated", "cancelled"}


def _node_id(state: str) -> str:
    return "s_" + re.sub(r"[^A-Za-z0-9_]", "_", state)


def _label(text: str) -> str:
    return text.replace('"', "'")


def mermaid(definition: CompiledSaga, current_state: str | None = None) -> str:
    """Mermaid ``stateDiagram-v2`` text; ``current_state`` (a state name) is highlighted."""
    if current_state is not None and current_state not in definition.states:
        raise ValueError(f"{current_state!r} is not a state of {definition.name} "
                         f"v{definition.version}")
    lines = ["stateDiagram-v2", f"    %% {definition.name} v{definition.version}"]
    for state in definition.states:
        lines.append(f'    state "{_label(state)}" as {_node_id(state)}')
    lines.append(f"    [*] --> {_node_id('start')}")
    for t in definition.transitions:
        lines.append(f"    {_node_id(t.source)} --> {_node_id(t.target)}: {_label(t.label)}")
    for state in definition.states:
        if state in _TERMINAL:
            lines.append(f"    {_node_id(state)} --> [*]")
    lines.append("    classDef dead fill:#f8d7da,stroke:#b02a37")
    lines.append("    classDef current fill:#fff3cd,stroke:#d39e00,stroke-width:3px")
    lines.append(f"    class {_node_id('dead')} dead")
    if current_state is not None:
        lines.append(f"    class {_node_id(current_state)} current")
    return "\n".join(lines) + "\n"


def load_saga_class(spec: str) -> type[Saga]:
    """Import ``module:Class`` and check that it is a saga class."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise DefinitionError(f"expected module:Class, got {spec!r}")
    obj = getattr(importlib.import_module(module_name), attr, None)
    if not (isinstance(obj, type) and issubclass(obj, Saga)):
        raise DefinitionError(f"{spec} is not a Saga subclass")
    return obj


def main_diagram(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """CLI entry: ``module:Class [--json] [--state NAME] [--topic-prefix P]``; exit code."""
    parser = argparse.ArgumentParser(prog="sagaflow diagram",
                                     description="Draw a saga's state machine.")
    parser.add_argument("saga", help="the saga class as module:Class")
    parser.add_argument("--json", action="store_true", help="print the JSON export instead")
    parser.add_argument("--state", default=None, help="highlight this state")
    parser.add_argument("--topic-prefix", default=DEFAULT_TOPIC_PREFIX)
    args = parser.parse_args(argv)
    stream = out if out is not None else sys.stdout
    try:
        compiled = compile_saga(load_saga_class(args.saga), topic_prefix=args.topic_prefix)
        text = (json.dumps(compiled.to_json(), indent=2) + "\n" if args.json
                else mermaid(compiled, args.state))
    except (DefinitionError, ImportError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stream.write(text)
    return 0
