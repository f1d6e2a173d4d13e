"""The format's JSON Schema, as published in ``docs/saga-definition.schema.json``.

Generated from the models of :mod:`coordinator.definitions.format`, so the file editors use
(a ``# yaml-language-server: $schema=...`` line, or a JSON ``$schema``) cannot drift from what
the loader accepts: a test compares the two. Regenerate the file with
``sagaflow-coordinator validate --schema > docs/saga-definition.schema.json``.
"""

from __future__ import annotations

import json
from typing import Any

from coordinator.definitions.format import FORMAT, Definition

__all__ = ["definition_schema", "definition_schema_text"]


def definition_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a saga definition."""
    schema = Definition.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"sagaflow saga definition ({FORMAT})", **schema,
            "description": "A saga declared as data; see docs/declarative-sagas.md."}


def definition_schema_text() -> str:
    return json.dumps(definition_schema(), indent=2, sort_keys=True) + "\n"
