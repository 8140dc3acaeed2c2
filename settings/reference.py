"""The settings reference: every default with its one-line description.

The settings table in docs/settings.md is this module's output
(``crawlcluster settings --markdown``); a test keeps the two equal.
"""

import inspect
import json
import re

from settings import defaults, documents, observability
from settings.loader import default_settings

_ASSIGNMENT = re.compile(r"^(CRAWLCLUSTER_\w+)\s*(:[^=]*)?=")


def setting_descriptions() -> dict[str, str]:
    """Map each setting name to the comment line(s) right above it in defaults.py (and
    the modules it imports its settings from)."""
    descriptions = {}
    comment: list[str] = []
    source = "\n".join(inspect.getsource(module) for module in (defaults, observability, documents))
    for line in source.splitlines():
        stripped = line.strip()
        match = _ASSIGNMENT.match(line)
        if match:
            descriptions[match.group(1)] = " ".join(comment)
            comment = []
        elif stripped.startswith("# ") and not stripped.startswith("# ---"):
            comment.append(stripped[2:])
        else:
            comment = []
    return descriptions


def settings_table() -> str:
    """The Markdown table of every prefixed setting, default and meaning."""
    descriptions = setting_descriptions()
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for name, value in default_settings().items():
        rows.append(f"| `{name}` | `{json.dumps(value)}` | {descriptions.get(name, '')} |")
    return "\n".join(rows)
