"""Tests for configuration loading and validation (sidecar.config)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from sidecar.config import (
    ENV_OVERRIDES,
    SUPERVISOR_SETTINGS,
    Profile,
    SidecarConfig,
    config_from_mapping,
    load_config,
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


# -- defaults -------------------------------------------------------------------------


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


# -- profiles -------------------------------------------------------------------------


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


# -- unknown keys -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"servr": {}}, "servr"),
        ({"server": {"prot": 1}}, "server.prot"),
        ({"defaults": {"retrieval": {"topk": 1}}}, "defaults.retrieval.topk"),
        (
            {"profiles": {"readonly": {"retrieval": {"top_kk": 1}}}},
            "profiles.readonly.retrieval.top_kk",
        ),
        ({"profiles": {"readonly": {"nope": True}}}, "profiles.readonly.nope"),
        ({"envoy": {"routes": [{"prefix": "/", "profle": "x"}]}}, "envoy.routes.0.profle"),
        ({"logging": {"json_format": True}}, "logging.json_format"),
    ],
)
def test_unknown_keys_are_errors_naming_the_dotted_path(data: Any, path: str) -> None:
    message = config_error(data)
    assert f"{path}: Extra inputs are not permitted" in message.splitlines()


def test_unknown_key_in_a_file_names_the_dotted_path(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        profiles:
          readonly:
            retrieval:
              top_kk: 3
        """,
    )
    with pytest.raises(ConfigError, match=r"profiles\.readonly\.retrieval\.top_kk"):
        load_config(path, env={})


def test_every_problem_is_reported_one_per_line() -> None:
    message = config_error({"server": {"port": -1, "bogus": 1}, "store": {"workers": 0}})
    lines = message.splitlines()
    assert len(lines) == 3
    assert {line.split(":")[0] for line in lines} == {
        "server.port",
        "server.bogus",
        "store.workers",
    }


# -- types and ranges ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"server": {"port": 70000}}, "server.port"),
        ({"server": {"port": -1}}, "server.port"),
        ({"server": {"port": "http"}}, "server.port"),
        ({"server": {"max_message_bytes": 1000}}, "server.max_message_bytes"),
        ({"admin": {"port": 65536}}, "admin.port"),
        ({"store": {"workers": 0}}, "store.workers"),
        ({"store": {"workers": 65}}, "store.workers"),
        ({"store": {"timeout_s": 0}}, "store.timeout_s"),
        ({"store": {"collection": "1bad"}}, "store.collection"),
        ({"store": {"collection": "has-dash"}}, "store.collection"),
        ({"store": {"max_content_chars": 8}}, "store.max_content_chars"),
        ({"llm": {"temperature": 3}}, "llm.temperature"),
        ({"llm": {"timeout_s": 0}}, "llm.timeout_s"),
        ({"llm": {"max_tokens": 1}}, "llm.max_tokens"),
        ({"logging": {"level": "TRACE"}}, "logging.level"),
        ({"write_queue": {"max_pending": 0}}, "write_queue.max_pending"),
        ({"write_queue": {"journal_path": ":memory:"}}, "write_queue.journal_path"),
        ({"write_queue": {"journal_path": " "}}, "write_queue.journal_path"),
        ({"write_queue": {"journal_sync": "off"}}, "write_queue.journal_sync"),
        ({"write_queue": {"max_attempts": 0}}, "write_queue.max_attempts"),
        ({"write_queue": {"retry_base_s": 2, "retry_max_s": 1}}, "write_queue"),
        ({"write_queue": {"retry_jitter": 1.5}}, "write_queue.retry_jitter"),
        ({"defaults": {"retrieval": {"top_k": 0}}}, "defaults.retrieval.top_k"),
        ({"defaults": {"retrieval": {"top_k": 101}}}, "defaults.retrieval.top_k"),
        ({"defaults": {"retrieval": {"top_k": "five"}}}, "defaults.retrieval.top_k"),
        ({"defaults": {"retrieval": {"threshold": 1.5}}}, "defaults.retrieval.threshold"),
        (
            {"defaults": {"retrieval": {"strategy": "no-such-strategy"}}},
            "defaults.retrieval.strategy",
        ),
        ({"defaults": {"injection": {"mode": "replace"}}}, "defaults.injection.mode"),
        ({"defaults": {"injection": {"max_tokens": 24}}}, "defaults.injection.max_tokens"),
        (
            {"defaults": {"extraction": {"duplicate_threshold": 0.4}}},
            "defaults.extraction.duplicate_threshold",
        ),
        ({"defaults": {"identity": {"max_groups": 257}}}, "defaults.identity.max_groups"),
        ({"defaults": {"paths": ["v1/chat"]}}, "defaults.paths"),
        ({"defaults": {"max_response_bytes": 10}}, "defaults.max_response_bytes"),
        ({"profiles": {"p": {"retrieval": {"top_k": -3}}}}, "profiles.p.retrieval.top_k"),
        ({"envoy": {"routes": [{"prefix": "api"}]}}, "envoy.routes.0.prefix"),
        ({"envoy": {"routes": [{"prefix": "/", "rewrite": "x"}]}}, "envoy.routes.0.rewrite"),
        ({"envoy": {"message_timeout_ms": 5}}, "envoy.message_timeout_ms"),
        ({"envoy": {"listen_port": 1e6}}, "envoy.listen_port"),
    ],
)
def test_bad_types_and_ranges_name_the_field(data: Any, path: str) -> None:
    message = config_error(data)
    assert any(line.startswith(f"{path}:") for line in message.splitlines()), message


