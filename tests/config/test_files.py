"""Config files and Envoy routes: unreadable, non-UTF-8, invalid or non-mapping files are
config errors; routes name known profiles.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sidecar.config import (
    SidecarConfig,
    config_from_mapping,
    load_config,
)
from sidecar.errors import ConfigError
from tests.config.support import config_error, write


def test_envoy_route_naming_an_unknown_profile_is_an_error() -> None:
    message = config_error({"envoy": {"routes": [{"prefix": "/v1", "profile": "ghost"}]}})
    assert "envoy route '/v1' names unknown profile 'ghost'" in message


def test_envoy_routes_may_name_known_profiles_default_or_none() -> None:
    config = config_from_mapping(
        {
            "profiles": {"ro": {"extraction": {"enabled": False}}},
            "envoy": {
                "routes": [
                    {"prefix": "/ro/", "rewrite": "/", "profile": "ro"},
                    {"prefix": "/health", "profile": None},
                    {"prefix": "/"},
                ]
            },
        },
        env={},
    )
    routes = config.envoy.routes
    assert [r.profile for r in routes] == ["ro", None, "default"]
    assert routes[0].rewrite == "/"


def test_default_envoy_route_uses_the_default_profile() -> None:
    routes = SidecarConfig().envoy.routes
    assert len(routes) == 1
    assert routes[0].prefix == "/"
    assert routes[0].profile == "default"


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_non_mapping_top_level_is_an_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match="the top level must be a mapping"):
        load_config(write(tmp_path, text), env={})


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=r"cannot read config .*nope\.yaml"):
        load_config(missing, env={})


def test_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path, env={})


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, "server: {port: 1}\n")
    path.chmod(0)
    try:
        with pytest.raises(ConfigError, match="cannot read config"):
            load_config(path, env={})
    finally:
        path.chmod(0o600)


def test_non_utf8_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("llm: {model: 'caf\xe9'}\n".encode("latin-1"))
    with pytest.raises(ConfigError):
        load_config(path, env={})


@pytest.mark.parametrize(
    "text",
    [
        "server: {port: 1\n",
        "server:\n  port: 1\n port: 2\n",
        "key: [unclosed\n",
        "a: b: c\n",
        "key: 'unterminated\n",
        "a: *undefined\n",
        "@reserved\n",
    ],
)
def test_invalid_yaml_is_a_config_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(write(tmp_path, text), env={})


def test_yaml_python_tags_are_not_executed(tmp_path: Path) -> None:
    path = write(tmp_path, "server: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(path, env={})
