"""Defaults and route profiles: what an empty config gives, how profiles merge onto
defaults, profile names and lookups.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.config import (
    SidecarConfig,
    config_from_mapping,
    load_config,
)
from tests.config.support import config_error, write


def test_no_file_gives_all_defaults() -> None:
    config = load_config(None, env={})
    assert config == SidecarConfig()
    assert config.server.host == "127.0.0.1"
    assert config.server.port == 50051
    assert config.admin.token is None
    assert config.store.uri == "./data/memory.db"
    assert config.store.is_local_file
    assert config.llm.base_url is None
    assert not config.llm.configured
    assert config.defaults.retrieval.top_k == 5
    assert config.defaults.injection.mode == "append"
    assert config.defaults.paths == ("/v1/chat/completions",)
    assert config.profiles == {}
    assert config.profile_names() == ["default"]


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, ""), env={}) == SidecarConfig()
    assert load_config(write(tmp_path, "# only a comment\n"), env={}) == SidecarConfig()


def test_none_mapping_gives_defaults() -> None:
    assert config_from_mapping(None, env={}) == SidecarConfig()


def test_config_objects_are_frozen() -> None:
    config = SidecarConfig()
    with pytest.raises(ValueError, match="frozen"):
        config.server.port = 1  # type: ignore[misc]


def test_file_values_are_read(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        server: {port: 6000, host: 0.0.0.0}
        store: {uri: "http://milvus:19530", collection: mem_v1}
        llm: {base_url: "http://llm:8000/v1", model: qwen, timeout_s: 3}
        logging: {level: DEBUG, json: false}
        """,
    )
    config = load_config(path, env={})
    assert config.server.port == 6000
    assert config.server.host == "0.0.0.0"
    assert config.store.uri == "http://milvus:19530"
    assert not config.store.is_local_file
    assert config.store.collection == "mem_v1"
    assert config.llm.configured
    assert config.llm.model == "qwen"
    assert config.llm.timeout_s == 3.0
    assert config.logging.level == "DEBUG"
    assert config.logging.json_format is False


def test_profiles_are_partial_overrides_deep_merged_onto_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        defaults:
          retrieval: {top_k: 7, threshold: 0.3}
          injection: {mode: prepend}
          identity: {max_groups: 4}
        profiles:
          readonly:
            extraction: {enabled: false}
            retrieval: {top_k: 2}
          chat: {}
          bare:
        """,
    )
    config = load_config(path, env={})
    readonly = config.profiles["readonly"]
    assert readonly.extraction.enabled is False
    assert readonly.extraction.use_llm is True  # untouched sibling keeps its default
    assert readonly.retrieval.top_k == 2  # overridden
    assert readonly.retrieval.threshold == 0.3  # inherited from defaults, not Profile()
    assert readonly.injection.mode == "prepend"
    assert readonly.identity.max_groups == 4
    # An empty and a null profile are copies of defaults.
    assert config.profiles["chat"] == config.defaults
    assert config.profiles["bare"] == config.defaults
    assert config.defaults.retrieval.top_k == 7
    assert config.profile_names() == ["bare", "chat", "default", "readonly"]


def test_profile_lists_replace_rather_than_merge() -> None:
    config = config_from_mapping(
        {
            "defaults": {"paths": ["/v1/chat/completions", "/chat"]},
            "profiles": {"one": {"paths": ["/only"]}},
        },
        env={},
    )
    assert config.defaults.paths == ("/v1/chat/completions", "/chat")
    assert config.profiles["one"].paths == ("/only",)


def test_merge_does_not_mutate_the_input_document() -> None:
    data = {
        "defaults": {"retrieval": {"top_k": 3}},
        "profiles": {"p": {"retrieval": {"enabled": False}}},
    }
    snapshot = repr(data)
    config_from_mapping(data, env={})
    assert repr(data) == snapshot


def test_profile_lookup() -> None:
    config = config_from_mapping(
        {"defaults": {"retrieval": {"top_k": 9}}, "profiles": {"ro": {"fail_open": False}}},
        env={},
    )
    assert config.profile("default") is config.defaults
    assert config.profile("ro") is config.profiles["ro"]
    assert config.profile("ro").fail_open is False  # type: ignore[union-attr]
    assert config.profile("missing") is None
    assert config.profile("") is None


def test_a_profile_named_default_replaces_defaults_for_lookup() -> None:
    config = config_from_mapping({"profiles": {"default": {"fail_open": False}}}, env={})
    assert config.profile("default") is config.profiles["default"]
    assert config.profile("default").fail_open is False  # type: ignore[union-attr]
    assert config.defaults.fail_open is True


def test_default_profile_must_exist() -> None:
    message = config_error({"default_profile": "strict"})
    assert "default_profile 'strict' is not a profile" in message
    config = config_from_mapping({"default_profile": "strict", "profiles": {"strict": {}}}, env={})
    assert config.default_profile == "strict"


@pytest.mark.parametrize("name", ["has space", "x" * 65, "a/b", "ü"])
def test_profile_names_are_restricted(name: str) -> None:
    assert "profile name" in config_error({"profiles": {name: {}}})


@pytest.mark.parametrize("value", [["readonly"], "readonly", 5])
def test_profiles_must_be_a_mapping(value: object) -> None:
    assert config_error({"profiles": value}).startswith("profiles")


@pytest.mark.parametrize("value", [[], False, 0, ""])
def test_falsy_non_mapping_profiles_are_type_errors(value: object) -> None:
    assert config_error({"profiles": value}).startswith("profiles")


def test_a_profile_must_be_a_mapping() -> None:
    assert config_error({"profiles": {"p": 5}}).startswith("profiles.p")
