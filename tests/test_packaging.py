"""The package's metadata lives in pyproject.toml (PEP 621); setup.py only calls setup(),
so pip installs through the standard build backend, not the legacy path."""

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_metadata_is_in_pyproject_and_setup_py_holds_none():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    meta = project["project"]
    assert meta["name"] == "crawlcluster"
    assert meta["scripts"] == {"crawlcluster": "manager.cli:main"}
    assert set(meta["optional-dependencies"]) >= {"services", "parquet", "render", "test",
                                                  "bench"}
    calls = [node for node in ast.walk(ast.parse((ROOT / "setup.py").read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setup"]
    assert len(calls) == 1 and not calls[0].args and not calls[0].keywords


def test_every_role_package_and_its_data_is_packaged():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    included = tool["packages"]["find"]["include"]
    assert included == [f"{name}*" for name in ("crawler", "master", "message_processing",
                                                "manager", "settings")]
    data = tool["package-data"]
    for package, patterns in data.items():
        for pattern in patterns:
            assert list((ROOT / package).glob(pattern)), f"{package}/{pattern} matches nothing"
