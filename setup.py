"""The one installable distribution of crawlcluster: its metadata, dependencies, extras
and console script are in pyproject.toml."""

from setuptools import setup

setup()
