"""``sidecar config check`` and ``sidecar config reference``: exit codes, one error
per line with its path, secrets hidden; the new store / admin / envoy settings."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from sidecar.cli import main
from sidecar.config import config_from_mapping
from sidecar.errors import ConfigError

SECRETS = {
    "admin-token": "admin-token-0123456789",
    "scoped-token": "scoped-token-0123456789",
    "milvus-token": "root:Milvus-secret",
    "llm-key": "sk-live-abcdef",
    "uri-password": "pw-in-the-uri",
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sidecar.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_check_prints_the_effective_config_with_secrets_hidden(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        f"""
        admin:
          token: {SECRETS["admin-token"]}
          tokens: [{{token: {SECRETS["scoped-token"]}, users: ["tenant-a-*"], name: tenant-a}}]
        store: {{uri: "https://svc:{SECRETS["uri-password"]}@milvus:19530"}}
        llm: {{base_url: "http://llm:8000/v1"}}
        """,
    )
    monkeypatch.setenv("MILVUS_TOKEN", SECRETS["milvus-token"])
    monkeypatch.setenv("SIDECAR_LLM_API_KEY", SECRETS["llm-key"])
    assert main(["config", "check", str(path)]) == 0
    captured = capsys.readouterr()
    for secret in SECRETS.values():
        assert secret not in captured.out
        assert secret not in captured.err
    printed = json.loads(captured.out)
    assert printed["admin"]["token"] == "**********"
    assert printed["admin"]["tokens"] == [
        {"token": "**********", "users": ["tenant-a-*"], "share_groups": [], "name": "tenant-a"}
    ]
    assert printed["store"]["token"] == "**********"
    assert printed["store"]["uri"] == "https://svc:**********@milvus:19530"
    assert printed["llm"]["api_key"] == "**********"
    assert printed["defaults"]["retrieval"]["top_k"] == 5  # every default is printed
    # ... but not the supervisor's settings, which a file cannot set.
    assert not {"gate_dir", "lite_file"} & set(printed["store"])
    assert "service_socket" not in printed["embedding"]
    assert not {"relay_socket", "relay_peers"} & set(printed["cache"])


def test_check_exits_2_with_every_error_on_its_own_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        """
        server: {port: 70000, bogus: 1}
        store: {index: HNSW}
        envoy: {upstream_ca_file: ""}
        admin: {token: short}
        defaults: {retrieval: {top_k: 0}}
        """,
    )
    assert main(["config", "check", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert lines[0] == "invalid configuration:"
    paths = sorted(line.split(":", 1)[0] for line in lines[1:])
    assert paths == [
        "admin.token",
        "defaults.retrieval.top_k",
        "envoy.upstream_ca_file",
        "server.bogus",
        "server.port",
        "store",
    ], lines
    assert any("HNSW needs a Milvus server" in line for line in lines)
    assert any("at least 16 characters" in line for line in lines)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("server: [1, 2]\n", "server: Input should be a valid dictionary"),
        ("- a\n", "the top level must be a mapping"),
        ("a: [\n", "invalid YAML"),
    ],
)
def test_check_rejects_bad_documents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    assert main(["config", "check", str(write(tmp_path, text))]) == 2
    assert message in capsys.readouterr().err


def test_check_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(tmp_path / "absent.yaml")]) == 2
    assert "cannot read config" in capsys.readouterr().err


def test_reference_command_prints_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "reference"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Configuration reference")
    assert "| `store.partition_key` | boolean | `false` |" in out
    assert "| `SIDECAR_ADMIN_TOKEN` | `admin.token` |" in out


# -- the settings this issue added ------------------------------------------------------


def test_server_only_store_features_need_a_server_uri() -> None:
    for store in ({"partition_key": True}, {"index": "HNSW"}):
        with pytest.raises(ConfigError, match="needs a Milvus server URI"):
            config_from_mapping({"store": store}, env={})
    config = config_from_mapping(
        {"store": {"uri": "http://milvus:19530", "partition_key": True, "index": "HNSW"}},
        env={},
    )
    assert config.store.partition_key
    assert config.store.index == "HNSW"
    # The environment decides the URI: a server URI from MILVUS_URI makes it valid.
    env = {"MILVUS_URI": "http://milvus:19530"}
    assert config_from_mapping({"store": {"partition_key": True}}, env=env).store.partition_key


def test_admin_tokens() -> None:
    config = config_from_mapping(
        {"admin": {"tokens": [{"token": "t" * 16, "users": ["a", "b-*"]}, {"token": "u" * 16}]}},
        env={},
    )
    assert config.admin.api_enabled
    assert config.admin.tokens[0].users == ("a", "b-*")
    assert config.admin.tokens[1].users == "*"
    assert not config_from_mapping({}, env={}).admin.api_enabled
    env_token = config_from_mapping({}, env={"SIDECAR_ADMIN_TOKEN": "e" * 20}).admin
    assert env_token.api_enabled
    with pytest.raises(ConfigError, match=r"admin\.tokens\.0\.token"):
        config_from_mapping({"admin": {"tokens": [{"token": "short"}]}}, env={})
    with pytest.raises(ConfigError, match=r"admin\.tokens\.0\.users"):
        config_from_mapping({"admin": {"tokens": [{"token": "t" * 16, "users": "all"}]}}, env={})