def test_envoy_buffer_must_be_below_the_grpc_message_limit() -> None:
    message = config_error(
        {"server": {"max_message_bytes": 2 * 1024 * 1024}, "envoy": {"buffer_limit_bytes": 2**21}}
    )
    assert "buffer_limit_bytes must be below server.max_message_bytes" in message


# -- header names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"server": {"profile_metadata_key": "x profile"}}, "server.profile_metadata_key"),
        ({"server": {"profile_metadata_key": ""}}, "server.profile_metadata_key"),
        ({"defaults": {"identity": {"user_header": "x-user:id"}}}, "defaults.identity.user_header"),
        ({"defaults": {"identity": {"user_header": ""}}}, "defaults.identity.user_header"),
        (
            {"defaults": {"identity": {"groups_header": "x-grüppe"}}},
            "defaults.identity.groups_header",
        ),
        (
            {"defaults": {"identity": {"session_header": "x\nsession"}}},
            "defaults.identity.session_header",
        ),
        (
            {"profiles": {"p": {"injection": {"response_header": "x(mem)"}}}},
            "profiles.p.injection.response_header",
        ),
    ],
)
def test_invalid_header_names_are_rejected(data: Any, path: str) -> None:
    message = config_error(data)
    assert any(
        line.startswith(f"{path}:") and "not a valid HTTP header name" in line
        for line in message.splitlines()
    ), message


def test_header_names_are_lowercased_and_stripped() -> None:
    config = config_from_mapping(
        {
            "server": {"profile_metadata_key": "X-Memory-Profile"},
            "defaults": {
                "identity": {"user_header": " X-Auth-User ", "groups_header": "X-Groups"},
                "injection": {"response_header": "X-Mem"},
            },
        },
        env={},
    )
    assert config.server.profile_metadata_key == "x-memory-profile"
    assert config.defaults.identity.user_header == "x-auth-user"
    assert config.defaults.identity.groups_header == "x-groups"
    assert config.defaults.injection.response_header == "x-mem"


def test_empty_response_header_disables_it() -> None:
    config = config_from_mapping({"defaults": {"injection": {"response_header": ""}}}, env={})
    assert config.defaults.injection.response_header == ""


# -- environment overrides ------------------------------------------------------------------


