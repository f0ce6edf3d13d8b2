"""Load the shared fixtures for every suite: ``tests/`` and each ``connectors/<name>/tests``."""

pytest_plugins = ["tests.fixtures"]
