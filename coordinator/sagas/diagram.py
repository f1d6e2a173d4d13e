"""Draw a compiled saga's state machine as Mermaid, or export it as JSON.

``main_diagram(["examples.order_saga:OrderSaga"])`` prints the Mermaid text;
``--json`` prints the JSON export and ``--state NAME`` highlights a state.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TextIO

from coordinator.engine.compiled import (
    CompiledGroup,
    CompiledNode,
    CompiledSaga,
    CompiledSleep,
    CompiledStep,
    CompiledTask,
    CompiledWait,
    GroupKind,
    StepKind,
    compile_saga,
    walk,
)
from coordinator.language.saga import DefinitionError, Saga
from coordinator.language.timeouts import human
from participant_sdk.protocol import DEFAULT_TOPIC_PREFIX
from participant_sdk.version import version_line

__all__ = ["load_saga_class", "main_diagram", "mermaid", "task_summary"]

_KIND_LABEL = {"parallel": "parallel", "race": "first of", "foreach": "for each",
               "choice": "choice", "sequence": "sequence", "patched": "version guard",
               "catch": "catch", "loop": "loop"}


def _node_id(state: str) -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", state)


def _label(text: str) -> str:
    return text.replace('"', "'")


def task_summary(node: CompiledTask) -> str:
    """One line on a human task for the drawings: who, by when, what happens if nobody acts."""
    s = node.spec
    who = "mapped candidates" if callable(s.users) or callable(s.groups) else ", ".join(
        [*s.users, *(f"group {g}" for g in s.groups)])
    parts = [f"human task for {who}"]
    if isinstance(s.due, timedelta):
        parts.append(f"due {s.due}" + (" business time" if s.calendar else ""))
    if s.escalations:
        parts.append(f"{len(s.escalations)} escalation tier(s)")
    if s.timeout is not None:
        then = s.on_timeout if isinstance(s.on_timeout, str) else "default decision"
        parts.append(f"timeout {s.timeout}: {then}")
    if s.four_eyes:
        parts.append("four eyes")
    return "; ".join(parts)


def mermaid(definition: CompiledSaga, current: str | Iterable[str] | None = None) -> str:
    """Mermaid ``stateDiagram-v2`` of the node tree: sequences as chains, parallel groups,
    races and for-each as composites with a region per branch, then confirm and the ends.
    ``current`` (machine state names such as ``reserve.trying``) is highlighted."""
    wanted = [current] if isinstance(current, str) else list(current or ())
    for state in wanted:
        if state not in definition.states:
            raise ValueError(f"{state!r} is not a state of {definition.name} "
                             f"v{definition.version}")
    lines = ["stateDiagram-v2", f"    %% {definition.name} v{definition.version}"]
    first, last = _chain(lines, definition.root.children, "    ")
    lines.append(f"    [*] --> {first}")
    tcc = any(s.kind is StepKind.TCC for s in definition.steps)
    done = _node_id("confirming") if tcc else _node_id("completed")
    lines.append(f"    {last} --> {done}: all succeeded")
    if tcc:
        lines.append(f'    state "confirming (every tried TCC step)" as {_node_id("confirming")}')
        lines.append(f"    {_node_id('confirming')} --> {_node_id('completed')}: all confirmed")
        lines.append(f"    {_node_id('confirming')} --> {_node_id('dead')}: a confirm gave up")
    rollback = _node_id("compensating")
    lines.append(f'    state "rolling back (reverse order of completion)" as {rollback}')
    for node in definition.root.children:
        lines.append(f"    {_node_id(node.name)} --> {rollback}: failed for good")
    lines.extend(_timeout_edges(definition, rollback))
    lines.append(f"    {rollback} --> {_node_id('compensated')}: all undone")
    lines.append(f"    {rollback} --> {_node_id('cancelled')}: all undone [operator cancel]")
    lines.append(f"    {rollback} --> {_node_id('dead')}: an undo gave up")
    for end in ("completed", "compensated"):
        lines.append(f"    {_node_id('dead')} --> {_node_id(end)}: operator resolve")
    lines.append(f"    {_node_id('dead')} --> {rollback}: operator retry / skip / compensate")
    for end in ("completed", "compensated", "cancelled"):
        lines.append(f"    {_node_id(end)} --> [*]")
    lines.append("    classDef dead fill:#f8d7da,stroke:#b02a37")
    lines.append("    classDef current fill:#fff3cd,stroke:#d39e00,stroke-width:3px")
    lines.append(f"    class {_node_id('dead')} dead")
    marked = sorted({_node_id(state.split(".")[0]) for state in wanted})
    if marked:
        lines.append(f"    class {','.join(marked)} current")
    return "\n".join(lines) + "\n"


def _chain(lines: list[str], nodes: Sequence[CompiledNode], pad: str) -> tuple[str, str]:
    """Draw ``nodes`` one after the other; returns the ids of the first and the last."""
    ids = [_draw(lines, node, pad) for node in nodes]
    for a, b in itertools.pairwise(ids):
        lines.append(f"{pad}{a} --> {b}")
    return ids[0], ids[-1]


def _draw(lines: list[str], node: CompiledNode, pad: str) -> str:
    nid = _node_id(node.name)
    if isinstance(node, CompiledStep) and node.child is not None:
        lines.append(f'{pad}state "{_label(node.name)} (child saga {node.child}; '
                     f'confirmed or cancelled with this saga{_timeout(node)})" as {nid}')
        return nid
    if isinstance(node, CompiledStep):
        undo = "cancel" if node.kind is StepKind.TCC else (
            "compensate" if node.reversible else "cannot be undone")
        lines.append(f'{pad}state "{_label(node.name)} ({node.kind.value}: '
                     f'{node.participant}.{node.action}; {undo})" as {nid}')
        return nid
    if isinstance(node, CompiledSleep):
        what = (f"{node.duration}" if isinstance(node.duration, timedelta)
                else f"until {node.until.isoformat()}" if isinstance(node.until, datetime)
                else "computed wake-up")
        lines.append(f'{pad}state "{_label(node.name)} (sleep: {what}; durable timer)" as {nid}')
        return nid
    if isinstance(node, CompiledWait):
        limit = f"timeout {node.timeout}: {node.on_timeout}" if node.timeout else "no timeout"
        lines.append(f'{pad}state "{_label(node.name)} (wait for signal {node.signal}; '
                     f'{limit})" as {nid}')
        return nid
    if isinstance(node, CompiledTask):
        lines.append(f'{pad}state "{_label(node.name)} ({task_summary(node)})" as {nid}')
        return nid
    title = f"{_KIND_LABEL[node.kind.value]} {node.name}"
    if node.kind is GroupKind.FOREACH:
        title += f" (at most {node.max_concurrency or 'all'} at once, <= {node.max_items})"
    if node.kind is GroupKind.RACE:
        title += f" ({node.quorum} of {len(node.children)} win; losers undone)"
    title += _flow_title(node)
    if node.timeout is not None:
        title += f" ({_timeout(node)[2:]})"
    lines.append(f'{pad}state "{_label(title)}" as {nid} {{')
    inner = pad + "    "
    if node.kind is GroupKind.CATCH:
        _draw_catch(lines, node, inner)
    elif node.kind in (GroupKind.SEQUENCE, GroupKind.FOREACH, GroupKind.LOOP):
        body = node if node.kind is GroupKind.SEQUENCE else node.children[0]
        assert isinstance(body, CompiledGroup)
        first, last = _chain(lines, body.children, inner)
        lines.append(f"{inner}[*] --> {first}")
        if node.kind is GroupKind.LOOP:
            last = _loop_back(lines, node, first, last, inner)
        lines.append(f"{inner}{last} --> [*]"
                     + (": until true" if node.kind is GroupKind.LOOP else ""))
    elif node.kind is GroupKind.CHOICE:
        pick = _node_id(node.name + "_choice")
        lines.append(f"{inner}state {pick} <<choice>>")
        lines.append(f"{inner}[*] --> {pick}")
        for guard, branch in zip(node.guards, node.children, strict=True):
            bid = _draw(lines, branch, inner)
            lines.append(f"{inner}{pick} --> {bid}: {'otherwise' if guard is None else 'guard'}")
            lines.append(f"{inner}{bid} --> [*]")
        if node.guards[-1] is not None:
            lines.append(f"{inner}{pick} --> [*]: no guard true")
    else:
        for index, branch in enumerate(node.children):
            if index:
                lines.append(f"{inner}--")
            bid = _draw(lines, branch, inner)
            lines.append(f"{inner}[*] --> {bid}")
            lines.append(f"{inner}{bid} --> [*]")
    lines.append(f"{pad}}}")
    return nid


def _flow_title(node: CompiledGroup) -> str:
    """What a catch catches and keeps, how often a loop may run."""
    if node.kind is GroupKind.CATCH:
        undo = "kept" if node.keep else "undone first"
        return f" (on {', '.join(node.catches)}; failed body {undo})"
    if node.kind is GroupKind.LOOP:
        return f" (until its condition holds, <= {node.max_items} iterations)"
    return ""


def _loop_back(lines: list[str], node: CompiledGroup, first: str, last: str, pad: str
               ) -> str:
    """A loop's condition after its body: done, or the body again."""
    until = _node_id(node.name + "_until")
    lines.append(f"{pad}state {until} <<choice>>")
    lines.append(f"{pad}{last} --> {until}")
    lines.append(f"{pad}{until} --> {first}: until false (next iteration)")
    return until