def test_env_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        store: {uri: ./file.db, token: file-token, collection: mine}
        llm: {base_url: "http://file:1/v1", api_key: file-key, model: file-model}
        admin: {token: file-admin-token-0123}
        """,
    )
    env = {
        "MILVUS_URI": "http://milvus:19530",
        "MILVUS_TOKEN": "root:Milvus",
        "SIDECAR_LLM_BASE_URL": "http://env-llm:8000/v1",
        "SIDECAR_LLM_API_KEY": "sk-env",
        "SIDECAR_LLM_MODEL": "env-model",
        "SIDECAR_ADMIN_TOKEN": "env-admin-token-0123",
    }
    config = load_config(path, env=env)
    assert config.store.uri == "http://milvus:19530"
    assert config.store.token is not None
    assert config.store.token.get_secret_value() == "root:Milvus"
    assert config.store.collection == "mine"  # untouched by the environment
    assert config.llm.base_url == "http://env-llm:8000/v1"
    assert config.llm.api_key.get_secret_value() == "sk-env"
    assert config.llm.model == "env-model"
    assert config.admin.token is not None
    assert config.admin.token.get_secret_value() == "env-admin-token-0123"


def test_every_documented_env_variable_is_applied() -> None:
    env = {var: f"value-{index}-0123456789" for index, var in enumerate(ENV_OVERRIDES)}
    env["SIDECAR_LLM_BASE_URL"] = "http://x/v1"
    config = config_from_mapping({}, env=env)
    for var, dotted in ENV_OVERRIDES.items():
        node: Any = config
        for part in dotted.split("."):
            node = getattr(node, part)
        if isinstance(node, SecretStr):
            node = node.get_secret_value()
        assert node == env[var], dotted


def test_env_overrides_apply_without_a_file() -> None:
    config = load_config(None, env={"MILVUS_URI": "http://m:19530"})
    assert config.store.uri == "http://m:19530"


def test_empty_env_values_are_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, "store: {uri: ./file.db}\n")
    config = load_config(path, env={"MILVUS_URI": "", "SIDECAR_LLM_BASE_URL": ""})
    assert config.store.uri == "./file.db"
    assert config.llm.base_url is None


def test_unrelated_env_variables_are_ignored() -> None:
    config = config_from_mapping({}, env={"SIDECAR_SERVER_PORT": "1", "HOME": "/root"})
    assert config == SidecarConfig()


def test_env_override_does_not_mutate_the_input() -> None:
    data: dict[str, Any] = {"store": {"uri": "./a.db"}}
    config_from_mapping(data, env={"MILVUS_URI": "./b.db"})
    assert data == {"store": {"uri": "./a.db"}}


def test_env_override_when_the_section_is_null() -> None:
    config = config_from_mapping({"llm": None}, env={"SIDECAR_LLM_MODEL": "m"})
    assert config.llm.model == "m"


# -- secrets ----------------------------------------------------------------------------------


def test_secrets_are_secretstr_and_hidden_in_repr() -> None:
    config = config_from_mapping(
        {
            "store": {"token": "milvus-secret"},
            "llm": {"api_key": "sk-llm-secret"},
            "admin": {"token": "admin-secret-0123456789"},
        },
        env={},
    )
    assert isinstance(config.store.token, SecretStr)
    assert isinstance(config.llm.api_key, SecretStr)
    assert isinstance(config.admin.token, SecretStr)
    for text in (repr(config), str(config), repr(config.llm), str(config.model_dump())):
        for secret in ("milvus-secret", "sk-llm-secret", "admin-secret"):
            assert secret not in text
    assert config.llm.api_key.get_secret_value() == "sk-llm-secret"


def test_secrets_from_env_are_hidden_in_repr() -> None:
    config = config_from_mapping({}, env={"SIDECAR_LLM_API_KEY": "sk-from-env"})
    assert "sk-from-env" not in repr(config)
    assert config.llm.api_key.get_secret_value() == "sk-from-env"


def test_default_llm_api_key_is_a_placeholder() -> None:
    assert SidecarConfig().llm.api_key.get_secret_value() == "none"


# -- envoy routes -----------------------------------------------------------------------------


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


# -- the file itself ---------------------------------------------------------------------------


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


def test_profile_model_defaults_match_the_documentation() -> None:
    profile = Profile()
    assert profile.fail_open is True
    assert profile.identity.allow_body_user is False
    assert profile.identity.user_header == "x-user-id"
    assert profile.identity.groups_header == "x-user-groups"
    assert profile.injection.response_header == "x-memory-injected"
    assert profile.extraction.use_llm is True


@pytest.mark.parametrize(
    ("document", "read"),
    [
        ("embedding:\n  shared: on\n", lambda c: c.embedding.shared == "on"),
        ("embedding:\n  shared: off\n", lambda c: c.embedding.shared == "off"),
        (
            "envoy:\n  message_timeout_ms: 20000\ndefaults:\n  deep_search:\n    mode: on\n",
            lambda c: c.defaults.deep_search.mode == "on",
        ),
        (
            "defaults:\n  deep_search:\n    mode: off\n",
            lambda c: c.defaults.deep_search.mode == "off",
        ),
    ],
)
def test_unquoted_yaml_on_and_off_switches_mean_what_they_say(document: str, read: Any) -> None:
    assert read(config_from_mapping(yaml.safe_load(document), env={}))  # YAML 1.1: on is true


# -- settings of the supervisor ---------------------------------------------------------

SUPERVISOR_VALUES = {
    "store.gate_dir": "/run/gates",
    "embedding.service_socket": "/run/encoder.sock",
    "cache.relay_socket": "/run/relay-0.sock",
    "cache.relay_peers": ["/run/relay-1.sock"],
}


def test_supervisor_settings_are_all_known() -> None:
    assert set(SUPERVISOR_SETTINGS) == set(SUPERVISOR_VALUES)


@pytest.mark.parametrize(("dotted", "value"), sorted(SUPERVISOR_VALUES.items()))
def test_a_file_setting_a_supervisor_setting_is_an_error(
    tmp_path: Path, dotted: str, value: Any
) -> None:
    section, key = dotted.split(".")
    path = write(tmp_path, yaml.safe_dump({section: {key: value}}))
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert str(info.value) == f"{dotted}: is set by the supervisor, not read from the config file"


def test_supervisor_settings_are_reported_with_the_other_errors() -> None:
    message = config_error({"cache": {"relay_socket": "/run/r.sock", "ttl_s": 0}})
    assert message.splitlines() == [
        "cache.relay_socket: is set by the supervisor, not read from the config file",
        "cache.ttl_s: Input should be greater than 0",
    ]


def test_supervisor_settings_at_their_defaults_are_accepted() -> None:
    """What ``model_dump`` writes for them (empty) is no setting: a dumped config loads."""
    dumped = SidecarConfig().model_dump(by_alias=True)
    assert dumped["cache"]["relay_peers"] == []
    assert config_from_mapping(dumped, env={}) == SidecarConfig()


def test_the_supervisor_still_sets_them_on_its_workers(tmp_path: Path) -> None:
    from sidecar.runtime.workers import worker_config

    base = config_from_mapping(
        {"server": {"workers": 2}, "store": {"uri": str(tmp_path / "m.db")}}, env={}
    )
    worker = worker_config(base, 1, "unix:/run/store.sock", str(tmp_path))
    assert worker.store.gate_dir == str(base.store.gate_path)
    assert worker.cache.relay_socket == str(tmp_path / "relay-1.sock")
    assert worker.cache.relay_peers == [str(tmp_path / "relay-0.sock")]
    encoder = worker.embedding.model_copy(update={"service_socket": "/run/encoder.sock"})
    assert encoder.service_socket == "/run/encoder.sock"


# -- experimental settings -------------------------------------------------------------


def test_experimental_settings_keep_their_keys(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        server: {gc_freeze_interval_s: 1, gc_thaw_interval_s: 0}
        embedding: {batch_wait_ms: 2}
        hierarchy: {embedding: summary}
        llm: {transport: httpx}
        defaults:
          retrieval:
            hybrid: {fusion: rrf, rrf_k: 10, ngram_weight: 0.1, ngram_pool: 8}
            associative: {enabled: true, hop_limit: 2}
            hierarchy: {max_rounds: 9}
            tiered: {min_avg_score: 0.4}
          rewrite: {search: both}
        """,
    )
    config = load_config(path, env={})
    assert (config.server.gc_freeze_interval_s, config.server.gc_thaw_interval_s) == (1, 0)
    assert config.embedding.batch_wait_ms == 2
    assert config.hierarchy.embedding == "summary"
    assert config.llm.transport == "httpx"
    retrieval = config.defaults.retrieval
    assert (retrieval.hybrid.fusion, retrieval.hybrid.rrf_k) == ("rrf", 10)
    assert (retrieval.hybrid.ngram_weight, retrieval.hybrid.ngram_pool) == (0.1, 8)
    assert retrieval.associative.enabled
    assert retrieval.associative.hop_limit == 2
    assert retrieval.hierarchy.max_rounds == 9
    assert retrieval.tiered.min_avg_score == 0.4
    assert config.defaults.rewrite.search == "both"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"server": {"gc_freeze_intervals": 1}}, "server.gc_freeze_intervals: Extra inputs"),
        (
            {"defaults": {"retrieval": {"associative": {"bogus": 1}}}},
            "defaults.retrieval.associative.bogus: Extra inputs",
        ),
        (
            {"defaults": {"retrieval": {"hybrid": {"fusion": "max"}}}},
            "defaults.retrieval.hybrid.fusion: Input should be 'weighted' or 'rrf'",
        ),
        (
            {"defaults": {"retrieval": {"hybrid": {"dense_weight": 0, "bm25_weight": 0}}}},
            "at least one hybrid weight must be positive",
        ),
    ],
)
def test_experimental_settings_are_validated_as_before(data: Any, message: str) -> None:
    assert message in config_error(data)
