"""Environment overrides and secrets: the variables that win over the file, and secrets
hidden in every repr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import SecretStr

from sidecar.config import (
    ENV_OVERRIDES,
    SidecarConfig,
    config_from_mapping,
    load_config,
)
from tests.config.support import write


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
