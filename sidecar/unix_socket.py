"""Unix socket servers between a host's sidecar processes (the shared encoder, the
cache relay)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

#: What a Unix socket server calls for each connection.
UnixHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def start_unix_server(handler: UnixHandler, path: str) -> asyncio.Server:
    """Serve ``handler`` on a Unix socket at ``path``, replacing a socket file left
    there by a process that was killed."""
    _remove_stale_socket(path)
    return await asyncio.start_unix_server(handler, path=path)


def _remove_stale_socket(path: str) -> None:
    Path(path).unlink(missing_ok=True)
