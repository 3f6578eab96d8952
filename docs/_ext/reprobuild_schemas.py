"""Sphinx extension: JSON Schemas derived from reprobuild's typed records at build time.

``{reprobuild-schema} manifest`` renders the JSON Schema of the image manifest, derived from
the ``Manifest`` dataclass of the installed reprobuild (its fields and type hints), so a field
added, renamed or retyped in the code changes the page without anyone editing it.
``tests/unit/test_docs.py`` validates a real manifest against the same schema.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    Any: {},
}


def schema_of(tp: Any) -> dict[str, Any]:
    """The JSON Schema of a value of type ``tp`` as ``dataclasses.asdict`` writes it."""
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [schema_of(a) for a in args]}
    if origin in (tuple, list):
        return {"type": "array", "items": schema_of(args[0])}
    if origin is dict:
        value = schema_of(args[1])
        return {"type": "object", **({"additionalProperties": value} if value else {})}
    if dataclasses.is_dataclass(tp):
        return dataclass_schema(tp)
    raise TypeError(f"no JSON Schema for {tp!r}")


def dataclass_schema(cls: Any, optional: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``optional``: the fields a reader does without (default: those with a default)."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    if optional is None:
        optional = tuple(
            f.name
            for f in fields
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
    return {
        "type": "object",
        "properties": {f.name: schema_of(hints[f.name]) for f in fields},
        "required": [f.name for f in fields if f.name not in optional],
        "additionalProperties": False,
    }


def manifest_schema() -> dict[str, Any]:
    """The image manifest (``/opt/reprobuild/manifest.json``), as this reprobuild writes it and
    reads it: the fields older images may lack are not required."""
    from reprobuild.imaging import manifest

    optional = tuple(name for name in manifest._OPTIONAL if name != "distributions")
    schema = dataclass_schema(manifest.Manifest, optional)
    schema["properties"]["schema_version"] = {"const": manifest.SCHEMA_VERSION}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "reprobuild image manifest",
        **schema,
    }


SCHEMAS = {"manifest": manifest_schema}


def setup(app: Any) -> dict[str, Any]:
    # docutils is imported here, not at the top: tests/unit/test_docs.py uses the schema
    # functions above in environments without the docs extra.
    from docutils import nodes
    from docutils.parsers.rst import Directive

    class SchemaDirective(Directive):
        required_arguments = 1
        has_content = False

        def run(self) -> list[nodes.Node]:
            name = self.arguments[0]
            if name not in SCHEMAS:
                raise self.error(f"unknown schema {name!r}; known: {', '.join(SCHEMAS)}")
            text = json.dumps(SCHEMAS[name](), indent=2)
            block = nodes.literal_block(text, text)
            block["language"] = "json"
            return [block]

    app.add_directive("reprobuild-schema", SchemaDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
