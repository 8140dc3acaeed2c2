"""The one installable distribution of crawlcluster: its metadata, dependencies and
extras are in pyproject.toml (PEP 621); this file stays for tools that look for it."""

from setuptools import setup

setup()
