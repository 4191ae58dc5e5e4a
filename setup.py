"""A shim for ``python setup.py develop`` habits: the package's metadata is in pyproject.toml."""

from setuptools import setup

setup()