def _draw_catch(lines: list[str], node: CompiledGroup, pad: str) -> None:
    """The body's chain, and the fallback's beside it, entered when the body fails with a
    caught kind."""
    body, fallback = node.children
    assert isinstance(body, CompiledGroup) and isinstance(fallback, CompiledGroup)
    first, last = _chain(lines, body.children, pad)
    lines.append(f"{pad}[*] --> {first}")
    lines.append(f"{pad}{last} --> [*]")
    caught = _node_id(node.name + "_caught")
    lines.append(f'{pad}state "caught: {_label(", ".join(node.catches))}" as {caught}')
    for kid in body.children:
        lines.append(f"{pad}{_node_id(kid.name)} --> {caught}: failed")
    start, end = _chain(lines, fallback.children, pad)
    lines.append(f"{pad}{caught} --> {start}: " + ("body kept" if node.keep else "body undone"))
    lines.append(f"{pad}{end} --> [*]")


def _timeout(node: CompiledGroup | CompiledStep) -> str:
    """``; timeout 30m: fail`` for a node with a timeout of its own, else nothing."""
    if node.timeout is None:
        return ""
    return f"; timeout {human(node.timeout)}: {node.on_timeout}"


def _timeout_edges(definition: CompiledSaga, rollback: str) -> list[str]:
    """The saga's own timeout, from each top-level node, and each node's ``dead`` timeout."""
    out: list[str] = []
    dead = _node_id("dead")
    if definition.timeout is not None:
        target = dead if definition.on_timeout == "dead" else rollback
        label = f"saga timed out after {human(definition.timeout)}"
        out += [f"    {_node_id(n.name)} --> {target}: {label}"
                for n in definition.root.children]
    for node in walk(definition.root):
        if (isinstance(node, CompiledGroup | CompiledStep) and node.timeout is not None
                and node.on_timeout == "dead"):
            out.append(f"    {_node_id(node.name)} --> {dead}: timed out after "
                       f"{human(node.timeout)}")
    return out


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
    parser = argparse.ArgumentParser(prog="sagaflow-coordinator diagram",
                                     description="Draw a saga's state machine.")
    parser.add_argument("--version", action="version",
                        version=version_line("sagaflow-coordinator diagram"))
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
