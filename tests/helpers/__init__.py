"""Shared test helpers: import them as ``from tests.helpers.<module> import ...``."""
