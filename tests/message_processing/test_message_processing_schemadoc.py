"""docs/request-schemas.md is made from the request JSON Schemas."""

from pathlib import Path

from message_processing.requests import TYPES
from message_processing.schemadoc import field_type, schema_section, schemas_page

SCHEMAS_DOC = Path(__file__).resolve().parents[2] / "docs" / "request-schemas.md"


def test_the_documented_schemas_match_the_schema_files():
    assert SCHEMAS_DOC.read_text(encoding="utf-8") == schemas_page(), (
        "docs/request-schemas.md is stale: python -m message_processing.schemadoc "
        "> docs/request-schemas.md")


def test_every_request_type_has_a_section():
    page = schemas_page()
    assert all(f"## `{name}`:" in page for name in TYPES)


def test_fields_show_type_requirement_limits_and_default():
    section = schema_section("crawl")
    assert "| `maxdepth` | integer |  | ≥ 0; ≤ 1000; default `3` |" in section
    assert "| `url` | string | yes | length ≥ 8; length ≤ 4096 |" in section
    assert "When `action` is `\"rate\"`, `rate` is required too." in schema_section("site_config")


def test_field_types_read_as_json():
    assert field_type({"enum": ["a", 1]}) == '`"a"` \\| `1`'
    assert field_type({"type": ["string", "object"]}) == "string or object"
    assert field_type({"type": "array", "items": {"type": "string"}}) == "array of string"
