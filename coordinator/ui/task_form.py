"""A task's form as HTML fields, generated from its JSON Schema, and a posted HTML form read
back into the form's data.

Strings are text inputs (a textarea past :data:`LONG_TEXT` characters of ``maxLength``),
numbers and integers number inputs, booleans checkboxes, enums (``Literal`` or ``Enum``)
selects. Anything else (lists, nested models) is a textarea holding JSON. The values a
person typed survive a refused form, and each field carries its own error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

__all__ = ["LONG_TEXT", "FormField", "field_errors", "fields_of", "read_form"]

#: A string field allowing more than this many characters is a textarea.
LONG_TEXT = 200
_PREFIX = "f."


@dataclass
class FormField:
    """One field as the template draws it (``input`` is the HTML ``name``)."""

    name: str
    label: str
    kind: str  # text, textarea, number, integer, checkbox, select, json
    required: bool
    value: Any = None
    options: list[str] = field(default_factory=list)
    help: str = ""
    error: str = ""
    max_length: int | None = None

    @property
    def input(self) -> str:
        return _PREFIX + self.name


def _resolve(schema: Mapping[str, Any], prop: Mapping[str, Any]) -> dict[str, Any]:
    """The property with a ``$ref`` (an Enum) or an ``anyOf [..., null]`` (an optional) opened."""
    out = dict(prop)
    ref = out.pop("$ref", None)
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        out = {**(schema.get("$defs") or {}).get(ref.rsplit("/", 1)[1], {}), **out}
    options = [o for o in out.get("anyOf") or () if o.get("type") != "null"]
    if len(options) == 1:
        out = {**_resolve(schema, options[0]), **{k: v for k, v in out.items() if k != "anyOf"}}
    return out


def _kind(prop: Mapping[str, Any]) -> str:
    if prop.get("enum"):
        return "select"
    kind = prop.get("type")
    if kind == "string":
        return "textarea" if (prop.get("maxLength") or 10_000) > LONG_TEXT else "text"
    if kind in ("number", "integer"):
        return str(kind)
    if kind == "boolean":
        return "checkbox"
    return "json"


def fields_of(schema: Mapping[str, Any] | None, values: Mapping[str, Any] | None = None,
              errors: Mapping[str, str] | None = None) -> list[FormField]:
    """The form's fields in declaration order, filled with ``values`` (or the defaults)."""
    if not schema:
        return []
    required = set(schema.get("required") or ())
    out = []
    for name, raw in (schema.get("properties") or {}).items():
        prop = _resolve(schema, raw)
        kind = _kind(prop)
        value = (values or {}).get(name, prop.get("default"))
        if kind == "json" and value is not None and not isinstance(value, str):
            value = json.dumps(value)
        out.append(FormField(
            name=name, label=str(prop.get("title") or name.replace("_", " ").capitalize()),
            kind=kind, required=name in required, value=value,
            options=[str(o) for o in prop.get("enum") or ()],
            help=str(prop.get("description") or ""), error=(errors or {}).get(name, ""),
            max_length=prop.get("maxLength")))
    return out


def read_form(schema: Mapping[str, Any] | None, posted: Mapping[str, str]
              ) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """The form's data from a posted HTML form: ``(data, as typed, errors)``. A blank
    optional field is left out (its default applies); a value that is not of its field's
    type is an error of that field."""
    data: dict[str, Any] = {}
    typed: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for f in fields_of(schema):
        raw = posted.get(f.input)
        if f.kind == "checkbox":
            data[f.name] = typed[f.name] = raw is not None
            continue
        typed[f.name] = raw or ""
        if raw is None or raw == "":
            continue
        try:
            data[f.name] = _parse(f.kind, raw)
        except ValueError as exc:
            errors[f.name] = str(exc)
    return data, typed, errors


def _parse(kind: str, raw: str) -> Any:
    if kind == "integer":
        try:
            return int(raw)
        except ValueError:
            raise ValueError("must be a whole number") from None
    if kind == "number":
        try:
            return float(raw)
        except ValueError:
            raise ValueError("must be a number") from None
    if kind == "json":
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            raise ValueError("must be JSON") from None
    return raw


def field_errors(exc: ValidationError) -> dict[str, str]:
    """The model's refusals by top-level field (a problem of the whole form under ``""``)."""
    out: dict[str, str] = {}
    for e in exc.errors(include_url=False):
        loc = e.get("loc") or ()
        name = str(loc[0]) if loc else ""
        message = str(e.get("msg"))
        out[name] = f"{out[name]}; {message}" if name in out else message
    return out
