"""Configuration: every knob and its default, in one place.

The YAML file is validated once at start-up into :class:`SidecarConfig` and the
resulting objects are passed down; nothing else reads settings ad hoc. Unknown keys
are errors. Route profiles are written as partial overrides of ``defaults``::

    defaults:                 # a full Profile; every field has a default
      retrieval: {top_k: 5}
    profiles:
      readonly:               # merged onto defaults, then validated as a Profile
        extraction: {enabled: false}

Secrets and URIs may come from the environment (see :data:`ENV_OVERRIDES`); the
environment wins over the file so that a manifest can keep secrets out of it.

The models live in modules by concern (``server``, ``store``, ``embedding``,
``llm``, ``write``, ``retrieval``, ``request``, ``envoy``; the whole file in
``root``), the knobs that exist only to measure alternatives in ``experimental``,
reading a file in ``loading``, and the generated reference page in ``reference``.
Import from this package: every public name is re-exported here.
"""

from sidecar.config.base import Fraction, Port
from sidecar.config.embedding import EmbeddingConfig
from sidecar.config.envoy import EnvoyConfig, JwtConfig, RouteConfig
from sidecar.config.experimental import AssociativeConfig, HierarchyConfig, TieredConfig
from sidecar.config.llm import LLMConfig
from sidecar.config.loading import (
    ENV_OVERRIDES,
    SUPERVISOR_SETTINGS,
    config_from_mapping,
    format_validation_error,
    load_config,
)
from sidecar.config.request import (
    DeepSearchConfig,
    IdentityConfig,
    Profile,
    RewriteConfig,
    request_budget_ms,
)
from sidecar.config.retrieval import (
    ConversationConfig,
    CueConfig,
    HybridConfig,
    InjectionConfig,
    LinkConfig,
    RerankConfig,
    RetrievalConfig,
    StrategyName,
    TopicConfig,
)
from sidecar.config.root import SidecarConfig
from sidecar.config.server import (
    MIN_ADMIN_TOKEN_CHARS,
    AdminConfig,
    AdminToken,
    LoggingConfig,
    ServerConfig,
)
from sidecar.config.store import CacheConfig, StoreConfig
from sidecar.config.write import (
    ConsolidationConfig,
    EnrichmentConfig,
    ExtractionConfig,
    HierarchyBuildConfig,
    RetentionConfig,
    TaxonomyConfig,
    TaxonomyTopic,
    WriteQueueConfig,
)

__all__ = [
    "ENV_OVERRIDES",
    "MIN_ADMIN_TOKEN_CHARS",
    "SUPERVISOR_SETTINGS",
    "AdminConfig",
    "AdminToken",
    "AssociativeConfig",
    "CacheConfig",
    "ConsolidationConfig",
    "ConversationConfig",
    "CueConfig",
    "DeepSearchConfig",
    "EmbeddingConfig",
    "EnrichmentConfig",
    "EnvoyConfig",
    "ExtractionConfig",
    "Fraction",
    "HierarchyBuildConfig",
    "HierarchyConfig",
    "HybridConfig",
    "IdentityConfig",
    "InjectionConfig",
    "JwtConfig",
    "LLMConfig",
    "LinkConfig",
    "LoggingConfig",
    "Port",
    "Profile",
    "RerankConfig",
    "RetentionConfig",
    "RetrievalConfig",
    "RewriteConfig",
    "RouteConfig",
    "ServerConfig",
    "SidecarConfig",
    "StoreConfig",
    "StrategyName",
    "TaxonomyConfig",
    "TaxonomyTopic",
    "TieredConfig",
    "TopicConfig",
    "WriteQueueConfig",
    "config_from_mapping",
    "format_validation_error",
    "load_config",
    "request_budget_ms",
]
