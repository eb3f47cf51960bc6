"""Writing the flat TOML config files the supervisor and the test kit hand to Magnetar's processes."""

from __future__ import annotations

import json
from typing import Any, Mapping

__all__ = ["dumps_toml"]


def dumps_toml(table: Mapping[str, Any]) -> str:
    """Flat TOML (scalars and arrays of scalars), enough for the config files the supervisor writes."""
    return "".join(f"{key} = {_toml_value(value)}\n" for key, value in table.items())


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")
