"""Validation: unknown keys, types and ranges named by their dotted path, every problem
reported, header names, YAML switches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.config import (
    Profile,
    config_from_mapping,
    load_config,
)
from sidecar.errors import ConfigError
from tests.config.support import config_error, write


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
    assert any(line.startswith(f"{path}: unknown key") for line in message.splitlines())


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"server": {"prot": 1}}, "server.prot: unknown key (did you mean 'port'?)"),
        (
            {"defaults": {"retrieval": {"treshold": 0.2}}},
            "defaults.retrieval.treshold: unknown key (did you mean 'threshold'?)",
        ),
        (
            {"profiles": {"ro": {"injection": {"max_tokns": 300}}}},
            "profiles.ro.injection.max_tokns: unknown key (did you mean 'max_tokens'?)",
        ),
        (
            {"admin": {"tokens": [{"token": "t" * 16, "user": ["a"]}]}},
            "admin.tokens.0.user: unknown key (did you mean 'users'?)",
        ),
        (
            {"envoy": {"routes": [{"prefix": "/", "profle": "x"}]}},
            "envoy.routes.0.profle: unknown key (did you mean 'profile'?)",
        ),
        (
            {"retrieval": {"top_k": 3}},
            "retrieval: unknown key here: retrieval is per route, put it under defaults: "
            "(or a profile)",
        ),
        ({"zzz": 1}, "zzz: unknown key"),
    ],
)
def test_an_unknown_key_says_what_was_meant(data: Any, line: str) -> None:
    assert line in config_error(data).splitlines()


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
