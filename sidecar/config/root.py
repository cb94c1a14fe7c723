"""The whole file (:class:`SidecarConfig`): its sections, the profiles merged onto
``defaults``, and the checks that span sections (ports, budgets, routes).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from sidecar.config.base import _Model
from sidecar.config.embedding import EmbeddingConfig
from sidecar.config.envoy import EnvoyConfig
from sidecar.config.llm import LLMConfig
from sidecar.config.request import Profile, request_budget_ms
from sidecar.config.server import AdminConfig, LoggingConfig, ServerConfig
from sidecar.config.store import CacheConfig, StoreConfig
from sidecar.config.write import (
    ConsolidationConfig,
    EnrichmentConfig,
    HierarchyBuildConfig,
    RetentionConfig,
    WriteQueueConfig,
)

_PROFILE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _check_request_budget(name: str, profile: Profile | None, envoy_timeout_ms: int) -> None:
    if profile is None or profile.deep_search.mode != "on":
        return
    budget = request_budget_ms(profile)
    if budget >= envoy_timeout_ms:
        raise ValueError(
            f"profile {name!r}: deep_search.mode 'on' can hold a request for {budget} ms "
            "(rewrite + retrieval + deep_search timeout_ms), not below "
            f"envoy.message_timeout_ms {envoy_timeout_ms}: raise that or lower "
            "deep_search.timeout_ms (Envoy would give up first)"
        )


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


class SidecarConfig(_Model):
    """The whole configuration file."""

    server: ServerConfig = ServerConfig()
    admin: AdminConfig = AdminConfig()
    store: StoreConfig = StoreConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    cache: CacheConfig = CacheConfig()
    enrichment: EnrichmentConfig = EnrichmentConfig()
    hierarchy: HierarchyBuildConfig = HierarchyBuildConfig()
    llm: LLMConfig = LLMConfig()
    write_queue: WriteQueueConfig = WriteQueueConfig()
    retention: RetentionConfig = RetentionConfig()
    consolidation: ConsolidationConfig = ConsolidationConfig()
    logging: LoggingConfig = LoggingConfig()
    envoy: EnvoyConfig = EnvoyConfig()
    #: Name of the profile used when Envoy names none.
    default_profile: str = "default"
    #: The base profile; ``profiles`` entries are partial overrides of it.
    defaults: Profile = Profile()
    profiles: dict[str, Profile] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _merge_profiles(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        raw_profiles = data.get("profiles")
        if raw_profiles is None:
            raw_profiles = {}
        if not isinstance(raw_profiles, Mapping):
            return data  # let field validation report the type error
        base = data.get("defaults") or {}
        if isinstance(base, Profile):
            base = base.model_dump(by_alias=True)
        if not isinstance(base, Mapping):
            return data
        merged: dict[str, Any] = {}
        for name, override in raw_profiles.items():
            if isinstance(override, Profile):
                merged[name] = override
            elif isinstance(override, Mapping):
                merged[name] = _deep_merge(base, override)
            elif override is None:
                merged[name] = dict(base)
            else:
                merged[name] = override
        return {**data, "profiles": merged}

    @model_validator(mode="after")
    def _check_profiles(self) -> SidecarConfig:
        for name in self.profiles:
            if not _PROFILE_NAME.match(name):
                raise ValueError(f"profile name {name!r} must match {_PROFILE_NAME.pattern}")
        if self.default_profile != "default" and self.default_profile not in self.profiles:
            raise ValueError(f"default_profile {self.default_profile!r} is not a profile")
        for route in self.envoy.routes:
            if route.profile is not None and self.profile(route.profile) is None:
                raise ValueError(
                    f"envoy route {route.prefix!r} names unknown profile {route.profile!r}"
                )
        workers = self.server.workers
        if self.write_queue.own_process:
            last = self.writer_metrics_port(workers - 1)
            if last is not None and last > 65535:
                raise ValueError("admin.port + 2 * server.workers (the writers) is past 65535")
        if workers > 1:
            if self.server.port == 0:
                raise ValueError("server.workers > 1 needs a fixed server.port (0 picks any)")
            for name, port in (("server.port", self.server.port), ("admin.port", self.admin.port)):
                if port and port + workers - 1 > 65535:
                    raise ValueError(f"{name} + server.workers - 1 is past port 65535")
        encoder_port = self.encoder_metrics_port
        if encoder_port is not None and encoder_port > 65535:
            raise ValueError("admin.port + server.workers (the shared encoder) is past 65535")
        if self.envoy.buffer_limit_bytes >= self.server.max_message_bytes:
            raise ValueError("envoy.buffer_limit_bytes must be below server.max_message_bytes")
        for name in self.profile_names():
            _check_request_budget(name, self.profile(name), self.envoy.message_timeout_ms)
        return self

    @property
    def supervised(self) -> bool:
        """Whether ``serve`` runs a supervisor of several processes (several workers,
        or writers of their own) instead of one sidecar."""
        return self.server.workers > 1 or self.write_queue.own_process

    @property
    def model_processes(self) -> int:
        """Processes that embed: the workers, and their writers with ``own_process``."""
        return self.server.workers * (2 if self.write_queue.own_process else 1)

    @property
    def shares_store(self) -> bool:
        """Whether other processes write this store's rows too (several workers,
        writers of their own, or a Milvus server other replicas may use)."""
        return self.supervised or not self.store.is_local_file

    @property
    def encoder_metrics_port(self) -> int | None:
        """Where the shared encoder (``embedding.shared``) serves its ``/metrics``: the
        admin port after the workers' (``admin.port + server.workers``); None without
        a shared encoder, an admin listener or a fixed admin port."""
        if not self.embedding.shared_by(self.model_processes):
            return None
        return self._admin_port_after(self.server.workers)

    def writer_metrics_port(self, index: int) -> int | None:
        """Where writer ``index`` (``write_queue.own_process``) serves its ``/metrics``:
        ``admin.port + server.workers + 1 + index`` (after the shared encoder's); None
        without writers of their own, an admin listener or a fixed admin port."""
        if not self.write_queue.own_process:
            return None
        return self._admin_port_after(self.server.workers + 1 + index)

    def _admin_port_after(self, offset: int) -> int | None:
        if not self.admin.enabled or not self.admin.port:
            return None
        return self.admin.port + offset

    def profile(self, name: str) -> Profile | None:
        """The profile called ``name`` (``default`` is ``defaults`` unless redefined)."""
        found = self.profiles.get(name)
        if found is not None:
            return found
        return self.defaults if name == "default" else None

    def profile_names(self) -> list[str]:
        return sorted({"default", *self.profiles})

    @property
    def explains_injections(self) -> bool:
        """Whether some profile keeps its injections explained (``explain_last``)."""
        return any(
            profile is not None and profile.injection.explain_last > 0
            for profile in map(self.profile, self.profile_names())
        )
