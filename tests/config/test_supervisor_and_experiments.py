"""Settings only the supervisor sets are errors in a user's file; experimental settings
keep their keys and validation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.config import (
    SUPERVISOR_SETTINGS,
    SidecarConfig,
    config_from_mapping,
    load_config,
)
from sidecar.errors import ConfigError
from tests.config.support import config_error, write

SUPERVISOR_VALUES = {
    "store.gate_dir": "/run/gates",
    "store.lite_file": "/data/memory.db",
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
    assert worker.store.lite_path == (tmp_path / "m.db").resolve()  # a forget rewrites it
    assert worker.cache.relay_socket == str(tmp_path / "relay-1.sock")
    assert worker.cache.relay_peers == [str(tmp_path / "relay-0.sock")]
    encoder = worker.embedding.model_copy(update={"service_socket": "/run/encoder.sock"})
    assert encoder.service_socket == "/run/encoder.sock"


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
        ({"server": {"gc_freeze_intervals": 1}}, "server.gc_freeze_intervals: unknown key"),
        (
            {"defaults": {"retrieval": {"associative": {"bogus": 1}}}},
            "defaults.retrieval.associative.bogus: unknown key",
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
