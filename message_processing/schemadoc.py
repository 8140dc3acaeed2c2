"""The request reference (docs/request-schemas.md), made from the JSON Schemas.

One section per request type: its title, then every field with its type, whether
it is required, its limits and default, and its description. ``python -m
message_processing.schemadoc`` prints the page; a test checks the page has it.
"""

import json

from message_processing.requests import SCHEMA_DIR, TYPES

LIMITS = (("minLength", "length ≥ {}"), ("maxLength", "length ≤ {}"), ("minimum", "≥ {}"),
          ("exclusiveMinimum", "> {}"), ("maximum", "≤ {}"), ("pattern", "matches `{}`"),
          ("minItems", "at least {} items"), ("maxItems", "at most {} items"))
HEADER = """# Request schemas

Made from `message_processing/schemas/*.json` by `python -m message_processing.schemadoc`
(a test fails when they differ). A request is routed by its `type` (scrapy-cluster's
requests, which have none, by their required fields: [requests](requests.md)); a field not
listed is refused, and a missing field with a default gets it."""


def field_type(spec: dict) -> str:
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "enum" in spec:
        return " \\| ".join(f"`{json.dumps(value)}`" for value in spec["enum"])
    kinds = spec.get("type", "any")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "array" in kinds and "items" in spec:
        kinds = [f"array of {field_type(spec['items'])}" if kind == "array" else kind
                 for kind in kinds]
    return " or ".join(kinds)


def field_notes(spec: dict) -> str:
    notes = [template.format(spec[name]) for name, template in LIMITS if name in spec]
    if "default" in spec:
        notes.append(f"default `{json.dumps(spec['default'])}`")
    if "description" in spec:
        notes.append(spec["description"])
    return "; ".join(notes)


def conditions(schema: dict) -> list[str]:
    """The schema's ``if``/``then`` rules, as sentences."""
    if "if" not in schema:
        return []
    when = ", ".join(f"`{name}` is `{json.dumps(spec['const'])}`"
                     for name, spec in schema["if"]["properties"].items())
    needed = ", ".join(f"`{name}`" for name in schema["then"].get("required", []))
    return [f"When {when}, {needed} is required too."]


def schema_section(request_type: str) -> str:
    schema = json.loads((SCHEMA_DIR / f"{request_type}.json").read_text(encoding="utf-8"))
    required = set(schema.get("required", []))
    lines = [f"## `{request_type}`: {schema['title']}", "",
             "| field | type | required | limits, default, meaning |", "|---|---|---|---|"]
    for name, spec in schema["properties"].items():
        notes = field_notes(spec).replace("|", "\\|")
        lines.append(f"| `{name}` | {field_type(spec)} | {'yes' if name in required else ''}"
                     f" | {notes} |")
    extra = conditions(schema)
    if schema.get("additionalProperties", True) is not False:
        extra.append("Fields not listed are accepted and kept.")
    return "\n".join([*lines, "", *extra] if extra else lines)


def schemas_page() -> str:
    return "\n\n".join([HEADER, *(schema_section(name) for name in TYPES)]) + "\n"


if __name__ == "__main__":
    print(schemas_page(), end="")
