"""JSON Schema checking for requests and rules: compiled once, fast on valid input.

Most input is valid, so it is checked by a compiled validator (fastjsonschema,
about 20x faster). Only input the compiled validator rejects is checked again
by jsonschema, whose first error names the exact field and reason. Our
schemas keep to keywords both libraries read the same way (``$defs``/``$ref``,
``const``, ``if``/``then``); tests/settings/test_jsonschemas.py keeps them in
agreement on every valid and malformed example the tests know.
"""

import json
from pathlib import Path
from typing import Any


class SchemaChecker:
    """One schema, compiled twice: fast acceptance, exact errors."""

    def __init__(self, schema: dict[str, Any]):
        import fastjsonschema
        from jsonschema import Draft202012Validator

        Draft202012Validator.check_schema(schema)
        self.schema = schema
        self.full = Draft202012Validator(schema)
        draft7 = dict(schema, **{"$schema": "http://json-schema.org/draft-07/schema#"})
        self._fast = fastjsonschema.compile(draft7, use_default=False)
        self._fast_error = fastjsonschema.JsonSchemaValueException

    @classmethod
    def from_file(cls, path: str | Path) -> "SchemaChecker":
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    def first_error(self, instance: object) -> Any:
        """The first error (jsonschema's ValidationError, by path), or None if valid."""
        try:
            self._fast(instance)
            return None
        except self._fast_error:
            pass
        errors = sorted(self.full.iter_errors(instance), key=lambda e: list(e.path))
        return errors[0] if errors else None

    def fast_accepts(self, instance: object) -> bool:
        """What the compiled validator alone says (the agreement test)."""
        try:
            self._fast(instance)
            return True
        except self._fast_error:
            return False

    def defaults(self) -> dict[str, Any]:
        """``{property: default}`` of the top-level properties."""
        return {name: spec["default"] for name, spec in self.schema.get("properties", {}).items()
                if "default" in spec}
