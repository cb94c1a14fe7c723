"""Reading a configuration: YAML parsing, environment overrides and one line per
validation error, every failure a :class:`~sidecar.errors.ConfigError`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sidecar.config.root import SidecarConfig
from sidecar.errors import ConfigError

#: Environment variables that override file settings: variable -> dotted config path.
ENV_OVERRIDES: dict[str, str] = {
    "MILVUS_URI": "store.uri",
    "MILVUS_TOKEN": "store.token",
    "SIDECAR_LLM_BASE_URL": "llm.base_url",
    "SIDECAR_LLM_API_KEY": "llm.api_key",
    "SIDECAR_LLM_MODEL": "llm.model",
    "SIDECAR_ADMIN_TOKEN": "admin.token",
}


def _set_dotted(data: dict[str, Any], dotted: str, value: str) -> None:
    node = data
    *parents, leaf = dotted.split(".")
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[leaf] = value


def format_validation_error(exc: ValidationError) -> str:
    """One line per error: ``path.to.field: message``."""
    lines = []
    for err in exc.errors():
        path = ".".join(str(part) for part in err["loc"]) or "<root>"
        lines.append(f"{path}: {err['msg']}")
    return "\n".join(lines)


def config_from_mapping(
    data: Mapping[str, Any] | None, env: Mapping[str, str] | None = None
) -> SidecarConfig:
    """Validate a parsed config document, applying :data:`ENV_OVERRIDES` from ``env``."""
    doc: dict[str, Any] = copy.deepcopy(dict(data or {}))
    for var, dotted in ENV_OVERRIDES.items():
        value = (env or {}).get(var)
        if value:
            _set_dotted(doc, dotted, value)
    try:
        return SidecarConfig.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from exc


def load_config(path: str | Path | None, env: Mapping[str, str] | None = None) -> SidecarConfig:
    """Read and validate a YAML config file (``None``: all defaults).

    ``env`` defaults to the process environment.
    """
    data: Any = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})") from exc
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: the top level must be a mapping")
    return config_from_mapping(data, os.environ if env is None else env)
