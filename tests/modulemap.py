"""The module map of docs/architecture.md, made from the tree: every module and data
directory of the five packages, with the first sentence of its docstring.

``python -m tests.modulemap`` prints it; tests/test_layout.py checks the page has it.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("settings", "master", "message_processing", "crawler", "manager")
LONGEST = 120       # characters of a docstring's first sentence kept in the map
# Directories without an ``__init__.py``, and what they hold.
PLAIN_DIRS = {
    "crawler/data": "the user agents a crawl may pick from (``user_agents.txt``)",
    "master/schemas": "the crawl rules' JSON Schemas, one per spider type",
    "message_processing/schemas": "one JSON Schema per request type",
    "manager/ui": "the web UI: its page, script and styles",
    "manager/local": "running everything on one machine, imported by no role",
}


def summary(path: Path) -> str:
    """The first sentence of a module's docstring, cut at its first colon when long."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = " ".join(doc.split("\n\n")[0].split()).split(". ")[0].rstrip(".:")
    if len(first) > LONGEST and ": " in first[:LONGEST]:
        first = first[:first.index(": ")]
    return first if len(first) <= LONGEST else first[:LONGEST - 1].rstrip() + "…"


def entries(root: Path = ROOT) -> list[tuple[str, str]]:
    """``[(path, what it is)]``: packages by their ``__init__``'s docstring, modules by
    theirs, other directories by ``PLAIN_DIRS`` (empty if it does not say); in path
    order."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*")):
            name = path.relative_to(root).as_posix()
            if "__pycache__" in name or "/tests/" in name:
                continue
            if path.is_dir() and (path / "__init__.py").exists():
                found.append((name + "/", summary(path / "__init__.py")))
            elif path.is_dir():
                found.append((name + "/", PLAIN_DIRS.get(name, "")))
            elif path.suffix == ".py" and path.name != "__init__.py":
                found.append((name, summary(path)))
    return found


def table(root: Path = ROOT) -> str:
    rows = [f"| `{name}` | {what} |" for name, what in entries(root)]
    return "\n".join(["| module | what it does |", "|---|---|", *rows])


if __name__ == "__main__":
    print(table())
