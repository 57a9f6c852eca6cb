"""Checks of the source tree that ruff and mypy do not make (`make lint` runs them):
import circles, the hot path's imports, module length. A development tool: not installed."""
