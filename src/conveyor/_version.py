"""Conveyor's version: the one place it is written (pyproject.toml reads it from here,
``conveyor.__version__`` and ``conveyor --version`` show it). CHANGELOG.md says what
each version brings."""

__version__ = "0.1.0"
