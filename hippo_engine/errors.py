"""The engine's own error types that several floors raise (re-exported where users import them)."""
from __future__ import annotations


class ConfigError(ValueError):
    """Raised when a configuration value is invalid."""
