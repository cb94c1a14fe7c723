"""Reading a configuration: YAML parsing, environment overrides and one line per
validation error, every failure a :class:`~sidecar.errors.ConfigError`.
"""

from __future__ import annotations

import copy
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import ValidationError

from sidecar.config.request import Profile
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

#: Settings the ``serve`` supervisor gives the processes it starts
#: (:func:`sidecar.runtime.workers.worker_config`, the shared encoder's socket), with
#: ``model_copy``, which does not validate. They are set by the supervisor, not read
#: from the user's file: a file that gives one a value is an error, and neither the
#: reference nor ``sidecar config check`` shows them.
SUPERVISOR_SETTINGS: tuple[str, ...] = (
    "store.gate_dir",
    "store.lite_file",
    "embedding.service_socket",
    "cache.relay_socket",
    "cache.relay_peers",
)


def _supervisor_settings_in(doc: Mapping[str, Any]) -> list[str]:
    """An error line for each of :data:`SUPERVISOR_SETTINGS` that ``doc`` sets to
    anything but its default (which is what ``model_dump`` writes for it)."""
    errors = []
    for dotted in SUPERVISOR_SETTINGS:
        section, key = dotted.split(".")
        given = doc.get(section)
        if not isinstance(given, Mapping) or key not in given:
            continue
        default = getattr(SidecarConfig.model_fields[section].default, key)
        if given[key] != default:
            errors.append(f"{dotted}: is set by the supervisor, not read from the config file")
    return errors


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
    """One line per error: ``path.to.field: message``; an unknown key says which
    known key it may have meant, and a per-route setting at the top level that it
    belongs under ``defaults:`` (or a profile)."""
    lines = []
    for err in exc.errors():
        path = ".".join(str(part) for part in err["loc"]) or "<root>"
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown key" + _unknown_key_hint(tuple(err["loc"]))
        lines.append(f"{path}: {message}")
    return "\n".join(lines)


def _unknown_key_hint(loc: tuple[str | int, ...]) -> str:
    """ " (did you mean 'threshold'?)" for a misspelt key, or where a key belongs."""
    key = str(loc[-1])
    known = _keys_at(loc[:-1])
    if len(loc) == 1 and key in Profile.model_fields:
        return f" here: {key} is per route, put it under defaults: (or a profile)"
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _keys_at(loc: tuple[str | int, ...]) -> set[str]:
    """The keys the model at ``loc`` (a path into :class:`SidecarConfig`) takes."""
    model: Any = SidecarConfig
    parts = list(loc)
    while parts:
        fields = getattr(model, "model_fields", None)
        if fields is None:
            return set()
        part = parts.pop(0)
        found = next((f for name, f in fields.items() if part in (name, f.alias)), None)
        if found is None:
            return set()
        model = _model_in(found.annotation)
        if _is_container(found.annotation) and parts:
            parts.pop(0)  # a profile's name, a token's index
    fields = getattr(model, "model_fields", None) or {}
    return {f.alias or name for name, f in fields.items()}


def _model_in(annotation: Any) -> Any:
    """The pydantic model an annotation holds (itself, in a dict's values, a tuple,
    an Optional); None when it holds none."""
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation
    for arg in reversed(get_args(annotation)):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _is_container(annotation: Any) -> bool:
    """Whether values under the annotation are keyed (a dict) or indexed (a tuple)."""
    if get_origin(annotation) in (dict, tuple, list):
        return True
    return any(_is_container(arg) for arg in get_args(annotation))


def config_from_mapping(
    data: Mapping[str, Any] | None, env: Mapping[str, str] | None = None
) -> SidecarConfig:
    """Validate a parsed config document, applying :data:`ENV_OVERRIDES` from ``env``."""
    doc: dict[str, Any] = copy.deepcopy(dict(data or {}))
    for var, dotted in ENV_OVERRIDES.items():
        value = (env or {}).get(var)
        if value:
            _set_dotted(doc, dotted, value)
    supervised = _supervisor_settings_in(doc)
    try:
        config = SidecarConfig.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError("\n".join([*supervised, format_validation_error(exc)])) from exc
    if supervised:
        raise ConfigError("\n".join(supervised))
    return config


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
