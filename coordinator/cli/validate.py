"""``sagaflow-coordinator validate FILE...``: check saga definitions without a database.

Every problem of every file is printed at once, one line each with its path in the file
(``examples/order.yaml: steps[1].retry.max_attempts: ...``); the exit code is 0 when every
file is valid, 1 otherwise, 2 for a usage error. ``--schema`` prints the format's JSON Schema.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from coordinator.definitions import InvalidDefinition, load_saga_file
from coordinator.definitions.published import definition_schema_text
from coordinator.engine.compiled import compile_saga
from participant_sdk.version import version_line

__all__ = ["main_validate"]


def main_validate(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sagaflow-coordinator validate",
                                     description="Check saga definition files (JSON or YAML).")
    parser.add_argument("--version", action="version",
                        version=version_line("sagaflow-coordinator validate"))
    parser.add_argument("files", nargs="*", metavar="FILE", help="definition files")
    parser.add_argument("--schema", action="store_true",
                        help="print the definition format's JSON Schema and exit")
    args = parser.parse_args(argv)
    stream = out if out is not None else sys.stdout
    if args.schema:
        stream.write(definition_schema_text())
        return 0
    if not args.files:
        parser.error("give at least one FILE (or --schema)")
    failed = False
    for file in args.files:
        try:
            cls = load_saga_file(file)
            compiled = compile_saga(cls)
        except InvalidDefinition as exc:
            failed = True
            for problem in exc.problems:
                stream.write(f"{file}: {problem}\n")
            continue
        stream.write(f"{file}: ok: {compiled.name} v{compiled.version}, "
                     f"{len(compiled.order) - 1} nodes, {len(compiled.states)} states\n")
    return 1 if failed else 0
