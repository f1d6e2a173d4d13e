"""The input model (and a signal's or a form's payload) as JSON Schema: a small subset,
turned into a pydantic model when a definition is loaded, and written from one on export.

Supported: ``type`` (object, string, integer, number, boolean, array, null), ``properties``,
``required``, ``additionalProperties`` (true, or a schema: a map of that), ``items``,
``minItems``/``maxItems``, ``minLength``/``maxLength``/``pattern``, ``minimum``/``maximum``/
``exclusiveMinimum``/``exclusiveMaximum``, ``enum``, ``anyOf`` of one schema and
``{"type": "null"}`` (an optional value), ``default``, ``title``, ``description``. Anything
else is refused by name (an unknown keyword is a typo or a feature the engine would silently
not enforce). A property that is not required and has no ``default`` defaults to an empty
object or list for those types, else to null.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

__all__ = ["JsonSchema", "model_from_schema", "schema_from_model"]

_Scalar = str | int | float | bool | None


class JsonSchema(BaseModel):
    """The JSON Schema keywords a definition may use (others are refused)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    type: Literal["object", "string", "integer", "number", "boolean", "array", "null"] | None \
        = None
    title: str | None = Field(default=None, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    default: Any = None
    properties: dict[str, JsonSchema] | None = Field(default=None, max_length=500)
    required: list[str] = Field(default_factory=list, max_length=500)
    additionalProperties: bool | JsonSchema | None = None
    items: JsonSchema | None = None
    minItems: int | None = Field(default=None, ge=0)
    maxItems: int | None = Field(default=None, ge=0)
    minLength: int | None = Field(default=None, ge=0)
    maxLength: int | None = Field(default=None, ge=0)
    pattern: str | None = Field(default=None, max_length=500)
    minimum: int | float | None = None
    maximum: int | float | None = None
    exclusiveMinimum: int | float | None = None
    exclusiveMaximum: int | float | None = None
    enum: list[_Scalar] | None = Field(default=None, min_length=1, max_length=500)
    anyOf: list[JsonSchema] | None = Field(default=None, min_length=2, max_length=2)


def model_from_schema(schema: JsonSchema, name: str) -> type[BaseModel]:
    """A pydantic model of an object schema; ``ValueError`` naming the path if unsupported."""
    if schema.type != "object" or schema.properties is None:
        raise ValueError("must be an object schema with properties")
    return _model(schema, schema.title or name, name)


def _model(schema: JsonSchema, title: str, at: str) -> type[BaseModel]:
    properties = schema.properties or {}
    unknown = [r for r in schema.required if r not in properties]
    if unknown:
        raise ValueError(f"{at}: required names no property: {', '.join(unknown)}")
    fields: dict[str, Any] = {}
    for prop, sub in properties.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,99}", prop) or prop.startswith("model_"):
            raise ValueError(f"{at}.properties: {prop!r} is not a usable property name")
        annotation = _annotation(sub, f"{at}.properties.{prop}")
        fields[prop] = (annotation, _field(sub, prop in schema.required))
    config = ConfigDict(extra="forbid" if schema.additionalProperties is False else "ignore")
    return create_model(title, __config__=config, __doc__=schema.description,
                        **fields)


def _field(schema: JsonSchema, required: bool) -> Any:
    text = schema.description
    if required:
        return Field(description=text)
    if "default" in schema.model_fields_set:
        return Field(default=schema.default, description=text)
    if schema.type in ("object", "array") and schema.anyOf is None:
        return Field(default_factory=dict if schema.type == "object" else list,
                     description=text)
    return Field(default=None, description=text)


def _annotation(schema: JsonSchema, at: str) -> Any:
    if schema.anyOf is not None:
        kinds = [s for s in schema.anyOf if s.type != "null"]
        if len(kinds) != 1 or schema.type is not None:
            raise ValueError(f"{at}: anyOf must be one schema and {{'type': 'null'}}")
        return Optional[_annotation(kinds[0], at)]  # noqa: UP045 (a runtime-built type)
    constraints = _constraints(schema, at)
    if schema.enum is not None:
        if constraints or schema.type not in (None, "string", "integer", "number", "boolean"):
            raise ValueError(f"{at}: enum takes a scalar type and no other constraint")
        return Literal[tuple(schema.enum)]
    base: Any
    if schema.type == "object":
        if schema.properties is not None:
            return _model(schema, schema.title or at.rsplit(".", 1)[-1].capitalize(), at)
        extra = schema.additionalProperties
        value = _annotation(extra, f"{at}.additionalProperties") \
            if isinstance(extra, JsonSchema) else Any
        base = dict[str, value]  # type: ignore[valid-type]
    elif schema.type == "array":
        item = Any if schema.items is None else _annotation(schema.items, f"{at}.items")
        base = list[item]  # type: ignore[valid-type]
    else:
        base = {"string": str, "integer": int, "number": float, "boolean": bool,
                "null": None, None: Any}[schema.type]
    return Annotated[base, Field(**constraints)] if constraints else base


#: The type each constraint keyword belongs to (a constraint on another type is a mistake).
_CONSTRAINT_TYPES = {"minLength": ("string",), "maxLength": ("string",), "pattern": ("string",),
                     "minItems": ("array",), "maxItems": ("array",),
                     **{k: ("integer", "number") for k in ("minimum", "maximum",
                                                            "exclusiveMinimum",
                                                            "exclusiveMaximum")}}


def _constraints(schema: JsonSchema, at: str) -> dict[str, Any]:
    for keyword, types in _CONSTRAINT_TYPES.items():
        if getattr(schema, keyword) is not None and schema.type not in types:
            raise ValueError(f"{at}: {keyword} needs type {' or '.join(types)}, "
                             f"not {schema.type or 'none'}")
    pairs = (("minLength", "min_length"), ("maxLength", "max_length"), ("pattern", "pattern"),
             ("minItems", "min_length"), ("maxItems", "max_length"), ("minimum", "ge"),
             ("maximum", "le"), ("exclusiveMinimum", "gt"), ("exclusiveMaximum", "lt"))
    out = {}
    for keyword, name in pairs:
        value = getattr(schema, keyword)
        if value is not None:
            out[name] = value
    if "pattern" in out:
        try:
            re.compile(out["pattern"])
        except re.error as exc:
            raise ValueError(f"pattern {out['pattern']!r} is not a regular expression: "
                             f"{exc}") from None
    return out


def schema_from_model(model: type[BaseModel]) -> JsonSchema:
    """The subset schema of a pydantic model: ``$ref`` inlined, automatic titles dropped.

    ``ValueError`` names a keyword the subset lacks (the model cannot be declared as data)."""
    raw = model.model_json_schema()
    definitions = raw.pop("$defs", {})
    return JsonSchema.model_validate(_inline(raw, definitions, None))


def _inline(node: Any, definitions: dict[str, Any], prop: str | None) -> Any:
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = definitions[node["$ref"].rsplit("/", 1)[-1]]
        return _inline({**target, **{k: v for k, v in node.items() if k != "$ref"}},
                       definitions, None)
    out = dict(node)
    if prop is not None and out.get("title") == prop.replace("_", " ").title():
        del out["title"]
    if "properties" in out:
        out["properties"] = {k: _inline(v, definitions, k) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _inline(out[key], definitions, None)
    if "anyOf" in out:
        out["anyOf"] = [_inline(s, definitions, None) for s in out["anyOf"]]
    return out
