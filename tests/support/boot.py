"""An in-process sidecar for tests: its configuration (every file in one temporary
directory, listeners on free ports) and the running server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sidecar.config import SidecarConfig, config_from_mapping
from sidecar.memory.embedding.protocol import Embedder
from sidecar.runtime.components import Components
from sidecar.runtime.server import Sidecar


def sidecar_config(tmp: Path, **sections: Mapping[str, Any]) -> SidecarConfig:
    """A sidecar whose files live in ``tmp``: the gRPC listener on a free port, the
    admin listener off, the store (milvus-lite) and the turn journal in ``tmp``, the
    environment ignored. ``sections`` are merged over those section by section:
    ``store={"max_content_chars": 100}`` keeps the store in ``tmp``,
    ``admin={"enabled": True, "port": 0}`` turns the admin listener on."""
    document: dict[str, dict[str, Any]] = {
        "server": {"port": 0},
        "admin": {"enabled": False},
        "store": {"uri": str(tmp / "memory.db")},
        "write_queue": {"journal_path": str(tmp / "journal.sqlite3")},
    }
    for name, settings in sections.items():
        document[name] = {**document.get(name, {}), **settings}
    return config_from_mapping(document, env={})


@asynccontextmanager
async def running_sidecar(config: SidecarConfig, embedder: Embedder) -> AsyncIterator[Sidecar]:
    """The sidecar of ``config`` built around ``embedder`` (a test session's model is
    built once), started, and stopped on the way out."""
    server = Sidecar(await Components.build(config, embedder=embedder))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
