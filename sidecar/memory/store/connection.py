"""Opening a pymilvus client for the configured URI: a milvus-lite file (its
directory made first) or a Milvus server, retried until ``store.timeout_s`` while
the server is not reachable yet.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from sidecar.config import StoreConfig
from sidecar.errors import StoreError

log = logging.getLogger(__name__)

#: First pause before connecting again (doubling to 1 s).
_CONNECT_RETRY_S = 0.1


def connect(config: StoreConfig) -> Any:
    from pymilvus import MilvusClient
    from pymilvus.exceptions import MilvusException

    kwargs: dict[str, Any] = {"uri": config.uri, "timeout": config.timeout_s}
    if config.is_local_file:
        Path(config.uri).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
    if config.token is not None:
        kwargs["token"] = config.token.get_secret_value()
    if config.db_name:
        kwargs["db_name"] = config.db_name
    # An embedded milvus-lite server is given 0.5 s to start before its socket is
    # used, and a missing socket fails at once whatever the timeout: on a busy host
    # that failed start-ups. Connection failures are retried until ``timeout_s``.
    deadline = time.monotonic() + config.timeout_s
    pause = _CONNECT_RETRY_S
    while True:
        try:
            return MilvusClient(**kwargs)
        except MilvusException as exc:
            retry = "connect" in str(exc.message).lower()
            if not retry or time.monotonic() + pause > deadline:
                raise StoreError(
                    f"cannot connect to the store at {config.uri}: {exc.message}"
                ) from exc
            log.info("store not reachable yet; retrying in %.1f s", pause)
            time.sleep(pause)
            pause = min(1.0, pause * 2)
        except (OSError, RuntimeError, ValueError) as exc:
            raise StoreError(f"cannot open the store at {config.uri}: {exc}") from exc
