"""Helpers the configuration tests share: writing a config file, the error a mapping
gives."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from sidecar.config import (
    config_from_mapping,
)
from sidecar.errors import ConfigError


def write(tmp_path: Path, text: str, name: str = "sidecar.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def config_error(data: Any, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_mapping(data, env=env or {})
    return str(info.value)
